#!/usr/bin/env bash
# Usage: scripts/leftovers.sh RUN_ID RUN_TMPDIR
# Fails (exit 1) when a process of this project (`svc`, `svc-fake-*`,
# `svc-loadgen`) started by the test run RUN_ID (it has SVC_TEST_RUN=RUN_ID
# in its environment) is still alive, or when the run's temporary directory
# RUN_TMPDIR still holds anything a test left (pytest keeps its last
# `pytest-of-*` base directories on purpose: those are not counted).
# scripts/test.sh gives each step a folder `phase-NAME` there: what is
# inside one is counted (and printed with what it holds, so a report says
# which step left what), the folder itself is not.
# Watchdogs end their processes just after the test binaries exit, so both
# are given up to 10 seconds to go.
set -uo pipefail
run="$1"
tmp="$2"

alive() {
    local p exe
    for p in /proc/[0-9]*; do
        exe="$(readlink "$p/exe" 2>/dev/null)" || continue
        case "$(basename "$exe")" in
            svc | svc-fake-* | svc-loadgen) ;;
            *) continue ;;
        esac
        if tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SVC_TEST_RUN=$run"; then
            echo "${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)"
        fi
    done
}

left() {
    find "$tmp" -mindepth 1 -maxdepth 1 ! -name 'pytest-of-*' ! -name 'phase-*' 2>/dev/null
    find "$tmp" -mindepth 2 -maxdepth 2 -path "$tmp/phase-*/*" ! -name 'pytest-of-*' 2>/dev/null
}

for _ in $(seq 100); do
    [[ -z "$(alive)" && -z "$(left)" ]] && exit 0
    sleep 0.1
done
status=0
if [[ -n "$(alive)" ]]; then
    echo "leftovers: processes started by the tests are still running:" >&2
    alive >&2
    status=1
fi
if [[ -n "$(left)" ]]; then
    echo "leftovers: the tests left these in their temporary directory $tmp:" >&2
    left >&2
    echo "leftovers: what they hold (type, modified, path):" >&2
    left | while read -r path; do
        find "$path" -maxdepth 3 -printf '%y %TY-%Tm-%Td %TT %p\n' 2>/dev/null | head -20
    done >&2
    status=1
fi
exit "$status"

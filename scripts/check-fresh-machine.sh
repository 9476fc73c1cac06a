#!/usr/bin/env bash
# Checks the README's two commands (scripts/serve.sh, scripts/test.sh) and
# scripts/setup.sh against a fresh machine of this project's kind, which
# lacks cmake, clang, libclang, chromium and tmux:
#
# 1. what setup.sh takes as given is on such a machine
#    (scripts/fresh-machine.txt) and what it installs is not;
# 2. the gateway-only build depends on no C++ toolchain (cargo tree);
# 3. in a mount namespace where those five are hidden (an empty file or
#    directory mounted over each), setup.sh finds every one missing and, in
#    a dry run, names the exact apt-get command with all of them; as a
#    non-root user it prints that command and exits 1, and serve.sh stops
#    there without building; the gateway build (serve.sh --gateway) asks
#    for nothing.
#
#   scripts/check-fresh-machine.sh                  the checks above (seconds)
#   scripts/check-fresh-machine.sh --gateway-build  also builds svc without the
#       embedded engine (release, into CARGO_TARGET_DIR) in that namespace, timed
#   SVC_FRESH_SHELL='COMMAND' scripts/check-fresh-machine.sh
#       runs COMMAND (with bash) on that simulated machine instead of the checks
#
# Step 3 needs root and mount namespaces (unshare -m); without them it is
# skipped, and said so.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
    echo "check-fresh-machine: FAILED: $*" >&2
    exit 1
}

# The five packages a fresh machine lacks (issue 17), as setup.sh installs them.
expected_build="cmake clang libclang-dev"
expected_all="$expected_build chromium tmux"

if [ "${1:-}" = "--inside" ]; then
    scratch="$2"
    shift 2
    gateway_build=0
    [ "${1:-}" != "--gateway-build" ] || gateway_build=1
    # Each directory that holds something to hide gets an overlay (its
    # changes kept in memory, in this namespace only), where it is removed.
    mount -t tmpfs svc-fresh "$scratch"
    overlaid=()
    hide() {
        local path="$1" dir
        [ -e "$path" ] || [ -L "$path" ] || return 0
        dir="$(dirname "$path")"
        while [ "$dir" != / ]; do
            case " ${overlaid[*]} " in *" $dir "*) break ;; esac
            dir="$(dirname "$dir")"
        done
        if [ "$dir" = / ]; then
            dir="$(dirname "$path")"
            local layer
            layer="$scratch/${#overlaid[@]}"
            mkdir -p "$layer/upper" "$layer/work"
            mount -t overlay svc-fresh -o "lowerdir=$dir,upperdir=$layer/upper,workdir=$layer/work" "$dir"
            overlaid+=("$dir")
        fi
        rm -rf -- "$path"
    }
    # LLVM (clang and libclang), Chromium and cmake's own files, then the
    # commands of these packages wherever PATH would find them.
    for path in /usr/lib/llvm-* /usr/lib/*-linux-gnu/libclang.so* /usr/lib/*-linux-gnu/libclang-[0-9]*.so* \
        /usr/lib/chromium /usr/share/cmake-*; do
        hide "$path"
    done
    IFS=: read -r -a path_dirs <<<"$PATH"
    for dir in "${path_dirs[@]}" /usr/bin /usr/local/bin; do
        for name in cmake ctest cpack clang clang++ 'clang-[0-9]*' 'clang++-[0-9]*' chromium tmux; do
            for path in "$dir"/$name; do hide "$path"; done
        done
    done

    [ -z "${SVC_FRESH_SHELL:-}" ] || { bash -c "$SVC_FRESH_SHELL"; exit; }
    # The simulation holds.
    for name in cmake clang tmux; do
        ! command -v "$name" >/dev/null || fail "$name is still on PATH at $(command -v "$name")"
    done
    [ ! -x /usr/bin/chromium ] || fail "/usr/bin/chromium is still there"
    ! compgen -G "/usr/lib/llvm-*/lib/libclang*" >/dev/null || fail "libclang is still there"
    echo "fresh machine: cmake, clang, libclang, chromium and tmux hidden"

    unset SVC_CHROMIUM LIBCLANG_PATH
    expect_line() { # OUTPUT LINE WHAT
        grep -qxF -- "$2" <<<"$1" || fail "$3: expected the line '$2' in:
$1"
    }

    out="$(SVC_SETUP_DRY_RUN=1 bash scripts/setup.sh --test 2>&1)" || fail "setup.sh --test --dry-run: $out"
    expect_line "$out" "setup: dry run; would run: apt-get update && apt-get install -y $expected_all" "setup.sh --test"
    ! grep -q "missing and not installed" <<<"$out" || fail "setup.sh assumes what a fresh machine lacks: $out"
    out="$(bash scripts/setup.sh --build --dry-run 2>&1)" || fail "setup.sh --build --dry-run: $out"
    expect_line "$out" "setup: dry run; would run: apt-get update && apt-get install -y $expected_build" "setup.sh --build"
    echo "fresh machine: setup.sh names every missing package: apt-get install -y $expected_all"

    # A user who is not root (and can read root's toolchain, as its owner could).
    as_user() {
        setpriv --reuid=65534 --regid=65534 --clear-groups \
            --inh-caps=+dac_read_search --ambient-caps=+dac_read_search "$@"
    }
    status=0
    out="$(as_user bash scripts/setup.sh --test 2>&1)" || status=$?
    [ "$status" = 1 ] || fail "setup.sh --test as a user exited $status, not 1: $out"
    expect_line "$out" "    sudo apt-get update && sudo apt-get install -y $expected_all" "setup.sh --test as a user"
    status=0
    out="$(as_user bash scripts/serve.sh 2>&1)" || status=$?
    [ "$status" = 1 ] || fail "serve.sh as a user exited $status, not 1: $out"
    expect_line "$out" "    sudo apt-get update && sudo apt-get install -y $expected_build" "serve.sh as a user"
    ! grep -q -- "--- building" <<<"$out" || fail "serve.sh built without its packages: $out"
    status=0
    out="$(as_user bash scripts/test.sh 2>&1)" || status=$?
    [ "$status" = 1 ] || fail "test.sh as a user exited $status, not 1: $out"
    expect_line "$out" "    sudo apt-get update && sudo apt-get install -y $expected_all" "test.sh as a user"
    echo "fresh machine: as a user, setup.sh, serve.sh and test.sh print the sudo apt-get command and stop (exit 1)"

    out="$(SVC_SETUP_DRY_RUN=1 bash scripts/serve.sh --port-is-passed-through 2>&1)" || fail "serve.sh dry run: $out"
    expect_line "$out" "setup: dry run; would run: apt-get update && apt-get install -y $expected_build" "serve.sh"
    expect_line "$out" "serve: dry run; would run: cargo build --release --locked -p svc-cli --bin svc" "serve.sh"
    expect_line "$out" "serve: dry run; would run: cargo run --release --locked -q -p svc-cli --bin svc -- serve --port-is-passed-through" "serve.sh"
    out="$(SVC_SETUP_DRY_RUN=1 bash scripts/test.sh 2>&1)" || fail "test.sh dry run: $out"
    expect_line "$out" "setup: dry run; would run: apt-get update && apt-get install -y $expected_all" "test.sh"
    out="$(SVC_SETUP_DRY_RUN=1 bash scripts/serve.sh --gateway --config gw.toml 2>&1)" || fail "serve.sh --gateway dry run: $out"
    ! grep -q "apt-get" <<<"$out" || fail "the gateway build asks for packages: $out"
    expect_line "$out" "serve: dry run; would run: cargo build --release --locked -p svc-cli --bin svc --no-default-features" "serve.sh --gateway"
    echo "fresh machine: serve.sh and test.sh run setup first; serve.sh --gateway needs no package"

    if [ "$gateway_build" = 1 ]; then
        echo "fresh machine: building svc without the embedded engine (release)"
        start=$(date +%s)
        cargo build --release --locked -p svc-cli --bin svc --no-default-features
        echo "fresh machine: the gateway build took $(($(date +%s) - start)) s with cmake, clang and libclang hidden"
    fi
    exit 0
fi

gateway_build=()
[ "${1:-}" != "--gateway-build" ] || gateway_build=(--gateway-build)

# 1. The scripts against the list of what a fresh machine has.
fresh="$(grep -v '^#' scripts/fresh-machine.txt)"
packages=()
while read -r kind name; do
    case "$kind" in
        assumed) grep -qxF "$name" <<<"$fresh" || fail "setup.sh takes $name as given, which a fresh machine lacks (scripts/fresh-machine.txt)" ;;
        package)
            ! grep -qxF "$name" <<<"$fresh" || fail "setup.sh installs $name, which a fresh machine has"
            packages+=("$name")
            ;;
    esac
done < <(bash scripts/setup.sh --list)
[ "${packages[*]}" = "$expected_all" ] || fail "setup.sh manages '${packages[*]}', not '$expected_all'"
echo "fresh machine: setup.sh assumes only what scripts/fresh-machine.txt lists, and installs $expected_all"

# 2. The gateway-only build has no C++ toolchain among its dependencies.
toolchain='^(svc-engine-llama|llama-cpp-2|llama-cpp-sys-2|cmake|bindgen|clang-sys) '
tree() { cargo tree --locked -q -p svc-cli -e normal,build --prefix none "$@"; }
full="$(tree)"
gateway="$(tree --no-default-features)"
grep -qE "$toolchain" <<<"$full" || fail "cargo tree finds no llama.cpp in the full build: is the pattern stale?"
if grep -E "$toolchain" <<<"$gateway" >/dev/null; then
    fail "the gateway-only build depends on: $(grep -E "$toolchain" <<<"$gateway" | sort -u | tr '\n' ' ')"
fi
echo "fresh machine: svc-cli --no-default-features depends on no llama.cpp, cmake, bindgen or clang-sys"

# 3. The commands on a simulated fresh machine.
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
    echo "fresh machine: SKIPPED the simulated machine: it needs root and mount namespaces (unshare -m)"
    exit 0
fi
scratch="$(mktemp -d "${TMPDIR:-/tmp}/svc-fresh.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
unshare -m --propagation private bash "$0" --inside "$scratch" "${gateway_build[@]}"

#!/usr/bin/env bash
# Installs the system packages svc needs that this machine lacks, and (for
# the tests) starts PostgreSQL and Redis when they are down.
#
#   scripts/setup.sh --build     what building svc with its embedded engine needs
#                                (llama.cpp is compiled from source: cmake, clang, libclang)
#   scripts/setup.sh --test      all that and what the tests need (chromium, tmux,
#                                PostgreSQL and Redis running)
#   scripts/setup.sh --dry-run … says what it would install or start, and does nothing
#                                (also SVC_SETUP_DRY_RUN=1)
#   scripts/setup.sh --list      prints the packages it manages and the commands it
#                                takes as given (one `package NAME` / `assumed NAME` a line)
#
# Run as root, it installs the missing packages with apt-get (quietly, saying
# which). Otherwise it prints the exact command to run and exits 1. A machine
# of this project's kind has the rest already: the Rust toolchain, gcc, g++
# and make, Python 3 with pip, Node with npm, PostgreSQL and Redis (see
# scripts/fresh-machine.txt); what is missing of those is named, not installed.
# Exits 0 when nothing is missing (or, in a dry run, once it has said what it
# would do).
set -euo pipefail
cd "$(dirname "$0")/.."

build=0
test=0
dry_run="${SVC_SETUP_DRY_RUN:-0}"
[ "$dry_run" = 0 ] || dry_run=1
list=0
for arg in "$@"; do
    case "$arg" in
        --build) build=1 ;;
        --test) build=1 test=1 ;;
        --dry-run) dry_run=1 ;;
        --list) list=1 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "setup: unknown argument $arg (see --help)" >&2
            exit 2
            ;;
    esac
done
[ "$build" = 1 ] || [ "$list" = 1 ] || {
    echo "setup: say what for: --build or --test (see --help)" >&2
    exit 2
}

# Debian packages, in install order, and how each is seen to be there.
build_packages=(cmake clang libclang-dev)
test_packages=(chromium tmux)
# Commands taken as given on a machine of this kind (never installed here).
build_assumed=(cargo gcc g++ make python3)
test_assumed=(node npm pg_ctlcluster redis-server)

if [ "$list" = 1 ]; then
    printf 'package %s\n' "${build_packages[@]}" "${test_packages[@]}"
    printf 'assumed %s\n' "${build_assumed[@]}" "${test_assumed[@]}"
    exit 0
fi

# libclang as bindgen (clang-sys) finds it: libclang.so* or libclang-N.so*
# under LIBCLANG_PATH or Debian's LLVM directories (from libclang-dev, or
# libclang1-N that clang brings). Not libclang-cpp, another library.
libclang_found() {
    local dirs=(/usr/lib/llvm-*/lib)
    [ -z "${LIBCLANG_PATH:-}" ] || dirs=("$LIBCLANG_PATH")
    local dir
    for dir in "${dirs[@]}"; do
        compgen -G "$dir/libclang.so*" >/dev/null && return 0
        compgen -G "$dir/libclang-[0-9]*.so*" >/dev/null && return 0
    done
    return 1
}

installed() {
    case "$1" in
        libclang-dev) libclang_found ;;
        # The browser tests drive Debian's Chromium (or SVC_CHROMIUM).
        chromium) [ -x "${SVC_CHROMIUM:-/usr/bin/chromium}" ] ;;
        *) command -v "$1" >/dev/null 2>&1 ;;
    esac
}

wanted=("${build_packages[@]}")
assumed=("${build_assumed[@]}")
if [ "$test" = 1 ]; then
    wanted+=("${test_packages[@]}")
    assumed+=("${test_assumed[@]}")
fi

missing=()
for package in "${wanted[@]}"; do
    installed "$package" || missing+=("$package")
done

status=0
if [ ${#missing[@]} -gt 0 ]; then
    install=(apt-get install -y "${missing[@]}")
    if [ "$dry_run" = 1 ]; then
        echo "setup: missing: ${missing[*]}"
        echo "setup: dry run; would run: apt-get update && ${install[*]}"
    elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "--- installing ${missing[*]} (apt-get)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive "${install[@]}" -qq >/dev/null
        for package in "${missing[@]}"; do
            installed "$package" || {
                echo "setup: $package is still missing after apt-get install" >&2
                status=1
            }
        done
    else
        sudo=""
        [ "$(id -u)" = 0 ] || sudo="sudo "
        {
            echo "setup: svc needs these system packages, which are missing: ${missing[*]}"
            echo "setup: install them (as root), then run this again:"
            echo ""
            echo "    ${sudo}apt-get update && ${sudo}${install[*]}"
            echo ""
        } >&2
        status=1
    fi
fi

# What a machine of this kind has already; named when absent, not installed.
absent=()
for command in "${assumed[@]}"; do
    command -v "$command" >/dev/null 2>&1 || absent+=("$command")
done
if command -v python3 >/dev/null 2>&1 && ! python3 -m pip --version >/dev/null 2>&1; then
    absent+=("pip (python3 -m pip)")
fi
if [ ${#absent[@]} -gt 0 ]; then
    {
        echo "setup: these are missing and not installed by this script: ${absent[*]}"
        echo "setup: svc expects the Rust toolchain (rustup), gcc, g++, make and Python 3 with pip;"
        echo "setup: its tests also Node 20+ with npm, PostgreSQL and Redis (scripts/fresh-machine.txt)"
    } >&2
    status=1
fi

# PostgreSQL and Redis run on every machine of this kind; start them if a
# previous job stopped them.
if [ "$test" = 1 ]; then
    postgres_up() {
        if command -v pg_isready >/dev/null 2>&1; then
            pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null
        else
            (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null
        fi
    }
    redis_up() { (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; }
    if ! postgres_up; then
        if [ "$dry_run" = 1 ]; then
            echo "setup: dry run; would start PostgreSQL (pg_ctlcluster)"
        else
            echo "--- starting PostgreSQL"
            pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
        fi
    fi
    if ! redis_up; then
        if [ "$dry_run" = 1 ]; then
            echo "setup: dry run; would start Redis (redis-server)"
        else
            echo "--- starting Redis"
            redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
                --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
        fi
    fi
    if [ "$dry_run" = 0 ]; then
        for _ in $(seq 50); do
            postgres_up && redis_up && break
            sleep 0.2
        done
        postgres_up || {
            echo "setup: PostgreSQL is not answering at 127.0.0.1:5432 (the tests need database test, trust auth)" >&2
            status=1
        }
        redis_up || {
            echo "setup: Redis is not answering at 127.0.0.1:6379" >&2
            status=1
        }
    fi
fi

exit "$status"

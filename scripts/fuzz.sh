#!/usr/bin/env bash
# Fuzzes what parses untrusted input with cargo-fuzz (libFuzzer): the chat
# and Responses requests' parsing and validation, the device flow's bodies,
# the file upload's multipart/form-data parser, the audio upload's WAV reader,
# the upstream engine's event-stream decoder and chunk translator, and the embedded
# engine's chat templates, tool-call parser, think splitter and text
# assembler (targets in fuzz/fuzz_targets/, seed corpora in fuzz/corpus/).
#
#   scripts/fuzz.sh                  every target for 20 s (the test command's run)
#   scripts/fuzz.sh --long           every target for 30 minutes
#   scripts/fuzz.sh SECONDS [TARGET...]
#
# Exits non-zero when a target crashes (a panic or a broken invariant); the
# input that did it is kept in fuzz/artifacts/<target>/ and is replayed with
# `RUSTC_BOOTSTRAP=1 cargo fuzz run -s none -a <target> <file>`. What the
# runs learn beyond the seeds stays in fuzz/work/<target>/ (not committed).
#
# Needs only stable Rust: cargo-fuzz is installed when missing, and
# RUSTC_BOOTSTRAP=1 lets the flags it passes to rustc through. No sanitizer
# (`-s none`): every crate of svc forbids unsafe code, so a memory error
# would be in a dependency, and AddressSanitizer would halve the runs.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=20
if [ "${1:-}" = "--long" ]; then
  seconds=1800
  shift
elif [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "--- installing cargo-fuzz"
  cargo install cargo-fuzz --locked --version 0.13.2
fi
export RUSTC_BOOTSTRAP=1
flags=(-s none -a)

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi

echo "--- cargo fuzz build"
cargo fuzz build "${flags[@]}"

failed=()
for target in "${targets[@]}"; do
  echo "--- fuzzing $target for ${seconds}s"
  work="fuzz/work/$target"
  mkdir -p "$work"
  # New inputs go to the first directory; the committed seeds stay as they are.
  if ! cargo fuzz run "${flags[@]}" "$target" "$work" "fuzz/corpus/$target" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1; then
    failed+=("$target")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found crashes in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi

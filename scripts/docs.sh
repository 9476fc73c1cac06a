#!/usr/bin/env bash
# Builds the manual (docs/, an mdBook) into target/book and checks every
# link of it, of the README, of BENCHMARKS.md and its log (bench/LOG.md) and
# of the crates' READMEs: each page, file and heading a link names must
# exist (scripts/check-links.py; links off this repository are not
# followed). Also checks that BENCHMARKS.md's results table and
# bench/charts/*.svg are what bench/results/*.json give
# (`python3 bench/charts.py --check`; `python3 bench/charts.py` redraws them).
# The configuration reference (docs/src/configuration-reference.md)
# is generated from the configuration's types; the test command checks it
# (`cargo test -p svc-cli --test config_reference`).
# Installs mdbook with cargo (once) when it is missing. Part of the test
# command; `mdbook serve docs` shows the book while editing.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.5.4
if [ "$(mdbook --version 2>/dev/null || true)" != "mdbook v$version" ]; then
  echo "docs: installing mdbook $version with cargo (about 3 minutes, once)"
  cargo install mdbook --locked --quiet --version "$version" --no-default-features --features search
fi
mdbook build docs
python3 scripts/check-links.py README.md docs/src/*.md BENCHMARKS.md bench/LOG.md crates/*/README.md deploy/kubernetes/README.md
python3 bench/charts.py --check

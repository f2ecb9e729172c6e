#!/usr/bin/env bash
# The whole test suite from a fresh clone: installs what is missing, builds, then runs every
# suite (fast, slow, sim) in the plain build and the fast suite again under AddressSanitizer
# and UndefinedBehaviorSanitizer. The gpu suite runs only on a machine with an NVIDIA GPU
# (tests/gpu/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh --asan
export PATH="$PWD/.venv/bin:$PATH"

meson test -C build --setup full --print-errorlogs
meson test -C build-asan --print-errorlogs
echo "run-tests: all suites passed (plain: fast, slow, sim; sanitizers: fast)"

#!/usr/bin/env bash
# The whole test suite from a fresh clone: installs what is missing, builds, then runs every
# suite (fast, slow, sim) in the plain build (build/), every suite again under
# AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/, leaks included), and the
# valgrind memcheck pass (build-vg/, tests/valgrind: the fast suite's programs and a few
# deftsim commands under memcheck). The gpu suite runs only on a machine with an NVIDIA GPU
# (tests/gpu/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh --asan --valgrind
export PATH="$PWD/.venv/bin:$PATH"

meson test -C build --setup full --print-errorlogs
meson test -C build-asan --setup full --print-errorlogs
meson test -C build-vg --setup full --suite valgrind --print-errorlogs
echo "run-tests: all suites passed (plain: fast, slow, sim; sanitizers: fast, slow, sim; valgrind: memcheck)"

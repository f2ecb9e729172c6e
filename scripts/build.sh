#!/usr/bin/env bash
# Configures and builds deftsim into build/ (and, with --asan, the sanitizer build into
# build-asan/). The .venv's python3 comes first in PATH so the interoperability tests use it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"

[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build
if [ "${1:-}" = "--asan" ]; then
  # No CUDA in the sanitizer build: the sanitizers see none of the device code, the CUDA
  # runtime maps memory where AddressSanitizer keeps its shadow (it then needs
  # protect_shadow_gap=0), and nvcc would compile the kernels a second time. build/ compiles
  # them when nvcc is found; tests/gpu/run.sh runs them on a GPU machine.
  [ -f build-asan/build.ninja ] || meson setup build-asan -Dbuildtype=debugoptimized \
      -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled >/dev/null
  if ! grep -q "cuda = disabled" build-asan/meson-private/cmd_line.txt 2>/dev/null; then
    meson configure build-asan -Dcuda=disabled >/dev/null
  fi
  ninja -C build-asan
fi

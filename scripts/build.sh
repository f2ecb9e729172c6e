#!/usr/bin/env bash
# Configures and builds deftsim into build/; with --asan also the sanitizer build (build-asan/),
# with --valgrind also the build the valgrind memcheck pass runs in (build-vg/). The .venv's
# python3 comes first in PATH so the interoperability tests use it.
#
#   bash scripts/build.sh [--asan] [--valgrind]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"

asan=0 valgrind=0
for a in "$@"; do
  case "$a" in
    --asan) asan=1 ;;
    --valgrind) valgrind=1 ;;
    *) echo "usage: scripts/build.sh [--asan] [--valgrind]" >&2; exit 2 ;;
  esac
done

[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build
if [ "$asan" = 1 ]; then
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
if [ "$valgrind" = 1 ]; then
  # Valgrind cannot run AddressSanitizer programs, and its reports want line numbers: a build
  # with debug information and no sanitizers, where tests/valgrind registers the memcheck
  # pass. No CUDA either (the static CUDA runtime would be in every process memcheck runs).
  # No MPI either: Open MPI's libraries (libmpi, open-pal, hwloc, libevent) would load into
  # every process memcheck traces, and real mode (the only user of MPI) is not in this pass.
  [ -f build-vg/build.ninja ] || meson setup build-vg -Dbuildtype=debugoptimized \
      -Dcuda=disabled -Dmpi=disabled >/dev/null
  ninja -C build-vg
fi

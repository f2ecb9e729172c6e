#!/usr/bin/env bash
# Configures and builds deftsim into build/ (and, with --asan, the sanitizer build into
# build-asan/). The .venv's python3 comes first in PATH so the interoperability tests use it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"

[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build
if [ "${1:-}" = "--asan" ]; then
  [ -f build-asan/build.ninja ] || meson setup build-asan -Dbuildtype=debugoptimized \
      -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
  ninja -C build-asan
fi

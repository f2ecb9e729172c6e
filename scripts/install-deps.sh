#!/usr/bin/env bash
# Installs what deftsim needs on Debian 12 (as root), skipping what is already there:
# the build tools and libraries from Debian (valgrind for the memcheck pass, clang and its
# sanitizer and libFuzzer runtimes for the -Dfuzz=true build, Open MPI for the real network mode
# of -Dmpi), and a Python virtual environment
# (.venv) with numpy and safetensors for the interoperability tests.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(gcc pkg-config meson ninja-build git
      libsimgrid-dev simgrid libgsl-dev libcriterion-dev libinih-dev libjansson-dev zlib1g-dev
      libopenblas-dev gnuplot-nox dataset-fashion-mnist
      python3 python3-venv valgrind clang libclang-rt-14-dev
      libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python3 ] || ! .venv/bin/python3 -c 'import numpy, safetensors' 2>/dev/null; then
  echo "install-deps: creating .venv with numpy and safetensors" >&2
  python3 -m venv .venv
  .venv/bin/python3 -m pip install -q --disable-pip-version-check numpy safetensors
fi

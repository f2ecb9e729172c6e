#!/usr/bin/env bash
# Installs what deftsim needs on Debian 12 (as root), skipping what is already there:
# the build tools and libraries from Debian (valgrind for the memcheck pass, clang and its
# sanitizer and libFuzzer runtimes for the -Dfuzz=true build, Open MPI for the real network mode
# of -Dmpi), and a Python virtual environment
# (.venv) with numpy and safetensors for the interoperability tests.
#
#   bash scripts/install-deps.sh            what deftsim, its tests and CI need
#   bash scripts/install-deps.sh --torch    the same, plus PyTorch and torchvision in .venv
#                                           (from PyPI) for traces/record_pytorch.py
#
# --torch is optional and never the default: deftsim itself needs no PyTorch, and recording
# your own traces (traces/FORMAT.md) is the only use of it. PyPI's torch wheels for Linux are
# large (they bundle CUDA libraries); a CPU-only build, where your network reaches PyTorch's
# own index, is `.venv/bin/pip install torch torchvision --index-url
# https://download.pytorch.org/whl/cpu`.
set -euo pipefail
cd "$(dirname "$0")/.."

torch=0
for arg in "$@"; do
  case "$arg" in
    --torch) torch=1 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps: unknown option '$arg' (--torch, --help)" >&2; exit 2 ;;
  esac
done

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

if [ "$torch" -eq 1 ] && ! .venv/bin/python3 -c 'import torch, torchvision' 2>/dev/null; then
  echo "install-deps: installing torch and torchvision into .venv (traces/record_pytorch.py)" >&2
  .venv/bin/python3 -m pip install -q --disable-pip-version-check torch torchvision
fi

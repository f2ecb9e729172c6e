#!/usr/bin/env bash
# deftsim's main job from a fresh clone: installs what is missing, builds, then generates a
# synthetic ResNet-18 gradient trace and prints its summary into results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh

out=results/quickstart
mkdir -p "$out"
./build/deftsim trace gen --model resnet18_cifar10 --workers 4 --iterations 2 --seed 1 \
    -o "$out/trace"
./build/deftsim trace info "$out/trace" | tee "$out/trace-info.txt"

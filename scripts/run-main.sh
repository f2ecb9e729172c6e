#!/usr/bin/env bash
# deftsim's main job from a fresh clone: installs what is missing, builds, writes a synthetic
# ResNet-18 gradient trace and prints its summary, then runs every sparsifier over P = 2..16
# workers on synthetic ResNet-18 gradients (scenarios/quickstart.ini). Everything lands in
# results/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh

out=results/quickstart
mkdir -p "$out"
./build/deftsim trace gen --model resnet18_cifar10 --workers 4 --iterations 2 --seed 1 \
    -o "$out/trace"
./build/deftsim trace info "$out/trace" | tee "$out/trace-info.txt"
./build/deftsim run scenarios/quickstart.ini
echo "run-main: results in $out (rows.csv, manifest.json; columns in docs/OUTPUT.md)"

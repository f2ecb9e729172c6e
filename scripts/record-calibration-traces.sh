#!/usr/bin/env bash
# record-calibration-traces.sh - the real gradient traces behind the calibrated generator
# parameters (docs/GENERATOR.md, "Calibration"): PyTorch on the CPU, simulated data-parallel
# SGD with P = 8 workers (traces/record_pytorch.py), from data installed packages ship:
#
#   resnet18   ResNet-18 with the CIFAR stem (the table resnet18_cifar10, 11.2 M elements) on
#              Fashion-MNIST (Debian's dataset-fashion-mnist, padded to 3x32x32), global batch
#              32 (4 images a worker), lr 0.01; iterations 0, 1, 200 and 201
#   bert       a 4-layer BERT-style encoder (traces/bert_small.py: hidden 128, 4 heads, 2,000
#              words, 1.08 M elements; the tensor kinds of bert_base_uncased) pretrained on
#              Python's own documentation text (pydoc_data.topics, shipped with the
#              interpreter), global batch 32 sequences of 64 words, lr 0.02; iterations 0,
#              1, 200 and 201
#
# The two run side by side, one thread each under nice. Measured on two cores of an AMD EPYC
# virtual machine shared with other jobs (load 3 to 8), the two run one after the other with
# these settings: ResNet-18 1.96 s a step (32 images forward and backward; steps 1 to 200 in
# 390 s, from the times of its iteration files), 6 min 39 s in all; the BERT 0.18 s a step
# (36 s for steps 1 to 200), 40 s in all. (An earlier recording on two shared cores under
# load 12 to 14 took 13.7 s a ResNet-18 step.) Traces (1.5 GB) go to
# results/calibration-traces/ (git-ignored); `deftsim trace calibrate` fits the generator to
# each (the ResNet-18 one with --no-field, docs/GENERATOR.md), scripts/calibration-validate.py
# compares.
#
#   bash scripts/record-calibration-traces.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/calibration-traces}
py=${PYTHON:-.venv/bin/python3}
[ -x "$py" ] || py=python3
mkdir -p "$out"
rec() {
    local name=$1
    shift
    if [ -f "$out/$name/manifest.json" ]; then
        echo "$out/$name: recorded already"
        return
    fi
    nice -n 5 "$py" traces/record_pytorch.py --workers 8 --threads 1 --seed 1 "$@" \
        -o "$out/$name" >"$out/$name.log" 2>&1
    tail -1 "$out/$name.log"
}
rec resnet18 --model resnet18_cifar --dataset fashion-mnist --batch 32 --lr 0.01 \
    --steps 202 --record 0,1,200,201 &
r1=$!
rec bert --model bert_small --batch 32 --lr 0.02 --steps 202 --record 0,1,200,201 &
r2=$!
st=0
wait $r1 || st=$?
wait $r2 || st=$?
exit $st

#!/usr/bin/env bash
# deftsim's main job from a fresh clone: installs what is missing, builds, then runs the default
# study (scenarios/resnet18_default.ini: ResNet-18 on CIFAR-10 with synthetic gradients; DEFT,
# Top-k in both wire forms, CLT-k, gTop-k, DGC and a dense allreduce; density 0.01; P = 2..64)
# and leaves everything in results/resnet18_default/:
#   points/*.csv, rows.csv, manifest.json   the tidy rows of every point (docs/OUTPUT.md)
#   summary.csv, summary.md                  medians, confidence intervals, scaling exponents,
#                                            speedups over topk (docs/ANALYSIS.md)
#   plots/*.png, plots/*.svg                 the figures
# Running it again resumes an interrupted sweep (finished points are kept) and redraws.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh

out=results/resnet18_default
start=$(date +%s)
# The sweep exits 1 when some point failed: the finished ones are still analysed and drawn,
# and the script then fails with the sweep's status.
rc=0
./build/deftsim sweep scenarios/resnet18_default.ini -o "$out" || rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then exit $rc; fi
# Each point's first iteration starts from zero residuals and touches its buffers for the first
# time: the summary leaves it out (summary.md says so).
./build/deftsim analyze "$out" --warmup 1
./build/deftsim plot "$out"
echo "run-main: the default study in $(( $(date +%s) - start )) s -> $out" \
     "(summary.md, summary.csv, plots/; docs/ANALYSIS.md explains every number)"
exit $rc

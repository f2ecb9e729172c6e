#!/usr/bin/env bash
# calibration-sensitivity.sh - the default study's headline numbers on three gradient sources
# (scenarios/calibration_sensitivity.ini: DEFT and Top-k, ResNet-18, P = 8, density 0.01):
# the generator's defaults, the calibrated parameter set resnet18_fmnist_p8, and the recorded
# trace it was fitted to (scripts/record-calibration-traces.sh). Prints per method and source
# the means over iterations 1 and 2 (iteration 0 starts from zero residuals; with the trace,
# they are its iterations 1 and 50) of: select_seconds (worker mean), imbalance_seconds,
# imbalance_cost, buildup, captured_frac. docs/GENERATOR.md, "Sensitivity".
#
#   bash scripts/calibration-sensitivity.sh [BUILD_DIR] [TRACE_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
exe=${1:-build}/deftsim
trace=${2:-results/calibration-traces/resnet18}
py=${PYTHON:-.venv/bin/python3}
[ -x "$py" ] || py=python3
sc=scenarios/calibration_sensitivity.ini
out=results/calibration/sensitivity
rm -rf "$out"/default "$out"/calibrated "$out"/recorded  # a rerun replaces them
mkdir -p "$out"
"$exe" run "$sc" -q --output "$out/default"
"$exe" run "$sc" -q --output "$out/calibrated" --set gradients.params=resnet18_fmnist_p8
"$exe" run "$sc" -q --output "$out/recorded" --set gradients.source=trace \
    --set gradients.model= --set "gradients.trace=$trace"
"$py" - "$out" <<'PY'
import csv, sys, statistics as st
out = sys.argv[1]
cols = ["select_seconds", "imbalance_seconds", "imbalance_cost", "buildup", "captured_frac"]
vals = {}
for src in ("default", "calibrated", "recorded"):
    for r in csv.DictReader(open(f"{out}/{src}/rows.csv")):
        if int(r["iteration"]) < 1:
            continue
        for c in cols:
            if r[c] != "":
                vals.setdefault((r["method"], c, src), []).append(float(r[c]))
print(f"{'method':6s} {'statistic':18s} {'default':>11s} {'calibrated':>11s} {'recorded':>11s}")
for m in ("deft", "topk"):
    for c in cols:
        row = [st.mean(vals[(m, c, s)]) if (m, c, s) in vals else float("nan")
               for s in ("default", "calibrated", "recorded")]
        print(f"{m:6s} {c:18s} " + " ".join(f"{v:11.4g}" for v in row))
PY

#!/usr/bin/env bash
# calibration-sensitivity.sh - the default study's headline numbers on three gradient sources
# (scenarios/calibration_sensitivity.ini: DEFT and Top-k, ResNet-18, P = 8, density 0.01):
# the generator's defaults, the calibrated parameter set resnet18_fmnist_p8 (also with
# worker_spread = 0), and the late iterations of the recorded trace it was fitted to
# (scripts/record-calibration-traces.sh: iterations 200 and 201, which the set describes; the
# script points a trace folder of its own at those two files, so that no residual of
# training's first steps is carried into them). Each source runs two iterations; printed per
# method and source is iteration 1 (the second: one step of error feedback behind it, as
# iteration 201 after 200) of: select_seconds (worker mean), imbalance_seconds,
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
rm -rf "$out"/default "$out"/calibrated "$out"/calibrated_ws0 "$out"/recorded "$out"/late_trace
mkdir -p "$out/late_trace"
# The recorded trace's iterations 200 and 201 as a trace of their own (its manifest with
# those two iterations; the files linked, not copied).
"$py" - "$trace" "$out/late_trace" <<'PY'
import json, os, sys
src, dst = os.path.abspath(sys.argv[1]), sys.argv[2]
m = json.load(open(os.path.join(src, "manifest.json")))
late = [i for i in m["iterations"] if i in (200, 201)]
if late != [200, 201]:
    sys.exit(f"{src}: iterations {m['iterations']} lack 200 and 201")
m["iterations"] = late
for i in late:
    os.symlink(os.path.join(src, f"iter_{i:06d}.safetensors"),
               os.path.join(dst, f"iter_{i:06d}.safetensors"))
with open(os.path.join(dst, "manifest.json"), "w") as f:
    json.dump(m, f, indent=1)
PY
"$exe" run "$sc" -q --output "$out/default"
"$exe" run "$sc" -q --output "$out/calibrated" --set gradients.params=resnet18_fmnist_p8
"$exe" run "$sc" -q --output "$out/calibrated_ws0" --set gradients.params=resnet18_fmnist_p8 \
    --set synthetic.worker_spread=0
"$exe" run "$sc" -q --output "$out/recorded" --set gradients.source=trace \
    --set gradients.model= --set "gradients.trace=$out/late_trace"
"$py" - "$out" <<'PY'
import csv, sys, statistics as st
out = sys.argv[1]
cols = ["select_seconds", "imbalance_seconds", "imbalance_cost", "buildup", "captured_frac"]
srcs = ("default", "calibrated", "calibrated_ws0", "recorded")
vals = {}
for src in srcs:
    for r in csv.DictReader(open(f"{out}/{src}/rows.csv")):
        if int(r["iteration"]) != 1:
            continue
        for c in cols:
            if r[c] != "":
                vals.setdefault((r["method"], c, src), []).append(float(r[c]))
print(f"{'method':6s} {'statistic':18s}" + "".join(f" {s:>14s}" for s in srcs))
for m in ("deft", "topk"):
    for c in cols:
        row = [st.mean(vals[(m, c, s)]) if (m, c, s) in vals else float("nan") for s in srcs]
        print(f"{m:6s} {c:18s} " + " ".join(f"{v:14.4g}" for v in row))
PY

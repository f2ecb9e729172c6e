#!/usr/bin/env bash
# bench-regen.sh - the regeneration slots against one slot (docs/OUTPUT.md, "Regeneration
# slots"): the same points run with `[engine] regen_slots = 8` (the default) and `= 1`, in
# turns, with error_feedback = none, so that every accumulator is regenerated at each visit.
# Prints each run's point seconds and step seconds (from the manifest), the ratios of the
# medians, and whether the rows agree in every untimed column.
#
#   bash scripts/bench-regen.sh                     # ResNet-18, P = 64, topk, deft and micro
#   P=128 METHODS=topk REPS=5 bash scripts/bench-regen.sh
#
# The machine is shared and noisy: the runs alternate, and the medians over REPS turns are
# compared.
set -euo pipefail
cd "$(dirname "$0")/.."
EXE=${DEFTSIM:-build/deftsim}
P=${P:-64}
METHODS=${METHODS:-topk, deft, micro}
ITER=${ITER:-2}
REPS=${REPS:-3}
MODEL=${MODEL:-resnet18_cifar10}
THREADS=${THREADS:-$(nproc)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/bench.ini" <<INI
[scenario]
name = bench-regen
seed = 11
iterations = $ITER
[gradients]
source = synthetic
model = $MODEL
[sparsify]
methods = $METHODS
densities = 0.01
error_feedback = none
[workers]
counts = $P
[network]
compute = none
INI
echo "bench-regen: $MODEL, P = $P, methods $METHODS, $ITER iterations, $REPS turns," \
     "$THREADS preparation threads, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq 1 "$REPS"); do
    for s in 8 1; do
        rm -rf "$tmp/s$s"
        "$EXE" run "$tmp/bench.ini" -o "$tmp/s$s" -q --prep-threads "$THREADS" \
            --set engine.regen_slots=$s > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
        python3 -c "import json,sys; m=json.load(open(sys.argv[1])); \
print(sum(p['seconds'] for p in m['points']), sum(p['step_seconds'] for p in m['points']))" \
            "$tmp/s$s/manifest.json" >> "$tmp/t$s"
        cp "$tmp/s$s/rows.csv" "$tmp/rows$s.csv"
    done
done
python3 - "$tmp" <<'PY'
import csv, statistics, sys
sys.path.insert(0, "tests/reliability")
from rowcmp import MEASURED
tmp = sys.argv[1]
t = {s: [[float(x) for x in line.split()] for line in open(f"{tmp}/t{s}")] for s in (8, 1)}
med = {s: (statistics.median(r[0] for r in t[s]), statistics.median(r[1] for r in t[s])) for s in t}
for s in (8, 1):
    print(f"regen_slots = {s}: points (s) {' '.join(f'{r[0]:.1f}' for r in t[s])}  median {med[s][0]:.1f}; "
          f"steps (s) {' '.join(f'{r[1]:.1f}' for r in t[s])}  median {med[s][1]:.1f}")
print(f"ratio 8 slots / 1 slot: points {med[8][0] / med[1][0]:.3f}, steps {med[8][1] / med[1][1]:.3f}")
a = list(csv.reader(open(f"{tmp}/rows8.csv")))
b = list(csv.reader(open(f"{tmp}/rows1.csv")))
cols = [i for i, n in enumerate(a[0]) if n not in MEASURED]
same = a[0] == b[0] and len(a) == len(b) and all(x[i] == y[i] for x, y in zip(a[1:], b[1:]) for i in cols)
print("rows: untimed columns equal" if same else "rows: ROWS DIFFER")
sys.exit(0 if same else 1)
PY

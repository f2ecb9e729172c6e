#!/usr/bin/env bash
# timing-repeatability.sh - how well the selection times of a study repeat, under the timing
# protocol of docs/TIMING.md and under a single timed run per worker (repeats = 1, cache =
# warm: deftsim's protocol before [timing]). The default study's ResNet-18 d = 0.01 points of
# topk and deft at P = 2, 8, 32 run as two sweeps back to back per protocol (few iterations,
# no network simulation: only the measured selection times matter here); for each point the
# script prints both sweeps' median slowest-worker and median-worker selection times and their
# ratio (second / first). Ratios near 1 mean the number repeats.
#
#   bash scripts/timing-repeatability.sh [OUTDIR] [ITERATIONS]
#
# OUTDIR defaults to results/timing-repeatability, ITERATIONS to 4 (the first is left out as
# warm-up). Extra settings for both protocols can be passed in DEFTSIM_SETS, e.g.
# DEFTSIM_SETS="--set timing.statistic=median"; PROTOCOLS="protocol" runs only the protocol's
# pair (default "single protocol").
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/timing-repeatability}
iters=${2:-4}
exe=${DEFTSIM_EXE:-./build/deftsim}
# The plain defaults, which docs/TIMING.md's figures of this script were measured with.
common=(--set gradients.params=none --set sparsify.methods=topk,deft --set workers.counts=2,8,32 --set network.simulate=0
        --set scenario.iterations="$iters" --progress lines)
# shellcheck disable=SC2206
extra=(${DEFTSIM_SETS:-})
protocols=${PROTOCOLS:-single protocol}
for proto in $protocols; do
    case $proto in
        single) sets=(--set timing.repeats=1 --set timing.cache=warm) ;;
        protocol) sets=() ;;
    esac
    for run in a b; do
        rm -rf "$out/$proto-$run"
        "$exe" sweep scenarios/resnet18_default.ini -o "$out/$proto-$run" "${common[@]}" \
            "${sets[@]}" "${extra[@]}" >/dev/null
        "$exe" analyze "$out/$proto-$run" --warmup 1 >/dev/null
    done
done
python3 - "$out" <<'PY'
import csv, sys
out = sys.argv[1]
def load(path):
    with open(path) as f:
        return {(r["method"], int(r["P"])): r for r in csv.DictReader(f)}
print("protocol  method  P   slowest a  slowest b  ratio   median-w a  median-w b  ratio   spread a  spread b")
import os
for proto in ("single", "protocol"):
    if not os.path.exists(f"{out}/{proto}-b/summary.csv"):
        continue
    a, b = load(f"{out}/{proto}-a/summary.csv"), load(f"{out}/{proto}-b/summary.csv")
    for key in sorted(a, key=lambda k: (k[0], k[1])):
        ra, rb = a[key], b[key]
        sa, sb = float(ra["select_seconds_median"]) * 1e3, float(rb["select_seconds_median"]) * 1e3
        ma = float(ra["select_median_worker_seconds_median"]) * 1e3
        mb = float(rb["select_median_worker_seconds_median"]) * 1e3
        spa, spb = ra.get("select_spread_median", ""), rb.get("select_spread_median", "")
        f = lambda v: f"{float(v):8.3f}" if v else "       -"
        print(f"{proto:9} {key[0]:6} {key[1]:3} {sa:9.2f}  {sb:9.2f}  {sb/sa:6.3f}  "
              f"{ma:10.2f}  {mb:10.2f}  {mb/ma:6.3f}  {f(spa)}  {f(spb)}")
PY

#!/usr/bin/env bash
# bench-spread.sh - spread mode against one process on this machine (docs/CLUSTER.md, "Spread
# mode"): the same point run as one process and as `mpirun -n R deftsim run`, in turns: the
# wall time of each run (the launcher's start and MPI_Init included) and the points' own
# seconds from the manifest, the ratios of the medians, and a check that the rows agree in
# every untimed column. The defaults are the issue's benchmark: ResNet-18 (synthetic
# gradients), full error feedback, P = 64, R = 2 and 4.
#
#   bash scripts/bench-spread.sh                    # P = 64, deft and topk, R = 2 and 4
#   P=16 METHODS=topk REPS=3 bash scripts/bench-spread.sh
#
# Threads: the one-process run uses every core for preparation (its default) and one kernel
# thread ([device] threads = 1, the default); each of the R ranks gets max(1, cores / R)
# preparation threads, so that both runs ask for the same cores. The ranks yield the CPU while
# they wait in MPI (OMPI_MCA_mpi_yield_when_idle = 1). The machine is shared and noisy: the
# runs alternate, and the medians over REPS turns are compared.
set -euo pipefail
cd "$(dirname "$0")/.."
EXE=${DEFTSIM:-build/deftsim}
P=${P:-64}
METHODS=${METHODS:-deft, topk}
ITER=${ITER:-2}
REPS=${REPS:-2}
RANKS=${RANKS:-2 4}
MODEL=${MODEL:-resnet18_cifar10}
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
command -v mpirun >/dev/null || { echo "bench-spread: no mpirun on PATH" >&2; exit 2; }
cores=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/bench.ini" <<INI
[scenario]
name = bench-spread
seed = 11
iterations = $ITER
[gradients]
source = synthetic
model = $MODEL
[sparsify]
methods = $METHODS
densities = 0.01
error_feedback = full
[workers]
counts = $P
[network]
compute = none
INI
wall() { # wall seconds of a command, its output in $tmp/log
    local t0 t1
    t0=$(date +%s.%N)
    "$@" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}
echo "bench-spread: $MODEL, P = $P, methods $METHODS, $ITER iterations, $REPS turns, $cores cores," \
     "$(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A times
for rep in $(seq 1 "$REPS"); do
    rm -rf "$tmp/one"
    times[one]+="$(wall "$EXE" run "$tmp/bench.ini" -o "$tmp/one" -q) "
    python3 -c "import json,sys; print(sum(p['seconds'] for p in json.load(open(sys.argv[1]))['points']))" \
        "$tmp/one/manifest.json" >> "$tmp/pts_one"
    for R in $RANKS; do
        th=$(( cores / R )); [ "$th" -ge 1 ] || th=1
        rm -rf "$tmp/R$R"
        times[R$R]+="$(wall mpirun --oversubscribe -n "$R" "$EXE" run "$tmp/bench.ini" -o "$tmp/R$R" \
                        -q --prep-threads "$th") "
        python3 -c "import json,sys; print(sum(p['seconds'] for p in json.load(open(sys.argv[1]))['points']))" \
            "$tmp/R$R/manifest.json" >> "$tmp/pts_R$R"
    done
done
{ echo "one ${times[one]}"; for R in $RANKS; do echo "R$R ${times[R$R]}"; done; } > "$tmp/times"
# (The points' own seconds, from the last turn's manifests, leave out the launcher's start.)
python3 - "$tmp" <<'PY'
import csv, statistics, sys
sys.path.insert(0, "tests/reliability")
from rowcmp import MEASURED
tmp = sys.argv[1]
walls = [line.split() for line in open(f"{tmp}/times")]
one = [float(x) for x in walls[0][1:]]
pts = {row[0]: [float(x) for x in open(f"{tmp}/pts_{row[0]}")] for row in walls}
p1 = statistics.median(pts["one"])
ref = list(csv.reader(open(f"{tmp}/one/rows.csv")))
m1 = statistics.median(one)
print(f"{'run':<12} {'walls (s)':<22} {'median':>7} {'ratio':>6}   {'points (s)':<22} {'median':>7} {'ratio':>6}  rows")
print(f"{'one process':<12} {' '.join(f'{x:.1f}' for x in one):<22} {m1:>7.1f} {1.0:>6.3f}   "
      f"{' '.join(f'{x:.1f}' for x in pts['one']):<22} {p1:>7.1f} {1.0:>6.3f}  reference")
for row in walls[1:]:
    name, t = row[0], [float(x) for x in row[1:]]
    got = list(csv.reader(open(f"{tmp}/{name}/rows.csv")))
    h = ref[0]
    cols = [i for i, n in enumerate(h) if n not in MEASURED]
    same = got[0] == h and len(got) == len(ref) and all(
        a[i] == b[i] for a, b in zip(ref[1:], got[1:]) for i in cols)
    m, pm = statistics.median(t), statistics.median(pts[name])
    print(f"{'R = ' + name[1:]:<12} {' '.join(f'{x:.1f}' for x in t):<22} {m:>7.1f} {m / m1:>6.3f}   "
          f"{' '.join(f'{x:.1f}' for x in pts[name]):<22} {pm:>7.1f} {pm / p1:>6.3f}  "
          f"{'untimed columns equal' if same else 'ROWS DIFFER'}")
    if not same:
        sys.exit(1)
PY

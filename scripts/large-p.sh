#!/usr/bin/env bash
# large-p.sh - one large-P point run three ways on this machine (docs/CLUSTER.md, "A P = 4096
# point, measured"): as one process, spread over R MPI ranks (`mpirun -n R deftsim run`), and
# as a sweep of the same points dealt to N shards that run at once (`deftsim sweep --shard
# I/N`, one process each). For each run it prints the wall time, each process's peak resident
# memory (GNU time's maximum RSS) and the points' own seconds, and checks that the spread and
# sharded rows equal the one-process rows in every column that is not a measured time.
#
#   bash scripts/large-p.sh [OUTDIR]          (OUTDIR: results/large-p; replaced)
#   P=4096 METHODS=deft,topk RANKS=2 SHARDS=2 bash scripts/large-p.sh
#
# The scenario is ResNet-18 (resnet18_cifar10) at d = 0.01 with its sampled error feedback (8
# tracked workers, the rest regenerated), ITER iterations (default 1), one timing run per
# worker (timing.repeats = 1, as the P = 1024 study of docs/examples/resnet18_cifar10) and the
# network simulated in MODE (default approximate). Each run gets the machine's cores: one
# process all of them for preparation, each of R ranks or N shards cores / R (or / N). The N
# shards share the machine's memory, so each plans for 1 / N of it (`--ram`); without that each
# plans for the whole budget, as if alone (deftsim sweep --shard is meant for N machines).
# RUNS (default "one spread shards") picks the runs; the first in it that is run is the
# reference of the row check, which needs "one".
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/large-p}
EXE=${DEFTSIM:-build/deftsim}
P=${P:-4096}
METHODS=${METHODS:-deft,topk}
ITER=${ITER:-1}
RANKS=${RANKS:-2}
SHARDS=${SHARDS:-2}
MODE=${MODE:-approximate}
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
command -v mpirun >/dev/null || { echo "large-p: no mpirun on PATH" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "large-p: needs GNU time (/usr/bin/time; Debian: apt-get install time)" >&2; exit 2; }
cores=$(nproc)
RUNS=${RUNS:-one spread shards}
ram_kib=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
mkdir -p "$out"
for r in $RUNS; do rm -rf "${out:?}/$r" "$out/$r".* "$out"/shard-*.log; done
sets=(--set scenario.iterations="$ITER" --set workers.counts="$P" --set sparsify.methods="$METHODS"
      --set sparsify.densities=0.01 --set timing.repeats=1 --set network.mode="$MODE")
echo "large-p: resnet18_cifar10, P = $P, methods $METHODS, $ITER iteration(s), network $MODE," \
     "$cores cores, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# wall seconds of a command, its stderr (GNU time's lines among it) in $out/NAME.err
timed() {
    local name=$1 t0 t1
    shift
    t0=$(date +%s.%N)
    "$@" > "$out/$name.out" 2> "$out/$name.err" || { cat "$out/$name.err" >&2; exit 1; }
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l > "$out/$name.wall"
}
gtime=(/usr/bin/time -f "peak_rss_kib %M")

want() { case " $RUNS " in *" $1 "*) return 0 ;; esac; return 1; }
want one && timed one "${gtime[@]}" "$EXE" run scenarios/resnet18_cifar10.ini -o "$out/one" -q "${sets[@]}" \
    --prep-threads "$cores"
th=$(( cores / RANKS )); [ "$th" -ge 1 ] || th=1
want spread && timed spread mpirun --oversubscribe -n "$RANKS" "${gtime[@]}" "$EXE" run scenarios/resnet18_cifar10.ini \
    -o "$out/spread" -q "${sets[@]}" --prep-threads "$th"
th=$(( cores / SHARDS )); [ "$th" -ge 1 ] || th=1
shard_all() {
    local pids=() i
    for i in $(seq 0 $((SHARDS - 1))); do
        "${gtime[@]}" "$EXE" sweep scenarios/resnet18_cifar10.ini -o "$out/shards" -q "${sets[@]}" \
            --prep-threads "$th" --ram "$(( ram_kib / SHARDS ))K" --shard "$i/$SHARDS" \
            2> "$out/shard-$i.log" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i"; done
    cat "$out"/shard-*.log >&2
}
want shards && timed shards shard_all

python3 - "$out" <<'PY'
import csv, json, os, re, sys
sys.path.insert(0, "tests/reliability")
from rowcmp import compare
out = sys.argv[1]

def rss(name):
    return [int(x) / 1048576 for x in re.findall(r"peak_rss_kib (\d+)", open(f"{out}/{name}.err").read())]

def points(folder):
    m = json.load(open(f"{out}/{folder}/manifest.json"))
    return {f"{p['method']} d={p['density']:g}": p["seconds"] for p in m["points"]}

def rows(folder):
    r = list(csv.reader(open(f"{out}/{folder}/rows.csv")))
    return r[0], r[1:]

rhead, rrows = rows("one")
print(f"{'run':<16} {'wall (s)':>9}  {'peak GiB per process':<22} rows against one process; points' own seconds")
failed = False
for name, label in (("one", "one process"), ("spread", "spread"), ("shards", "shards at once")):
    if not os.path.exists(f"{out}/{name}.wall"):
        continue
    wall = float(open(f"{out}/{name}.wall").read())
    if name == "one":
        verdict = "reference"
    else:
        msgs = []
        head, got = rows(name)
        worst = compare(name, head, got, rhead, rrows, msgs.append)
        verdict = (f"untimed columns equal, simulated times within {worst:.0%} of their allowance"
                   if worst is not None else "ROWS DIFFER: " + msgs[0])
        failed |= worst is None
    pts = ", ".join(f"{k} {v:.1f}" for k, v in points(name).items())
    print(f"{label:<16} {wall:>9.1f}  {' '.join(f'{x:.2f}' for x in rss(name)):<22} {verdict}; {pts}")
sys.exit(1 if failed else 0)
PY

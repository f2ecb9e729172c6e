#!/usr/bin/env bash
# timing-check.sh - are deftsim's selection times fit to publish? The figures of docs/TIMING.md's
# "Measured against the goal", from one command:
#
#   1. the default study (scenarios/resnet18_default.ini, the timing protocol's defaults) as two
#      sweeps back to back; per point both runs' medians over the iterations of the slowest
#      worker's selection time, their ratio, and the 95 % interval's half-width relative to the
#      median; then the shares: points agreeing within 10 %, the largest difference, points
#      whose half-width is under 15 %; once for the times in seconds and once for the same
#      times as a multiple of the iteration's reference read (select_ref), which follows the
#      machine's drift between the sweeps;
#   2. DEFT's slowest-worker selection time against P (deft_norms = fused, the default) and its
#      ratio to Top-k's at the largest P;
#   3. [device] kind = profile with the shipped CPU profile: two sweeps of every method must
#      give the same rows in every column but the wall times prepare_seconds and step_seconds.
#
#   bash scripts/timing-check.sh [OUTDIR]            (OUTDIR: results/timing-check)
#
# The network simulation is off in part 1 (`network.simulate = 0`): the selection times are
# measured before it and do not depend on it, and it would double the run time. SIMULATE=1
# keeps it. ITERATIONS (default: the scenario's) sets the iterations of part 1; the first is
# left out of the statistics as warm-up, as scripts/run-main.sh does. A quiet machine gives the
# figures the protocol is meant for: the script prints the load average before each sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/timing-check}
exe=${DEFTSIM_EXE:-./build/deftsim}
# The generator's plain defaults, which docs/TIMING.md's and the README's figures of this
# script were measured with (the default study's scenario now takes resnet18_cifar10's own
# calibrated set; PARAMS=resnet18_fmnist_p8 or PARAMS= to time that).
params=(--set "gradients.params=${PARAMS-none}")
sets=(--progress lines "${params[@]}")
[ "${SIMULATE:-0}" = 1 ] || sets+=(--set network.simulate=0)
[ -z "${ITERATIONS:-}" ] || sets+=(--set scenario.iterations="$ITERATIONS")
mkdir -p "$out"

for run in a b; do
    rm -rf "$out/study-$run"
    echo "timing-check: study run $run, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    "$exe" sweep scenarios/resnet18_default.ini -o "$out/study-$run" "${sets[@]}" >/dev/null
    "$exe" analyze "$out/study-$run" --warmup 1 >/dev/null
done

profile_sets=("${params[@]}" --set device.kind=profile --set device.profile=profiles/cpu-intel-xeon.csv
              --set workers.counts=2,8 --set scenario.iterations=3 --progress lines)
for run in a b; do
    rm -rf "$out/profile-$run"
    echo "timing-check: profile run $run" >&2
    "$exe" sweep scenarios/resnet18_default.ini -o "$out/profile-$run" "${profile_sets[@]}" \
        >/dev/null
done

python3 - "$out" <<'PY'
import csv, sys
out = sys.argv[1]

def load(path):
    with open(path) as f:
        return {(r["method"], float(r["density"]), int(r["P"])): r for r in csv.DictReader(f)}

a, b = load(f"{out}/study-a/summary.csv"), load(f"{out}/study-b/summary.csv")

def agreement(metric, label, scale, unit):
    """Part 1 for one summary metric: per point both runs' medians, their ratio and the
    intervals' half-widths; then the three shares against the goals."""
    print(f"   {label}\n")
    print(f"{'method':8} {'d':>6} {'P':>4} {'run a':>9} {'run b':>9} {'b/a':>6} {'hw a':>6} {'hw b':>6}")
    ratios, widths = [], []
    for key in sorted(a, key=lambda k: (k[0], k[1], k[2])):
        if key not in b:
            continue
        ra, rb = a[key], b[key]
        if not ra.get(f"{metric}_median") or not rb.get(f"{metric}_median"):
            continue
        ma, mb = float(ra[f"{metric}_median"]), float(rb[f"{metric}_median"])
        if ma <= 0 or mb <= 0:
            continue
        hw = []
        for r, m in ((ra, ma), (rb, mb)):
            lo, hi = r[f"{metric}_lo"], r[f"{metric}_hi"]
            hw.append((float(hi) - float(lo)) / 2 / m if lo and hi else float("nan"))
        ratios.append(mb / ma)
        widths += [w for w in hw if w == w]
        print(f"{key[0]:8} {key[1]:6g} {key[2]:4d} {ma*scale:9.3f} {mb*scale:9.3f} {mb/ma:6.3f} "
              f"{hw[0]:6.1%} {hw[1]:6.1%}")
    n = len(ratios)
    if not n:
        print("   no points with this metric")
        return
    dev = [abs(r - 1) for r in ratios]
    within10 = sum(d <= 0.10 for d in dev)
    narrow = sum(w < 0.15 for w in widths)
    print(f"\n   points agreeing within 10 %: {within10}/{n} ({within10/n:.0%}; goal >= 90 %)")
    print(f"   largest difference: {max(dev):.1%} (goal <= 25 %)")
    print(f"   interval half-width under 15 % of the median: {narrow}/{len(widths)} "
          f"({narrow/len(widths):.0%}; goal >= 90 %)")
    print(f"   run b / run a over all points: median {sorted(ratios)[n // 2]:.3f}, "
          f"range {min(ratios):.3f} to {max(ratios):.3f}\n")

print("1. The default study twice: median over iterations of the slowest worker's selection")
print("   time, run b / run a, and the 95 % interval's half-width / median of each run;")
print("   (a) in seconds, (b) as a multiple of the iteration's reference read (select_ref,")
print("   docs/TIMING.md \"Reference\"), which moves with the machine as the selections do\n")
agreement("select_seconds", "(a) raw: slowest worker's selection time (ms)", 1e3, "ms")
agreement("select_ref", "(b) normalised: the same as a multiple of the reference", 1, "refs")

print("\n2. DEFT's slowest-worker selection time against P (run a), and against Top-k's\n")
deft = sorted((k[2], float(r["select_seconds_median"])) for k, r in a.items() if k[0] == "deft")
topk = {k[2]: float(r["select_seconds_median"]) for k, r in a.items() if k[0] == "topk"}
print(f"{'P':>5} {'deft ms':>9} {'topk ms':>9} {'deft/topk':>10}")
for p, t in deft:
    tk = topk.get(p)
    print(f"{p:5d} {t*1e3:9.3f} {tk*1e3 if tk else float('nan'):9.3f} "
          f"{t/tk if tk else float('nan'):10.3f}")
falls = all(deft[i + 1][1] < deft[i][1] for i in range(len(deft) - 1))
print(f"   falls at every step of P: {'yes' if falls else 'no'}; at P = {deft[-1][0]}: "
      f"{deft[-1][1] / topk[deft[-1][0]]:.3f} of Top-k (goal <= 0.1)")

print("\n3. [device] kind = profile, two sweeps: rows identical but for wall times")
WALL = {"prepare_seconds", "step_seconds", "ref_seconds"}
with open(f"{out}/profile-a/rows.csv") as f:
    ra = list(csv.reader(f))
with open(f"{out}/profile-b/rows.csv") as f:
    rb = list(csv.reader(f))
skip = {i for i, h in enumerate(ra[0]) if h in WALL}
diff = [(i, j, ra[0][j]) for i, (x, y) in enumerate(zip(ra, rb)) for j in range(len(x))
        if j not in skip and x[j] != y[j]]
if len(ra) != len(rb):
    print(f"   DIFFERENT: {len(ra) - 1} rows against {len(rb) - 1}")
elif diff:
    i, j, h = diff[0]
    print(f"   DIFFERENT: {len(diff)} cells, first at row {i} column {h}: "
          f"{ra[i][j]!r} against {rb[i][j]!r}")
else:
    print(f"   identical: {len(ra) - 1} rows, {len(ra[0]) - len(skip)} columns compared")
PY

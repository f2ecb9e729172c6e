#!/usr/bin/env python3
"""bench_speed.py - a point's wall and CPU time, before against after, side by side in one run
(docs/TIMING.md, "Where a point's time goes"): the build of a base commit (main by default)
and this checkout's build run the same study in turns, and the script prints per method and P
the median wall and CPU seconds of each, their ratios (after / before), the after build's time
by stage with each stage's floor, and whether the two builds' rows agree in every column that
is not a measured time.

    python3 scripts/bench_speed.py                      # builds main into /tmp, then runs
    BASE_EXE=/path/to/old/deftsim python3 scripts/bench_speed.py --reps 3
    python3 scripts/bench_speed.py --feedback none --P 8,32 --methods topk,deft
    python3 scripts/bench_speed.py --P 256 --methods topk --ram 4G   # few resident workers

The study: ResNet-18's synthetic gradients at density 0.01, no network simulation (its time is
its own stage), the scenario's [timing] defaults (R = 3, min, cold). CPU time is the user and
system time of the run's process (its children included): on a shared machine the wall time
of a run depends on what else runs, its CPU time much less.
"""
import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reliability"))
from rowcmp import MEASURED  # noqa: E402

STAGES = ["generate", "accumulate", "copy", "flush", "sparsify", "metrics", "simulate", "write"]


def build_base(commit, where):
    """The deftsim executable of commit, built (without tests or CUDA) under where."""
    src = os.path.join(where, "src")
    exe = os.path.join(src, "build", "deftsim")
    if os.path.exists(exe):
        return exe
    os.makedirs(src, exist_ok=True)
    archive = subprocess.run(["git", "-C", ROOT, "archive", commit], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    subprocess.run(["meson", "setup", "build", "-Dtests=false", "-Dcuda=disabled"], cwd=src,
                   check=True, capture_output=True)
    subprocess.run(["ninja", "-C", "build", "-j2", "deftsim"], cwd=src, check=True,
                   capture_output=True)
    return exe


def scenario(path, args):
    with open(path, "w") as f:
        f.write(f"""[scenario]
name = bench-speed
seed = 5
iterations = {args.iterations}
[gradients]
source = synthetic
model = {args.model}
[sparsify]
methods = {args.methods}
densities = 0.01
error_feedback = {args.feedback}
sampled_workers = {args.sampled}
[workers]
counts = {args.P}
[network]
simulate = 0
""")


def run(exe, ini, out, extra):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([exe, "run", ini, "-o", out, "-q"] + extra, capture_output=True,
                       text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        sys.exit(f"{exe} failed:\n{p.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    pts = {(p["method"], p["P"]): p for p in m["points"]}
    return wall, cpu, pts


def rows_agree(a, b):
    ra = list(csv.reader(open(a)))
    rb = list(csv.reader(open(b)))
    # Columns the base build does not write (a newer build's measured ones) are skipped.
    cols = [n for n in ra[0] if n in rb[0] and n not in MEASURED and n != "ref_seconds"]
    ia = [ra[0].index(n) for n in cols]
    ib = [rb[0].index(n) for n in cols]
    if len(ra) != len(rb):
        return False, f"{len(ra) - 1} rows against {len(rb) - 1}"
    for x, y in zip(ra[1:], rb[1:]):
        for n, i, j in zip(cols, ia, ib):
            if x[i] != y[j]:
                return False, f"column {n}: {x[i]} against {y[j]}"
    return True, f"{len(ra) - 1} rows, {len(cols)} columns compared"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="main", help="commit of the build before (default main)")
    ap.add_argument("--methods", default="topk,deft,dgc")
    ap.add_argument("--P", default="8,32")
    ap.add_argument("--feedback", default="none", choices=["none", "sampled", "full"])
    ap.add_argument("--sampled", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--model", default="resnet18_cifar10")
    ap.add_argument("--reps", type=int, default=1, help="turns of both builds (medians)")
    ap.add_argument("--ram", default=None,
                    help="both builds plan for this much RAM (deftsim run --ram): fewer resident "
                         "accumulators, as at large P")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "deftsim-bench-speed"))
    args = ap.parse_args()
    new_exe = os.environ.get("DEFTSIM_EXE", os.path.join(ROOT, "build", "deftsim"))
    base_exe = os.environ.get("BASE_EXE") or build_base(args.base, os.path.join(args.work, "base"))
    os.makedirs(args.work, exist_ok=True)
    ini = os.path.join(args.work, "bench.ini")
    scenario(ini, args)
    load = open("/proc/loadavg").read().split()[:3]
    print(f"bench-speed: {args.model}, methods {args.methods}, P {args.P}, error_feedback "
          f"{args.feedback}, {args.iterations} iterations, {args.reps} turn(s)"
          f"{', --ram ' + args.ram if args.ram else ''}; before {base_exe}, "
          f"after {new_exe}; {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, load "
          f"{' '.join(load)}")
    res = {"before": [], "after": []}
    for rep in range(args.reps):
        for name, exe in (("before", base_exe), ("after", new_exe)):
            out = os.path.join(args.work, f"{name}{rep}")
            subprocess.run(["rm", "-rf", out], check=True)
            res[name].append(run(exe, ini, out, ["--ram", args.ram] if args.ram else []))
    print(f"\nwhole runs: wall before {statistics.median(r[0] for r in res['before']):.1f} s, "
          f"after {statistics.median(r[0] for r in res['after']):.1f} s, ratio "
          f"{statistics.median(r[0] for r in res['after']) / statistics.median(r[0] for r in res['before']):.3f}; "
          f"CPU before {statistics.median(r[1] for r in res['before']):.1f} s, after "
          f"{statistics.median(r[1] for r in res['after']):.1f} s, ratio "
          f"{statistics.median(r[1] for r in res['after']) / statistics.median(r[1] for r in res['before']):.3f}")
    print(f"\n{'method':8} {'P':>5} {'before s':>9} {'after s':>9} {'ratio':>6} "
          f"{'prep b':>7} {'prep a':>7} {'step b':>7} {'step a':>7} {'step ratio':>10}")
    keys = sorted(res["after"][0][2])
    for k in keys:
        def med(name, field):
            return statistics.median(r[2][k][field] for r in res[name])
        b, a = med("before", "seconds"), med("after", "seconds")
        sb, sa = med("before", "step_seconds"), med("after", "step_seconds")
        print(f"{k[0]:8} {k[1]:5d} {b:9.2f} {a:9.2f} {a / b:6.3f} {med('before', 'prepare_seconds'):7.2f} "
              f"{med('after', 'prepare_seconds'):7.2f} {sb:7.2f} {sa:7.2f} {sa / sb:10.3f}")
    print("\nafter, by stage (last turn): measured seconds (floor)")
    print(f"{'method':8} {'P':>5} " + " ".join(f"{s:>17}" for s in STAGES))
    for k in keys:
        st = res["after"][-1][2][k].get("stages", {})
        cells = []
        for s in STAGES:
            o = st.get(s, {})
            fl = o.get("floor_seconds")
            cells.append(f"{o.get('seconds', 0):8.2f} ({'-' if fl is None else f'{fl:.2f}':>6})")
        print(f"{k[0]:8} {k[1]:5d} " + " ".join(f"{c:>17}" for c in cells))
    same, why = rows_agree(os.path.join(args.work, "after0", "rows.csv"),
                           os.path.join(args.work, "before0", "rows.csv"))
    print(f"\nrows: {'untimed columns equal' if same else 'ROWS DIFFER'} ({why})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

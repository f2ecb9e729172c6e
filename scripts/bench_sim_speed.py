#!/usr/bin/env python3
"""bench_sim_speed.py - `deftsim bench sim` at its targets, the build before against this
checkout's, side by side in one run (docs/NETWORK.md, "Scale"): both builds run the same
points in turns (before, after, then after, before in the next turn, so that a drift of the
machine's load falls on both), and the script prints per point and method the wall time and
peak memory of each, their ratios (after / before), each whole run's wall and CPU time, and
whether the two builds' rows agree in every column that is not measured (simulated time,
messages, steps, mode: the text must be the same).

    python3 scripts/bench_sim_speed.py                       # builds main into /tmp first
    BASE_EXE=/tmp/deftsim-base python3 scripts/bench_sim_speed.py --points dgx,flat1024
    nice -n 5 python3 scripts/bench_sim_speed.py --reps 3 --points flat4096

The points (the targets of docs/NETWORK.md, "Scale"):
  dgx       P = 1024, the ten methods, network.preset=dgx-h100, library nccl, approximate mode
            (as scripts/dgx-h100-study.sh runs it): within 20 s
  flat1024  P = 1024, the default methods, the default flat network, exact mode: within 10 s
  flat4096  the same at P = 4096: within 60 s

On a shared machine the wall times move with the load (printed at the start and the end); the
ratios of one turn, where both builds ran under about the same load, and the CPU times move
much less. Exits 1 when the rows differ.
"""
import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
from bench_speed import build_base  # noqa: E402

TEN = "deft,topk,topk-ag,cltk,gtopk,dgc,dense,micro,exdyna,oktopk"
POINTS = {
    "dgx": (["--P", "1024", "--methods", TEN, "--set", "network.preset=dgx-h100", "--set",
             "network.library=nccl", "--set", "network.mode=approximate"], 20.0),
    "flat1024": (["--P", "1024", "--set", "network.mode=exact"], 10.0),
    "flat4096": (["--P", "4096", "--set", "network.mode=exact"], 60.0),
}
MEASURED = {"wall_seconds", "wall_min_seconds", "peak_rss_bytes"}


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def run(exe, args):
    """(wall seconds, CPU seconds, header, rows) of one `bench sim --csv` process."""
    t0 = time.monotonic()
    p = subprocess.Popen([exe, "bench", "sim", "--csv"] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate()
    wall = time.monotonic() - t0
    if p.returncode:
        sys.exit(f"{exe} bench sim {' '.join(args)} failed ({p.returncode}):\n{err}")
    # The process and every simulation it forked: children's CPU once they are waited for.
    rows = list(csv.reader(io.StringIO(out)))
    return wall, rows[0], rows[1:]


def cpu_of(fn):
    import resource
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = fn()
    a = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r, (a.ru_utime - b.ru_utime) + (a.ru_stime - b.ru_stime)


def compare(head, ra, rb):
    cols = [i for i, n in enumerate(head) if n not in MEASURED]
    if len(ra) != len(rb):
        return f"{len(ra)} rows against {len(rb)}"
    for x, y in zip(ra, rb):
        for i in cols:
            if x[i] != y[i]:
                return f"{x[1]} P = {x[0]}, column {head[i]}: {x[i]} before, {y[i]} after"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="main", help="commit of the build before (default main)")
    ap.add_argument("--points", default="dgx,flat1024,flat4096",
                    help="which targets, comma-separated: " + ", ".join(POINTS))
    ap.add_argument("--reps", type=int, default=1, help="turns of both builds (medians)")
    ap.add_argument("--work", default="/tmp/deftsim-bench-sim-speed")
    args = ap.parse_args()
    new_exe = os.environ.get("DEFTSIM_EXE", os.path.join(os.path.dirname(ROOT), "build", "deftsim"))
    base_exe = os.environ.get("BASE_EXE") or build_base(args.base, os.path.join(args.work, "base"))
    points = args.points.split(",")
    for pt in points:
        if pt not in POINTS:
            sys.exit(f"bench_sim_speed: unknown point '{pt}' ({', '.join(POINTS)})")
    print(f"bench-sim-speed: points {args.points}, {args.reps} turn(s); before {base_exe}, "
          f"after {new_exe}; {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, load {load()}")
    bad = 0
    for pt in points:
        argv, target = POINTS[pt]
        res = {"before": [], "after": []}
        for rep in range(args.reps):
            order = (("before", base_exe), ("after", new_exe))
            for name, exe in (order if rep % 2 == 0 else order[::-1]):
                (wall, head, rows), cpu = cpu_of(lambda: run(exe, argv))
                res[name].append((wall, cpu, head, rows))
        head = res["after"][0][2]
        iw, ip = head.index("wall_seconds"), head.index("peak_rss_bytes")

        def med(name, f):
            return statistics.median(f(r) for r in res[name])

        print(f"\n{pt}: bench sim {' '.join(argv)}  (target {target:g} s; load now {load()})")
        print(f"{'method':8} {'wall before':>11} {'wall after':>10} {'ratio':>6} "
              f"{'MiB before':>10} {'MiB after':>9} {'ratio':>6}")
        for i, row in enumerate(res["after"][0][3]):
            wb = med("before", lambda r: float(r[3][i][iw]))
            wa = med("after", lambda r: float(r[3][i][iw]))
            mb = med("before", lambda r: float(r[3][i][ip])) / 2**20
            ma = med("after", lambda r: float(r[3][i][ip])) / 2**20
            print(f"{row[1]:8} {wb:11.3f} {wa:10.3f} {wa / wb:6.3f} {mb:10.1f} {ma:9.1f} "
                  f"{ma / mb:6.3f}")
        wb, wa = med("before", lambda r: r[0]), med("after", lambda r: r[0])
        cb, ca = med("before", lambda r: r[1]), med("after", lambda r: r[1])
        turns = [a[0] / b[0] for a, b in zip(res["after"], res["before"])]
        print(f"whole process: wall before {wb:.2f} s, after {wa:.2f} s, ratio {wa / wb:.3f} "
              f"(per turn {', '.join(f'{t:.3f}' for t in turns)}); CPU before {cb:.2f} s, "
              f"after {ca:.2f} s, ratio {ca / cb:.3f}; after {'within' if wa <= target else 'OVER'} "
              f"the {target:g} s target")
        why = None
        for r in res["before"] + res["after"][1:]:
            why = why or compare(head, r[3], res["after"][0][3])
        if why:
            bad = 1
        print(f"rows: {'ROWS DIFFER: ' + why if why else 'every unmeasured column equal'}")
    return bad


if __name__ == "__main__":
    sys.exit(main())

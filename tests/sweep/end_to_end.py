#!/usr/bin/env python3
"""End to end: deftsim sweep -> analyze -> plot on a tiny model, every output checked.

The statistics are recomputed here from the raw point files with the Python standard library
(csv, statistics), independently of analysis/: medians of the per-iteration values, the ratio
of medians for speedups, an ordinary least-squares slope for the scaling exponent. The figures
must exist and parse (PNG signature and size, SVG as XML, PDF header), and their data files must
hold the summary's numbers. Needs gnuplot. Run by meson test (suite slow); DEFTSIM_EXE names the
program.
"""
import csv
import json
import math
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

EXE = os.environ.get("DEFTSIM_EXE")
if not EXE:
    sys.exit("DEFTSIM_EXE is not set (run through meson test)")

TINY = """index,name,shape,numel
0,conv.weight,16x3x3x3,432
1,conv.bias,16,16
2,fc1.weight,64x32,2048
3,fc1.bias,64,64
4,fc2.weight,10x64,640
5,fc2.bias,10,10
"""
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
import registry  # noqa: E402

METHODS = registry.methods(EXE, caps=("default",))  # the registry's default list
COUNTS = [1, 2, 4, 8]
ITERS = 4

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def close(a, b, rel=1e-12, what=""):
    ok = (math.isnan(a) and math.isnan(b)) or abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)
    check(ok, f"{what}: {a!r} != {b!r}")


def run(*args, want=0):
    p = subprocess.run([EXE, *args], capture_output=True, text=True)
    if p.returncode != want:
        sys.exit(f"deftsim {' '.join(args)}: exit {p.returncode}, want {want}\n{p.stderr}")
    return p


def num(s):
    return float(s) if s != "" else math.nan


def main():
    tmp = tempfile.mkdtemp(prefix="deftsim-e2e-")
    try:
        model = os.path.join(tmp, "tiny.csv")
        with open(model, "w") as f:
            f.write(TINY)
        scen = os.path.join(tmp, "tiny.ini")
        with open(scen, "w") as f:
            f.write(f"""[scenario]
name = e2e
seed = 5
iterations = {ITERS}
[gradients]
model = {model}
[sparsify]
methods = {", ".join(METHODS)}
densities = 0.05
[workers]
counts = 1..8
""")
        out = os.path.join(tmp, "out")

        # -- sweep, and a rerun that resumes -------------------------------------------------
        p = run("sweep", scen, "-o", out, "--progress", "lines", "-j", "2")
        check(f"[{len(METHODS) * len(COUNTS)}/{len(METHODS) * len(COUNTS)}]" in p.stderr,
              "a progress line per point")
        p = run("sweep", scen, "-o", out, "--progress", "lines")
        check("28 finished earlier, skipped" in p.stderr, "the rerun skips every point")
        man = json.load(open(os.path.join(out, "manifest.json")))
        check(man["status"] == "complete", "manifest status complete")
        check(len(man["points"]) == 28, "28 points in the manifest")

        # -- the raw rows, per point and iteration -----------------------------------------
        per = {}      # (method, P) -> {iteration: {...}}
        total_rows = 0
        for m in METHODS:
            for P in COUNTS:
                path = os.path.join(out, "points", f"{m}_d0.05_P{P}.csv")
                check(os.path.exists(path), f"{path} exists")
                its = {}
                with open(path, newline="") as f:
                    for r in csv.DictReader(f):
                        total_rows += 1
                        t = int(r["iteration"])
                        it = its.setdefault(t, {"sel": [], "bytes": [], "work": [],
                                                "buildup": num(r["buildup"]),
                                                "captured": num(r["captured_frac"]),
                                                "imbalance": num(r["imbalance_seconds"]),
                                                "comm": num(r.get("comm_seconds", "")),
                                                "iter": num(r.get("iteration_seconds", ""))})
                        if r["phase_index"] == "0":
                            it["sel"].append(float(r["select_seconds"]))
                            it.setdefault("spread", []).append(
                                (float(r["select_seconds_max"]) - float(r["select_seconds_min"]))
                                / float(r["select_seconds_min"])
                                if float(r["select_seconds_max"]) > float(r["select_seconds_min"]) > 0
                                else math.nan)
                            it["work"].append(float(r["worker_seconds"]))
                            it["bytes"].append(float(r["bytes_sent"]))
                check(sorted(its) == list(range(ITERS)), f"{m} P={P}: iterations 0..{ITERS - 1}")
                for t, it in its.items():
                    check(len(it["sel"]) == P, f"{m} P={P} it {t}: one phase-0 row per worker")
                per[(m, P)] = its
        with open(os.path.join(out, "rows.csv"), newline="") as f:
            rows_csv = sum(1 for _ in csv.DictReader(f))
        check(rows_csv == total_rows, f"rows.csv has {rows_csv} rows, the points {total_rows}")

        # -- analyze ---------------------------------------------------------------------------
        p = run("analyze", out)
        summary = list(csv.DictReader(open(os.path.join(out, "summary.csv"), newline="")))
        check(len(summary) == 28, f"summary.csv: {len(summary)} rows")
        md = open(os.path.join(out, "summary.md")).read()
        # iterations.csv: every iteration of every point, its values those of the raw rows.
        itrows = list(csv.DictReader(open(os.path.join(out, "iterations.csv"), newline="")))
        check(len(itrows) == len(METHODS) * len(COUNTS) * ITERS,
              f"iterations.csv: {len(itrows)} rows, one per iteration of each point")
        for r in itrows:
            it = per[(r["method"], int(r["P"]))][int(r["iteration"])]
            for key, col in (("buildup", "buildup"), ("captured", "captured_frac")):
                v = num(r[col])
                check(v == it[key] or (math.isnan(v) and math.isnan(it[key])),
                      f"iterations.csv {r['method']} P={r['P']} it {r['iteration']}: {col}")
            check(r["warmup"] == "0", "iterations.csv: no warm-up without --warmup")
        has_comm = any(not math.isnan(it["comm"]) for its in per.values() for it in its.values())
        if not has_comm:
            check("Communication and iteration time are not in these results" in md,
                  "summary.md says the network columns are absent")

        def med(m, P, key, f=lambda v: v):
            return statistics.median([f(it[key]) for it in per[(m, P)].values()])

        byrow = {(r["method"], int(r["P"])): r for r in summary}
        for (m, P), its in per.items():
            r = byrow[(m, P)]
            check(int(r["iterations"]) == ITERS, f"{m} P={P}: iterations")
            want = {
                "select_seconds": statistics.median([max(it["sel"]) for it in its.values()]),
                "select_median_worker_seconds": statistics.median(
                    [statistics.median(it["sel"]) for it in its.values()]),
                "compute_seconds": statistics.median([max(it["work"]) for it in its.values()]),
                "bytes_sent": statistics.median([sum(it["bytes"]) / P for it in its.values()]),
                "bytes_sent_max": statistics.median([max(it["bytes"]) for it in its.values()]),
                "buildup": med(m, P, "buildup"),
                "captured_frac": med(m, P, "captured"),
            }
            # The network simulation's per-iteration times, when the rows have them.
            for key, col in (("comm", "comm_seconds"), ("iter", "iteration_seconds")):
                vals = [it[key] for it in its.values() if not math.isnan(it[key])]
                if vals:
                    want[col] = statistics.median(vals)
            # The timing repetitions' spread: per worker (max - min) / min, median over the
            # workers (left out where max = min), then over the iterations; and the flag.
            spreads = []
            for it in its.values():
                w = [v for v in it["spread"] if not math.isnan(v)]
                if w:
                    spreads.append(statistics.median(w))
            if spreads:
                sp = statistics.median(spreads)
                close(num(r["select_spread_median"]), sp, 1e-12, f"{m} P={P} select_spread_median")
                check(r["noisy"] == ("1" if sp > 0.25 else "0"), f"{m} P={P} noisy: {r['noisy']}")
            else:
                check(r["noisy"] == "", f"{m} P={P}: no spread, noisy empty")
            imb = [it["imbalance"] for it in its.values() if not math.isnan(it["imbalance"])]
            want["imbalance_seconds"] = statistics.median(imb) if imb else math.nan
            for k, v in want.items():
                close(num(r[k + "_median"]), v, 1e-12, f"{m} P={P} {k}_median")
                lo, hi = num(r[k + "_lo"]), num(r[k + "_hi"])
                if not math.isnan(v):
                    check(lo <= v <= hi, f"{m} P={P} {k}: {lo} <= {v} <= {hi}")
            if m != "dense":  # dense selects nothing: no speedup
                tk = statistics.median([max(it["sel"]) for it in per[("topk", P)].values()])
                close(num(r["select_speedup"]), tk / want["select_seconds"], 1e-12,
                      f"{m} P={P} speedup")
        # Scaling exponent: least squares through (ln P, ln median) by hand.
        for m in METHODS:
            pts = [(math.log(P), math.log(num(byrow[(m, P)]["select_seconds_median"])))
                   for P in COUNTS if num(byrow[(m, P)]["select_seconds_median"]) > 0]
            got = num(byrow[(m, COUNTS[0])]["select_exponent"])
            if len(pts) < 2:
                check(math.isnan(got), f"{m}: no exponent without two positive points")
                continue
            xb = sum(x for x, _ in pts) / len(pts)
            yb = sum(y for _, y in pts) / len(pts)
            slope = sum((x - xb) * (y - yb) for x, y in pts) / sum((x - xb) ** 2 for x, _ in pts)
            close(got, slope, 1e-9, f"{m} exponent")
            check(num(byrow[(m, COUNTS[0])]["select_exponent_lo"]) <= got <=
                  num(byrow[(m, COUNTS[0])]["select_exponent_hi"]), f"{m}: exponent in its interval")
        for m in METHODS:
            for P in COUNTS:
                check(f"| {m} | {P} |" in md, f"summary.md has a row for {m} P={P}")

        # The same statistics from rows.csv read as a file.
        alt = os.path.join(tmp, "alt")
        os.makedirs(alt)
        shutil.copy(os.path.join(out, "rows.csv"), alt)
        run("analyze", os.path.join(alt, "rows.csv"), "-q")
        s2 = list(csv.DictReader(open(os.path.join(alt, "summary.csv"), newline="")))
        check([r["select_seconds_median"] for r in s2] == [r["select_seconds_median"] for r in summary],
              "rows.csv and the point files give the same summary")

        # -- plot ------------------------------------------------------------------------------
        run("plot", os.path.join(tmp, "nowhere"), want=2)
        p = run("plot", out, "--pdf")
        figs = ["select_vs_P", "speedup_vs_P", "bytes_vs_P", "buildup_vs_P", "imbalance_vs_P",
                "captured_vs_P", "breakdown", "buildup_vs_iteration"]
        if has_comm:
            figs += ["comm_vs_P", "iteration_vs_P"]
        else:
            check("comm_vs_P: not drawn" in p.stderr, "plot says why comm_vs_P is missing")
        for fig in figs:
            base = os.path.join(out, "plots", fig)
            png = open(base + ".png", "rb").read()
            check(png[:8] == b"\x89PNG\r\n\x1a\n", f"{fig}.png is a PNG")
            w, h = struct.unpack(">II", png[16:24])
            check(w >= 800 and h >= 500, f"{fig}.png is {w}x{h}")
            root = ET.parse(base + ".svg").getroot()
            check(root.tag.endswith("svg"), f"{fig}.svg is SVG")
            check(open(base + ".pdf", "rb").read(5) == b"%PDF-", f"{fig}.pdf is a PDF")
        # Build-up over the iterations: each method's iterations at the largest P, the values
        # of iterations.csv (every iteration of the point, the warm-up's included).
        its = list(csv.DictReader(open(os.path.join(out, "iterations.csv"), newline="")))
        pmax = max(int(r["P"]) for r in its)
        want = {}
        for r in its:
            if int(r["P"]) == pmax and r["buildup"]:
                want.setdefault(r["method"], []).append((int(r["iteration"]), float(r["buildup"])))
        got = {}
        for b in open(os.path.join(out, "plots", "data", "buildup_vs_iteration.dat")).read().split("\n\n\n"):
            lines = [l for l in b.splitlines() if l.strip()]
            m = next(l.split()[2] for l in lines if l.startswith("# method"))
            got[m] = [(int(l.split()[0]), float(l.split()[1])) for l in lines if not l.startswith("#")]
        check(set(got) == set(want) and all(
            [i for i, _ in got[m]] == [i for i, _ in want[m]] and
            all(abs(a - b) <= 1e-8 * b for (_, a), (_, b) in zip(got[m], want[m])) for m in want),
            f"buildup_vs_iteration draws iterations.csv at P = {pmax}")
        # The figure's data are the summary's medians (in ms).
        blocks = open(os.path.join(out, "plots", "data", "select_vs_P.dat")).read().split("\n\n\n")
        seen = seen_med = 0
        for b in blocks:
            lines = [l for l in b.splitlines() if l.strip()]
            # The slowest worker's blocks ("# method m"), then the median worker's
            # ("# select_median_worker_seconds m", drawn dashed).
            head = next(l.split() for l in lines if l.startswith("# method")
                        or l.startswith("# select_median_worker_seconds"))
            m, col = head[2], ("select_seconds_median" if head[1] == "method"
                               else "select_median_worker_seconds_median")
            for l in lines:
                if l.startswith("#") or l.startswith("NaN"):
                    continue
                P, v, lo, hi = l.split()[:4]  # a fifth column: the noisy flag
                close(float(v), num(byrow[(m, int(P))][col]) * 1e3, 1e-8,
                      f"select_vs_P.dat {m} P={P} {col}")
                check(float(lo) <= float(v) <= float(hi), f"select_vs_P.dat {m} P={P} bar")
                if head[1] == "method":
                    seen += 1
                else:
                    seen_med += 1
        check(seen == 24, f"select_vs_P.dat: {seen} points (dense has no selection time)")
        check(seen_med > 0, f"select_vs_P.dat: {seen_med} median-worker points")
        svg = open(os.path.join(out, "plots", "select_vs_P.svg")).read()
        for label in ["workers P", "selection time", "DEFT", "gTop-k"]:
            check(label in svg, f"select_vs_P.svg shows '{label}'")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("end to end: sweep, analyze and plot agree with the raw rows")


if __name__ == "__main__":
    main()

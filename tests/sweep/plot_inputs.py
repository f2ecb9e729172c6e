#!/usr/bin/env python3
"""deftsim plot on a hand-made summary.csv: each figure reads the columns it should and says on
the figure what it shows.

The summary is written here with numbers chosen to be recognised in the figures' data files
(plots/data/*.dat) and in the SVG text:
  - bytes_vs_P draws the busiest worker (bytes_sent_max) beside the mean (gTop-k's busiest sends
    three times the mean);
  - imbalance_vs_P leaves out CLT-k, whose imbalance is P at every point, and names it;
  - speedup_vs_P fits its axis to the bars (no 0.125 tick below bars that end at 0.2);
  - breakdown stacks the named compute phases (phase_<name>_seconds_mean) under display names,
    and the parts add up to the iteration;
  - iteration_vs_P and breakdown say that the forward and backward pass is not included, and
    with [compute] (forward_backward_seconds filled) that it is, the breakdown's bars starting
    with it and still adding up to the iteration;
  - captured_vs_P defines its symbols.
Needs gnuplot. Run by meson test (suite fast); DEFTSIM_EXE names the program.
"""
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile

EXE = os.environ.get("DEFTSIM_EXE")
if not EXE:
    sys.exit("DEFTSIM_EXE is not set (run through meson test)")
SRC = os.environ.get("DEFTSIM_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))

METHODS = ["deft", "topk", "cltk", "gtopk", "dense"]
PS = [2, 4, 8]
STEMS = ["select_seconds", "compute_seconds", "select_critical_seconds", "comm_seconds",
         "iteration_seconds", "bytes_sent", "bytes_sent_max", "buildup", "captured_frac",
         "captured_ratio", "imbalance_seconds", "imbalance_cost"]
PHASES = ["norms", "allocate", "pack", "sample", "filter", "select", "merge", "union", "gather",
          "sum", "residual", "other"]
# Compute phases (seconds) of the slowest worker per method.
PH = {"deft": {"norms": 0.004, "select": 0.002, "gather": 0.001, "residual": 0.001},
      "topk": {"select": 0.005, "union": 0.001, "gather": 0.001, "residual": 0.001},
      "cltk": {"select": 0.002, "gather": 0.001, "residual": 0.001},
      "gtopk": {"select": 0.003, "merge": 0.002, "gather": 0.001, "residual": 0.001},
      "dense": {}}
SPEED = {"deft": (1.5, 1.2, 2.2), "topk": (1, 1, 1), "cltk": (2.0, 1.8, 2.1),
         "gtopk": (0.4, 0.2, 0.6), "dense": (None, None, None)}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def summary_rows():
    rows = []
    for m in METHODS:
        for P in PS:
            r = {"model": "tiny", "method": m, "density": "0.01", "P": str(P), "iterations": "4",
                 "ci_level": "0.95"}
            comp = sum(PH[m].values())
            val = {"select_seconds": PH[m].get("select", 0) + PH[m].get("norms", 0),
                   "compute_seconds": comp, "select_critical_seconds": comp,
                   "comm_seconds": 0.001 * P, "iteration_seconds": comp + 0.001 * P + 0.0005,
                   "bytes_sent": 1e6 * P, "bytes_sent_max": 1e6 * P * (3 if m == "gtopk" else 1),
                   "buildup": 1.0, "captured_frac": 0.5, "captured_ratio": 0.9,
                   "imbalance_seconds": (P if m == "cltk" else 1.2 + 0.1 * P) if m != "dense" else None,
                   "imbalance_cost": 1.0}
            for s in STEMS:
                v = val[s]
                for suf, f in (("_median", 1), ("_lo", 0.9), ("_hi", 1.1), ("_mean", 1)):
                    r[s + suf] = "" if v is None else repr(v * f)
            for c in ("select_exponent", "select_exponent_lo", "select_exponent_hi",
                      "select_exponent_r2", "select_exponent_points", "iteration_speedup",
                      "iteration_speedup_lo", "iteration_speedup_hi"):
                r[c] = ""
            sp = SPEED[m]
            for c, v in zip(("select_speedup", "select_speedup_lo", "select_speedup_hi"), sp):
                r[c] = "" if v is None else repr(v)
            for p in PHASES:
                r[f"phase_{p}_seconds_mean"] = repr(PH[m].get(p, 0.0))
            rows.append(r)
    return rows


def blocks(path):
    """The data file's blocks: (header comment, [[numbers...]])."""
    out = []
    for b in open(path).read().split("\n\n\n"):
        lines = [l for l in b.splitlines() if l.strip()]
        head = [l for l in lines if l.startswith("# ") and not l.startswith("# columns")]
        data = [l.split() for l in lines if not l.startswith("#")]
        out.append((head[-1] if head else "", data))
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="deftsim-plotin-")
    try:
        rows = summary_rows()
        with open(os.path.join(tmp, "summary.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
        p = subprocess.run([EXE, "plot", tmp, "--format", "svg", "--scripts", os.path.join(SRC, "plots")],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"deftsim plot: exit {p.returncode}\n{p.stderr}")
        data = os.path.join(tmp, "plots", "data")
        svg = lambda fig: open(os.path.join(tmp, "plots", fig + ".svg")).read()

        # bytes: the mean blocks, then the busiest worker's, one per method in the same order.
        bl = blocks(os.path.join(data, "bytes_vs_P.dat"))
        shown = [h.split()[-1] for h, _ in bl if h.startswith("# method")]
        busiest = {h.split()[-1]: d for h, d in bl if h.startswith("# bytes_sent_max")}
        check(shown == METHODS, f"bytes_vs_P: mean blocks {shown}")
        check(list(busiest) == METHODS, f"bytes_vs_P: busiest-worker blocks {list(busiest)}")
        for P, v, lo, hi in busiest.get("gtopk", []):
            check(abs(float(v) - 3 * int(P)) < 1e-9, f"bytes_vs_P: gtopk busiest at P={P} is {v} MB")
        check("busiest worker" in svg("bytes_vs_P"), "bytes_vs_P.svg says which line is the busiest worker")

        # imbalance: CLT-k (= P everywhere) left out and named; the others drawn.
        bl = blocks(os.path.join(data, "imbalance_vs_P.dat"))
        shown = [h.split()[-1] for h, _ in bl]
        check("cltk" not in shown and "deft" in shown, f"imbalance_vs_P: blocks {shown}")
        check("not shown: CLT-k" in svg("imbalance_vs_P"), "imbalance_vs_P.svg names CLT-k as left out")

        # speedup: the axis fits the bars (0.2 .. 2.2): no tick at 0.125 or 4.
        ticks = re.findall(r">([0-9.]+)</tspan>", svg("speedup_vs_P"))
        check("0.125" not in ticks and "0.2" in ticks, f"speedup_vs_P: y ticks {ticks}")

        # breakdown: named phases, display names, parts add up to the iteration.
        path = os.path.join(data, "breakdown.dat")
        head = open(path).read().splitlines()[1]
        cols = head.split("columns: method ")[1].split(" (")[0].split()
        check(cols[:2] == ["norms", "select"] and cols[-2:] == ["waiting", "comm"] and "merge" in cols,
              f"breakdown.dat columns {cols}")
        byname = {r["method"] + "/" + r["P"]: r for r in rows}
        n = 0
        for h, d in blocks(path):
            P = h.split()[-1]
            for line in d:
                r = byname[line[0] + "/" + P]
                parts = dict(zip(cols, map(float, line[1:])))
                for ph in ("norms", "select", "merge"):
                    check(abs(parts[ph] - PH[line[0]].get(ph, 0) * 1e3) < 1e-6,
                          f"breakdown {line[0]} P={P} {ph}: {parts[ph]}")
                check(abs(sum(parts.values()) - float(r["iteration_seconds_mean"]) * 1e3) < 1e-6,
                      f"breakdown {line[0]} P={P}: parts add up to the iteration")
                n += 1
        check(n == len(METHODS) * len(PS), f"breakdown.dat: {n} bars")
        s = svg("breakdown")
        for label in ["DEFT", "gTop-k", "norms (selection)", "merge (selection)", "communication",
                      "no forward and backward pass"]:
            check(label in s, f"breakdown.svg shows '{label}'")
        check(not re.search(r">gtopk</tspan>", s), "breakdown.svg labels bars with display names, not ids")

        check("no forward and backward pass" in svg("iteration_vs_P"),
              "iteration_vs_P.svg says the forward and backward pass is not included")
        check("average accumulator" in svg("captured_vs_P"), "captured_vs_P.svg defines a")

        # A summary without the phase and busiest-worker columns (written before they existed)
        # still plots: selection / rest bars, the mean bytes alone.
        old = os.path.join(tmp, "old")
        os.makedirs(old)
        keep = [k for k in rows[0] if not k.startswith("phase_") and not k.startswith("bytes_sent_max")]
        with open(os.path.join(old, "summary.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keep, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        p = subprocess.run([EXE, "plot", old, "--format", "svg", "-q", "--scripts", os.path.join(SRC, "plots")],
                           capture_output=True, text=True)
        check(p.returncode == 0, f"plot of an older summary: exit {p.returncode}: {p.stderr}")
        head = open(os.path.join(old, "plots", "data", "breakdown.dat")).read().splitlines()[1]
        check("columns: method selection rest comm" in head, f"older summary: breakdown columns: {head}")
        # [compute]: the iteration holds a 50 ms forward and backward pass.
        fb = os.path.join(tmp, "fwdbwd")
        os.makedirs(fb)
        crow = []
        for r in rows:
            c = dict(r)
            for suf in ("_median", "_lo", "_hi", "_mean"):
                c["forward_backward_seconds" + suf] = repr(0.05)
                c["iteration_seconds" + suf] = repr(float(r["iteration_seconds" + suf]) + 0.05)
            crow.append(c)
        with open(os.path.join(fb, "summary.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(crow[0].keys()))
            w.writeheader()
            w.writerows(crow)
        p = subprocess.run([EXE, "plot", fb, "--format", "svg", "-q", "--scripts", os.path.join(SRC, "plots")],
                           capture_output=True, text=True)
        check(p.returncode == 0, f"plot with [compute]: exit {p.returncode}: {p.stderr}")
        s = open(os.path.join(fb, "plots", "iteration_vs_P.svg")).read()
        check("forward and backward pass as given by [compute]" in s and
              "no forward and backward pass" not in s,
              "iteration_vs_P.svg says the forward and backward pass is included")
        path = os.path.join(fb, "plots", "data", "breakdown.dat")
        cols = open(path).read().splitlines()[1].split("columns: method ")[1].split(" (")[0].split()
        check(cols[0] == "fwdbwd" and cols[-1] == "comm", f"breakdown.dat with [compute]: columns {cols}")
        byname = {r["method"] + "/" + r["P"]: r for r in crow}
        for h, d in blocks(path):
            P = h.split()[-1]
            for line in d:
                parts = dict(zip(cols, map(float, line[1:])))
                check(abs(parts["fwdbwd"] - 50) < 1e-6, f"breakdown {line[0]} P={P}: fwdbwd {parts['fwdbwd']}")
                want = float(byname[line[0] + "/" + P]["iteration_seconds_mean"]) * 1e3
                check(abs(sum(parts.values()) - want) < 1e-6,
                      f"breakdown {line[0]} P={P} with [compute]: parts add up to the iteration")
        s = open(os.path.join(fb, "plots", "breakdown.svg")).read()
        check("forward + backward" in s and "no forward and backward pass" not in s,
              "breakdown.svg with [compute] names the forward and backward pass")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("plot inputs: every figure reads its columns and says what it shows")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""compare_deviation_runs.py - the measured sizes of two deviations from the authors' code
(docs/SPARSIFIERS.md, "Deviations from the authors' code"), from two `deftsim run`s that
differ in one option:

  oktopk A/rows.csv B/rows.csv
      Ok-Topk with oktopk_layer_order = reverse (A) and forward (B): whether the aggregate's
      size, the local counts' sum and the thresholds agree per iteration, the range of
      region_balance, and per worker and iteration the largest relative difference of the bytes
      sent and received in the split and reduce (phase `reduce`), the allgather (`selection`)
      and the iteration's total, with the same relative difference summed over everything.

  topk-ag A_DUMP B_DUMP
      topk-ag with topk_ag_mean = sum (A) and each (B), run with --dump: per P, how many
      aggregate values differ, and their relative differences and differences in float ulps.

Plain Python (no numpy): .npy files are read by hand (format 1.0, '<i8' and '<f4')."""
import array
import ast
import collections
import csv
import glob
import math
import os
import struct
import sys


def oktopk(path_a, path_b):
    def load(path):
        by = collections.defaultdict(float)
        it = {}
        for r in csv.DictReader(open(path)):
            key = (int(r["P"]), int(r["iteration"]), int(r["worker"]))
            if r["phase"] in ("reduce", "selection") and r["phase_kind"] in ("p2p", "allgather"):
                by[key + (r["phase"], "sent")] += float(r["phase_bytes_sent"])
                by[key + (r["phase"], "recv")] += float(r["phase_bytes_recv"])
            by[key + ("total", "sent")] = float(r["bytes_sent"])
            by[key + ("total", "recv")] = float(r["bytes_recv"])
            it[key[:2]] = (r["nnz"], r["kj_total"], r["threshold_local"], r["threshold_global"],
                           r["region_balance"])
        return by, it

    (a, ia), (b, ib) = load(path_a), load(path_b)
    if set(a) != set(b):
        sys.exit("compare_deviation_runs: the two runs hold different points or iterations")
    for P in sorted({k[0] for k in a}):
        its = [k for k in ia if k[0] == P]
        same = sum(ia[k][:4] == ib[k][:4] for k in its)
        ra = [float(ia[k][4]) for k in its if ia[k][4]]
        rb = [float(ib[k][4]) for k in its if ib[k][4]]
        print(f"P = {P}: nnz, kj_total, threshold_local and threshold_global equal in {same} of "
              f"{len(its)} iterations; region_balance A {min(ra):.3f} .. {max(ra):.3f}, "
              f"B {min(rb):.3f} .. {max(rb):.3f}")
        for phase in ("reduce", "selection", "total"):
            for way in ("sent", "recv"):
                ks = [k for k in a if k[0] == P and k[3] == phase and k[4] == way]
                worst = max((abs(a[k] - b[k]) / b[k] for k in ks if b[k]), default=0)
                sb = sum(b[k] for k in ks)
                summed = abs(sum(a[k] for k in ks) - sb) / sb if sb else 0
                print(f"  {phase:9s} {way}: per worker and iteration up to {worst:.1%}, "
                      f"summed {summed:.2%}")


def load_npy(path):
    raw = open(path, "rb").read()
    hl = struct.unpack("<H", raw[8:10])[0]
    hdr = ast.literal_eval(raw[10:10 + hl].decode())
    a = array.array({"<i8": "q", "<f4": "f"}[hdr["descr"]])
    a.frombytes(raw[10 + hl:])
    return a


def ulp(x):
    return 2.0 ** (math.frexp(abs(x))[1] - 24)


def topk_ag(dump_a, dump_b):
    points = collections.defaultdict(list)
    for d in sorted(glob.glob(os.path.join(dump_a, "topk-ag", "*", "P*", "it*"))):
        points[os.path.basename(os.path.dirname(d))].append(os.path.relpath(d, dump_a))
    if not points:
        sys.exit("compare_deviation_runs: no topk-ag iterations in " + dump_a)
    for P in sorted(points, key=lambda p: int(p[1:])):
        rel, ulps, n = [], [], 0
        for r in points[P]:
            if load_npy(os.path.join(dump_a, r, "union.npy")) != load_npy(
                    os.path.join(dump_b, r, "union.npy")):
                sys.exit(f"compare_deviation_runs: {r}: the aggregates' indices differ")
            va = load_npy(os.path.join(dump_a, r, "values.npy"))
            vb = load_npy(os.path.join(dump_b, r, "values.npy"))
            n += len(va)
            for x, y in zip(va, vb):
                if x != y and x != 0:
                    rel.append(abs(x - y) / abs(x))
                    ulps.append(abs(x - y) / ulp(x))
        rel.sort()
        ulps.sort()

        def q(v, f):
            return v[min(len(v) - 1, int(f * len(v)))] if v else 0

        print(f"{P}: {len(rel)} of {n} values differ ({len(rel) / n:.1%}); relative difference "
              f"median {q(rel, .5):.2g}, 99 % {q(rel, .99):.2g}, 99.99 % {q(rel, .9999):.2g}, "
              f"max {q(rel, 1):.2g}; in float ulps median {q(ulps, .5):.0f}, 99 % "
              f"{q(ulps, .99):.0f}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("oktopk", "topk-ag"):
        sys.exit(__doc__)
    (oktopk if sys.argv[1] == "oktopk" else topk_ag)(sys.argv[2], sys.argv[3])

#!/usr/bin/env python3
"""One summary.csv of the ResNet-18 DGX H100 runs from P = 8 to 1024, for `deftsim plot`.

Reads the summary.csv of this example's folders (P = 8 to 64 and 128, 256 with both NCCL
allreduce algorithms in one file, with a network.nccl_algorithm column; P = 512 and 1024 one
folder per algorithm, without it) and writes them as one file beside this script:

    python3 docs/examples/dgx_h100/all_p/merge.py
    deftsim plot docs/examples/dgx_h100/all_p --format png

The runs differ in their settings (docs/examples/dgx_h100/README.md): only their simulated
communication is comparable across the whole range.
"""
import csv
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SWEPT = ["summary.csv", "p128_256/summary.csv"]          # with network.nccl_algorithm
ONE = {"p512_1024/ring_p512": "ring", "p512_1024/ring_p1024": "ring",
       "p512_1024/hierarchical_p512": "hierarchical",
       "p512_1024/hierarchical_p1024": "hierarchical"}   # one algorithm a folder

head, rows = None, []
for rel in SWEPT:
    with open(os.path.join(ROOT, rel), newline="") as f:
        r = list(csv.reader(f))
    if head is None:
        head = r[0]
    if r[0] != head:
        raise SystemExit(f"{rel}: its columns differ from {SWEPT[0]}'s")
    rows += r[1:]
for rel, alg in ONE.items():
    path = os.path.join(ROOT, rel, "summary.csv")
    if not os.path.exists(path):
        continue
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    if ["network.nccl_algorithm"] + r[0] != head:
        raise SystemExit(f"{rel}/summary.csv: its columns differ from {SWEPT[0]}'s")
    rows += [[alg] + x for x in r[1:]]
with open(os.path.join(HERE, "summary.csv.tmp"), "w", newline="") as f:
    csv.writer(f, lineterminator="\n").writerow(head)
    csv.writer(f, lineterminator="\n").writerows(rows)
os.replace(os.path.join(HERE, "summary.csv.tmp"), os.path.join(HERE, "summary.csv"))
print(f"{len(rows)} points -> {os.path.join(HERE, 'summary.csv')}")

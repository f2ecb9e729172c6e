#!/usr/bin/env python3
"""Are two runs' rows the same in every column that does not measure time?

usage: scripts/rows_identical.py A B [--exact-simulated] [--skip COL,...]

A and B are results folders (their rows.csv) or rows.csv files of the same points, say one
sweep run by two builds of deftsim. Measured times (phase_seconds, step_seconds, ...) are
skipped; the simulated times must lie within what the measured compute allows, or, with
--exact-simulated (runs with [network] compute = none, whose simulated times depend on the
bytes alone), be the same text. Every other column must be the same text
(tests/reliability/rowcmp.py holds the rule). Prints one line and exits 0 when the rows
agree, 1 at the first difference (named by row, point and column), 2 on bad usage.
"""
import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "reliability"))
import rowcmp  # noqa: E402


def read_rows(path):
    if os.path.isdir(path):
        path = os.path.join(path, "rows.csv")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise ValueError(f"{path}: empty")
    return path, rows[0], rows[1:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--exact-simulated", action="store_true")
    ap.add_argument("--skip", default="", help="more columns to skip, comma-separated")
    args = ap.parse_args()
    try:
        pa, ha, ra = read_rows(args.a)
        pb, hb, rb = read_rows(args.b)
    except (OSError, ValueError) as e:
        print(f"rows_identical: {e}", file=sys.stderr)
        return 2
    failures = []
    skip = tuple(c for c in args.skip.split(",") if c)
    worst = rowcmp.compare(f"{pa} against {pb}", ha, ra, hb, rb, failures.append, skip=skip,
                           exact_simulated=args.exact_simulated)
    if failures:
        print(failures[0])
        return 1
    how = ("simulated times identical" if args.exact_simulated else
           f"simulated times within {worst:.3g} of their allowance")
    print(f"{len(ra)} rows, {len(ha)} columns: every non-time column identical, {how}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

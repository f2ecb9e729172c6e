#!/usr/bin/env python3
"""compare_runs.py - two `deftsim run` result folders of the same scenario, one with
[device] kind = cpu and one with kind = cuda: every rows.csv column that does not measure time
must be equal (selections, counts, bytes, aggregates, residual metrics), and so must every
file of their --dump folders (the selected indices and values, byte for byte).

    compare_runs.py CPU_RESULTS CUDA_RESULTS [CPU_DUMP CUDA_DUMP]

Exit 0 when they agree, 1 otherwise (the first differences are printed)."""
import csv
import filecmp
import os
import sys

# gTop-k's lost mass sums the dropped values in double in the order its merges list them,
# which the kernels leave open (the same terms, perhaps in another order): equal to 1e-9.
CLOSE = {"lost_mass", "lost_abs_mass"}

# Measured or simulated times, and the columns that name the backend: these may differ.
TIMED = {
    "phase_seconds", "phase_seconds_min", "phase_seconds_max", "select_seconds",
    "select_seconds_min", "select_seconds_max", "worker_seconds", "imbalance_seconds", "prepare_seconds",
    "step_seconds", "ref_seconds", "backend", "threads", "sim_start", "sim_end", "comm_seconds",
    "select_critical_seconds", "iteration_seconds",
}


def rows(folder):
    with open(os.path.join(folder, "rows.csv"), newline="") as f:
        return list(csv.DictReader(f))


def main(argv):
    if len(argv) not in (3, 5):
        print(__doc__, file=sys.stderr)
        return 2
    a, b = rows(argv[1]), rows(argv[2])
    bad = 0
    if len(a) != len(b):
        print(f"rows: {len(a)} (cpu) vs {len(b)} (cuda)")
        return 1
    cols = [c for c in a[0].keys() if c not in TIMED] if a else []
    for i, (ra, rb) in enumerate(zip(a, b)):
        for c in cols:
            if c in CLOSE and ra[c] and rb.get(c):
                x, y = float(ra[c]), float(rb[c])
                if x == y or abs(x - y) <= 1e-9 * max(abs(x), abs(y)):
                    continue
            if ra[c] != rb.get(c):
                bad += 1
                if bad <= 20:
                    print(f"row {i + 2} ({ra['method']} P={ra['P']} it={ra['iteration']} "
                          f"w={ra['worker']} {ra['phase']}): {c} = {ra[c]!r} (cpu) vs "
                          f"{rb.get(c)!r} (cuda)")
    backends = sorted({r["backend"] for r in b})
    print(f"rows.csv: {len(a)} rows, {len(cols)} untimed columns compared, {bad} differences; "
          f"cuda rows ran on {', '.join(backends)}")
    if len(argv) == 5:
        nfiles = 0
        for root, _, files in os.walk(argv[3]):
            for name in files:
                pa = os.path.join(root, name)
                pb = os.path.join(argv[4], os.path.relpath(pa, argv[3]))
                nfiles += 1
                if not os.path.exists(pb) or not filecmp.cmp(pa, pb, shallow=False):
                    bad += 1
                    if bad <= 40:
                        print(f"dump: {os.path.relpath(pa, argv[3])} differs or is missing")
        nb = sum(len(f) for _, _, f in os.walk(argv[4]))
        if nb != nfiles:
            bad += 1
            print(f"dump: {nfiles} files (cpu) vs {nb} (cuda)")
        print(f"dump: {nfiles} files compared byte for byte")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""nccl_validation.py - `deftsim validate nccl` (src/net/nccl_validate.c, src/cli/cmd_validate.c;
docs/NETWORK.md, "Validation against nccl-tests").

- the corpus (sim/validation/nccl): every table with status ok is simulated on its preset's
  defaults, and no table's median |error| moves by more than 2 points from the recorded one
  (sim/validation/nccl/baseline.csv; DEFTSIM_WRITE_BASELINE=1 rewrites it after a change that
  is meant to move them, which the commit must say);
- a user's own nccl-tests output in both layouts (with the root column, nccl-tests 2.x, and
  without it, older ones; large times printed without a decimal point), the collective read from
  the file's "Collective test starting" line;
- --fit writes the fitted [network] keys, and a scenario that sets them runs;
- bad input: a file without a row, a missing shape option, an unknown table.

Python 3 standard library only; run by meson as the fast test `sim_nccl_validation` (with
--quick in the sanitizer builds: three tables of the corpus instead of all).
"""
import csv
import os
import re
import subprocess
import sys
import tempfile

EXE = os.environ.get("DEFTSIM_EXE")
if not EXE:
    sys.exit("DEFTSIM_EXE is not set (run through meson test)")
SRC = os.environ.get("DEFTSIM_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = os.path.join(SRC, "sim", "validation", "nccl")
BASELINE = os.path.join(CORPUS, "baseline.csv")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(*args):
    return subprocess.run([EXE, *args], capture_output=True, text=True, cwd=SRC, timeout=600)


LINE = re.compile(r"^(\S+)\s+(\S+)\s+(\d+) x (\d+)\s+(\d+) rows\s+median\s+([\d.]+)%\s+p90\s+([\d.]+)%"
                  r"\s+worst\s+([\d.]+)%")


def table_lines(out):
    got = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            got[m.group(1)] = (int(m.group(5)), float(m.group(6)), float(m.group(7)), float(m.group(8)))
    return got


QUICK_TABLES = ["h100_1n_allreduce_ring_nccl2.26.2", "h100_10n_allreduce_default_nccl2.29.2",
                "a100_4n_allreduce_default_nccl2.8.4_abci"]


def corpus(quick):
    sel = [a for t in QUICK_TABLES for a in ("--table", t)] if quick else []
    r = run("validate", "nccl", "--corpus", CORPUS, *sel)
    check(r.returncode == 0, f"validate nccl on the corpus exits 0 (got {r.returncode}: {r.stderr[-400:]})")
    got = table_lines(r.stdout)
    with open(os.path.join(CORPUS, "index.csv"), newline="") as f:
        ok = [row["id"] for row in csv.DictReader(f) if row["status"] == "ok"]
    if quick:
        ok = [t for t in ok if t in QUICK_TABLES]
    for tid in ok:
        check(tid in got, f"table {tid} simulated and summarised")
    check(re.search(r"^all \d+ tables, \d+ rows: median", r.stdout, re.M) is not None,
          "the summary over all tables")
    # The count of tables within both targets agrees with the per-table lines (printed to 0.1:
    # a table exactly at a printed bound is left out of the comparison).
    m = re.search(r"^(\d+) of (\d+) tables within both targets", r.stdout, re.M)
    check(m is not None, "the count of tables within both targets")
    if m:
        vals = list(got.values())
        sure = sum(1 for _, med, p90, _ in vals if med < 10.0 and p90 < 25.0)
        edge = sum(1 for _, med, p90, _ in vals if (med == 10.0 and p90 <= 25.0) or (p90 == 25.0 and med <= 10.0))
        check(int(m.group(2)) == len(vals) and sure <= int(m.group(1)) <= sure + edge,
              f"{m.group(0)}: the table lines give {sure} (+{edge} at a bound) of {len(vals)}")
    if os.environ.get("DEFTSIM_WRITE_BASELINE") == "1" and not quick:
        with open(BASELINE, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["id", "rows", "median_pct", "p90_pct", "worst_pct"])
            for tid in ok:
                if tid in got:
                    n, med, p90, worst = got[tid]
                    w.writerow([tid, n, med, p90, worst])
        print("wrote", BASELINE)
        return
    with open(BASELINE, newline="") as f:
        base = {row["id"]: row for row in csv.DictReader(f)}
    for tid in ok:
        check(tid in base, f"table {tid} has a recorded median in baseline.csv")
        if tid in base and tid in got:
            was, now = float(base[tid]["median_pct"]), got[tid][1]
            check(abs(now - was) <= 2.0,
                  f"table {tid}: median |error| {now:.1f}% moved more than 2 points from {was:.1f}%")
            check(int(base[tid]["rows"]) == got[tid][0], f"table {tid}: {got[tid][0]} rows compared")


NEW = """# nccl-tests 2.x
# Collective test starting: all_gather_perf
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
host:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 8 - Init COMPLETE
        1024            32     float    none      -1    30.10    0.03    0.03      0    29.90    0.03    0.03      0
     1048576         32768     float    none      -1    45.20   23.20   20.30      0    44.80   23.41   20.48      0
  1073741824      33554432     float    none      -1    11032   97.33   85.17      0    11010   97.52   85.33      0
# Avg bus bandwidth    : 35.2
"""

OLD = """#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           4             1     float     sum    30.25    0.00    0.00  0e+00    30.10    0.00    0.00  0e+00
     4194304       1048576     float     sum    60.11   69.78  122.11  0e+00    59.90   70.02  122.54  0e+00
"""


def user_files(tmp):
    new = os.path.join(tmp, "mine.txt")
    old = os.path.join(tmp, "old.txt")
    with open(new, "w") as f:
        f.write(NEW)
    with open(old, "w") as f:
        f.write(OLD)
    r = run("validate", "nccl", new, "--nodes", "1", "--gpus-per-node", "8", "--preset", "dgx-h100",
            "--rows")
    check(r.returncode == 0, f"validate nccl FILE exits 0 ({r.stderr[-300:]})")
    got = table_lines(r.stdout)
    check(new in got and got[new][0] == 3, f"three rows of the 2.x layout read ({got})")
    check(re.search(r"^\S+ \(allgather, 1 x 8 GPUs\)", r.stdout, re.M) is not None,
          "the collective read from the file (allgather)")
    check(re.search(r"^\s+1073741824\s+11032\.00\s", r.stdout, re.M) is not None,
          "a time printed without a decimal point read as the time (11032 us), not the algbw")
    # --rows names each row's algorithm, protocol and channels as the simulation planned them;
    # forcing the ring with LL shows in them.
    label = re.compile(r"^\s+1073741824\s+11032\.00\s+\S+\s+\S+\s+(\w+)/(LL|LL128|Simple)/(\d+)$", re.M)
    m = label.search(r.stdout)
    check(m is not None and m.group(1) in ("ring", "nvls"), f"the row's choice printed ({m and m.group(0)})")
    rf = run("validate", "nccl", new, "--nodes", "1", "--gpus-per-node", "8", "--preset", "dgx-h100",
             "--rows", "--algo", "ring", "--proto", "LL")
    m = label.search(rf.stdout)
    check(m is not None and m.group(1) == "ring" and m.group(2) == "LL", f"forced ring/LL printed ({m and m.group(0)})")
    r = run("validate", "nccl", old, "--nodes", "1", "--gpus-per-node", "8", "--preset", "dgx-h100",
            "--collective", "allreduce", "--rows")
    got = table_lines(r.stdout)
    check(r.returncode == 0 and old in got and got[old][0] == 2, f"the old layout (no root) read: {got}")
    check(re.search(r"^\s+4194304\s+60\.11\s", r.stdout, re.M) is not None, "old layout: time 60.11 us")
    # A log of several tests (nccl-tests runs printed one after another): a table for each test
    # of a collective the simulation runs, each with its own rows and the same times as the test
    # alone in a file; a test of an operation it does not run (reduce_perf) named on stderr and
    # left out; --collective keeps its own.
    ata = NEW.replace("all_gather_perf", "alltoall_perf")
    other = NEW.replace("all_gather_perf", "reduce_perf")
    log = os.path.join(tmp, "several.log")
    alone = os.path.join(tmp, "alltoall_alone.txt")
    with open(log, "w") as f:
        f.write(NEW + other + ata)
    with open(alone, "w") as f:
        f.write(ata)
    shape8 = ("--nodes", "2", "--gpus-per-node", "8", "--preset", "dgx-h100", "--rows")
    r = run("validate", "nccl", log, *shape8)
    got = table_lines(r.stdout)
    check(r.returncode == 0 and set(got) == {log + ":allgather", log + ":alltoall"}
          and all(v[0] == 3 for v in got.values()),
          f"a log of three tests: its allgather and alltoall, 3 rows each ({sorted(got)}; {r.stderr[-300:]})")
    check("test 2 (reduce_perf) left out" in r.stderr, f"the reduce test named ({r.stderr[-300:]})")
    ra = run("validate", "nccl", alone, *shape8)
    rows_of = lambda out, name: re.search(r"^" + re.escape(name) + r" \(.*\n.*\n((?:\s+\d.*\n)+)", out, re.M)
    a1, a2 = rows_of(r.stdout, log + ":alltoall"), rows_of(ra.stdout, alone)
    check(a1 and a2 and a1.group(1) == a2.group(1), "the log's alltoall rows simulate as the test alone")
    r = run("validate", "nccl", log, *shape8, "--collective", "alltoall")
    got = table_lines(r.stdout)
    check(r.returncode == 0 and list(got) == [log + ":alltoall"], f"--collective keeps its own test ({sorted(got)})")
    only_other = os.path.join(tmp, "reduce.log")
    with open(only_other, "w") as f:
        f.write(other + other)
    r = run("validate", "nccl", only_other, *shape8)
    check(r.returncode == 2 and "none of its 2 tests is a collective the simulation runs" in r.stderr,
          f"a log of reduce tests alone is refused ({r.returncode}, {r.stderr[-300:]})")
    # sendrecv_perf runs: each rank sends the size to the next and receives it from the one
    # before, one NCCL group; a log's sendrecv test is a table of its own.
    sendrecv = NEW.replace("all_gather_perf", "sendrecv_perf")
    with open(log, "w") as f:
        f.write(NEW + sendrecv)
    r = run("validate", "nccl", log, *shape8)
    got = table_lines(r.stdout)
    check(r.returncode == 0 and set(got) == {log + ":allgather", log + ":sendrecv"},
          f"a log's sendrecv test is a table ({sorted(got)}; {r.stderr[-300:]})")
    # nccl-tests on 2 of each node's 8 GPUs (10 nodes): one NIC a GPU, as on the preset's nodes,
    # where the preset's 8 NICs a node would not fit 2 GPUs; the same as setting it, and not the
    # same as 2 GPUs pooling 8 NICs' bandwidth.
    two = ("--nodes", "10", "--gpus-per-node", "2", "--preset", "dgx-h100", "--rows")
    r2 = run("validate", "nccl", new, *two)
    r2set = run("validate", "nccl", new, *two, "--set", "network.nics_per_node=2")
    r2pool = run("validate", "nccl", new, *two, "--set", "network.nics_per_node=2", "--set",
                 "network.nic_bandwidth=1600Gbps", "--set", "network.bandwidth=1600Gbps")
    big = lambda r: re.search(r"^\s+1073741824\s+11032\.00\s+(\S+)", r.stdout, re.M)
    b2, b2set, b2pool = (big(r) for r in (r2, r2set, r2pool))
    check(r2.returncode == 0 and b2 and b2set and b2.group(1) == b2set.group(1),
          f"2 GPUs a node of dgx-h100: one NIC each ({r2.stderr[-300:]}; {b2 and b2.group(1)}, "
          f"{b2set and b2set.group(1)})")
    check(b2 and b2pool and b2.group(1) != b2pool.group(1),
          f"2 GPUs a node: not the node's NICs pooled ({b2 and b2.group(1)}, {b2pool and b2pool.group(1)})")
    # A file's "NCCL version 2.8..." line runs NCCL 2.8.4's tuning figures: the same rows on
    # an A100 node take another time (the LL base latency alone is 3 us lower), and the same
    # as --set network.nccl_tuning=2.8 gives.
    v28 = os.path.join(tmp, "old28.txt")
    with open(v28, "w") as f:
        f.write("# NCCL version 2.8.4+cuda11.2\n" + OLD)
    shape = ("--nodes", "1", "--gpus-per-node", "8", "--preset", "dgx-a100", "--collective", "allreduce", "--rows")
    r30 = run("validate", "nccl", old, *shape)
    r28 = run("validate", "nccl", v28, *shape)
    rset = run("validate", "nccl", old, *shape, "--set", "network.nccl_tuning=2.8")
    first = lambda r: re.search(r"^\s+4\s+30\.25\s+(\S+)", r.stdout, re.M)
    t30, t28, tset = (first(r) for r in (r30, r28, rset))
    check(t30 and t28 and tset and t30.group(1) != t28.group(1) and t28.group(1) == tset.group(1),
          f"the version line selects NCCL 2.8's figures ({t30 and t30.group(1)}, {t28 and t28.group(1)}, "
          f"{tset and tset.group(1)})")
    # --fit on the user's file writes the keys, and a scenario with them runs.
    out = os.path.join(tmp, "fit.ini")
    r = run("validate", "nccl", old, "--nodes", "1", "--gpus-per-node", "8", "--preset", "dgx-h100",
            "--collective", "allreduce", "--fit", "--fit-rounds", "1", "-o", out)
    check(r.returncode == 0 and os.path.exists(out), f"--fit writes {out} ({r.stderr[-300:]})")
    if os.path.exists(out):
        text = open(out).read()
        keys = dict(re.findall(r"^(nccl_\w+) = (\S+)$", text, re.M))
        for k in ("nccl_model", "nccl_launch", "nccl_nvl_efficiency", "nccl_net_efficiency", "nccl_p2p_net_efficiency", "nccl_step_scale", "nccl_net_step_scale",
                  "nccl_ll_efficiency", "nccl_ll128_efficiency", "nccl_nvls_step",
                  "nccl_p2p_channel_bandwidth", "nccl_p2p_net_channel_bandwidth"):
            check(k in keys, f"--fit names {k}")
        # no sendrecv table: nothing measures a grouped send's channel, so no limit is written
        check(keys.get("nccl_p2p_channel_bandwidth") == "0.0000GBps"
              and keys.get("nccl_p2p_net_channel_bandwidth") == "0.0000GBps",
              f"--fit without sendrecv tables writes no channel limit for grouped sends ({keys})")
        sets = [a for k, v in keys.items() for a in ("--set", f"network.{k}={v}")]
        r = run("config", os.path.join(SRC, "scenarios", "quickstart.ini"), "--set", "network.preset=dgx-h100",
                "--set", "network.library=nccl", *sets)
        check(r.returncode == 0, f"a scenario with the fitted keys resolves ({r.stderr[-300:]})")
    # Bad input.
    empty = os.path.join(tmp, "all_reduce_empty.txt")
    with open(empty, "w") as f:
        f.write("# nothing measured\nhello\n")
    r = run("validate", "nccl", empty, "--nodes", "1", "--gpus-per-node", "8", "--preset", "dgx-h100")
    check(r.returncode == 2 and empty in r.stderr and "no nccl-tests row" in r.stderr,
          f"a file without rows is refused by name, exit 2 ({r.returncode}: {r.stderr.strip()})")
    r = run("validate", "nccl", new, "--preset", "dgx-h100")
    check(r.returncode == 2 and "--nodes" in r.stderr, f"a missing shape is a usage error ({r.stderr.strip()})")
    r = run("validate", "nccl", "--table", "no_such_table")
    check(r.returncode == 2 and "no_such_table" in r.stderr, f"an unknown table is named ({r.stderr.strip()})")
    r = run("validate", "nccl", new, "--nodes", "1", "--gpus-per-node", "8", "--preset", "dgx-h100",
            "--set", "network.nccl_launch=-1us")
    check(r.returncode == 2 and "nccl_launch" in r.stderr, f"a bad --set names its key ({r.stderr.strip()})")


def gpus_per_thread(tmp):
    """A file whose header says nGpus 8 (one thread drove 8 GPUs) takes at least the thread's
    launches, nccl_launch + 7 nccl_launch_gpu, a call (a 4-byte call runs shorter, so it takes
    exactly that); one without the header is one GPU a thread."""
    rows = OLD.splitlines()[2:]
    times = {}
    for name, head in (("one.txt", ""), ("eight.txt", "# nThread 1 nGpus 8 minBytes 4 maxBytes 4194304\n")):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(head + "\n".join(OLD.splitlines()[:2] + rows) + "\n")
        r = run("validate", "nccl", path, "--nodes", "1", "--gpus-per-node", "8", "--preset", "dgx-h100",
                "--collective", "allreduce", "--rows", "--set", "network.nccl_launch_gpu=3us",
                "--set", "network.nccl_launch=2us")
        m = re.search(r"^\s+4\s+30\.25\s+([\d.]+)\s", r.stdout, re.M)
        check(r.returncode == 0 and m is not None, f"{name}: the 4-byte row simulated ({r.stderr[-300:]})")
        times[name] = float(m.group(1)) if m else float("nan")
    check(abs(times["eight.txt"] - 23.0) < 0.02 and times["one.txt"] < 23.0,
          f"nGpus 8: a 4-byte call takes 2 + 7 x 3 us ({times})")


def main():
    # --quick (the sanitizer builds, where every simulation's fork costs seconds): three tables
    corpus("--quick" in sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        user_files(tmp)
        gpus_per_thread(tmp)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("nccl_validation: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

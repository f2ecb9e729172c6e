#!/usr/bin/env python3
"""The real network mode ([execute] network = mpi, docs/CLUSTER.md "Real mode").

Every method of the registry (deftsim config --methods; Ok-Topk without its warm-up) at d = 0.01 over two iterations of traces/fmnist_cnn_p4, with [network] compute =
none, runs at P = 2, 3 and 4 twice: once as one process (network = simulate) and once as
`mpirun --oversubscribe -n P deftsim run` (network = mpi). Checked:

  - every column but the measured times (phase_seconds, select_seconds, ... as
    tests/reliability/rowcmp.py lists them) and the four real-mode columns is the same text
    in both runs: selections, bytes and (compute = none) the simulated times; the one-process
    run leaves the four real-mode columns empty;
  - every row of the real run has comm_measured_seconds, every collective row a positive
    measured_seconds, and comm_measured_seconds is the sum of the iteration's collectives';
  - the bytes the executor counted on each rank (measured_bytes_sent, measured_bytes_recv)
    against the schedule's traffic of the row (phase_bytes_sent, phase_bytes_recv:
    deftsim_step_traffic's reference algorithms). Point-to-point steps (sendrecv, p2p) and
    alltoall: equal on every rank. allgather(v) and bcast, which MPI runs with an algorithm
    of its own: equal received bytes on every rank (each rank must receive every other
    block, or the root's payload, once), and the same sum over the ranks of the sent bytes
    (every block delivered to P - 1 ranks). allreduce: each rank's vector, sent and received
    once, equals the reference ring's total traffic over 2 (P - 1) ranks' worth;
  - the manifest's mpi.buffers says where the payload lived: "device: ..." (CUDA, a device on
    every rank and a CUDA-aware MPI) or "host: ..." with what is missing;
  - a [workers] count other than the number of ranks is refused with exit status 2.

Exit 77 (skipped) when deftsim was built without MPI or mpirun is missing. Run by meson test
(suite fast); DEFTSIM_EXE, DEFTSIM_SOURCE_ROOT and DEFTSIM_MPI as tests/engine/meson.build sets.
"""
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

EXE = os.environ.get("DEFTSIM_EXE")
ROOT = os.environ.get("DEFTSIM_SOURCE_ROOT")
if not EXE or not ROOT:
    sys.exit("DEFTSIM_EXE or DEFTSIM_SOURCE_ROOT is not set (run through meson test)")
if os.environ.get("DEFTSIM_MPI") != "1":
    print("deftsim was built without MPI: skipped")
    sys.exit(77)
MPIRUN = shutil.which("mpirun")
if not MPIRUN:
    print("no mpirun on PATH: skipped")
    sys.exit(77)
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
# Containers often forbid the cross-memory attach (CMA) of Open MPI's shared-memory transport.
os.environ.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")

TRACE = os.path.join(ROOT, "traces", "fmnist_cnn_p4")
sys.path.insert(0, os.path.join(ROOT, "tests", "reliability"))
import registry  # noqa: E402

METHODS = registry.methods(EXE)  # every method of the registry
MEASURED = {"phase_seconds", "phase_seconds_min", "phase_seconds_max", "select_seconds",
            "select_seconds_min", "select_seconds_max", "worker_seconds", "imbalance_seconds",
            "prepare_seconds", "step_seconds", "ref_seconds"}
REAL = ["measured_seconds", "measured_bytes_sent", "measured_bytes_recv",
        "comm_measured_seconds"]
SCENARIO = f"""[scenario]
name = real
seed = 21
iterations = 2
[gradients]
source = trace
trace = {TRACE}
[sparsify]
methods = {", ".join(METHODS)}
densities = 0.01
oktopk_warmup = 0
[network]
compute = none
[execute]
network = mpi
"""

failures = []


def fail(what):
    failures.append(what)
    print("FAIL:", what, file=sys.stderr, flush=True)


def run(cmd, what, expect=0):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if expect is not None and p.returncode != expect:
        sys.exit(f"{what}: exit {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}")
    return p


def rows(path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return r[0], r[1:]


def compare_untimed(P, head, ref, real):
    if len(ref) != len(real):
        fail(f"P={P}: {len(ref)} rows alone, {len(real)} under mpirun")
        return
    cols = [i for i, n in enumerate(head) if n not in MEASURED and n not in REAL]
    for a, b in zip(ref, real):
        for i in cols:
            if a[i] != b[i]:
                fail(f"P={P}: {a[head.index('method')]} iteration {a[head.index('iteration')]} "
                     f"worker {a[head.index('worker')]} {a[head.index('phase')]}: {head[i]} "
                     f"{a[i]!r} alone, {b[i]!r} under mpirun")
                return
        for n in REAL:
            if a[head.index(n)] != "":
                fail(f"P={P}: the one-process run has {n} = {a[head.index(n)]!r}")
                return


def check_measured(P, head, real):
    c = {n: head.index(n) for n in head}
    groups = {}
    kinds = set()
    for r in real:
        key = (r[c["method"]], r[c["iteration"]])
        if r[c["comm_measured_seconds"]] == "":
            fail(f"P={P}: {key}: a row without comm_measured_seconds")
            return
        kind = r[c["phase_kind"]]
        if kind in ("compute", "model", "none"):
            if r[c["measured_seconds"]] != "":
                fail(f"P={P}: {key}: a {kind} row with measured_seconds")
            continue
        kinds.add(kind)
        t = float(r[c["measured_seconds"]])
        if not (t > 0 and math.isfinite(t)):
            fail(f"P={P}: {key} {r[c['phase']]}: measured_seconds {t}")
        g = groups.setdefault(key + (r[c["phase_index"]],), {"kind": kind, "rows": []})
        g["rows"].append(r)
    # comm_measured_seconds: the sum of the iteration's collectives (worker 0's rows).
    sums = {}
    for (m, it, _), g in groups.items():
        w0 = [r for r in g["rows"] if r[c["worker"]] == "0"]
        sums[(m, it)] = sums.get((m, it), 0.0) + float(w0[0][c["measured_seconds"]])
    for r in real:
        k = (r[c["method"]], r[c["iteration"]])
        if k in sums and abs(float(r[c["comm_measured_seconds"]]) - sums[k]) > 1e-12 + 1e-9 * sums[k]:
            fail(f"P={P}: {k}: comm_measured_seconds {r[c['comm_measured_seconds']]} is not "
                 f"the sum {sums[k]} of its collectives")
            return
    checked = 0
    for key, g in groups.items():
        rs = g["rows"]
        if len(rs) != P:
            fail(f"P={P}: {key}: {len(rs)} rows, not one a worker")
            continue
        ms = [int(r[c["measured_bytes_sent"]]) for r in rs]
        mr = [int(r[c["measured_bytes_recv"]]) for r in rs]
        ps = [int(r[c["phase_bytes_sent"]]) for r in rs]
        pr = [int(r[c["phase_bytes_recv"]]) for r in rs]
        kind = g["kind"]
        if kind in ("sendrecv", "p2p", "alltoall"):
            ok = ms == ps and mr == pr
        elif kind in ("allgather", "bcast"):
            ok = mr == pr and sum(ms) == sum(ps)
        elif kind == "allreduce":
            ok = ms == mr and all(2 * (P - 1) * x == sum(ps) for x in ms)
        else:
            fail(f"P={P}: {key}: unknown collective kind {kind}")
            continue
        if not ok:
            fail(f"P={P}: {key} {kind}: counted sent {ms} recv {mr}, schedule traffic sent "
                 f"{ps} recv {pr}")
        checked += 1
    print(f"  P={P}: {checked} collectives' counted bytes agree with the schedule's traffic "
          f"({', '.join(sorted(kinds))})", flush=True)
    return kinds


def check_analyze(P, ref, real, head, rb):
    """deftsim analyze: measured.csv and the table in summary.md for the real rows only."""
    run([EXE, "analyze", ref, "-q"], f"P={P}: analyze alone")
    if os.path.exists(os.path.join(ref, "measured.csv")):
        fail(f"P={P}: measured.csv without measured rows")
    p = run([EXE, "analyze", real], f"P={P}: analyze under mpirun")
    with open(os.path.join(real, "summary.md")) as f:
        if "## Measured against simulated communication" not in f.read():
            fail(f"P={P}: summary.md has no measured table")
    if "Measured against simulated" not in p.stdout:
        fail(f"P={P}: analyze printed no measured table")
    c = {n: head.index(n) for n in head}
    want = {}
    for r in rb:  # worker 0's collective rows: the table's lines, with their means
        if r[c["worker"]] != "0" or r[c["measured_seconds"]] == "":
            continue
        k = (r[c["method"]], r[c["phase_index"]], r[c["phase"]])
        want.setdefault(k, []).append(float(r[c["measured_seconds"]]))
    with open(os.path.join(real, "measured.csv"), newline="") as f:
        got = [x for x in csv.DictReader(f) if x["phase_index"] != "-1"]
    if len(got) != len(want):
        fail(f"P={P}: measured.csv has {len(got)} collectives, the rows {len(want)}")
        return
    for x in got:
        v = want.get((x["method"], x["phase_index"], x["collective"]))
        mean = sum(v) / len(v) if v else float("nan")
        if not v or abs(float(x["measured_seconds"]) - mean) > 1e-12 + 1e-9 * mean:
            fail(f"P={P}: measured.csv {x['method']} {x['collective']}: "
                 f"{x['measured_seconds']} against the rows' mean {mean}")
            return
        sim, ratio = float(x["simulated_seconds"]), x["ratio"]
        if sim > 0 and abs(float(ratio) - mean / sim) > 1e-9 * mean / sim:
            fail(f"P={P}: measured.csv {x['method']} {x['collective']}: ratio {ratio}")
            return


def main():
    tmp = tempfile.mkdtemp(prefix="deftsim_real_")
    try:
        scen = os.path.join(tmp, "real.ini")
        with open(scen, "w") as f:
            f.write(SCENARIO)
        allkinds = set()
        for P in (2, 3, 4):
            ref, real = os.path.join(tmp, f"ref{P}"), os.path.join(tmp, f"mpi{P}")
            run([EXE, "run", scen, "-q", "-o", ref, "--set", f"workers.counts={P}",
                 "--set", "execute.network=simulate"], f"P={P} alone")
            run([MPIRUN, "--oversubscribe", "-n", str(P), EXE, "run", scen, "-q", "-o", real,
                 "--set", f"workers.counts={P}"], f"P={P} under mpirun")
            ha, ra = rows(os.path.join(ref, "rows.csv"))
            hb, rb = rows(os.path.join(real, "rows.csv"))
            if ha != hb:
                fail(f"P={P}: other headers")
                continue
            methods = {r[ha.index("method")] for r in rb}
            if methods != set(METHODS):
                fail(f"P={P}: methods {sorted(methods)}")
            compare_untimed(P, ha, ra, rb)
            # Where the payload lived, with the reason (device memory needs CUDA, a device on
            # every rank and a CUDA-aware MPI; without them host memory, saying what is missing).
            buffers = json.load(open(os.path.join(real, "manifest.json")))["mpi"].get("buffers", "")
            if not (buffers.startswith("host: ") or buffers.startswith("device: ")):
                fail(f"P={P}: manifest mpi.buffers = {buffers!r}")
            elif P == 2:
                print(f"payload buffers: {buffers}", flush=True)
            allkinds |= check_measured(P, hb, rb) or set()
            print(f"P={P}: {len(rb)} rows, every untimed column as the one-process run's",
                  flush=True)
            check_analyze(P, ref, real, hb, rb)
        want = {"allgather", "allreduce", "bcast", "sendrecv", "p2p"}
        if not want <= allkinds:
            fail(f"collective kinds seen {sorted(allkinds)}, expected at least {sorted(want)}")
        # A worker count other than the number of ranks is refused before anything runs.
        p = run([MPIRUN, "--oversubscribe", "-n", "2", EXE, "run", scen, "-q", "-o",
                 os.path.join(tmp, "bad"), "--set", "workers.counts=3"], "P=3 on 2 ranks",
                expect=None)
        if p.returncode == 0 or "mpirun started 2 ranks" not in p.stderr:
            fail(f"P=3 on 2 ranks: exit {p.returncode}, stderr {p.stderr[-400:]!r}")
        else:
            print("P=3 on 2 ranks: refused", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} failures")
    print("real mode: ok")


if __name__ == "__main__":
    main()

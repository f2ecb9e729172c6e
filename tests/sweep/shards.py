#!/usr/bin/env python3
"""deftsim sweep --shard I/N and --merge (docs/CLUSTER.md, "Sharded sweeps").

One small sweep (a 135k-element synthetic model, topk, deft and dgc, P = 2, 3, 4, two network
bandwidths as an axis: 18 points; [network] compute = none, so that the simulated times depend
on the bytes alone) runs once whole, the reference, and then as N = 3 shards:

  sequential  the shards one after the other into one folder: the last one joins;
  concurrent  the 3 shards as 3 processes at once into one fresh folder (three rounds, so that
              the race for creating manifest.json and shards/plan.json is run more than once);
  killed      shard 1 killed with SIGKILL while a point runs (its network simulation's child
              is there), then resumed; the other shards run after it.

Every sharded folder must hold what the reference holds: the same point files, each with the
same rows in every column but the measured times (tests/reliability/rowcmp.py, simulated times
to the last digit), rows.csv the same rows in the same order, a manifest listing every point
done with the same ids in the same order and status complete, and deftsim analyze's
summary.csv the same in every column not derived from measured times. --dry-run --shard I/N
lists exactly the plan's points dealt to shard I by estimated cost (here P: longest first onto
the least loaded shard), each shard a third of the work; --merge is idempotent (rows.csv and
manifest.json byte for byte the same after it) and refuses an incomplete folder naming the
missing points, a folder of another split and a shard of another sweep; a shard of another
sweep, another split or another plan is refused before it runs; --rerun-noisy --shard reruns
only the shard's noisy point; a sweep without --shard folds finished shards into the manifest.
Bad --shard values are usage errors (exit 2) naming the option. Run by meson test (suite fast);
DEFTSIM_EXE names the program.
"""
import csv
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
import rowcmp  # noqa: E402

EXE = os.environ.get("DEFTSIM_EXE")
if not EXE:
    sys.exit("DEFTSIM_EXE is not set (run through meson test)")

MODEL = """index,name,shape,numel
0,conv.weight,32x3x3x3,864
1,conv.bias,32,32
2,fc1.weight,256x512,131072
3,fc1.bias,256,256
4,fc2.weight,10x256,2560
5,fc2.bias,10,10
"""
N = 3
VARY = ["--vary", "network.bandwidth=10Gbps,1Gbps"]
# summary.csv columns computed from measured times (docs/ANALYSIS.md): not compared.
TIMED = ("select_seconds", "compute_seconds", "imbalance_seconds", "imbalance_cost",
         "select_median_worker", "select_spread", "select_exponent", "select_speedup", "phase_",
         "noisy", "ref_seconds", "select_ref")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr, flush=True)
    return cond


def run(*args, want=0):
    p = subprocess.run([EXE, *args], capture_output=True, text=True)
    if p.returncode != want:
        check(False, f"deftsim {' '.join(args)}: exit {p.returncode}, want {want}\n{p.stderr}")
    return p


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_csv(path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return r[0], r[1:]


def manifest(out):
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)


def point_files(out):
    """Relative paths of every point file (.csv under points/)."""
    found = set()
    for root, _, names in os.walk(os.path.join(out, "points")):
        for n in names:
            if n.endswith(".csv"):
                found.add(os.path.relpath(os.path.join(root, n), out))
    return found


def compare_folder(what, out, ref):
    """out holds what the whole sweep ref holds."""
    files = point_files(out)
    check(files == point_files(ref), f"{what}: point files {sorted(files ^ point_files(ref))} differ")
    for rel in sorted(files & point_files(ref)):
        h, rows = read_csv(os.path.join(out, rel))
        rh, rrows = read_csv(os.path.join(ref, rel))
        rowcmp.compare(f"{what}: {rel}", h, rows, rh, rrows, lambda m: check(False, m),
                       exact_simulated=True)
    h, rows = read_csv(os.path.join(out, "rows.csv"))
    rh, rrows = read_csv(os.path.join(ref, "rows.csv"))
    rowcmp.compare(f"{what}: rows.csv", h, rows, rh, rrows, lambda m: check(False, m),
                   exact_simulated=True)
    m, rm = manifest(out), manifest(ref)
    ids = [p["id"] for p in m["points"]]
    check(ids == [p["id"] for p in rm["points"]], f"{what}: the manifest's points {ids}")
    check(all(p["status"] == "done" for p in m["points"]), f"{what}: every point done")
    check(m["status"] == "complete" and m["rows_csv"] == "rows.csv", f"{what}: status {m['status']}")
    check(m["identity"] == rm["identity"] and m["axes"] == rm["axes"], f"{what}: identity, axes")
    check(m.get("shards", {}).get("count") == N, f"{what}: the manifest names the {N} shards")


def compare_summary(what, out, ref):
    for d in (out, ref):
        run("analyze", d, "-q")
    h, rows = read_csv(os.path.join(out, "summary.csv"))
    rh, rrows = read_csv(os.path.join(ref, "summary.csv"))
    if not check(h == rh and len(rows) == len(rrows), f"{what}: summary.csv's shape"):
        return
    keep = [i for i, c in enumerate(h) if not c.startswith(TIMED)]
    check(len(keep) > 20, f"{what}: summary.csv's untimed columns ({len(keep)})")
    for i, (a, b) in enumerate(zip(rows, rrows)):
        for c in keep:
            if a[c] != b[c]:
                check(False, f"{what}: summary.csv row {i + 2} column {h[c]}: {a[c]!r}, the "
                             f"whole sweep {b[c]!r}")
                return


def dry_listing(scen, out, *extra):
    """(plan number, file) of each point --dry-run lists."""
    p = run("sweep", scen, "-o", out, *VARY, "--dry-run", *extra)
    rows = []
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0].isdigit() and f[1] in ("run", "done", "retry"):
            rows.append((int(f[0]), f[-1]))
    return rows


def shard_args(scen, out, i, *extra):
    return ["sweep", scen, "-o", out, *VARY, "--shard", f"{i}/{N}", "-q", *extra]


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return f.read().split()
    except OSError:
        return []


def killed_shard(scen, out, ref):
    """Shard 1 killed with SIGKILL while one of its points runs, then resumed."""
    for attempt in range(5):
        shutil.rmtree(out, ignore_errors=True)
        p = subprocess.Popen([EXE, *shard_args(scen, out, 1)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        hit = False
        while p.poll() is None:
            if children(p.pid):  # the network simulation of a point: it is mid-point
                os.kill(p.pid, signal.SIGKILL)
                hit = True
                break
            time.sleep(0.0005)
        p.wait()
        if hit:
            break
    if not check(hit, "shard 1 was killed while a point ran"):
        return
    with open(os.path.join(out, "shards", f"shard-1-of-{N}.json")) as f:
        check(json.load(f)["status"] == "running", "the killed shard's file says running")
    q = run(*shard_args(scen, out, 1)[:-1], "--progress", "lines")
    check("points: " in q.stderr and "run" in q.stderr, f"the resumed shard finishes: {q.stderr}")
    for i in (0, 2):
        run(*shard_args(scen, out, i))
    leftovers = [n for r, _, ns in os.walk(out) for n in ns
                 if (".tmp." in n or ".csv.rows." in n or ".new." in n or ".join." in n)
                 and not r.endswith("platforms")]
    check(not leftovers, f"no temporary file left: {leftovers}")
    compare_folder("killed", out, ref)


def refusals(scen, tmp, seq):
    """Shards and merges that do not belong are refused, naming why."""
    p = run(*shard_args(scen, seq, 0, "--set", "scenario.seed=9"), want=2)
    check("another sweep" in p.stderr and "seed" in p.stderr, f"another sweep's shard: {p.stderr}")
    p = run("sweep", scen, "-o", seq, *VARY, "--shard", "0/2", "-q", want=2)
    check(f"swept in {N} shards, not 2" in p.stderr, f"another split: {p.stderr}")
    p = run(*shard_args(scen, seq, 0, "--set", "workers.counts=2,4"), want=2)
    check("another plan" in p.stderr, f"another plan: {p.stderr}")
    # An incomplete folder: shard 2 never ran, one of shard 0's points is lost.
    inc = os.path.join(tmp, "incomplete")
    run(*shard_args(scen, inc, 0))
    run(*shard_args(scen, inc, 1))
    mine0 = [f for _, f in dry_listing(scen, inc, "--shard", f"0/{N}")]
    os.remove(os.path.join(inc, mine0[1]))  # a point of shard 0
    missing = len(dry_listing(scen, inc, "--shard", f"2/{N}")) + 1
    p = run("sweep", "--merge", inc, want=2)
    check(f"{missing} of the plan's 18 points are not finished" in p.stderr and
          f"shard 2/{N}: not started" in p.stderr and "is missing" in p.stderr,
          f"the merge names what is missing: {p.stderr}")
    check(not os.path.exists(os.path.join(inc, "rows.csv")), "an incomplete merge writes no rows.csv")
    # A stray shard of another split in a finished folder.
    stray = os.path.join(seq, "shards", "shard-0-of-2.json")
    shutil.copy(os.path.join(seq, "shards", f"shard-0-of-{N}.json"), stray)
    p = run("sweep", "--merge", seq, want=2)
    check("2-way split" in p.stderr, f"the merge refuses a shard of another split: {p.stderr}")
    os.remove(stray)
    p = run("sweep", "--merge", os.path.join(tmp, "nothing"), want=2)
    check("no shard of a sweep has run" in p.stderr, f"--merge without shards: {p.stderr}")
    for bad in ("3/3", "-1/3", "1/0", "a/3", "2", "1/3/4", ""):
        p = run("sweep", scen, "--shard", bad, "--dry-run", want=2)
        check("--shard" in p.stderr, f"--shard {bad!r} is a usage error naming it: {p.stderr}")
    p = run("sweep", "--merge", seq, "--shard", "0/3", want=2)
    check("--merge" in p.stderr, f"--merge with --shard: {p.stderr}")


def rerun_noisy(scen, seq):
    """--rerun-noisy --shard reruns only its shard's noisy points, and the join follows."""
    m = manifest(seq)
    with open(os.path.join(seq, "shards", "plan.json")) as f:
        ones = [e["id"] for e in json.load(f)["points"] if e["shard"] == 1]
    noisy = [p for p in m["points"] if p["id"] == ones[1]][0]  # a point of shard 1
    for p in m["points"]:
        path = os.path.join(seq, p["file"])
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        lo, hi = rows[0].index("select_seconds_min"), rows[0].index("select_seconds_max")
        for r in rows[1:]:
            r[hi] = repr(float(r[lo]) * (10.0 if p is noisy else 1.0) + (1.0 if p is noisy else 0))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        with open(path, "w") as f:
            f.write(buf.getvalue())
    before = {p["id"]: digest(os.path.join(seq, p["file"])) for p in m["points"]}
    time.sleep(1.1)  # the records' timestamps have one-second resolution
    for i in (0, 2):
        run(*shard_args(scen, seq, i, "--rerun-noisy"))
    after = {p["id"]: digest(os.path.join(seq, p["file"])) for p in m["points"]}
    check(after == before, "--rerun-noisy on the other shards runs nothing")
    q = run("sweep", scen, "-o", seq, *VARY, "--shard", f"1/{N}", "--rerun-noisy", "--progress",
            "lines")
    check("1 noisy, run again" in q.stderr and "joined" in q.stderr, f"shard 1 reruns: {q.stderr}")
    after = {p["id"]: digest(os.path.join(seq, p["file"])) for p in m["points"]}
    for pid in before:
        check((after[pid] != before[pid]) == (pid == noisy["id"]),
              f"{pid}: {'replaced' if pid == noisy['id'] else 'untouched'}")
    new = {p["id"]: p for p in manifest(seq)["points"]}
    check(new[noisy["id"]]["finished"] != noisy["finished"], "the joined manifest has its new record")


def main():
    tmp = tempfile.mkdtemp(prefix="deftsim-shards-")
    try:
        with open(os.path.join(tmp, "model.csv"), "w") as f:
            f.write(MODEL)
        scen = os.path.join(tmp, "shards.ini")
        with open(scen, "w") as f:
            f.write(f"""[scenario]
name = shards
seed = 7
iterations = 4
output = {tmp}/out
[gradients]
model = {tmp}/model.csv
[sparsify]
methods = topk, deft, dgc
densities = 0.05
[workers]
counts = 2, 3, 4
[network]
compute = none
[timing]
repeats = 3
""")
        ref = os.path.join(tmp, "whole")
        run("sweep", scen, "-o", ref, *VARY, "-q")

        # The shards' listings: the plan's indices (from 0) dealt by estimated cost, here
        # proportional to P (one model, one iteration count): longest first onto the least
        # loaded shard, ties by index; together the whole plan, the same work each.
        whole = dry_listing(scen, ref)
        check(len(whole) == 18, f"the plan has 18 points ({len(whole)})")
        check([k for k, _ in whole] == list(range(18)), "the listing counts from 0")
        cost = {k: int(f.rsplit("_P", 1)[1][:-4]) for k, f in whole}
        load, deal = [0] * N, {}
        for k in sorted(cost, key=lambda k: (-cost[k], k)):
            deal[k] = min(range(N), key=lambda q: (load[q], q))
            load[deal[k]] += cost[k]
        union = []
        for i in range(N):
            mine = dry_listing(scen, os.path.join(tmp, "fresh"), "--shard", f"{i}/{N}")
            check([k for k, _ in mine] == [k for k, _ in whole if deal[k] == i],
                  f"--dry-run --shard {i}/{N} lists the points dealt to it: {mine}")
            check(sum(cost[k] for k, _ in mine) == sum(cost.values()) // N,
                  f"shard {i}/{N}: a third of the plan's work")
            union += mine
        check(sorted(union) == sorted((k, f) for k, f in whole), "the shards cover the plan")
        check(not os.path.exists(os.path.join(tmp, "fresh")), "--dry-run --shard writes nothing")

        seq = os.path.join(tmp, "sequential")
        for i in range(N):
            p = run(*shard_args(scen, seq, i)[:-1], "--progress", "lines")
            joined = "rows.csv and manifest.json joined" in p.stderr
            check(joined == (i == N - 1), f"shard {i}: joined only by the last ({p.stderr})")
            check(os.path.exists(os.path.join(seq, "rows.csv")) == (i == N - 1),
                  f"shard {i}: rows.csv only once every shard finished")
        compare_folder("sequential", seq, ref)
        compare_summary("sequential", seq, ref)
        files = ("rows.csv", "manifest.json")
        joined = [digest(os.path.join(seq, n)) for n in files]
        run("sweep", "--merge", seq, "-q")
        run("sweep", "--merge", seq, "-q")
        check([digest(os.path.join(seq, n)) for n in files] == joined,
              "--merge after the last shard's join writes the same bytes")

        for r in range(3):
            conc = os.path.join(tmp, f"concurrent{r}")
            procs = [subprocess.Popen([EXE, *shard_args(scen, conc, i)], stderr=subprocess.PIPE,
                                      text=True) for i in range(N)]
            errs = [p.communicate()[1] for p in procs]
            check(all(p.returncode == 0 for p in procs), f"concurrent shards: {errs}")
            compare_folder(f"concurrent round {r}", conc, ref)
        compare_summary("concurrent", os.path.join(tmp, "concurrent0"), ref)

        killed_shard(scen, os.path.join(tmp, "killed"), ref)
        refusals(scen, tmp, seq)
        rerun_noisy(scen, seq)

        # Without --shard, a finished sharded folder is folded into one manifest.
        run("sweep", scen, "-o", seq, *VARY, "-q")
        check(not os.path.exists(os.path.join(seq, "shards")), "the fold removes shards/")
        m = manifest(seq)
        check(m["status"] == "complete" and len(m["points"]) == 18 and "shards" not in m,
              "the folded manifest lists every point")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("shards: ok")


if __name__ == "__main__":
    main()

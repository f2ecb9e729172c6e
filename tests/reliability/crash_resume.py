#!/usr/bin/env python3
"""Crash safety of deftsim sweep: SIGKILL at random moments, resume until done, compare.

A sweep of 40 points (5 methods x 2 densities x 4 worker counts, the network simulation on,
a 134k-element synthetic model) runs once uninterrupted (the reference), then again into a
second folder where it is killed with SIGKILL (the sweep process only, as the OOM killer or
`kill -9 PID` would) and resumed, over and over, until a resume finishes. The kill moments are
drawn from a seeded generator (the seed is printed; DEFTSIM_CRASH_SEED replays the choices,
though not the machine's timing) with four kinds of kill:

  random  after a uniform random delay of up to one point's time
  sim     while the network simulation's forked child runs (a few ms after it appears)
  commit  as soon as a temporary file other than a point's appears (the manifest's, a
          platform's, rows.csv's): the kill lands inside deftsim_afile_commit's window
  point   as soon as a new point file is renamed into place, before the manifest lists it

Each attempt first lets r points finish (its progress lines), r drawn so that the points left
are shared among the kills left, so the kills spread over the whole sweep; one more kill lands
while rows.csv is written, at the end.

After every kill, before resuming: the manifest (if any) is valid JSON, every point file in
the folder is complete (its rows equal the reference's), every point the manifest lists as
done has its file, and no simulation child outlives the sweep (it would keep running, and
used to keep the folder's lock). Every resume must either finish (exit 0) or be killed: a
resume refused (the folder locked, a manifest unreadable) fails the test.

At the end the folder must hold exactly what the reference holds: the same files (no
temporary file left, here or in TMPDIR), the same rows in every point file and in rows.csv.
Columns compared exactly: every one except the measured times (phase_seconds,
select_seconds, worker_seconds, imbalance_seconds, prepare_seconds, step_seconds;
docs/OUTPUT.md) and the simulated ones. The simulated times (sim_start, sim_end,
comm_seconds, select_critical_seconds, iteration_seconds) are computed from the measured
compute phases, so no two runs agree on them to the last bit: they may differ by what the
iteration's measured compute allows (rowcmp.py; the test prints the largest share of that
allowance it saw). The scenario puts the network at 80 bit/s and 1 s latency, where the
simulated times are thousands of seconds and the allowance about 1e-7 to 1e-4 of them.

Two fixed cases follow: leftovers of every kind planted in a sweep with variant folders must
go with the next resume (a temporary file of deftsim analyze must stay); and a sweep killed
0.05 s into a long simulation (P = 256) must be resumable at once, its child gone.

Run by meson test (suite fast); DEFTSIM_EXE names the program. DEFTSIM_CRASH_KILLS sets the
number of kills (default 14).
"""
import csv
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import rowcmp

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
TINY = """index,name,shape,numel
0,conv.weight,16x3x3x3,432
1,conv.bias,16,16
2,fc1.weight,64x32,2048
3,fc1.bias,64,64
4,fc2.weight,10x64,640
5,fc2.bias,10,10
"""
METHODS = ["deft", "topk", "dgc", "gtopk", "cltk"]
DENSITIES = ["0.01", "0.1"]
COUNTS = [2, 4, 8, 16]
ITERS = 4


failures = []
worst_sim = [0.0]  # the largest deviation of a simulated time seen, as a fraction of its allowance


def fail(what):
    failures.append(what)
    print("FAIL:", what, file=sys.stderr, flush=True)


def log(*a):
    print(*a, flush=True)


def read_rows(path):
    """Header and rows of a CSV that must parse completely: one header, every row as wide
    as the header, the file ending with a newline."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.endswith(b"\n"):
        raise ValueError(f"{path}: does not end with a newline (cut short?)")
    r = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    if not r:
        raise ValueError(f"{path}: empty")
    head, rows = r[0], r[1:]
    for i, row in enumerate(rows):
        if len(row) != len(head):
            raise ValueError(f"{path}: row {i + 2} has {len(row)} cells, the header {len(head)}")
    return head, rows


def compare_rows(what, head, rows, rhead, rrows):
    """Deterministic columns exactly, simulated times within what the measured compute allows
    (rowcmp.py)."""
    w = rowcmp.compare(what, head, rows, rhead, rrows, fail)
    if w is not None:
        worst_sim[0] = max(worst_sim[0], w)
    return w is not None


def children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def still_alive(pids, grace=5.0):
    """The pids of pids still alive after up to grace seconds. A child killed by its
    parent-death signal is not gone at once: its teardown takes time on a loaded machine
    (one check without a grace failed under AddressSanitizer), so it is given a moment
    before it is judged. A child that ignored the signal still fails."""
    t0 = time.monotonic()
    left = [k for k in pids if alive(k)]
    while left and time.monotonic() - t0 < grace:
        time.sleep(0.01)
        left = [k for k in left if alive(k)]
    return left


def tmp_names(root):
    """Temporary files anywhere under root: the atomic writer's <file>.tmp.<pid> and the
    engine's row buffers <file>.rows.XXXXXX."""
    found = []
    for d, _, files in os.walk(root):
        for n in files:
            if ".tmp." in n or ".csv.rows." in n:
                found.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(found)


def all_files(root):
    out = []
    for d, _, files in os.walk(root):
        for n in files:
            out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)


def main():
    seed = os.environ.get("DEFTSIM_CRASH_SEED")
    seed = int(seed) if seed else int.from_bytes(os.urandom(4), "little")
    nkills = int(os.environ.get("DEFTSIM_CRASH_KILLS", "14"))
    log(f"crash_resume: seed {seed} (DEFTSIM_CRASH_SEED={seed} replays the choices), "
        f"{nkills} kills")
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="deftsim-crash-")
    t_test = time.monotonic()
    try:
        tmpdir = os.path.join(tmp, "tmpdir")
        os.makedirs(tmpdir)
        env = dict(os.environ, TMPDIR=tmpdir)
        model = os.path.join(tmp, "model.csv")
        with open(model, "w") as f:
            f.write(MODEL)
        scen = os.path.join(tmp, "crash.ini")
        with open(scen, "w") as f:
            f.write(f"""[scenario]
name = crash
seed = 11
iterations = {ITERS}
[gradients]
model = {model}
[sparsify]
methods = {", ".join(METHODS)}
densities = {", ".join(DENSITIES)}
[workers]
counts = {", ".join(map(str, COUNTS))}
[network]
simulate = 1
bandwidth = 80bps
latency = 1s
""")
        npoints = len(METHODS) * len(DENSITIES) * len(COUNTS)

        # -- the reference ---------------------------------------------------------------------
        ref = os.path.join(tmp, "ref")
        t0 = time.monotonic()
        p = subprocess.run([EXE, "sweep", scen, "-o", ref, "-q"], capture_output=True,
                           text=True, env=env)
        t_ref = time.monotonic() - t0
        if p.returncode != 0:
            sys.exit(f"reference sweep: exit {p.returncode}\n{p.stderr}")
        log(f"reference sweep: {npoints} points in {t_ref:.2f} s")
        ref_rows = {}
        for m in METHODS:
            for d in DENSITIES:
                for P in COUNTS:
                    rel = f"points/{m}_d{d}_P{P}.csv"
                    ref_rows[rel] = read_rows(os.path.join(ref, rel))

        # -- killed and resumed ----------------------------------------------------------------
        out = os.path.join(tmp, "out")
        kinds = ["random", "sim", "commit", "point"]
        seen = {}              # point file -> (inode, mtime_ns) already checked
        kills = []             # (kind, what was happening, seconds into the attempt)
        orphans_left = 0
        attempts = 0
        done = False
        rows_tried = None
        pending_kids = []      # children seen in the attempt before: dead by the next check
        t_point = t_ref / npoints
        remaining = npoints
        while not done:
            attempts += 1
            if attempts > nkills + 20:
                fail("the sweep did not finish after {attempts} attempts")
                break
            if len(kills) < nkills:
                kind = kinds[rng.randrange(len(kinds))]
            elif not rows_tried:
                kind = rows_tried = "rows"  # one kill while rows.csv is written
            else:
                kind = None
            # Spread the kills over the sweep: each attempt first lets r points finish, r drawn
            # so that the points left are shared among the kills left; then it waits for its
            # kind's moment (for the random kind, a delay of up to one point's time).
            per_kill = (remaining - 1) / max(nkills - len(kills), 1)
            r = rng.randint(0, max(0, min(int(2 * per_kill) - 1, remaining - 1)))
            delay = rng.uniform(0.0, t_point)
            jitter = rng.uniform(0.0, 0.003)
            errf = open(os.path.join(tmp, f"attempt{attempts}.err"), "w+")
            ta = time.monotonic()
            proc = subprocess.Popen([EXE, "sweep", scen, "-o", out, "--progress", "lines"],
                                    stdout=subprocess.DEVNULL, stderr=errf, env=env)
            killed = None
            kids = set()
            pdir = os.path.join(out, "points")
            armed = None           # when r points had finished
            start_files = set()
            while kind and proc.poll() is None:
                now = time.monotonic() - ta
                ch = children(proc.pid)
                kids.update(ch)
                hit = None
                if armed is None and kind != "rows":
                    with open(errf.name) as f:
                        finished = sum(1 for line in f if line.startswith("deftsim sweep: ["))
                    if finished >= r:
                        armed = now
                        if os.path.isdir(pdir):
                            start_files = {(n, os.stat(os.path.join(pdir, n)).st_ino)
                                           for n in os.listdir(pdir) if n.endswith(".csv")}
                elif kind == "random":
                    if now - armed >= delay:
                        hit = "running" + (" (simulation child)" if ch else "")
                    hit = "running" + (" (simulation child)" if ch else "")
                elif kind == "sim" and ch:
                    time.sleep(jitter)
                    kids.update(children(proc.pid))
                    hit = "simulation child"
                elif kind == "rows":
                    if any(n.startswith("rows.csv.tmp.") for n in os.listdir(out)):
                        hit = "commit of rows.csv"
                elif kind == "commit":
                    t = [n for n in tmp_names(out) if not (n.startswith("points/") and
                         (".csv.tmp." in n or ".csv.rows." in n))]
                    if t:
                        hit = "commit of " + t[0].split(".tmp.")[0]
                elif kind == "point" and os.path.isdir(pdir):
                    new = set()
                    for n in os.listdir(pdir):
                        try:
                            if n.endswith(".csv"):
                                new.add((n, os.stat(os.path.join(pdir, n)).st_ino))
                        except FileNotFoundError:
                            pass
                    new -= start_files
                    if new:
                        hit = "point file just renamed (" + sorted(new)[0][0] + ")"
                if hit:
                    try:
                        os.kill(proc.pid, signal.SIGKILL)
                        killed = hit
                    except ProcessLookupError:
                        pass
                    break
                if now > max(20.0, 5 * t_ref):
                    break
                time.sleep(0.0002 if kind in ("commit", "point") else 0.001)
            rc = proc.wait()
            errf.seek(0)
            err = errf.read()
            errf.close()
            # A simulation child must not outlive the sweep that was killed: it would run on
            # for nobody (the next attempt, started at once, must not be refused because of
            # it either).
            left = still_alive(pending_kids)
            if left:
                orphans_left += len(left)
                fail(f"simulation child {left} of the attempt before {attempts} still running "
                     f"after attempt {attempts}")
                for k in left:
                    try:
                        os.kill(k, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            pending_kids = []
            if killed and rc == -signal.SIGKILL:
                kills.append((kind, killed, time.monotonic() - ta, r))
                pending_kids = sorted(kids)
            elif rc == 0:
                done = True
            else:
                fail(f"attempt {attempts} ({kind or 'to the end'}): exit {rc}: the folder "
                     f"could not be resumed:\n{err.strip()}")
                if len(failures) > 5:
                    break
                continue
            # The folder as the kill left it (or as the finished sweep left it).
            mpath = os.path.join(out, "manifest.json")
            man = None
            if os.path.exists(mpath):
                try:
                    with open(mpath) as f:
                        man = json.load(f)
                except ValueError as e:
                    fail(f"after attempt {attempts}: manifest.json is not JSON: {e}")
            if os.path.isdir(pdir):
                for n in sorted(os.listdir(pdir)):
                    if not n.endswith(".csv"):
                        continue
                    rel = "points/" + n
                    st = os.stat(os.path.join(out, rel))
                    if seen.get(rel) == (st.st_ino, st.st_mtime_ns):
                        continue
                    seen[rel] = (st.st_ino, st.st_mtime_ns)
                    if rel not in ref_rows:
                        fail(f"after attempt {attempts}: unexpected {rel}")
                        continue
                    try:
                        head, rows = read_rows(os.path.join(out, rel))
                    except ValueError as e:
                        fail(f"after attempt {attempts}: {e}")
                        continue
                    compare_rows(f"after attempt {attempts}: {rel}", head, rows, *ref_rows[rel])
            if man:
                remaining = npoints - sum(1 for e in man.get("points", [])
                                          if e.get("status") == "done")
                for e in man.get("points", []):
                    if e.get("status") == "done" and not os.path.exists(os.path.join(out, e["file"])):
                        fail(f"after attempt {attempts}: the manifest lists {e['file']} as done; "
                             f"it is missing")
            if len(failures) > 20:
                break

        log(f"{len(kills)} kills in {attempts} attempts:")
        for i, (kind, what, t, r) in enumerate(kills):
            log(f"  kill {i + 1:2d}: {kind:6s} at {t:6.3f} s, after {r:2d} points: {what}")
        if len(kills) < min(nkills, 10):
            fail(f"only {len(kills)} kills landed (the sweep finished first)")

        # -- the final folder ------------------------------------------------------------------
        if done:
            left = tmp_names(out)
            if left:
                fail(f"temporary files left in the folder: {left}")
            if os.listdir(tmpdir):
                fail(f"temporary files left in TMPDIR: {sorted(os.listdir(tmpdir))}")
            want = [f for f in all_files(ref)]
            got = [f for f in all_files(out)]
            if want != got:
                fail(f"files differ: only here {sorted(set(got) - set(want))}, only in the "
                     f"reference {sorted(set(want) - set(got))}")
            with open(os.path.join(out, "manifest.json")) as f:
                man = json.load(f)
            if man.get("status") != "complete" or man.get("rows_csv") != "rows.csv":
                fail(f"manifest: status {man.get('status')}, rows_csv {man.get('rows_csv')}")
            with open(os.path.join(ref, "manifest.json")) as f:
                rman = json.load(f)
            if man.get("identity") != rman.get("identity"):
                fail("manifest: identity differs from the reference's")
            ids = [e["id"] for e in man["points"]]
            if ids != [e["id"] for e in rman["points"]]:
                fail("manifest: points differ from the reference's")
            total = 0
            for e in man["points"]:
                if e.get("status") != "done":
                    fail(f"manifest: {e['id']} is {e.get('status')}")
                    continue
                head, rows = read_rows(os.path.join(out, e["file"]))
                if e.get("rows") != len(rows):
                    fail(f"manifest: {e['id']} has rows {e.get('rows')}, its file {len(rows)}")
                compare_rows(e["file"], head, rows, *ref_rows[e["file"]])
                total += len(rows)
            head, rows = read_rows(os.path.join(out, "rows.csv"))
            rhead, rrows = read_rows(os.path.join(ref, "rows.csv"))
            if len(rows) != total:
                fail(f"rows.csv: {len(rows)} rows, the point files {total}")
            compare_rows("rows.csv", head, rows, rhead, rrows)
            # rows.csv is the point files' rows, byte for byte, in the manifest's order.
            with open(os.path.join(out, "rows.csv"), "rb") as f:
                body = f.read().split(b"\n", 1)[1]
            cat = b""
            for e in man["points"]:
                with open(os.path.join(out, e["file"]), "rb") as f:
                    cat += f.read().split(b"\n", 1)[1]
            if body != cat:
                fail("rows.csv is not the point files' rows in order")
            for f_ in all_files(ref):
                if f_.startswith("platforms/"):
                    with open(os.path.join(ref, f_), "rb") as a, open(os.path.join(out, f_), "rb") as b:
                        if a.read() != b.read():
                            fail(f"{f_} differs from the reference's")
        # -- leftovers of every kind, planted in a sweep with variant folders ----------------
        # What a kill can leave, in each place a sweep writes, must go with the next resume;
        # a temporary file of another program (deftsim analyze's summary) must stay.
        vscen = os.path.join(tmp, "vary.ini")
        with open(vscen, "w") as f:
            f.write(f"""[scenario]
name = crash_vary
seed = 5
iterations = 2
[gradients]
model = {os.path.join(tmp, "tiny.csv")}
[sparsify]
methods = topk
densities = 0.1
[workers]
counts = 2
""")
        with open(os.path.join(tmp, "tiny.csv"), "w") as f:
            f.write(TINY)
        vout = os.path.join(tmp, "vary")
        vary = ["--vary", "network.bcast=binomial,scatter_ring_allgather"]
        p = subprocess.run([EXE, "sweep", vscen, "-o", vout, "-q", *vary], capture_output=True,
                           text=True, env=env)
        if p.returncode != 0:
            fail(f"sweep with variants: exit {p.returncode}: {p.stderr.strip()}")
        planted = ["manifest.json.tmp.4001", "rows.csv.tmp.4002",
                   "points/binomial/topk_d0.1_P2.csv.tmp.4003",
                   "points/binomial/topk_d0.1_P2.csv.rows.Ab12Cd",
                   "points/scatter_ring_allgather/topk_d0.1_P2.failed.tmp.4004",
                   "points/binomial/platforms/P2.xml.tmp.4005",
                   "points/scatter_ring_allgather/platforms/P2.xml.tmp.4006"]
        keep = "summary.csv.tmp.4007"
        for n in planted + [keep]:
            with open(os.path.join(vout, n), "w") as f:
                f.write("half a file")
        p = subprocess.run([EXE, "sweep", vscen, "-o", vout, "-q", *vary], capture_output=True,
                           text=True, env=env)
        if p.returncode != 0:
            fail(f"resume with planted leftovers: exit {p.returncode}: {p.stderr.strip()}")
        left = [n for n in planted if os.path.exists(os.path.join(vout, n))]
        if left:
            fail(f"the resume left the planted leftovers {left}")
        if not os.path.exists(os.path.join(vout, keep)):
            fail(f"the resume removed {keep}, which is not the sweep's")
        log(f"planted leftovers: {len(planted) - len(left)} of {len(planted)} removed by the "
            f"resume, {keep} kept")

        # -- a long simulation, killed while its child runs, resumed at once ------------------
        # The child used to hold the folder's lock (a flock shared across fork) until its
        # simulation ended, so the resume was refused; and it ran on for nobody.
        # 256 workers on a model of 3210 elements: the simulation is most of the point
        # (about 0.5 s of 1 s here).
        tiny = os.path.join(tmp, "tiny.csv")
        with open(tiny, "w") as f:
            f.write(TINY)
        long_scen = os.path.join(tmp, "long.ini")
        with open(long_scen, "w") as f:
            f.write(f"""[scenario]
name = crash_long
seed = 3
iterations = 4
[gradients]
model = {tiny}
[sparsify]
methods = deft
densities = 0.1
[workers]
counts = 256
""")
        lout = os.path.join(tmp, "long")
        proc = subprocess.Popen([EXE, "sweep", long_scen, "-o", lout, "-q"], env=env)
        kids, t0 = [], time.monotonic()
        while proc.poll() is None and not kids and time.monotonic() - t0 < 30:
            kids = children(proc.pid)
            time.sleep(0.001)
        if kids:
            time.sleep(0.05)
            proc.kill()
            proc.wait()
            still = [k for k in kids if alive(k)]
            p = subprocess.run([EXE, "sweep", long_scen, "-o", lout, "-q"], capture_output=True,
                               text=True, env=env)
            log(f"long simulation: killed 0.05 s into its child ({len(still)} child(ren) still "
                f"running at the kill); the resume started at once: exit {p.returncode}")
            if p.returncode != 0:
                fail(f"the resume right after a kill during the simulation: exit "
                     f"{p.returncode}: {p.stderr.strip()}")
            left = still_alive(kids)
            if left:
                fail(f"the killed sweep's simulation child {left} is still running")
            if tmp_names(lout) or os.listdir(tmpdir):
                fail(f"temporary files left: {tmp_names(lout)} {os.listdir(tmpdir)}")
        else:
            fail("the long simulation's child never appeared")

        log(f"crash_resume: {len(kills)} kills, {attempts} attempts, "
            f"{time.monotonic() - t_test:.1f} s in all; simulated times within "
            f"{worst_sim[0]:.2f} of what the measured compute allows; seed {seed}")
    finally:
        if failures:
            log(f"the folders are kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s); seed {seed}", file=sys.stderr)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Ctrl-C and SIGTERM during deftsim sweep and deftsim run (docs/RELIABILITY.md, "Stopping").

A small scenario (a 135k-element synthetic model, topk, deft and dgc, P = 2, 3, 4, 5, 30
iterations, [network] compute = none so that the simulated times depend on the bytes alone)
runs once uninterrupted as a sweep and as a run, the references. Then, each into a fresh
folder:

  sweep, SIGINT  the signal to the whole process group while a point's network simulation runs
                 (as Ctrl-C on a terminal: the sweep and its SimGrid child get it);
  sweep, SIGTERM the signal to the sweep process only, in the middle of a point's iterations
                 (as kill PID or a batch system's time limit);
  run, SIGINT    as the sweep's, for deftsim run;
  run, twice     two SIGINTs in a row: the second ends the process at once.

After the first three: the exit status is 128 + the signal (130, 143); stderr says by which
signal it stopped, how many points finished and where, and prints the command to resume; the
manifest (or the run's) says status interrupted and lists every finished point, each with its
file; no temporary file is left (the point that was running is dropped: no .tmp, no row
buffer) and no point is marked failed; no SimGrid child outlives the process. deftsim analyze
on the interrupted run analyses its finished points, saying on stderr and in summary.md that
the run is incomplete (also when, as an older deftsim wrote it, its manifest lists no point).
The printed command, run as printed, resumes: it keeps the finished points (their files
untouched) and runs the others, and the folder ends with the reference's rows in every point
file and in rows.csv (the measured times aside, tests/reliability/rowcmp.py) and a complete
manifest. After two SIGINTs the same command resumes as after a SIGKILL.

Run by meson test (suite fast); DEFTSIM_EXE names the program.
"""
import csv
import hashlib
import json
import os
import shlex
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
NPOINTS = 12
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr, flush=True)
    return cond


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


def read_rows(path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return r[0], r[1:]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def leftovers(root):
    return sorted(os.path.join(d, n) for d, _, ns in os.walk(root) for n in ns
                  if ".tmp." in n or ".csv.rows." in n or n.endswith(".failed"))


def stop(args, sig, when, group):
    """Starts deftsim with args, sends sig once `when` holds (or after 60 s), returns
    (exit status, stderr, the SimGrid children seen)."""
    p = subprocess.Popen([EXE, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    t0, kids = time.monotonic(), []
    while p.poll() is None and time.monotonic() - t0 < 60:
        kids = children(p.pid)
        if when(p, kids, time.monotonic() - t0):
            break
        time.sleep(0.002)
    if p.poll() is None:
        if group:
            os.killpg(p.pid, sig)
        else:
            os.kill(p.pid, sig)
    err = p.communicate()[1]
    return p.returncode, err, kids


def resume_command(err):
    """The command stderr says resumes, as argv for EXE."""
    for line in err.splitlines():
        if "resume" in line and ": deftsim " in line:
            args = shlex.split(line.split(": deftsim ", 1)[1])
            return args
    return None


def compare_folder(what, out, ref, points_key="points"):
    for name in ("rows.csv",):
        h, r = read_rows(os.path.join(out, name))
        rh, rr = read_rows(os.path.join(ref, name))
        rowcmp.compare(f"{what}: {name}", h, r, rh, rr, lambda m: check(False, m),
                       exact_simulated=True)
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    with open(os.path.join(ref, "manifest.json")) as f:
        mr = json.load(f)
    check(m["status"] == "complete", f"{what}: the resumed manifest is complete ({m['status']})")
    check([p["file"] for p in m[points_key]] == [p["file"] for p in mr[points_key]],
          f"{what}: the manifest lists the reference's points in its order")
    for p in mr[points_key]:
        h, r = read_rows(os.path.join(out, p["file"]))
        rh, rr = read_rows(os.path.join(ref, p["file"]))
        rowcmp.compare(f"{what}: {p['file']}", h, r, rh, rr, lambda m: check(False, m),
                       exact_simulated=True)


def interrupted(what, kind, args, sig, when, group, ref):
    """One interruption and its resumption; checks what the module docstring lists."""
    out = args[args.index("-o") + 1]
    rc, err, kids = stop(args, sig, when, group)
    signame = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
    if not check(rc == 128 + sig, f"{what}: exit {rc}, want {128 + sig}\n{err}"):
        return
    check(f"stopped by {signame}" in err and "points finished" in err and
          f"{out}/points/" in err, f"{what}: stderr says what stopped it and what is kept: {err}")
    time.sleep(0.2)
    check(not [k for k in kids if alive(k)], f"{what}: no SimGrid child outlives the process")
    check(not leftovers(out), f"{what}: nothing half-written, nothing failed: {leftovers(out)}")
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    check(m["status"] == "interrupted", f"{what}: the manifest says {m['status']}")
    done = [p for p in m["points"] if kind == "run" or p["status"] == "done"]
    check(0 < len(done) < NPOINTS, f"{what}: {len(done)} of {NPOINTS} points finished")
    for p in done:
        check(os.path.exists(os.path.join(out, p["file"])), f"{what}: {p['file']} is kept")
    check(f"{len(done)} of " in err, f"{what}: stderr counts {len(done)} finished points: {err}")
    if kind == "run":
        a = subprocess.run([EXE, "analyze", out], capture_output=True, text=True)
        check(a.returncode == 0, f"{what}: analyze exit {a.returncode}: {a.stderr}")
        check("incomplete" in a.stderr and f"{len(done)} of its {NPOINTS} points" in a.stderr,
              f"{what}: analyze says the run is incomplete: {a.stderr}")
        with open(os.path.join(out, "summary.md")) as f:
            check("**Incomplete:**" in f.read(), f"{what}: summary.md says it is incomplete")
        with open(os.path.join(out, "summary.csv"), newline="") as f:
            n = len(list(csv.DictReader(f)))
        check(n == len(done), f"{what}: summary.csv has the {len(done)} finished points ({n})")
        # A folder of an older deftsim, which listed the points only at the end: the manifest
        # says running with no points; analyze reads the committed point files.
        old = out + "_old"
        shutil.copytree(out, old)
        with open(os.path.join(old, "manifest.json")) as f:
            mo = json.load(f)
        mo["status"], mo["points"] = "running", []
        with open(os.path.join(old, "manifest.json"), "w") as f:
            json.dump(mo, f)
        a = subprocess.run([EXE, "analyze", old], capture_output=True, text=True)
        check(a.returncode == 0 and "incomplete" in a.stderr,
              f"{what}: analyze reads an older stopped run's point files: {a.stderr}")
        with open(os.path.join(old, "summary.csv"), newline="") as f:
            n = len(list(csv.DictReader(f)))
        check(n == len(done), f"{what}: the older folder's {len(done)} point files analysed ({n})")
    kept = {p["file"]: digest(os.path.join(out, p["file"])) for p in done}
    again = resume_command(err)
    if not check(again is not None, f"{what}: stderr prints the command to resume: {err}"):
        return
    r = subprocess.run([EXE, *again], capture_output=True, text=True)
    check(r.returncode == 0, f"{what}: the printed command exits {r.returncode}: {r.stderr}")
    if kind == "run":
        check(f"resumed: {len(done)} points kept" in r.stderr, f"{what}: the run resumes: {r.stderr}")
    for f, d in kept.items():
        check(digest(os.path.join(out, f)) == d, f"{what}: {f} is kept, not run again")
    check(not leftovers(out), f"{what}: no temporary file after the resume: {leftovers(out)}")
    compare_folder(what, out, ref)


def main():
    tmp = tempfile.mkdtemp(prefix="deftsim-interrupt-")
    try:
        with open(os.path.join(tmp, "model.csv"), "w") as f:
            f.write(MODEL)
        scen = os.path.join(tmp, "s.ini")
        with open(scen, "w") as f:
            f.write(f"""[scenario]
name = s
seed = 5
iterations = 30
[gradients]
model = {tmp}/model.csv
[sparsify]
methods = topk, deft, dgc
densities = 0.05
[workers]
counts = 2, 3, 4, 5
[network]
compute = none
""")
        refs, refr = os.path.join(tmp, "ref_sweep"), os.path.join(tmp, "ref_run")
        for cmd, ref in (("sweep", refs), ("run", refr)):
            p = subprocess.run([EXE, cmd, scen, "-o", ref, "-q"], capture_output=True, text=True)
            if not check(p.returncode == 0, f"the reference {cmd}: {p.stderr}"):
                return 1

        def point_files(out):
            d = os.path.join(out, "points")
            return len([n for n in os.listdir(d) if n.endswith(".csv")]) if os.path.isdir(d) else 0

        # Ctrl-C: the group, once two points are done, while a simulation's child runs.
        in_sim = lambda out: lambda p, kids, t: point_files(out) >= 2 and kids
        # SIGTERM: the process alone, once two points are done, between simulations.
        in_iter = lambda out: lambda p, kids, t: point_files(out) >= 2 and not kids

        o = os.path.join(tmp, "s_int")
        interrupted("sweep SIGINT", "sweep", ["sweep", scen, "-o", o, "--progress", "lines"],
                    signal.SIGINT, in_sim(o), True, refs)
        o = os.path.join(tmp, "s_term")
        interrupted("sweep SIGTERM", "sweep", ["sweep", scen, "-o", o, "-q"], signal.SIGTERM,
                    in_iter(o), False, refs)
        o = os.path.join(tmp, "r_int")
        interrupted("run SIGINT", "run", ["run", scen, "-o", o], signal.SIGINT, in_sim(o), True,
                    refr)

        # Two signals: the second ends the process at once; the command then resumes.
        o = os.path.join(tmp, "r_twice")
        p = subprocess.Popen([EXE, "run", scen, "-o", o, "-q"], stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        t0 = time.monotonic()
        while p.poll() is None and point_files(o) < 1 and time.monotonic() - t0 < 60:
            time.sleep(0.002)
        os.kill(p.pid, signal.SIGINT)
        time.sleep(0.001)
        os.kill(p.pid, signal.SIGINT)
        err = p.communicate()[1]
        check(p.returncode in (-signal.SIGINT, 130), f"two SIGINTs: exit {p.returncode}: {err}")
        check("second signal" in err or "stopped by SIGINT" in err, f"two SIGINTs: {err}")
        r = subprocess.run([EXE, "run", scen, "-o", o, "-q"], capture_output=True, text=True)
        check(r.returncode == 0, f"two SIGINTs: the same command resumes: {r.stderr}")
        left = leftovers(o)
        check(not left, f"two SIGINTs: no temporary file after the resume: {left}; the first "
                        f"process: exit {p.returncode}, stderr: {err!r}; the resume's stderr: "
                        f"{r.stderr!r}")
        compare_folder("two SIGINTs", o, refr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)", file=sys.stderr)
        return 1
    print("interrupt: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

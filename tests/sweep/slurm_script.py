#!/usr/bin/env python3
"""scripts/slurm-sweep.sh without Slurm (docs/CLUSTER.md): its steps run as Slurm would run them.

1. `shard` three times with SLURM_ARRAY_TASK_ID = 0, 1, 2 and SLURM_ARRAY_TASK_COUNT = 3 set by
   hand (task 1 as if resubmitted alone: an array of one task, SHARD_COUNT = 3), then `merge`:
   the folder must hold the rows of the same sweep run whole (every column but the measured
   times; [network] compute = none), a complete manifest, summary.csv and, where gnuplot is
   installed, the figures.
2. `submit` with a stand-in `sbatch` first on PATH that records its arguments and runs the jobs
   as Slurm would: the array's tasks at once (each with its SLURM_ARRAY_TASK_ID and
   SLURM_ARRAY_TASK_COUNT), then the job that depends on the array (--wrap) once they all
   ended well. The array must be 0-(N-1), the merge must depend on the array's job id with
   afterok, and the folder must end complete, with its summary.
3. `shard` outside a job array (no SLURM_ARRAY_TASK_ID) fails, saying so.

Run by meson test (suite fast); DEFTSIM_EXE names the program, DEFTSIM_SOURCE_ROOT the tree.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
import rowcmp  # noqa: E402

EXE = os.environ.get("DEFTSIM_EXE")
ROOT = os.environ.get("DEFTSIM_SOURCE_ROOT")
if not EXE or not ROOT:
    sys.exit("DEFTSIM_EXE or DEFTSIM_SOURCE_ROOT is not set (run through meson test)")
SCRIPT = os.path.join(ROOT, "scripts", "slurm-sweep.sh")

MODEL = """index,name,shape,numel
0,conv.weight,16x3x3x3,432
1,conv.bias,16,16
2,fc1.weight,64x32,2048
3,fc1.bias,64,64
4,fc2.weight,10x64,640
5,fc2.bias,10,10
"""

# Slurm's sbatch as far as the script uses it: --parsable, --array=A-B, --dependency,
# --wrap, --job-name, --output. Jobs run at once, the array's tasks concurrently.
FAKE_SBATCH = r"""#!/usr/bin/env python3
import json, os, subprocess, sys
log = os.environ["FAKE_SBATCH_LOG"]
calls = [json.loads(l) for l in open(log)] if os.path.exists(log) else []
jobid = 4200 + len(calls)
args = sys.argv[1:]
opts, rest = {}, []
for a in args:
    if a.startswith("--") and "=" in a and not rest:
        k, v = a[2:].split("=", 1)
        opts[k] = v
    elif a.startswith("--") and not rest:
        opts[a[2:]] = True
    else:
        rest.append(a)
rcs = []
if "wrap" in opts:
    rcs.append(subprocess.run(["sh", "-c", opts["wrap"]]).returncode)
elif "array" in opts:
    lo, hi = (int(x) for x in opts["array"].split("-"))
    procs = []
    for i in range(lo, hi + 1):
        env = dict(os.environ, SLURM_ARRAY_TASK_ID=str(i), SLURM_ARRAY_TASK_COUNT=str(hi - lo + 1),
                   SLURM_ARRAY_JOB_ID=str(jobid), SLURM_JOB_ID=str(jobid + 1 + i))
        procs.append(subprocess.Popen(["bash", *rest], env=env))
    rcs = [p.wait() for p in procs]
else:
    rcs.append(subprocess.run(["bash", *rest]).returncode)
with open(log, "a") as f:
    f.write(json.dumps({"jobid": jobid, "opts": opts, "rest": rest, "rcs": rcs}) + "\n")
print(f"{jobid};cluster" if "parsable" in opts else f"Submitted batch job {jobid}")
"""

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr, flush=True)
    return cond


def read_csv(path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return r[0], r[1:]


def same_rows(what, out, ref):
    h, rows = read_csv(os.path.join(out, "rows.csv"))
    rh, rrows = read_csv(os.path.join(ref, "rows.csv"))
    rowcmp.compare(what, h, rows, rh, rrows, lambda m: check(False, m), exact_simulated=True)
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    check(m["status"] == "complete" and all(p["status"] == "done" for p in m["points"]),
          f"{what}: the manifest is complete")
    check(os.path.exists(os.path.join(out, "summary.csv")), f"{what}: the merge step analysed it")


def script(step, env, want=0):
    p = subprocess.run(["bash", SCRIPT, step], env=env, capture_output=True, text=True)
    check(p.returncode == want, f"slurm-sweep.sh {step}: exit {p.returncode}, want {want}\n"
                                f"{p.stdout}{p.stderr}")
    return p


def main():
    tmp = tempfile.mkdtemp(prefix="deftsim-slurm-")
    try:
        with open(os.path.join(tmp, "model.csv"), "w") as f:
            f.write(MODEL)
        scen = os.path.join(tmp, "s.ini")
        with open(scen, "w") as f:
            f.write(f"""[scenario]
name = slurm
seed = 3
iterations = 3
output = {tmp}/unused
[gradients]
model = {tmp}/model.csv
[sparsify]
methods = topk, deft
densities = 0.05
[workers]
counts = 2, 3, 4
[network]
compute = none
""")
        vary = "--vary network.bandwidth=10Gbps,1Gbps"
        ref = os.path.join(tmp, "whole")
        subprocess.run([EXE, "sweep", scen, "-o", ref, "-q"], check=True)
        ref_vary = os.path.join(tmp, "whole-vary")
        subprocess.run([EXE, "sweep", scen, "-o", ref_vary, "-q", *vary.split()], check=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        base.update(SCENARIO=scen, DEFTSIM=EXE, PLOT="0")

        # 1. The steps by hand.
        out = os.path.join(tmp, "by-hand")
        for i in range(3):
            env = dict(base, OUT=out, SLURM_ARRAY_TASK_ID=str(i), SLURM_ARRAY_TASK_COUNT="3")
            if i == 1:  # resubmitted alone (sbatch --array=1): an array of one, SHARD_COUNT=3
                env.update(SLURM_ARRAY_TASK_COUNT="1", SHARD_COUNT="3")
            p = script("shard", env)
            check(f"shard {i}/3" in p.stderr, f"task {i} runs shard {i}/3: {p.stderr}")
        # With gnuplot, the merge step draws the figures too, as after a one-process sweep.
        plot = shutil.which("gnuplot") is not None
        script("merge", dict(base, OUT=out, PLOT="1" if plot else "0"))
        same_rows("by hand", out, ref)
        if plot:
            pdir = os.path.join(out, "plots")
            figs = os.listdir(pdir) if os.path.isdir(pdir) else []
            check(any(f.endswith(".svg") for f in figs), f"the merge step drew the figures: {figs}")

        # 2. submit, through the stand-in sbatch.
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        with open(os.path.join(bindir, "sbatch"), "w") as f:
            f.write(FAKE_SBATCH)
        os.chmod(os.path.join(bindir, "sbatch"), 0o755)
        log = os.path.join(tmp, "sbatch.log")
        out = os.path.join(tmp, "submitted")
        env = dict(base, OUT=out, SHARDS="4", EXTRA=vary, FAKE_SBATCH_LOG=log,
                   PATH=bindir + os.pathsep + base.get("PATH", ""))
        p = script("submit", env)
        with open(log) as f:
            calls = [json.loads(line) for line in f]
        if check(len(calls) == 2, f"submit calls sbatch twice: {calls}"):
            arr, mrg = calls
            check(arr["opts"].get("array") == "0-3" and arr["rest"][1:] == ["shard"],
                  f"the array is 0-3 of the shard step: {arr}")
            check(arr["rcs"] == [0, 0, 0, 0], f"every array task ended well: {arr['rcs']}")
            check(mrg["opts"].get("dependency") == f"afterok:{arr['jobid']}",
                  f"the merge depends on the array: {mrg}")
            check("merge" in mrg["opts"].get("wrap", "") and mrg["rcs"] == [0],
                  f"the merge job runs the merge step: {mrg}")
        check("submitted: shards 4200" in p.stdout, f"submit says what it submitted: {p.stdout}")
        same_rows("submitted", out, ref_vary)
        with open(os.path.join(out, "manifest.json")) as f:
            check(json.load(f)["shards"]["count"] == 4, "submitted: four shards")

        # 3. Outside an array.
        p = script("shard", dict(base, OUT=os.path.join(tmp, "none")), want=1)
        check("SLURM_ARRAY_TASK_ID" in p.stderr, f"outside an array: {p.stderr}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("slurm_script: ok")


if __name__ == "__main__":
    main()

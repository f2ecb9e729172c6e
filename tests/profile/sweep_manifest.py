#!/usr/bin/env python3
"""A sweep timed by a device profile names it in its manifest: every profile variant holds
"profile" {file, device, backend, threads, created, conditions, source}, the same record a
run's manifest keeps as kernels.profile, read from each variant's own profile file; and it
runs one timing repetition (the manifest's timing.repeats), a cpu sweep the configured three. Run by meson test (suite fast); DEFTSIM_EXE names the program and
DEFTSIM_SOURCE_ROOT the source tree (the shipped profiles)."""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

EXE = os.environ.get("DEFTSIM_EXE")
ROOT = os.environ.get("DEFTSIM_SOURCE_ROOT")
if not EXE or not ROOT:
    sys.exit("DEFTSIM_EXE and DEFTSIM_SOURCE_ROOT must be set (run through meson test)")

fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)


def header(path):
    """The key/value lines of a profile file, before its table."""
    out = {}
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "op":
                break
            if len(row) >= 2:
                out[row[0]] = row[1]
    return out


tmp = tempfile.mkdtemp(prefix="deftsim-sweepprofile-")
try:
    model = os.path.join(tmp, "tiny.csv")
    with open(model, "w") as f:
        f.write("index,name,shape,numel\n0,fc1.weight,32x16,512\n1,fc1.bias,32,32\n"
                "2,fc2.weight,10x32,320\n")
    profs = [os.path.join(ROOT, "profiles", "%s-best.csv" % g) for g in ("v100-sxm2", "a100-sxm4")]
    prof = profs[0]
    scen = os.path.join(tmp, "tiny.ini")
    with open(scen, "w") as f:
        f.write(f"""[scenario]
seed = 3
iterations = 1
[gradients]
model = {model}
[sparsify]
methods = topk
densities = 0.05
[workers]
counts = 2
[network]
simulate = 0
[device]
kind = profile
profile = {prof}
""")
    # One sweep varying the profile: a variant each, its folder named after the file without
    # .csv (a name ending in .csv would be taken for a stray point file), each naming its own.
    out = os.path.join(tmp, "vary")
    p = subprocess.run([EXE, "sweep", scen, "--output", out, "--quiet", "--vary",
                        "device.profile=" + ",".join(profs)], capture_output=True, text=True)
    check(p.returncode == 0, "the varied sweep runs: %d %s" % (p.returncode, p.stderr))
    if p.returncode == 0:
        m = json.load(open(os.path.join(out, "manifest.json")))
        got = [(v.get("label"), (v.get("profile") or {}).get("file")) for v in m["variants"]]
        want = [(os.path.basename(q)[:-4], q) for q in profs]
        check(got == want, "variants %r, want %r" % (got, want))
        for lab, _ in want:
            check(os.path.isdir(os.path.join(out, "points", lab)), "points/%s" % lab)
    # One sweep per profile.
    for i, path in enumerate(profs):
        out = os.path.join(tmp, "out%d" % i)
        p = subprocess.run([EXE, "sweep", scen, "--output", out, "--quiet", "--set",
                            "device.profile=" + path], capture_output=True, text=True)
        check(p.returncode == 0, "the sweep runs: %d %s" % (p.returncode, p.stderr))
        if p.returncode != 0:
            continue
        m = json.load(open(os.path.join(out, "manifest.json")))
        check(len(m["variants"]) == 1, "one variant: %d" % len(m["variants"]))
        # The profile charges every compute phase: one repetition runs, whatever [timing] says.
        tm = m.get("timing", {})
        check(tm.get("repeats") == 1 and tm.get("repeats_configured") == 3,
              "a profile runs one timing repetition of the configured 3: %r" % tm)
        reps = [pt.get("stages", {}).get("repeats") for pt in m.get("points", [])]
        check(reps and all(r == 1 for r in reps), "the points' stages ran 1 repetition: %r" % reps)
        rec, h = m["variants"][0].get("profile"), header(path)
        check(isinstance(rec, dict), "%s: the variant names its profile: %r" % (path, rec))
        if not isinstance(rec, dict):
            continue
        check(rec.get("file") == path, "file: %r" % rec.get("file"))
        for key in ("device", "backend", "created", "conditions", "source"):
            check(rec.get(key) == h.get(key), "%s: %r against the file's %r"
                  % (key, rec.get(key), h.get(key)))
        gpu = os.path.basename(path).rsplit("-", 1)[0]
        check("profiles/sources/%s.csv" % gpu in rec.get("source", ""),
              "the source names the source table: %r" % rec.get("source"))
    # A cpu sweep of the same scenario names no profile.
    out = os.path.join(tmp, "cpu")
    p = subprocess.run([EXE, "sweep", scen, "--output", out, "--quiet", "--set",
                        "device.kind=cpu", "--set", "device.profile="],
                       capture_output=True, text=True)
    check(p.returncode == 0, "the cpu sweep runs: %d %s" % (p.returncode, p.stderr))
    if p.returncode == 0:
        m = json.load(open(os.path.join(out, "manifest.json")))
        check("profile" not in m["variants"][0], "a cpu sweep names no profile")
        tm = m.get("timing", {})
        check(tm.get("repeats") == 3 and tm.get("repeats_configured") == 3,
              "a cpu sweep runs the configured 3 repetitions: %r" % tm)
        # The floors' counts (docs/TIMING.md): n = 864, P = 2, k = 44 at d = 0.05, one iteration.
        # Every repetition's top-k reads each worker's 4 n bytes and writes 4 k; the average
        # takes P n additions; the metrics' reference top-k reads the average.
        n, P, R = 864, 2, 3
        k = m["points"][0].get("k", 44) if m.get("points") else 44
        st = m["points"][0].get("stages", {}) if m.get("points") else {}
        sp = st.get("sparsify", {}).get("bytes", 0)
        check(sp >= R * P * (4 * n + 4 * k), "sparsify bytes %r, at least %d" % (sp, R * P * (4 * n + 4 * k)))
        adds = st.get("accumulate", {}).get("additions")
        check(adds == P * n, "the average's additions %r, want %d" % (adds, P * n))
        mb = st.get("metrics", {}).get("bytes", 0)
        check(mb >= 4 * n + 4 * k, "metrics bytes %r, at least %d" % (mb, 4 * n + 4 * k))
        rate = st.get("probe", {}).get("additions_per_second")
        check(isinstance(rate, float) and rate > 0, "the additions probe: %r" % rate)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

print("ok" if not fails else "%d failure(s)" % len(fails))
sys.exit(1 if fails else 0)

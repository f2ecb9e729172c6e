#!/usr/bin/env python3
"""Interoperability of deftsim traces with the official safetensors package, both ways, and an
independent NumPy re-implementation of the synthetic generator (docs/GENERATOR.md) that must
reproduce deftsim's bytes exactly.

Run by `meson test` (suite fast) with DEFTSIM_EXE set. Needs numpy and safetensors: a missing
package is a failure, not a skip, because CI installs both.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open
except ImportError as e:  # CI installs both: their absence is an error
    sys.exit(f"interop: FAIL: {e} (pip install numpy safetensors)")

EXE = os.environ.get("DEFTSIM_EXE")
if not EXE:
    sys.exit("interop: FAIL: DEFTSIM_EXE is not set (run through meson test)")

# Odd sizes: layers start and end inside the generator's 32-element groups.
MODEL_CSV = """index,name,shape,numel
0,conv.weight,5x3x3x3,135
1,conv.bias,5,5
2,fc.weight,37x11,407
3,fc.bias,37,37
4,out.weight,3x100,300
"""
SHAPES = [(5, 3, 3, 3), (5,), (37, 11), (37,), (3, 100)]
NAMES = ["conv.weight", "conv.bias", "fc.weight", "fc.bias", "out.weight"]
NUMEL = sum(math.prod(s) for s in SHAPES)

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}", flush=True)


def run(*args, expect=0):
    r = subprocess.run([EXE, *args], capture_output=True, text=True)
    if r.returncode != expect:
        raise SystemExit(f"interop: FAIL: deftsim {' '.join(args)} exited {r.returncode}, "
                         f"expected {expect}\nstdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def dump(trace, iteration, worker):
    out = run("trace", "dump", trace, "--iteration", str(iteration), "--worker", str(worker)).stdout
    return np.array([float(v) for v in out.split()], dtype=np.float32)


# ---- An independent generator (the spec in docs/GENERATOR.md, in NumPy) -------------------

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = 0xFFFFFFFF
f32 = np.float32


def philox(c0, c1, c2, c3, k0, k1):
    """Philox-4x32-10 on uint64 arrays holding 32-bit words."""
    x = [np.asarray(c, dtype=np.uint64) & MASK for c in (c0, c1, c2, c3)]
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
        p0 = x[0] * np.uint64(M0)
        p1 = x[2] * np.uint64(M1)
        x = [((p1 >> np.uint64(32)) ^ x[1] ^ np.uint64(k0)) & np.uint64(MASK),
             p1 & np.uint64(MASK),
             ((p0 >> np.uint64(32)) ^ x[3] ^ np.uint64(k1)) & np.uint64(MASK),
             p0 & np.uint64(MASK)]
    return [v.astype(np.uint32) for v in x]


def check_philox():
    kat = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
           ((MASK,) * 4, (MASK, MASK), (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
           ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
            (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for ctr, key, want in kat:
        got = tuple(int(v) for v in philox(*ctr, *key))
        check(got == want, f"numpy Philox known answer {ctr}: {got}")


def as_f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def as_u32(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def ln_u(w):
    x = (((w >> 9) << 1) | 1).astype(np.int32).astype(np.float32)
    bits = as_u32(x)
    e = (bits >> 23).astype(np.int32) - 127 - 24
    m = as_f32((bits & 0x007FFFFF) | 0x3F800000)
    big = m > f32(1.41421356)
    m = np.where(big, m * f32(0.5), m)
    e = e + big.astype(np.int32)
    s = (m - f32(1)) / (m + f32(1))
    s2 = s * s
    p = s2 * (f32(0.333333333) + s2 * (f32(0.2) + s2 * (f32(0.142857143) + s2 * f32(0.111111111))))
    ln_m = f32(2) * s + f32(2) * s * p
    return e.astype(np.float32) * f32(0.693147181) + ln_m


def expm1(y):
    k = (y * f32(1.44269504) + f32(0.5)).astype(np.int32)
    kf = k.astype(np.float32)
    r = (y - kf * f32(0.693145752)) - kf * f32(1.42860677e-06)
    p = r * (f32(1) + r * (f32(0.5) + r * (f32(0.166666667) + r * (f32(0.0416666667) +
             r * (f32(0.00833333333) + r * (f32(0.00138888889) + r * (f32(0.000198412698) +
             r * f32(2.48015873e-05))))))))
    two_k = as_f32(((k + 127).astype(np.uint32)) << 23)
    return two_k * p + (two_k - f32(1))


def pair(wr, wa, nu, inv_nu, gauss):
    lw = f32(-2) * ln_u(wr)
    r2 = lw if gauss else nu * expm1(lw * inv_nu)
    r = np.sqrt(r2)
    q = wa >> 30
    t = ((((wa >> 7) & 0x007FFFFF) << 1) | 1).astype(np.int32).astype(np.float32) * f32(5.96046448e-08)
    a = (t - f32(0.5)) * f32(1.57079633)
    a2 = a * a
    sn = a + a * a2 * (f32(-0.166666667) + a2 * (f32(0.00833333333) + a2 * (f32(-0.000198412698) +
                                                                          a2 * f32(2.75573192e-06))))
    cs = f32(1) + a2 * (f32(-0.5) + a2 * (f32(0.0416666667) + a2 * (f32(-0.00138888889) +
                                                                  a2 * f32(2.48015873e-05))))
    odd = (q & 1) == 1
    u = np.where(odd, sn, cs)
    v = np.where(odd, cs, sn)
    u = as_f32(as_u32(u) ^ ((((q + 1) & 2) << 30).astype(np.uint32)))
    v = as_f32(as_u32(v) ^ (((q & 2) << 30).astype(np.uint32)))
    return r * u, r * v


def stream(idx, stream_id, worker, iteration, key, consts):
    """Unit values of one stream at element indices idx (uint64 array)."""
    j = idx % 32
    word, lane = j // 8, j % 8
    call = (idx // 32) * 8 + lane
    w = philox(call & MASK, (call >> np.uint64(32)) | np.uint64(stream_id << 24), worker, iteration,
               *key)
    w = np.stack(w)  # 4 x n
    first = (word & 2).astype(np.int64)
    cols = np.arange(idx.size)
    x, y = pair(w[first, cols], w[first + 1, cols], *consts)
    return np.where((word & 1) == 1, y, x)


def u01(hi, lo):
    return float((int(hi) << 21) ^ (int(lo) >> 11)) * (1.0 / 9007199254740992.0)


def exp2_exact(x):
    k = math.floor(x)
    f = (x - k) * 0.69314718055994530942
    term, s = 1.0, 1.0
    for i in range(1, 17):
        term *= f / i
        s += term
    return math.ldexp(s, int(k))


def layer_uniform(key, stream_id, layer, knot):
    w = philox(layer & MASK, (layer >> 32) | (stream_id << 24), knot & MASK, knot >> 32, *key)
    return u01(w[0], w[1])


def reference_gradient(seed, params, iteration, worker):
    key = (seed & MASK, seed >> 32)
    tail, signal = params["tail"], params["signal"]
    gauss = tail == 0
    norm = 1.0 if gauss else math.sqrt((tail - 2.0) / tail)
    consts = (f32(tail), f32(0.0 if gauss else 1.0 / tail), gauss)
    w_s, w_n = f32(math.sqrt(signal) * norm), f32(math.sqrt(1.0 - signal) * norm)
    idx = np.arange(NUMEL, dtype=np.uint64)
    s = stream(idx, 2, 0, iteration, key, consts)
    n = stream(idx, 1, worker, iteration, key, consts)
    unit = w_s * s + w_n * n
    out = np.empty(NUMEL, dtype=np.float32)
    at, K = 0, 64
    for L, shape in enumerate(SHAPES):
        u = layer_uniform(key, 3, L, 0)
        log10s = -2.0 - params["scale_decades"] * u + (params["bias_shift"] if len(shape) == 1 else 0)
        log2s = log10s * 3.32192809488736234787
        if params["drift"] > 0:
            j, f = iteration // K, (iteration % K) / K
            a0 = layer_uniform(key, 4, L, j) - 0.5
            a1 = layer_uniform(key, 4, L, j + 1) - 0.5
            d = K * ((1.0 - f) * a0 + f * a1)
            log2s += params["drift"] * d * 1.44269504088896340736
        scale = f32(exp2_exact(log2s))
        nel = math.prod(shape)
        out[at:at + nel] = unit[at:at + nel] * scale
        at += nel
    return out


# ---- Direction 1: deftsim writes, the safetensors package reads -----------------------------

def deftsim_to_python(tmp):
    model = os.path.join(tmp, "small.csv")
    with open(model, "w") as f:
        f.write(MODEL_CSV)
    seed = (1 << 40) + 12345  # exercises both key words
    cases = [
        ("default", [], dict(scale_decades=3.0, signal=0.5, tail=4.0, drift=0.01, bias_shift=1.0)),
        ("gauss", ["--tail", "0", "--signal", "0.2", "--scale-decades", "5", "--drift", "0.05",
                   "--bias-shift", "-0.5"],
         dict(scale_decades=5.0, signal=0.2, tail=0.0, drift=0.05, bias_shift=-0.5)),
    ]
    for name, extra, params in cases:
        trace = os.path.join(tmp, f"gen-{name}")
        P, T = 3, 2
        run("trace", "gen", "--model", model, "--workers", str(P), "--iterations", str(T),
            "--seed", str(seed), "-o", trace, *extra)
        with open(os.path.join(trace, "manifest.json")) as f:
            man = json.load(f)
        check(man["format"] == "deftsim-trace" and man["format_version"] == 1, "manifest format")
        check(man["workers"] == P and man["iterations"] == list(range(T)), "manifest workers/ids")
        check(man["dtype"] == "float32" and man["model"]["numel"] == NUMEL, "manifest dtype/numel")
        check([L["name"] for L in man["model"]["layers"]] == NAMES, "manifest layer names")
        check([tuple(L["shape"]) for L in man["model"]["layers"]] == SHAPES, "manifest shapes")
        prov = man["provenance"]
        check(prov["seed"] == seed and "recorder" in prov and "method" in prov, "provenance")
        check(prov["synthetic"]["tail"] == params["tail"], "provenance records the parameters")
        for it in range(T):
            path = os.path.join(trace, f"iter_{it:06d}.safetensors")
            tensors = load_file(path)
            check(sorted(tensors) == [f"worker.{w:04d}" for w in range(P)], f"{path}: tensor names")
            with safe_open(path, framework="numpy") as f:
                meta = f.metadata()
            check(meta.get("iteration") == str(it) and meta.get("format") == "deftsim-trace",
                  f"{path}: metadata {meta}")
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
            check((8 + n) % 8 == 0, f"{path}: buffer aligned to 8")
            for w in range(P):
                t = tensors[f"worker.{w:04d}"]
                check(t.dtype == np.float32 and t.shape == (NUMEL,), f"{path}: worker {w} shape")
                d = dump(trace, it, w)
                check(np.array_equal(t.view(np.uint32), d.view(np.uint32)),
                      f"{name}: iteration {it} worker {w}: package and deftsim dump differ")
                ref = reference_gradient(seed, params, it, w)
                bad = np.nonzero(ref.view(np.uint32) != t.view(np.uint32))[0]
                check(bad.size == 0, f"{name}: iteration {it} worker {w}: the NumPy generator "
                      f"differs at {bad.size} elements, first {bad[:5]}: "
                      f"{ref[bad[:3]] if bad.size else ''} vs {t[bad[:3]] if bad.size else ''}")
        # The format promises the same bytes for the same seed, other bytes for another.
        again = os.path.join(tmp, f"gen-{name}-again")
        run("trace", "gen", "--model", model, "--workers", str(P), "--iterations", "1",
            "--seed", str(seed), "-o", again, *extra)
        other = os.path.join(tmp, f"gen-{name}-other")
        run("trace", "gen", "--model", model, "--workers", str(P), "--iterations", "1",
            "--seed", str(seed + 1), "-o", other, *extra)
        a = open(os.path.join(trace, "iter_000000.safetensors"), "rb").read()
        b = open(os.path.join(again, "iter_000000.safetensors"), "rb").read()
        c = open(os.path.join(other, "iter_000000.safetensors"), "rb").read()
        check(a == b, f"{name}: same seed, same bytes")
        check(a[-NUMEL * 4:] != c[-NUMEL * 4:], f"{name}: another seed, other bytes")


# ---- Direction 2: the safetensors package writes, deftsim reads -----------------------------

def python_to_deftsim(tmp):
    trace = os.path.join(tmp, "from-python")
    os.makedirs(trace)
    P, ids = 3, [3, 10]
    rng = np.random.default_rng(20240601)
    grads = {}
    for it in ids:
        tensors = {}
        for w in range(P):
            g = (rng.standard_normal(NUMEL) * 10.0 ** rng.uniform(-4, 0)).astype(np.float32)
            tensors[f"worker.{w:04d}"] = g
        grads[it] = tensors
    grads[10]["worker.0001"][140] = np.nan  # fc.weight, element 0 of the layer
    grads[10]["worker.0001"][600] = np.inf
    grads[3]["worker.0002"][883] = -np.inf  # out.weight, element 299: the last element
    for it in ids:
        save_file(grads[it], os.path.join(trace, f"iter_{it:06d}.safetensors"),
                  metadata={"iteration": str(it), "recorded_by": "interop.py"})
    manifest = {
        "format": "deftsim-trace", "format_version": 1,
        "model": {"name": "small", "numel": NUMEL,
                  "layers": [{"name": n, "shape": list(s)} for n, s in zip(NAMES, SHAPES)]},
        "workers": P, "dtype": "float32", "iterations": ids,
        "provenance": {"recorder": "tests/traces/interop.py", "method": "numpy standard normal",
                       "seed": 20240601},
    }
    with open(os.path.join(trace, "manifest.json"), "w") as f:
        json.dump(manifest, f)

    info = json.loads(run("trace", "info", trace, "--json").stdout)
    check(info["workers"] == P and info["iterations"] == ids, "info: workers and ids")
    check(info["model"]["numel"] == NUMEL, "info: numel")
    offsets = np.cumsum([0] + [math.prod(s) for s in SHAPES])
    for L, layer in enumerate(info["layers"]):
        norms, nonfinite = [], 0
        for it in ids:
            for w in range(P):
                x = grads[it][f"worker.{w:04d}"][offsets[L]:offsets[L + 1]].astype(np.float64)
                fin = np.isfinite(x)
                nonfinite += int((~fin).sum())
                norms.append(math.sqrt(float(np.sum(x[fin] ** 2))))
        norms.sort()
        med = (norms[2] + norms[3]) / 2
        for key, want in (("norm_min", norms[0]), ("norm_median", med), ("norm_max", norms[-1])):
            check(math.isclose(layer[key], want, rel_tol=1e-9), f"info: layer {L} {key} "
                  f"{layer[key]} vs numpy {want}")
        check(layer["nonfinite"] == nonfinite, f"info: layer {L} non-finite count")
    want_nf = [{"iteration": 3, "worker": 2, "count": 1}, {"iteration": 10, "worker": 1, "count": 2}]
    check(info["nonfinite"] == want_nf, f"info: non-finite per iteration and worker {info['nonfinite']}")

    for it in ids:
        for w in range(P):
            d = dump(trace, it, w)
            g = grads[it][f"worker.{w:04d}"]
            check(np.array_equal(d.view(np.uint32), g.view(np.uint32)) or
                  np.array_equal(d, g, equal_nan=True), f"dump of iteration {it} worker {w}")

    r = run("trace", "check", trace, expect=2)
    for frag in ("iter_000003.safetensors", "tensor 'worker.0002'", "layer 'out.weight' (layer 4)",
                 "element 299 of the layer", "gradient element 883", "-Inf"):
        check(frag in r.stderr, f"check message lacks {frag!r}: {r.stderr}")

    # A file the package wrote with the wrong length is reported with the tensor's name.
    bad = os.path.join(tmp, "bad-shape")
    shutil.copytree(trace, bad)
    save_file({f"worker.{w:04d}": np.zeros(NUMEL - 1, dtype=np.float32) for w in range(P)},
              os.path.join(bad, "iter_000010.safetensors"))
    r = run("trace", "info", bad, expect=2)
    check("iter_000010.safetensors" in r.stderr and "worker.0000" in r.stderr and
          f"needs [{NUMEL}]" in r.stderr, f"bad shape message: {r.stderr}")


# ---- The PyTorch recorder's writer (needs no torch) ------------------------------------------

def recorder_writer(tmp):
    import importlib.util
    root = os.environ.get("DEFTSIM_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
    spec = importlib.util.spec_from_file_location("record_pytorch",
                                                  os.path.join(root, "traces", "record_pytorch.py"))
    rec = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rec)
    trace = os.path.join(tmp, "recorded")
    layers = [("emb.weight", (7, 3)), ("temperature", ()), ("head.bias", (4,))]
    prov = {"recorder": "interop.py", "method": "TraceWriter of record_pytorch.py", "seed": None}
    w = rec.TraceWriter(trace, "toy", layers, 2, prov)
    rng = np.random.default_rng(7)
    data = {it: [rng.standard_normal(26).astype(np.float32) for _ in range(2)] for it in (2, 4)}
    for it, g in data.items():
        w.put(it, g)
    w.close()
    info = json.loads(run("trace", "info", trace, "--json").stdout)
    check(info["model"]["numel"] == 26 and info["iterations"] == [2, 4], "recorder: manifest")
    check([L["shape"] for L in info["layers"]] == [[7, 3], [1], [4]], "recorder: scalar as [1]")
    check(info["provenance"]["seed"] is None, "recorder: seed null")
    for it, g in data.items():
        for k in range(2):
            check(np.array_equal(dump(trace, it, k), g[k]), f"recorder: iteration {it} worker {k}")
    try:
        w2 = rec.TraceWriter(os.path.join(tmp, "rec2"), "toy", layers, 2, prov)
        w2.put(1, [np.zeros(25, np.float32)] * 2)
        check(False, "recorder: a short gradient must be refused")
    except ValueError:
        pass


# ---- The per-rank layout: iter_<t>/rank_<r>.safetensors as PyTorch users write it ---------

# Parameter order on purpose not the names' sorted order; a scalar parameter (shape ()).
PR_NAMES = ["fc.weight", "conv.weight", "conv.bias", "temperature", "out.weight"]
PR_SHAPES = [(6, 5), (4, 3, 3), (4,), (), (3, 10)]
PR_NUMEL = sum(math.prod(s) for s in PR_SHAPES)
PR_P, PR_ITERS = 3, [0, 7, 20]


def load_recorder():
    import importlib.util
    root = os.environ.get("DEFTSIM_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
    spec = importlib.util.spec_from_file_location("record_pytorch",
                                                  os.path.join(root, "traces", "record_pytorch.py"))
    rec = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rec)
    return rec


def pr_grads():
    rng = np.random.default_rng(11)
    return {(t, r): {n: np.asarray(rng.standard_normal(s) * 10.0 ** rng.integers(-4, 1), np.float32)
                     for n, s in zip(PR_NAMES, PR_SHAPES)}
            for t in PR_ITERS for r in range(PR_P)}


def write_per_rank(d, grads, order=True, model="prmodel", names=None, skip=()):
    """The layout as a user writes it with safetensors.numpy.save_file, one file per rank."""
    for (t, r), g in grads.items():
        if (t, r) in skip:
            continue
        os.makedirs(os.path.join(d, f"iter_{t:06d}"), exist_ok=True)
        meta = {"model": model}
        if order:
            meta["parameter_order"] = json.dumps(names or list(g))
        save_file(g, os.path.join(d, f"iter_{t:06d}", f"rank_{r:04d}.safetensors"), metadata=meta)


def read_rows(out):
    import csv
    with open(os.path.join(out, "rows.csv"), newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def run_rows(tmp, trace, name):
    out = os.path.join(tmp, "out-" + name)
    ini = os.path.join(tmp, name + ".ini")
    with open(ini, "w") as f:
        f.write(f"[scenario]\nname = pr\nseed = 3\niterations = {len(PR_ITERS)}\noutput = {out}\n"
                f"[gradients]\nsource = trace\ntrace = {trace}\n"
                "[sparsify]\nmethods = deft, topk, dgc, gtopk\ndensities = 0.1\n"
                f"[workers]\ncounts = 2, {PR_P}\n[network]\ncompute = none\n")
    run("run", "-q", ini)
    return read_rows(out)


def per_rank(tmp):
    grads = pr_grads()
    flat_of = {k: np.concatenate([g[n].reshape(-1) for n in PR_NAMES]) for k, g in grads.items()}
    # The same gradients in the flat layout, through the flat recorder.
    rec = load_recorder()
    flat = os.path.join(tmp, "pr-flat")
    w = rec.TraceWriter(flat, "prmodel", list(zip(PR_NAMES, PR_SHAPES)), PR_P,
                        {"recorder": "interop.py", "method": "per-rank test", "seed": None})
    for t in PR_ITERS:
        w.put(t, [flat_of[(t, r)] for r in range(PR_P)])
    w.close()

    # 1. Written with safetensors.numpy.save_file, parameter order in the metadata.
    pr = os.path.join(tmp, "pr")
    write_per_rank(pr, grads)
    info = json.loads(run("trace", "info", pr, "--json").stdout)
    check(info["layout"] == "per-rank" and info["format_version"] == 2, f"per-rank: {info}")
    check(info["layer_order"] == "metadata", "per-rank: order from the metadata")
    check([L["name"] for L in info["layers"]] == PR_NAMES, "per-rank: parameter order kept")
    check([L["shape"] for L in info["layers"]][3] == [1], "per-rank: scalar as [1]")
    check(info["workers"] == PR_P and info["iterations"] == PR_ITERS, "per-rank: P and ids")
    for (t, r), v in flat_of.items():
        check(np.array_equal(dump(pr, t, r), v), f"per-rank: iteration {t} rank {r} values")
    # deftsim run: the same rows as the flat layout, every untimed column.
    sys.path.insert(0, os.path.join(os.environ.get("DEFTSIM_SOURCE_ROOT", "."), "tests",
                                    "reliability"))
    import rowcmp
    fh, frows = run_rows(tmp, flat, "flat")
    ph, prows = run_rows(tmp, pr, "perrank")
    check(len(frows) > 0, "per-rank: the flat run has rows")
    rowcmp.compare("per-rank vs flat rows", ph, prows, fh, frows,
                   lambda m: check(False, m), exact_simulated=True)

    # The recorder's DDP writer (RankWriter, numpy path) writes the same trace.
    byw = os.path.join(tmp, "pr-rankwriter")
    for r in range(PR_P):
        rw = rec.RankWriter(byw, r, PR_P, "prmodel", {"recorder": "interop.py", "seed": 5})
        for t in PR_ITERS:
            rw.put(t, grads[(t, r)])
    info = json.loads(run("trace", "info", byw, "--json").stdout)
    check([L["name"] for L in info["layers"]] == PR_NAMES, "RankWriter: order")
    check(info["provenance"]["seed"] == 5 and info["provenance"]["recorder"] == "interop.py",
          f"RankWriter: provenance {info['provenance']}")
    for (t, r), v in flat_of.items():
        check(np.array_equal(dump(byw, t, r), v), f"RankWriter: iteration {t} rank {r}")

    # 2. import writes the manifest, once; a different one is left alone.
    r = run("trace", "import", pr)
    check("written" in r.stdout, f"import: {r.stdout}")
    man = os.path.join(pr, "manifest.json")
    m = json.load(open(man))
    check(m["format_version"] == 2 and m["layout"] == "per-rank" and m["workers"] == PR_P and
          m["iterations"] == PR_ITERS and m["model"]["numel"] == PR_NUMEL and
          [L["name"] for L in m["model"]["layers"]] == PR_NAMES, f"import: manifest {m}")
    check("unchanged" in run("trace", "import", pr).stdout, "import: twice")
    ph2, prows2 = run_rows(tmp, pr, "perrank-manifest")
    rowcmp.compare("per-rank with manifest vs flat rows", ph2, prows2, fh, frows,
                   lambda m: check(False, m), exact_simulated=True)
    m["model"]["name"] = "edited"
    text = json.dumps(m)
    with open(man, "w") as f:
        f.write(text)
    r = run("trace", "import", pr, expect=2)
    check("manifest.json: exists and differs" in r.stderr, f"import clobber: {r.stderr}")
    check(open(man).read() == text, "import: a different manifest is left alone")
    os.remove(man)
    r = run("trace", "import", flat, expect=2)
    check("no iter_<t>/ folders of the per-rank layout to import" in r.stderr,
          f"import of a flat trace: {r.stderr}")

    # 3. Without the order metadata: name order, said so, deterministic.
    noorder = os.path.join(tmp, "pr-noorder")
    write_per_rank(noorder, grads, order=False)
    info = json.loads(run("trace", "info", noorder, "--json").stdout)
    check(info["layer_order"] == "sorted" and
          [L["name"] for L in info["layers"]] == sorted(PR_NAMES), f"no order: {info['layers']}")
    check("layer order sorted by name" in run("trace", "info", noorder, "--no-stats").stdout,
          "no order: info says so")
    r = run("trace", "import", noorder)
    check("not PyTorch's parameter order" in r.stderr, f"no order: import note {r.stderr}")
    check("sorted by name" in json.load(open(os.path.join(noorder, "manifest.json")))
          ["provenance"]["layer_order"], "no order: the manifest records it")
    v = np.concatenate([grads[(7, 2)][n].reshape(-1) for n in sorted(PR_NAMES)])
    check(np.array_equal(dump(noorder, 7, 2), v), "no order: values in name order")

    # 4. Named errors: exit 2, naming the file and the tensor.
    def broken(name, edit, *want):
        d = os.path.join(tmp, "pr-" + name)
        g = {k: dict(v) for k, v in grads.items()}
        skip = edit(d, g) or ()
        write_per_rank(d, g, skip=skip)
        r = run("trace", "info", d, "--no-stats", expect=2)
        for wnt in want:
            check(wnt in r.stderr, f"per-rank error {name}: '{wnt}' not in {r.stderr!r}")

    def shape_rank(d, g):
        g[(7, 1)]["fc.weight"] = np.zeros((5, 6), np.float32)
    broken("shape-rank", shape_rank, "iter_000007/rank_0001.safetensors", "tensor 'fc.weight'",
           "shape [5, 6]", "has [6, 5]")

    def shape_iter(d, g):
        g[(20, 0)]["conv.bias"] = np.zeros(5, np.float32)
    broken("shape-iter", shape_iter, "iter_000020/rank_0000.safetensors", "tensor 'conv.bias'",
           "shape [5]", "iter_000000/rank_0000.safetensors has [4]")

    def renamed(d, g):
        g[(0, 2)]["conv.b"] = g[(0, 2)].pop("conv.bias")
    broken("renamed", renamed, "iter_000000/rank_0002.safetensors", "tensor 'conv.bias' missing")

    def extra(d, g):
        g[(7, 0)]["extra.bias"] = np.zeros(2, np.float32)
    broken("extra", extra, "iter_000007/rank_0000.safetensors", "unexpected tensor 'extra.bias'")

    def missing_rank(d, g):
        return [(20, 1)]
    broken("missing-rank", missing_rank, "iter_000020/rank_0001.safetensors: missing",
           "no file of rank 1", "3 ranks")

    def last_rank(d, g):
        return [(0, 2)]
    broken("last-rank", last_rank, "iter_000000/rank_0002.safetensors: missing")

    def f64(d, g):
        g[(7, 2)]["out.weight"] = g[(7, 2)]["out.weight"].astype(np.float64)
    broken("f64", f64, "iter_000007/rank_0002.safetensors", "tensor 'out.weight'",
           "dtype F64 is not supported")

    def i32(d, g):
        g[(0, 0)]["conv.bias"] = np.arange(4, dtype=np.int32)
    broken("i32", i32, "iter_000000/rank_0000.safetensors", "tensor 'conv.bias'",
           "dtype I32 is not supported")

    def duplicate_iter(d, g):
        os.makedirs(os.path.join(d, "iter_7"))
    broken("dup-iter", duplicate_iter, "both name iteration 7")

    def empty_iter(d, g):
        os.makedirs(os.path.join(d, "iter_000030"))
    broken("empty-iter", empty_iter, "iter_000030: no rank files")

    d = os.path.join(tmp, "pr-order")
    write_per_rank(d, grads)
    g = grads[(7, 1)]
    save_file(g, os.path.join(d, "iter_000007", "rank_0001.safetensors"),
              metadata={"parameter_order": json.dumps(sorted(PR_NAMES))})
    r = run("trace", "info", d, "--no-stats", expect=2)
    check("iter_000007/rank_0001.safetensors" in r.stderr and "another order" in r.stderr,
          f"order mismatch: {r.stderr}")
    save_file(g, os.path.join(d, "iter_000007", "rank_0001.safetensors"),
              metadata={"rank": "2"})
    r = run("trace", "info", d, "--no-stats", expect=2)
    check("'__metadata__.rank' is '2'" in r.stderr, f"renamed rank file: {r.stderr}")
    # A per-rank manifest whose iteration has no folder.
    d = os.path.join(tmp, "pr-manifest")
    write_per_rank(d, grads)
    run("trace", "import", d)
    shutil.rmtree(os.path.join(d, "iter_000020"))
    r = run("trace", "info", d, "--no-stats", expect=2)
    check("iter_000020: missing: the manifest lists iteration 20" in r.stderr,
          f"manifest iteration without folder: {r.stderr}")


def f16_bf16(tmp):
    """16-bit gradients read as float32, exactly: every F16 and BF16 bit pattern."""
    bits = np.arange(65536, dtype=np.uint32)
    # F16 through the package: NumPy's float16 is the reference conversion.
    d = os.path.join(tmp, "pr-f16")
    os.makedirs(os.path.join(d, "iter_000000"))
    h = bits.astype(np.uint16).view(np.float16)
    save_file({"w": h}, os.path.join(d, "iter_000000", "rank_0000.safetensors"))
    want = h.astype(np.float32)
    got = dump(d, 0, 0)
    fin = ~np.isnan(want)
    check(np.array_equal(np.isnan(got), ~fin), "f16: NaNs where F16 has NaNs")
    check(np.array_equal(got[fin].view(np.uint32), want[fin].view(np.uint32)),
          "f16: every non-NaN value exact (signed zeros, subnormals, infinities)")
    # BF16: NumPy has none; the file is written by hand (the format is simple).
    d = os.path.join(tmp, "pr-bf16")
    os.makedirs(os.path.join(d, "iter_000000"))
    data = bits.astype(np.uint16).tobytes()
    header = json.dumps({"w": {"dtype": "BF16", "shape": [65536],
                               "data_offsets": [0, len(data)]}}).encode()
    header += b" " * ((8 - (8 + len(header)) % 8) % 8)
    with open(os.path.join(d, "iter_000000", "rank_0000.safetensors"), "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + data)
    want = (bits << 16).view(np.float32)
    got = dump(d, 0, 0)
    fin = ~np.isnan(want)
    check(np.array_equal(np.isnan(got), ~fin), "bf16: NaNs where BF16 has NaNs")
    check(np.array_equal(got[fin].view(np.uint32), want[fin].view(np.uint32)),
          "bf16: every non-NaN value exact")


def cli_errors(tmp):
    r = run("trace", "info", os.path.join(tmp, "nowhere"), expect=2)
    check("nowhere: trace folder does not exist" in r.stderr, f"missing trace: {r.stderr}")
    run("trace", "gen", "--model", "resnet18_cifar10", "--workers", "2", expect=2)
    run("trace", "gen", "--model", "resnet18_cifar10", "--workers", "2", "--iterations", "1",
        "--seed", "x", "-o", os.path.join(tmp, "x"), expect=2)
    r = run("trace", "gen", "--model", "resnet18_cifar10", "--workers", "2", "--iterations", "1",
            "--seed", "1", "--tail", "1.5", "-o", os.path.join(tmp, "x"), expect=2)
    check("synthetic.tail" in r.stderr, f"tail message: {r.stderr}")
    run("trace", "frobnicate", expect=2)
    check("info" in run("trace", "--help").stdout, "trace --help")


def main():
    check_philox()
    tmp = tempfile.mkdtemp(prefix="deftsim-interop-")
    try:
        deftsim_to_python(tmp)
        python_to_deftsim(tmp)
        recorder_writer(tmp)
        per_rank(tmp)
        f16_bf16(tmp)
        cli_errors(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        sys.exit(f"interop: {failures} check(s) failed")
    print("interop: all checks passed")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""reference.py - randk, hardthr and sidco against a numpy reference written from their
definitions (docs/SPARSIFIERS.md) and the authors' code, step by step on synthetic gradients.

Each case draws heavy-tailed float32 gradients (numpy, seeded), runs tests/sparsify's
ref_driver (REF_DRIVER, or build/tests/sparsify/ref_driver) on them for T iterations and
computes the same steps here: the draws (splitmix64, xoshiro256**, Floyd's sampling), the
thresholds (SIDCo's fits in double with sums in index order; the gamma inverse by the same
bracketed Newton iteration), the selections, the aggregate (float32 sums in worker order, then
/ P), the residuals and every worker's bytes under the ring allgather and allreduce. Everything
must be equal bit for bit; no tolerance. Needs numpy.
"""
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit("reference.py: numpy is required")

M64 = (1 << 64) - 1
GOLD = 0x9E3779B97F4A7C15
DBL_EPS = sys.float_info.epsilon
DBL_MIN = sys.float_info.min


def splitmix64(z):
    z = (z + GOLD) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class Xoshiro:
    def __init__(self, seed):
        self.s = []
        for _ in range(4):
            self.s.append(splitmix64(seed))
            seed = (seed + GOLD) & M64

    def next(self):
        s = self.s
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M64
        res = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return res


def randk_draw(seed, t, tag, n, k):
    g = Xoshiro(seed ^ splitmix64(t ^ splitmix64(tag)))
    taken, out = set(), []
    for j in range(n - k, n):
        m = j + 1
        floor_ = ((1 << 64) - m) % m
        while True:
            x = g.next()
            if x >= floor_:
                r = x % m
                break
        if r in taken:
            r = j
        taken.add(r)
        out.append(r)
    return out


# ---- SIDCo ------------------------------------------------------------------------------

def gamma_q(a, x):
    if x <= 0:
        return 1.0
    lg = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:
        ap, dl = a, 1.0 / a
        s = dl
        for _ in range(1000):
            ap += 1.0
            dl *= x / ap
            s += dl
            if abs(dl) < abs(s) * 1e-16:
                break
        return 1.0 - s * math.exp(lg)
    b = x + 1.0 - a
    c = 1.0 / DBL_MIN
    dd = 1.0 / b
    h = dd
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        dd = an * dd + b
        if abs(dd) < DBL_MIN:
            dd = DBL_MIN
        c = b + an / c
        if abs(c) < DBL_MIN:
            c = DBL_MIN
        dd = 1.0 / dd
        dl = dd * c
        h *= dl
        if abs(dl - 1.0) < 1e-16:
            break
    return math.exp(lg) * h


def gamma_qinv(a, q):
    lo, hi = 0.0, (a if a > 1 else 1.0)
    for _ in range(2000):
        if not gamma_q(a, hi) > q:
            break
        lo = hi
        hi *= 2.0
    x = 0.5 * (lo + hi)
    for _ in range(200):
        f = gamma_q(a, x) - q
        if f > 0:
            lo = x
        else:
            hi = x
        dens = math.exp(-x + (a - 1.0) * math.log(x) - math.lgamma(a))
        nx = x + f / dens if dens > 0 else 0.5 * (lo + hi)
        if not (lo < nx < hi):
            nx = 0.5 * (lo + hi)
        if abs(nx - x) <= 1e-15 * x or hi - lo <= 1e-15 * hi:
            x = nx
            break
        x = nx
    return x


def seqsum(a):
    """Sum in index order, in double (C's loop)."""
    return float(np.add.accumulate(np.asarray(a, dtype=np.float64))[-1]) if len(a) else 0.0


def gpareto_thr(m, v, r):
    if not v > 0:
        return math.nan
    q = m * m / v
    alpha = 0.5 * m * (q + 1.0)
    kk = 0.5 * (q - 1.0)
    if kk == 0:
        return -alpha * math.log(r)
    return alpha * (1.0 - math.exp(kk * math.log(r))) / kk


def first_stage(dist, x, r):
    n = len(x)
    m = seqsum(x) / n
    if dist == "gpareto":
        e = x - m
        return gpareto_thr(m, seqsum(e * e) / (n - 1) if n > 1 else math.nan, r)
    if dist == "gamma":
        sl = seqsum([math.log(float(v) + DBL_EPS) for v in x])
        sh = math.log(m) - sl / n
        if sh > 0 and math.isfinite(sh):
            alpha = (3.0 - sh + math.sqrt((sh - 3.0) * (sh - 3.0) + 24.0 * sh)) / (12.0 * sh)
            return m / alpha * gamma_qinv(alpha, r)
    return -m * math.log(r)


def sidco_fit(acc, d, dist, stages):
    a64 = acc.astype(np.float64)
    norm = math.sqrt(seqsum(a64 * a64))
    if not (norm > 0 and math.isfinite(norm)):
        return np.float32(np.inf), 1
    x = np.abs(acc).astype(np.float64) / norm
    multi = (stages > 1 or stages == 0) and d < 0.25
    thr = first_stage(dist, x, 0.25 if multi else d)
    ran = 1
    if not multi or not math.isfinite(thr):
        return np.float32(thr * norm), ran
    r_ratio = d / 0.25
    if stages == 0:
        i_ratio = 0.25
        loop = int(math.ceil(math.log(r_ratio) / math.log(i_ratio)))
    else:
        i_ratio = math.pow(r_ratio, 1.0 / (stages - 1))
        loop = stages - 1
    surv = x[x > thr]
    for i in range(loop, 0, -1):
        if i != loop:
            surv = surv[surv > thr]
        c = len(surv)
        if c < 2:
            break
        tmin = float(surv.min())
        ri = r_ratio / math.pow(i_ratio, loop - 1) if (i == 1 and stages == 0) else i_ratio
        y = surv - tmin
        m = seqsum(y) / c
        e = y - m
        v = seqsum(e * e) / (c - 1)
        nt = (-m * math.log(ri) + tmin) if dist == "exp" else gpareto_thr(m, v, ri) + tmin
        if not math.isfinite(nt):
            break
        thr = nt
        ran += 1
    return np.float32(thr * norm), ran


# ---- bytes ------------------------------------------------------------------------------

def allgather(b):
    P, B = len(b), sum(b)
    return [B - b[(r + 1) % P] for r in range(P)], [B - b[r] for r in range(P)]


def allreduce(m, e, P):
    chunk = lambda c: (m // P + (1 if c < m % P else 0)) * e
    return ([2 * m * e - chunk((r + 1) % P) - chunk((r + 2) % P) for r in range(P)],
            [2 * m * e - chunk(r) - chunk((r + 1) % P) for r in range(P)])


def add(tot, part):
    for i in range(len(tot[0])):
        tot[0][i] += part[0][i]
        tot[1][i] += part[1][i]


# ---- the methods ------------------------------------------------------------------------

def finish(vals, P):
    if P & (P - 1) == 0:
        return vals * (np.float32(1.0) / np.float32(P))
    return vals / np.float32(P)


def pairs_step(accs, picks, P, n, si, sv, cb, padded):
    """The threshold methods' exchange: (idx, vals, sent, recv); residuals zeroed at picks."""
    dense = np.zeros(n, dtype=np.float32)
    for w in range(P):
        dense[picks[w]] += accs[w][picks[w]]
    for w in range(P):
        accs[w][picks[w]] = 0
    idx = np.unique(np.concatenate(picks)) if P else np.array([], dtype=np.int64)
    tot = ([0] * P, [0] * P)
    if P > 1:
        add(tot, allgather([cb] * P))
        mx = max(len(p) for p in picks)
        add(tot, allgather([(mx if padded else len(p)) * (si + sv) for p in picks]))
    return idx, finish(dense[idx], P), tot


def reference(method, d, P, T, n, seed, grads, opts):
    si, sv, cb = 4, 4, 4
    k = max(1, min(n, int(math.floor(d * n))))
    accs = [np.zeros(n, dtype=np.float32) for _ in range(P)]
    steps = []
    lam = None
    cur = [1] * P
    sum_ratio = [0.0] * P
    it = [0] * P
    for t in range(T):
        for w in range(P):
            accs[w] += grads[t, w]
        thr, stg = math.nan, math.nan
        if method == "randk":
            if opts.get("randk_seed", "shared") == "shared":
                U = sorted(randk_draw(seed, t, 0, n, k))
                vals = accs[0][U].copy()
                for w in range(1, P):
                    vals += accs[w][U]
                for w in range(P):
                    accs[w][U] = 0
                idx, vals = np.array(U), finish(vals, P)
                tot = allreduce(k, sv, P) if P > 1 else ([0] * P, [0] * P)
                counts = [k] * P
            else:
                picks = [np.array(randk_draw(seed, t, w + 1, n, k)) for w in range(P)]
                dense = np.zeros(n, dtype=np.float32)
                for w in range(P):
                    dense[picks[w]] += accs[w][picks[w]]
                    accs[w][picks[w]] = 0
                idx = np.unique(np.concatenate(picks))
                vals = finish(dense[idx], P)
                tot = allgather([k * (si + sv)] * P) if P > 1 else ([0] * P, [0] * P)
                counts = [k] * P
            K = M = None
        elif method == "hardthr":
            if lam is None:
                given = float(opts.get("hardthr_lambda", 0))
                if given > 0:
                    lam = np.float32(given)
                else:
                    lam = np.sort(np.abs(accs[0]))[::-1][k - 1]
            picks = [np.nonzero(np.abs(a) >= lam)[0] for a in accs]
            counts = [len(p) for p in picks]
            idx, vals, tot = pairs_step(accs, picks, P, n, si, sv, cb,
                                        opts.get("hardthr_exchange") == "padded")
            thr, K, M = float(lam), sum(counts), max(counts)
        else:
            dist = opts.get("sidco_dist", "exp")
            stages = int(opts.get("sidco_stages", -1))
            picks, ts, rs = [], [], []
            for w in range(P):
                T_w, ran = sidco_fit(accs[w], d, dist, cur[w] if stages < 0 else stages)
                if np.isfinite(T_w):
                    ge = np.nextafter(T_w, np.float32(np.inf))
                    picks.append(np.nonzero(np.abs(accs[w]) >= ge)[0])
                else:
                    picks.append(np.array([], dtype=np.int64))
                ts.append(float(T_w))
                rs.append(ran)
                if stages < 0:
                    sum_ratio[w] += (1.0 * len(picks[w]) / n) / d
                    it[w] += 1
                    if it[w] >= 5:
                        est = 1.0 * sum_ratio[w] / it[w]
                        if est > 1 + 0.2:
                            cur[w] -= 1
                        elif est < 1 - 0.2:
                            cur[w] += 1
                        mx = int(math.ceil(math.log(d) / math.log(0.5)))
                        cur[w] = max(min(cur[w], mx), 1)
                        sum_ratio[w], it[w] = 0.0, 0
            counts = [len(p) for p in picks]
            idx, vals, tot = pairs_step(accs, picks, P, n, si, sv, cb,
                                        opts.get("sidco_exchange") == "padded")
            s = 0.0
            for v in ts:
                s += v
            thr, K, M = s / P, sum(counts), max(counts)
            s = 0.0
            for v in rs:
                s += v
            stg = s / P
        steps.append(dict(idx=[int(i) for i in idx], val=np.asarray(vals, dtype=np.float32),
                          count=counts, sent=tot[0], recv=tot[1], thr=thr, stages=stg, K=K, M=M))
    return steps, accs


def parse(path, P, n):
    steps, res = [], {}
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines) and lines[i].startswith("step"):
        h = lines[i].split()
        st = dict(nnz=int(h[2]), thr=float.fromhex(h[3]), stages=float.fromhex(h[4]),
                  K=int(h[5]), M=int(h[6]))
        st["idx"] = [int(v) for v in lines[i + 1].split()[1:]]
        st["val"] = np.array([float.fromhex(v) for v in lines[i + 2].split()[1:]], dtype=np.float32)
        st["count"] = [int(v) for v in lines[i + 3].split()[1:]]
        st["sent"] = [int(v) for v in lines[i + 4].split()[1:]]
        st["recv"] = [int(v) for v in lines[i + 5].split()[1:]]
        steps.append(st)
        i += 6
    while i < len(lines) and lines[i].startswith("res"):
        p = lines[i].split()
        res[int(p[1])] = np.array([float.fromhex(v) for v in p[2:]], dtype=np.float32)
        i += 1
    return steps, res


def same_float(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def run_case(driver, tmp, name, method, d, P, T, n, seed, opts):
    rng = np.random.default_rng(seed)
    g = (rng.standard_t(2.5, size=(T, P, n)) * 1e-3).astype(np.float32)
    g[rng.random(size=g.shape) < 0.02] = 0  # exact zeros, as sparse layers give
    gpath = os.path.join(tmp, name + ".f32")
    g.tofile(gpath)
    out = os.path.join(tmp, name + ".out")
    cmd = [driver, method, repr(d), str(P), str(T), str(n), str(seed), gpath, out]
    cmd += [f"{k}={v}" for k, v in opts.items()]
    subprocess.run(cmd, check=True)
    got, res = parse(out, P, n)
    want, accs = reference(method, d, P, T, n, seed, g, opts)
    errs = []
    for t, (a, b) in enumerate(zip(got, want)):
        if a["idx"] != b["idx"]:
            errs.append(f"t={t}: aggregate indices differ ({len(a['idx'])} vs {len(b['idx'])})")
        elif not np.array_equal(a["val"].view(np.uint32), b["val"].view(np.uint32)):
            errs.append(f"t={t}: aggregate values differ")
        for key in ("count", "sent", "recv"):
            if a[key] != b[key]:
                errs.append(f"t={t}: {key} {a[key]} vs {b[key]}")
        if method != "randk":
            if not same_float(a["thr"], b["thr"]):
                errs.append(f"t={t}: threshold {a['thr']!r} vs {b['thr']!r}")
            if (a["K"], a["M"]) != (b["K"], b["M"]):
                errs.append(f"t={t}: K, m {a['K']}, {a['M']} vs {b['K']}, {b['M']}")
        if method == "sidco" and not same_float(a["stages"], b["stages"]):
            errs.append(f"t={t}: stages {a['stages']} vs {b['stages']}")
    if len(got) != T:
        errs.append(f"{len(got)} steps, expected {T}")
    for w in range(P):
        if not np.array_equal(res[w].view(np.uint32), accs[w].view(np.uint32)):
            errs.append(f"residual of worker {w} differs")
    kept = [s["K"] if s["K"] is not None else sum(s["count"]) for s in want]
    print(f"{name}: {'ok' if not errs else 'FAIL'} (picks per step {kept})")
    for e in errs[:10]:
        print("   ", e)
    return not errs


def main():
    root = os.environ.get("DEFTSIM_BUILD_ROOT", "build")
    driver = os.environ.get("REF_DRIVER", os.path.join(root, "tests", "sparsify", "ref_driver"))
    cases = [
        ("randk_shared_P3", "randk", 0.01, 3, 4, 5000, 11, {"randk_seed": "shared"}),
        ("randk_indep_P4", "randk", 0.02, 4, 4, 5000, 12, {"randk_seed": "independent"}),
        ("hardthr_derived_P3", "hardthr", 0.01, 3, 6, 6000, 13, {}),
        ("hardthr_given_padded_P4", "hardthr", 0.01, 4, 4, 6000, 14,
         {"hardthr_lambda": "0.004", "hardthr_exchange": "padded"}),
        ("sidco_exp_adaptive_P3", "sidco", 0.01, 3, 12, 8000, 15, {"sidco_stages": "-1"}),
        ("sidco_exp_0_P4", "sidco", 0.001, 4, 3, 8000, 16, {"sidco_stages": "0"}),
        ("sidco_gpareto_3_P3", "sidco", 0.01, 3, 4, 8000, 17,
         {"sidco_dist": "gpareto", "sidco_stages": "3", "sidco_exchange": "padded"}),
        ("sidco_gamma_2_P2", "sidco", 0.01, 2, 4, 8000, 18,
         {"sidco_dist": "gamma", "sidco_stages": "2"}),
        ("sidco_gamma_1_P3", "sidco", 0.05, 3, 3, 8000, 19,
         {"sidco_dist": "gamma", "sidco_stages": "1"}),
    ]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for c in cases:
            ok &= run_case(driver, tmp, *c)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

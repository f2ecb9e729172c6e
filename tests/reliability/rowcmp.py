"""Comparing the rows of two runs of the same points (crash_resume.py, determinism.py).

Measured times differ from run to run and are skipped (docs/OUTPUT.md: phase_seconds,
select_seconds, worker_seconds, imbalance_seconds, prepare_seconds, step_seconds, ref_seconds). The
simulated times (sim_start, sim_end, comm_seconds, select_critical_seconds,
iteration_seconds) come from a simulation fed with the measured compute phases. An event's
simulated time moves by at most the sum of the changes of the compute durations before it
where the simulation is max-plus (waits, latencies; bandwidth sharing can stretch that), and
each change is at most the larger of the two durations: so by at most S, the sum over the
iteration's workers of both runs' worker_seconds. comm_seconds is a sum, over the iteration's
C collectives, of (last departure - last arrival), each of which can move by 2 S. The
allowance is SLACK times S for the event times and SLACK times 2 C S for comm_seconds, plus
rounding; compare() returns the largest share of its allowance a difference used. Every other
column must be the same text. With [network] compute = none the simulated times do not depend
on the measured ones, and compare(..., exact_simulated=True) asks for them to the last digit.
"""

MEASURED = {"phase_seconds", "phase_seconds_min", "phase_seconds_max", "select_seconds",
            "select_seconds_min", "select_seconds_max", "worker_seconds", "imbalance_seconds",
            "prepare_seconds", "step_seconds", "ref_seconds"}
SIMULATED = {"sim_start", "sim_end", "comm_seconds", "select_critical_seconds",
             "iteration_seconds"}
ROUNDING = 1e-9
SLACK = 2.0


def _compute_sums(head, rows):
    """(method, density, P, iteration) -> sum over workers of worker_seconds, and the number
    of collectives of the iteration (worker 0's collective rows)."""
    c = {n: head.index(n) for n in ("method", "density", "P", "iteration", "phase_index",
                                      "worker_seconds", "worker", "phase_kind")}
    out, ncoll = {}, {}
    for r in rows:
        k = (r[c["method"]], r[c["density"]], r[c["P"]], r[c["iteration"]])
        if r[c["worker"]] == "0" and r[c["phase_kind"]] not in ("compute", "none"):
            ncoll[k] = ncoll.get(k, 0) + 1
        if r[c["phase_index"]] != "0":
            continue
        out[k] = out.get(k, 0.0) + float(r[c["worker_seconds"]] or 0)
    return out, ncoll


def compare(what, head, rows, rhead, rrows, fail, skip=(), exact_simulated=False):
    """Reports the first difference through fail(message) and returns None, or returns the
    largest deviation of a simulated time as a fraction of what the measured compute allows
    (0 .. 1). exact_simulated: the simulated times must be the same text too (runs with
    [network] compute = none, whose simulated times depend on the bytes alone); 0 is then
    returned."""
    if head != rhead:
        fail(f"{what}: the header differs from the reference's")
        return None
    if len(rows) != len(rrows):
        fail(f"{what}: {len(rows)} rows, the reference {len(rrows)}")
        return None
    (sa, ncoll), (sb, _) = _compute_sums(head, rows), _compute_sums(rhead, rrows)
    key = [head.index(n) for n in ("method", "density", "P", "iteration")]
    it_col = head.index("iteration_seconds")
    ignore = MEASURED | set(skip)
    worst = 0.0
    for i, (a, b) in enumerate(zip(rows, rrows)):
        for c, name in enumerate(head):
            if name in ignore or a[c] == b[c]:
                continue
            if name in SIMULATED and not exact_simulated and a[c] != "" and b[c] != "":
                k = tuple(a[j] for j in key)
                S = sa.get(k, 0.0) + sb.get(k, 0.0)
                if name == "comm_seconds":
                    S *= 2 * max(ncoll.get(k, 1), 1)
                allowed = SLACK * S + ROUNDING * abs(float(b[it_col]))
                d = abs(float(a[c]) - float(b[c]))
                if d <= allowed:
                    worst = max(worst, d / allowed if allowed > 0 else 1.0)
                    continue
            desc = ", ".join(f"{head[j]} {a[j]}" for j in key)
            fail(f"{what}: row {i + 2} ({desc}) column {name}: {a[c]!r}, the reference {b[c]!r}")
            return None
    return worst

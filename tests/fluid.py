"""Test helpers for the allocator: a fluid simulator and two independent oracles.

* :func:`run_fluid` drives a real :class:`safs.core.allocator.Allocator`: at every event (a flow
  finishing, or every ``max_step_ns``) it hands the allocator the flows' remaining bytes,
  reads the rates, and integrates them exactly (integer bit-nanoseconds) until the next event.
* :func:`edf_feasible` / :func:`edf_max_lateness`: earliest deadline first on one link with all
  flows released at time 0 (Liu & Layland 1973; Jackson's rule for maximum lateness: serving in
  deadline order minimises maximum lateness on one machine, J. R. Jackson 1955).
* :func:`lp_min_max_lateness`: a linear-program oracle (scipy ``linprog``/HiGHS) for the
  smallest maximum lateness any fluid schedule can reach when flows share several links.

The oracles use no allocator code: they only read plain numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class FluidFlow:
    """A flow for the fluid simulator and oracles; all released at time 0.

    Attributes:
        flow_id: 1..2^32-1. sender/receiver: host names. size_bytes: > 0.
        deadline_ns: no-bubble timestamp, ns (absolute, small: the tests stay far from wrap).
        background: SAFS background flow (no deadline counted).
    """

    flow_id: int
    sender: str
    receiver: str
    size_bytes: int
    deadline_ns: int
    background: bool = False


@dataclass
class FluidResult:
    """Outcome of :func:`run_fluid`: finish time per flow (ns) and number of allocator calls."""

    finish_ns: dict[int, int] = field(default_factory=dict)
    steps: int = 0

    def max_lateness_ns(self, flows: Sequence[FluidFlow]) -> int:
        """max over pipeline flows of (finish - deadline), ns (negative: all early)."""
        return max(self.finish_ns[f.flow_id] - f.deadline_ns for f in flows if not f.background)


def run_fluid(
    allocator: object,
    flows: Sequence[FluidFlow],
    *,
    max_step_ns: int | None = None,
    use_installed: bool = False,
    on_step: Callable[[int, dict[int, int]], None] | None = None,
    max_steps: int = 100_000,
) -> FluidResult:
    """Run flows to completion under the allocator's rates.

    Args:
        allocator: a fresh ``safs.core.allocator.Allocator`` that knows the flows' hosts.
        flows: the flows, all starting at time 0.
        max_step_ns: recompute at least this often (ns); None: only when a flow finishes.
        use_installed: integrate the installed grants instead of the computed rates.
        on_step: called as ``on_step(now_ns, remaining_bytes_by_flow)`` after each allocation.
        max_steps: safety bound; exceeding it (or all rates 0 while bytes remain) raises.

    Returns:
        :class:`FluidResult`. Remaining bytes are rounded up when handed to the allocator;
        finish times are rounded up to whole ns (at most 1 ns per step).
    """
    from safs.core.allocator import AllocFlow  # the only allocator name used: building its input

    # Remaining data in bit-nanoseconds (bits * 1e9) so that rate(bit/s) * dt(ns) is exact.
    left = {f.flow_id: f.size_bytes * 8 * NS_PER_S for f in flows}
    spec = {f.flow_id: f for f in flows}
    result = FluidResult()
    now = 0
    while left:
        if result.steps >= max_steps:
            raise RuntimeError(f"fluid run did not finish in {max_steps} steps")
        result.steps += 1
        remaining = {fid: -(-v // (8 * NS_PER_S)) for fid, v in left.items()}
        batch = [
            AllocFlow(fid, spec[fid].sender, spec[fid].receiver, remaining[fid], spec[fid].deadline_ns,
                      spec[fid].background)
            for fid in sorted(left)
        ]
        allocator.upsert_many(batch, now)
        if use_installed:
            rates = {fid: g.rate_bps for fid, g in allocator.grants().items()}
        else:
            rates = allocator.computed_rates()
        if on_step is not None:
            on_step(now, remaining)
        finish_in = [-(-left[fid] // rates[fid]) for fid in left if rates[fid] > 0]
        if not finish_in:
            raise RuntimeError(f"no flow has a positive rate at t={now} ns with {len(left)} left")
        step = min(finish_in)
        if max_step_ns is not None:
            step = min(step, max_step_ns)
        now += step
        for fid in sorted(left):
            left[fid] -= rates[fid] * step
            if left[fid] <= 0:
                del left[fid]
                result.finish_ns[fid] = now
                allocator.remove(fid, now)
    return result


def edf_feasible(flows: Sequence[FluidFlow], usable_bps: int) -> bool:
    """EDF feasibility on one link: for every k in deadline order, bits of flows 1..k fit by d_k.

    Args:
        flows: pipeline flows all released at 0. usable_bps: the link's usable rate.
    """
    return edf_max_lateness(flows, usable_bps) <= 0


def edf_max_lateness(flows: Sequence[FluidFlow], usable_bps: int) -> int:
    """Maximum lateness (ns) of serving the flows one after another in deadline order at full rate.

    By Jackson's rule this is the smallest maximum lateness any schedule on this link achieves.
    Finish times are rounded up to whole ns.
    """
    done_bitns = 0
    worst = None
    for f in sorted(flows, key=lambda f: (f.deadline_ns, f.flow_id)):
        done_bitns += f.size_bytes * 8 * NS_PER_S
        finish = -(-done_bitns // usable_bps)
        lateness = finish - f.deadline_ns
        worst = lateness if worst is None else max(worst, lateness)
    assert worst is not None, "no flows"
    return worst


def lp_min_max_lateness(
    flows: Sequence[FluidFlow],
    receiver_usable_bps: Mapping[str, int],
    sender_usable_bps: Mapping[str, int],
    tolerance_ns: float = 1.0,
) -> float:
    """Smallest maximum lateness (ns) of any fluid schedule, by bisection over LP feasibility.

    For a candidate lateness L, every flow i must deliver its bits within [0, d_i + L]. With the
    union of {0} and all d_i + L as interval boundaries, a fluid schedule exists iff the LP
    "x[i, j] >= 0 bits of flow i in interval j (only intervals ending by d_i + L);
    sum_j x[i, j] = bits_i; for every sender uplink and receiver link and interval j, the bits
    of its flows in j <= usable rate * length of j" is feasible (within an interval any such
    amounts can be sent at constant rates). Feasibility is monotone in L, so bisection finds the
    optimum to ``tolerance_ns``. Units inside: kbit and µs (rates in kbit/µs) for conditioning.
    """
    import numpy as np
    from scipy.optimize import linprog

    pipeline = [f for f in flows if not f.background]
    bits = [f.size_bytes * 8 / 1000.0 for f in pipeline]  # kbit
    dl = [f.deadline_ns / 1000.0 for f in pipeline]  # µs
    rates = {("r", k): v / 1e9 for k, v in receiver_usable_bps.items()}  # bit/ns = kbit/µs
    rates.update({("s", k): v / 1e9 for k, v in sender_usable_bps.items()})

    def feasible(lat_us: float) -> bool:
        ends = [d + lat_us for d in dl]
        if min(ends) <= 0:
            return False
        bounds = sorted({0.0, *ends})
        intervals = list(zip(bounds, bounds[1:]))
        var = [(i, j) for i in range(len(pipeline)) for j, (_, hi) in enumerate(intervals) if hi <= ends[i] + 1e-12]
        a_eq = np.zeros((len(pipeline), len(var)))
        for col, (i, _) in enumerate(var):
            a_eq[i, col] = 1.0
        rows, rhs = [], []
        for res, rate in rates.items():
            for j, (lo, hi) in enumerate(intervals):
                row = np.zeros(len(var))
                for col, (i, jj) in enumerate(var):
                    f = pipeline[i]
                    uses = (res == ("r", f.receiver)) or (res == ("s", f.sender))
                    if jj == j and uses:
                        row[col] = 1.0
                if row.any():
                    rows.append(row)
                    rhs.append(rate * (hi - lo))
        out = linprog(np.zeros(len(var)), A_ub=np.array(rows), b_ub=np.array(rhs), A_eq=a_eq,
                      b_eq=np.array(bits), bounds=(0, None), method="highs")
        return out.status == 0

    lo = -min(dl)  # infeasible: some window is empty
    hi = sum(bits) / min(rates.values()) + max(0.0, -lo)  # everything fits one after another
    while not feasible(hi):
        hi *= 2
    tol_us = tolerance_ns / 1000.0
    while hi - lo > tol_us:
        mid = (lo + hi) / 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return hi * 1000.0

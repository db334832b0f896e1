"""Allocator lateness against independent oracles where several links bind.

The oracle (tests/fluid.py::lp_min_max_lateness) is a linear program over the fluid schedule;
it shares no code with the allocator.

Why no exact match in multi-link cases: the allocator is a greedy (deadline order, each flow
takes ``min(residual receiver, residual sender)``), not an optimiser. When a sender feeds two
receivers, serving its most urgent flow first can leave a receiver idle that an optimal
schedule would have kept busy with a less urgent flow, and the LP may delay an urgent flow
within its slack to keep both links busy; the greedy does not look ahead. What does hold, and
is asserted here:

1. No schedule beats the LP: ours >= LP* - tolerance (checks the simulator and the oracle).
2. A provable per-flow bound from maximal allocation: at every moment a flow with bytes left has
   its receiver link or its sender uplink saturated (work conservation, phase 3), so flow f
   finishes by ``B(R_f)/u(R_f) + B(S_f)/u(S_f)``, where B is all bits crossing the resource
   and u its usable rate. Hence lateness_f <= that minus d_f.
3. Relative to the LP: every resource must carry its bits by ``d_max + LP*`` in the optimal
   schedule, so (2) gives ``ours <= 2 * LP* + 2 * d_max - d_min`` (a 2-approximation shape).
4. Measured gap (seeded, deterministic, 150 random cases of 2-6 flows, 1-3 senders and
   receivers, seed 2026): ours == LP* within 1 µs in 131/150 cases; the worst gap was 35.9%
   of our schedule's length (31% in another 300-case sample); no case missed a deadline where
   the LP met all of them. The seeded test pins >= 80% exact and < 40% worst gap so that a
   regression shows; it is a measurement, not a guarantee (points 2 and 3 are the guarantee).
"""

from __future__ import annotations

import random

from fluid import NS_PER_S, FluidFlow, edf_max_lateness, lp_min_max_lateness, run_fluid
from hypothesis import given, settings
from hypothesis import strategies as st

from safs.core.allocator import Allocator, AllocatorConfig

G = 1_000_000_000
TOL_NS = 1_000  # rounding of the fluid run (ns per step) plus LP bisection tolerance


@st.composite
def multi_link(draw: st.DrawFn) -> tuple[list[FluidFlow], dict[str, int], dict[str, int]]:
    """2-6 pipeline flows over 1-3 senders and 1-3 receivers with mixed capacities."""
    caps = st.sampled_from([10 * G, 25 * G, 40 * G])
    receivers = {f"r{i}": draw(caps) for i in range(draw(st.integers(1, 3)))}
    senders = {f"s{i}": draw(caps) for i in range(draw(st.integers(1, 3)))}
    flows = [
        FluidFlow(i + 1, draw(st.sampled_from(sorted(senders))), draw(st.sampled_from(sorted(receivers))),
                  draw(st.integers(1_000, 1_000_000)), draw(st.integers(1_000, 400_000)))
        for i in range(draw(st.integers(2, 6)))
    ]
    return flows, receivers, senders


def run_case(
    flows: list[FluidFlow], receivers: dict[str, int], senders: dict[str, int]
) -> tuple[int, float, int, dict, dict]:
    """(our max lateness, LP optimum, our schedule length, usable receivers, usable senders)."""
    config = AllocatorConfig(line_rate_bps=40 * G, urgency_quantum_ns=1)  # exact EDF order
    alloc = Allocator(config, receivers, senders)
    usable_r = {k: alloc.receiver_usable_bps(k) for k in receivers}
    usable_s = {k: alloc.sender_usable_bps(k) for k in senders}
    result = run_fluid(alloc, flows)
    lp = lp_min_max_lateness(flows, usable_r, usable_s)
    return result.max_lateness_ns(flows), lp, max(result.finish_ns.values()), usable_r, usable_s


def test_lp_oracle_agrees_with_edf_on_one_link() -> None:
    """Two independent oracles, one answer: on a single link the LP optimum is EDF's (Jackson)."""
    rng = random.Random(7)
    for _ in range(20):
        n = rng.randint(1, 6)
        flows = [
            FluidFlow(i + 1, f"s{i}", "r", rng.randint(1_000, 2_000_000), rng.randint(1_000, 400_000)) for i in range(n)
        ]
        usable = 9_500_000_000
        lp = lp_min_max_lateness(flows, {"r": usable}, {f.sender: 10 * usable for f in flows})
        assert abs(lp - edf_max_lateness(flows, usable)) <= 2.0


@settings(max_examples=100, deadline=None)
@given(multi_link())
def test_multi_link_lateness_bounds(case: tuple) -> None:
    flows, receivers, senders = case
    ours, lp, _, usable_r, usable_s = run_case(flows, receivers, senders)
    assert ours >= lp - TOL_NS, "beat the LP optimum: the fluid run broke a capacity"
    bits_r: dict[str, int] = {}
    bits_s: dict[str, int] = {}
    for f in flows:
        bits_r[f.receiver] = bits_r.get(f.receiver, 0) + f.size_bytes * 8 * NS_PER_S
        bits_s[f.sender] = bits_s.get(f.sender, 0) + f.size_bytes * 8 * NS_PER_S
    per_flow = max(
        bits_r[f.receiver] / usable_r[f.receiver] + bits_s[f.sender] / usable_s[f.sender] - f.deadline_ns for f in flows
    )
    assert ours <= per_flow + TOL_NS
    d_max = max(f.deadline_ns for f in flows)
    d_min = min(f.deadline_ns for f in flows)
    assert ours <= 2 * lp + 2 * d_max - d_min + TOL_NS


def test_multi_link_gap_to_lp_seeded() -> None:
    """Pinned measurement over 150 seeded random cases (see module docstring, point 4)."""
    rng = random.Random(2026)
    exact = 0
    worst_share = 0.0
    for _ in range(150):
        receivers = {f"r{i}": rng.choice([10 * G, 25 * G, 40 * G]) for i in range(rng.randint(1, 3))}
        senders = {f"s{i}": rng.choice([10 * G, 25 * G, 40 * G]) for i in range(rng.randint(1, 3))}
        flows = [
            FluidFlow(
                i + 1,
                rng.choice(sorted(senders)),
                rng.choice(sorted(receivers)),
                rng.randint(1_000, 1_000_000),
                rng.randint(1_000, 400_000),
            )
            for i in range(rng.randint(2, 6))
        ]
        ours, lp, length, _, _ = run_case(flows, receivers, senders)
        if lp <= 0:
            assert ours <= TOL_NS, "the LP meets every deadline but we do not"
        exact += ours <= lp + TOL_NS
        worst_share = max(worst_share, (ours - lp) / length)
    print(f"exact {exact}/150, worst gap {worst_share:.3f} of schedule length")
    assert exact >= 0.8 * 150
    assert worst_share < 0.40

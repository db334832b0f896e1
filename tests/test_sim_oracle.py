"""The "edf-oracle" policy (safs.experiments.sim.oracle): EDF against an independent single-machine EDF
computation, preemption, background sharing, packet overheads, the SimResult shape, bad input."""

from __future__ import annotations

from fractions import Fraction

import pytest

from safs.core.errors import InvalidInput
from safs.core.topology import build_topology
from safs.experiments.policies import POLICIES
from safs.experiments.sim.backend import simulate
from safs.experiments.sim.config import SimConfig
from safs.experiments.sim.oracle import OracleFlow, OracleNetwork, edf_rates
from safs.experiments.sim.simulation import Simulation
from safs.experiments.workloads.api import FlowSpec

US = 1_000
RATE = 100_000_000_000
NS_PER_S = 1_000_000_000
TOL_NS = 1  # the oracle rounds each completion up to a whole ns: at most 1 ns per hand-over


def star(n_hosts: int, delay_ns: int = 500):
    return build_topology({
        "name": "star", "defaults": {"rate": "100Gbps", "delay_ns": delay_ns, "buffer_bytes": 1 << 20},
        "switches": ["tor0"],
        "hosts": {f"h{i}": {"ip": f"10.0.0.{i + 1}", "switch": "tor0"} for i in range(n_hosts)}})


class Timed:
    """Starts each (spec, send_at) at its time (announced at 0); done when all pipeline flows are."""

    def __init__(self, flows: list[tuple[FlowSpec, int]]) -> None:
        self.flows = flows
        self.left = sum(s.flow_class == "pipeline" for s, _ in flows)

    def start(self, api) -> None:
        for spec, at in self.flows:
            api.start_flow(spec, self._done if spec.flow_class == "pipeline" else (lambda t: None), at)

    def _done(self, _: int) -> None:
        self.left -= 1

    def done(self) -> bool:
        return self.left == 0

    def metrics(self) -> dict[str, float]:
        return {"left": float(self.left)}


def wire_bytes(size: int, mtu: int = 9000) -> int:
    payload = mtu - 20 - 8 - 36  # IPv4 + UDP + SAFS header inside the MTU
    return size + -(-size // payload) * (14 + 20 + 8 + 36)


def single_machine_edf(jobs: list[tuple[int, Fraction, int]]) -> list[Fraction]:
    """Independent preemptive EDF on one machine: jobs (release ns, work ns, deadline ns), distinct
    deadlines; returns completion times. Event-driven: run the released job with the earliest
    deadline until it finishes or the next release."""
    left = [w for _, w, _ in jobs]
    done: list[Fraction | None] = [None] * len(jobs)
    t = Fraction(min(r for r, _, _ in jobs))
    while any(d is None for d in done):
        ready = [i for i, (r, _, _) in enumerate(jobs) if r <= t and done[i] is None]
        future = [r for i, (r, _, _) in enumerate(jobs) if r > t and done[i] is None]
        if not ready:
            t = Fraction(min(future))
            continue
        i = min(ready, key=lambda k: jobs[k][2])
        horizon = min(future) if future else None
        if horizon is None or t + left[i] <= horizon:
            t += left[i]
            left[i] = Fraction(0)
            done[i] = t
        else:
            left[i] -= horizon - t
            t = Fraction(horizon)
    return done  # type: ignore[return-value]


def expected_finishes(topo, flows: list[tuple[FlowSpec, int]]) -> list[Fraction]:
    """EDF completion on the shared receiver link plus the path latency the packet model adds
    (Topology.min_transfer_ns minus the serialisation at line rate)."""
    jobs = [(at, Fraction(wire_bytes(s.size_bytes) * 8 * NS_PER_S, RATE), s.no_bubble_ts_ns) for s, at in flows]
    done = single_machine_edf(jobs)
    out = []
    for (spec, _), (_, work, _), t in zip(flows, jobs, done):
        latency = topo.min_transfer_ns(spec.sender, spec.receiver, spec.size_bytes) - work
        out.append(t + latency)
    return out


def fan_in(deadlines_us: list[int], releases_us: list[int], size: int) -> list[tuple[FlowSpec, int]]:
    return [(FlowSpec(f"h{i + 1}", "h0", size, d * US, f"f{i}"), r * US)
            for i, (d, r) in enumerate(zip(deadlines_us, releases_us))]


def run(topo, flows, max_time_ns: int = 100_000 * US):
    return simulate(topo, Timed(flows), "edf-oracle", 1, SimConfig(max_time_ns=max_time_ns))


def test_feasible_single_bottleneck_meets_every_deadline_as_edf_does() -> None:
    # 5 x 1 MB (~81 us each at 100 Gbit/s) into h0, released over time; EDF-feasible deadlines
    # given in an order different from the release order.
    flows = fan_in([430, 170, 340, 520, 260], [0, 10, 20, 30, 40], 1_000_000)
    topo = star(6)
    res = run(topo, flows)
    assert res.workload_done and len(res.flows) == 5
    assert all(not f.missed and f.finish_ns <= f.no_bubble_ts_ns for f in res.flows)
    for rec, want in zip(res.flows, expected_finishes(topo, flows)):
        assert abs(rec.finish_ns - want) <= TOL_NS * len(flows), (rec.label, rec.finish_ns, float(want))
    assert (res.drops, res.control_bytes, res.ecn_marked_packets) == (0, 0, 0)
    assert res.data_bytes == sum(wire_bytes(s.size_bytes) for s, _ in flows)


def test_infeasible_single_bottleneck_max_lateness_equals_edf() -> None:
    flows = fan_in([150, 120, 200, 180, 90, 260], [0, 0, 5, 30, 40, 60], 1_500_000)
    topo = star(7)
    res = run(topo, flows)
    want = expected_finishes(topo, flows)
    late = max(f.finish_ns - f.no_bubble_ts_ns for f in res.flows)
    want_late = max(t - s.no_bubble_ts_ns for t, (s, _) in zip(want, flows))
    assert want_late > 0  # really infeasible
    assert abs(late - want_late) <= TOL_NS * len(flows)
    # and it is strictly better than serving in release order (FIFO), so the check can fail
    fifo_t, fifo_late = Fraction(0), Fraction(-(10**18))
    for (spec, at) in flows:
        fifo_t = max(fifo_t, Fraction(at)) + Fraction(wire_bytes(spec.size_bytes) * 8 * NS_PER_S, RATE)
        fifo_late = max(fifo_late, fifo_t - spec.no_bubble_ts_ns)
    assert late < fifo_late


def test_later_urgent_flow_preempts_and_finishes_as_if_alone() -> None:
    topo = star(3)
    long = FlowSpec("h1", "h0", 10_000_000, 5_000 * US, "long")
    urgent = FlowSpec("h2", "h0", 500_000, 200 * US, "urgent")
    res = run(topo, [(long, 0), (urgent, 100 * US)])
    by = {f.label: f for f in res.flows}
    alone = topo.min_transfer_ns("h2", "h0", urgent.size_bytes)
    assert by["urgent"].fct_ns == alone  # got the whole receiver link at once
    assert by["urgent"].finish_ns < by["long"].finish_ns
    # the long flow lost exactly the urgent flow's wire time
    long_alone = topo.min_transfer_ns("h1", "h0", long.size_bytes)
    lost = wire_bytes(urgent.size_bytes) * 8 * NS_PER_S // RATE
    assert abs(by["long"].fct_ns - (long_alone + lost)) <= 2


def test_uncontended_flow_takes_min_transfer_time_on_multi_hop_path() -> None:
    topo = build_topology({
        "name": "two", "defaults": {"rate": "100Gbps", "delay_ns": 700, "buffer_bytes": 1 << 20},
        "switches": ["tor0", "tor1", "spine"],
        "links": [{"a": "tor0", "b": "spine", "rate": "400Gbps"}, {"a": "tor1", "b": "spine", "rate": "400Gbps"}],
        "hosts": {"a": {"ip": "10.0.0.1", "switch": "tor0"}, "b": {"ip": "10.0.1.1", "switch": "tor1"}}})
    for size in (1, 8936, 8937, 3_000_000):
        res = run(topo, [(FlowSpec("a", "b", size, 10**9, "x"), 7)])
        assert res.flows[0].fct_ns == topo.min_transfer_ns("a", "b", size)


def test_rates_greedy_edf_then_max_min_background() -> None:
    cap = {("h1", "s"): 100, ("h2", "s"): 100, ("h3", "s"): 100, ("s", "h0"): 100, ("s", "h4"): 100}

    class S:  # the spec fields OracleFlow reads
        def __init__(self, cls: str, ts: int | None) -> None:
            self.flow_class, self.no_bubble_ts_ns = cls, ts

    def flow(fid: int, src: str, dst: str, cls: str = "pipeline", ts: int | None = 1000, size: int = 10) -> OracleFlow:
        return OracleFlow(fid, S(cls, ts), 0, lambda t: None, [(src, "s"), ("s", dst)], 0, size)

    late, early = flow(1, "h1", "h0", ts=2000), flow(2, "h2", "h0", ts=1000)
    bg_same, bg_a, bg_b = flow(3, "h3", "h0", "background", None), flow(4, "h3", "h4", "background", None), \
        flow(5, "h1", "h4", "background", None)
    edf_rates([late, early, bg_same, bg_a, bg_b], cap)
    assert (early.rate_bps, late.rate_bps, bg_same.rate_bps) == (100, 0, 0)  # EDF takes the link
    assert bg_a.rate_bps == bg_b.rate_bps == 50  # max-min share of s->h4
    tie_big, tie_small = flow(6, "h1", "h0", ts=5, size=20), flow(7, "h2", "h0", ts=5, size=10)
    edf_rates([tie_big, tie_small], cap)
    assert (tie_small.rate_bps, tie_big.rate_bps) == (100, 0)  # ties: fewer remaining bytes first
    # never more than a link's capacity
    flows = [late, early, bg_same, bg_a, bg_b]
    for link, c in cap.items():
        assert sum(f.rate_bps for f in flows if link in f.links) <= c


def test_background_gets_leftover_and_horizon_leaves_bulk_unfinished() -> None:
    topo = star(4)
    bulk = FlowSpec("h3", "h0", 1 << 36, None, "bulk", "background")
    urgent = FlowSpec("h1", "h0", 2_000_000, 400 * US, "u")
    other = FlowSpec("h2", "h3", 1_000_000, None, "bg-other", "background")
    res = run(topo, [(bulk, 0), (urgent, 0), (other, 0)], max_time_ns=1_000 * US)
    by = {f.label: f for f in res.flows}
    assert by["u"].fct_ns == topo.min_transfer_ns("h1", "h0", urgent.size_bytes)  # bulk yields entirely
    assert by["bg-other"].fct_ns == topo.min_transfer_ns("h2", "h3", other.size_bytes)  # disjoint path
    assert by["bulk"].finish_ns is None
    assert res.workload_done and res.workload_metrics == {"left": 0.0}


def test_same_result_twice_and_result_shape() -> None:
    flows = fan_in([150, 120, 200], [0, 3, 5], 700_000)
    a, b = run(star(4), flows), run(star(4), flows)
    assert a.flows == b.flows and a.events == b.events and a.sim_time_ns == b.sim_time_ns
    assert [f.flow_id for f in a.flows] == [1, 2, 3] and a.transport.data_bytes == a.data_bytes


def test_bad_input_is_refused_with_the_valid_values() -> None:
    assert "edf-oracle" in POLICIES
    with pytest.raises(InvalidInput) as err:
        simulate(star(2), Timed([]), "edf_oracle", 1)
    assert err.value.field == "policy" and all(p in err.value.message for p in POLICIES)
    with pytest.raises(InvalidInput) as err:
        Simulation(star(2), "edf-oracle", 1, SimConfig())
    assert err.value.field == "policy" and "simulate()" in err.value.message
    net = OracleNetwork(star(2))
    with pytest.raises(InvalidInput) as err:
        net.start_flow(FlowSpec("h0", "nobody", 10, 10, "x"), lambda t: None)
    assert err.value.field == "flow.receiver"
    net.call_at(50, lambda: None)
    net.engine.run(50)
    assert net.now() == 50
    with pytest.raises(InvalidInput) as err:
        net.start_flow(FlowSpec("h0", "h1", 10, 10, "x"), lambda t: None, 10)
    assert err.value.field == "send_at_ns"
    with pytest.raises(InvalidInput):
        net.call_at(10, lambda: None)

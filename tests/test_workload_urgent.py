"""Urgent-flow microbenchmark (kind "urgent"): parameters, the planned rounds and their
no-bubble timestamps, feasibility under preemptive EDF, metrics on the ideal network and a
delayed one, the shipped scenario, and a small packet-level run through the runner."""

from __future__ import annotations

import heapq
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safs.core.errors import InvalidInput
from safs.core.topology import load_topology
from safs.experiments.metrics import MISS_TOLERANCE_NS
from safs.experiments.runner import check, run_one_sim
from safs.experiments.runs import expand
from safs.experiments.scenario import load_scenario
from safs.experiments.workloads import build_workload
from safs.experiments.workloads.ideal import IdealNetwork
from safs.experiments.workloads.urgent import RECEIVER, UrgentIncast

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "urgent.yaml"
URGENT_KEYS = ("urgent_flows", "urgent_deadline_misses", "urgent_fct_mean_ms", "urgent_fct_p99_ms",
               "urgent_late_p99_ms")
SMALL = {"incast_degree": 4, "urgent_min_bytes": 200_000, "urgent_max_bytes": 600_000, "loose_flows": 1,
         "loose_bytes": 500_000, "rounds": 3, "round_period_us": 1000, "jitter_us": 50}


@pytest.fixture(scope="module")
def topo():
    return load_topology(ROOT / "topologies" / "urgent.yaml")


# ---- bad input -------------------------------------------------------------------------

@pytest.mark.parametrize("key, value", [
    ("incast_degree", 0), ("incast_degree", -3), ("incast_degree", 2.5),
    ("urgent_min_bytes", 0), ("urgent_max_bytes", -1), ("loose_bytes", 0),
    ("slack_factor", 0.99), ("slack_factor", -1), ("slack_factor", "tight"), ("loose_slack_factor", 0.5),
    ("loose_flows", -1), ("rounds", 0), ("round_period_us", 0), ("jitter_us", -1), ("warmup_us", -5),
    ("announce_lead_us", -1), ("deadline_factor", 1.2),
])
def test_bad_parameter_is_refused_naming_it(topo, key, value):
    with pytest.raises(InvalidInput) as err:
        UrgentIncast({**SMALL, key: value}, topo)
    assert err.value.field == f"workload.params.{key}"


def test_max_below_min_names_max(topo):
    with pytest.raises(InvalidInput) as err:
        UrgentIncast({**SMALL, "urgent_min_bytes": 500, "urgent_max_bytes": 499}, topo)
    assert err.value.field == "workload.params.urgent_max_bytes"
    assert "500" in err.value.message


def test_jitter_must_stay_inside_the_round(topo):
    with pytest.raises(InvalidInput) as err:
        UrgentIncast({**SMALL, "jitter_us": 1000}, topo)
    assert err.value.field == "workload.params.jitter_us"


def test_overlapping_rounds_are_refused(topo):
    # 4 x 600 kB + 500 kB = 2.9 MB need ~233 us at 100 Gbit/s: a 200 us period cannot hold them.
    with pytest.raises(InvalidInput) as err:
        UrgentIncast({**SMALL, "round_period_us": 200, "jitter_us": 0}, topo)
    assert err.value.field == "workload.params.round_period_us"


def test_missing_hosts_are_named(topo):
    with pytest.raises(InvalidInput) as err:
        UrgentIncast({**SMALL, "incast_degree": 17}, topo)  # the topology has u0..u15
    assert "u16" in err.value.message


@pytest.mark.parametrize("load", [-0.1, 1.5])
def test_background_load_out_of_range_is_refused(topo, load):
    with pytest.raises(InvalidInput) as err:
        build_workload("urgent", SMALL, topo, load=load)
    assert err.value.field == "background.load"


def test_scenario_refuses_load_of_one(tmp_path):
    text = SCENARIO.read_text().replace("load: [0.2]", "load: [1.0]")
    assert "load: [1.0]" in text
    path = tmp_path / "urgent.yaml"
    path.write_text(text.replace("../topologies/urgent.yaml", str(ROOT / "topologies" / "urgent.yaml")))
    with pytest.raises(InvalidInput) as err:
        load_scenario(path)
    assert err.value.field.startswith("background.load")


# ---- the plan --------------------------------------------------------------------------

def test_plan_rounds_sizes_send_times_and_timestamps(topo):
    w = UrgentIncast(SMALL, topo, seed=7)
    n, m, rounds = 4, 1, 3
    assert len(w.plan) == rounds * (n + m)
    period, jitter, warmup = 1_000_000, 50_000, 200_000
    for r in range(rounds):
        base = warmup + r * period
        urgent = [(t, s) for t, s in w.plan if s.label.startswith(f"urgent r{r} ")]
        loose = [(t, s) for t, s in w.plan if s.label.startswith(f"loose r{r} ")]
        assert sorted(s.sender for _, s in urgent) == [f"u{i}" for i in range(n)]
        assert [s.sender for _, s in loose] == ["p0"]
        total = sum(s.size_bytes for _, s in urgent)
        t_incast = topo.min_transfer_ns("u0", RECEIVER, total)
        t_round = topo.min_transfer_ns("u0", RECEIVER, total + 500_000)
        for t, s in urgent:
            assert base <= t <= base + jitter
            assert 200_000 <= s.size_bytes <= 600_000
            assert s.receiver == RECEIVER and s.flow_class == "pipeline"
            assert abs(s.no_bubble_ts_ns - (t + 1.3 * t_incast)) <= 1
            # Urgent: due before every loose flow of its round (EDF serves it first).
            assert all(s.no_bubble_ts_ns < ls.no_bubble_ts_ns for _, ls in loose)
        for t, s in loose:
            assert base <= t <= base + jitter
            assert abs(s.no_bubble_ts_ns - (t + 4.0 * t_round)) <= 1
    assert [t for t, _ in w.plan] == sorted(t for t, _ in w.plan)


def test_seed_changes_the_draws_and_replays_exactly(topo):
    a, b, c = (UrgentIncast(SMALL, topo, seed=s) for s in (1, 1, 2))
    assert a.plan == b.plan
    assert a.plan != c.plan


def _edf_lateness(jobs: list[tuple[int, int, int]], rate_bps: int) -> int:
    """Preemptive EDF on one link of ``rate_bps``: jobs (release ns, bytes, deadline ns) ->
    the largest finish - deadline (independent of the workload's code)."""
    jobs = sorted(jobs)
    ready: list[list[float]] = []  # [deadline, remaining bits]
    now, i, worst = 0.0, 0, float("-inf")
    while i < len(jobs) or ready:
        if not ready:
            now = max(now, jobs[i][0])
        while i < len(jobs) and jobs[i][0] <= now:
            heapq.heappush(ready, [jobs[i][2], jobs[i][1] * 8.0])
            i += 1
        job = ready[0]
        next_release = jobs[i][0] if i < len(jobs) else float("inf")
        finish = now + job[1] * 1e9 / rate_bps
        if finish <= next_release:
            heapq.heappop(ready)
            worst = max(worst, finish - job[0])
            now = finish
        else:
            job[1] -= (next_release - now) * rate_bps / 1e9
            now = next_release
    return int(worst)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 16), st.floats(1.0, 2.0), st.integers(0, 10_000), st.integers(0, 3))
def test_every_round_is_edf_feasible_at_line_rate(topo, n, slack, seed, loose):
    """What makes the benchmark fair: a scheduler that knows the timestamps can meet them all."""
    w = UrgentIncast({"incast_degree": n, "slack_factor": slack, "loose_flows": loose, "rounds": 3,
                      "urgent_min_bytes": 100_000, "urgent_max_bytes": 400_000, "loose_bytes": 300_000,
                      "round_period_us": 1000, "jitter_us": 80}, topo, seed=seed)
    jobs = [(t, s.size_bytes, s.no_bubble_ts_ns) for t, s in w.plan]
    # min_transfer_ns counts packet headers and delays, so a fluid link at line rate has margin.
    assert _edf_lateness(jobs, topo.host_link_bps(RECEIVER)) <= 0


# ---- metrics ---------------------------------------------------------------------------

def test_ideal_network_meets_every_timestamp(topo):
    w = UrgentIncast(SMALL, topo, seed=3)
    net = IdealNetwork(topo)
    net.run(w)
    assert w.done()
    m = w.metrics()
    assert m["urgent_flows"] == 12 and m["loose_flows"] == 3
    assert m["urgent_deadline_misses"] == 0 and m["loose_deadline_misses"] == 0
    assert m["urgent_late_p99_ms"] == 0
    alone = [topo.min_transfer_ns(s.sender, RECEIVER, s.size_bytes) for _, s in w.plan if s.label.startswith("urgent")]
    assert m["urgent_fct_mean_ms"] == pytest.approx(sum(alone) / len(alone) / 1e6)
    assert m["urgent_fct_p99_ms"] <= max(alone) / 1e6


class _SlowSender(IdealNetwork):
    """The ideal network, but flows from one host take ``extra_ns`` longer."""

    def __init__(self, topology, host: str, extra_ns: int) -> None:
        super().__init__(topology)
        self.host, self.extra_ns = host, extra_ns

    def transfer_ns(self, sender: str, receiver: str, size_bytes: int) -> int:
        return super().transfer_ns(sender, receiver, size_bytes) + (self.extra_ns if sender == self.host else 0)


def test_misses_count_only_flows_later_than_the_tolerance(topo):
    w = UrgentIncast({**SMALL, "slack_factor": 1.0}, topo, seed=5)
    # With slack 1.0 a flow's timestamp is send + T_incast; u0 alone takes its own share of that.
    slacks = [s.no_bubble_ts_ns - t - topo.min_transfer_ns("u0", RECEIVER, s.size_bytes)
              for t, s in w.plan if s.sender == "u0"]
    net = _SlowSender(topo, "u0", max(slacks) + MISS_TOLERANCE_NS + 1)
    net.run(w)
    m = w.metrics()
    assert m["urgent_deadline_misses"] == 3  # u0 once per round, nobody else
    assert m["loose_deadline_misses"] == 0
    assert m["urgent_late_p99_ms"] > 0

    w2 = UrgentIncast({**SMALL, "slack_factor": 1.0}, topo, seed=5)
    _SlowSender(topo, "u0", min(slacks) + MISS_TOLERANCE_NS).run(w2)  # one late, within tolerance
    assert w2.metrics()["urgent_deadline_misses"] == 0
    assert w2.metrics()["urgent_late_p99_ms"] > 0


def test_unfinished_flows_are_misses(topo):
    w = UrgentIncast(SMALL, topo, seed=5)
    net = IdealNetwork(topo)
    net.run(w, until_ns=1_500_000)  # round 0 done, round 1 under way, round 2 not announced
    m = w.metrics()
    assert not w.done()
    assert m["urgent_flows"] == 12
    assert m["urgent_unfinished"] >= 4
    assert m["urgent_deadline_misses"] == m["urgent_unfinished"]


# ---- scenario and runner ---------------------------------------------------------------

def test_shipped_scenario_is_valid():
    scenario = load_scenario(SCENARIO)
    check(scenario)
    assert scenario.workload.kind == "urgent"
    assert {"safs", "dctcp", "d2tcp"} <= set(scenario.policies)


@pytest.mark.parametrize("policy", ["safs", "dctcp"])
def test_runner_records_carry_urgent_metrics(policy):
    small = {**SMALL, "rounds": 2}
    scenario = load_scenario(SCENARIO, {"workload": {"kind": "urgent", "params": small},
                                        "background": {"bulk_flows": [1], "load": [0.0]},
                                        "policies": [policy], "seeds": [1], "max_time_ms": 50})
    spec = next(expand(scenario))
    record = run_one_sim(scenario, spec)
    for key in URGENT_KEYS:
        assert key in record
    assert record["urgent_flows"] == 8
    assert record["urgent_fct_mean_ms"] > 0
    assert record["pipeline_flows"] == record["urgent_flows"] + record["loose_flows"]
    if policy == "safs":
        # The urgent flows are EDF-feasible (test above): SAFS must meet every timestamp.
        assert record["urgent_deadline_misses"] == 0

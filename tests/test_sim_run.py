"""simulate(): policies, config validation, determinism, horizon, and SAFS vs DCTCP on an incast."""

from __future__ import annotations

import pytest

from safs.core.errors import InvalidInput
from safs.core.topology import build_topology
from safs.experiments.policies import POLICIES
from safs.experiments.sim.backend import simulate
from safs.experiments.sim.bindings import PER_TRANSFER_POLL_NS, SafsFlows, SafsPerTransferFlows
from safs.experiments.sim.config import SimConfig
from safs.experiments.workloads.api import DependencySpec, FlowSpec

US = 1_000


def star_topology(n_hosts: int):
    return build_topology({
        "name": "star", "defaults": {"rate": "100Gbps", "delay_ns": 500, "buffer_bytes": 1 << 20},
        "switches": ["tor0"],
        "hosts": {f"h{i}": {"ip": f"10.0.0.{i + 1}", "switch": "tor0"} for i in range(n_hosts)}})


class FixedFlows:
    """Starts every spec at time 0; done when all pipeline flows finished."""

    def __init__(self, specs: list[FlowSpec]) -> None:
        self.specs = specs
        self.left = sum(s.flow_class == "pipeline" for s in specs)
        self.finish: dict[str, int] = {}

    def start(self, api) -> None:
        for s in self.specs:
            api.start_flow(s, self._on_done(s))

    def _on_done(self, spec: FlowSpec):
        def done(t: int) -> None:
            self.finish[spec.label] = t
            if spec.flow_class == "pipeline":
                self.left -= 1
        return done

    def done(self) -> bool:
        return self.left == 0

    def metrics(self) -> dict[str, float]:
        return {"finished": float(len(self.finish))}

    def dependencies(self) -> list[DependencySpec]:
        """The pipeline flows' dependencies, declared at launch as the real workloads do."""
        pairs = dict.fromkeys((s.sender, s.receiver) for s in self.specs if s.flow_class == "pipeline")
        return [DependencySpec.of(a, b) for a, b in pairs]

    def warmup_end_ns(self) -> int | None:
        return None


def incast(n: int = 8, size: int = 2_000_000, bulk: int = 2) -> list[FlowSpec]:
    """n urgent pipeline flows into h0 with staggered no-bubble timestamps (EDF-feasible at
    95 % of 100 Gbit/s), plus persistent bulk DCTCP flows into the same receiver."""
    specs = [FlowSpec(f"h{i + 1}", "h0", size, 400 * US + 200 * US * i, f"urgent{i}") for i in range(n)]
    specs += [FlowSpec(f"h{n + 1 + j}", "h0", 1 << 34, None, f"bulk{j}", "background") for j in range(bulk)]
    return specs


def test_unknown_policy_lists_valid_ones() -> None:
    with pytest.raises(InvalidInput) as err:
        simulate(star_topology(2), FixedFlows([]), "DCTCP", 1)
    assert err.value.field == "policy"
    for p in POLICIES:
        assert p in err.value.message


def test_config_from_mapping_validates_keys_and_values() -> None:
    cfg = SimConfig.from_mapping({"mtu_bytes": 4000}, scheduler={"tick_ns": 50_000}, max_time_ns=7)
    assert cfg.mtu_bytes == 4000 and cfg.max_time_ns == 7 and cfg.scheduler["tick_ns"] == 50_000
    with pytest.raises(InvalidInput) as err:
        SimConfig.from_mapping({"mtu": 9000}, source="x.yaml")
    assert err.value.field == "sim.mtu" and "mtu_bytes" in err.value.message and err.value.source == "x.yaml"
    with pytest.raises(InvalidInput) as err:
        SimConfig.from_mapping({"hint_latency_ns": -1})
    assert err.value.field == "sim.hint_latency_ns"
    with pytest.raises(InvalidInput) as err:
        SimConfig.from_mapping({}, scheduler={"bogus": 1})
    assert err.value.field == "scheduler.bogus"
    with pytest.raises(InvalidInput) as err:
        SimConfig.from_mapping({"dctcp": {"g": 2.0}})
    assert err.value.field == "sim.dctcp.g"
    with pytest.raises(InvalidInput) as err:
        SimConfig.from_mapping({"mtu_bytes": 20})
    assert err.value.field == "sim.mtu_bytes" and "576..65535" in err.value.message


def test_flow_to_unknown_host_is_refused() -> None:
    class Bad(FixedFlows):
        def start(self, api) -> None:
            with pytest.raises(InvalidInput) as err:
                api.start_flow(FlowSpec("h0", "nobody", 100, 10**6, "x"), lambda t: None)
            assert err.value.field == "flow.receiver"

    res = simulate(star_topology(2), Bad([]), "safs", 1, SimConfig(max_time_ns=10 * US))
    assert res.flows == []


def test_same_seed_same_result_and_horizon_reports_unfinished() -> None:
    topo = star_topology(6)
    cfg = SimConfig(max_time_ns=600 * US)
    runs = [simulate(topo, FixedFlows(incast(n=3, size=1_000_000, bulk=2)), "safs", 7, cfg) for _ in range(2)]
    a, b = runs
    assert a.flows == b.flows
    assert (a.events, a.drops, a.control_bytes, a.data_bytes, a.sim_time_ns) == \
           (b.events, b.drops, b.control_bytes, b.data_bytes, b.sim_time_ns)
    assert a.events > 1000
    # bulk flows never finish; the run ended at the horizon or when the pipeline finished
    bulk = [f for f in a.flows if f.flow_class == "background"]
    assert bulk and all(f.finish_ns is None for f in bulk)
    assert a.sim_time_ns <= 600 * US


def test_horizon_leaves_flows_unfinished_and_missed() -> None:
    topo = star_topology(3)
    specs = [FlowSpec("h1", "h0", 50_000_000, 100 * US, "big")]
    res = simulate(topo, FixedFlows(specs), "safs", 1, SimConfig(max_time_ns=200 * US))
    assert not res.workload_done and res.sim_time_ns == 200 * US
    (rec,) = res.flows
    assert rec.finish_ns is None and rec.missed


def run_incast(policy: str, profile: str = "tofino", **sim: int):
    """The urgent incast with background bulk under ``policy``: (urgent misses, result)."""
    res = simulate(star_topology(11), FixedFlows(incast()), policy, 1,
                   SimConfig(max_time_ns=20_000 * US, control_profile=profile, **sim))
    assert res.workload_done, policy
    urgent = [f for f in res.flows if f.flow_class == "pipeline"]
    assert len(urgent) == 8 and all(f.finish_ns is not None for f in urgent)
    return sum(f.missed for f in urgent), res


@pytest.fixture(scope="module")
def incast_runs():
    """Every policy on the incast under the default control profile; the per-transfer design
    under the free one (an ablation): under a real profile its controller falls behind."""
    out = {p: run_incast(p) for p in POLICIES if p != "safs-per-transfer"}
    out["safs-per-transfer"] = run_incast("safs-per-transfer", "ideal")
    return out


def test_every_policy_finishes_the_incast_and_safs_grants_are_reusable(incast_runs) -> None:
    _, safs_res = incast_runs["safs"]
    _, dctcp_res = incast_runs["dctcp"]
    # Grants are reusable: control traffic is a small fraction of data, and only SAFS has any.
    assert 0 < safs_res.control_bytes < 0.005 * safs_res.data_bytes
    assert dctcp_res.control_bytes == 0 and safs_res.scheduler_control_messages > dctcp_res.scheduler_control_messages
    # Dependencies announced at launch: no switch write on the run's clock.
    assert safs_res.control.updates == 0 and safs_res.control_profile == "tofino"
    # background flows ran through the same switch under both policies: non-SAFS data under
    # SAFS (its port holder serves the incast one transfer at a time at the port's share, so
    # the port's queue stays below the ECN threshold and nothing is marked), ECN marks under DCTCP
    assert safs_res.data_bytes > safs_res.transport.safs_data_bytes and dctcp_res.ecn_marked_packets > 0


def test_per_transfer_safs_beats_dctcp_on_urgent_incast(incast_runs) -> None:
    # DCTCP shares fairly, so the early no-bubble timestamps are missed; the allocator serves by urgency.
    per_transfer_missed, res = incast_runs["safs-per-transfer"]
    dctcp_missed, _ = incast_runs["dctcp"]
    assert per_transfer_missed < dctcp_missed and dctcp_missed >= 4
    assert res.control_profile == "ideal" and res.control.updates > 0


def test_per_transfer_safs_meets_the_incast_deadlines_with_or_without_the_hint_rpc() -> None:
    # Each transfer waits for its activation hint (20 us RPC under ideal) before the controller
    # grants it. Until 2026-12-04 this test said that wait cost 3-4 of the 8 no-bubble
    # timestamps; it was the receivers' NACKs of duplicates instead: with no packet dropped,
    # 3.6 MB were retransmitted. Now that only a probe's duplicate is NACKed, both meet every one.
    for hint_ns in (20 * US, 1):
        missed, res = run_incast("safs-per-transfer", "ideal", hint_latency_ns=hint_ns)
        assert missed == 0 and res.drops == 0
        assert res.retransmitted_bytes < 0.05 * res.data_bytes, hint_ns  # 1.6% and 0.7%; was 21%


def test_safs_beats_dctcp_on_urgent_incast_with_background_bulk(incast_runs) -> None:
    safs_missed, _ = incast_runs["safs"]
    dctcp_missed, _ = incast_runs["dctcp"]
    assert safs_missed <= dctcp_missed // 2 and dctcp_missed >= 4


def test_safs_timers_scale_through_sim_config() -> None:
    """Slow emulated fabrics (scenarios/mininet-*.yaml) stretch the SAFS sender's timers."""
    from safs.experiments.sim.config import SimConfig

    cfg = SimConfig(safs_grant_poll_ns=2_000_000, safs_reorder_window_ns=5_000_000).safs_config()
    assert (cfg.grant_poll_ns, cfg.reorder_window_ns) == (2_000_000, 5_000_000)
    # the send scheduler's quantum is the hosts' own: the allocator's does not set it
    coarse = {"allocator": {"urgency_quantum_ns": 4_000_000}}
    assert SimConfig(scheduler=coarse).safs_config().urgency_quantum_ns == 20_000
    assert SimConfig(scheduler=coarse, safs_urgency_quantum_ns=800_000).safs_config().urgency_quantum_ns == 800_000
    with pytest.raises(InvalidInput, match="safs_urgency_quantum_ns"):
        SimConfig.from_mapping({"safs_urgency_quantum_ns": 0})
    assert SimConfig().safs_config().grant_poll_ns == 10_000  # slow grants poll, with back-off
    slow = SimConfig(safs_grant_poll_ns=2_000_000)
    deps = SafsFlows(star_topology(2), slow).safs_cfg
    per_transfer = SafsPerTransferFlows(star_topology(2), slow).safs_cfg
    assert (deps.grant_poll_ns, deps.grant_poll_backoff) == (2_000_000, 16)
    assert (per_transfer.grant_poll_ns, per_transfer.grant_poll_backoff) == (2_000_000, 1)  # as it was
    off = SimConfig(safs_grant_poll_ns=0)  # dependency senders never poll; per-transfer needs it
    assert SafsFlows(star_topology(2), off).safs_cfg.grant_poll_ns == 0
    assert SafsPerTransferFlows(star_topology(2), off).safs_cfg.grant_poll_ns == 10_000
    assert SafsPerTransferFlows(star_topology(2), SimConfig()).safs_cfg.grant_poll_ns == PER_TRANSFER_POLL_NS
    with pytest.raises(InvalidInput, match="sim.safs_grant_poll_ns"):
        SimConfig(safs_grant_poll_ns=-1)

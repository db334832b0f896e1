"""SAFS ablations "safs-no-grants" and "safs-no-classes" and the first design "safs-per-transfer":
each differs from "safs" in exactly the intended way (what the controller is told and writes,
which queue SAFS DATA takes), and bad names or flag values are refused."""

from __future__ import annotations

from collections import Counter

import pytest
from star import AllAtZero, star  # the shared one-switch test topology

from safs.core import p4names as n
from safs.core.errors import InvalidInput
from safs.core.protocol import (
    QUEUE_CONTROL,
    QUEUE_OVER_RATE,
    QUEUE_SLACK_LEAST_URGENT,
    QUEUE_SLACK_MOST_URGENT,
    MsgType,
)
from safs.core.scheduler import SchedulerConfig
from safs.experiments.policies import POLICIES
from safs.experiments.sim.backend import simulate
from safs.experiments.sim.config import SimConfig
from safs.experiments.sim.simulation import Simulation
from safs.experiments.workloads.api import FlowSpec
from safs.hosts.dctcp import DctcpSender
from safs.hosts.no_grants import SafsShim
from safs.hosts.safs import SafsConfig, SafsDependency, SafsSender

US = 1_000
DATA, GRANT = int(MsgType.DATA), int(MsgType.GRANT)
SLACK_QUEUES = set(range(QUEUE_SLACK_LEAST_URGENT, QUEUE_CONTROL))  # 2..6
SENDERS = [f"h{i}" for i in range(1, 7)]  # the pipeline senders of incast(), one dependency each



def incast() -> list[FlowSpec]:
    """6 pipeline flows into h0 with no-bubble timestamps from 150 µs to 6 ms (slack from
    below zero to several ms: several slack classes), plus 2 bulk background flows."""
    deadlines = [150, 300, 600, 1_500, 3_000, 6_000]
    specs = [FlowSpec(f"h{i + 1}", "h0", 1_000_000, d * US, f"p{i}") for i, d in enumerate(deadlines)]
    specs += [FlowSpec(f"h{7 + j}", "h0", 1 << 34, None, f"bulk{j}", "background") for j in range(2)]
    return specs


def run(policy: str):
    """Run the incast; returns (sim, result, Counter of (safs_type, queue) of packets the ToR
    enqueued towards h0, the receiver); ``sim.announced`` lists the flows hinted one by one,
    ``sim.deps_announced`` the senders of the dependencies announced."""
    sim = Simulation(star(9), policy, 1, SimConfig(max_time_ns=20_000 * US))
    tor = sim.network.switches["tor0"]
    rx_port = sim.topology.port_of("tor0", "h0")
    seen: Counter[tuple[int, int]] = Counter()
    ingress = tor._ingress

    def recording(pkt, in_port):
        out = ingress(pkt, in_port)
        for port, p in out:
            if port == rx_port:
                seen[(p.safs_type, p.priority)] += 1
        return out

    tor._ingress = recording
    announce = sim.scheduler.announce
    sim.announced = []  # type: ignore[attr-defined]

    def counting(hint, now_ns):
        sim.announced.append(hint.flow_id)  # type: ignore[attr-defined]
        return announce(hint, now_ns)

    sim.scheduler.announce = counting  # type: ignore[method-assign]
    announce_dep = sim.scheduler.announce_dependency
    sim.deps_announced = []  # type: ignore[attr-defined]

    def counting_deps(dep, now_ns):
        sim.deps_announced.append(dep.sender)  # type: ignore[attr-defined]
        return announce_dep(dep, now_ns)

    sim.scheduler.announce_dependency = counting_deps  # type: ignore[method-assign]
    res = sim.run(AllAtZero(incast()))
    assert res.workload_done
    return sim, res, seen


def data_queues(seen: Counter) -> set[int]:
    return {q for (t, q), c in seen.items() if t == DATA and c}


@pytest.fixture(scope="module")
def runs():
    return {p: run(p) for p in ("safs", "safs-no-grants", "safs-no-classes", "safs-per-transfer")}


def share_grants(sim) -> list:
    return [e for e in sim.network.switches["tor0"].pipeline.entries(n.DEP_GRANT) if e.action == n.ACT_SET_SHARE_GRANT]


def test_policies_registered() -> None:
    assert {"safs-no-grants", "safs-no-classes", "safs-per-transfer", "safs-late-last"} <= set(POLICIES)


def test_safs_uses_several_slack_classes_and_dependency_grants(runs) -> None:
    sim, res, seen = runs["safs"]
    assert sim.announced == [] and sorted(sim.deps_announced) == SENDERS  # per dependency, not per transfer
    assert len(data_queues(seen) & SLACK_QUEUES) >= 2
    stats = sim.scheduler.stats
    assert stats.dependencies == 6 and stats.meter_updates > 0 and stats.grant_changes == 0  # no allocator
    assert len(share_grants(sim)) == 6
    assert sim.network.switches["tor0"].pipeline.entries(n.SLACK_CLASS)
    assert res.control.updates == 0  # everything was installed at launch: no write on the run's clock


def test_no_grants_writes_no_grant_yet_keeps_the_slack_classes(runs) -> None:
    sim, res, seen = runs["safs-no-grants"]
    stats = sim.scheduler.stats
    # not even the default meter: only the host ports' control meters (source guard), no grant
    control_meters = sum(len(sim.scheduler.control_meters(sw)) for sw in sim.network.switches)
    assert stats.grant_changes == 0 and stats.meter_updates == control_meters > 0
    pipe = sim.network.switches["tor0"].pipeline
    assert pipe.entries(n.DEP_GRANT) == [] and pipe.meter_config(n.DEFAULT_METER_SLOT) is None
    assert pipe.entries(n.PORT_SHARE) == []  # no shares either
    assert pipe.entries(n.SLACK_CLASS) == runs["safs"][0].network.switches["tor0"].pipeline.entries(n.SLACK_CLASS)
    # its senders are DCTCP: the controller is told nothing (no hints, no dependencies)
    assert sim.announced == [] and sim.deps_announced == []
    # DATA in the slack classes, several of them, never demoted; no GRANT, no SAFS control bytes
    queues = data_queues(seen)
    assert len(queues & SLACK_QUEUES) >= 2 and QUEUE_OVER_RATE not in queues and 0 not in queues
    assert not any(t == GRANT for t, _ in seen) and res.control_bytes == 0
    assert res.ecn_marked_packets > 0  # DCTCP window control: the switches mark its DATA too


def test_no_grants_senders_are_dctcp_under_the_safs_shim() -> None:
    sim = Simulation(star(3), "safs-no-grants", 1, SimConfig(max_time_ns=10 * US))
    pipe = sim.start_flow(FlowSpec("h1", "h0", 100_000, 500 * US, "p"), lambda t: None)
    bg = sim.start_flow(FlowSpec("h2", "h0", 100_000, None, "b", "background"), lambda t: None)
    tx = sim.senders[pipe]
    assert type(tx) is DctcpSender and isinstance(tx.nic, SafsShim)
    assert tx.mss == 9000 - 40 - 36  # payload shrinks by the SAFS header: frames stay within the MTU
    assert type(sim.senders[bg]) is DctcpSender and not isinstance(sim.senders[bg].nic, SafsShim)


def test_no_classes_grants_as_safs_but_one_data_queue(runs) -> None:
    sim, res, seen = runs["safs-no-classes"]
    assert sim.scheduler.stats.dependencies == 6 and sim.scheduler.stats.meter_updates > 0
    assert sorted(sim.deps_announced) == SENDERS and len(share_grants(sim)) == 6
    assert res.control_bytes > 0
    assert sim.network.switches["tor0"].pipeline.entries(n.SLACK_CLASS) == []
    assert data_queues(seen) <= {QUEUE_SLACK_LEAST_URGENT, QUEUE_OVER_RATE}
    assert QUEUE_SLACK_LEAST_URGENT in data_queues(seen)
    assert all(type(s) in (SafsSender, DctcpSender) for s in sim.senders.values())


def test_per_transfer_hints_and_grants_every_transfer_on_the_runs_clock(runs) -> None:
    sim, res, seen = runs["safs-per-transfer"]
    assert sorted(sim.announced) == [1, 2, 3, 4, 5, 6] and sim.deps_announced == []
    stats = sim.scheduler.stats
    assert stats.grant_changes > 0 and stats.dependencies == 0
    assert res.control.updates > 0 and res.control.hints >= 12  # announce and complete, each charged
    assert share_grants(sim) == [] and sim.network.switches["tor0"].pipeline.entries(n.PORT_SHARE) == []
    assert len(data_queues(seen) & SLACK_QUEUES) >= 2
    assert sim.binding.deps == {}  # every transfer is its own dependency (transfer_dep_id) ...
    assert sim.binding.safs_cfg.grant_poll_ns == 10_000  # ... and waiting senders poll, as first built


def late_and_on_time(policy: str, scheduler: dict | None = None,
                     ) -> tuple[Simulation, dict[str, set[int]], dict[str, int]]:
    """h1 sends 1 MB to h0 due at 10 µs (late from its first byte), h2 1 MB due at 1 ms; returns
    the run, the queues each one's DATA took at the ToR towards h0 and their finish times (ns).
    ``scheduler``: the scenario's ``scheduler:`` mapping."""
    sim = Simulation(star(3), policy, 1, SimConfig(max_time_ns=20_000 * US, scheduler=scheduler or {}))
    tor = sim.network.switches["tor0"]
    rx_port, ingress = sim.topology.port_of("tor0", "h0"), tor._ingress
    src = {sim.topology.host_ip(h): h for h in ("h1", "h2")}
    queues: dict[str, set[int]] = {"h1": set(), "h2": set()}

    def recording(pkt, in_port):
        out = ingress(pkt, in_port)
        for port, q in out:
            if port == rx_port and q.safs_type == DATA and q.src in src:
                queues[src[q.src]].add(q.priority)
        return out

    tor._ingress = recording
    res = sim.run(AllAtZero([FlowSpec("h1", "h0", 1_000_000, 10 * US, "late"),
                             FlowSpec("h2", "h0", 1_000_000, 1_000 * US, "on-time")]))
    finish = {f.sender: f.finish_ns for f in res.flows}
    return sim, queues, finish


def test_late_last_serves_a_late_transfer_after_an_on_time_one_at_switch_and_host() -> None:
    """"safs" sends a transfer that is late from its first byte in queue 6, ahead of an on-time
    one; "safs-late-last" in queue 2, behind it, so the on-time one finishes first. Switches and
    hosts see the policy's allocator setting; the scenario's other allocator settings stay."""
    safs, q_safs, t_safs = late_and_on_time("safs")
    late, q_late, t_late = late_and_on_time("safs-late-last", {"allocator": {"urgency_quantum_ns": 50_000}})
    assert [r.qclass for r in safs.scheduler.allocator.slack_class_table()] == [6, 5, 4, 3, 2]
    assert [r.qclass for r in late.scheduler.allocator.slack_class_table()] == [2, 6, 5, 4, 3]
    assert late.scheduler.config.allocator.urgency_quantum_ns == 50_000
    assert late.binding.safs_cfg.urgency_quantum_ns == SimConfig().safs_urgency_quantum_ns  # the hosts' own
    assert late.binding.safs_cfg.late_below_ns == 0 and safs.binding.safs_cfg.late_below_ns is None
    assert QUEUE_SLACK_MOST_URGENT in q_safs["h1"] and t_safs["h1"] < t_safs["h2"]
    assert q_late["h1"] <= {QUEUE_SLACK_LEAST_URGENT, QUEUE_OVER_RATE} and t_late["h2"] < t_late["h1"]


def busy_sender(policy: str, monkeypatch: pytest.MonkeyPatch, yield_fraction: float = 0.0,
                yields: list[tuple[int, int, bool]] | None = None) -> tuple[Simulation, dict[int, int], int]:
    """h2 sends 1 MB to h0 due at 200 µs (flow 1, the most urgent) and 1 MB to h1 due at 2 ms
    (flow 2); h3 sends 1 MB to h1 due at 2 ms (flow 3). Returns the run, each flow's finish
    time (ns) and the highest grant (bit/s) flow 3 sent under from 10 µs (both dependencies
    counted at h1's port by then) until flow 1 finished. ``yield_fraction``: the SAFS hosts'
    ``nic_yield_fraction`` (0: h2's busy dependency keeps its place at h1's port); ``yields``
    collects (dep_id, time, yielded) of every yield and claim."""
    sim = Simulation(star(4), policy, 1, SimConfig(max_time_ns=20_000 * US, safs_nic_yield_fraction=yield_fraction))
    sends: list[tuple[int, int, int]] = []  # (flow id, time, grant)
    send = SafsSender._send_data
    set_yielded = SafsDependency._set_yielded

    def recording(self, offset, now, last, resent):  # noqa: ANN001, ANN202 - wraps _send_data
        sends.append((self.flow_id, now, self.dep.rate_bps))
        return send(self, offset, now, last, resent)

    def recording_yield(self, yielded):  # noqa: ANN001, ANN202 - wraps _set_yielded
        if yields is not None:
            yields.append((self.dep_id, self.clock.now, yielded))
        return set_yielded(self, yielded)

    monkeypatch.setattr(SafsSender, "_send_data", recording)
    monkeypatch.setattr(SafsDependency, "_set_yielded", recording_yield)
    res = sim.run(AllAtZero([FlowSpec("h2", "h0", 1_000_000, 200 * US, "urgent"),
                             FlowSpec("h2", "h1", 1_000_000, 2_000 * US, "busy"),
                             FlowSpec("h3", "h1", 1_000_000, 2_000 * US, "free")]))
    finish = {f.flow_id: f.finish_ns for f in res.flows}
    assert sorted(finish) == [1, 2, 3] and all(finish.values())
    return sim, finish, max(rate for flow, t, rate in sends if flow == 3 and 10 * US < t < finish[1])


def test_overcommit_lets_a_free_sender_use_what_a_busy_one_leaves_and_the_busy_one_keep_edf(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """h1's port has two top-class dependencies, h2's and h3's; h2 is busy with a more urgent
    transfer to h0. "safs-late-last": h3 holds half of h1's port. "safs-overcommit": top_boost
    raises h3's share above half while h2's is unused. Under both, h2's NIC fills the urgent
    transfer's gaps with the busy one's packets and the urgent one catches up what they delay
    (sender rule 5c; under safs-overcommit its token bucket does), so it leaves at its grant.
    The ToR holds top_boost entries under safs-overcommit only. (Both with yielding off: with
    it h2's busy dependency would give up its place at h1's port, the next test.)"""
    plain, t_plain, peak_plain = busy_sender("safs-late-last", monkeypatch)
    oc, t_oc, peak_oc = busy_sender("safs-overcommit", monkeypatch)
    tor = "tor0"
    usable = plain.scheduler.allocator.config.usable_bps(plain.topology.host_link_bps("h1"))
    assert plain.network.switches[tor].pipeline.entries(n.TOP_BOOST) == []
    assert len(oc.network.switches[tor].pipeline.entries(n.TOP_BOOST)) > 0
    assert oc.binding.safs_cfg.burst_bytes == 18_000 and plain.binding.safs_cfg.burst_bytes == 0
    assert peak_plain <= usable // 2 < 0.8 * usable < peak_oc
    line_rate_ns = 1_000_000 * 8 * 10**9 // plain.topology.host_link_bps("h0")
    assert t_oc[1] < 1.1 * line_rate_ns and t_plain[1] < 1.1 * line_rate_ns


def test_a_dependency_its_nic_cannot_serve_yields_its_place_to_a_free_sender(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same three transfers under the default ``safs``. Without yielding, h2's busy
    dependency keeps half of h1's port while h2's NIC serves the urgent transfer at line rate,
    so h3 gets half of it. With yielding (the default 0.25): the busy dependency, which the
    urgent one's grant leaves less than a quarter of h2's NIC, yields (a REQUEST with
    FLAG_BACKGROUND: the least urgent class at h1's ToR) and h3 gets most of h1's port; once
    the urgent transfer has sent its last byte the busy one claims its place back. The urgent
    transfer is no later for it (within 0.1%), and the free one finishes earlier."""
    plain, t_plain, peak_plain = busy_sender("safs", monkeypatch)
    yields: list[tuple[int, int, bool]] = []
    ylds, t_yld, peak_yld = busy_sender("safs", monkeypatch, 0.25, yields)
    usable = plain.scheduler.allocator.config.usable_bps(plain.topology.host_link_bps("h1"))
    assert ylds.binding.safs_cfg.nic_yield_fraction == 0.25 and plain.binding.safs_cfg.nic_yield_fraction == 0
    assert peak_plain <= usable // 2 < 0.8 * usable < peak_yld
    assert [yielded for _, _, yielded in yields] == [True, False] and yields[0][0] == yields[1][0]
    assert yields[0][1] < 10 * US and yields[1][1] <= t_yld[1]
    assert t_yld[1] <= 1.001 * t_plain[1] and t_yld[3] < t_plain[3]
    assert SafsConfig().nic_yield_fraction == 0.25 == SimConfig().safs_nic_yield_fraction
    with pytest.raises(InvalidInput) as err:
        SimConfig.from_mapping({"safs_nic_yield_fraction": 0.6})
    assert err.value.field == "sim.safs_nic_yield_fraction"


def test_scheduler_flags_are_checked_and_listed() -> None:
    for name in ("rate_grants", "slack_classes"):
        with pytest.raises(InvalidInput) as err:
            SchedulerConfig(**{name: 1})
        assert err.value.field == f"config.{name}" and "true or false" in err.value.message
        with pytest.raises(InvalidInput) as err:
            SimConfig.from_mapping({}, scheduler={name: "no"})
        assert err.value.field == f"scheduler.{name}"
    with pytest.raises(InvalidInput) as err:
        SimConfig.from_mapping({}, scheduler={"grants": False})
    assert "rate_grants" in err.value.message and "slack_classes" in err.value.message


def test_unknown_ablation_name_lists_the_valid_ones() -> None:
    with pytest.raises(InvalidInput) as err:
        simulate(star(2), AllAtZero([]), "safs-no-slack", 1)
    assert err.value.field == "policy"
    for p in ("safs-no-grants", "safs-no-classes", "edf-oracle", "safs"):
        assert p in err.value.message


@pytest.mark.parametrize("firm", [False, True])
def test_default_safs_gives_up_a_firm_transfer_that_keeps_others_from_being_on_time(firm: bool) -> None:
    """Under the default ``safs`` (late transfers first), three 1 MB transfers into h0 due at
    150, 250 and 350 µs (80 µs each at the line rate, so all three could make it) and a 3 MB
    one due at 200 µs, which cannot (240 µs). Soft: the 3 MB one is most urgent, then late and
    still most urgent (BRIEF: maximum lateness no worse than EDF), so all four miss. Firm: h0's
    admission rejects it at its first DATA and its sender gives it up (least urgent class,
    after the others): the three 1 MB transfers are on time and only it misses."""
    sim = Simulation(star(5), "safs", 1, SimConfig(max_time_ns=20_000 * US))
    specs = [FlowSpec("h1", "h0", 3_000_000, 200 * US, "hopeless", firm=firm)]
    specs += [FlowSpec(f"h{i + 2}", "h0", 1_000_000, (150 + 100 * i) * US, f"ok{i}", firm=firm) for i in range(3)]
    res = sim.run(AllAtZero(specs))
    assert all(f.finish_ns is not None for f in res.flows)  # a transfer given up is still delivered
    late = sorted(f.sender for f in res.flows if f.finish_ns > f.no_bubble_ts_ns)
    assert late == (["h1"] if firm else ["h1", "h2", "h3", "h4"])

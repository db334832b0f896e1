"""Scheduler tests: a real topology (inline YAML via the loader) and PipelineModel targets."""

from __future__ import annotations

import pytest
import yaml
from two_tors import MS, two_tors  # the shared two-ToR test topology

from safs.core import p4names as n
from safs.core.allocator import AllocatorConfig
from safs.core.errors import InvalidInput, TargetError, UpdateFailure
from safs.core.hints import FlowClass, FlowHint
from safs.core.packet import PROTO_TCP, PROTO_UDP, Packet
from safs.core.protocol import SAFS_UDP_PORT, WIRE_OVERHEAD_BYTES, MsgType, lease_ns_to_us, rate_bps_to_kbps
from safs.core.scheduler import Scheduler, SchedulerConfig, node_mac, wire_epoch
from safs.core.target import CloneSession, Op, RequestDigest, Update
from safs.core.timebase import wrap
from safs.core.topology import build_topology
from safs.targets.pipeline_model import PipelineModel


class Clock:
    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        return self.t


# Most tests exercise the install path, so they allocate at announce; the default mode
# (allocate at the first REQUEST) has its own tests below.
AT_ANNOUNCE = SchedulerConfig(admit_on_request=False)


def make(config: SchedulerConfig | None = None):
    topo = two_tors()
    clock = Clock()
    targets = {sw: PipelineModel(sw, clock) for sw in topo.switches()}
    sched = Scheduler(topo, targets, config or AT_ANNOUNCE)
    sched.setup(0)
    return topo, clock, targets, sched


def hint(fid: int, sender: str, receiver: str, size: int, deadline_ns: int,
         flow_class: FlowClass = FlowClass.PIPELINE) -> FlowHint:
    return FlowHint(fid, sender, receiver, size, deadline_ns, f"test/{fid}", flow_class)


def grant_entries(target: PipelineModel) -> dict[int, dict]:
    return {e.match[n.F_FLOW_ID]: dict(e.params) for e in target.entries(n.FLOW_GRANT)}


def writes(sched: Scheduler) -> tuple[int, int, int]:
    s = sched.stats
    return (s.table_updates, s.meter_updates, s.batches)


# ---------------------------------------------------------------------------- setup

def test_setup_installs_routes_receiver_ports_classes_defaults_and_is_idempotent() -> None:
    topo, clock, targets, sched = make()
    tor0, tor1 = targets["tor0"], targets["tor1"]
    # a plain packet a -> d crosses tor0 then tor1 and reaches d's port
    p = Packet(topo.host_ip("a"), topo.host_ip("d"), PROTO_TCP, 1, 2, 1000)
    (port0, _), = tor0.ingress(p, topo.port_of("tor0", "a"))
    assert port0 == topo.port_of("tor0", "tor1")
    (port1, _), = tor1.ingress(p, topo.port_of("tor1", "tor0"))
    assert port1 == topo.port_of("tor1", "d")
    routes = {e.match[n.F_DST_ADDR].value: e.params for e in tor0.entries(n.IPV4_LPM)}
    assert routes[topo.host_ip("d")]["dst_mac"] == node_mac(topo, "tor1")
    assert routes[topo.host_ip("b")]["dst_mac"] == node_mac(topo, "b")
    rx0 = {e.match[n.F_EGRESS_PORT] for e in tor0.entries(n.RECEIVER_PORT)}
    assert rx0 == {topo.port_of("tor0", h) for h in ("a", "b", "c")}
    assert len(tor0.entries(n.GRANT_ROUTE)) == len(topo.hosts())
    classes = tor0.entries(n.SLACK_CLASS)
    assert sorted(e.params["qclass"] for e in classes) == [2, 3, 4, 5, 6]
    assert len({e.priority for e in classes}) == 5
    cfg = sched.config
    dg = tor1.default_action(n.DEFAULT_GRANT).params
    assert dg == {"rate_kbps": rate_bps_to_kbps(cfg.default_rate_bps),
                  "lease_us": lease_ns_to_us(cfg.default_lease_ns), "meter_slot": n.DEFAULT_METER_SLOT}
    assert tor1.default_action(n.ECN_THRESHOLD).params["qdepth_pkts"] == cfg.ecn_threshold_pkts
    assert tor0.meter_config(0).cir == cfg.default_rate_bps // 8
    before = writes(sched)
    sched.setup(0)  # nothing changed: only the clock offsets are re-written
    assert writes(sched)[1] == before[1]
    assert writes(sched)[0] - before[0] == len(targets)


def test_setup_clock_offset_per_switch() -> None:
    topo, clock, targets, sched = make()
    sched.setup(0, clock_offset_ns={"tor1": 12_345})
    clock.t = 5
    assert targets["tor1"].now() == 12_350 and targets["tor0"].now() == 5
    with pytest.raises(InvalidInput):
        sched.setup(0, clock_offset_ns={"nope": 1})


# ---------------------------------------------------------------------------- grants

def test_announce_installs_grant_and_meter_at_receiver_tor_only() -> None:
    topo, clock, targets, sched = make()
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    grant = sched.allocator.grants()[5]
    slot = sched.slot_of(5)
    assert slot == 1
    assert grant_entries(targets["tor1"]) == {5: {
        "rate_kbps": rate_bps_to_kbps(grant.rate_bps), "epoch": 1,
        "lease_us": lease_ns_to_us(grant.lease_ns), "meter_slot": slot}}
    assert grant_entries(targets["tor0"]) == {}
    meter = targets["tor1"].meter_config(slot)
    assert meter.cir == grant.rate_bps // 8
    assert meter.pir > meter.cir
    assert meter.cburst >= 2 * sched.config.max_frame_bytes
    assert meter.cburst >= meter.cir * sched.config.meter_burst_ns // 10**9
    assert sched.installed_meters("tor1")[slot] == meter


def test_request_answered_with_installed_grant_after_announce() -> None:
    topo, clock, targets, sched = make()
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    req = Packet(topo.host_ip("a"), topo.host_ip("d"), PROTO_UDP, 40000, SAFS_UDP_PORT, 78)
    req.safs_version, req.safs_type, req.flow_id, req.remaining = 1, int(MsgType.REQUEST), 5, 1_000_000
    out = targets["tor1"].ingress(req, topo.port_of("tor1", "tor0"))
    assert out == [(topo.port_of("tor1", "tor0"), req)]
    assert req.safs_type == MsgType.GRANT and req.dst == topo.host_ip("a")
    assert req.rate_kbps == rate_bps_to_kbps(sched.allocator.grants()[5].rate_bps) and req.epoch == 1
    assert targets["tor1"].poll_digests() == []


def test_no_writes_when_nothing_changed() -> None:
    topo, clock, targets, sched = make()
    h = hint(5, "a", "d", 1_000_000, 50 * MS)
    sched.announce(h, 0)
    before = writes(sched)
    sched.announce(h, 0)  # identical re-announce
    sched.update(5, 999_000, 0)  # tiny progress: same computed rate (single flow takes the link)
    sched.tick(0)  # no time passed
    assert writes(sched) == before


def test_rate_change_rewrites_entry_and_meter_with_new_epoch() -> None:
    topo, clock, targets, sched = make()
    sched.announce(hint(5, "a", "d", 4_000_000, 20 * MS), 0)
    alone = grant_entries(targets["tor1"])[5]["rate_kbps"]
    sched.announce(hint(6, "b", "d", 4_000_000, 10 * MS), 0)  # shares d's link, more urgent
    entries = grant_entries(targets["tor1"])
    assert entries[5]["rate_kbps"] < alone and entries[5]["epoch"] == 2
    assert entries[5]["meter_slot"] != entries[6]["meter_slot"]
    usable = sched.allocator.receiver_usable_bps("d")
    assert (entries[5]["rate_kbps"] + entries[6]["rate_kbps"]) * 1000 <= usable
    for fid in (5, 6):
        slot = entries[fid]["meter_slot"]
        assert targets["tor1"].meter_config(slot).cir == sched.allocator.grants()[fid].rate_bps // 8


def test_complete_deletes_entry_frees_slot_and_reuses_it() -> None:
    topo, clock, targets, sched = make()
    free0 = sched.free_slots("tor1")
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    sched.announce(hint(6, "b", "d", 1_000_000, 3 * MS), 0)
    slot5 = sched.slot_of(5)
    assert sched.free_slots("tor1") == free0 - 2
    sched.complete(5, 10)
    assert 5 not in grant_entries(targets["tor1"])
    assert sched.free_slots("tor1") == free0 - 1
    with pytest.raises(InvalidInput):
        sched.slot_of(5)
    sched.announce(hint(7, "c", "d", 1_000_000, 4 * MS), 20)
    assert sched.slot_of(7) == slot5
    with pytest.raises(InvalidInput):
        sched.complete(5, 30)  # already completed


def test_tick_estimates_remaining_from_the_flow_byte_counter() -> None:
    """Progress comes from what the receiver's ToR counted, not from the granted rate: a flow
    announced ahead of its data keeps its size until DATA really passes."""
    topo, clock, targets, sched = make()
    size = 100_000_000
    sched.announce(hint(5, "a", "d", size, 500 * MS), 0)
    sched.tick(10 * MS)  # nothing sent yet
    assert sched.allocator.flows()[5].remaining_bytes == size
    payload, packets = 8_000, 3
    for _ in range(packets):
        data = Packet(topo.host_ip("a"), topo.host_ip("d"), PROTO_UDP, 40000, SAFS_UDP_PORT,
                      payload + WIRE_OVERHEAD_BYTES, payload)
        data.safs_version, data.safs_type, data.flow_id, data.epoch = 1, int(MsgType.DATA), 5, 1
        data.remaining = size
        targets["tor1"].ingress(data, topo.port_of("tor1", "tor0"))
    t = 20 * MS
    sched.tick(t)
    assert sched.allocator.flows()[5].remaining_bytes == size - packets * payload
    assert sched.registry.get(5).remaining_bytes == size  # the registry keeps the last report
    sched.update(5, size, t)  # the same report again resets the estimate and its baseline
    assert sched.allocator.flows()[5].remaining_bytes == size
    sched.tick(t + 1)
    assert sched.allocator.flows()[5].remaining_bytes == size
    sched.update(5, size - 1, t)
    assert sched.allocator.flows()[5].remaining_bytes == size - 1


def test_tick_repairs_a_target_that_refused_writes() -> None:
    topo, clock, targets, sched = make()

    class Flaky:
        def __init__(self, inner: PipelineModel) -> None:
            self.inner, self.name, self.fail = inner, inner.name, True

        def write(self, updates) -> None:
            if self.fail:
                self.fail = False
                raise TargetError([UpdateFailure(i, "UNAVAILABLE", "down") for i in range(len(updates))])
            self.inner.write(updates)

        def __getattr__(self, attr):
            return getattr(self.inner, attr)

    fresh = {sw: PipelineModel(sw, clock) for sw in topo.switches()}
    flaky = Flaky(fresh["tor1"])
    sched2 = Scheduler(topo, {"tor0": fresh["tor0"], "tor1": flaky}, AT_ANNOUNCE)
    flaky.fail = False
    sched2.setup(0)
    flaky.fail = True
    with pytest.raises(TargetError):
        sched2.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    assert 5 in sched2.registry  # admitted despite the failed write
    assert grant_entries(fresh["tor1"]) == {}
    sched2.tick(0)
    assert 5 in grant_entries(fresh["tor1"])
    assert sched2.stats.write_failures == 2  # the meter and the entry


def test_controller_restart_reconciles_with_installed_state() -> None:
    topo, clock, targets, sched = make()
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    sched.announce(hint(6, "b", "d", 1_000_000, 2 * MS), 0)
    # a new controller with an empty shadow against switches that hold entries
    sched2 = Scheduler(topo, targets, AT_ANNOUNCE)
    sched2.setup(0)  # INSERTs of existing entries fall back to MODIFY
    assert sched2.stats.write_failures == 0
    sched2.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    assert grant_entries(targets["tor1"])[5]["epoch"] == 1


# ---------------------------------------------------------------------------- digests

def test_digest_for_unknown_flow_creates_hint_and_grant_end_to_end() -> None:
    topo, clock, targets, sched = make()
    tor1 = targets["tor1"]
    req = Packet(topo.host_ip("a"), topo.host_ip("d"), PROTO_UDP, 40000, SAFS_UDP_PORT, 78)
    req.safs_version, req.safs_type, req.flow_id = 1, int(MsgType.REQUEST), 9
    req.remaining, req.ts = 2_000_000, 3 * MS
    tor1.ingress(req, topo.port_of("tor1", "tor0"))
    assert req.epoch == 0 and req.rate_kbps == rate_bps_to_kbps(sched.config.default_rate_bps)
    assert sched.poll(0) == 1
    h = sched.registry.get(9)
    assert (h.sender, h.receiver, h.remaining_bytes, h.no_bubble_ts_ns) == ("a", "d", 2_000_000, 3 * MS)
    assert sched.registry.is_provisional(9)
    assert grant_entries(tor1)[9]["epoch"] == 1
    # a DATA sent under the default grant (epoch 0) now triggers a fresh GRANT in-band
    data = Packet(topo.host_ip("a"), topo.host_ip("d"), PROTO_UDP, 40000, SAFS_UDP_PORT, 1500)
    data.safs_version, data.safs_type, data.flow_id, data.epoch = 1, int(MsgType.DATA), 9, 0
    out = tor1.ingress(data, topo.port_of("tor1", "tor0"))
    assert len(out) == 2 and out[1][1].epoch == wire_epoch(1)
    # the same REQUEST again: no new digest (entry exists)
    req2 = Packet(topo.host_ip("a"), topo.host_ip("d"), PROTO_UDP, 40000, SAFS_UDP_PORT, 78)
    req2.safs_version, req2.safs_type, req2.flow_id = 1, int(MsgType.REQUEST), 9
    tor1.ingress(req2, topo.port_of("tor1", "tor0"))
    assert req2.epoch == 1 and tor1.poll_digests() == []


def test_digest_merge_only_lowers_remaining_and_bad_digests_are_counted() -> None:
    topo, clock, targets, sched = make(SchedulerConfig())  # admitted at the first REQUEST
    sched.announce(hint(5, "a", "d", 1_000_000, 20 * MS), 0)
    ip_a, ip_d = topo.host_ip("a"), topo.host_ip("d")
    assert sched.on_digest("tor1", RequestDigest(5, ip_a, ip_d, 500_000, 0), 0)
    assert sched.allocator.flows()[5].remaining_bytes == 500_000
    with pytest.raises(InvalidInput):
        sched.on_digest("tor1", RequestDigest(6, 0x0B000001, ip_d, 10, 0), 0)
    with pytest.raises(InvalidInput):
        sched.on_digest("nope", RequestDigest(6, ip_a, ip_d, 10, 0), 0)
    # via poll: the bad one is skipped and counted, the good one admitted
    targets["tor1"]._digests.extend([RequestDigest(7, 0x0B000001, ip_d, 10, 0),
                                     RequestDigest(8, ip_a, ip_d, 10, 0)])
    assert sched.poll(0) == 1
    assert sched.stats.digests_rejected == 1 and 8 in sched.registry


# ---------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("bad, field", [
    (hint(0, "a", "d", 1000, MS), "hint.flow_id"),
    (hint(9, "a", "zz", 1000, MS), "hint.receiver"),
    (hint(9, "a", "a", 1000, MS), "hint.receiver"),
    (hint(9, "a", "d", 0, MS), "hint.remaining_bytes"),
    (hint(5, "b", "d", 1000, MS), "hint.sender"),  # flow 5 reused with another sender
])
def test_bad_hint_raises_and_loses_nothing(bad: FlowHint, field: str) -> None:
    topo, clock, targets, sched = make()
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    entries = grant_entries(targets["tor1"])
    grants = sched.allocator.grants()
    before = writes(sched)
    with pytest.raises(InvalidInput) as err:
        sched.announce(bad, 0)
    assert err.value.field == field
    assert grant_entries(targets["tor1"]) == entries and sched.allocator.grants() == grants
    assert writes(sched) == before and sched.registry.get(5).sender == "a"
    with pytest.raises(InvalidInput):
        sched.update(5, 2_000_000, 0)  # may only shrink
    with pytest.raises(InvalidInput):
        sched.update(99, 10, 0)  # unknown flow
    assert sched.allocator.flows()[5].remaining_bytes == 1_000_000


def test_no_free_meter_slot_refuses_new_flow_keeps_old() -> None:
    topo, clock, targets, sched = make(SchedulerConfig(meter_slots=2, admit_on_request=False))
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    with pytest.raises(InvalidInput) as err:
        sched.announce(hint(6, "b", "d", 1_000_000, 2 * MS), 0)
    assert err.value.field == "hint.receiver"
    assert 6 not in sched.registry and list(grant_entries(targets["tor1"])) == [5]
    sched.announce(hint(7, "d", "a", 1_000_000, 2 * MS), 0)  # another ToR has its own slots
    assert list(grant_entries(targets["tor0"])) == [7]


@pytest.mark.parametrize("kwargs, field", [
    ({"default_rate_bps": -1}, "config.default_rate_bps"),
    ({"ecn_threshold_pkts": 0}, "config.ecn_threshold_pkts"),
    ({"meter_slots": 1}, "config.meter_slots"),
    ({"yellow_fraction": -0.5}, "config.yellow_fraction"),
])
def test_bad_config(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        SchedulerConfig(**kwargs)
    assert err.value.field == field


def test_background_flow_gets_only_leftover() -> None:
    topo, clock, targets, sched = make(SchedulerConfig(allocator=AllocatorConfig(safety_margin=0.0),
    admit_on_request=False))
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS, FlowClass.BACKGROUND), 0)
    sched.announce(hint(6, "b", "d", 1_000_000, 1 * MS), 0)  # 8 Gbit/s demand of 9.5 usable
    g = sched.allocator.grants()
    assert g[6].rate_bps >= 8_000_000_000
    assert g[5].rate_bps <= sched.allocator.receiver_usable_bps("d") - 8_000_000_000


def test_wire_epoch_skips_zero() -> None:
    assert [wire_epoch(e) for e in (1, 2, 2**32 - 1, 2**32, 2**32 + 1)] == [1, 2, 2**32 - 1, 1, 2]
    assert wrap(2**48 + 5) == 5


def test_reinstall_after_switch_restart_restores_tables_and_grants() -> None:
    topo, clock, targets, sched = make()
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    want_routes = targets["tor1"].entries(n.IPV4_LPM)
    want_grants = grant_entries(targets["tor1"])
    restarted = PipelineModel("tor1", clock)  # a rebooted switch: empty tables
    sched.reinstall("tor1", 0, clock_offset_ns=77, target=restarted)
    assert restarted.entries(n.IPV4_LPM) == want_routes
    assert grant_entries(restarted) == want_grants
    assert restarted.meter_config(sched.slot_of(5)) == targets["tor1"].meter_config(sched.slot_of(5))
    assert restarted.default_action(n.CLOCK_OFFSET).params["offset_ns"] == 77
    with pytest.raises(InvalidInput):
        sched.reinstall("nope", 0)


def test_default_mode_allocates_at_the_first_request_not_at_announce() -> None:
    """A hint announced ahead holds no rate; its REQUEST's digest admits it with the hint's
    semantics; a flow that finishes before any REQUEST leaves nothing behind."""
    topo, clock, targets, sched = make(SchedulerConfig())
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    sched.announce(hint(6, "b", "d", 1_000_000, 3 * MS), 0)
    assert sched.allocator.flows() == {} and grant_entries(targets["tor1"]) == {}
    digest = RequestDigest(5, topo.host_ip("a"), topo.host_ip("d"), 1_000_000, 2 * MS)
    assert sched.on_digest("tor1", digest, 10) is True
    assert set(sched.allocator.flows()) == {5}
    assert sched.registry.get(5).label == "test/5"  # the hint's semantics, not "digest"
    assert set(grant_entries(targets["tor1"])) == {5}
    assert sched.on_digest("tor1", digest, 20) is False  # a repeated REQUEST changes nothing
    sched.complete(6, 30)  # never sent a REQUEST
    assert 6 not in sched.registry and set(sched.allocator.flows()) == {5}


# ---------------------------------------------------------------------------- clone sessions

SPINE_YAML = """
name: tors-and-spine
defaults: {rate: 10Gbps, delay_ns: 500}
switches: [tor0, tor1, spine0]
hosts:
  a: {ip: 10.0.0.1, switch: tor0}
  b: {ip: 10.0.0.2, switch: tor0}
  d: {ip: 10.0.1.1, switch: tor1}
links:
  - {a: tor0, b: spine0, rate: 40Gbps}
  - {a: tor1, b: spine0, rate: 40Gbps}
"""


class RecordingModel(PipelineModel):
    """A PipelineModel that records every update written to it."""

    def __init__(self, name: str, clock) -> None:
        super().__init__(name, clock)
        self.written: list[Update] = []

    def write(self, updates) -> None:
        self.written.extend(updates)
        super().write(updates)


def clone_writes(target: RecordingModel) -> list[Update]:
    return [u for u in target.written if isinstance(u.entity, CloneSession)]


def test_setup_installs_a_clone_session_per_port_at_tors_only_and_is_idempotent() -> None:
    topo = build_topology(yaml.safe_load(SPINE_YAML), "inline")
    clock = Clock()
    targets = {sw: RecordingModel(sw, clock) for sw in topo.switches()}
    sched = Scheduler(topo, targets, AT_ANNOUNCE)
    sched.setup(0)
    for tor in ("tor0", "tor1"):
        want = [CloneSession(port + n.CLONE_SESSION_BASE, port) for port in sorted(topo.ports(tor))]
        assert len(want) == len(topo.ports(tor)) >= 2  # host ports and the uplink
        assert targets[tor].clone_sessions() == want
        assert sched.installed_clone_sessions(tor) == {cs.session_id: cs for cs in want}
    assert targets["spine0"].clone_sessions() == [] and clone_writes(targets["spine0"]) == []
    inserted = {sw: len(clone_writes(t)) for sw, t in targets.items()}
    assert all(u.op is Op.INSERT for t in targets.values() for u in clone_writes(t))
    stats = writes(sched)
    sched.setup(0)  # idempotent: nothing re-written but the clock offsets
    assert {sw: len(clone_writes(t)) for sw, t in targets.items()} == inserted
    assert writes(sched)[1] == stats[1] and writes(sched)[0] - stats[0] == len(targets)
    # a new controller (empty shadow) meets the installed sessions: reconciled, no failure
    again = Scheduler(topo, targets, AT_ANNOUNCE)
    again.setup(0)
    assert again.stats.write_failures == 0
    assert again.installed_clone_sessions("tor1") == sched.installed_clone_sessions("tor1")


def test_stale_epoch_data_gets_a_grant_through_the_sessions_setup_wrote() -> None:
    topo, clock, targets, sched = make()
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    epoch = grant_entries(targets["tor1"])[5]["epoch"]
    p = Packet(topo.host_ip("a"), topo.host_ip("d"), PROTO_UDP, 40000, SAFS_UDP_PORT, 1500)
    p.safs_version, p.safs_type, p.flow_id, p.epoch = 1, int(MsgType.DATA), 5, 0  # default-grant sender
    out = targets["tor1"].ingress(p, topo.port_of("tor1", "tor0"))
    assert [(port, q.safs_type, q.epoch) for port, q in out] == [
        (topo.port_of("tor1", "d"), MsgType.DATA, 0),
        (topo.port_of("tor1", "tor0"), MsgType.GRANT, epoch),
    ]


def test_reinstall_restores_clone_sessions() -> None:
    topo, clock, targets, sched = make()
    restarted = PipelineModel("tor0", clock)
    sched.reinstall("tor0", 0, target=restarted)
    assert restarted.clone_sessions() == targets["tor0"].clone_sessions() != []


def test_digest_of_an_admitted_flow_is_an_echo_and_changes_nothing() -> None:
    """A REQUEST that passed the ToR before its flow's grant entry was written: no
    re-allocation, no counter read, no write (the ToR's counters track the flow from here)."""
    topo, clock, targets, sched = make()
    sched.announce(hint(5, "a", "d", 1_000_000, 20 * MS), 0)
    before = (dict(sched.allocator.flows()), writes(sched))
    reads = []
    targets["tor1"].read_counter = lambda *a: reads.append(a)  # type: ignore[method-assign]
    ip_a, ip_d = topo.host_ip("a"), topo.host_ip("d")
    assert sched.on_digest("tor1", RequestDigest(5, ip_a, ip_d, 400_000, 0), 1 * MS) is False
    assert (dict(sched.allocator.flows()), writes(sched)) == before and reads == []
    assert sched.stats.digests_echoed == 1 and sched.registry.get(5).remaining_bytes == 1_000_000


def test_stale_digest_of_a_completed_flow_changes_nothing() -> None:
    """A REQUEST still in flight when its flow completed is ignored, not refused as unknown."""
    topo, clock, targets, sched = make()
    sched.announce(hint(5, "a", "d", 1_000_000, 20 * MS), 0)
    sched.activate(5, 0)
    sched.complete(5, 1 * MS)
    ip_a, ip_d = topo.host_ip("a"), topo.host_ip("d")
    assert not sched.on_digest("tor1", RequestDigest(5, ip_a, ip_d, 1000, 0), 2 * MS)
    assert 5 not in sched.registry and sched.stats.digests_rejected == 0
    assert 5 not in grant_entries(targets["tor1"])

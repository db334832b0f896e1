"""Scheduler tests: a real topology (inline YAML via the loader) and PipelineModel targets.

Dependency grants (the default, ``grant_mode="share"``) and the allocator-driven per-transfer
path (``grant_mode="per-transfer"``, policy ``safs-per-transfer``), whose grants are dep_grant
fixed entries keyed by (sender address, ``transfer_dep_id(flow_id)``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from two_tors import MS, two_tors  # the shared two-ToR test topology

from safs.core import ecmp
from safs.core import p4names as n
from safs.core.allocator import AllocatorConfig
from safs.core.errors import InvalidInput, TargetError, UpdateFailure
from safs.core.hints import DIGEST_LABEL, DependencyHint, FlowClass, FlowHint
from safs.core.packet import PROTO_TCP, PROTO_UDP, Packet
from safs.core.protocol import (
    SAFS_UDP_PORT,
    SAFS_VERSION,
    WIRE_OVERHEAD_BYTES,
    MsgType,
    latest_start_ns,
    lease_ns_to_us,
    rate_bps_to_kbps,
)
from safs.core.protocol import transfer_dep_id as T
from safs.core.scheduler import Scheduler, SchedulerConfig, node_mac, wire_epoch
from safs.core.target import CloneSession, MeterConfig, Op, RequestDigest, TableEntry, Ternary, Update
from safs.core.timebase import wrap
from safs.core.topology import build_topology, load_topology
from safs.targets.pipeline_model import PipelineModel


class Clock:
    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        return self.t


# The per-transfer path: most of its tests exercise the install path, so they allocate at
# announce; its default (allocate at the first REQUEST) has its own tests below.
PER_TRANSFER = SchedulerConfig(grant_mode="per-transfer")
AT_ANNOUNCE = SchedulerConfig(grant_mode="per-transfer", admit_on_request=False)
SHARE = SchedulerConfig()  # dependency grants: the default


def make(config: SchedulerConfig | None = None, model: type[PipelineModel] = PipelineModel):
    topo = two_tors()
    clock = Clock()
    targets = {sw: model(sw, clock) for sw in topo.switches()}
    sched = Scheduler(topo, targets, config or AT_ANNOUNCE)
    sched.setup(0)
    return topo, clock, targets, sched


def hint(fid: int, sender: str, receiver: str, size: int, deadline_ns: int,
         flow_class: FlowClass = FlowClass.PIPELINE) -> FlowHint:
    return FlowHint(fid, sender, receiver, size, deadline_ns, f"test/{fid}", flow_class)


def grant_entries(target: PipelineModel) -> dict[int, dict]:
    """The fixed (per-transfer) dep_grant entries by dep_id: flow f's is ``T(f)``."""
    return {e.match[n.F_DEP_ID]: dict(e.params) for e in target.entries(n.DEP_GRANT)
            if e.action == n.ACT_SET_FIXED_GRANT}


def share_entries(target: PipelineModel) -> dict[tuple[int, int], int]:
    """The share dep_grant entries: (sender address, dep_id) -> meter slot."""
    return {(e.match[n.F_SRC_ADDR], e.match[n.F_DEP_ID]): e.params["meter_slot"]
            for e in target.entries(n.DEP_GRANT) if e.action == n.ACT_SET_SHARE_GRANT}


def safs(topo, msg: MsgType, src: str, dst: str, flow_id: int, dep_id: int, size: int = 78, **fields) -> Packet:
    """A v2 SAFS packet from host ``src`` to ``dst``; ``fields`` sets header attributes."""
    payload = max(0, size - WIRE_OVERHEAD_BYTES) if msg == MsgType.DATA else 0
    p = Packet(topo.host_ip(src), topo.host_ip(dst), PROTO_UDP, 40000, SAFS_UDP_PORT, size, payload)
    p.safs_version, p.safs_type, p.flow_id, p.dep_id = SAFS_VERSION, int(msg), flow_id, dep_id
    for name, value in fields.items():
        setattr(p, name, value)
    return p


def writes(sched: Scheduler) -> tuple[int, int, int]:
    s = sched.stats
    return (s.table_updates, s.meter_updates, s.batches)


# ---------------------------------------------------------------------------- setup

def test_traffic_classes_are_installed_on_every_switch_with_their_meters_and_slack_queues() -> None:
    cfg = SchedulerConfig.model_validate({"traffic_classes": [
        {"name": "nccl-urgent", "protocol": 17, "dst_ports": [4791, 4791], "roce_qp": 0x100, "roce_qp_mask": 0xF00,
         "slack_ns": -1},  # late: the most urgent slack class
        {"name": "nccl-bulk", "protocol": 17, "dst_ports": [4791, 4791], "queue": 1, "rate_bps": 40_000_000_000},
        {"name": "storage", "dst": "10.0.1.0/24", "protocol": 6, "queue": 0}]})
    topo, clock, targets, sched = make(cfg)
    for target in targets.values():
        entries = sorted(target.entries(n.TRAFFIC_CLASS), key=lambda e: -e.priority)
        assert [e.params["qclass"] for e in entries] == [6, 1, 0] and [e.priority for e in entries] == [3, 2, 1]
        assert entries[1].params["meter_index"] == 2
        assert target.meter_config(2, n.AGGREGATE_METER).cir == 40_000_000_000 // 8
        assert entries[2].match[n.F_DST_ADDR] == Ternary(0x0A000100, 0xFFFFFF00)
    pkt = Packet(topo.host_ip("a"), topo.host_ip("d"), PROTO_UDP, 50000, n.ROCE_V2_UDP_PORT, 1000, 942)
    pkt.roce_qp = 0x1FF
    targets["tor0"].ingress(pkt, topo.port_of("tor0", "a"))
    assert pkt.priority == 6
    before = writes(sched)
    sched.setup(0)  # idempotent: only the clock offsets are re-written
    assert writes(sched)[1] == before[1] and writes(sched)[0] - before[0] == len(targets)



def test_setup_installs_routes_receiver_ports_classes_defaults_and_is_idempotent() -> None:
    topo, clock, targets, sched = make(SHARE)
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
    assert grant_entries(targets["tor1"]) == {T(5): {
        "rate_kbps": rate_bps_to_kbps(grant.rate_bps), "epoch": 1,
        "lease_us": lease_ns_to_us(grant.lease_ns), "meter_slot": slot}}
    (entry,) = targets["tor1"].entries(n.DEP_GRANT)
    assert entry.match == {n.F_SRC_ADDR: topo.host_ip("a"), n.F_DEP_ID: T(5)}  # keyed by the sender
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
    req = safs(topo, MsgType.REQUEST, "a", "d", 5, T(5), remaining=1_000_000)
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
    alone = grant_entries(targets["tor1"])[T(5)]["rate_kbps"]
    sched.announce(hint(6, "b", "d", 4_000_000, 10 * MS), 0)  # shares d's link, more urgent
    entries = grant_entries(targets["tor1"])
    assert entries[T(5)]["rate_kbps"] < alone and entries[T(5)]["epoch"] == 2
    assert entries[T(5)]["meter_slot"] != entries[T(6)]["meter_slot"]
    usable = sched.allocator.receiver_usable_bps("d")
    assert (entries[T(5)]["rate_kbps"] + entries[T(6)]["rate_kbps"]) * 1000 <= usable
    for fid in (5, 6):
        slot = entries[T(fid)]["meter_slot"]
        assert targets["tor1"].meter_config(slot).cir == sched.allocator.grants()[fid].rate_bps // 8


def test_complete_deletes_entry_frees_slot_and_reuses_it() -> None:
    topo, clock, targets, sched = make()
    free0 = sched.free_slots("tor1")
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    sched.announce(hint(6, "b", "d", 1_000_000, 3 * MS), 0)
    slot5 = sched.slot_of(5)
    assert sched.free_slots("tor1") == free0 - 2
    sched.complete(5, 10)
    assert T(5) not in grant_entries(targets["tor1"])
    assert sched.free_slots("tor1") == free0 - 1
    with pytest.raises(InvalidInput):
        sched.slot_of(5)
    sched.announce(hint(7, "c", "d", 1_000_000, 4 * MS), 20)
    assert sched.slot_of(7) == slot5
    with pytest.raises(InvalidInput):
        sched.complete(5, 30)  # already completed


def test_per_transfer_claims_at_the_senders_tor_outlive_a_flow_that_shares_their_key() -> None:
    topo, clock, targets, sched = make()
    other = 1 + 65535  # transfer_dep_id(1) == transfer_dep_id(65536): one claim key for sender a
    assert T(1) == T(other)
    sched.announce(hint(1, "a", "d", 1_000_000, 2 * MS), 0)
    sched.announce(hint(other, "a", "b", 1_000_000, 3 * MS), 0)
    claims = lambda: {(e.match[n.F_SRC_ADDR], e.match[n.F_DEP_ID]) for e in targets["tor0"].entries(n.DEP_CLAIM)}  # noqa: E731
    assert claims() == {(topo.host_ip("a"), T(1))}
    sched.complete(1, 10)
    assert claims() == {(topo.host_ip("a"), T(1))}  # flow 65536 still sends under it
    sched.complete(other, 20)
    assert claims() == set()


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
        data = safs(topo, MsgType.DATA, "a", "d", 5, T(5), payload + WIRE_OVERHEAD_BYTES, epoch=1, remaining=size)
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
    assert T(5) in grant_entries(fresh["tor1"])
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
    assert grant_entries(targets["tor1"])[T(5)]["epoch"] == 1


# ---------------------------------------------------------------------------- digests

def test_digest_for_unknown_flow_creates_hint_and_grant_end_to_end() -> None:
    topo, clock, targets, sched = make()
    tor1 = targets["tor1"]
    # the REQUEST carries the latest start; the controller adds the bytes at a's line rate back
    req = safs(topo, MsgType.REQUEST, "a", "d", 9, T(9), remaining=2_000_000,
               ts=latest_start_ns(3 * MS, 2_000_000, topo.host_link_bps("a")))
    tor1.ingress(req, topo.port_of("tor1", "tor0"))
    assert req.epoch == 0 and req.rate_kbps == rate_bps_to_kbps(sched.config.default_rate_bps)
    assert sched.poll(0) == 1
    h = sched.registry.get(9)
    assert (h.sender, h.receiver, h.remaining_bytes, h.no_bubble_ts_ns) == ("a", "d", 2_000_000, 3 * MS)
    assert sched.registry.is_provisional(9)
    assert grant_entries(tor1)[T(9)]["epoch"] == 1
    # a DATA sent under the default grant (epoch 0) now triggers a fresh GRANT in-band
    data = safs(topo, MsgType.DATA, "a", "d", 9, T(9), 1500, epoch=0)
    out = tor1.ingress(data, topo.port_of("tor1", "tor0"))
    assert len(out) == 2 and out[1][1].epoch == wire_epoch(1)
    # the same REQUEST again: no new digest (entry exists)
    req2 = safs(topo, MsgType.REQUEST, "a", "d", 9, T(9))
    tor1.ingress(req2, topo.port_of("tor1", "tor0"))
    assert req2.epoch == 1 and tor1.poll_digests() == []


def test_digest_merge_only_lowers_remaining_and_bad_digests_are_counted() -> None:
    topo, clock, targets, sched = make(PER_TRANSFER)  # admitted at the first REQUEST
    sched.announce(hint(5, "a", "d", 1_000_000, 20 * MS), 0)
    ip_a, ip_d = topo.host_ip("a"), topo.host_ip("d")
    assert sched.on_digest("tor1", RequestDigest(5, ip_a, ip_d, T(5), 500_000, 0), 0)
    assert sched.allocator.flows()[5].remaining_bytes == 500_000
    with pytest.raises(InvalidInput):
        sched.on_digest("tor1", RequestDigest(6, 0x0B000001, ip_d, T(6), 10, 0), 0)
    with pytest.raises(InvalidInput):
        sched.on_digest("nope", RequestDigest(6, ip_a, ip_d, T(6), 10, 0), 0)
    # via poll: the bad one is skipped and counted, the good one admitted
    targets["tor1"]._digests.extend([RequestDigest(7, 0x0B000001, ip_d, T(7), 10, 0),
                                     RequestDigest(8, ip_a, ip_d, T(8), 10, 0)])
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
    topo, clock, targets, sched = make(AT_ANNOUNCE.replace(meter_slots=2))
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    with pytest.raises(InvalidInput) as err:
        sched.announce(hint(6, "b", "d", 1_000_000, 2 * MS), 0)
    assert err.value.field == "hint.receiver"
    assert 6 not in sched.registry and list(grant_entries(targets["tor1"])) == [T(5)]
    sched.announce(hint(7, "d", "a", 1_000_000, 2 * MS), 0)  # another ToR has its own slots
    assert list(grant_entries(targets["tor0"])) == [T(7)]


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
    topo, clock, targets, sched = make(AT_ANNOUNCE.replace(allocator=AllocatorConfig(safety_margin=0.0)))
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
    topo, clock, targets, sched = make(PER_TRANSFER)
    sched.announce(hint(5, "a", "d", 1_000_000, 2 * MS), 0)
    sched.announce(hint(6, "b", "d", 1_000_000, 3 * MS), 0)
    assert sched.allocator.flows() == {} and grant_entries(targets["tor1"]) == {}
    digest = RequestDigest(5, topo.host_ip("a"), topo.host_ip("d"), T(5), 1_000_000,
                           latest_start_ns(2 * MS, 1_000_000, topo.host_link_bps("a")))
    assert sched.on_digest("tor1", digest, 10) is True
    assert set(sched.allocator.flows()) == {5}
    assert sched.registry.get(5).label == "test/5"  # the hint's semantics, not "digest"
    assert sched.registry.get(5).no_bubble_ts_ns == 2 * MS
    assert set(grant_entries(targets["tor1"])) == {T(5)}
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
    epoch = grant_entries(targets["tor1"])[T(5)]["epoch"]
    p = safs(topo, MsgType.DATA, "a", "d", 5, T(5), 1500, epoch=0)  # a default-grant sender
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
    assert sched.on_digest("tor1", RequestDigest(5, ip_a, ip_d, T(5), 400_000, 0), 1 * MS) is False
    assert (dict(sched.allocator.flows()), writes(sched)) == before and reads == []
    assert sched.stats.digests_echoed == 1 and sched.registry.get(5).remaining_bytes == 1_000_000


def test_stale_digest_of_a_completed_flow_changes_nothing() -> None:
    """A REQUEST still in flight when its flow completed is ignored, not refused as unknown."""
    topo, clock, targets, sched = make()
    sched.announce(hint(5, "a", "d", 1_000_000, 20 * MS), 0)
    sched.activate(5, 0)
    sched.complete(5, 1 * MS)
    ip_a, ip_d = topo.host_ip("a"), topo.host_ip("d")
    assert not sched.on_digest("tor1", RequestDigest(5, ip_a, ip_d, T(5), 1000, 0), 2 * MS)
    assert 5 not in sched.registry and sched.stats.digests_rejected == 0
    assert T(5) not in grant_entries(targets["tor1"])


# ---------------------------------------------------------------------------- dependency grants

def dep(dep_id: int, sender: str, receiver: str, label: str = "", flow_class: FlowClass = FlowClass.PIPELINE):
    return DependencyHint(dep_id, sender, receiver, label or f"{sender}->{receiver}", flow_class)


def share_make(config: SchedulerConfig = SHARE):
    """A scheduler in share mode on recording models, with setup's writes forgotten."""
    topo, clock, targets, sched = make(config, RecordingModel)
    for t in targets.values():
        t.written.clear()
    return topo, clock, targets, sched


def test_setup_writes_port_share_per_host_port_and_the_share_lease() -> None:
    topo, clock, targets, sched = make(SHARE.replace(background_share=0.25, share_lease_ns=7_500_000))
    for tor in ("tor0", "tor1"):
        host_ports = {p for p, nb in topo.ports(tor).items() if topo.is_host(nb)}
        shares: dict[tuple[int, int], dict[int, int]] = {}
        for e in targets[tor].entries(n.PORT_SHARE):
            key = (e.match[n.F_EGRESS_PORT], e.match[n.F_MODE])
            shares.setdefault(key, {})[e.match[n.F_LOAD]] = e.params["rate_kbps"]
        # every mode of every host port, not the port between the ToRs
        assert set(shares) == {(p, mode) for p in host_ports for mode in n.SHARE_MODES}
        for port in host_ports:
            link = topo.host_link_bps(topo.neighbor_at(tor, port))
            usable = sched.allocator.config.usable_bps(link)
            usable -= int(usable * 0.25)  # the background share stays free
            reserve = int(usable * sched.config.waiting_share)
            for mode, rate in ((n.SHARE_ALONE, usable), (n.SHARE_TOP, usable - reserve), (n.SHARE_WAITING, reserve)):
                assert shares[(port, mode)] == {load: rate_bps_to_kbps(rate // load)
                                                for load in range(1, n.MAX_LOAD + 1)}
            assert shares[(port, n.SHARE_ALONE)][1] * 1000 < link
            # the top class's grants and the reserve add up to the usable rate at most
            assert (shares[(port, n.SHARE_TOP)][1] + shares[(port, n.SHARE_WAITING)][1]) * 1000 <= usable
        assert targets[tor].default_action(n.SHARE_LEASE).params == {"lease_us": 7_500}
    # per-transfer mode writes no shares
    topo, clock, targets, sched = make(AT_ANNOUNCE)
    assert all(t.entries(n.PORT_SHARE) == [] for t in targets.values())


@pytest.mark.parametrize("waiting_share", [1 / 32, 0.25, 1 / 200])
def test_spare_levels_partition_the_top_bytes_of_a_window(waiting_share: float) -> None:
    """spare_level of every host port: level = floor((U - top bytes) / R) for every top-bytes
    count in 0..U - 2R (U the usable rate's bytes per TOP_WINDOW_NS, R the waiting share of
    them, the background share left out), ranges disjoint, capped at MAX_SPARE_LEVEL; above:
    no range (level 1). Written once: a background share change leaves them."""
    topo, clock, targets, sched = make(SHARE.replace(waiting_share=waiting_share))
    for tor in ("tor0", "tor1"):
        for port, nb in topo.ports(tor).items():
            if not topo.is_host(nb):
                continue
            u = sched.allocator.config.usable_bps(topo.host_link_bps(nb)) * n.TOP_WINDOW_NS // 8_000_000_000
            r = int(u * waiting_share)
            ranges = sorted((e.match[n.F_TOP_BYTES].low, e.match[n.F_TOP_BYTES].high, e.params["level"])
                            for e in targets[tor].entries(n.SPARE_LEVEL) if e.match[n.F_EGRESS_PORT] == port)
            assert ranges[0][0] == 0 and ranges[-1][1] == u - 2 * r
            assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, disjoint
            for low, high, level in ranges:
                for top in (low, high):
                    assert level == min((u - top) // r, n.MAX_SPARE_LEVEL)
    before = targets["tor1"].entries(n.SPARE_LEVEL)
    sched.set_background_share("tor1", topo.port_of("tor1", "d"), 0.5)
    assert targets["tor1"].entries(n.SPARE_LEVEL) == before


@pytest.mark.parametrize("overcommit", [2.0, 1.5, 1.03])
def test_top_boost_entries_give_min_overcommit_and_usable_over_top_bytes(overcommit: float) -> None:
    """top_boost of every host port with top_overcommit > 1: for every top-bytes count t in
    1..U (U the usable rate's bytes per TOP_WINDOW_NS) the boost, in 1/256, is
    min(overcommit, U / t) rounded down to a 1/16 step; 0 bytes (a silent window) and counts
    whose step is 1 have no entry (boost 256). Ranges disjoint. Off (1, the default): none."""
    topo, clock, targets, sched = make(SHARE.replace(top_overcommit=overcommit))
    steps = int((overcommit - 1) * 16 + 1e-9)
    for tor in ("tor0", "tor1"):
        host_ports = [port for port, nb in topo.ports(tor).items() if topo.is_host(nb)]
        entries = targets[tor].entries(n.TOP_BOOST)
        assert len(entries) == steps * len(host_ports) and len(entries) <= n.TOP_BOOST_SIZE
        for port in host_ports:
            u = sched.allocator.config.usable_bps(topo.host_link_bps(topo.neighbor_at(tor, port)))
            u = u * n.TOP_WINDOW_NS // 8_000_000_000
            ranges = sorted((e.match[n.F_TOP_BYTES].low, e.match[n.F_TOP_BYTES].high, e.params["boost"])
                            for e in entries if e.match[n.F_EGRESS_PORT] == port)
            assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))  # disjoint
            if not ranges:
                continue
            assert ranges[0][0] == 1
            for low, high, boost in ranges:
                for top in (low, high):
                    assert boost == 256 * int(16 * min(overcommit, u / top) + 1e-9) // 16 > 256
            assert 256 * int(16 * u / (ranges[-1][1] + 1)) // 16 == 256  # above the last range: x1
    topo, clock, targets, sched = make(SHARE)
    assert all(t.entries(n.TOP_BOOST) == [] for t in targets.values())
    for bad in (0.5, 2.5):
        with pytest.raises(InvalidInput) as err:
            SchedulerConfig(top_overcommit=bad)
        assert err.value.field == "config.top_overcommit"
    with pytest.raises(InvalidInput) as err:
        SchedulerConfig(grant_mode="per-transfer", top_overcommit=2.0)
    assert err.value.field == "config.top_overcommit" and "per-transfer" in err.value.message


def test_waiting_share_sets_the_reserve_and_is_range_checked() -> None:
    topo, clock, targets, sched = make(SHARE.replace(waiting_share=0.25))
    port = topo.port_of("tor1", "d")
    rates = {e.match[n.F_MODE]: e.params["rate_kbps"] for e in targets["tor1"].entries(n.PORT_SHARE)
             if e.match[n.F_EGRESS_PORT] == port and e.match[n.F_LOAD] == 1}
    usable = sched.allocator.config.usable_bps(topo.host_link_bps("d"))
    usable -= int(usable * sched.config.background_share)
    assert rates[n.SHARE_WAITING] == rate_bps_to_kbps(int(usable * 0.25))
    assert rates[n.SHARE_TOP] == rate_bps_to_kbps(usable - int(usable * 0.25))
    for bad in (0.0, 0.6):
        with pytest.raises(InvalidInput) as err:
            SchedulerConfig(waiting_share=bad)
        assert err.value.field == "config.waiting_share"


def test_announce_dependency_writes_a_meter_and_grant_at_the_receivers_tor_and_a_claim_at_the_senders() -> None:
    topo, clock, targets, sched = share_make()
    before = writes(sched)
    assert sched.announce_dependency(dep(3, "a", "d"), 0) is True
    slot = 1
    usable = sched.allocator.config.usable_bps(topo.host_link_bps("d"))
    assert targets["tor1"].written == [
        Update(Op.MODIFY, sched.config.meter_for(slot, usable)),
        Update(Op.INSERT, TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: topo.host_ip("a"), n.F_DEP_ID: 3},
                                     n.ACT_SET_SHARE_GRANT, {"meter_slot": slot})),
    ]
    assert targets["tor0"].written == [
        Update(Op.INSERT, TableEntry(n.DEP_CLAIM, {n.F_SRC_ADDR: topo.host_ip("a"), n.F_DEP_ID: 3}, n.ACT_CLAIM,
                                     {"out_slot": slot}))]
    assert writes(sched) == (before[0] + 2, before[1] + 1, before[2] + 2)  # one batch per ToR
    assert sched.stats.dependencies == 1 and sched.free_slots("tor1") == sched.config.meter_slots - 2
    meter = targets["tor1"].meter_config(slot)
    assert isinstance(meter, MeterConfig) and meter.cir == usable // 8  # the most a share can be
    assert share_entries(targets["tor1"]) == {(topo.host_ip("a"), 3): slot}
    assert sched.dependencies.get(("a", 3)).label == "a->d"


def test_reannouncing_a_dependency_writes_nothing() -> None:
    topo, clock, targets, sched = share_make()
    sched.announce_dependency(dep(3, "a", "d"), 0)
    for target in targets.values():
        target.written.clear()
    before = writes(sched)
    assert sched.announce_dependency(dep(3, "a", "d"), 10) is False
    assert sched.announce_dependency(dep(3, "a", "d", label="renamed"), 20) is False
    sched.tick(30 * MS)  # share mode: time alone changes nothing either
    assert writes(sched) == before and targets["tor1"].written == [] and targets["tor0"].written == []
    assert sched.stats.dependencies == 1


def test_bad_or_conflicting_dependency_names_its_field_and_writes_nothing() -> None:
    topo, clock, targets, sched = share_make()
    sched.announce_dependency(dep(3, "a", "d"), 0)
    for target in targets.values():
        target.written.clear()
    for bad, field in ((dep(0, "a", "d"), "dependency.dep_id"), (dep(4, "a", "zz"), "dependency.receiver"),
                       (dep(4, "zz", "d"), "dependency.sender"), (dep(3, "a", "b"), "dependency.dep_id"),
                       (dep(3, "a", "d", flow_class=FlowClass.BACKGROUND), "dependency.dep_id")):
        with pytest.raises(InvalidInput) as err:
            sched.announce_dependency(bad, 0)
        assert err.value.field == field
    assert all(t.written == [] for t in targets.values())
    assert len(sched.dependencies) == 1 and sched.dependencies.get(("a", 3)).receiver == "d"


def test_no_free_slot_refuses_the_dependency_naming_its_receiver_and_writes_nothing() -> None:
    topo, clock, targets, sched = share_make(SHARE.replace(meter_slots=2))  # one slot per switch
    sched.announce_dependency(dep(1, "a", "d"), 0)
    targets["tor1"].written.clear()
    with pytest.raises(InvalidInput) as err:
        sched.announce_dependency(dep(1, "b", "d"), 0)
    assert err.value.field == "dependency.receiver"
    assert ("b", 1) not in sched.dependencies and targets["tor1"].written == []
    sched.announce_dependency(dep(1, "d", "a"), 0)  # tor0 has its own slot
    assert share_entries(targets["tor0"]) == {(topo.host_ip("d"), 1): 1}
    # a REQUEST digest finds no slot either: refused and counted by poll, nothing written
    targets["tor1"]._digests.append(RequestDigest(9, topo.host_ip("c"), topo.host_ip("d"), 2, 10, 0))
    assert sched.poll(0) == 0 and sched.stats.digests_rejected == 1
    assert ("c", 2) not in sched.dependencies and len(share_entries(targets["tor1"])) == 1


def test_end_dependency_deletes_its_entry_and_frees_the_slot() -> None:
    topo, clock, targets, sched = share_make()
    free = sched.free_slots("tor1")
    sched.announce_dependency(dep(3, "a", "d"), 0)
    sched.announce_dependency(dep(4, "b", "d"), 0)
    (entry,) = [e for e in targets["tor1"].entries(n.DEP_GRANT) if e.match[n.F_DEP_ID] == 3]
    targets["tor1"].written.clear()
    sched.end_dependency("a", 3, 10)
    assert targets["tor1"].written == [Update(Op.DELETE, entry)]
    assert share_entries(targets["tor1"]) == {(topo.host_ip("b"), 4): 2}
    assert sched.free_slots("tor1") == free - 1 and ("a", 3) not in sched.dependencies
    with pytest.raises(InvalidInput) as err:
        sched.end_dependency("a", 3, 20)  # ended already
    assert err.value.field == "dep_id"
    sched.announce_dependency(dep(3, "a", "d"), 30)  # the id and the slot may be used again
    assert share_entries(targets["tor1"])[(topo.host_ip("a"), 3)] == 1


def test_request_digest_of_an_unknown_dependency_installs_it() -> None:
    topo, clock, targets, sched = share_make()
    tor1, port = targets["tor1"], topo.port_of("tor1", "tor0")
    req = safs(topo, MsgType.REQUEST, "a", "d", 40, 7, remaining=50_000, ts=5 * MS)
    tor1.ingress(req, port)
    assert (req.safs_type, req.epoch) == (MsgType.GRANT, 0)  # the default grant meanwhile
    assert sched.poll(0) == 1
    got = sched.dependencies.get(("a", 7))
    assert (got.receiver, got.label, got.flow_class) == ("d", DIGEST_LABEL, FlowClass.PIPELINE)
    assert share_entries(tor1) == {(topo.host_ip("a"), 7): 1} and sched.stats.digests_merged == 1
    # the next transfer of the dependency is granted by the switch alone: its share, no digest
    req2 = safs(topo, MsgType.REQUEST, "a", "d", 41, 7, remaining=50_000, ts=wrap(tor1.now() + 50 * MS))
    tor1.ingress(req2, port)
    usable = sched.allocator.config.usable_bps(topo.host_link_bps("d"))
    assert (req2.rate_kbps, req2.epoch) == (rate_bps_to_kbps(usable), 1) and tor1.poll_digests() == []
    # an echo (a REQUEST that passed before the entry landed) and the application's announce
    # change nothing on the switch
    tor1.written.clear()
    assert sched.on_digest("tor1", RequestDigest(42, topo.host_ip("a"), topo.host_ip("d"), 7, 1, 0), 0) is False
    assert sched.stats.digests_echoed == 1
    assert sched.announce_dependency(dep(7, "a", "d", label="A2F a->d"), 0) is False
    assert sched.dependencies.get(("a", 7)).label == "A2F a->d" and tor1.written == []


def test_two_announced_dependencies_share_the_receiver_port_through_the_pipeline() -> None:
    topo, clock, targets, sched = make(SHARE)
    sched.announce_dependency(dep(1, "a", "d"), 0)
    sched.announce_dependency(dep(1, "b", "d"), 0)
    tor1, port = targets["tor1"], topo.port_of("tor1", "tor0")
    rates = []
    for sender in ("a", "b", "a"):
        req = safs(topo, MsgType.REQUEST, sender, "d", 5, 1, ts=wrap(tor1.now() + 50 * MS))
        tor1.ingress(req, port)
        rates.append(req.rate_kbps)
    usable = sched.allocator.config.usable_bps(topo.host_link_bps("d"))
    assert rates == [rate_bps_to_kbps(usable), rate_bps_to_kbps(usable // 2), rate_bps_to_kbps(usable // 2)]
    assert tor1.poll_digests() == []


def test_dependencies_in_per_transfer_mode_are_recorded_only() -> None:
    topo, clock, targets, sched = share_make(AT_ANNOUNCE)
    assert sched.announce_dependency(dep(3, "a", "d"), 0) is True
    assert ("a", 3) in sched.dependencies
    assert all(t.written == [] for t in targets.values()) and sched.stats.dependencies == 0


def test_reinstall_restores_dependency_grants_and_meters() -> None:
    topo, clock, targets, sched = make(SHARE)
    sched.announce_dependency(dep(3, "a", "d"), 0)
    restarted = PipelineModel("tor1", clock)
    sched.reinstall("tor1", 0, target=restarted)
    assert restarted.entries(n.DEP_GRANT) == targets["tor1"].entries(n.DEP_GRANT) != []
    assert restarted.meter_config(1) == targets["tor1"].meter_config(1)
    assert len(restarted.entries(n.PORT_SHARE)) == n.MAX_LOAD * len(n.SHARE_MODES)


def test_traffic_class_errors_name_the_class_keys_and_the_limit() -> None:
    with pytest.raises(InvalidInput) as exc:
        SchedulerConfig.from_mapping({"traffic_classes": [{"name": "x", "queue": 1, "colour": "red"}]})
    assert exc.value.field.endswith("traffic_classes[0].colour") and "roce_qp_mask" in exc.value.message
    assert "admit_on_request" not in exc.value.message
    many = [{"name": f"c{i}", "queue": 1} for i in range(256)]
    with pytest.raises(InvalidInput, match="at most 255 entries") as exc:
        SchedulerConfig.from_mapping({"traffic_classes": many})
    assert len(str(exc.value)) < 300


@pytest.mark.parametrize("spec, field, needle", [
    ({"protocol": 1, "dst_ports": [80, 80]}, "dst_ports", "protocol is 1"),
    ({"protocol": 47, "src_ports": [1, 2]}, "src_ports", "TCP (6) and UDP (17)"),
    ({"protocol": 6, "roce_qp": 5}, "roce_qp", "only over UDP (17)"),
    ({"protocol": 17, "dst_ports": [4000, 4790], "roce_qp": 5}, "roce_qp", "exclude it"),
    ({"protocol": 17, "roce_qp_mask": 0xF00}, "roce_qp_mask", "applies only with roce_qp"),
])
def test_traffic_classes_that_could_never_match_are_refused(spec: dict, field: str, needle: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        SchedulerConfig.from_mapping({"traffic_classes": [{"name": "x", "queue": 1, **spec}]})
    assert exc.value.field.endswith(f"traffic_classes[0].{field}") and needle in exc.value.message
    assert "could never match" in exc.value.message or field == "roce_qp_mask"
    ok = {"name": "x", "queue": 1, "protocol": 17, "dst_ports": [4791, 4791], "roce_qp": 5}
    assert SchedulerConfig.from_mapping({"traffic_classes": [ok]}).traffic_classes[0].roce_qp == 5


def test_traffic_class_names_must_be_unique() -> None:
    with pytest.raises(InvalidInput, match="'bulk' given more than once") as exc:
        SchedulerConfig.from_mapping({"traffic_classes": [{"name": "bulk", "queue": 1}, {"name": "rdma", "queue": 2},
                                                          {"name": "bulk", "queue": 0}]})
    assert exc.value.field.endswith("traffic_classes")


def test_leaf_spine_routes_use_ecmp_groups_and_packets_take_the_predicted_spine(caplog) -> None:
    topo = load_topology(Path(__file__).resolve().parents[1] / "topologies" / "leaf-spine.yaml")
    clock = Clock()
    targets = {sw: PipelineModel(sw, clock) for sw in topo.switches()}
    sched = Scheduler(topo, targets, SHARE)
    assert sched.oversubscribed_links == [] and "no receiver's ToR shares them out" not in caplog.text
    assert all(sched.share_links(sw) == [] for sw in topo.switches())  # link_shares "oversubscribed"
    sched.setup(0)
    leaf0 = targets["leaf0"]
    ups = topo.next_hop_ports("leaf0", "h4")
    assert [m.member_id for m in leaf0.profile_members()] == sorted(ups)
    assert [g.members for g in leaf0.profile_groups()] == [ups]
    (ecmp_entry,) = leaf0.entries(n.ECMP)
    lpm = {e.match[n.F_DST_ADDR].value: e for e in leaf0.entries(n.IPV4_LPM)}
    assert lpm[topo.host_ip("h4")].action == n.ACT_SET_ECMP_GROUP
    assert lpm[topo.host_ip("h4")].params["group"] == ecmp_entry.group_id
    assert lpm[topo.host_ip("h1")].action == n.ACT_SET_EGRESS  # same leaf: one next hop
    for sport in range(1024, 1040):
        p = Packet(topo.host_ip("h0"), topo.host_ip("h4"), PROTO_UDP, sport, SAFS_UDP_PORT, 1000)
        (port, _), = leaf0.ingress(p, topo.port_of("leaf0", "h0"))
        assert topo.neighbor_at("leaf0", port) == topo.path("h0", "h4", (PROTO_UDP, sport, SAFS_UDP_PORT))[2]
        assert port == ecmp.select(ups, ecmp.flow_hash(p.src, p.dst, PROTO_UDP, sport, SAFS_UDP_PORT))
    before = writes(sched)
    sched.setup(0)  # idempotent: profiles and entries unchanged
    assert writes(sched)[1] == before[1]
    targets["leaf0"] = PipelineModel("leaf0", clock)
    sched.reinstall("leaf0", 0, target=targets["leaf0"])
    assert targets["leaf0"].entries(n.ECMP) == [ecmp_entry]


def test_oversubscribed_links_of_a_tor_get_link_and_out_shares_and_the_others_a_warning(caplog) -> None:
    """leaf-spine-oversub: spine0->leafN (into a ToR) get link_share and link_spare_level
    entries at leafN's port facing spine0, at the link's usable rate; leafN->spine0 (out of it)
    get out_share and out_spare_level entries at the same port, so no link is named in the
    warning. link_shares "off": every link is named and no entry is written; "all" on the
    non-blocking leaf-spine: every uplink gets entries both ways."""
    root = Path(__file__).resolve().parents[1] / "topologies"
    topo = load_topology(root / "leaf-spine-oversub.yaml")
    targets = {sw: PipelineModel(sw, Clock()) for sw in topo.switches()}
    sched = Scheduler(topo, targets, SHARE)
    assert ("leaf0", "spine0", 500_000_000_000, 200_000_000_000) in sched.oversubscribed_links
    assert "500/200 Gbit/s" not in caplog.text
    uplink = topo.port_of("leaf0", "spine0")
    assert sched.share_links("leaf0") == [(uplink, 200_000_000_000)] and sched.share_links("spine0") == []
    assert sched.share_links("leaf0", out=True) == [(uplink, 200_000_000_000)]
    assert sched.share_links("spine0", out=True) == []
    sched.setup(0)
    usable_kbps = sched.allocator.config.usable_bps(200_000_000_000) // 1000
    for table, key in ((n.LINK_SHARE, n.F_INGRESS_PORT), (n.OUT_SHARE, n.F_EGRESS_PORT)):
        shares = targets["leaf0"].entries(table)
        assert len(shares) == 3 * n.MAX_LOAD and {e.match[key] for e in shares} == {uplink}
        alone = {e.match[n.F_LOAD]: e.params["rate_kbps"] for e in shares if e.match[n.F_MODE] == n.SHARE_ALONE}
        assert alone[1] == usable_kbps and alone[4] == alone[1] // 4
    assert targets["leaf0"].entries(n.LINK_SPARE_LEVEL) and targets["leaf0"].entries(n.OUT_SPARE_LEVEL)
    assert targets["spine0"].entries(n.LINK_SHARE) == [] and targets["spine0"].entries(n.OUT_SHARE) == []
    per_transfer = Scheduler(topo, {sw: PipelineModel(sw, Clock()) for sw in topo.switches()},
                             SHARE.model_copy(update={"grant_mode": "per-transfer"}))
    assert per_transfer.share_links("leaf0", out=True) == []  # out slots come with the share design
    assert "leaf0->spine0 500/200 Gbit/s" in caplog.text and "spine0->leaf0" not in caplog.text
    caplog.clear()
    off = Scheduler(topo, {sw: PipelineModel(sw, Clock()) for sw in topo.switches()},
                    SHARE.model_copy(update={"link_shares": "off"}))
    assert "spine0->leaf0 500/200 Gbit/s" in caplog.text and off.share_links("leaf0") == []
    flat = load_topology(root / "leaf-spine.yaml")
    every = Scheduler(flat, {sw: PipelineModel(sw, Clock()) for sw in flat.switches()},
                      SHARE.model_copy(update={"link_shares": "all"}))
    uplinks = [p for p, nb in flat.ports("leaf0").items() if not flat.is_host(nb)]
    assert [p for p, _ in every.share_links("leaf0")] == uplinks == [p for p, _ in every.share_links("leaf0", out=True)]


def test_a_dependencys_slot_is_free_at_its_receivers_tor_and_among_its_sender_tors_out_slots() -> None:
    """Share design: a dependency's meter slot is also its out slot at its sender's ToR (its
    dep_claim entry's out_slot), so no two dependencies sent from one ToR share a slot even when
    their receivers' ToRs differ; ending one frees it at both; none left at both raises
    InvalidInput naming the field and changes nothing."""
    topo, clock, targets, sched = share_make()
    sched.announce_dependency(dep(2, "a", "d"), 0)  # slot 1 at tor1, out slot 1 at tor0
    sched.announce_dependency(dep(3, "b", "c"), 0)  # slot 1 is free at tor0 but an out slot there
    assert {key: placed[1] for key, placed in sched._dep_slots.items()} == {("a", 2): 1, ("b", 3): 2}
    claims = {e.match[n.F_DEP_ID]: e.params["out_slot"] for e in targets["tor0"].entries(n.DEP_CLAIM)}
    assert claims == {2: 1, 3: 2}
    sched.end_dependency("a", 2, 10)
    sched.announce_dependency(dep(4, "c", "d"), 20)  # slot 1 is free at both again
    assert sched._dep_slots[("c", 4)] == ("tor1", 1)
    small = share_make(SHARE.replace(meter_slots=3))[3]
    small.announce_dependency(dep(1, "a", "d"), 0)
    small.announce_dependency(dep(2, "b", "d"), 0)
    with pytest.raises(InvalidInput) as err:
        small.announce_dependency(dep(3, "c", "a"), 0)  # tor0 has slots 1, 2 free, both out slots of tor0
    assert err.value.field == "dependency.receiver" and "out slots" in err.value.message
    assert ("c", 3) not in small.dependencies


def test_restore_keeps_stored_slots_and_gives_taken_or_bad_ones_new_slots() -> None:
    """Scheduler.restore: each dependency gets its stored meter slot back when it is free; a
    slot stored twice, out of range or None gets the lowest free one; the free slots left are
    exactly the others (the next announce takes the lowest)."""
    topo, clock, targets, sched = make(SHARE)
    deps = [(DependencyHint(1, "a", "d"), 7), (DependencyHint(2, "b", "d"), 3),
            (DependencyHint(3, "c", "d"), 7), (DependencyHint(4, "a", "d"), None),
            (DependencyHint(5, "b", "d"), 10**6)]
    sched.restore(deps, [], 0)
    slots = {key: slot for key, (tor, slot) in sched._dep_slots.items()}
    assert slots[("a", 1)] == 7 and slots[("b", 2)] == 3
    assert sorted([slots[("c", 3)], slots[("a", 4)], slots[("b", 5)]]) == [1, 2, 4]
    assert sched.free_slots("tor1") == sched.config.meter_slots - 1 - 5
    sched.announce_dependency(DependencyHint(6, "c", "d"), 0)
    assert sched._dep_slots[("c", 6)] == ("tor1", 5)


def test_more_shared_in_links_than_the_p4_tables_hold_is_refused() -> None:
    """link_shares "all" on a ToR with 17 uplinks: the P4 program's link_share table holds
    MAX_SHARE_LINKS (16) links' entries, so the scheduler refuses the configuration up front,
    naming the setting; "oversubscribed" (none here: 17 x 100G up for 1 x 100G down) is fine."""
    spines = [f"s{i}" for i in range(n.MAX_SHARE_LINKS + 1)]
    raw = {"name": "wide", "switches": ["tor0", "tor1", *spines],
           "hosts": {"a": {"ip": "10.0.0.1", "switch": "tor0"}, "b": {"ip": "10.0.1.1", "switch": "tor1"}},
           "links": [{"a": tor, "b": s} for tor in ("tor0", "tor1") for s in spines]}
    topo = build_topology(raw, "wide.yaml")
    targets = {sw: PipelineModel(sw, Clock()) for sw in topo.switches()}
    with pytest.raises(InvalidInput, match="17 shared in-links") as exc:
        Scheduler(topo, targets, SchedulerConfig(link_shares="all"))
    assert exc.value.field == "config.link_shares" and exc.value.source == "wide.yaml"
    assert Scheduler(topo, targets, SHARE).share_links("tor0") == []


def test_holder_settings_are_written_and_other_host_rates_warned(caplog) -> None:
    """The holder table's default action carries SchedulerConfig.holder_* (idle 0 for the
    safs-no-holder ablation); a topology whose host links are not the 100 Gbit/s the finish
    estimate assumes gets a warning naming their rates, unless the holder is off."""
    root = Path(__file__).resolve().parents[1] / "topologies"
    topo = load_topology(root / "leaf-spine.yaml")
    for update, want in (({}, {"idle_ns": 10_000, "release_bytes": 60_000, "preempt_ns": 100_000}),
                         ({"holder_idle_ns": 0}, {"idle_ns": 0, "release_bytes": 60_000, "preempt_ns": 100_000})):
        targets = {sw: PipelineModel(sw, Clock()) for sw in topo.switches()}
        Scheduler(topo, targets, SHARE.model_copy(update=update)).setup(0)
        assert targets["leaf0"].default_action(n.HOLDER).params == want
    assert "finish estimate" not in caplog.text
    slow = load_topology(root / "mininet-afd.yaml")
    Scheduler(slow, {sw: PipelineModel(sw, Clock()) for sw in slow.switches()}, SHARE)
    assert "host links of 0.01 Gbit/s" in caplog.text
    caplog.clear()
    Scheduler(slow, {sw: PipelineModel(sw, Clock()) for sw in slow.switches()},
              SHARE.model_copy(update={"holder_idle_ns": 0}))
    assert "finish estimate" not in caplog.text

"""Unit tests of the in-process SAFS pipeline model (safs.targets.pipeline_model)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safs.core import ecmp
from safs.core import p4names as n
from safs.core.errors import InvalidInput, TargetError
from safs.core.packet import PROTO_TCP, PROTO_UDP, Packet
from safs.core.protocol import (
    ECN_CE,
    ECN_ECT0,
    ECN_ECT1,
    ECN_NOT_ECT,
    FLAG_BACKGROUND,
    FLAG_LAST,
    FLAG_RENEW,
    FLAG_RESENT,
    QDEPTH_MAX,
    QUEUE_BEST_EFFORT,
    QUEUE_CONTROL,
    QUEUE_OVER_RATE,
    QUEUE_SLACK_LEAST_URGENT,
    SAFS_UDP_PORT,
    SAFS_VERSION,
    Color,
    MsgType,
)
from safs.core.target import (
    ActionProfileGroup,
    ActionProfileMember,
    CloneSession,
    Lpm,
    MeterConfig,
    Op,
    Range,
    RequestDigest,
    TableEntry,
    Ternary,
    Update,
)
from safs.core.timebase import TIME_MASK, slack_to_key, wrap
from safs.targets.pipeline_model import CLONE_SESSION_ID_MAX, CONTROL_PACKET_BYTES, PipelineModel, qdepth_bucket

SENDER_IP = 0x0A000001  # 10.0.0.1, behind port 1
RECEIVER_IP = 0x0A000102  # 10.0.1.2, directly attached on port 3 (receiver port)
OTHER_IP = 0x0A000105  # 10.0.1.5, via port 2 (not a receiver port)
SECOND_RECEIVER_IP = 0x0A000204  # 10.0.2.4, directly attached on port 4 (a second receiver port)
SENDER_PORT, FABRIC_PORT, RECEIVER_PORT, SECOND_RECEIVER_PORT = 1, 2, 3, 4

# Slack classes used by these tests: (low slack ns, high slack ns, qclass); urgency = 6 - qclass.
US = 1_000
CLASSES = [(-(1 << 47), -1, 6), (0, 10 * US - 1, 5), (10 * US, 100 * US - 1, 4),
           (100 * US, 1000 * US - 1, 3), (1000 * US, (1 << 47) - 1, 2)]
SLACK_NS = {6: -5 * US, 5: 5 * US, 4: 50 * US, 3: 500 * US, 2: 10_000 * US}  # a slack inside each class
PORT_KBPS = 100_000_000  # usable rate of each receiver port in port_share (100 Gbit/s)
RESERVE_KBPS = PORT_KBPS // 32  # its waiting share (SchedulerConfig.waiting_share's default)
SHARE_LEASE_US = 20_000
DEFAULT_KBPS, DEFAULT_LEASE_US = 1_000_000, 500


class Clock:
    """A settable switch clock (ns since switch start)."""

    def __init__(self, t: int = 0) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def entry(table: str, match: dict, action: str, priority: int = 0, **params: int) -> TableEntry:
    return TableEntry(table=table, match=match, action=action, params=params, priority=priority)


def default(table: str, action: str, **params: int) -> TableEntry:
    return TableEntry(table=table, match={}, action=action, params=params, is_default=True)


def ins(e: TableEntry) -> Update:
    return Update(Op.INSERT, e)


def mod(e) -> Update:
    return Update(Op.MODIFY, e)


def route(prefix: int, plen: int, port: int) -> TableEntry:
    return entry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(prefix, plen)}, n.ACT_SET_EGRESS, port=port,
                 dst_mac=0x020000000000 + port)


def back_route(prefix: int, plen: int, port: int) -> TableEntry:
    return entry(n.GRANT_ROUTE, {n.F_SRC_ADDR: Lpm(prefix, plen)}, n.ACT_SET_GRANT_ROUTE, port=port,
                 dst_mac=0x020000000000 + port)


def fixed_grant(dep_id: int, rate_kbps: int, epoch: int, lease_us: int, slot: int,
                src: int = SENDER_IP) -> TableEntry:
    """A per-transfer-mode dep_grant entry (set_fixed_grant)."""
    return entry(n.DEP_GRANT, {n.F_SRC_ADDR: src, n.F_DEP_ID: dep_id}, n.ACT_SET_FIXED_GRANT,
                 rate_kbps=rate_kbps, epoch=epoch, lease_us=lease_us, meter_slot=slot)


def share_grant(dep_id: int, slot: int, src: int = SENDER_IP) -> TableEntry:
    """A dependency's dep_grant entry in share mode (set_share_grant)."""
    return entry(n.DEP_GRANT, {n.F_SRC_ADDR: src, n.F_DEP_ID: dep_id}, n.ACT_SET_SHARE_GRANT, meter_slot=slot)


def share_kbps(load: int, mode: int = n.SHARE_ALONE) -> int:
    """port_share of a receiver port at ``load`` and ``mode`` (as Scheduler._share_entries)."""
    rate = {n.SHARE_ALONE: PORT_KBPS, n.SHARE_TOP: PORT_KBPS - RESERVE_KBPS, n.SHARE_WAITING: RESERVE_KBPS}[mode]
    return rate // load


def setup_updates(receiver: bool = True, back_routes: bool = True, clone_sessions: bool = True,
                  shares: bool = True) -> list[Update]:
    """What the controller installs on the ToR (as Scheduler.setup would)."""
    ups = [ins(route(0x0A000000, 24, SENDER_PORT)), ins(route(0x0A000100, 24, FABRIC_PORT)),
           ins(route(RECEIVER_IP, 32, RECEIVER_PORT)), ins(route(SECOND_RECEIVER_IP, 32, SECOND_RECEIVER_PORT))]
    if back_routes:
        ups.append(ins(back_route(0x0A000000, 24, SENDER_PORT)))
    if receiver:
        ups += [ins(entry(n.RECEIVER_PORT, {n.F_EGRESS_PORT: port}, n.ACT_MARK_RECEIVER))
                for port in (RECEIVER_PORT, SECOND_RECEIVER_PORT)]
    if clone_sessions:  # as Scheduler.setup writes them: session port + 1 -> port
        ups += [ins(CloneSession.for_port(port))
                for port in (SENDER_PORT, FABRIC_PORT, RECEIVER_PORT, SECOND_RECEIVER_PORT)]
    for prio, (lo, hi, q) in enumerate(CLASSES, start=1):
        ups.append(ins(entry(n.SLACK_CLASS, {n.F_SLACK_KEY: Range(slack_to_key(lo), slack_to_key(hi))},
                             n.ACT_SET_SLACK_CLASS, priority=prio, qclass=q)))
    if shares:
        ups += [ins(entry(n.PORT_SHARE, {n.F_EGRESS_PORT: port, n.F_LOAD: load, n.F_MODE: mode}, n.ACT_SET_SHARE,
                          rate_kbps=share_kbps(load, mode)))
                for port in (RECEIVER_PORT, SECOND_RECEIVER_PORT) for load in range(1, n.MAX_LOAD + 1)
                for mode in n.SHARE_MODES]
        ups.append(mod(default(n.SHARE_LEASE, n.ACT_SET_SHARE_LEASE, lease_us=SHARE_LEASE_US)))
    ups.append(mod(default(n.DEFAULT_GRANT, n.ACT_SET_DEFAULT_GRANT,
                           rate_kbps=DEFAULT_KBPS, lease_us=DEFAULT_LEASE_US, meter_slot=0)))
    return ups


def make_switch(receiver: bool = True, clock: Clock | None = None, back_routes: bool = True,
                clone_sessions: bool = True, shares: bool = True) -> tuple[PipelineModel, Clock]:
    clock = clock or Clock(1_000_000)
    sw = PipelineModel("tor1", clock)
    sw.write(setup_updates(receiver, back_routes, clone_sessions, shares))
    return sw, clock


def safs_pkt(t: MsgType, flow_id: int = 7, ts: int = 0, epoch: int = 0, size: int = 1500,
             src: int = SENDER_IP, dst: int = RECEIVER_IP, remaining: int = 10_000, dep_id: int = 1,
             rate_kbps: int = 0, flags: int = 0) -> Packet:
    p = Packet(src, dst, PROTO_UDP, 40000, SAFS_UDP_PORT, size, payload=max(0, size - 78))
    p.safs_version = SAFS_VERSION
    p.safs_type = int(t)
    p.flow_id = flow_id
    p.dep_id = dep_id
    p.ts = ts
    p.epoch = epoch
    p.rate_kbps = rate_kbps
    p.flags = flags
    p.remaining = remaining
    return p


def expected_class(slack_ns: int) -> int:
    for lo, hi, q in CLASSES:
        if lo <= slack_ns <= hi:
            return q
    raise AssertionError(slack_ns)


# ---------------------------------------------------------------------------- routing

def test_lpm_longest_prefix_wins_and_miss_drops() -> None:
    sw, _ = make_switch()
    p = Packet(SENDER_IP, RECEIVER_IP, PROTO_TCP, 1, 2, 1000)
    assert sw.ingress(p, SENDER_PORT) == [(RECEIVER_PORT, p)]
    p2 = Packet(SENDER_IP, OTHER_IP, PROTO_TCP, 1, 2, 1000)
    assert sw.ingress(p2, SENDER_PORT) == [(FABRIC_PORT, p2)]
    assert sw.ingress(Packet(SENDER_IP, 0x0B000001, PROTO_TCP, 1, 2, 1000), SENDER_PORT) == []
    assert p.priority == QUEUE_BEST_EFFORT


def ecmp_updates(ports: tuple[int, ...], group: int = 1) -> list[Update]:
    """Members (id = port), one group and its ecmp entry, and a route to OTHER_IP's /24 using it."""
    ups = [ins(ActionProfileMember(n.ECMP_SELECTOR, p, n.ACT_SET_EGRESS, {"port": p, "dst_mac": 0x020000000000 + p}))
           for p in ports]
    ups.append(ins(ActionProfileGroup(n.ECMP_SELECTOR, group, ports, max_size=len(ports))))
    ups.append(ins(TableEntry(n.ECMP, {n.F_ECMP_GROUP: group}, "", group_id=group)))
    ups.append(mod(entry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(0x0A000100, 24)}, n.ACT_SET_ECMP_GROUP, group=group)))
    return ups


def test_ecmp_picks_the_member_the_hash_predicts_for_every_flow() -> None:
    sw, _ = make_switch()
    ports = (FABRIC_PORT, 5, 6)
    sw.write(ecmp_updates(ports))
    seen = set()
    for sport in range(1000, 1100):
        p = Packet(SENDER_IP, OTHER_IP, PROTO_UDP, sport, SAFS_UDP_PORT, 1000)
        out = sw.ingress(p, SENDER_PORT)
        want = ecmp.select(ports, ecmp.flow_hash(SENDER_IP, OTHER_IP, PROTO_UDP, sport, SAFS_UDP_PORT))
        assert out == [(want, p)]
        seen.add(want)
    assert seen == set(ports)
    # Non-TCP/UDP packets hash with ports 0 (the parser leaves l4 ports 0).
    icmp = Packet(SENDER_IP, OTHER_IP, 1, 7, 9, 100)
    assert sw.ingress(icmp, SENDER_PORT)[0][0] == ecmp.select(ports, ecmp.flow_hash(SENDER_IP, OTHER_IP, 1, 0, 0))
    # Shrinking the group moves flows to the remaining members.
    sw.write([mod(ActionProfileGroup(n.ECMP_SELECTOR, 1, (5, 6), max_size=3))])
    assert {sw.ingress(Packet(SENDER_IP, OTHER_IP, PROTO_UDP, s, 1, 1), SENDER_PORT)[0][0]
            for s in range(50)} == {5, 6}


def test_ecmp_profile_errors_follow_p4runtime() -> None:
    sw, _ = make_switch()
    sw.write(ecmp_updates((5, 6)))
    cases = [
        (ins(ActionProfileMember(n.ECMP_SELECTOR, 5, n.ACT_SET_EGRESS, {"port": 5, "dst_mac": 1})), "ALREADY_EXISTS"),
        (Update(Op.DELETE, ActionProfileMember(n.ECMP_SELECTOR, 5, n.ACT_SET_EGRESS, {})), "FAILED_PRECONDITION"),
        (Update(Op.DELETE, ActionProfileGroup(n.ECMP_SELECTOR, 1, ())), "FAILED_PRECONDITION"),
        (ins(ActionProfileGroup(n.ECMP_SELECTOR, 2, (5, 9))), "NOT_FOUND"),
        (ins(ActionProfileGroup(n.ECMP_SELECTOR, 2, (5, 5))), "INVALID_ARGUMENT"),
        (ins(ActionProfileGroup(n.ECMP_SELECTOR, 2, (5, 6), max_size=1)), "INVALID_ARGUMENT"),
        (ins(ActionProfileMember(n.ECMP_SELECTOR, 7, n.ACT_DROP, {})), "INVALID_ARGUMENT"),
        (ins(ActionProfileMember("SafsIngress.other", 7, n.ACT_SET_EGRESS, {"port": 7, "dst_mac": 1})),
         "INVALID_ARGUMENT"),
        (ins(TableEntry(n.ECMP, {n.F_ECMP_GROUP: 3}, "", group_id=3)), "NOT_FOUND"),
        (ins(TableEntry(n.ECMP, {n.F_ECMP_GROUP: 3}, n.ACT_SET_EGRESS, {"port": 5, "dst_mac": 1})),
         "INVALID_ARGUMENT"),
    ]
    for upd, code in cases:
        with pytest.raises(TargetError) as err:
            sw.write([upd])
        assert err.value.failures[0].code == code, upd
    # A route whose group has no ecmp entry drops (set_ecmp_group marks the packet to drop).
    sw.write([mod(entry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(0x0A000100, 24)}, n.ACT_SET_ECMP_GROUP, group=9))])
    assert sw.ingress(Packet(SENDER_IP, OTHER_IP, PROTO_UDP, 1, 2, 100), SENDER_PORT) == []


def test_route_change_invalidates_cache_and_drop_action() -> None:
    sw, _ = make_switch()
    p = Packet(SENDER_IP, RECEIVER_IP, PROTO_TCP, 1, 2, 1000)
    assert sw.ingress(p, 1)[0][0] == RECEIVER_PORT
    sw.write([Update(Op.DELETE, route(RECEIVER_IP, 32, RECEIVER_PORT))])
    assert sw.ingress(p, 1)[0][0] == FABRIC_PORT
    sw.write([ins(entry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(RECEIVER_IP, 32)}, n.ACT_DROP))])
    assert sw.ingress(p, 1) == []


# ---------------------------------------------------------------------------- slack classes

@settings(max_examples=200, deadline=None)
@given(slack=st.integers(min_value=-(1 << 46), max_value=(1 << 46)),
       now=st.integers(min_value=0, max_value=TIME_MASK),
       offset=st.integers(min_value=0, max_value=TIME_MASK))
def test_data_class_follows_slack_with_wraparound(slack: int, now: int, offset: int) -> None:
    clock = Clock(now)
    sw, _ = make_switch(receiver=False, clock=clock)
    sw.set_clock_offset(offset)
    fabric_now = wrap(now + offset)
    p = safs_pkt(MsgType.DATA, ts=wrap(fabric_now + slack), dst=OTHER_IP)
    out = sw.ingress(p, SENDER_PORT)
    assert out == [(FABRIC_PORT, p)]
    assert p.qclass == expected_class(slack)
    assert p.priority == p.qclass
    assert p.color == Color.UNMETERED


def test_control_packets_priority_7_and_non_safs_0() -> None:
    sw, _ = make_switch()
    for t in (MsgType.GRANT, MsgType.DONE):
        p = safs_pkt(t)
        assert sw.ingress(p, SENDER_PORT) == [(RECEIVER_PORT, p)]
        assert p.priority == QUEUE_CONTROL
    p = safs_pkt(MsgType.REQUEST, dst=OTHER_IP)  # not at the receiver's ToR: just forwarded
    assert sw.ingress(p, SENDER_PORT) == [(FABRIC_PORT, p)]
    assert p.priority == QUEUE_CONTROL and p.safs_type == MsgType.REQUEST
    assert sw.poll_digests() == []


# ---------------------------------------------------------------------------- meters

def install_dep(sw: PipelineModel, dep_id: int, slot: int, epoch: int, cir: int, cburst: int,
                pir: int, pburst: int) -> int:
    """A fixed grant at the meter's committed rate; returns that rate in kbit/s (what the
    sender holds, so its DATA pushes no GRANT)."""
    kbps = cir * 8 // 1000
    sw.write([ins(fixed_grant(dep_id, kbps, epoch, 500, slot)),
              mod(MeterConfig(n.DEP_METER, slot, cir=cir, cburst=cburst, pir=pir, pburst=pburst))])
    return kbps


def test_meter_burst_green_then_yellow_then_red_never_dropped() -> None:
    sw, clock = make_switch()
    kbps = install_dep(sw, 1, slot=5, epoch=1, cir=1_000_000, cburst=3000, pir=1_250_000, pburst=4500)
    colors, prios = [], []
    for _ in range(4):  # back-to-back at one instant: only the buckets' depth counts
        p = safs_pkt(MsgType.DATA, epoch=1, rate_kbps=kbps, ts=wrap(clock.t + 10**9))
        out = sw.ingress(p, SENDER_PORT)
        assert out == [(RECEIVER_PORT, p)]  # never dropped
        colors.append(p.color)
        prios.append(p.priority)
    assert colors == [Color.GREEN, Color.GREEN, Color.YELLOW, Color.RED]
    assert prios[:2] == [2, 2] and prios[2:] == [QUEUE_OVER_RATE, QUEUE_OVER_RATE]
    clock.t += 1_500_000  # 1.5 ms at 1 MB/s refills 1500 bytes of the committed bucket
    p = safs_pkt(MsgType.DATA, epoch=1, rate_kbps=kbps, ts=wrap(clock.t + 10**9))
    sw.ingress(p, SENDER_PORT)
    assert p.color == Color.GREEN


@settings(max_examples=30, deadline=None)
@given(rate_factor=st.integers(min_value=2, max_value=20), cir=st.integers(1_000_000, 100_000_000))
def test_meter_far_above_rate_green_bytes_bounded_by_cir(rate_factor: int, cir: int) -> None:
    sw, clock = make_switch()
    cburst = 3000
    kbps = install_dep(sw, 1, slot=9, epoch=1, cir=cir, cburst=cburst, pir=cir + cir // 10, pburst=4500)
    gap_ns = 1500 * 10**9 // (cir * rate_factor)  # packets arrive rate_factor times too fast
    start = clock.t
    green = 0
    for _ in range(400):
        clock.t += gap_ns
        p = safs_pkt(MsgType.DATA, epoch=1, rate_kbps=kbps)
        assert len(sw.ingress(p, SENDER_PORT)) == 1
        if p.color == Color.GREEN:
            green += p.size
        else:
            assert p.priority == QUEUE_OVER_RATE
    elapsed = clock.t - start
    allowed = cburst + cir * elapsed // 10**9
    assert green <= allowed
    assert green >= allowed - 2 * 1500 - cburst  # the meter does let the committed rate through


def test_unconfigured_meter_is_green_and_default_slot_meters_unknown_dependencies() -> None:
    sw, _ = make_switch()
    sw.write([ins(fixed_grant(8, 1000, 1, 500, slot=77))])  # slot 77 never configured
    for i in range(50):  # several transfers of dependency 8: one grant, one slot
        p = safs_pkt(MsgType.DATA, flow_id=100 + i % 5, dep_id=8, epoch=1, rate_kbps=1000)
        sw.ingress(p, SENDER_PORT)
        assert p.color == Color.GREEN
    sw.write([mod(MeterConfig(n.DEP_METER, 0, cir=1000, cburst=1500, pir=1000, pburst=1500))])
    seen = []
    for _ in range(3):
        p = safs_pkt(MsgType.DATA, flow_id=8, dep_id=99)  # no dep_grant entry -> default slot 0
        sw.ingress(p, SENDER_PORT)
        seen.append(p.color)
    assert seen[0] == Color.GREEN and Color.RED in seen[1:]
    assert sw.read_counter(n.DEP_BYTES, 0).packet_count == 3
    assert sw.read_counter(n.DEP_BYTES, 77).packet_count == 50
    assert sw.read_counter(n.DEP_BYTES, 77).byte_count == 50 * 1500


def test_grant_is_keyed_by_sender_address_and_dep_id() -> None:
    sw, _ = make_switch()
    other, unknown = 0x0A000009, 0x0A00000A
    sw.write([ins(fixed_grant(8, 2_000, 3, 700, slot=5)), ins(fixed_grant(8, 4_000, 6, 900, slot=6, src=other))])
    for src, want in ((SENDER_IP, (2_000, 3, 700)), (other, (4_000, 6, 900)), (unknown, (DEFAULT_KBPS, 0, 500))):
        g = safs_pkt(MsgType.REQUEST, dep_id=8, src=src)
        sw.ingress(g, SENDER_PORT)
        assert (g.rate_kbps, g.epoch, g.lease_us) == want
    assert [(d.src_addr, d.dep_id) for d in sw.poll_digests()] == [(unknown, 8)]


def test_metering_only_at_receiver_tor() -> None:
    sw, _ = make_switch(receiver=False)
    sw.write([ins(share_grant(2, slot=6))])
    kbps = install_dep(sw, 1, slot=5, epoch=1, cir=1, cburst=1, pir=1, pburst=1)
    p = safs_pkt(MsgType.DATA, epoch=1, rate_kbps=kbps)
    assert sw.ingress(p, SENDER_PORT) == [(RECEIVER_PORT, p)]
    assert p.color == Color.UNMETERED and p.priority == p.qclass
    assert sw.read_counter(n.DEP_BYTES, 5).packet_count == 0
    sw.ingress(safs_pkt(MsgType.DATA, dep_id=2), SENDER_PORT)  # a share grant: nothing counted here
    assert sw.read_register(n.DEP_CLASS, 6) == 0 and counts(sw) == [0] * 5


# ---------------------------------------------------------------------------- grants, digests

def test_request_with_installed_grant_becomes_grant_without_digest() -> None:
    sw, clock = make_switch()
    sw.set_clock_offset(5_000)
    sw.write([ins(fixed_grant(1, 2_500_000, 4, 800, slot=3))])
    p = safs_pkt(MsgType.REQUEST, ts=123, size=CONTROL_PACKET_BYTES)
    out = sw.ingress(p, SENDER_PORT)
    assert out == [(SENDER_PORT, p)]
    # addresses swapped; UDP ports kept, so the GRANT still goes to the SAFS port (as in P4)
    assert (p.safs_type, p.src, p.dst, p.sport, p.dport) == (
        MsgType.GRANT, RECEIVER_IP, SENDER_IP, 40000, SAFS_UDP_PORT)
    assert (p.rate_kbps, p.epoch, p.lease_us, p.priority) == (2_500_000, 4, 800, QUEUE_CONTROL)
    assert (p.qclass, p.color, p.dep_id, p.flow_id) == (QUEUE_CONTROL, Color.UNMETERED, 1, 7)
    assert p.ts == wrap(clock.t + 5_000)
    assert sw.poll_digests() == []


def test_request_of_unknown_dependency_gets_default_grant_and_one_digest() -> None:
    sw, _ = make_switch()
    p = safs_pkt(MsgType.REQUEST, flow_id=42, dep_id=17, ts=777, remaining=9_999)
    assert sw.ingress(p, SENDER_PORT) == [(SENDER_PORT, p)]
    assert (p.safs_type, p.rate_kbps, p.epoch, p.lease_us) == (MsgType.GRANT, DEFAULT_KBPS, 0, DEFAULT_LEASE_US)
    # the digest names the dependency and carries the transfer's latest start as sent
    assert sw.poll_digests() == [RequestDigest(42, SENDER_IP, RECEIVER_IP, 17, 9_999, 777)]
    assert sw.poll_digests() == []  # cleared


def test_request_of_a_known_share_dependency_is_granted_by_the_switch_alone() -> None:
    sw, clock = make_switch()
    sw.write([ins(share_grant(5, slot=9))])
    p = safs_pkt(MsgType.REQUEST, dep_id=5, ts=wrap(sw.now() + SLACK_NS[2]))
    assert sw.ingress(p, SENDER_PORT) == [(SENDER_PORT, p)]
    assert (p.safs_type, p.rate_kbps, p.epoch, p.lease_us) == (MsgType.GRANT, share_kbps(1), 1, SHARE_LEASE_US)
    assert sw.poll_digests() == []
    assert sw.read_register(n.DEP_CLASS, 9) == 5  # a REQUEST counts the dependency as active (urgency 4)
    assert counts(sw) == [0, 0, 0, 0, 1]


# Share grants: the receiver's ToR shares the port among its active dependencies.

def share_deps(sw: PipelineModel, count: int, first_slot: int = 1) -> None:
    """Dependencies 1..count of SENDER_IP with share grants in slots first_slot.."""
    sw.write([ins(share_grant(d, slot=first_slot + d - 1)) for d in range(1, count + 1)])


def ask(sw: PipelineModel, dep_id: int, qclass: int = 2, flags: int = 0,
        dst: int = RECEIVER_IP) -> tuple[int, int, int]:
    """The (rate_kbps, epoch, lease_us) a REQUEST of ``dep_id`` in slack class ``qclass`` gets."""
    g = safs_pkt(MsgType.REQUEST, dep_id=dep_id, ts=wrap(sw.now() + SLACK_NS[qclass]), flags=flags, dst=dst)
    out = sw.ingress(g, SENDER_PORT)
    assert out == [(SENDER_PORT, g)] and g.safs_type == MsgType.GRANT
    return g.rate_kbps, g.epoch, g.lease_us


def data(sw: PipelineModel, dep_id: int, qclass: int = 2, flags: int = 0, rate_kbps: int = 0, epoch: int = 0,
         dst: int = RECEIVER_IP, flow_id: int = 7) -> list[tuple[int, Packet]]:
    """Ingress of a DATA of ``dep_id``'s transfer ``flow_id`` in slack class ``qclass``, holding
    ``rate_kbps``/``epoch``."""
    p = safs_pkt(MsgType.DATA, dep_id=dep_id, ts=wrap(sw.now() + SLACK_NS[qclass]), flags=flags,
                 rate_kbps=rate_kbps, epoch=epoch, dst=dst, flow_id=flow_id)
    return sw.ingress(p, SENDER_PORT)


def counts(sw: PipelineModel, port: int = RECEIVER_PORT) -> list[int]:
    """Active dependencies per urgency 0..4 at ``port`` (class_load_0..4)."""
    return [sw.read_register(r, port) for r in n.CLASS_LOADS]


def test_two_dependencies_in_one_class_each_get_half_the_port() -> None:
    sw, _ = make_switch()
    share_deps(sw, 2)
    assert ask(sw, 1) == (share_kbps(1), 1, SHARE_LEASE_US)  # alone: the whole port
    assert ask(sw, 2) == (share_kbps(2), 2, SHARE_LEASE_US)  # a second one: half each
    assert ask(sw, 1) == (share_kbps(2), 2, SHARE_LEASE_US)  # the same counts: the same epoch
    assert 2 * share_kbps(2) <= PORT_KBPS
    assert [sw.read_register(n.DEP_CLASS, s) for s in (1, 2)] == [5, 5]
    assert counts(sw) == [0, 0, 0, 0, 2] and counts(sw, SECOND_RECEIVER_PORT) == [0] * 5


def test_a_more_urgent_dependency_takes_the_port_and_the_others_wait_on_the_reserve() -> None:
    sw, _ = make_switch()
    share_deps(sw, 3)
    ask(sw, 1, qclass=2)
    ask(sw, 2, qclass=3)
    assert ask(sw, 3, qclass=6) == (share_kbps(1, n.SHARE_TOP), 3, SHARE_LEASE_US)  # late: top, others wait
    assert counts(sw) == [1, 0, 0, 1, 1]
    assert ask(sw, 1, qclass=2)[0] == share_kbps(2, n.SHARE_WAITING)  # the reserve, split among the two waiting
    assert ask(sw, 2, qclass=3)[0] == share_kbps(2, n.SHARE_WAITING)
    assert share_kbps(1, n.SHARE_TOP) + 2 * share_kbps(2, n.SHARE_WAITING) <= PORT_KBPS
    rate, epoch, _ = ask(sw, 2, qclass=6)  # its slack ran out: it shares the top class
    assert (rate, epoch) == (share_kbps(2, n.SHARE_TOP), 4) and counts(sw) == [2, 0, 0, 0, 1]


def test_background_counts_as_least_urgent_whatever_its_slack() -> None:
    sw, _ = make_switch()
    share_deps(sw, 2)
    ask(sw, 1, qclass=6, flags=FLAG_BACKGROUND)
    assert sw.read_register(n.DEP_CLASS, 1) == 5
    assert ask(sw, 2, qclass=4) == (share_kbps(1, n.SHARE_TOP), 2, SHARE_LEASE_US)
    assert ask(sw, 1, qclass=6, flags=FLAG_BACKGROUND)[0] == share_kbps(1, n.SHARE_WAITING)


def test_last_makes_a_dependency_idle_and_the_waiting_one_gets_the_port() -> None:
    sw, _ = make_switch()
    share_deps(sw, 2)
    ask(sw, 1, qclass=6)
    _, gen, _ = ask(sw, 2)
    out = data(sw, 1, qclass=6, flags=FLAG_LAST)  # its last packet: no push, idle
    assert len(out) == 1 and out[0][1].safs_type == MsgType.DATA
    assert sw.read_register(n.DEP_CLASS, 1) == 0 and counts(sw) == [0, 0, 0, 0, 1]
    assert ask(sw, 2) == (share_kbps(1), gen + 1, SHARE_LEASE_US)  # alone again: the whole port
    data(sw, 1, qclass=6, flags=FLAG_LAST)  # a duplicate LAST: nothing more to remove
    assert counts(sw) == [0, 0, 0, 0, 1]
    assert ask(sw, 1, qclass=6)[0] == share_kbps(1, n.SHARE_TOP)  # its next transfer counts again


def test_a_straggler_after_its_transfers_last_changes_nothing() -> None:
    """A DATA of a transfer whose LAST passed (overtaken, so late by now) neither counts the
    dependency again nor moves it out of its next transfer's class, and gets no GRANT."""
    sw, _ = make_switch()
    share_deps(sw, 2)
    ask(sw, 2)
    data(sw, 1, flow_id=11)
    _, gen, _ = ask(sw, 2)
    data(sw, 1, flags=FLAG_LAST, flow_id=11)
    assert counts(sw) == [0, 0, 0, 0, 1] and sw.read_register(n.DEP_ENDED, 1) == 11
    out = data(sw, 1, qclass=6, flow_id=11, rate_kbps=1)  # far off its share: a push if it counted
    assert len(out) == 1 and out[0][1].safs_type == MsgType.DATA
    assert counts(sw) == [0, 0, 0, 0, 1] and sw.read_register(n.DEP_CLASS, 1) == 0
    assert ask(sw, 2) == (share_kbps(1), gen + 1, SHARE_LEASE_US)  # B alone: one change (A's LAST)
    data(sw, 1, flow_id=12)  # A's next transfer counts
    data(sw, 1, qclass=6, flow_id=11)  # a straggler of the ended one: still urgency 4
    assert counts(sw) == [0, 0, 0, 0, 2] and sw.read_register(n.DEP_CLASS, 1) == 5
    data(sw, 1, flags=FLAG_LAST, flow_id=12)
    assert counts(sw) == [0, 0, 0, 0, 1] and sw.read_register(n.DEP_ENDED, 1) == 12
    # Retransmissions after LAST (RESENT) count as before, and their own LAST ends them again.
    data(sw, 1, qclass=6, flow_id=12, flags=FLAG_RESENT)
    assert counts(sw) == [1, 0, 0, 0, 1] and sw.read_register(n.DEP_CLASS, 1) == 1
    data(sw, 1, qclass=6, flow_id=12, flags=FLAG_RESENT | FLAG_LAST)
    assert counts(sw) == [0, 0, 0, 0, 1] and sw.read_register(n.DEP_CLASS, 1) == 0


def test_counts_never_go_below_zero() -> None:
    """The entry is keyed by sender and dep_id, not by port: a dependency counted at one port
    whose LAST arrives for another (or after a restart zeroed the counts) removes nothing there."""
    sw, _ = make_switch()
    share_deps(sw, 1)
    ask(sw, 1, qclass=6)  # counted at RECEIVER_PORT, urgency 0
    data(sw, 1, flags=FLAG_LAST, dst=SECOND_RECEIVER_IP)
    assert counts(sw, SECOND_RECEIVER_PORT) == [0] * 5
    assert counts(sw) == [1, 0, 0, 0, 0]  # left counted at RECEIVER_PORT until it goes idle there
    assert sw.read_register(n.DEP_CLASS, 1) == 0


def test_generation_grows_only_when_a_count_changes_and_skips_zero() -> None:
    sw, _ = make_switch()
    share_deps(sw, 3)
    gens = [sw.read_register(n.PORT_GEN, RECEIVER_PORT)]
    for dep_id, qclass in ((1, 2), (1, 2), (2, 4), (2, 4), (1, 6), (3, 3)):
        ask(sw, dep_id, qclass)
        gens.append(sw.read_register(n.PORT_GEN, RECEIVER_PORT))
    assert gens == [0, 1, 1, 2, 2, 3, 4]  # repeats in the same class leave counts and generation alone


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from([6, 5, 4, 3, 2]), st.booleans(), st.booleans(),
                          st.booleans()), max_size=40))
def test_class_counts_are_the_dependencies_held_and_rates_follow_the_most_urgent_class(seq) -> None:
    sw, _ = make_switch()
    share_deps(sw, 4)
    held = {d: 0 for d in range(1, 5)}
    gen = 0
    for step, (dep_id, qclass, is_data, last, background) in enumerate(seq):
        flags = (FLAG_LAST if last else 0) | (FLAG_BACKGROUND if background else 0)
        before = counts(sw)
        if is_data:  # each DATA of its own transfer (a straggler after LAST: the test above)
            data(sw, dep_id, qclass, flags=flags, flow_id=100 + step)
        else:
            rate, _, _ = ask(sw, dep_id, qclass, flags=flags)  # LAST means nothing on a REQUEST
        urgency = 4 if background else 6 - qclass
        held[dep_id] = 0 if (is_data and last) else urgency + 1
        want = [sum(1 for c in held.values() if c == u + 1) for u in range(5)]
        assert counts(sw) == want
        assert [sw.read_register(n.DEP_CLASS, d) for d in range(1, 5)] == [held[d] for d in range(1, 5)]
        gen += want != before
        assert sw.read_register(n.PORT_GEN, RECEIVER_PORT) == gen
        if not is_data:
            top = next(u for u in range(5) if want[u])
            rest = sum(want) - want[top]
            if urgency == top:
                assert rate == share_kbps(want[top], n.SHARE_TOP if rest else n.SHARE_ALONE)
            else:
                assert rate == share_kbps(rest, n.SHARE_WAITING)


def test_load_above_max_load_gets_the_default_grant_until_it_falls() -> None:
    sw, _ = make_switch()
    count = n.MAX_LOAD + 1
    share_deps(sw, count)
    for d in range(1, count):
        rate, epoch, _ = ask(sw, d, qclass=6)
        assert rate == share_kbps(d) and epoch > 0
    assert ask(sw, count, qclass=6) == (DEFAULT_KBPS, 0, DEFAULT_LEASE_US)  # MAX_LOAD + 1: no port_share entry
    assert counts(sw)[0] == n.MAX_LOAD + 1  # counted all the same
    assert ask(sw, 1, qclass=6)[1] == 0  # the others of the class too, while the count stays above MAX_LOAD
    data(sw, count, qclass=6, flags=FLAG_LAST)
    rate, epoch, lease = ask(sw, 1, qclass=6)
    assert (rate, lease) == (share_kbps(n.MAX_LOAD), SHARE_LEASE_US) and epoch > 0


def test_restart_zeroes_registers_and_the_next_data_readmits() -> None:
    sw, _ = make_switch()
    share_deps(sw, 2)
    ask(sw, 1, qclass=6)
    ask(sw, 2, qclass=4)
    assert counts(sw) == [1, 0, 1, 0, 0]
    sw.restart()
    assert [sw.read_register(n.DEP_CLASS, i) for i in (1, 2)] == [0, 0]
    assert counts(sw) == [0] * 5 and sw.read_register(n.PORT_GEN, RECEIVER_PORT) == 0
    assert sw.entries(n.DEP_GRANT) == [] and sw.entries(n.PORT_SHARE) == []  # the tables are gone too
    sw.write(setup_updates())  # the controller re-installs (Scheduler.reinstall)
    share_deps(sw, 2)
    out = data(sw, 2, qclass=4)  # dependency 1 was idle at the restart: not counted until its next packet
    assert counts(sw) == [0, 0, 1, 0, 0]
    assert sw.read_register(n.PORT_GEN, RECEIVER_PORT) == 1
    (_, g), = [o for o in out if o[1].safs_type == MsgType.GRANT]
    assert (g.rate_kbps, g.epoch) == (share_kbps(1), 1)


def test_read_register_names_and_range() -> None:
    sw, _ = make_switch()
    with pytest.raises(InvalidInput) as e:
        sw.read_register("SafsIngress.nope", 0)
    assert e.value.field == "register" and n.CLASS_LOADS[0] in e.value.message
    with pytest.raises(InvalidInput) as e:
        sw.read_register(n.DEP_CLASS, n.DEP_SLOTS)
    assert e.value.field == "index"
    assert sw.read_register(n.PORT_GEN, n.NUM_PORTS - 1) == 0


# In-band pushes: a DATA whose held rate is off the grant's gets a fresh GRANT.

@pytest.mark.parametrize("held, pushes", [
    (31_000, False),  # 1/32 of the grant's 32,000 kbit/s below it: close enough
    (30_999, True),  # more than 1/32 below: the sender may speed up (its deadline)
    (32_000, False),
    (32_125, False),  # 1/256 above: close enough
    (32_126, True),  # more than 1/256 above: the sender must slow down (capacity, 1% headroom)
    (34_000, True),  # 1/16 above (tolerated before the headroom went to 1%)
    (0, True),
    ((1 << 32) - 1, True),  # the largest held rate: no overflow in the comparison
])
def test_push_when_the_held_rate_is_off_by_more_than_1_32_below_or_1_256_above(held: int, pushes: bool) -> None:
    sw, clock = make_switch()
    sw.write([ins(fixed_grant(1, 32_000, 2, 900, slot=4))])
    p = safs_pkt(MsgType.DATA, epoch=2, rate_kbps=held, ts=wrap(clock.t + 10**6), remaining=4242)
    out = sw.ingress(p, SENDER_PORT)
    assert out[0] == (RECEIVER_PORT, p) and p.safs_type == MsgType.DATA
    assert len(out) == (2 if pushes else 1)
    if pushes:
        port, g = out[1]
        assert port == SENDER_PORT and g is not p
        assert (g.safs_type, g.src, g.dst, g.flow_id, g.dep_id) == (MsgType.GRANT, RECEIVER_IP, SENDER_IP, 7, 1)
        assert (g.sport, g.dport, g.color) == (SAFS_UDP_PORT, SAFS_UDP_PORT, Color.UNMETERED)
        assert (g.rate_kbps, g.epoch, g.lease_us, g.priority) == (32_000, 2, 900, QUEUE_CONTROL)
        assert g.size == CONTROL_PACKET_BYTES and g.remaining == 4242
    assert sw.poll_digests() == []


@pytest.mark.parametrize("epoch, flags, pushes", [
    (0, 0, True),  # holds the default grant: push
    (2, FLAG_RENEW, True),  # asks for a renewal: push
    (2, 0, False),  # holds the grant: nothing
    (0, FLAG_LAST, False),  # never for the last packet
    (2, FLAG_RENEW | FLAG_LAST, False),
    (1, 0, False),  # a held epoch other than the installed one, at its rate: the rate decides
])
def test_push_on_epoch_0_or_renew_but_never_for_last(epoch: int, flags: int, pushes: bool) -> None:
    sw, _ = make_switch()
    sw.write([ins(fixed_grant(1, 32_000, 2, 900, slot=4))])
    out = sw.ingress(safs_pkt(MsgType.DATA, epoch=epoch, rate_kbps=32_000, flags=flags), SENDER_PORT)
    assert len(out) == (2 if pushes else 1)
    if pushes:
        assert (out[1][1].rate_kbps, out[1][1].epoch, out[1][1].flags) == (32_000, 2, flags)  # flags echoed


def test_a_share_change_is_pushed_in_band_to_a_sender_of_the_old_share() -> None:
    sw, _ = make_switch()
    share_deps(sw, 2)
    rate, epoch, _ = ask(sw, 1)
    assert len(data(sw, 1, rate_kbps=rate, epoch=epoch)) == 1  # holds its share: nothing to push
    ask(sw, 2)  # a second dependency becomes active: the share halves
    out = data(sw, 1, rate_kbps=rate, epoch=epoch)
    assert [g.safs_type for _, g in out] == [MsgType.DATA, MsgType.GRANT]
    assert (out[1][1].rate_kbps, out[1][1].epoch) == (share_kbps(2), epoch + 1)


def stale_data(sw: PipelineModel, clock: Clock) -> list:
    """Ingress of a DATA of dependency 1 holding epoch 0 while a grant is installed (a push)."""
    sw.write([ins(fixed_grant(1, 3_000_000, 5, 900, slot=4))])
    return sw.ingress(safs_pkt(MsgType.DATA, epoch=0, ts=wrap(clock.t + 10**6)), SENDER_PORT)


def test_pushed_grant_needs_the_clone_session_of_its_port() -> None:
    sw, clock = make_switch(clone_sessions=False)
    assert [port for port, _ in stale_data(sw, clock)] == [RECEIVER_PORT]  # BMv2: clone to nothing
    # a session for another port does not help: the clone goes to session grant port + 1
    sw.write([ins(CloneSession.for_port(FABRIC_PORT))])
    assert [port for port, _ in sw.ingress(safs_pkt(MsgType.DATA), SENDER_PORT)] == [RECEIVER_PORT]
    sw.write([ins(CloneSession.for_port(SENDER_PORT))])
    out = sw.ingress(safs_pkt(MsgType.DATA), SENDER_PORT)
    assert [(port, g.safs_type) for port, g in out] == [(RECEIVER_PORT, MsgType.DATA), (SENDER_PORT, MsgType.GRANT)]
    # the clone leaves on the session's replica port, as BMv2 sends it
    sw.write([mod(CloneSession(SENDER_PORT + n.CLONE_SESSION_BASE, FABRIC_PORT))])
    out = sw.ingress(safs_pkt(MsgType.DATA), SENDER_PORT)
    assert [(port, g.safs_type) for port, g in out] == [(RECEIVER_PORT, MsgType.DATA), (FABRIC_PORT, MsgType.GRANT)]
    sw.write([Update(Op.DELETE, CloneSession(SENDER_PORT + n.CLONE_SESSION_BASE, 0))])
    assert len(sw.ingress(safs_pkt(MsgType.DATA), SENDER_PORT)) == 1
    assert sw.clone_sessions() == [CloneSession.for_port(FABRIC_PORT)]


def test_clone_session_op_codes_and_ranges() -> None:
    sw, _ = make_switch(clone_sessions=False)
    batch = [
        ins(CloneSession(2, 1)),                                # 0 ok
        ins(CloneSession(2, 4)),                                # 1 ALREADY_EXISTS
        mod(CloneSession(9, 8)),                                # 2 NOT_FOUND
        Update(Op.DELETE, CloneSession(9, 8)),                  # 3 NOT_FOUND
        ins(CloneSession(0, 1)),                                # 4 session 0
        ins(CloneSession(CLONE_SESSION_ID_MAX + 1, 1)),         # 5 session id too large
        ins(CloneSession(5, n.NUM_PORTS)),                      # 6 port beyond 9 bits
        ins(CloneSession(6, -1)),                               # 7 negative port
        mod(CloneSession(2, 7)),                                # 8 ok
        ins(CloneSession(CLONE_SESSION_ID_MAX, n.NUM_PORTS - 1)),  # 9 ok (both limits)
    ]
    with pytest.raises(TargetError) as err:
        sw.write(batch)
    codes = {f.index: f.code for f in err.value.failures}
    assert codes == {1: "ALREADY_EXISTS", 2: "NOT_FOUND", 3: "NOT_FOUND",
                     **{i: "INVALID_ARGUMENT" for i in range(4, 8)}}
    assert sw.clone_sessions() == [CloneSession(2, 7), CloneSession(CLONE_SESSION_ID_MAX, n.NUM_PORTS - 1)]


def test_no_route_back_means_no_grant_no_digest() -> None:
    sw, clock = make_switch(back_routes=False)
    sw.write([ins(fixed_grant(1, 3_000_000, 5, 900, slot=4))])
    p = safs_pkt(MsgType.REQUEST, dep_id=8)
    assert sw.ingress(p, SENDER_PORT) == [(RECEIVER_PORT, p)]  # delivered to the host as is
    assert p.safs_type == MsgType.REQUEST and p.priority == QUEUE_CONTROL
    assert sw.poll_digests() == []
    assert len(sw.ingress(safs_pkt(MsgType.DATA, epoch=0), SENDER_PORT)) == 1


def test_data_without_entry_never_pushes_grant() -> None:
    sw, _ = make_switch()
    assert len(sw.ingress(safs_pkt(MsgType.DATA, dep_id=5, epoch=0), SENDER_PORT)) == 1
    assert len(sw.ingress(safs_pkt(MsgType.DATA, dep_id=5, epoch=0, flags=FLAG_RENEW), SENDER_PORT)) == 1
    assert sw.poll_digests() == []  # DATA is never digested, only REQUESTs


# ---------------------------------------------------------------------------- egress

@pytest.mark.parametrize("ecn", [ECN_ECT0, ECN_ECT1, ECN_NOT_ECT, ECN_CE])
@pytest.mark.parametrize("safs", [False, True])
def test_ecn_marking_threshold(ecn: int, safs: bool) -> None:
    sw, _ = make_switch()
    sw.write([mod(default(n.ECN_THRESHOLD, n.ACT_SET_ECN_THRESHOLD, qdepth_pkts=20))])
    for depth, over in ((20, False), (21, True)):
        p = safs_pkt(MsgType.DATA) if safs else Packet(SENDER_IP, RECEIVER_IP, PROTO_TCP, 1, 2, 1500)
        p.ecn = ecn
        sw.egress(p, RECEIVER_PORT, depth)
        ect = ecn in (ECN_ECT0, ECN_ECT1)
        assert p.ecn == (ECN_CE if ect and over else ecn)
    marked = sw.read_counter(n.ECN_MARKED, RECEIVER_PORT).packet_count
    assert marked == (1 if ecn in (ECN_ECT0, ECN_ECT1) else 0)
    assert sw.read_counter(n.ECN_MARKED, RECEIVER_PORT).byte_count == 0  # packets counter


def test_qdepth_stamp_and_port_counters() -> None:
    sw, _ = make_switch()
    depths = [0, 1, 2, 3, 6, 7, 100, 70_000]
    for d in depths:
        p = safs_pkt(MsgType.DATA, size=1000)
        sw.egress(p, 9, d)
        assert p.qdepth == min(d, QDEPTH_MAX)
    tcp = Packet(SENDER_IP, RECEIVER_IP, PROTO_TCP, 1, 2, 500)
    sw.egress(tcp, 9, 5)
    assert tcp.qdepth == 0
    tx = sw.read_counter(n.PORT_TX_BYTES, 9)
    assert (tx.byte_count, tx.packet_count) == (1000 * len(depths) + 500, len(depths) + 1)
    # histogram buckets: b such that depth in [2^b - 1, 2^(b+1) - 1), last one open-ended
    for d in depths + [5]:
        b = qdepth_bucket(d)
        assert b == n.QDEPTH_BUCKETS - 1 or (2 ** b - 1) <= d < 2 ** (b + 1) - 1
    counts = [sw.read_counter(n.QDEPTH_HIST, 9 * n.QDEPTH_BUCKETS + b).packet_count
              for b in range(n.QDEPTH_BUCKETS)]
    want = [0] * n.QDEPTH_BUCKETS
    for d in depths + [5]:
        want[qdepth_bucket(d)] += 1
    assert counts == want and sum(counts) == len(depths) + 1


@pytest.mark.parametrize("mutate, index", [
    (lambda p: setattr(p, "safs_truncated", True), 0),
    (lambda p: setattr(p, "safs_version", 1), 1),  # version 1, the per-transfer protocol, is malformed now
    (lambda p: setattr(p, "safs_type", 9), 2),
])
def test_malformed_safs_forwarded_as_best_effort_and_counted(mutate, index: int) -> None:
    sw, _ = make_switch()
    sw.write([ins(fixed_grant(1, 1, 5, 1, slot=2)), ins(share_grant(2, slot=3))])
    shared = safs_pkt(MsgType.DATA, dep_id=2)
    mutate(shared)
    sw.ingress(shared, SENDER_PORT)
    assert counts(sw) == [0] * 5  # no share counted either
    p = safs_pkt(MsgType.REQUEST)
    mutate(p)
    assert sw.ingress(p, SENDER_PORT) == [(RECEIVER_PORT, p)]
    assert p.priority == QUEUE_BEST_EFFORT and p.dst == RECEIVER_IP  # not turned into a GRANT
    assert sw.poll_digests() == []
    cells = [sw.read_counter(n.MALFORMED, i).packet_count for i in range(3)]
    assert cells == [2 if i == index else 0 for i in range(3)]
    sw.egress(p, RECEIVER_PORT, 9)
    assert p.qdepth == 0
    lost = safs_pkt(MsgType.DATA, dst=0x0B000001)  # counted before forwarding, then dropped
    mutate(lost)
    assert sw.ingress(lost, SENDER_PORT) == []
    assert sw.read_counter(n.MALFORMED, index).packet_count == 3


# ---------------------------------------------------------------------------- control plane

def test_p4runtime_error_codes_and_partial_batch() -> None:
    sw, _ = make_switch()
    good = fixed_grant(11, 1, 1, 1, 1)
    key = {n.F_SRC_ADDR: SENDER_IP, n.F_DEP_ID: 15}
    batch = [
        ins(good),                                                         # 0 ok
        ins(good),                                                         # 1 ALREADY_EXISTS
        mod(fixed_grant(12, 1, 1, 1, 1)),                                  # 2 NOT_FOUND
        Update(Op.DELETE, fixed_grant(13, 1, 1, 1, 1)),                    # 3 NOT_FOUND
        Update(Op.INSERT, MeterConfig(n.DEP_METER, 1, 1, 1, 1, 1)),        # 4 INVALID_ARGUMENT
        Update(Op.DELETE, MeterConfig(n.DEP_METER, 1, 1, 1, 1, 1)),        # 5 INVALID_ARGUMENT
        ins(entry("SafsIngress.nope", key, n.ACT_SET_SHARE_GRANT, meter_slot=1)),  # 6 unknown table
        ins(entry(n.DEP_GRANT, key, "SafsIngress.nope")),                  # 7 unknown action
        ins(entry(n.DEP_GRANT, key, n.ACT_SET_FIXED_GRANT, rate_kbps=1, epoch=1,
                  lease_us=1, meter_slot=1, bogus=1)),                     # 8 unknown param
        ins(fixed_grant(16, 1, 1, 1, 1 << 16)),                            # 9 too wide
        ins(fixed_grant(1 << 16, 1, 1, 1, 1)),                             # 10 key too wide
        ins(route(0x0A000001, 24, 1)),                                     # 11 bits past prefix
        ins(entry(n.SLACK_CLASS, {n.F_SLACK_KEY: Range(5, 9)}, n.ACT_SET_SLACK_CLASS, qclass=3)),  # 12 no prio
        mod(MeterConfig(n.DEP_METER, 2, cir=10, cburst=1, pir=5, pburst=1)),  # 13 pir < cir
        mod(MeterConfig(n.DEP_METER, n.DEP_SLOTS, 1, 1, 1, 1)),            # 14 index
        Update(Op.INSERT, default(n.ECN_THRESHOLD, n.ACT_SET_ECN_THRESHOLD, qdepth_pkts=1)),  # 15
        ins(entry(n.DEP_GRANT, {n.F_SRC_ADDR: SENDER_IP}, n.ACT_SET_SHARE_GRANT, meter_slot=1)),  # 16 no dep_id
        ins(entry(n.DEP_GRANT, key, n.ACT_SET_SHARE_GRANT, meter_slot=1, epoch=1)),  # 17 a fixed grant's param
        ins(entry(n.DEP_GRANT, key, n.ACT_NO_GRANT)),                      # 18 default-only action
        ins(entry(n.PORT_SHARE, {n.F_EGRESS_PORT: RECEIVER_PORT, n.F_LOAD: 1, n.F_MODE: 4}, n.ACT_SET_SHARE,
                  rate_kbps=5)),                                           # 19 mode beyond 2 bits
        ins(entry(n.PORT_SHARE, {n.F_EGRESS_PORT: RECEIVER_PORT, n.F_LOAD: 1, n.F_MODE: 0}, n.ACT_SET_SHARE,
                  rate_kbps=5)),                                           # 20 ALREADY_EXISTS (setup wrote it)
        mod(fixed_grant(11, 2, 2, 2, 2)),                                  # 21 ok
    ]
    with pytest.raises(TargetError) as err:
        sw.write(batch)
    codes = {f.index: f.code for f in err.value.failures}
    assert codes == {1: "ALREADY_EXISTS", 2: "NOT_FOUND", 3: "NOT_FOUND",
                     **{i: "INVALID_ARGUMENT" for i in range(4, 20)}, 20: "ALREADY_EXISTS"}
    assert all(f.message for f in err.value.failures)
    assert sw.entries(n.DEP_GRANT) == [fixed_grant(11, 2, 2, 2, 2)]  # successes applied
    assert sw.meter_config(2) is None and sw.meter_config(1) is None


def test_delete_then_reinsert_and_range_priority_identity() -> None:
    sw, _ = make_switch()
    e = fixed_grant(11, 1, 1, 1, 1)
    sw.write([ins(e), Update(Op.DELETE, e), ins(e)])
    assert sw.entries(n.DEP_GRANT) == [e]
    # a share grant replaces the fixed one under the same key
    sw.write([mod(share_grant(11, slot=1))])
    assert sw.entries(n.DEP_GRANT) == [share_grant(11, slot=1)]
    assert ask(sw, 11)[0] == share_kbps(1)
    # same range, different priority = different entry (P4Runtime key includes priority)
    r = Range(slack_to_key(0), slack_to_key(5))
    sw.write([ins(entry(n.SLACK_CLASS, {n.F_SLACK_KEY: r}, n.ACT_SET_SLACK_CLASS, priority=50, qclass=6)),
              ins(entry(n.SLACK_CLASS, {n.F_SLACK_KEY: r}, n.ACT_SET_SLACK_CLASS, priority=51, qclass=3))])
    p = safs_pkt(MsgType.DATA, dst=OTHER_IP)
    p.ts = sw.now() + 2
    sw.ingress(p, SENDER_PORT)
    assert p.qclass == 3  # the higher priority wins over the class-5 range too


def test_default_actions_settings_and_clock_offset() -> None:
    clock = Clock(10)
    sw = PipelineModel("s", clock)
    assert sw.default_action(n.ECN_THRESHOLD).params["qdepth_pkts"] > 0
    sw.set_clock_offset(-20)
    assert sw.default_action(n.CLOCK_OFFSET).params["offset_ns"] == wrap(-20)
    assert sw.now() == wrap(-10)
    assert sw.default_action(n.SLACK_CLASS).params == {"qclass": QUEUE_SLACK_LEAST_URGENT}
    assert sw.default_action(n.SHARE_LEASE).params == {"lease_us": 0}
    sw.write([mod(default(n.SLACK_CLASS, n.ACT_SET_SLACK_CLASS, qclass=4)),
              mod(default(n.IPV4_LPM, n.ACT_SET_EGRESS, port=8, dst_mac=1)),
              mod(default(n.SHARE_LEASE, n.ACT_SET_SHARE_LEASE, lease_us=1234))])
    p = safs_pkt(MsgType.DATA)
    assert sw.ingress(p, 0) == [(8, p)]  # default route, default class
    assert p.qclass == 4
    assert sw.default_action(n.SHARE_LEASE).params == {"lease_us": 1234}
    with pytest.raises(TargetError) as err:  # const defaults
        sw.write([mod(default(n.RECEIVER_PORT, n.ACT_MARK_RECEIVER)),
                  mod(default(n.DEP_GRANT, n.ACT_NO_GRANT)),
                  mod(default(n.PORT_SHARE, n.ACT_SET_SHARE, rate_kbps=1))])
    assert [f.code for f in err.value.failures] == ["INVALID_ARGUMENT"] * 3


def test_read_counter_and_entries_bad_names() -> None:
    sw, _ = make_switch()
    with pytest.raises(InvalidInput) as e1:
        sw.read_counter("nope", 0)
    assert e1.value.field == "counter"
    with pytest.raises(InvalidInput) as e2:
        sw.read_counter(n.MALFORMED, 3)
    assert e2.value.field == "index"
    with pytest.raises(InvalidInput):
        sw.entries("nope")


@settings(max_examples=200, deadline=None)
@given(ranges=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 60), st.integers(0, 60),
                                 st.integers(2, 6)), max_size=6),
       keys=st.lists(st.integers(0, 70), min_size=1, max_size=20))
def test_slack_partition_matches_priority_scan(ranges, keys) -> None:
    """The per-packet bisect gives what a P4Runtime range table gives: the highest-priority
    entry containing the key (priorities made distinct, as P4Runtime requires for overlaps)."""
    sw = PipelineModel("s", Clock(0))
    entries, seen = [], set()
    for prio, a, b, q in ranges:
        lo, hi = min(a, b), max(a, b)
        if (lo, hi) in seen:
            continue
        seen.add((lo, hi))
        entries.append((prio * 100 + len(entries), lo, hi, q))
    sw.write([ins(entry(n.SLACK_CLASS, {n.F_SLACK_KEY: Range(lo, hi)}, n.ACT_SET_SLACK_CLASS,
                        priority=prio, qclass=q)) for prio, lo, hi, q in entries]
             + [mod(default(n.IPV4_LPM, n.ACT_SET_EGRESS, port=1, dst_mac=0))])
    for key in keys:
        hits = [(prio, q) for prio, lo, hi, q in entries if lo <= key <= hi]
        want = max(hits)[1] if hits else 2
        p = safs_pkt(MsgType.DATA)
        p.ts = wrap(key ^ (1 << 47))  # now = 0, so the slack key is exactly `key`
        sw.ingress(p, 0)
        assert p.qclass == want


# ---------------------------------------------------------------------------- traffic classes

ANY_T, ANY_PORT = Ternary(0, 0), Range(0, 65535)  # don't-care values


def aggregate(qclass: int, priority: int, *, src: Ternary = ANY_T, proto: Ternary = ANY_T,
              dports: Range = ANY_PORT, qp: Ternary = ANY_T, meter: int | None = None) -> TableEntry:
    match = {n.F_SRC_ADDR: src, n.F_DST_ADDR: Ternary(0, 0), n.F_PROTOCOL: proto,
             n.F_L4_SRC_PORT: Range(0, 65535), n.F_L4_DST_PORT: dports, n.F_ROCE_QP: qp}
    if meter is None:
        return TableEntry(n.TRAFFIC_CLASS, match, n.ACT_SET_TRAFFIC_CLASS, {"qclass": qclass}, priority=priority)
    return TableEntry(n.TRAFFIC_CLASS, match, n.ACT_SET_METERED_TRAFFIC_CLASS,
                      {"qclass": qclass, "meter_index": meter}, priority=priority)


def roce_pkt(qp: int, size: int = 1500, ecn: int = ECN_ECT0) -> Packet:
    p = Packet(SENDER_IP, RECEIVER_IP, PROTO_UDP, 49152 + qp, n.ROCE_V2_UDP_PORT, size, size - 58, ecn)
    p.roce_qp = qp
    return p


def test_traffic_classes_map_rocev2_by_queue_pair_and_tcp_by_port() -> None:
    sw, _ = make_switch()
    sw.write([ins(aggregate(4, 30, proto=Ternary(17, 0xFF), dports=Range(4791, 4791), qp=Ternary(0x100, 0xF00))),
              ins(aggregate(1, 20, proto=Ternary(17, 0xFF), dports=Range(4791, 4791))),
              ins(aggregate(3, 10, proto=Ternary(PROTO_TCP, 0xFF), dports=Range(5000, 5999)))])
    cases = [(roce_pkt(0x1AB), 4), (roce_pkt(0x2AB), 1),  # QPs 0x1xx: the first aggregate; others: the second
             (Packet(SENDER_IP, RECEIVER_IP, PROTO_TCP, 40000, 5001, 1500, 1446), 3),
             (Packet(SENDER_IP, RECEIVER_IP, PROTO_TCP, 40000, 80, 1500, 1446), QUEUE_BEST_EFFORT)]
    for pkt, queue in cases:
        assert sw.ingress(pkt, SENDER_PORT) == [(RECEIVER_PORT, pkt)]
        assert pkt.priority == queue
    # A QP outside RoCEv2 (UDP to another port) is not read: the second aggregate does not match either.
    other = roce_pkt(0x1AB)
    other.dport = 9999
    sw.ingress(other, SENDER_PORT)
    assert other.priority == QUEUE_BEST_EFFORT
    # SAFS packets are not traffic-classified.
    data = safs_pkt(MsgType.DATA, ts=SLACK_NS[4] + 1_000_000)
    sw.ingress(data, SENDER_PORT)
    assert data.priority != QUEUE_BEST_EFFORT


def test_a_metered_aggregate_marks_over_rate_packets_ce_or_drops_them_and_keeps_its_queue() -> None:
    sw, clock = make_switch()
    sw.write([ins(aggregate(3, 1, proto=Ternary(17, 0xFF), meter=1)),
              mod(MeterConfig(n.AGGREGATE_METER, 1, cir=1_000_000, cburst=3000, pir=1_000_000, pburst=3000))])
    out = [roce_pkt(7) for _ in range(4)]
    results = [sw.ingress(p, SENDER_PORT) for p in out]
    assert [len(r) for r in results] == [1, 1, 1, 1] and all(p.priority == 3 for p in out)
    assert [p.ecn for p in out] == [ECN_ECT0, ECN_ECT0, ECN_CE, ECN_CE]  # 3000-byte burst, then RED
    not_ect = roce_pkt(7, ecn=ECN_NOT_ECT)
    assert sw.ingress(not_ect, SENDER_PORT) == []  # RED and not ECN-capable: policed
    clock.t += 10_000_000  # 10 ms at 1 MB/s refills the bucket
    fresh = roce_pkt(7)
    assert sw.ingress(fresh, SENDER_PORT) == [(RECEIVER_PORT, fresh)] and fresh.ecn == ECN_ECT0
    assert sw.meter_config(1, n.AGGREGATE_METER).cir == 1_000_000 and sw.meter_config(1) is None


@pytest.mark.parametrize("match, msg", [
    ({n.F_PROTOCOL: Ternary(17, 0x0F)}, "value & mask"), ({n.F_ROCE_QP: Ternary(1 << 24, (1 << 25) - 1)}, "24 bits"),
    ({n.F_L4_DST_PORT: Range(10, 1)}, "low<=high"), ({n.F_SRC_ADDR: 5}, "Ternary"),
])
def test_bad_traffic_class_entries_are_refused(match: dict, msg: str) -> None:
    sw, _ = make_switch()
    e = aggregate(3, 1)
    with pytest.raises(TargetError, match=msg):
        sw.write([ins(TableEntry(e.table, {**e.match, **match}, e.action, e.params, priority=1))])
    with pytest.raises(TargetError, match="priority"):
        sw.write([ins(TableEntry(e.table, e.match, e.action, e.params, priority=0))])

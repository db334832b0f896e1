"""Unit tests of the in-process SAFS pipeline model (safs.targets.pipeline_model)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safs.core import p4names as n
from safs.core.errors import InvalidInput, TargetError
from safs.core.packet import PROTO_TCP, PROTO_UDP, Packet
from safs.core.protocol import (
    ECN_CE,
    ECN_ECT0,
    ECN_ECT1,
    ECN_NOT_ECT,
    QDEPTH_MAX,
    QUEUE_BEST_EFFORT,
    QUEUE_CONTROL,
    QUEUE_OVER_RATE,
    SAFS_UDP_PORT,
    Color,
    MsgType,
)
from safs.core.target import CloneSession, Lpm, MeterConfig, Op, Range, RequestDigest, TableEntry, Update
from safs.core.timebase import TIME_MASK, slack_to_key, wrap
from safs.targets.pipeline_model import CLONE_SESSION_ID_MAX, CONTROL_PACKET_BYTES, PipelineModel, qdepth_bucket

SENDER_IP = 0x0A000001  # 10.0.0.1, behind port 1
RECEIVER_IP = 0x0A000102  # 10.0.1.2, directly attached on port 3 (receiver port)
OTHER_IP = 0x0A000105  # 10.0.1.5, via port 2 (not a receiver port)
SENDER_PORT, FABRIC_PORT, RECEIVER_PORT = 1, 2, 3

# Slack classes used by these tests: (low slack ns, high slack ns, qclass).
US = 1_000
CLASSES = [(-(1 << 47), -1, 6), (0, 10 * US - 1, 5), (10 * US, 100 * US - 1, 4),
           (100 * US, 1000 * US - 1, 3), (1000 * US, (1 << 47) - 1, 2)]


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


def grant_entry(flow_id: int, rate_kbps: int, epoch: int, lease_us: int, slot: int) -> TableEntry:
    return entry(n.FLOW_GRANT, {n.F_FLOW_ID: flow_id}, n.ACT_SET_GRANT,
                 rate_kbps=rate_kbps, epoch=epoch, lease_us=lease_us, meter_slot=slot)


def make_switch(receiver: bool = True, clock: Clock | None = None,
                back_routes: bool = True, clone_sessions: bool = True) -> tuple[PipelineModel, Clock]:
    clock = clock or Clock(1_000_000)
    sw = PipelineModel("tor1", clock)
    ups = [ins(route(0x0A000000, 24, SENDER_PORT)), ins(route(0x0A000100, 24, FABRIC_PORT)),
           ins(route(RECEIVER_IP, 32, RECEIVER_PORT))]
    if back_routes:
        ups.append(ins(back_route(0x0A000000, 24, SENDER_PORT)))
    if receiver:
        ups.append(ins(entry(n.RECEIVER_PORT, {n.F_EGRESS_PORT: RECEIVER_PORT}, n.ACT_MARK_RECEIVER)))
    if clone_sessions:  # as Scheduler.setup writes them: session port + 1 -> port
        ups += [ins(CloneSession.for_port(port)) for port in (SENDER_PORT, FABRIC_PORT, RECEIVER_PORT)]
    for prio, (lo, hi, q) in enumerate(CLASSES, start=1):
        ups.append(ins(entry(n.SLACK_CLASS, {n.F_SLACK_KEY: Range(slack_to_key(lo), slack_to_key(hi))},
                             n.ACT_SET_SLACK_CLASS, priority=prio, qclass=q)))
    ups.append(mod(default(n.DEFAULT_GRANT, n.ACT_SET_DEFAULT_GRANT,
                           rate_kbps=1_000_000, lease_us=500, meter_slot=0)))
    sw.write(ups)
    return sw, clock


def safs_pkt(t: MsgType, flow_id: int = 7, ts: int = 0, epoch: int = 0, size: int = 1500,
             src: int = SENDER_IP, dst: int = RECEIVER_IP, remaining: int = 10_000) -> Packet:
    p = Packet(src, dst, PROTO_UDP, 40000, SAFS_UDP_PORT, size, payload=max(0, size - 78))
    p.safs_version = 1
    p.safs_type = int(t)
    p.flow_id = flow_id
    p.ts = ts
    p.epoch = epoch
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

def install_flow(sw: PipelineModel, flow_id: int, slot: int, epoch: int, cir: int, cburst: int,
                 pir: int, pburst: int) -> None:
    sw.write([ins(grant_entry(flow_id, cir * 8 // 1000, epoch, 500, slot)),
              mod(MeterConfig(n.FLOW_METER, slot, cir=cir, cburst=cburst, pir=pir, pburst=pburst))])


def test_meter_burst_green_then_yellow_then_red_never_dropped() -> None:
    sw, clock = make_switch()
    install_flow(sw, 7, slot=5, epoch=1, cir=1_000_000, cburst=3000, pir=1_250_000, pburst=4500)
    colors, prios = [], []
    for _ in range(4):  # back-to-back at one instant: only the buckets' depth counts
        p = safs_pkt(MsgType.DATA, epoch=1, ts=wrap(clock.t + 10**9))
        out = sw.ingress(p, SENDER_PORT)
        assert out == [(RECEIVER_PORT, p)]  # never dropped
        colors.append(p.color)
        prios.append(p.priority)
    assert colors == [Color.GREEN, Color.GREEN, Color.YELLOW, Color.RED]
    assert prios[:2] == [2, 2] and prios[2:] == [QUEUE_OVER_RATE, QUEUE_OVER_RATE]
    clock.t += 1_500_000  # 1.5 ms at 1 MB/s refills 1500 bytes of the committed bucket
    p = safs_pkt(MsgType.DATA, epoch=1, ts=wrap(clock.t + 10**9))
    sw.ingress(p, SENDER_PORT)
    assert p.color == Color.GREEN


@settings(max_examples=30, deadline=None)
@given(rate_factor=st.integers(min_value=2, max_value=20), cir=st.integers(1_000_000, 100_000_000))
def test_meter_far_above_rate_green_bytes_bounded_by_cir(rate_factor: int, cir: int) -> None:
    sw, clock = make_switch()
    cburst = 3000
    install_flow(sw, 7, slot=9, epoch=1, cir=cir, cburst=cburst, pir=cir + cir // 10, pburst=4500)
    gap_ns = 1500 * 10**9 // (cir * rate_factor)  # packets arrive rate_factor times too fast
    start = clock.t
    green = 0
    for _ in range(400):
        clock.t += gap_ns
        p = safs_pkt(MsgType.DATA, epoch=1)
        assert len(sw.ingress(p, SENDER_PORT)) == 1
        if p.color == Color.GREEN:
            green += p.size
        else:
            assert p.priority == QUEUE_OVER_RATE
    elapsed = clock.t - start
    allowed = cburst + cir * elapsed // 10**9
    assert green <= allowed
    assert green >= allowed - 2 * 1500 - cburst  # the meter does let the committed rate through


def test_unconfigured_meter_is_green_and_default_slot_meters_unknown_flows() -> None:
    sw, _ = make_switch()
    sw.write([ins(grant_entry(8, 1000, 1, 500, slot=77))])  # slot 77 never configured
    for _ in range(50):
        p = safs_pkt(MsgType.DATA, flow_id=8, epoch=1)
        sw.ingress(p, SENDER_PORT)
        assert p.color == Color.GREEN
    sw.write([mod(MeterConfig(n.FLOW_METER, 0, cir=1000, cburst=1500, pir=1000, pburst=1500))])
    seen = []
    for _ in range(3):
        p = safs_pkt(MsgType.DATA, flow_id=99)  # no flow_grant entry -> default slot 0
        sw.ingress(p, SENDER_PORT)
        seen.append(p.color)
    assert seen[0] == Color.GREEN and Color.RED in seen[1:]
    assert sw.read_counter(n.FLOW_BYTES, 0).packet_count == 3
    assert sw.read_counter(n.FLOW_BYTES, 77).packet_count == 50
    assert sw.read_counter(n.FLOW_BYTES, 77).byte_count == 50 * 1500


def test_metering_only_at_receiver_tor() -> None:
    sw, _ = make_switch(receiver=False)
    install_flow(sw, 7, slot=5, epoch=1, cir=1, cburst=1, pir=1, pburst=1)
    p = safs_pkt(MsgType.DATA, epoch=1)
    sw.ingress(p, SENDER_PORT)
    assert p.color == Color.UNMETERED and p.priority == p.qclass
    assert sw.read_counter(n.FLOW_BYTES, 5).packet_count == 0


# ---------------------------------------------------------------------------- grants, digests

def test_request_with_installed_grant_becomes_grant_without_digest() -> None:
    sw, clock = make_switch()
    sw.set_clock_offset(5_000)
    sw.write([ins(grant_entry(7, 2_500_000, 4, 800, slot=3))])
    p = safs_pkt(MsgType.REQUEST, ts=123, size=CONTROL_PACKET_BYTES)
    out = sw.ingress(p, SENDER_PORT)
    assert out == [(SENDER_PORT, p)]
    # addresses swapped; UDP ports kept, so the GRANT still goes to the SAFS port (as in P4)
    assert (p.safs_type, p.src, p.dst, p.sport, p.dport) == (
        MsgType.GRANT, RECEIVER_IP, SENDER_IP, 40000, SAFS_UDP_PORT)
    assert (p.rate_kbps, p.epoch, p.lease_us, p.priority) == (2_500_000, 4, 800, QUEUE_CONTROL)
    assert (p.qclass, p.color) == (QUEUE_CONTROL, Color.UNMETERED)
    assert p.ts == wrap(clock.t + 5_000)
    assert sw.poll_digests() == []


def test_request_unknown_flow_gets_default_grant_and_one_digest() -> None:
    sw, _ = make_switch()
    p = safs_pkt(MsgType.REQUEST, flow_id=42, ts=777, remaining=9_999)
    assert sw.ingress(p, SENDER_PORT) == [(SENDER_PORT, p)]
    assert (p.safs_type, p.rate_kbps, p.epoch, p.lease_us) == (MsgType.GRANT, 1_000_000, 0, 500)
    assert sw.poll_digests() == [RequestDigest(42, SENDER_IP, RECEIVER_IP, 9_999, 777)]
    assert sw.poll_digests() == []  # cleared


@pytest.mark.parametrize("installed, sent, pushes", [
    (2, 1, True), (2, 0, True), (2, 2, False), (2, 3, False),
    (1, 0xFFFFFFFF, True),  # serial compare: 2^32-1 is just before 1
    (0xFFFFFFFF, 1, False),  # and 1 is just after 2^32-1
])
def test_stale_epoch_data_pushes_fresh_grant(installed: int, sent: int, pushes: bool) -> None:
    sw, clock = make_switch()
    sw.write([ins(grant_entry(7, 3_000_000, installed, 900, slot=4))])
    p = safs_pkt(MsgType.DATA, epoch=sent, ts=wrap(clock.t + 10**6), remaining=4242)
    out = sw.ingress(p, SENDER_PORT)
    assert out[0] == (RECEIVER_PORT, p) and p.safs_type == MsgType.DATA
    assert len(out) == (2 if pushes else 1)
    if pushes:
        port, g = out[1]
        assert port == SENDER_PORT and g is not p
        assert (g.safs_type, g.src, g.dst, g.flow_id) == (MsgType.GRANT, RECEIVER_IP, SENDER_IP, 7)
        assert (g.sport, g.dport, g.color) == (SAFS_UDP_PORT, SAFS_UDP_PORT, Color.UNMETERED)
        assert (g.rate_kbps, g.epoch, g.lease_us, g.priority) == (3_000_000, installed, 900, QUEUE_CONTROL)
        assert g.size == CONTROL_PACKET_BYTES and g.remaining == 4242
    assert sw.poll_digests() == []


def stale_data(sw: PipelineModel, clock: Clock) -> list:
    """Ingress of a DATA of flow 7 with epoch 1 while epoch 5 is installed (a stale epoch)."""
    sw.write([ins(grant_entry(7, 3_000_000, 5, 900, slot=4))])
    return sw.ingress(safs_pkt(MsgType.DATA, epoch=1, ts=wrap(clock.t + 10**6)), SENDER_PORT)


def test_stale_epoch_grant_needs_the_clone_session_of_its_port() -> None:
    sw, clock = make_switch(clone_sessions=False)
    assert [port for port, _ in stale_data(sw, clock)] == [RECEIVER_PORT]  # BMv2: clone to nothing
    # a session for another port does not help: the clone goes to session grant port + 1
    sw.write([ins(CloneSession.for_port(FABRIC_PORT))])
    assert [port for port, _ in sw.ingress(safs_pkt(MsgType.DATA, epoch=1), SENDER_PORT)] == [RECEIVER_PORT]
    sw.write([ins(CloneSession.for_port(SENDER_PORT))])
    out = sw.ingress(safs_pkt(MsgType.DATA, epoch=1), SENDER_PORT)
    assert [(port, g.safs_type) for port, g in out] == [(RECEIVER_PORT, MsgType.DATA), (SENDER_PORT, MsgType.GRANT)]
    # the clone leaves on the session's replica port, as BMv2 sends it
    sw.write([mod(CloneSession(SENDER_PORT + n.CLONE_SESSION_BASE, FABRIC_PORT))])
    out = sw.ingress(safs_pkt(MsgType.DATA, epoch=1), SENDER_PORT)
    assert [(port, g.safs_type) for port, g in out] == [(RECEIVER_PORT, MsgType.DATA), (FABRIC_PORT, MsgType.GRANT)]
    sw.write([Update(Op.DELETE, CloneSession(SENDER_PORT + n.CLONE_SESSION_BASE, 0))])
    assert len(sw.ingress(safs_pkt(MsgType.DATA, epoch=1), SENDER_PORT)) == 1
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
    sw.write([ins(grant_entry(7, 3_000_000, 5, 900, slot=4))])
    p = safs_pkt(MsgType.REQUEST, flow_id=8)
    assert sw.ingress(p, SENDER_PORT) == [(RECEIVER_PORT, p)]  # delivered to the host as is
    assert p.safs_type == MsgType.REQUEST and p.priority == QUEUE_CONTROL
    assert sw.poll_digests() == []
    assert len(sw.ingress(safs_pkt(MsgType.DATA, epoch=1), SENDER_PORT)) == 1


def test_data_without_entry_never_pushes_grant() -> None:
    sw, _ = make_switch()
    assert len(sw.ingress(safs_pkt(MsgType.DATA, flow_id=5, epoch=0), SENDER_PORT)) == 1


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
    (lambda p: setattr(p, "safs_version", 2), 1),
    (lambda p: setattr(p, "safs_type", 9), 2),
])
def test_malformed_safs_forwarded_as_best_effort_and_counted(mutate, index: int) -> None:
    sw, _ = make_switch()
    sw.write([ins(grant_entry(7, 1, 5, 1, slot=2))])
    p = safs_pkt(MsgType.REQUEST)
    mutate(p)
    assert sw.ingress(p, SENDER_PORT) == [(RECEIVER_PORT, p)]
    assert p.priority == QUEUE_BEST_EFFORT and p.dst == RECEIVER_IP  # not turned into a GRANT
    assert sw.poll_digests() == []
    cells = [sw.read_counter(n.MALFORMED, i).packet_count for i in range(3)]
    assert cells == [1 if i == index else 0 for i in range(3)]
    sw.egress(p, RECEIVER_PORT, 9)
    assert p.qdepth == 0
    lost = safs_pkt(MsgType.DATA, dst=0x0B000001)  # counted before forwarding, then dropped
    mutate(lost)
    assert sw.ingress(lost, SENDER_PORT) == []
    assert sw.read_counter(n.MALFORMED, index).packet_count == 2


# ---------------------------------------------------------------------------- control plane

def test_p4runtime_error_codes_and_partial_batch() -> None:
    sw, _ = make_switch()
    good = grant_entry(11, 1, 1, 1, 1)
    batch = [
        ins(good),                                                         # 0 ok
        ins(good),                                                         # 1 ALREADY_EXISTS
        mod(grant_entry(12, 1, 1, 1, 1)),                                  # 2 NOT_FOUND
        Update(Op.DELETE, grant_entry(13, 1, 1, 1, 1)),                    # 3 NOT_FOUND
        Update(Op.INSERT, MeterConfig(n.FLOW_METER, 1, 1, 1, 1, 1)),       # 4 INVALID_ARGUMENT
        Update(Op.DELETE, MeterConfig(n.FLOW_METER, 1, 1, 1, 1, 1)),       # 5 INVALID_ARGUMENT
        ins(entry("SafsIngress.nope", {n.F_FLOW_ID: 1}, n.ACT_SET_GRANT)),  # 6 unknown table
        ins(entry(n.FLOW_GRANT, {n.F_FLOW_ID: 14}, "SafsIngress.nope")),   # 7 unknown action
        ins(entry(n.FLOW_GRANT, {n.F_FLOW_ID: 15}, n.ACT_SET_GRANT, rate_kbps=1, epoch=1,
                  lease_us=1, meter_slot=1, bogus=1)),                     # 8 unknown param
        ins(grant_entry(16, 1, 1, 1, 1 << 16)),                            # 9 too wide
        ins(grant_entry(1 << 32, 1, 1, 1, 1)),                             # 10 key too wide
        ins(route(0x0A000001, 24, 1)),                                     # 11 bits past prefix
        ins(entry(n.SLACK_CLASS, {n.F_SLACK_KEY: Range(5, 9)}, n.ACT_SET_SLACK_CLASS, qclass=3)),  # 12 no prio
        mod(MeterConfig(n.FLOW_METER, 2, cir=10, cburst=1, pir=5, pburst=1)),  # 13 pir < cir
        mod(MeterConfig(n.FLOW_METER, n.FLOW_METER_SIZE, 1, 1, 1, 1)),      # 14 index
        Update(Op.INSERT, default(n.ECN_THRESHOLD, n.ACT_SET_ECN_THRESHOLD, qdepth_pkts=1)),  # 15
        mod(grant_entry(11, 2, 2, 2, 2)),                                  # 16 ok
    ]
    with pytest.raises(TargetError) as err:
        sw.write(batch)
    codes = {f.index: f.code for f in err.value.failures}
    assert codes == {1: "ALREADY_EXISTS", 2: "NOT_FOUND", 3: "NOT_FOUND",
                     **{i: "INVALID_ARGUMENT" for i in range(4, 16)}}
    assert all(f.message for f in err.value.failures)
    assert sw.entries(n.FLOW_GRANT) == [grant_entry(11, 2, 2, 2, 2)]  # successes applied
    assert sw.meter_config(2) is None and sw.meter_config(1) is None


def test_delete_then_reinsert_and_range_priority_identity() -> None:
    sw, _ = make_switch()
    e = grant_entry(11, 1, 1, 1, 1)
    sw.write([ins(e), Update(Op.DELETE, e), ins(e)])
    assert sw.entries(n.FLOW_GRANT) == [e]
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
    sw.write([mod(default(n.SLACK_CLASS, n.ACT_SET_SLACK_CLASS, qclass=4)),
              mod(default(n.IPV4_LPM, n.ACT_SET_EGRESS, port=8, dst_mac=1))])
    p = safs_pkt(MsgType.DATA)
    assert sw.ingress(p, 0) == [(8, p)]  # default route, default class
    assert p.qclass == 4
    with pytest.raises(TargetError) as err:  # const defaults
        sw.write([mod(default(n.RECEIVER_PORT, n.ACT_MARK_RECEIVER)),
                  mod(default(n.FLOW_GRANT, n.ACT_NO_GRANT))])
    assert [f.code for f in err.value.failures] == ["INVALID_ARGUMENT"] * 2


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

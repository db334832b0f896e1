"""Share grants in the pipeline model (safs.targets.pipeline_model, grant_enforcer.p4's
update_share): the cases ptf_tests/differential.py found where the model and BMv2 disagreed.

Setup: sender 10.0.0.1 behind port 1, two receivers on receiver ports 2 and 3, two share
dependencies (the sender's dep_ids 1 and 2, slots 5 and 6), port_share entries for loads 1..4 of each mode on
both ports, slack classes late -> 6, slack >= 0 -> 5 (the tests rewrite that one's queue). The
in-link tests add a remote sender behind fabric ports 4 and 5 and mark port 1 a host port; the
out-link tests route the remote address out of port 4 and claim the sender's dep_ids with out slots.
"""

from __future__ import annotations

import pytest

from safs.core import p4names as n
from safs.core.packet import PROTO_UDP, Packet
from safs.core.protocol import FLAG_CAPPED, FLAG_LAST, FLAG_RENEW, FLAG_SOLE, SAFS_UDP_PORT, SAFS_VERSION, MsgType
from safs.core.target import CloneSession, Lpm, Op, Range, TableEntry, Update
from safs.core.timebase import TIME_MASK, slack_to_key
from safs.targets.pipeline_model import PipelineModel

SENDER, RCV2, RCV3 = 0x0A000001, 0x0A000202, 0x0A000303
DEFAULT_KBPS, DEFAULT_LEASE, SHARE_LEASE = 1000, 500, 20_000
USABLE, RESERVE = 9_999_991, 1_250_009
NOW = 10**12


def rate(mode: int, load: int) -> int:
    return {n.SHARE_ALONE: USABLE, n.SHARE_TOP: USABLE - RESERVE, n.SHARE_WAITING: RESERVE}[mode] // load


def switch(soon_queue: int = 5, clock: list[int] | None = None) -> PipelineModel:
    """The setup above; ``clock``: a one-element list holding the switch time (default NOW)."""
    now = clock if clock is not None else [NOW]
    sw = PipelineModel("tor", lambda: now[0])
    ups = [Update(Op.INSERT, TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(dst, 32)}, n.ACT_SET_EGRESS,
                                        {"port": port, "dst_mac": port}))
           for dst, port in ((SENDER, 1), (RCV2, 2), (RCV3, 3))]
    ups.append(Update(Op.INSERT, TableEntry(n.GRANT_ROUTE, {n.F_SRC_ADDR: Lpm(SENDER, 32)}, n.ACT_SET_GRANT_ROUTE,
                                            {"port": 1, "dst_mac": 1})))
    ups += [Update(Op.INSERT, TableEntry(n.RECEIVER_PORT, {n.F_EGRESS_PORT: p}, n.ACT_MARK_RECEIVER)) for p in (2, 3)]
    ups.append(Update(Op.INSERT, CloneSession.for_port(1)))
    ups += [Update(Op.INSERT, TableEntry(n.PORT_SHARE, {n.F_EGRESS_PORT: p, n.F_LOAD: load, n.F_MODE: mode},
                                         n.ACT_SET_SHARE, {"rate_kbps": rate(mode, load)}))
            for p in (2, 3) for mode in (n.SHARE_ALONE, n.SHARE_TOP, n.SHARE_WAITING) for load in range(1, 5)]
    ups.append(Update(Op.INSERT, TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: SENDER, n.F_DEP_ID: 1},
                                            n.ACT_SET_SHARE_GRANT, {"meter_slot": 5})))
    ups.append(Update(Op.INSERT, TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: SENDER, n.F_DEP_ID: 2},
                                            n.ACT_SET_SHARE_GRANT, {"meter_slot": 6})))
    for prio, (lo, hi, q) in enumerate(((-(1 << 47), -1, 6), (0, (1 << 47) - 1, soon_queue)), start=1):
        key = Range(slack_to_key(lo), slack_to_key(hi))
        ups.append(Update(Op.INSERT, TableEntry(n.SLACK_CLASS, {n.F_SLACK_KEY: key}, n.ACT_SET_SLACK_CLASS,
                                                {"qclass": q}, priority=prio)))
    ups.append(Update(Op.MODIFY, TableEntry(n.DEFAULT_GRANT, {}, n.ACT_SET_DEFAULT_GRANT,
                                            {"rate_kbps": DEFAULT_KBPS, "lease_us": DEFAULT_LEASE, "meter_slot": 0},
                                            is_default=True)))
    ups.append(Update(Op.MODIFY, TableEntry(n.SHARE_LEASE, {}, n.ACT_SET_SHARE_LEASE, {"lease_us": SHARE_LEASE},
                                            is_default=True)))
    sw.write(ups)
    return sw


def send(sw: PipelineModel, t: MsgType, dep_id: int, slack_ns: int, dst: int = RCV2, flags: int = 0,
         held: tuple[int, int] = (0, 0), remaining: int = 0) -> tuple[int, int, int] | None:
    """One REQUEST or DATA of the sender's ``dep_id`` (``remaining`` bytes); the (rate, epoch,
    lease) of the GRANT it produces, if any."""
    p = Packet(SENDER, dst, PROTO_UDP, SAFS_UDP_PORT, SAFS_UDP_PORT, 142, payload=64)
    p.safs_version, p.safs_type, p.flags, p.flow_id, p.dep_id = SAFS_VERSION, int(t), flags, 9, dep_id
    p.remaining = remaining
    p.ts = (sw.now() + slack_ns) & TIME_MASK
    p.rate_kbps, p.epoch = held
    grants = [(g.rate_kbps, g.epoch, g.lease_us) for _, g in sw.ingress(p, 1) if g.safs_type == int(MsgType.GRANT)]
    assert len(grants) <= 1
    return grants[0] if grants else None


@pytest.mark.parametrize("queue", [7, 1, 0])
def test_slack_class_outside_2_to_6_counts_as_least_urgent(queue: int) -> None:
    """A slack_class entry giving queue 7, 1 or 0: urgency 6 - queue is outside 0..4 and counts
    as 4 (the P4's 3-bit urgency wraps to 5..7, which it clamps to 4), not as idle."""
    sw = switch(soon_queue=queue)
    assert send(sw, MsgType.REQUEST, 1, 500) == (rate(n.SHARE_ALONE, 1), 1, SHARE_LEASE)
    assert sw.read_register(n.DEP_CLASS, 5) == 5
    assert sw.read_register(n.CLASS_LOADS[4], 2) == 1
    # A late dependency is more urgent: TOP; the first one waits.
    assert send(sw, MsgType.REQUEST, 2, -500) == (rate(n.SHARE_TOP, 1), 2, SHARE_LEASE)
    assert send(sw, MsgType.DATA, 1, 500, held=(rate(n.SHARE_ALONE, 1), 1)) == (rate(n.SHARE_WAITING, 1), 2,
                                                                                 SHARE_LEASE)


def test_dependency_counted_at_another_port_gets_the_default_grant() -> None:
    """A DATA of a dependency counted at port 2 sent to port 3, where nothing is counted (its
    sender used the dep_id toward two receivers): load 0, no port_share entry, the default
    grant, as in the P4 (the model used to raise StopIteration); nothing changes at either port."""
    sw = switch()
    alone = (rate(n.SHARE_ALONE, 1), 1, SHARE_LEASE)
    assert send(sw, MsgType.REQUEST, 1, -500) == alone
    assert send(sw, MsgType.DATA, 1, -500, dst=RCV3, held=alone[:2]) == (DEFAULT_KBPS, 0, DEFAULT_LEASE)
    assert [sw.read_register(n.CLASS_LOADS[0], p) for p in (2, 3)] == [1, 0]
    assert [sw.read_register(n.PORT_GEN, p) for p in (2, 3)] == [1, 0]
    assert send(sw, MsgType.DATA, 1, -500, held=(DEFAULT_KBPS, 0)) == alone
    assert send(sw, MsgType.DATA, 1, -500, flags=FLAG_LAST, held=alone[:2]) is None
    assert sw.read_register(n.CLASS_LOADS[0], 2) == 0


def test_top_boost_raises_a_shared_top_class_share_by_the_last_windows_top_bytes() -> None:
    """top_boost: a top-class share (alone or top) of a load of 2 or more is multiplied by the
    boost / 256 of the range holding the port's top-class DATA bytes of the last whole window
    (no range: x1), not the current window's (unlike the spare level: a new burst is not
    overcommitted); a load of 1 and a waiting share are not; the in-link rule is unchanged."""
    clock = [NOW]
    sw = switch(clock=clock)
    sw.write([Update(Op.INSERT, TableEntry(n.TOP_BOOST, {n.F_EGRESS_PORT: 2, n.F_TOP_BYTES: Range(lo, hi)},
                                           n.ACT_SET_TOP_BOOST, {"boost": boost}, priority=1))
              for lo, hi, boost in ((1, 999, 512), (1000, 1999, 320))])
    assert send(sw, MsgType.REQUEST, 1, 500) == (rate(n.SHARE_ALONE, 1), 1, SHARE_LEASE)  # load 1: x1
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == rate(n.SHARE_ALONE, 2)  # 0 bytes: no range
    for _ in range(5):  # 710 bytes of the top class in this window
        send(sw, MsgType.DATA, 1, 500, held=(rate(n.SHARE_ALONE, 2), 2))
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == rate(n.SHARE_ALONE, 2)  # still 0 bytes last window
    clock[0] += n.TOP_WINDOW_NS
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == rate(n.SHARE_ALONE, 2) * 512 >> 8
    for _ in range(10):  # 1420 bytes
        send(sw, MsgType.DATA, 1, 500, held=(0, 0))
    clock[0] += n.TOP_WINDOW_NS
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == rate(n.SHARE_ALONE, 2) * 320 >> 8
    # dependency 1 late: the top class (load 1) is not raised, the waiting one is not either
    assert send(sw, MsgType.REQUEST, 1, -500)[0] == rate(n.SHARE_TOP, 1)
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == rate(n.SHARE_WAITING, 1)
    assert sw.read_register(n.PORT_TOP_BYTES, 2) == 1420


def test_waiting_dependencies_share_what_the_top_class_left_in_the_last_window() -> None:
    """spare_level: a waiting dependency's rate is the SHARE_WAITING entry times the level of
    the range holding the port's top-class DATA bytes of the last whole TOP_WINDOW_NS, or of the
    current window so far when more (default level 1); a window silent throughout counts 0
    bytes; waiting DATA does not count."""
    clock = [NOW]
    sw = switch(clock=clock)
    sw.write([Update(Op.INSERT, TableEntry(n.SPARE_LEVEL, {n.F_EGRESS_PORT: 2, n.F_TOP_BYTES: Range(lo, hi)},
                                           n.ACT_SET_SPARE_LEVEL, {"level": level}, priority=level))
              for lo, hi, level in ((0, 999, 8), (1000, 1999, 3))])
    waiting = rate(n.SHARE_WAITING, 1)
    assert send(sw, MsgType.REQUEST, 1, -500) == (rate(n.SHARE_ALONE, 1), 1, SHARE_LEASE)  # top: late
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == 8 * waiting  # nothing counted yet: 0 bytes
    for _ in range(10):  # 10 x 142 bytes of the top class in this window
        send(sw, MsgType.DATA, 1, -500, held=(rate(n.SHARE_TOP, 1), 2))
    send(sw, MsgType.DATA, 2, 500, held=(8 * waiting, 2))  # waiting bytes do not count
    assert sw.read_register(n.PORT_WIN_BYTES, 2) == 1420
    # The window is not over, but its 1420 bytes already exceed the last window's 0: they count
    # (a top class that starts sending takes the port back at once, not a window later).
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == 3 * waiting
    clock[0] += n.TOP_WINDOW_NS
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == 3 * waiting  # 1420 bytes last window
    assert sw.read_register(n.PORT_TOP_BYTES, 2) == 1420
    assert sw.read_register(n.PORT_TOP_BYTES, 3) == 0  # per port
    for _ in range(5):  # 710 bytes so far, fewer than the last window's 1420: those count
        send(sw, MsgType.DATA, 1, -500, held=(rate(n.SHARE_TOP, 1), 2))
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == 3 * waiting
    for _ in range(10):
        send(sw, MsgType.DATA, 1, -500, held=(rate(n.SHARE_TOP, 1), 2))
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == waiting  # 2130 bytes so far: no range, level 1
    clock[0] += n.TOP_WINDOW_NS
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == waiting  # 2130 bytes: no range, level 1
    clock[0] += 2 * n.TOP_WINDOW_NS
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == 8 * waiting  # a silent window: 0 bytes
    assert send(sw, MsgType.REQUEST, 1, -500)[0] == rate(n.SHARE_TOP, 1)  # the top class keeps its share


REMOTE = 0x0A010001  # a sender behind the fabric: ports 4 and 5 (two paths)
LINK_USABLE, LINK_RESERVE = 4_000_000, 500_000


def link_rate(mode: int, load: int) -> int:
    return {n.SHARE_ALONE: LINK_USABLE, n.SHARE_TOP: LINK_USABLE - LINK_RESERVE,
            n.SHARE_WAITING: LINK_RESERVE}[mode] // load


def link_switch(clock: list[int] | None = None) -> PipelineModel:
    """switch() plus: port 1 a host port (the sender's), the remote sender's dep_ids 1..3 (slots
    7..9) and its route back on port 4, link_share entries for in-link 4 only."""
    sw = switch(clock=clock)
    ups = [Update(Op.INSERT, TableEntry(n.HOST_PORT, {n.F_INGRESS_PORT: 1}, n.ACT_SET_HOST_SOURCE,
                                        {"src_addr": SENDER})),
           Update(Op.INSERT, TableEntry(n.GRANT_ROUTE, {n.F_SRC_ADDR: Lpm(REMOTE, 32)}, n.ACT_SET_GRANT_ROUTE,
                                        {"port": 4, "dst_mac": 4})),
           Update(Op.INSERT, CloneSession.for_port(4))]
    ups += [Update(Op.INSERT, TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: REMOTE, n.F_DEP_ID: d},
                                         n.ACT_SET_SHARE_GRANT, {"meter_slot": 6 + d})) for d in (1, 2, 3)]
    ups += [Update(Op.INSERT, TableEntry(n.LINK_SHARE, {n.F_INGRESS_PORT: 4, n.F_LOAD: load, n.F_MODE: mode},
                                         n.ACT_SET_LINK_SHARE, {"rate_kbps": link_rate(mode, load)}))
            for mode in (n.SHARE_ALONE, n.SHARE_TOP, n.SHARE_WAITING) for load in range(1, 5)]
    sw.write(ups)
    return sw


def send_in(sw: PipelineModel, in_port: int, dep_id: int, slack_ns: int, dst: int = RCV2, flags: int = 0,
            src: int = REMOTE, t: MsgType = MsgType.REQUEST, remaining: int = 0) -> int | None:
    """A REQUEST (or ``t``; DATA if ``flags`` has LAST) of ``src``'s ``dep_id`` arriving on
    ``in_port`` with ``remaining`` bytes; the rate of the GRANT it produces, if any (a DATA
    holds no grant: epoch 0)."""
    p = Packet(src, dst, PROTO_UDP, SAFS_UDP_PORT, SAFS_UDP_PORT, 142, payload=64)
    if flags & FLAG_LAST:
        t = MsgType.DATA
    p.safs_version, p.safs_type, p.flags, p.flow_id, p.dep_id = SAFS_VERSION, int(t), flags, 9, dep_id
    p.remaining = remaining
    p.ts = (sw.now() + slack_ns) & TIME_MASK
    grants = [g.rate_kbps for _, g in sw.ingress(p, in_port) if g.safs_type == int(MsgType.GRANT)]
    return grants[0] if grants else None


def test_in_link_share_caps_the_dependencies_arriving_on_it() -> None:
    """link_share: dependencies arriving on in-link 4 are counted there by urgency as at a
    receiver port, and each gets the smaller of its port share and its link share; one from a
    host port is not counted at any link; LAST leaves the link."""
    sw = link_switch()
    assert send_in(sw, 4, 1, 500, dst=RCV2) == link_rate(n.SHARE_ALONE, 1)  # < the port's USABLE
    assert send_in(sw, 4, 2, 500, dst=RCV3) == link_rate(n.SHARE_ALONE, 2)  # two at the link, one per port
    assert [sw.read_register(n.LINK_LOADS[1], 4), sw.read_register(n.DEP_LINK_PORT, 8)] == [2, 4]
    # DATA from the host port: the port's share alone (two at port 2: 1 remote + this one).
    assert send_in(sw, 1, 1, 500, dst=RCV2, src=SENDER, t=MsgType.DATA) == rate(n.SHARE_ALONE, 2)
    assert sum(sw.read_register(n.LINK_LOADS[u], 1) for u in range(n.URGENCY_CLASSES)) == 0
    # A late dependency on the link: TOP there; the others wait at the link's reserve (capped
    # by the link's waiting entry, below their port shares).
    assert send_in(sw, 4, 3, -500, dst=RCV3) == link_rate(n.SHARE_TOP, 1)
    assert send_in(sw, 4, 1, 500, dst=RCV2) == link_rate(n.SHARE_WAITING, 2)
    # LAST: the late one leaves the link (and its port); dep 1 is top at the link again.
    assert send_in(sw, 4, 3, -500, dst=RCV3, flags=FLAG_LAST) is None
    assert sw.read_register(n.LINK_LOADS[0], 4) == 0
    assert send_in(sw, 4, 1, 500, dst=RCV2) == link_rate(n.SHARE_ALONE, 2)


def test_top_class_shares_of_an_in_link_follow_the_remaining_bytes() -> None:
    """Weighted link shares: at a contended link a top-class dependency's key is ceil(W / w),
    w = 2^k by its remaining bytes (1 below the unit 2^WEIGHT_BASE_BITS bytes, 16 at 8 units), W
    the class's weight sum there; a key beyond the link's entries (4 here) caps nothing (the
    port's share). The sums follow weight changes, a move to another link and LAST."""
    sw = link_switch()
    unit = 1 << n.WEIGHT_BASE_BITS
    w1, w2, w4, w16 = unit * 3 // 4, unit * 3 // 2, unit * 9 // 4, unit * 8

    def weight_sum(port: int) -> int:
        return sw.read_register(n.LINK_WEIGHTS[1], port)

    assert send_in(sw, 4, 1, 500, dst=RCV2, remaining=w16) == link_rate(n.SHARE_ALONE, 1)
    assert send_in(sw, 4, 2, 500, dst=RCV3, remaining=w1) == rate(n.SHARE_ALONE, 1)  # key 17
    assert (weight_sum(4), sw.read_register(n.DEP_LINK_WEIGHT, 7)) == (17, 16)
    assert send_in(sw, 4, 1, 500, dst=RCV2, remaining=w16) == link_rate(n.SHARE_ALONE, 2)  # ceil(17/16)
    assert send_in(sw, 4, 1, 500, dst=RCV2, remaining=w4) == link_rate(n.SHARE_ALONE, 2)  # w 4: ceil(5/4)
    assert send_in(sw, 4, 2, 500, dst=RCV3, remaining=w2) == link_rate(n.SHARE_ALONE, 3)  # w 2: ceil(6/2)
    assert weight_sum(4) == 6
    assert send_in(sw, 5, 1, 500, dst=RCV2, remaining=w4) == rate(n.SHARE_ALONE, 1)  # link 5: no entries
    assert (weight_sum(4), weight_sum(5)) == (2, 4)
    assert send_in(sw, 4, 2, 500, dst=RCV3, remaining=w2) == link_rate(n.SHARE_ALONE, 1)
    assert send_in(sw, 4, 2, 500, dst=RCV3, flags=FLAG_LAST) is None
    assert weight_sum(4) == 0


def test_a_dependency_on_a_new_path_leaves_its_old_in_link() -> None:
    """A dependency arriving on another in-link (its path changed) is counted there and leaves
    the one it was counted at; a link without link_share entries caps nothing."""
    sw = link_switch()
    assert send_in(sw, 4, 1, 500) == link_rate(n.SHARE_ALONE, 1)
    assert send_in(sw, 4, 2, 500, dst=RCV3) == link_rate(n.SHARE_ALONE, 2)
    assert send_in(sw, 5, 1, 500) == rate(n.SHARE_ALONE, 1)  # port 5: no entries, the port's share
    assert [sw.read_register(n.LINK_LOADS[1], p) for p in (4, 5)] == [1, 1]
    assert sw.read_register(n.DEP_LINK_PORT, 7) == 5
    assert send_in(sw, 4, 2, 500, dst=RCV3) == link_rate(n.SHARE_ALONE, 1)


def test_waiting_dependencies_on_an_in_link_share_what_its_top_class_left() -> None:
    """link_spare_level multiplies the link's waiting rate by the level of the range holding the
    link's top-class DATA bytes of the last window, or of this window so far when more (as
    spare_level does at a port); the result still never exceeds the port's share."""
    clock = [NOW]
    sw = link_switch(clock=clock)
    sw.write([Update(Op.INSERT, TableEntry(n.LINK_SPARE_LEVEL, {n.F_INGRESS_PORT: 4, n.F_TOP_BYTES: Range(0, 999)},
                                           n.ACT_SET_LINK_SPARE_LEVEL, {"level": 4}, priority=4))])
    assert send_in(sw, 4, 1, 500) == link_rate(n.SHARE_ALONE, 1)
    assert send_in(sw, 4, 3, -500, dst=RCV3) == link_rate(n.SHARE_TOP, 1)
    assert send_in(sw, 4, 1, 500) == 4 * link_rate(n.SHARE_WAITING, 1)  # 0 top bytes so far
    assert sw.read_register(n.DEP_LINK_CLASS, 7) == 2
    clock[0] += n.TOP_WINDOW_NS
    assert send_in(sw, 4, 1, 500) == 4 * link_rate(n.SHARE_WAITING, 1)
    assert sw.read_register(n.LINK_TOP_BYTES, 4) == 0
    for _ in range(7):  # 994 bytes of the top class in this window: still the range of level 4
        send_in(sw, 4, 3, -500, dst=RCV3, t=MsgType.DATA, remaining=BIG)
    assert send_in(sw, 4, 1, 500) == 4 * link_rate(n.SHARE_WAITING, 1)
    send_in(sw, 4, 3, -500, dst=RCV3, t=MsgType.DATA, remaining=BIG)  # 1136 bytes: past the range
    assert send_in(sw, 4, 1, 500) == link_rate(n.SHARE_WAITING, 1)  # level 1 at once
    assert sw.read_register(n.LINK_TOP_BYTES, 4) == 0  # the last window's count is unchanged


IDLE_NS, RELEASE, PREEMPT_NS = 10_000, 60_000, 100_000
BIG = 1_000_000  # remaining bytes of a transfer far from its end


def holder_on(sw: PipelineModel) -> PipelineModel:
    sw.write([Update(Op.MODIFY, TableEntry(n.HOLDER, {}, n.ACT_SET_HOLDER, {
        "idle_ns": IDLE_NS, "release_bytes": RELEASE, "preempt_ns": PREEMPT_NS}, is_default=True))])
    return sw


def test_sole_dependencies_take_the_port_one_at_a_time() -> None:
    """Two sole dependencies in the port's most urgent class count as one (load 1, the other
    waiting): the holder gets the TOP share, the other the WAITING share without the spare
    level; a REQUEST does not take the port from a silent holder, a DATA does after idle_ns."""
    clock = [NOW]
    sw = holder_on(switch(clock=clock))
    sw.write([Update(Op.INSERT, TableEntry(n.SPARE_LEVEL, {n.F_EGRESS_PORT: 2, n.F_TOP_BYTES: Range(0, 10**6)},
                                           n.ACT_SET_SPARE_LEVEL, {"level": 8}, priority=1))])
    assert send(sw, MsgType.REQUEST, 1, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_ALONE, 1)
    assert send(sw, MsgType.REQUEST, 2, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_TOP, 1)
    assert [sw.read_register(n.SOLE_LOADS[0], 2), sw.read_register(n.HOLDER_SLOT, 2)] == [2, 6]
    assert send(sw, MsgType.DATA, 1, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_WAITING, 1)
    clock[0] += IDLE_NS  # not more than idle_ns: the holder keeps the port
    assert send(sw, MsgType.DATA, 1, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_WAITING, 1)
    clock[0] += 1
    assert send(sw, MsgType.REQUEST, 1, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_WAITING, 1)
    assert send(sw, MsgType.DATA, 1, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_TOP, 1)
    assert sw.read_register(n.HOLDER_SLOT, 2) == 5
    assert send(sw, MsgType.DATA, 2, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_WAITING, 1)
    # A GRANT says FLAG_SOLE iff its dependency waits for the holder.
    assert [grant_flags(sw, d) for d in (2, 1)] == [FLAG_SOLE, 0]
    # No longer sole: one sole dependency left, so no holder; both share the class equally.
    assert send(sw, MsgType.DATA, 1, -500, remaining=BIG)[0] == rate(n.SHARE_ALONE, 2)
    assert [sw.read_register(n.SOLE_LOADS[0], 2), sw.read_register(n.HOLDER_SLOT, 2)] == [1, 0]
    assert send(sw, MsgType.DATA, 2, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_ALONE, 2)


def grant_flags(sw: PipelineModel, dep_id: int) -> int:
    """The flags of the GRANT a sole, late REQUEST of ``dep_id`` gets (FLAG_RENEW set in the
    REQUEST too: a GRANT keeps the packet's other flags)."""
    p = Packet(SENDER, RCV2, PROTO_UDP, SAFS_UDP_PORT, SAFS_UDP_PORT, 78)
    p.safs_version, p.safs_type, p.flow_id, p.dep_id = SAFS_VERSION, int(MsgType.REQUEST), 9, dep_id
    p.flags = FLAG_SOLE | FLAG_RENEW
    p.ts, p.remaining = (sw.now() - 500) & TIME_MASK, BIG
    (_, g), = sw.ingress(p, 1)
    assert g.safs_type == int(MsgType.GRANT) and g.flags & FLAG_RENEW
    return g.flags & FLAG_SOLE


def test_holder_releases_near_its_end_and_an_earlier_finish_preempts_it() -> None:
    """A holder with at most release_bytes left frees the port and keeps its TOP share; a sole
    dependency finishing more than preempt_ns before the holder takes the port."""
    sw = holder_on(switch())
    send(sw, MsgType.REQUEST, 1, -500, flags=FLAG_SOLE, remaining=BIG)
    assert send(sw, MsgType.REQUEST, 2, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_TOP, 1)
    assert send(sw, MsgType.REQUEST, 1, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_WAITING, 1)
    # 1's finish is earlier than 2's by exactly preempt_ns: not enough; 1 ns more preempts.
    early = -500 - PREEMPT_NS
    assert send(sw, MsgType.REQUEST, 1, early, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_WAITING, 1)
    assert send(sw, MsgType.REQUEST, 1, early - 1, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_TOP, 1)
    assert sw.read_register(n.HOLDER_SLOT, 2) == 5
    assert send(sw, MsgType.REQUEST, 1, -500, flags=FLAG_SOLE, remaining=RELEASE)[0] == rate(n.SHARE_TOP, 1)
    assert sw.read_register(n.HOLDER_SLOT, 2) == 0
    assert send(sw, MsgType.REQUEST, 2, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_TOP, 1)
    assert sw.read_register(n.HOLDER_SLOT, 2) == 6
    # The holder's LAST: it leaves the class and the port; the other takes it.
    assert send(sw, MsgType.DATA, 2, -500, flags=FLAG_SOLE | FLAG_LAST) is None
    assert sw.read_register(n.HOLDER_SLOT, 2) == 0
    assert send(sw, MsgType.REQUEST, 1, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_ALONE, 1)


def test_a_shorter_claimant_that_fits_in_the_holders_slack_preempts_it() -> None:
    """A sole dependency finishing 50 us before the holder (less than preempt_ns) takes the port
    when it is shorter and its time at 100 Gbit/s fits in the holder's slack; not when it is
    longer, nor when the holder's slack is shorter than its time."""
    at_100g = n.holder_time_ns
    short = 1_000_000  # the claimant's remaining bytes
    for holder_rem, holder_slack, preempts in (
            (4 * short, 200_000, True),  # shorter, and the holder can wait for it
            (short // 2, 200_000, False),  # longer than the holder
            (4 * short, at_100g(short) - 1, False)):  # the holder cannot wait that long
        sw = holder_on(switch())
        send(sw, MsgType.REQUEST, 1, 10**7, flags=FLAG_SOLE, remaining=BIG)  # 1 sole dependency: no holder yet
        got = send(sw, MsgType.REQUEST, 2, holder_slack, flags=FLAG_SOLE, remaining=holder_rem)[0]
        assert (got, sw.read_register(n.HOLDER_SLOT, 2)) == (rate(n.SHARE_TOP, 1), 6)
        # Dependency 1, in the same class (slack >= 0), now finishes 50 us before the holder.
        claim_slack = holder_slack + at_100g(holder_rem) - at_100g(short) - 50_000
        got = send(sw, MsgType.REQUEST, 1, claim_slack, flags=FLAG_SOLE, remaining=short)[0]
        assert (got, sw.read_register(n.HOLDER_SLOT, 2)) == ((rate(n.SHARE_TOP, 1), 5) if preempts
                                                              else (rate(n.SHARE_WAITING, 1), 6))


def test_without_the_holder_sole_dependencies_share_like_the_others() -> None:
    """holder idle_ns 0 (the table's default; SchedulerConfig.holder_idle_ns 0): FLAG_SOLE is
    counted but changes no share."""
    sw = switch()
    send(sw, MsgType.REQUEST, 1, -500, flags=FLAG_SOLE, remaining=BIG)
    assert send(sw, MsgType.REQUEST, 2, -500, flags=FLAG_SOLE, remaining=BIG)[0] == rate(n.SHARE_ALONE, 2)
    assert [sw.read_register(n.SOLE_LOADS[0], 2), sw.read_register(n.HOLDER_SLOT, 2)] == [2, 0]


def test_a_sole_dependency_behind_a_contended_in_link_is_not_grouped() -> None:
    """A dependency arriving on an in-link with link_share entries is not counted sole (its link
    share may be below the port's: as holder it would idle the port); one from a host port or
    from an in-link without entries is."""
    sw = holder_on(link_switch())
    send_in(sw, 4, 1, -500, flags=FLAG_SOLE)
    send_in(sw, 5, 2, -500, flags=FLAG_SOLE, dst=RCV3)
    send_in(sw, 1, 1, -500, flags=FLAG_SOLE, src=SENDER, t=MsgType.DATA)
    assert [sw.read_register(n.DEP_SOLE, slot) for slot in (7, 8, 5)] == [0, 1, 1]


def out_switch() -> PipelineModel:
    """link_switch() plus: the remote sender's address routed out of port 4, the sender's
    dep_ids 1 and 2 claimed with out slots 11 and 12, out_share entries for out-link 4."""
    sw = link_switch()
    ups = [Update(Op.INSERT, TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(REMOTE, 32)}, n.ACT_SET_EGRESS,
                                        {"port": 4, "dst_mac": 4}))]
    ups += [Update(Op.INSERT, TableEntry(n.DEP_CLAIM, {n.F_SRC_ADDR: SENDER, n.F_DEP_ID: d}, n.ACT_CLAIM,
                                         {"out_slot": 10 + d})) for d in (1, 2)]
    ups += [Update(Op.INSERT, TableEntry(n.OUT_SHARE, {n.F_EGRESS_PORT: 4, n.F_LOAD: load, n.F_MODE: mode},
                                         n.ACT_SET_OUT_SHARE, {"rate_kbps": link_rate(mode, load)}))
            for mode in (n.SHARE_ALONE, n.SHARE_TOP, n.SHARE_WAITING) for load in range(1, 5)]
    sw.write(ups)
    return sw


def send_out(sw: PipelineModel, dep_id: int, slack_ns: int, held: int, flags: int = 0) -> Packet:
    """A DATA of the sender's ``dep_id`` (from host port 1) to the remote host, holding rate
    ``held``: the packet leaving on out-link 4."""
    p = Packet(SENDER, REMOTE, PROTO_UDP, SAFS_UDP_PORT, SAFS_UDP_PORT, 142, payload=64)
    p.safs_version, p.safs_type, p.flags, p.flow_id, p.dep_id = SAFS_VERSION, int(MsgType.DATA), flags, 9, dep_id
    p.ts = (sw.now() + slack_ns) & TIME_MASK
    p.rate_kbps, p.epoch = held, 3
    (port, out), = sw.ingress(p, 1)
    assert port == 4
    return out


def grant_back(sw: PipelineModel, dep_id: int, rate_kbps: int) -> int:
    """A GRANT from the remote receiver's ToR to the sender arriving on port 4: its rate out."""
    g = Packet(REMOTE, SENDER, PROTO_UDP, SAFS_UDP_PORT, SAFS_UDP_PORT, 142)
    g.safs_version, g.safs_type, g.flow_id, g.dep_id = SAFS_VERSION, int(MsgType.GRANT), 9, dep_id
    g.rate_kbps, g.epoch = rate_kbps, 3
    (port, out), = sw.ingress(g, 4)
    assert port == 1
    return out.rate_kbps


def test_out_link_share_caps_the_grants_of_the_dependencies_leaving_on_it() -> None:
    """out_share at the sender's ToR: the host's claimed dependencies are counted at the out-link
    their DATA leaves on, by urgency; a DATA holding more than its cap (by over 1/256) leaves
    holding 0, one holding it (within 1/32) with FLAG_CAPPED, a host's own CAPPED is cleared;
    GRANTs coming back are capped to the share of the dependency's last packet; LAST uncaps."""
    sw = out_switch()
    alone = link_rate(n.SHARE_ALONE, 1)
    assert send_out(sw, 1, -500, 2 * alone).rate_kbps == 0
    assert (sw.read_register(n.OUT_LOADS[0], 4), sw.read_register(n.DEP_OUT_PORT, 11)) == (1, 4)
    out = send_out(sw, 1, -500, alone - alone // 40)
    assert (out.rate_kbps, out.flags & FLAG_CAPPED) == (alone - alone // 40, FLAG_CAPPED)
    out = send_out(sw, 1, -500, alone // 2, flags=FLAG_CAPPED)
    assert (out.rate_kbps, out.flags & FLAG_CAPPED) == (alone // 2, 0)
    assert grant_back(sw, 1, 2 * alone) == alone and grant_back(sw, 1, alone // 3) == alone // 3
    assert grant_back(sw, 9, 2 * alone) == 2 * alone  # no claim: not capped
    # dep 2, less urgent, waits at the link's reserve; dep 1's next DATA holds the TOP share.
    assert send_out(sw, 2, 500, 2 * alone).rate_kbps == 0
    assert sw.read_register(n.DEP_OUT_RATE, 12) == link_rate(n.SHARE_WAITING, 1)
    send_out(sw, 1, -500, alone)
    assert grant_back(sw, 1, 2 * alone) == link_rate(n.SHARE_TOP, 1)
    send_out(sw, 1, -500, alone, flags=FLAG_LAST)
    assert grant_back(sw, 1, 2 * alone) == 2 * alone and sw.read_register(n.OUT_LOADS[0], 4) == 0


def test_a_receivers_tor_pushes_no_grant_for_a_held_rate_its_out_link_caps() -> None:
    """At the receiver's ToR, a DATA holding less than its share (by over 1/32) gets a GRANT
    pushed, unless it says FLAG_CAPPED (its sender's ToR holds it there); above the share it is
    pushed either way."""
    sw = switch()
    share = send(sw, MsgType.REQUEST, 1, 500)
    assert share is not None
    low, high = (share[0] // 2, share[1]), (2 * share[0], share[1])
    assert send(sw, MsgType.DATA, 1, 500, held=low) is not None
    assert send(sw, MsgType.DATA, 1, 500, held=low, flags=FLAG_CAPPED) is None
    assert send(sw, MsgType.DATA, 1, 500, held=high, flags=FLAG_CAPPED) is not None

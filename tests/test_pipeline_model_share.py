"""Share grants in the pipeline model (safs.targets.pipeline_model, grant_enforcer.p4's
update_share): the cases ptf_tests/differential.py found where the model and BMv2 disagreed.

Setup: sender 10.0.0.1 behind port 1, two receivers on receiver ports 2 and 3, two share
dependencies (the sender's dep_ids 1 and 2, slots 5 and 6), port_share entries for loads 1..4 of each mode on
both ports, slack classes late -> 6, slack >= 0 -> 5 (the tests rewrite that one's queue).
"""

from __future__ import annotations

import pytest

from safs.core import p4names as n
from safs.core.packet import PROTO_UDP, Packet
from safs.core.protocol import FLAG_LAST, SAFS_UDP_PORT, SAFS_VERSION, MsgType
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
         held: tuple[int, int] = (0, 0)) -> tuple[int, int, int] | None:
    """One REQUEST or DATA of the sender's ``dep_id``; the (rate, epoch, lease) of the GRANT it
    produces, if any."""
    p = Packet(SENDER, dst, PROTO_UDP, SAFS_UDP_PORT, SAFS_UDP_PORT, 142, payload=64)
    p.safs_version, p.safs_type, p.flags, p.flow_id, p.dep_id = SAFS_VERSION, int(t), flags, 9, dep_id
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


def test_waiting_dependencies_share_what_the_top_class_left_in_the_last_window() -> None:
    """spare_level: a waiting dependency's rate is the SHARE_WAITING entry times the level of
    the range holding the port's top-class DATA bytes of the last whole TOP_WINDOW_NS (default
    level 1); a window silent throughout counts 0 bytes; waiting DATA does not count."""
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
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == 8 * waiting  # the window is not over
    clock[0] += n.TOP_WINDOW_NS
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == 3 * waiting  # 1420 bytes last window
    assert sw.read_register(n.PORT_TOP_BYTES, 2) == 1420
    assert sw.read_register(n.PORT_TOP_BYTES, 3) == 0  # per port
    for _ in range(15):
        send(sw, MsgType.DATA, 1, -500, held=(rate(n.SHARE_TOP, 1), 2))
    clock[0] += n.TOP_WINDOW_NS
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == waiting  # 2130 bytes: no range, level 1
    clock[0] += 2 * n.TOP_WINDOW_NS
    assert send(sw, MsgType.REQUEST, 2, 500)[0] == 8 * waiting  # a silent window: 0 bytes
    assert send(sw, MsgType.REQUEST, 1, -500)[0] == rate(n.SHARE_TOP, 1)  # the top class keeps its share

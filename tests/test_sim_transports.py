"""SAFS and DCTCP host transports on a one-switch star with a stand-in receiver ToR.

The stand-in answers REQUESTs with a grant the test controls and pushes a GRANT by the v2 rule
of docs/protocol.md (the rate a DATA holds is off the grant's, it holds epoch 0 or sets RENEW;
never for LAST), so the transport's grant handling (:class:`SafsDependency`) is tested apart
from the allocator and the pipeline model.
"""

from __future__ import annotations

import pytest

from safs.core.errors import InvalidInput
from safs.core.packet import PROTO_UDP, Packet
from safs.core.protocol import (
    ECN_CE,
    ECN_ECT0,
    EPOCH_NONE,
    FLAG_BACKGROUND,
    FLAG_LAST,
    FLAG_RENEW,
    FLAG_RESENT,
    FLAG_SOLE,
    QUEUE_CONTROL,
    SAFS_UDP_PORT,
    SAFS_VERSION,
    MsgType,
)
from safs.experiments.sim.engine import Engine
from safs.experiments.sim.network import Network
from safs.hosts.dctcp import DctcpConfig, DctcpReceiver, DctcpSender, dctcp_k_packets
from safs.hosts.safs import (
    DATA_OVERHEAD_BYTES,
    ReceiverAdmission,
    SafsConfig,
    SafsDependency,
    SafsReceiver,
    SafsSender,
    SendScheduler,
)
from safs.hosts.stats import TransportStats

G = 1_000_000_000


def push_wanted(held_kbps: int, grant_kbps: int, epoch: int, flags: int) -> bool:
    """The receiver ToR's in-band push rule (docs/protocol.md, "What switches do")."""
    if flags & FLAG_LAST:
        return False
    # held more than 1/32 of the grant below it, or more than 1/16 above it
    off = held_kbps < grant_kbps - (grant_kbps >> 5) or held_kbps - grant_kbps > (grant_kbps >> 4)
    return off or epoch == EPOCH_NONE or bool(flags & FLAG_RENEW)


class StandInToR:
    """Routes by destination; control 7, SAFS DATA 4, others 0; ECN above ``k``; answers
    REQUESTs for hosts in ``receivers`` with ``grant`` = (rate_bps, epoch, lease_ns) (or the
    receiver port's in ``port_grants``; ``background_grant`` for packets with FLAG_BACKGROUND,
    the least urgent class) and pushes it to DATA by :func:`push_wanted`. Records the REQUESTs
    (with their flags), the pushes, the DATA that asked for a renewal and every DATA's (time,
    flow id, flags, epoch, held rate)."""

    def __init__(self, routes: dict[int, int], receivers: set[int], k: int = 10**9) -> None:
        self.routes = routes
        self.receivers = receivers
        self.k = k
        self.clock = lambda: 0
        self.grant: tuple[int, int, int] | None = None
        self.port_grants: dict[int, tuple[int, int, int]] = {}  # receiver port -> its own grant
        self.background_grant: tuple[int, int, int] | None = None  # for packets with FLAG_BACKGROUND
        self.answering = True
        self.holder_wait = False  # GRANTs say FLAG_SOLE: "waiting for the port's holder"
        self.requests = 0
        self.request_times: list[int] = []
        self.request_slack: list[int] = []  # latest start carried by each REQUEST minus its arrival time
        self.request_flags: list[tuple[int, int, int]] = []  # (time, dep_id, flags) of each REQUEST
        self.pushes = 0
        self.push_times: list[int] = []
        self.renewals = 0  # DATA with RENEW
        self.data_log: list[tuple[int, int, int, int, int]] = []  # (time, flow_id, flags, epoch, rate_kbps)
        self.data_slack: list[tuple[int, int]] = []  # (flow_id, latest start carried minus arrival time)
        self.drop_data: set[tuple[int, int]] = set()  # (flow_id, remaining) to drop once
        self.drop_done_once = False

    def _grant_of(self, port: int, flags: int = 0) -> tuple[int, int, int] | None:
        if flags & FLAG_BACKGROUND and self.background_grant is not None:
            return self.background_grant
        return self.port_grants.get(port, self.grant)

    def _grant_pkt(self, to: Packet) -> Packet:
        rate, epoch, lease = self._grant_of(self.routes[to.dst], to.flags)  # type: ignore[misc]
        g = Packet(to.dst, to.src, PROTO_UDP, to.dport, to.sport, 78)
        g.safs_version, g.safs_type, g.flow_id, g.dep_id = SAFS_VERSION, int(MsgType.GRANT), to.flow_id, to.dep_id
        g.rate_kbps, g.epoch, g.lease_us = rate // 1000, epoch, lease // 1000
        g.flags = to.flags | FLAG_SOLE if self.holder_wait else to.flags & ~FLAG_SOLE
        g.priority = QUEUE_CONTROL
        return g

    def ingress(self, pkt: Packet, in_port: int) -> list[tuple[int, Packet]]:
        port = self.routes[pkt.dst]
        t = pkt.safs_type
        if t == 0:
            pkt.priority = 0
            return [(port, pkt)]
        if t == MsgType.DATA:
            key = (pkt.flow_id, pkt.remaining)
            if key in self.drop_data:
                self.drop_data.discard(key)
                return []
            pkt.priority = 4
            out = [(port, pkt)]
            self.data_log.append((self.clock(), pkt.flow_id, pkt.flags, pkt.epoch, pkt.rate_kbps))
            self.data_slack.append((pkt.flow_id, pkt.ts - self.clock()))
            self.renewals += bool(pkt.flags & FLAG_RENEW)
            grant = self._grant_of(port, pkt.flags)
            if (port in self.receivers and self.answering and grant is not None
                    and push_wanted(pkt.rate_kbps, grant[0] // 1000, pkt.epoch, pkt.flags)):
                self.pushes += 1
                self.push_times.append(self.clock())
                out.append((self.routes[pkt.src], self._grant_pkt(pkt)))
            return out
        if t == MsgType.REQUEST and port in self.receivers:
            self.requests += 1
            self.request_times.append(self.clock())
            self.request_slack.append(pkt.ts - self.clock())
            self.request_flags.append((self.clock(), pkt.dep_id, pkt.flags))
            if not self.answering or self._grant_of(port) is None:
                return []
            return [(self.routes[pkt.src], self._grant_pkt(pkt))]
        if t == MsgType.DONE and self.drop_done_once:
            self.drop_done_once = False
            return []
        pkt.priority = QUEUE_CONTROL
        return [(port, pkt)]

    def egress(self, pkt: Packet, egress_port: int, enq_qdepth: int) -> None:
        if pkt.ecn == ECN_ECT0 and enq_qdepth > self.k:
            pkt.ecn = ECN_CE


def star(n: int, rate_bps: int, buffer_bytes: int = 1 << 20, k: int = 10**9, delay_ns: int = 1000):
    eng = Engine(3)
    net = Network(eng)
    ips = [0x0A000001 + i for i in range(n)]
    for i, ip in enumerate(ips):
        net.add_host(f"h{i}", ip)
    tor = StandInToR({ip: i + 1 for i, ip in enumerate(ips)}, receivers=set(range(1, n + 1)), k=k)

    def make(name, clock):
        tor.clock = clock
        return tor

    net.add_switch("tor", make)
    for i in range(n):
        net.connect(f"h{i}", 0, "tor", i + 1, rate_bps, delay_ns, buffer_bytes)
    return eng, net, tor


class Flow:
    """Wires a sender and a receiver into the hosts and records completion."""

    def __init__(self) -> None:
        self.finish_ns: int | None = None
        self.closed = False
        self.arrivals: list[tuple[int, int]] = []  # (time, payload) of DATA at the receiver

    def on_finish(self, fid: int, t: int) -> None:
        self.finish_ns = t

    def on_closed(self, fid: int) -> None:
        self.closed = True


def safs_flow(eng, net, src: int, dst: int, fid: int, size: int, cfg: SafsConfig, stats: TransportStats,
              nbts: int | None = None, dep: SafsDependency | None = None,
              admission: ReceiverAdmission | None = None,
              firm: bool = False) -> tuple[SafsSender, SafsReceiver, Flow]:
    """Transfer ``fid`` of ``dep`` (None: a dependency of its own, per-transfer mode), started now;
    ``admission``: its receiver's; ``firm``: its deadline is firm (both ends are told)."""
    s, d = net.hosts[f"h{src}"], net.hosts[f"h{dst}"]
    rec = Flow()
    rx = SafsReceiver(eng, d, s.ip, fid, size, nbts, cfg, stats, rec.on_finish, admission, firm)
    orig = rx.receive

    def spy(pkt: Packet) -> None:
        rec.arrivals.append((eng.now, pkt.payload))
        orig(pkt)

    d.receivers[fid] = type("Spy", (), {"receive": staticmethod(spy)})()
    tx = SafsSender(eng, s, d.ip, fid, size, nbts, False, cfg, stats, rec.on_closed, dep, firm=firm)
    s.senders[fid] = tx
    tx.start()
    return tx, rx, rec


def dependency(eng, net, src: int, dst: int, dep_id: int, cfg: SafsConfig, stats: TransportStats,
               scheduler: SendScheduler | None = None) -> SafsDependency:
    """The sender side of dependency ``dep_id`` from h<src> to h<dst>, registered at its host
    (GRANTs reach it by dep_id, whichever transfer they name); ``scheduler``: its host's."""
    s, d = net.hosts[f"h{src}"], net.hosts[f"h{dst}"]
    dep = SafsDependency(eng, s, d.ip, dep_id, False, cfg, stats, scheduler)
    s.dependencies[dep_id] = dep
    return dep


def rate_between(arrivals: list[tuple[int, int]], t0: int, t1: int) -> float:
    """Wire bit/s of DATA that arrived in [t0, t1)."""
    wire = sum(p + DATA_OVERHEAD_BYTES for t, p in arrivals if t0 <= t < t1)
    return wire * 8 * G / (t1 - t0)


# ---------------------------------------------------------------------------------- SAFS

@pytest.mark.parametrize("fraction", [0.25, 0.0])
def test_a_dependency_yields_while_more_urgent_grants_take_its_nic_and_claims_back_after(fraction: float) -> None:
    """h1 sends 2 MB to h0 due at 300 µs (dependency 1, granted 99 Gbit/s) and 1 MB to h2 due
    at 10 ms (dependency 2, granted 50 Gbit/s, or 2 Gbit/s in the least urgent class).
    Dependency 1's grant leaves dependency 2 less than a quarter of h1's NIC, so once it waits
    for the NIC it yields: a REQUEST with FLAG_BACKGROUND, and its DATA carry the flag; once
    dependency 1 has sent its last byte it claims its place back (a REQUEST without the flag,
    then DATA without it). The urgent transfer gets nearly all of the NIC either way: with
    ``nic_yield_fraction`` 0 no packet carries the flag, and dependency 2's packets fill the
    urgent one's gaps, which catches up what they delay (sender rule 5c)."""
    eng, net, tor = star(3, 100 * G)
    tor.port_grants = {1: (99 * G, 1, 10_000_000), 3: (50 * G, 2, 10_000_000)}
    tor.background_grant = (2 * G, 3, 10_000_000)  # the waiting share of the least urgent class
    cfg = SafsConfig(default_rate_bps=1 * G, nic_yield_fraction=fraction)
    stats = TransportStats()
    sched = SendScheduler(eng, 100 * G, cfg.urgency_quantum_ns)
    urgent_dep = dependency(eng, net, 1, 0, 1, cfg, stats, sched)
    busy_dep = dependency(eng, net, 1, 2, 2, cfg, stats, sched)
    _, _, urgent = safs_flow(eng, net, 1, 0, 1, 2_000_000, cfg, stats, nbts=300_000, dep=urgent_dep)
    _, _, busy = safs_flow(eng, net, 1, 2, 2, 1_000_000, cfg, stats, nbts=10_000_000, dep=busy_dep)
    eng.run(20_000_000)
    assert urgent.finish_ns is not None and busy.finish_ns is not None
    last_urgent = max(t for t, fid, *_ in tor.data_log if fid == 1)
    flagged = [t for t, fid, flags, *_ in tor.data_log if fid == 2 and flags & FLAG_BACKGROUND]
    requests = [(t, flags & FLAG_BACKGROUND) for t, dep_id, flags in tor.request_flags if dep_id == 2]
    if not fraction:
        assert not flagged and all(not bg for _, bg in requests) and busy_dep.yields == 0
        assert urgent.finish_ns < 2_000_000 * 8 * 1.15 * G // (99 * G) < busy.finish_ns
        return
    assert busy_dep.yields == 1 and not busy_dep.yielded and urgent_dep.yields == 0
    yielded_at = next(t for t, bg in requests if bg)
    claimed_at = next(t for t, bg in requests if not bg and t > yielded_at)
    assert yielded_at < 10_000 and last_urgent <= claimed_at < last_urgent + 10_000
    assert flagged and all(yielded_at <= t < claimed_at for t in flagged)
    assert any(t > claimed_at for t, fid, flags, *_ in tor.data_log if fid == 2 and not flags & FLAG_BACKGROUND)
    assert urgent.finish_ns < 2_000_000 * 8 * 1.15 * G // (99 * G) < busy.finish_ns

def test_safs_sends_at_default_rate_then_at_granted_rate_and_completes() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G)
    stats = TransportStats()
    tor.grant = (5 * G, 1, 1_000_000)
    tx, rx, rec = safs_flow(eng, net, 1, 0, 1, 4_000_000, cfg, stats, nbts=50_000_000)
    eng.run(50_000_000)
    assert rec.finish_ns is not None and rec.closed
    assert rx.received == 4_000_000
    # Paced at the grant: wire rate within 2 % of 5 Gbit/s over the middle of the transfer.
    mid = rate_between(rec.arrivals, 1_000_000, rec.finish_ns - 1_000_000)
    assert 0.98 * 5 * G <= mid <= 1.02 * 5 * G
    # The unscheduled bytes leave at line rate (100 Gbit/s); the rest is paced at the grant.
    seg = cfg.segment_bytes
    unscheduled = -(-cfg.unscheduled_bytes // seg) * seg
    wire_bytes = (4_000_000 - unscheduled) + DATA_OVERHEAD_BYTES * (-(-(4_000_000 - unscheduled) // seg))
    ideal = wire_bytes * 8 * G // (5 * G)
    gap = (cfg.mtu_bytes + 14) * 8 * G // (5 * G)  # the last packet needs no pacing gap after it
    assert ideal - gap <= rec.finish_ns <= ideal * 1.05
    assert stats.retransmitted_bytes == 0 and stats.lease_fallbacks == 0
    # Removed state: the sender is closed, so later GRANTs are ignored.
    assert tx.closed


def test_safs_without_grant_stays_at_default_rate() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=2 * G)
    stats = TransportStats()
    tx, _, rec = safs_flow(eng, net, 1, 0, 1, 2_000_000, cfg, stats, nbts=10**9)
    eng.run(10**9)
    assert rec.finish_ns is not None
    assert tx.epoch == EPOCH_NONE
    assert 0.98 * 2 * G <= rate_between(rec.arrivals, 100_000, rec.finish_ns - 100_000) <= 1.02 * 2 * G


def test_safs_renews_its_lease_in_band_before_it_runs_out() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G)
    stats = TransportStats()
    tor.grant = (2 * G, 1, 1_000_000)  # 1 ms lease; the flow lasts ~8 ms
    tx, _, rec = safs_flow(eng, net, 1, 0, 1, 2_000_000, cfg, stats, nbts=10**9)
    eng.run(10**9)
    assert rec.finish_ns is not None and rec.finish_ns > 7_000_000
    assert stats.lease_fallbacks == 0
    # One REQUEST at start; then a DATA with RENEW once per 0.75 ms of lease while data is left,
    # each answered by a GRANT that renews the lease (no more REQUESTs).
    assert tor.requests == 1
    expected = rec.finish_ns // 750_000
    assert expected - 2 <= tor.renewals <= expected + 1
    assert 0.98 * 2 * G <= rate_between(rec.arrivals, 500_000, rec.finish_ns - 100_000) <= 1.02 * 2 * G


def test_safs_falls_back_to_default_rate_when_lease_expires() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G)
    stats = TransportStats()
    tor.grant = (4 * G, 1, 1_000_000)
    tx, _, rec = safs_flow(eng, net, 1, 0, 1, 3_000_000, cfg, stats, nbts=10**9)
    eng.run(2_000_000)
    assert tx.rate_bps == 4 * G and tx.epoch == 1
    assert tor.requests == 1
    tor.answering = False  # controller and switch stop granting: renewals go unanswered
    eng.run(3_200_000)  # the last renewal was at most 1 ms before: the lease has expired
    assert stats.lease_fallbacks == 1
    assert tx.rate_bps == 1 * G and tx.epoch == EPOCH_NONE and tx.lease_expiry_ns is None
    assert tor.requests == 2  # one REQUEST at the fallback, with data left to send
    eng.run(10**9)
    assert rec.finish_ns is not None
    assert 0.98 * G <= rate_between(rec.arrivals, 3_500_000, rec.finish_ns - 100_000) <= 1.02 * G
    assert stats.lease_fallbacks == 1  # default grants carry no lease: no repeated fallback
    assert tor.requests == 2  # grant_poll_ns 0: no REQUEST poll while it waits


def test_safs_refreshes_on_newer_epoch_pushed_in_band() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G)
    stats = TransportStats()
    tor.grant = (2 * G, 1, 10_000_000)
    tx, _, rec = safs_flow(eng, net, 1, 0, 1, 3_000_000, cfg, stats, nbts=10**9)
    eng.run(1_000_000)
    assert (tx.rate_bps, tx.epoch) == (2 * G, 1)
    requests = tor.requests
    tor.grant = (8 * G, 2, 10_000_000)  # installed grant changes; no REQUEST needed
    eng.run(1_100_000)  # one DATA gap at 2 Gbit/s (~36 µs) plus an RTT is enough
    assert (tx.rate_bps, tx.epoch) == (8 * G, 2)
    assert tor.requests == requests
    eng.run(10**9)
    assert rec.finish_ns is not None
    assert 0.98 * 8 * G <= rate_between(rec.arrivals, 1_200_000, rec.finish_ns - 50_000) <= 1.02 * 8 * G
    # an old grant arriving late does not roll the sender back
    late = Packet(net.hosts["h0"].ip, net.hosts["h1"].ip, PROTO_UDP, 1, 1, 78)
    late.safs_type, late.epoch, late.rate_kbps, late.lease_us = int(MsgType.GRANT), 1, 1, 1000
    tx2 = SafsSender(eng, net.hosts["h1"], net.hosts["h0"].ip, 9, 1000, None, False, cfg, stats, lambda f: None)
    tx2.dep.epoch, tx2.dep.rate_bps = 2, 8 * G
    tx2.receive(late)
    assert (tx2.epoch, tx2.rate_bps) == (2, 8 * G)
    # ... but the switch's default grant (epoch 0: no entry installed) always applies (rule 2)
    default = Packet(net.hosts["h0"].ip, net.hosts["h1"].ip, PROTO_UDP, 1, 1, 78)
    default.safs_type, default.epoch, default.rate_kbps = int(MsgType.GRANT), EPOCH_NONE, 3_000_000
    tx2.receive(default)
    assert (tx2.epoch, tx2.rate_bps) == (EPOCH_NONE, 3 * G)


def frame_gap_ns(cfg: SafsConfig, rate_bps: int) -> int:
    """Pacing gap of a full DATA packet at ``rate_bps``."""
    return -(-(cfg.segment_bytes + DATA_OVERHEAD_BYTES) * 8 * G // rate_bps)


def test_second_transfer_of_a_dependency_with_a_valid_grant_sends_no_request_and_starts_at_its_rate() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G)
    stats = TransportStats()
    tor.grant = (5 * G, 1, 20_000_000)  # a 20 ms lease
    dep = dependency(eng, net, 1, 0, 3, cfg, stats)
    _, _, rec1 = safs_flow(eng, net, 1, 0, 1, 500_000, cfg, stats, nbts=10**9, dep=dep)
    eng.run(2_000_000)
    assert rec1.closed and tor.requests == dep.requests == 1
    assert (dep.rate_bps, dep.epoch) == (5 * G, 1) and dep.lease_expiry_ns > eng.now
    _, _, rec2 = safs_flow(eng, net, 1, 0, 2, 500_000, cfg, stats, nbts=10**9, dep=dep)
    eng.run(10**9)
    assert rec2.closed
    assert tor.requests == dep.requests == 1  # the held grant was reused
    first = [(t, flags, epoch, kbps) for t, fid, flags, epoch, kbps in tor.data_log if fid == 1]
    second = [(t, flags, epoch, kbps) for t, fid, flags, epoch, kbps in tor.data_log if fid == 2]
    assert (second[0][2], second[0][3]) == (1, 5 * G // 1000)  # under the held grant from its first DATA
    gap = frame_gap_ns(cfg, 5 * G)
    gaps2 = [b[0] - a[0] for a, b in zip(second, second[1:-1])]  # the last, short one arrives sooner
    assert min(gaps2) >= gap - 1  # paced from its first byte: no unscheduled burst ...
    gaps1 = [b[0] - a[0] for a, b in zip(first, first[1:])]
    assert min(gaps1) < gap // 4  # ... which the first transfer, without a grant, did send
    assert tor.pushes == sum(1 for _, flags, epoch, _ in first if epoch == EPOCH_NONE)  # only epoch-0 DATA


def two_dependencies(order: str, rate_bps: int, sizes: tuple[int, int], deadlines: tuple[int, int],
                     gap_ns: int, grants: tuple[int, int] | None = None,
                     late_below_ns: int | None = None) -> tuple[Flow, Flow]:
    """h1 sends one transfer to h0 (``sizes[0]``, due ``deadlines[0]``) and, ``gap_ns`` later, one
    to h2 on another dependency; each receiver grants ``grants`` (default: the line rate, so only
    h1's NIC is contended). ``order``: ``urgency`` (one :class:`SendScheduler`, with
    ``late_below_ns``) or ``fifo``."""
    eng, net, tor = star(3, rate_bps)
    cfg = SafsConfig(default_rate_bps=rate_bps // 10)
    stats = TransportStats()
    first, second = grants or (rate_bps, rate_bps)
    tor.port_grants = {1: (first, 1, 20_000_000), 3: (second, 1, 20_000_000)}
    sched = (SendScheduler(eng, rate_bps, cfg.urgency_quantum_ns, late_below_ns=late_below_ns)
             if order == "urgency" else None)
    deps = dependency(eng, net, 1, 0, 3, cfg, stats, sched), dependency(eng, net, 1, 2, 4, cfg, stats, sched)
    _, _, rec0 = safs_flow(eng, net, 1, 0, 1, sizes[0], cfg, stats, nbts=deadlines[0], dep=deps[0])
    eng.run(gap_ns)
    _, _, rec1 = safs_flow(eng, net, 1, 2, 2, sizes[1], cfg, stats, nbts=deadlines[1], dep=deps[1])
    eng.run(10**9)
    assert rec0.finish_ns is not None and rec1.finish_ns is not None
    return rec0, rec1


def line_ns(size: int, rate_bps: int) -> int:
    """Wire time of ``size`` payload bytes in full DATA packets at ``rate_bps``."""
    seg = SafsConfig().segment_bytes
    return (size + -(-size // seg) * DATA_OVERHEAD_BYTES) * 8 * G // rate_bps


def test_send_scheduler_sends_the_more_urgent_dependency_first_and_keeps_the_nic_busy() -> None:
    rate = 10 * G
    mb = 1_000_000
    alone, both = line_ns(mb, rate), line_ns(2 * mb, rate)
    due = (10**9, alone + alone // 4)  # the later transfer is due 1.25x its own line-rate time
    lax, urgent = two_dependencies("urgency", rate, (mb, mb), due, 1_000)
    assert urgent.finish_ns <= due[1]  # served first although it started second
    assert lax.finish_ns <= 1.03 * both  # the NIC never idled meanwhile
    lax, urgent = two_dependencies("fifo", rate, (mb, mb), due, 1_000)
    assert urgent.finish_ns > due[1]  # interleaved in the NIC's FIFO: both finish about together
    assert lax.finish_ns <= 1.03 * both


@pytest.mark.parametrize("fraction", [1.0, 0.99])
def test_send_scheduler_serves_equally_urgent_dependencies_shortest_remaining_first(fraction: float) -> None:
    """Equally urgent dependencies one after another, fewest bytes left first, also when each
    is granted a little under the line (0.99: a port's usable rate after its 1% headroom), where
    each one's pacer falls due just after the NIC took the other's packet: the shorter one
    catches up that wait (sender rule 5c), without which they took turns packet by packet and
    the shorter one finished in 2.0x its time."""
    rate = 10 * G
    grant = int(rate * fraction)
    big, small = 2_000_000, 200_000
    due = 10**9  # the same deadline (one urgency quantum)
    first, short = two_dependencies("urgency", rate, (big, small), (due, due), 20_000, grants=(grant, grant))
    # it overtook the longer one (within 3 packet times: the packet on the wire when it started,
    # and its first DATA at the default rate until its REQUEST's GRANT came back)
    assert short.finish_ns <= 20_000 + line_ns(small, grant) + 3 * frame_gap_ns(SafsConfig(), rate)
    assert first.finish_ns <= 1.03 * line_ns(big + small, rate)
    _, short = two_dependencies("fifo", rate, (big, small), (due, due), 20_000)
    assert short.finish_ns >= 20_000 + 1.8 * line_ns(small, rate)  # shared the NIC with the longer one


def test_send_scheduler_with_late_transfers_last_sends_a_late_transfer_after_an_on_time_one() -> None:
    rate = 10 * G
    mb = 1_000_000
    alone = line_ns(mb, rate)
    due = (alone // 2, alone + alone // 4)  # the first is late from its first byte
    late, on_time = two_dependencies("urgency", rate, (mb, mb), due, 1_000)
    assert on_time.finish_ns > due[1]  # "first": the earlier deadline goes first, both miss
    late, on_time = two_dependencies("urgency", rate, (mb, mb), due, 1_000, late_below_ns=0)
    assert on_time.finish_ns <= due[1]  # "last": the on-time one overtook the late one ...
    assert late.finish_ns <= 1.03 * line_ns(2 * mb, rate)  # ... which used the NIC before and after
    assert SafsConfig(late_transfers="last", slack_thresholds_ns=(5_000, 10**5)).late_below_ns == 5_000
    assert SafsConfig(late_transfers="last").late_below_ns == 0 and SafsConfig().late_below_ns is None


def test_send_scheduler_requeues_a_waiting_dependency_that_got_a_more_urgent_transfer() -> None:
    """h1's dependency to h0 waits behind a more urgent one to h2 (its only transfer is lax);
    an urgent 100 KB transfer added to it must overtake the other dependency at once, not wait
    under the key the dependency had when it started waiting."""
    rate = 10 * G
    mb = 1_000_000
    eng, net, tor = star(3, rate)
    cfg = SafsConfig(default_rate_bps=rate // 10)
    stats = TransportStats()
    tor.port_grants = {1: (rate, 1, 20_000_000), 3: (rate, 1, 20_000_000)}
    sched = SendScheduler(eng, rate, cfg.urgency_quantum_ns)
    lax_dep = dependency(eng, net, 1, 0, 3, cfg, stats, sched)
    busy_dep = dependency(eng, net, 1, 2, 4, cfg, stats, sched)
    _, _, lax = safs_flow(eng, net, 1, 0, 1, mb, cfg, stats, nbts=10**9, dep=lax_dep)
    _, _, busy = safs_flow(eng, net, 1, 2, 2, mb, cfg, stats, nbts=10**8, dep=busy_dep)
    eng.run(100_000)
    assert lax_dep.sched_waiting  # the NIC is busy with the more urgent dependency
    small = 100_000
    due = eng.now + line_ns(small, rate) * 5 // 4
    _, _, urgent = safs_flow(eng, net, 1, 0, 3, small, cfg, stats, nbts=due, dep=lax_dep)
    eng.run(10**9)
    assert urgent.finish_ns is not None and urgent.finish_ns <= due  # it overtook the busy dependency
    assert busy.finish_ns is not None and lax.finish_ns is not None and busy.finish_ns < lax.finish_ns


class _Inbound:
    """A stand-in inbound transfer for :class:`ReceiverAdmission` (what it reads and calls)."""

    count = 0

    def __init__(self, missing: int, due: int, firm: bool = True) -> None:
        self.missing, self.no_bubble, self.rejected, self.firm = missing, due, False, firm
        _Inbound.count += 1
        self.flow_id, self.sender = _Inbound.count, 1

    def missing_bytes(self) -> int:
        return self.missing

    def reject(self) -> None:
        self.rejected = True


def test_receiver_admission_rejects_by_moore_and_hodgson() -> None:
    """At 8 Gbit/s (1 byte/ns): 200 KB due 0.5 ms, 1.2 MB due 1.2 ms, 1 MB due 1.3 ms finish at
    0.2 / 1.4 / 2.4 ms in deadline order. Moore and Hodgson drop the longest of the prefix when
    one is late: the 1.2 MB at the second, and then the rest fits (the fewest misses: one)."""
    eng = Engine(1)
    adm = ReceiverAdmission(eng, 8 * G)
    small, big, mid = _Inbound(200_000, 500_000), _Inbound(1_200_000, 1_200_000), _Inbound(1_000_000, 1_300_000)
    for rx in (mid, big, small):
        adm.arrived(rx)  # type: ignore[arg-type]  # a stand-in: no_bubble, rejected, missing_bytes, reject
    assert (small.rejected, big.rejected, mid.rejected) == (False, True, False)
    late = _Inbound(150_000, 1_250_000)  # 1.35 ms with the other two: infeasible, and the longest is mid
    adm.arrived(late)  # type: ignore[arg-type]
    assert (small.rejected, mid.rejected, late.rejected) == (False, True, False)
    adm.left(small)  # type: ignore[arg-type]  # a completion re-checks; nothing is taken back
    assert mid.rejected and big.rejected and not late.rejected
    feasible = ReceiverAdmission(eng, 8 * G)
    ok = [_Inbound(100_000, (i + 1) * 200_000) for i in range(5)]
    for rx in ok:
        feasible.arrived(rx)  # type: ignore[arg-type]
    assert not any(rx.rejected for rx in ok)


def test_receiver_admission_rejects_only_firm_transfers_by_default() -> None:
    """``firm_only`` (``receiver_admission`` "firm", the default): the same three transfers as
    above with the 1.2 MB soft (a pipeline's: late bytes are still needed) and the others firm.
    The soft one keeps its place and its time; the rule gives up the longest firm one instead
    (the 1 MB, which the soft one's time makes late); with only soft ones late, none goes."""
    eng = Engine(1)
    adm = ReceiverAdmission(eng, 8 * G)
    small, big, mid = (_Inbound(200_000, 500_000), _Inbound(1_200_000, 1_200_000, firm=False),
                       _Inbound(1_000_000, 1_300_000))
    for rx in (mid, big, small):
        adm.arrived(rx)  # type: ignore[arg-type]
    assert (small.rejected, big.rejected, mid.rejected) == (False, False, True)
    soft = ReceiverAdmission(eng, 8 * G)
    late = [_Inbound(1_000_000, 1_100_000, firm=False) for _ in range(3)]  # one fits, two do not
    for rx in late:
        soft.arrived(rx)  # type: ignore[arg-type]
    assert not any(rx.rejected for rx in late) and soft.firm_inbound == 0
    anyone = ReceiverAdmission(eng, 8 * G, firm_only=False)  # "moore-hodgson": any may go
    for rx in late:
        anyone.arrived(rx)  # type: ignore[arg-type]
    assert sum(rx.rejected for rx in late) == 2


@pytest.mark.parametrize("late_transfers", ["first", "last"])
def test_a_firm_transfer_is_given_up_when_late_under_either_late_rule(late_transfers: str) -> None:
    """One dependency from h1 to h0 (10 Gbit/s line, granted 1 Gbit/s) with a firm 1 MB due at
    2 ms (8 ms at the grant: its slack reaches 0 at about 1.36 ms) and a soft 100 KB due at 5 ms. The firm
    one starts first; once its slack is below 0 it is given up: the soft one goes first, and the
    firm one's DATA carry a latest start that puts it in the least urgent SAFS class at every
    switch (under "first" the slack of a transfer without deadline, under "last" just below 0).
    A soft transfer in the same state under "first" would stay the most urgent (see
    test_safs_late_transfer...); its receiver's admission never rejects it."""
    rate = 10 * G
    eng, net, tor = star(2, rate)
    cfg = SafsConfig(default_rate_bps=G, late_transfers=late_transfers)  # type: ignore[arg-type]
    stats = TransportStats()
    tor.grant = (G, 1, 20_000_000)
    dep = dependency(eng, net, 1, 0, 1, cfg, stats)
    firm_tx, _, firm = safs_flow(eng, net, 1, 0, 1, 1_000_000, cfg, stats, nbts=2_000_000, dep=dep, firm=True)
    eng.run(1_300_000)
    assert not firm_tx.given_up(eng.now)
    eng.run(1_500_000)
    assert firm_tx.given_up(eng.now) and not firm_tx.rejected  # late by its own slack, no DONE needed
    soft_tx, _, soft = safs_flow(eng, net, 1, 0, 2, 100_000, cfg, stats, nbts=5_000_000, dep=dep)
    eng.run(10**9)
    assert soft.finish_ns is not None and firm.finish_ns is not None and soft.finish_ns < firm.finish_ns
    assert not soft_tx.given_up(eng.now)
    slack = [sl for fid, sl in tor.data_slack if fid == 1]
    assert slack[0] > 0  # on time at first
    if late_transfers == "first":
        assert slack[-1] > 10_000_000  # beyond the last threshold: the class of no deadline
    else:
        assert -10_000 < slack[-1] < 0  # the late class, which "last" puts below every on-time one


def test_a_transfer_its_receiver_rejects_is_sent_late_after_the_host_s_on_time_ones() -> None:
    """Three senders to h0 (10 Gbit/s) at once, 1.2 MB due 1.2 ms, 1 MB due 1.3 ms, 200 KB due
    0.5 ms (h1 also sends 1 MB to h4, due 3 ms): h0's admission rejects the 1.2 MB; its sender
    learns it by a DONE with FLAG_LATE and from then on its DATA carry a late latest start (the
    switches' late class), and h1 sends its on-time transfer to h4 first."""
    rate = 10 * G
    eng, net, tor = star(5, rate)
    cfg = SafsConfig(default_rate_bps=rate // 10, late_transfers="last", receiver_admission="moore-hodgson")
    stats = TransportStats()
    tor.grant = (rate, 1, 20_000_000)
    adm = ReceiverAdmission(eng, rate, firm_only=False)  # "moore-hodgson": soft transfers may go too
    sched = SendScheduler(eng, rate, cfg.urgency_quantum_ns, late_below_ns=cfg.late_below_ns)
    to_h0, to_h4 = dependency(eng, net, 1, 0, 3, cfg, stats, sched), dependency(eng, net, 1, 4, 4, cfg, stats, sched)
    big_tx, big_rx, big = safs_flow(eng, net, 1, 0, 1, 1_200_000, cfg, stats, nbts=1_200_000, dep=to_h0,
                                    admission=adm)
    other_tx, _, other = safs_flow(eng, net, 1, 4, 4, 1_000_000, cfg, stats, nbts=3_000_000, dep=to_h4)
    safs_flow(eng, net, 2, 0, 2, 1_000_000, cfg, stats, nbts=1_300_000, admission=adm)
    safs_flow(eng, net, 3, 0, 3, 200_000, cfg, stats, nbts=500_000, admission=adm)
    eng.run(10**9)
    assert big_rx.rejected and big_tx.rejected and big.finish_ns is not None
    assert [r for r in adm.inbound] == []  # every transfer left when complete
    slack = [sl for fid, sl in tor.data_slack if fid == 1]
    assert slack[0] > 0 and slack[-1] < 0  # on time at first, in the late class after the rejection
    assert other.finish_ns is not None and other.finish_ns < big.finish_ns  # h1 sent its on-time one first
    assert not other_tx.rejected
    with pytest.raises(InvalidInput, match="receiver_admission"):
        SafsConfig(receiver_admission="moore-hodgson")  # late transfers first: nothing to send last


def test_send_scheduler_lets_a_less_urgent_dependency_use_what_the_urgent_grant_leaves() -> None:
    rate = 10 * G
    mb = 1_000_000
    # the urgent transfer (to h2) is granted a fifth of the line; the lax one fills the rest
    lax, urgent = two_dependencies("urgency", rate, (mb, mb), (10**9, 10**8), 1_000, grants=(rate, rate // 5))
    assert urgent.finish_ns >= 0.9 * line_ns(mb, rate // 5)  # within its grant
    assert lax.finish_ns <= 1.15 * line_ns(mb, rate * 4 // 5)  # at the rest of the line rate


@pytest.mark.parametrize("fraction", [0.6, 0.9])
def test_a_paced_dependency_catches_up_what_less_urgent_packets_delayed(fraction: float) -> None:
    """Catch-up (sender rule 5c): the urgent transfer is granted ``fraction`` of the line and the
    lax one the line; every lax packet handed to the NIC just before the urgent one falls due
    delays it by up to a packet time, which it makes up, so it finishes at its grant's time
    (without catch-up: 1.21x it at 0.6, 1.81x at 0.9) while the NIC never idles."""
    rate = 10 * G
    mb = 1_000_000
    grant = int(rate * fraction)
    lax, urgent = two_dependencies("urgency", rate, (mb, mb), (10**9, 10**8), 1_000, grants=(rate, grant))
    assert urgent.finish_ns <= 1.03 * line_ns(mb, grant)
    assert urgent.finish_ns >= 0.98 * line_ns(mb, grant)  # never ahead of its grant
    assert lax.finish_ns <= 1.01 * line_ns(2 * mb, rate)


@pytest.mark.parametrize("order", ["urgency", "fifo"])
def test_a_dependency_says_sole_while_no_other_of_its_host_has_data(order: str) -> None:
    """FLAG_SOLE on a DATA exactly while none of its host's other dependencies has data (the
    send scheduler knows them); never without a scheduler (``send_order: fifo``)."""
    rate = 10 * G
    eng, net, tor = star(3, rate)
    cfg = SafsConfig(default_rate_bps=rate // 10)
    stats = TransportStats()
    tor.grant = (rate, 1, 20_000_000)
    sched = SendScheduler(eng, rate, cfg.urgency_quantum_ns) if order == "urgency" else None
    first, second = dependency(eng, net, 1, 0, 3, cfg, stats, sched), dependency(eng, net, 1, 2, 4, cfg, stats, sched)
    safs_flow(eng, net, 1, 0, 1, 1_000_000, cfg, stats, nbts=10**9, dep=first)
    eng.run(50_000)
    _, _, rec = safs_flow(eng, net, 1, 2, 2, 200_000, cfg, stats, nbts=10**9, dep=second)
    eng.run(10**9)
    assert rec.finish_ns is not None
    sole = [(t, fid, bool(flags & FLAG_SOLE)) for t, fid, flags, _, _ in tor.data_log]
    if sched is None:
        assert not any(s for _, _, s in sole)
        return
    second_sent = [t for t, fid, _ in sole if fid == 2]
    assert not any(s for _, fid, s in sole if fid == 2)  # the first always had data meanwhile
    for t, fid, s in sole:
        if fid == 1 and t < 50_000:
            assert s, "alone before the second transfer started"
        if fid == 1 and t > max(second_sent) + 10_000:
            assert s, "alone again after the second sent its last byte"
    assert any(fid == 1 and not s for _, fid, s in sole)


@pytest.mark.parametrize("thresholds", [(), (0, 100_000, 1_000_000, 10_000_000)])
def test_a_slow_dependency_signals_when_its_slack_crosses_a_class_threshold(thresholds: tuple[int, ...]) -> None:
    """A dependency held at a small (waiting) share sends a REQUEST when its head transfer's
    slack falls below a slack-class threshold between two of its DATA packets, so the ToR sees
    it become more urgent then; without thresholds it sends none."""
    eng, net, tor = star(2, 10 * G)
    cfg = SafsConfig(default_rate_bps=1 * G, slack_thresholds_ns=thresholds)
    stats = TransportStats()
    tor.grant = (G // 2, 1, 20_000_000)  # one 9000-byte packet every ~145 us
    dep = dependency(eng, net, 1, 0, 3, cfg, stats)
    size = 1_000_000
    due = 2_000_000  # slack at the start ~ 2 ms - 0.8 ms: crosses 1 ms at ~0.2 ms, 100 us at ~1.1 ms
    safs_flow(eng, net, 1, 0, 1, size, cfg, stats, nbts=due, dep=dep)
    eng.run(1_300_000)
    signals = tor.request_times[1:]  # the first REQUEST is the transfer's own (no grant held yet)
    if not thresholds:
        assert signals == [] and dep.signals == 0
        return
    assert dep.signals == len(signals) == 2
    for slack, th in zip(tor.request_slack[1:], (1_000_000, 100_000)):
        assert th - 5_000 <= slack < th  # sent as the slack crossed th; a link delay on the way


def test_grants_reach_the_dependency_whichever_transfer_they_name() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G)
    stats = TransportStats()
    tor.grant = (5 * G, 1, 20_000_000)
    dep = dependency(eng, net, 1, 0, 3, cfg, stats)
    tx1, _, rec1 = safs_flow(eng, net, 1, 0, 1, 100_000, cfg, stats, nbts=10**9, dep=dep)
    eng.run(2_000_000)
    assert rec1.closed and tx1.closed
    g = Packet(net.hosts["h0"].ip, net.hosts["h1"].ip, PROTO_UDP, 1, 1, 78)
    g.safs_version, g.safs_type, g.flow_id, g.dep_id = SAFS_VERSION, int(MsgType.GRANT), 1, 3
    g.rate_kbps, g.epoch, g.lease_us = 7_000_000, 2, 20_000
    net.hosts["h1"].receive(g, 0)  # names the finished transfer 1: still the dependency's grant
    assert (dep.rate_bps, dep.epoch) == (7 * G, 2)


def test_last_is_set_on_the_last_packet_of_the_dependency_only() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G)
    stats = TransportStats()
    tor.grant = (5 * G, 1, 20_000_000)
    dep = dependency(eng, net, 1, 0, 3, cfg, stats)
    recs = [safs_flow(eng, net, 1, 0, fid, size, cfg, stats, nbts=10**9, dep=dep)[2]
            for fid, size in ((1, 300_000), (2, 120_000))]  # two transfers at once
    eng.run(3_000_000)
    assert all(r.closed for r in recs)
    last = [i for i, (_, _, flags, _, _) in enumerate(tor.data_log) if flags & FLAG_LAST]
    assert last == [len(tor.data_log) - 1]  # not at the end of the first transfer to finish
    sent = len(tor.data_log)
    rec3 = safs_flow(eng, net, 1, 0, 3, 50_000, cfg, stats, nbts=10**9, dep=dep)[2]  # active again
    eng.run(10**9)
    assert rec3.closed
    later = tor.data_log[sent:]
    assert [bool(flags & FLAG_LAST) for _, _, flags, _, _ in later] == [False] * (len(later) - 1) + [True]


def test_renew_is_set_once_renew_fraction_of_the_lease_has_passed() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G, renew_fraction=0.5)
    stats = TransportStats()
    lease = 2_000_000
    tor.grant = (2 * G, 1, lease)
    safs_flow(eng, net, 1, 0, 1, 2_000_000, cfg, stats, nbts=10**9)  # ~8 ms at 2 Gbit/s
    eng.run(10**9)
    renew_times = [t for t, _, flags, _, _ in tor.data_log if flags & FLAG_RENEW]
    first = renew_times[0]
    granted = max(t for t in tor.request_times + tor.push_times if t < first)  # the last GRANT it got
    rtt_slack = 20_000
    assert granted + lease // 2 <= first <= granted + lease // 2 + frame_gap_ns(cfg, 2 * G) + rtt_slack
    assert tor.requests == 1 and stats.lease_fallbacks == 0  # renewed in-band every half lease
    assert len(renew_times) >= 8 * 1_000_000 // (lease // 2) - 2


def test_an_idle_dependency_does_not_renew_and_asks_again_only_with_data() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G)
    stats = TransportStats()
    tor.grant = (5 * G, 1, 1_000_000)  # a 1 ms lease
    dep = dependency(eng, net, 1, 0, 3, cfg, stats)
    safs_flow(eng, net, 1, 0, 1, 100_000, cfg, stats, nbts=10**9, dep=dep)
    eng.at(5_000_000, lambda _: None)  # the clock reaches 5 ms even with nothing to do
    eng.run(5_000_000)  # idle long after its lease ran out
    assert eng.now == 5_000_000 and dep.lease_expiry_ns < eng.now
    assert tor.requests == 1 and not any(flags & FLAG_RENEW for _, _, flags, _, _ in tor.data_log)
    assert max(t for t, *_ in tor.data_log) < 1_000_000  # nothing sent while idle
    assert stats.lease_fallbacks == 0  # nothing to send: no fallback, no REQUEST yet
    _, _, rec2 = safs_flow(eng, net, 1, 0, 2, 100_000, cfg, stats, nbts=10**9, dep=dep)
    assert dep.epoch == EPOCH_NONE and dep.rate_bps == 1 * G and dep.fallbacks == 1
    eng.run(10**9)
    assert rec2.closed and tor.requests == 2  # one REQUEST, for the transfer that has data
    assert dep.epoch == 1


@pytest.mark.parametrize("poll_ns, backoff", [(0, 16), (10_000, 1), (10_000, 16)])
def test_a_sender_without_a_grant_polls_only_with_grant_poll_ns(poll_ns: int, backoff: int) -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G, grant_poll_ns=poll_ns, grant_poll_backoff=backoff)
    stats = TransportStats()  # tor.grant None: REQUESTs go unanswered, nothing is pushed
    _, _, rec = safs_flow(eng, net, 1, 0, 1, 1_000_000, cfg, stats, nbts=10**9)
    eng.run(10**9)
    assert rec.finish_ns is not None and rec.finish_ns > 7_000_000  # at the default rate
    if not poll_ns:
        assert tor.requests == 1  # no poll: the transfer's first REQUEST only
    elif backoff == 1:
        assert tor.requests >= rec.finish_ns // poll_ns // 2  # the per-transfer design: one every poll
    else:
        # 10, 20, 40, 80 µs, then every 160 µs while the rate stays the same
        polls = 4 + (rec.finish_ns - 150_000) // (backoff * poll_ns)
        assert polls - 2 <= tor.requests - 1 <= polls + 2


def test_a_slow_grant_polls_with_back_off_and_starts_over_when_its_rate_changes() -> None:
    """A grant too slow for in-band pushes (0.5 Gbit/s: a 9000-byte DATA every ~145 µs, more
    than 4 polls of 10 µs) polls at 10, 20, 40, 80 µs, then every 160 µs while the switch
    answers the same rate; a GRANT with another rate brings the 10 µs poll back."""
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G, grant_poll_ns=10_000, grant_poll_backoff=16)
    stats = TransportStats()
    tor.grant = (G // 2, 1, 20_000_000)
    tx, _, rec = safs_flow(eng, net, 1, 0, 1, 4_000_000, cfg, stats, nbts=10**9)
    eng.run(5_000_000)
    assert tx.rate_bps == G // 2
    before = tor.requests
    assert 25 <= before <= 40  # ~4 + 4.85 ms / 160 µs, not 500 (a fixed 10 µs poll)
    eng.run(5_320_000)
    assert tor.requests - before <= 3  # still every 160 µs
    tor.grant = (G // 4, 2, 20_000_000)
    mark = tor.requests
    eng.run(5_500_000)  # the next poll (<= 160 µs) gets the new rate: 10, 30, 70 µs after it
    assert tx.rate_bps == G // 4
    assert tor.requests - mark >= 3
    eng.run(10**9)
    assert rec.finish_ns is not None


def test_a_dependency_waiting_for_the_holder_polls_without_back_off() -> None:
    """GRANTs with FLAG_SOLE (the dependency waits for its port's holder): a slow grant polls
    every grant_poll_ns instead of backing off, so it takes the port within one poll of the
    holder leaving; once a GRANT without the flag comes, it backs off again."""
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G, grant_poll_ns=10_000, grant_poll_backoff=16)
    stats = TransportStats()
    tor.grant = (G // 2, 1, 20_000_000)
    tor.holder_wait = True
    tx, _, _ = safs_flow(eng, net, 1, 0, 1, 4_000_000, cfg, stats, nbts=10**9)
    eng.run(1_000_000)
    assert tx.dep.holder_wait and 90 <= tor.requests <= 102  # every 10 µs for 1 ms
    tor.holder_wait = False
    eng.run(1_020_000)
    mark = tor.requests
    eng.run(2_000_000)
    assert not tx.dep.holder_wait and tor.requests - mark <= 12  # 20, 40, 80, then every 160 µs


def test_a_dependency_waiting_for_the_holder_polls_however_fast_its_grant() -> None:
    """A waiting share fast enough for in-band pushes (3 Gbit/s: a DATA every ~24 µs, under 4
    polls) still polls every grant_poll_ns while its GRANTs say FLAG_SOLE: the holder may free
    the port between two of its DATA packets. Without the flag it does not poll at all."""
    for wait, lo, hi in ((True, 90, 102), (False, 0, 0)):
        eng, net, tor = star(2, 100 * G)
        cfg = SafsConfig(default_rate_bps=1 * G, grant_poll_ns=10_000, grant_poll_backoff=16)
        tor.grant = (3 * G, 1, 20_000_000)
        tor.holder_wait = wait
        safs_flow(eng, net, 1, 0, 1, 4_000_000, cfg, TransportStats(), nbts=10**9)
        eng.run(1_000_000)
        polls = tor.requests - 1  # the first REQUEST is the transfer's own (no grant held yet)
        assert lo <= polls <= hi, (wait, polls)


def test_safs_recovers_lost_data_and_lost_done() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=10 * G, rto_ns=200_000)
    stats = TransportStats()
    size = 10 * cfg.segment_bytes + 123
    # Lose the 3rd segment, the 7th, the last one, and the first DONE.
    tor.drop_data = {(1, size - 2 * cfg.segment_bytes), (1, size - 6 * cfg.segment_bytes), (1, 123)}
    tor.drop_done_once = True
    tx, rx, rec = safs_flow(eng, net, 1, 0, 1, size, cfg, stats, nbts=10**9)
    eng.run(10**9)
    assert rec.finish_ns is not None and rec.closed
    assert rx.received == size
    assert stats.retransmitted_bytes >= 3 * 123
    assert stats.timeouts >= 1


def test_a_hole_among_the_last_segments_is_nacked_after_the_reorder_window_without_a_probe() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=10 * G, rto_ns=50_000_000, reorder_window_ns=200_000)
    stats = TransportStats()
    size = 10 * cfg.segment_bytes
    tor.drop_data = {(1, 2 * cfg.segment_bytes)}  # the next-to-last segment; only the last follows it
    tx, rx, rec = safs_flow(eng, net, 1, 0, 1, size, cfg, stats, nbts=10**9)
    eng.run(10**9)
    assert rec.finish_ns is not None and rx.nacks == 1 and stats.timeouts == 0
    assert rec.finish_ns < cfg.reorder_window_ns + 100_000  # ~10 us of sending + window + RTT, not the 50 ms probe


def _data(rx: SafsReceiver, index: int, resent: bool = False) -> Packet:
    """DATA of segment ``index`` of ``rx``'s flow, as its sender would send it."""
    pkt = Packet(rx.sender, rx.src, PROTO_UDP, 40000, SAFS_UDP_PORT, 9000, rx.seg)
    pkt.safs_type, pkt.flow_id = int(MsgType.DATA), rx.flow_id
    pkt.remaining, pkt.flags = rx.size - index * rx.seg, FLAG_RESENT if resent else 0
    return pkt


def test_only_the_probe_duplicate_makes_a_receiver_nack_what_it_still_misses() -> None:
    eng, net, _tor = star(2, 100 * G)
    cfg = SafsConfig(reorder_window_ns=200_000)
    rec = Flow()
    rx = SafsReceiver(eng, net.hosts["h0"], net.hosts["h1"].ip, 1, 5 * cfg.segment_bytes, 10**9, cfg,
                      TransportStats(), rec.on_finish)
    for i in (0, 2, 4):  # segments 1 and 3 missing, maybe still in flight
        rx.receive(_data(rx, i))
    rx.receive(_data(rx, 2, resent=True))  # a spurious retransmission: counted, not answered
    assert rx.duplicates == 1 and rx.nacks == 0
    rx.receive(_data(rx, 4, resent=True))  # the sender's probe: NACK both holes at once
    assert rx.duplicates == 2 and rx.nacks == 1
    eng.run(10**9)  # both holes' reorder windows then expire: one NACK each time they were found
    assert rx.nacks == 3 and rec.finish_ns is None


def test_safs_config_rejects_bad_values() -> None:
    for kwargs, fld in [({"mtu_bytes": 50}, "mtu_bytes"), ({"default_rate_bps": 0}, "default_rate_bps"),
                        ({"renew_fraction": 1.0}, "renew_fraction"), ({"rto_ns": 0}, "rto_ns"),
                        ({"rto_ns": 10, "rto_max_ns": 5}, "rto_max_ns"), ({"send_order": "edf"}, "send_order"),
                        ({"urgency_quantum_ns": 0}, "urgency_quantum_ns")]:
        with pytest.raises(InvalidInput) as err:
            SafsConfig(**kwargs)
        assert err.value.field == fld


# ---------------------------------------------------------------------------------- DCTCP

def test_dctcp_k_scales_with_rate_and_mtu() -> None:
    assert dctcp_k_packets(10 * G, 1500) == 65  # the paper's value
    assert dctcp_k_packets(100 * G, 1500) == 650
    assert dctcp_k_packets(100 * G, 9000) == 109
    assert dctcp_k_packets(1 * G, 9000) == 2
    with pytest.raises(InvalidInput):
        dctcp_k_packets(0, 9000)


def test_dctcp_two_flows_share_a_bottleneck_with_ecn_and_few_drops() -> None:
    rate = 10 * G
    k = dctcp_k_packets(rate, 9000)
    eng, net, tor = star(3, rate, buffer_bytes=1 << 20, k=k)
    cfg = DctcpConfig()
    stats = TransportStats()
    rxs = []
    txs = []
    for i, fid in ((1, 1), (2, 2)):
        s, d = net.hosts[f"h{i}"], net.hosts["h0"]
        rx = DctcpReceiver(eng, d, s.ip, fid, None, stats, lambda f, t: None)
        tx = DctcpSender(eng, s, d.ip, fid, None, cfg, stats, lambda f: None)
        d.receivers[fid], s.senders[fid] = rx, tx
        rxs.append(rx)
        txs.append(tx)
    for tx in txs:
        tx.start()
    eng.run(10_000_000)
    before = [rx.rcv_nxt for rx in rxs]
    eng.run(30_000_000)
    got = [rx.rcv_nxt - b for rx, b in zip(rxs, before)]
    goodput = sum(got) * 8 * G / 20_000_000
    assert goodput >= 0.9 * rate * cfg.mss_bytes / (cfg.mss_bytes + 54)
    share = got[0] / sum(got)
    assert 0.4 <= share <= 0.6
    assert sum(rx.ce_seen for rx in rxs) > 0  # ECN did the work...
    assert all(tx.ecn_cuts > 10 for tx in txs)
    assert all(0.0 < tx.alpha < 1.0 for tx in txs)
    port = net.switches["tor"].ports[1]
    assert port.dropped() == 0  # ...not the buffer
    # queue stays near K, far below the buffer
    assert port.queued_packets <= 3 * k


def test_dctcp_finite_flow_completes_despite_losses() -> None:
    eng, net, tor = star(3, 10 * G, buffer_bytes=4 * 9054)  # tiny buffer: incast overflows
    cfg = DctcpConfig()
    stats = TransportStats()
    recs = []
    for i, fid in ((1, 1), (2, 2)):
        s, d = net.hosts[f"h{i}"], net.hosts["h0"]
        rec = Flow()
        rx = DctcpReceiver(eng, d, s.ip, fid, 2_000_000, stats, rec.on_finish)
        tx = DctcpSender(eng, s, d.ip, fid, 2_000_000, cfg, stats, rec.on_closed)
        d.receivers[fid], s.senders[fid] = rx, tx
        recs.append((rec, rx))
        tx.start()
    eng.run(10**9)
    assert net.drops() > 0
    assert stats.retransmitted_bytes > 0
    for rec, rx in recs:
        assert rec.finish_ns is not None and rec.closed and rx.rcv_nxt == 2_000_000


def test_dctcp_with_a_rocev2_identity_completes_and_carries_udp_4791_and_its_queue_pair() -> None:
    eng, net, tor = star(2, 10 * G)
    cfg = DctcpConfig(wire="rocev2")
    stats = TransportStats()
    s, d = net.hosts["h1"], net.hosts["h0"]
    seen: list[tuple[int, int, int, int]] = []
    rec = Flow()
    fid = (1 << 24) + 5  # the QP is the flow id's low 24 bits
    rx = DctcpReceiver(eng, d, s.ip, fid, 500_000, stats, rec.on_finish)
    tx = DctcpSender(eng, s, d.ip, fid, 500_000, cfg, stats, rec.on_closed)

    def spy(endpoint):  # noqa: ANN001, ANN202 - records what reaches an endpoint
        def receive(pkt: Packet) -> None:
            seen.append((pkt.proto, pkt.dport, pkt.roce_qp, pkt.payload))
            endpoint.receive(pkt)
        return type("Spy", (), {"receive": staticmethod(receive)})()

    d.receivers[fid], s.senders[fid] = spy(rx), spy(tx)
    tx.start()
    eng.run(10**9)
    assert rec.finish_ns is not None and rec.closed
    data = [x for x in seen if x[3] > 0]
    acks = [x for x in seen if x[3] == 0]
    assert data and acks and {x[:3] for x in data} == {x[:3] for x in acks} == {(PROTO_UDP, 4791, 5)}


def test_dctcp_config_rejects_bad_values() -> None:
    for kwargs, fld in [({"g": 0.0}, "g"), ({"min_rto_ns": 0}, "min_rto_ns"),
                        ({"initial_cwnd_segments": 0}, "initial_cwnd_segments"),
                        ({"min_rto_ns": 10, "max_rto_ns": 5}, "max_rto_ns"), ({"mtu_bytes": 10}, "mtu_bytes")]:
        with pytest.raises(InvalidInput) as err:
            DctcpConfig(**kwargs)
        assert err.value.field == fld

"""SAFS and DCTCP host transports on a one-switch star with a stand-in receiver ToR.

The stand-in answers REQUESTs with a grant the test controls and pushes a GRANT when DATA
carries an older epoch (the receiver-ToR behaviour of docs/protocol.md), so the transport's
grant handling is tested apart from the allocator and the pipeline model.
"""

from __future__ import annotations

import pytest

from safs.core.errors import InvalidInput
from safs.core.packet import PROTO_UDP, Packet
from safs.core.protocol import ECN_CE, ECN_ECT0, EPOCH_NONE, QUEUE_CONTROL, MsgType, epoch_newer
from safs.experiments.sim.engine import Engine
from safs.experiments.sim.network import Network
from safs.hosts.dctcp import DctcpConfig, DctcpReceiver, DctcpSender, dctcp_k_packets
from safs.hosts.safs import DATA_OVERHEAD_BYTES, SafsConfig, SafsReceiver, SafsSender
from safs.hosts.stats import TransportStats

G = 1_000_000_000


class StandInToR:
    """Routes by destination; control 7, SAFS DATA 4, others 0; ECN above ``k``; answers
    REQUESTs for hosts in ``receivers`` with ``grant`` = (rate_bps, epoch, lease_ns)."""

    def __init__(self, routes: dict[int, int], receivers: set[int], k: int = 10**9) -> None:
        self.routes = routes
        self.receivers = receivers
        self.k = k
        self.grant: tuple[int, int, int] | None = None
        self.answering = True
        self.requests = 0
        self.drop_data: set[tuple[int, int]] = set()  # (flow_id, remaining) to drop once
        self.drop_done_once = False

    def _grant_pkt(self, to: Packet) -> Packet:
        rate, epoch, lease = self.grant  # type: ignore[misc]
        g = Packet(to.dst, to.src, PROTO_UDP, to.dport, to.sport, 78)
        g.safs_version, g.safs_type, g.flow_id = 1, int(MsgType.GRANT), to.flow_id
        g.rate_kbps, g.epoch, g.lease_us = rate // 1000, epoch, lease // 1000
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
            if (port in self.receivers and self.answering and self.grant is not None
                    and epoch_newer(self.grant[1], pkt.epoch)):
                out.append((self.routes[pkt.src], self._grant_pkt(pkt)))
            return out
        if t == MsgType.REQUEST and port in self.receivers:
            self.requests += 1
            if not self.answering or self.grant is None:
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
    net.add_switch("tor", lambda name, clock: tor)
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
              nbts: int | None = None) -> tuple[SafsSender, SafsReceiver, Flow]:
    s, d = net.hosts[f"h{src}"], net.hosts[f"h{dst}"]
    rec = Flow()
    rx = SafsReceiver(eng, d, s.ip, fid, size, nbts, cfg, stats, rec.on_finish)
    orig = rx.receive

    def spy(pkt: Packet) -> None:
        rec.arrivals.append((eng.now, pkt.payload))
        orig(pkt)

    d.receivers[fid] = type("Spy", (), {"receive": staticmethod(spy)})()
    tx = SafsSender(eng, s, d.ip, fid, size, nbts, False, cfg, stats, rec.on_closed)
    s.senders[fid] = tx
    tx.start()
    return tx, rx, rec


def rate_between(arrivals: list[tuple[int, int]], t0: int, t1: int) -> float:
    """Wire bit/s of DATA that arrived in [t0, t1)."""
    wire = sum(p + DATA_OVERHEAD_BYTES for t, p in arrivals if t0 <= t < t1)
    return wire * 8 * G / (t1 - t0)


# ---------------------------------------------------------------------------------- SAFS

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


def test_safs_renews_its_lease_before_it_runs_out() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G)
    stats = TransportStats()
    tor.grant = (2 * G, 1, 1_000_000)  # 1 ms lease; the flow lasts ~8 ms
    tx, _, rec = safs_flow(eng, net, 1, 0, 1, 2_000_000, cfg, stats, nbts=10**9)
    eng.run(10**9)
    assert rec.finish_ns is not None and rec.finish_ns > 7_000_000
    assert stats.lease_fallbacks == 0
    # One REQUEST at start plus one per 0.75 ms of lease while data is left.
    expected = 1 + rec.finish_ns // 750_000
    assert expected - 2 <= tor.requests <= expected + 1
    assert 0.98 * 2 * G <= rate_between(rec.arrivals, 500_000, rec.finish_ns - 100_000) <= 1.02 * 2 * G


def test_safs_falls_back_to_default_rate_when_lease_expires() -> None:
    eng, net, tor = star(2, 100 * G)
    cfg = SafsConfig(default_rate_bps=1 * G)
    stats = TransportStats()
    tor.grant = (4 * G, 1, 1_000_000)
    tx, _, rec = safs_flow(eng, net, 1, 0, 1, 3_000_000, cfg, stats, nbts=10**9)
    eng.run(2_000_000)
    assert tx.rate_bps == 4 * G and tx.epoch == 1
    tor.answering = False  # controller and switch stop granting: renewals go unanswered
    eng.run(3_200_000)  # the last renewal was at most 1 ms before: the lease has expired
    assert stats.lease_fallbacks == 1
    assert tx.rate_bps == 1 * G and tx.epoch == EPOCH_NONE and tx.lease_expiry_ns is None
    eng.run(10**9)
    assert rec.finish_ns is not None
    assert 0.98 * G <= rate_between(rec.arrivals, 3_500_000, rec.finish_ns - 100_000) <= 1.02 * G
    assert stats.lease_fallbacks == 1  # default grants carry no lease: no repeated fallback


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
    tx2.epoch, tx2.rate_bps = 2, 8 * G
    tx2.receive(late)
    assert (tx2.epoch, tx2.rate_bps) == (2, 8 * G)
    # ... but the switch's default grant (epoch 0: no entry installed) always applies (rule 2)
    default = Packet(net.hosts["h0"].ip, net.hosts["h1"].ip, PROTO_UDP, 1, 1, 78)
    default.safs_type, default.epoch, default.rate_kbps = int(MsgType.GRANT), EPOCH_NONE, 3_000_000
    tx2.receive(default)
    assert (tx2.epoch, tx2.rate_bps) == (EPOCH_NONE, 3 * G)


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


def test_safs_config_rejects_bad_values() -> None:
    for kwargs, fld in [({"mtu_bytes": 50}, "mtu_bytes"), ({"default_rate_bps": 0}, "default_rate_bps"),
                        ({"renew_fraction": 1.0}, "renew_fraction"), ({"rto_ns": 0}, "rto_ns"),
                        ({"rto_ns": 10, "rto_max_ns": 5}, "rto_max_ns")]:
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


def test_dctcp_config_rejects_bad_values() -> None:
    for kwargs, fld in [({"g": 0.0}, "g"), ({"min_rto_ns": 0}, "min_rto_ns"),
                        ({"initial_cwnd_segments": 0}, "initial_cwnd_segments"),
                        ({"min_rto_ns": 10, "max_rto_ns": 5}, "max_rto_ns"), ({"mtu_bytes": 10}, "mtu_bytes")]:
        with pytest.raises(InvalidInput) as err:
            DctcpConfig(**kwargs)
        assert err.value.field == fld

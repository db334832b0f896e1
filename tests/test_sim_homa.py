"""Homa baseline (policy "homa", safs.hosts.homa): SRPT grants, unscheduled bytes,
overcommitment, CDF-derived priorities, loss recovery and config validation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from star import star as shared_star  # the shared one-switch test topology

from safs.core.distributions import SizeDistribution, load_distribution
from safs.core.errors import InvalidInput
from safs.core.packet import PROTO_HOMA, Packet
from safs.experiments.sim.config import SimConfig
from safs.experiments.sim.simulation import Simulation
from safs.experiments.workloads.api import FlowSpec
from safs.hosts.homa import (
    HOMA_CONTROL_BYTES,
    HOMA_DATA,
    HOMA_GRANT,
    HOMA_RESEND,
    NUM_QUEUES,
    RESEND_PRIORITY,
    HomaConfig,
    _In,
    _masses,
    _missing,
    homa_priorities,
    resolve,
)

US = 1_000


def star(n_hosts: int, delay_ns: int = 1000, buffer_bytes: int = 1 << 20):
    """One switch, hosts h0..h{n-1} at 10 Gbit/s."""
    return shared_star(n_hosts, "10Gbps", delay_ns, buffer_bytes, switch="sw")


class Messages:
    """Starts (sender, receiver, size, start_ns) messages; done when all finished."""

    def __init__(self, msgs: list[tuple[str, str, int, int]]) -> None:
        self.msgs = msgs
        self.finish: dict[int, int] = {}
        self.fids: list[int] = []

    def start(self, api: Any) -> None:
        for i, (s, r, size, t) in enumerate(self.msgs):
            api.call_at(t, self._starter(api, i, s, r, size))

    def _starter(self, api: Any, i: int, s: str, r: str, size: int) -> Callable[[], None]:
        def go() -> None:
            self.fids.append(api.start_flow(FlowSpec(s, r, size, None, f"m{i}", "background"),
                                            lambda f: self.finish.__setitem__(i, f)))
        return go

    def done(self) -> bool:
        return len(self.finish) == len(self.msgs)

    def metrics(self) -> dict[str, float]:
        return {}


class _TapNic:
    """A host NIC seen through a recorder (the Port itself has __slots__)."""

    def __init__(self, nic: Any, record: Callable[[Any], None]) -> None:
        self._nic = nic
        self._record = record

    def send(self, pkt: Any) -> bool:
        self._record(pkt)
        return self._nic.send(pkt)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._nic, name)


def tap(sim: Simulation, host: str, kinds: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """Record (time, type, flow id, priority) of Homa packets of ``kinds`` sent by ``host``."""
    log: list[tuple[int, int, int, int]] = []

    def record(pkt: Any) -> None:
        if pkt.flags in kinds:
            log.append((sim.engine.now, pkt.flags, pkt.flow_id, pkt.priority))

    homa_host = sim.binding.host(sim, sim.network.hosts[host])
    homa_host.nic = _TapNic(homa_host.nic, record)
    return log


def test_short_message_preempts_long_one_at_receiver() -> None:
    """SRPT: a 60 KB message (needs grants) arriving while a 2 MB one is being granted finishes
    first, close to its idle time, and the long one still finishes."""
    topo = star(3)
    sim = Simulation(topo, "homa", 1, SimConfig(mtu_bytes=1500))
    w = Messages([("h0", "h2", 2_000_000, 0), ("h1", "h2", 60_000, 200 * US)])
    res = sim.run(w)
    assert res.workload_done
    long_end, short_end = w.finish[0], w.finish[1]
    assert short_end < long_end
    idle = topo.min_transfer_ns("h1", "h2", 60_000, 1500)
    assert short_end - 200 * US < 1.5 * idle  # not stuck behind the long message's packets
    assert res.transport.control_packets > 0


def test_unscheduled_bytes_go_without_a_grant() -> None:
    """Before any GRANT can come back (long links), the sender has sent exactly its first
    rtt_bytes (whole packets) and nothing more."""
    topo = star(2, delay_ns=50 * US)
    rtt = 10_000
    sim = Simulation(topo, "homa", 1, SimConfig(mtu_bytes=1500, homa={"rtt_bytes": rtt}))
    data = tap(sim, "h0", (HOMA_DATA,))
    w = Messages([("h0", "h1", 100_000, 0)])
    sim.workload = w
    w.start(sim)
    sim.engine.run(90 * US)  # a GRANT needs >= 2 x 50 us of propagation to come back
    out = sim.binding.hosts["h0"].out[w.fids[0]]
    payload = sim.binding.params.max_payload
    assert not out.heard
    assert out.next == -(-rtt // payload) * payload
    assert len(data) == -(-rtt // payload)
    sim.engine.run(10_000 * US)
    assert w.done()


@pytest.mark.parametrize("overcommit", [2, 6])
def test_overcommitment_limits_granted_messages(overcommit: int) -> None:
    """Six equal 200 KB messages into one receiver: every GRANT goes to one of the
    ``overcommit`` messages with the fewest remaining bytes among those still needing grants
    (paper 3.5); with a limit of 6 the lower-ranked ones are granted too."""
    topo = star(7)
    sim = Simulation(topo, "homa", 1, SimConfig(mtu_bytes=1500, homa={"overcommit": overcommit,
                                                                       "sched_priorities": 6}))
    grants = tap(sim, "h6", (HOMA_GRANT,))
    rx = sim.binding.host(sim, sim.network.hosts["h6"])
    ranks: list[int] = []
    send = rx._control

    def control(dst: int, fid: int, kind: int, *args: Any) -> None:
        if kind == HOMA_GRANT:
            active = sorted((m.size - m.received, m.fid) for m in rx.inc.values()
                            if m.progress and (m.granted < m.size or m.fid == fid))
            ranks.append([f for _, f in active].index(fid))
        send(dst, fid, kind, *args)

    rx._control = control  # type: ignore[method-assign]
    w = Messages([(f"h{i}", "h6", 200_000, 0) for i in range(6)])
    res = sim.run(w)
    assert res.workload_done
    assert ranks and max(ranks) < overcommit
    if overcommit > 2:
        assert max(ranks) >= 2
    assert len({fid for _, _, fid, _ in grants}) == 6  # every message is granted in its turn


def test_priorities_from_the_cdf() -> None:
    """Paper 3.4: unscheduled levels in proportion to unscheduled bytes, cutoffs splitting
    them equally, smaller messages higher."""
    # All messages fit in RTTbytes: every byte is unscheduled -> 7 unscheduled levels, 1 scheduled.
    sizes = tuple(range(100, 1500, 100))
    uniform = SizeDistribution("u", sizes, tuple((i + 1) / len(sizes) for i in range(len(sizes))), False)
    sched, cut = homa_priorities(uniform, 10_000)
    assert sched == 1 and len(cut) == NUM_QUEUES - 2
    assert list(cut) == sorted(set(cut))
    # Equal shares: each level's unscheduled bytes within one size point of 1/7 of the total.
    masses = _masses(uniform)
    total = sum(s * p for s, p in masses)
    bounds = (0,) + cut + (1 << 60,)
    biggest = max(s * p for s, p in masses)
    for lo, hi in zip(bounds, bounds[1:]):
        share = sum(s * p for s, p in masses if lo < s <= hi)
        assert abs(share - total / 7) <= biggest + 1e-9
    # W5 (DCTCP web search, mostly large messages): most bytes scheduled.
    w5_sched, w5_cut = homa_priorities(load_distribution("homa_DCTCP_MsgSizeDist.txt"), 9700)
    assert w5_sched >= 6 and len(w5_cut) == NUM_QUEUES - w5_sched - 1
    # W1 (Facebook key-value, tiny messages): almost all unscheduled.
    w1_sched, _ = homa_priorities(load_distribution("homa_FacebookKeyValueMsgSizeDist.txt"), 9700)
    assert w1_sched == 1


def test_packets_carry_the_receiver_chosen_priorities() -> None:
    """Unscheduled packets use the level of the message size; scheduled packets the (lower)
    level of the grant; the switch keeps them (HomaPipeline)."""
    topo = star(3)
    cfg = SimConfig(mtu_bytes=1500, homa={"size_distribution": "homa_Google_AllRPC.txt"})
    sim = Simulation(topo, "homa", 1, cfg)
    p = sim.binding.params
    seen: list[tuple[int, int, int]] = []
    rx = sim.binding.host(sim, sim.network.hosts["h2"])
    orig = rx.receive

    def record(pkt: Any) -> None:
        if pkt.flags == HOMA_DATA:
            seen.append((pkt.flow_id, pkt.seq, pkt.priority))
        orig(pkt)

    rx.receive = record  # type: ignore[method-assign]
    w = Messages([("h0", "h2", 300, 0), ("h1", "h2", 200_000, 0)])
    sim.run(w)
    small, big = w.fids
    assert {pr for f, _, pr in seen if f == small} == {p.unsched_queue(300)}
    unsched = {pr for f, seq, pr in seen if f == big and seq < p.rtt_bytes}
    sched = {pr for f, seq, pr in seen if f == big and seq >= p.rtt_bytes}
    assert unsched == {p.unsched_queue(200_000)}
    assert sched and max(sched) < p.unsched_queue(200_000) and max(sched) < NUM_QUEUES - (NUM_QUEUES -
    p.sched_priorities)
    assert p.unsched_queue(300) >= p.unsched_queue(200_000)


def test_lossy_incast_completes() -> None:
    """Twelve senders burst 40 KB each into one receiver through a 30 KB port buffer: packets
    are dropped (unscheduled and scheduled), and every message still completes; each RESEND
    asks for the highest level."""
    topo = star(13, buffer_bytes=30_000)
    cfg = SimConfig(
        mtu_bytes=1500,
        buffer_dt_alpha=0.0,
        homa={"rtt_bytes": 20_000, "resend_ns": 50 * US, "sender_timeout_ns": 200 * US},
    )
    sim = Simulation(topo, "homa", 3, cfg)
    resend_levels: list[int] = []
    rx = sim.binding.host(sim, sim.network.hosts["h12"])
    rx.nic = _TapNic(rx.nic, lambda pkt: resend_levels.append(pkt.qclass) if pkt.flags == HOMA_RESEND else None)
    w = Messages([(f"h{i}", "h12", 40_000, 0) for i in range(12)] + [("h0", "h12", 1_000, 5 * US)])
    res = sim.run(w)
    assert res.drops > 0
    assert res.workload_done and all(f.finish_ns is not None for f in res.flows)
    assert res.transport.timeouts > 0 and res.retransmitted_bytes > 0
    assert resend_levels and set(resend_levels) == {RESEND_PRIORITY}


def test_sender_sends_what_a_resend_names_at_its_level() -> None:
    """A RESEND for bytes 2 packets .. rtt_bytes of a 100 KB message (unscheduled level 4 with
    these settings): the sender resends exactly that range at the RESEND's level, then the
    granted bytes at the grant's lower level. Linux Homa does the same; at the
    message's own level a retransmission can be starved for good by higher-level messages
    (found at full-scale Llama-3-70B with 4 bulk flows: an A2F stuck for 900 ms)."""
    topo = star(2, delay_ns=50 * US)
    rtt = 10_000
    sim = Simulation(topo, "homa", 1, SimConfig(mtu_bytes=1500, homa={"rtt_bytes": rtt}))
    sent: list[tuple[int, int, int]] = []  # (time, offset, level) of DATA
    tx = sim.binding.host(sim, sim.network.hosts["h0"])
    tx.nic = _TapNic(tx.nic, lambda pkt: sent.append((sim.engine.now, pkt.seq, pkt.priority))
                     if pkt.flags == HOMA_DATA else None)
    w = Messages([("h0", "h1", 100_000, 0)])
    sim.workload = w
    w.start(sim)
    sim.engine.run(90 * US)  # the unscheduled packets are out, no GRANT back yet
    p = sim.binding.params
    assert {lvl for _, _, lvl in sent} == {p.unsched_queue(100_000)} != {RESEND_PRIORITY}
    resend = Packet(sim.network.hosts["h1"].ip, sim.network.hosts["h0"].ip, PROTO_HOMA, 0, 0, HOMA_CONTROL_BYTES)
    resend.flow_id, resend.flags = w.fids[0], HOMA_RESEND
    resend.seq, resend.ack, resend.qclass = 2 * p.max_payload, rtt, RESEND_PRIORITY
    tx.receive(resend)
    sim.engine.run(10_000 * US)
    assert w.done()
    again = [(off, lvl) for t, off, lvl in sent if t >= 90 * US and off < rtt]
    assert [off for off, _ in again] == list(range(2 * p.max_payload, rtt, p.max_payload))
    assert {lvl for _, lvl in again} == {RESEND_PRIORITY}
    granted = {lvl for _, off, lvl in sent if off >= rtt}
    assert granted and max(granted) < p.unsched_queue(100_000)


def test_receiver_asks_for_each_gap_then_up_to_the_grant() -> None:
    """The ranges a RESEND asks for (Linux Homa's homa_request_retrans): each hole below the
    highest byte received, then from there to the granted offset; nothing already received."""
    p = HomaConfig().max_payload
    m = _In(1, 0, 20 * p, resolve(HomaConfig(rtt_bytes=4 * p), None))
    m.contig, m.granted = 2 * p, 12 * p
    m.ooo = {3 * p: 4 * p, 4 * p: 5 * p, 7 * p: 8 * p}  # packets 3, 4 and 7 arrived out of order
    assert _missing(m) == [(2 * p, 3 * p), (5 * p, 7 * p), (8 * p, 12 * p)]
    m.ooo = {}
    assert _missing(m) == [(2 * p, 12 * p)]
    m.contig = 12 * p
    assert _missing(m) == []


@pytest.mark.parametrize(
    ("homa", "field"),
    [
        ({"overcommit": 0}, "sim.homa.overcommit"),
        ({"rtt_bytes": -1}, "sim.homa.rtt_bytes"),
        ({"sched_priorities": 8}, "sim.homa.sched_priorities"),
        ({"unsched_cutoffs_bytes": [500, 100, 2000]}, "sim.homa.unsched_cutoffs_bytes"),
        ({"sched_priorities": 4, "unsched_cutoffs_bytes": [100]}, "sim.homa.unsched_cutoffs_bytes"),
        ({"resend_ns": 0}, "sim.homa.resend_ns"),
        ({"bogus": 1}, "sim.homa.bogus"),
    ],
)
def test_bad_config_is_refused_naming_the_field(homa: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        SimConfig(homa=homa)
    assert err.value.field == field


def test_bad_values_in_helpers() -> None:
    with pytest.raises(InvalidInput) as err:
        HomaConfig(mtu_bytes=40)
    assert err.value.field == "homa.mtu_bytes"
    dist = load_distribution("homa_Google_AllRPC.txt")
    with pytest.raises(InvalidInput) as err:
        homa_priorities(dist, 0)
    assert err.value.field == "rtt_bytes"

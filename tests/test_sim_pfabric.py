"""pFabric baseline: the switch port's dequeue and drop rules, the sender's timeouts and probe
mode, whole-fabric runs (a short flow overtakes a long one, incast with drops completes), the
paper's default settings, and bad configuration."""

from __future__ import annotations

import pytest

from safs.core.errors import InvalidInput
from safs.core.packet import PROTO_TCP, Packet
from safs.core.topology import build_topology
from safs.experiments.sim.config import SimConfig
from safs.experiments.sim.engine import Engine
from safs.experiments.sim.network import Host, Port
from safs.experiments.sim.pfabric_port import PfabricPort
from safs.experiments.sim.simulation import Simulation
from safs.experiments.workloads.api import FlowSpec
from safs.hosts.pfabric import (
    PROBE_BYTES,
    TCP_PROBE,
    PfabricConfig,
    PfabricSender,
    base_rtt_ns,
    idle_fct_ns,
    pfabric_config,
)
from safs.hosts.stats import TransportStats

US = 1_000
MS = 1_000_000


class Sink:
    """A node that records what a port delivers."""

    name = "sink"

    def __init__(self) -> None:
        self.got: list[Packet] = []

    def receive(self, pkt: Packet, in_port: int) -> None:
        self.got.append(pkt)


def _port(buffer_bytes: int) -> tuple[Engine, PfabricPort, Sink]:
    eng = Engine(1)
    port = PfabricPort(eng, "sw", 1, 10_000_000_000, 0, buffer_bytes, True)
    sink = Sink()
    port.peer = sink
    return eng, port, sink


def _pkt(flow: int, remaining: int, size: int = 1000, seq: int = 0) -> Packet:
    p = Packet(0x0A000001, 0x0A000002, PROTO_TCP, 1000, 5002, size, size - 54)
    p.flow_id, p.remaining, p.seq = flow, remaining, seq
    return p


# ---- the switch port (paper Section 4.1) -----------------------------------------------------

def test_dequeues_the_earliest_packet_of_the_flow_holding_the_best_packet() -> None:
    eng, port, sink = _port(100_000)
    assert port.send(_pkt(9, 1, seq=-1))  # occupies the serialiser; the rest queue behind it
    a_old, b, a_new = _pkt(1, 5000, seq=0), _pkt(2, 4500), _pkt(1, 4000, seq=1000)
    for p in (a_old, b, a_new):
        assert port.send(p)
    eng.run(10**9)
    # Flow 1 holds the best packet (4000), so its EARLIEST packet (remaining 5000) goes first;
    # strict per-packet priority would send 4000, 4500, 5000 and reorder flow 1.
    assert [p.remaining for p in sink.got] == [1, 5000, 4000, 4500]
    assert port.queued_bytes == 0 and port.queued_packets == 0 and port.tx_packets == 4


def test_full_buffer_drops_the_lowest_priority_packet_or_the_arrival() -> None:
    eng, port, sink = _port(3000)
    port.send(_pkt(9, 0))  # serialising, not buffered
    for flow, r in ((1, 10), (2, 30), (3, 20)):
        assert port.send(_pkt(flow, r))
    assert port.queued_bytes == 3000
    assert port.send(_pkt(4, 25))  # evicts the remaining-30 packet
    assert sorted(p.remaining for p in port.buf) == [10, 20, 25]
    assert not port.send(_pkt(5, 40))  # the arrival is the lowest: dropped itself
    assert not port.send(_pkt(6, 25))  # ties drop the arrival
    assert sorted(p.remaining for p in port.buf) == [10, 20, 25]
    assert port.drops[0] == 3 and port.drop_bytes == 3000 and port.dropped() == 3
    eng.run(10**9)
    assert [p.remaining for p in sink.got] == [0, 10, 20, 25]


def test_a_large_arrival_evicts_several_or_nothing() -> None:
    eng, port, _ = _port(3000)
    port.send(_pkt(9, 0))
    for flow, r in ((1, 50), (2, 60), (3, 5)):
        port.send(_pkt(flow, r))
    assert port.send(_pkt(4, 10, size=2000))  # needs 2000 bytes: evicts 60, then 50
    assert sorted(p.remaining for p in port.buf) == [5, 10]
    assert not port.send(_pkt(5, 7, size=2500))  # only the 10 is worse: not enough room, nothing evicted
    assert sorted(p.remaining for p in port.buf) == [5, 10] and port.queued_bytes == 3000


# ---- sender: timeouts and probe mode (paper Section 4.2) -------------------------------------

def test_consecutive_timeouts_enter_probe_mode_and_an_ack_leaves_it() -> None:
    eng = Engine(1)
    host = Host("h0", 0x0A000001)
    host.nic = Port(eng, "h0", 0, 10_000_000_000, 0, 1 << 40, strict=False)
    sink = Sink()  # a black hole: every packet is lost
    host.nic.peer = sink
    cfg = PfabricConfig(mtu_bytes=1500, init_window_bytes=4 * 1460, max_window_bytes=8 * 1460, rto_ns=50 * US,
                        probe_after_timeouts=3, buffer_bytes=36_000)
    stats = TransportStats()
    tx = PfabricSender(eng, host, 0x0A000002, 7, 100_000, cfg, stats, lambda fid: None)
    tx.start()
    eng.run(10 * US)
    assert len(sink.got) == 4 and all(p.remaining == 100_000 for p in sink.got)  # one BDP at once
    eng.run(2 * 50 * US + 2 * US)  # two timeouts: window of one packet, resend from snd_una
    assert stats.timeouts == 2 and not tx.probing and tx.cwnd == 1460
    assert [p.seq for p in sink.got[4:]] == [0, 0]
    eng.run(3 * 50 * US + 2 * US)  # the third consecutive timeout: probe mode
    assert tx.probing and sink.got[-1].tcp_flags & TCP_PROBE and sink.got[-1].size == PROBE_BYTES
    eng.run(5 * 50 * US + 2 * US)
    assert [p.size for p in sink.got[-3:]] == [PROBE_BYTES] * 3  # only probes while probing
    ack = Packet(0x0A000002, 0x0A000001, PROTO_TCP, 5002, 1000, 64, 0)
    ack.flow_id, ack.ack, ack.seq, ack.tcp_flags = 7, 0, -1, TCP_PROBE
    sent = len(sink.got)
    tx.receive(ack)  # the probe's ACK: slow start again from one packet
    assert not tx.probing and tx.timeouts_in_row == 0 and tx.cwnd == 1460
    eng.run(eng.now + 10 * US)
    assert [p.seq for p in sink.got[sent:]] == [0] and sink.got[-1].size == 1514


# ---- whole-fabric runs ---------------------------------------------------------------------

def _star(n: int, rate: str = "10Gbps", delay_ns: int = 3_000):
    return build_topology({
        "name": "star", "defaults": {"rate": rate, "delay_ns": delay_ns},
        "switches": ["s0"],
        "hosts": {f"h{i}": {"ip": f"10.0.0.{i + 1}", "switch": "s0"} for i in range(n)}})


class Flows:
    """Start each (spec, start_ns); done when all finished."""

    def __init__(self, specs: list[tuple[FlowSpec, int]]) -> None:
        self.specs = specs
        self.left = len(specs)

    def start(self, api) -> None:
        for spec, at in self.specs:
            api.start_flow(spec, self._done, at)

    def _done(self, _t: int) -> None:
        self.left -= 1

    def done(self) -> bool:
        return self.left == 0

    def metrics(self) -> dict[str, float]:
        return {}


def _run(topo, policy: str, specs: list[tuple[FlowSpec, int]]):
    sim = Simulation(topo, policy, 1, SimConfig(mtu_bytes=1500, max_time_ns=200 * MS))
    return sim, sim.run(Flows(specs))


def test_alone_in_the_fabric_a_flow_meets_its_idle_fct() -> None:
    topo = _star(3)
    for size in (1, 1460, 20_000, 300_000):
        _, res = _run(topo, "pfabric", [(FlowSpec("h0", "h1", size, None, "x", "background"), 0)])
        f = res.flows[0]
        assert f.finish_ns - f.start_ns == idle_fct_ns(topo, "h0", "h1", size, 1500)


def test_short_flow_overtakes_a_long_flow_at_the_bottleneck() -> None:
    topo = _star(3)
    long_ = FlowSpec("h0", "h2", 3_000_000, None, "long", "background")
    short = FlowSpec("h1", "h2", 50_000, 10 * MS, "short", "pipeline")
    specs = [(long_, 0), (short, 500 * US)]
    sim, res = _run(topo, "pfabric", specs)
    assert res.workload_done
    assert all(type(p) is PfabricPort for p in sim.network.switch_ports())
    fct = {f.label: f.finish_ns - f.start_ns for f in res.flows}
    ideal = {f.label: idle_fct_ns(topo, f.sender, f.receiver, f.size_bytes, 1500) for f in res.flows}
    # The short flow (pipeline class: pFabric too) passes the long one's queued packets ...
    assert fct["short"] < 1.1 * ideal["short"]
    # ... and the long flow loses the time the short one used the link plus about one timeout
    # (the short burst evicted some of its packets), not more.
    assert res.drops > 0
    assert fct["long"] < ideal["long"] + ideal["short"] + 2 * sim.binding.pfabric_cfg.rto_ns
    # Under DCTCP the short flow waits behind the long flow's queue (the contrast pFabric fixes).
    dsim, dres = _run(topo, "dctcp", specs)
    assert all(type(p) is Port for p in dsim.network.switch_ports())
    d_short = next(f for f in dres.flows if f.label == "short")
    assert d_short.finish_ns - d_short.start_ns > 1.5 * fct["short"]


def test_incast_with_drops_completes_every_flow() -> None:
    topo = _star(17)
    specs = [(FlowSpec(f"h{i}", "h0", 100_000 + 10_000 * i, None, f"f{i}", "background"), 0) for i in range(1, 17)]
    sim, res = _run(topo, "pfabric", specs)
    assert res.workload_done and all(f.finish_ns is not None for f in res.flows)
    assert res.drops > 0 and res.transport.timeouts > 0 and res.retransmitted_bytes > 0
    sim.engine.run(sim.engine.now + MS)  # the run stops at the last byte; let the last ACKs land
    assert not sim.senders  # every sender saw its last ACK and closed
    # SRPT order at the receiver: smaller flows finish first (all start together).
    finish = [f.finish_ns for f in sorted(res.flows, key=lambda f: f.size_bytes)]
    assert sum(a < b for a, b in zip(finish, finish[1:])) >= 13
    # No flow beats its idle FCT, and the whole incast drains near line rate.
    assert all(f.finish_ns - f.start_ns >= idle_fct_ns(topo, f.sender, f.receiver, f.size_bytes, 1500)
               for f in res.flows)
    total = sum(f.size_bytes for f in res.flows)
    assert max(finish) < 1.5 * total * 8 / 10  # ns at 10 Gbit/s, with 50% slack for losses


def test_same_seed_same_result() -> None:
    topo = _star(5)
    specs = [(FlowSpec(f"h{i}", "h0", 200_000, None, f"f{i}", "background"), i * US) for i in range(1, 5)]
    a = [f.finish_ns for f in _run(topo, "pfabric", specs)[1].flows]
    b = [f.finish_ns for f in _run(topo, "pfabric", specs)[1].flows]
    assert a == b


# ---- settings ------------------------------------------------------------------------------

def test_defaults_are_the_papers_for_its_link_rate_and_rtt() -> None:
    topo = _star(2)
    rtt = base_rtt_ns(topo, 1500)
    assert 14_000 <= rtt <= 15_000  # paper Section 5: 14.6 us
    cfg = pfabric_config(topo, 1500)
    assert cfg.init_window_bytes == 12 * 1460  # BDP = 12 packets (18 KB)
    assert cfg.buffer_bytes == 24 * 1514  # 2 x BDP, the paper's 36 KB
    assert cfg.rto_ns == 3 * rtt and cfg.probe_after_timeouts == 5
    over = pfabric_config(topo, 1500, {"rto_ns": 45_000, "init_window_bytes": 100_000})
    assert over.rto_ns == 45_000 and over.max_window_bytes >= 100_000
    assert Simulation(topo, "pfabric", 1, SimConfig(mtu_bytes=1500, pfabric={"buffer_bytes": 50_000})
                      ).network.switch_ports()[0].buffer_bytes == 50_000


@pytest.mark.parametrize(("field", "value"), [
    ("init_window_bytes", 0), ("rto_ns", -1), ("probe_after_timeouts", 0), ("buffer_bytes", 100),
    ("max_window_bytes", 1000), ("rto_ns", 1.5), ("buffer_bytes", True)])
def test_bad_config_is_refused_naming_the_field(field: str, value) -> None:
    good = {"mtu_bytes": 1500, "init_window_bytes": 17_520, "max_window_bytes": 35_040, "rto_ns": 45_000,
            "probe_after_timeouts": 5, "buffer_bytes": 36_336}
    with pytest.raises(InvalidInput) as err:
        PfabricConfig(**{**good, field: value})
    assert err.value.field == f"pfabric.{field}"
    with pytest.raises(InvalidInput) as err:  # the same through a scenario's sim: mapping
        Simulation(_star(2), "pfabric", 1, SimConfig(mtu_bytes=1500, pfabric={field: value}))
    assert err.value.field == f"sim.pfabric.{field}"


def test_unknown_key_is_refused_at_config_time_listing_the_valid_ones() -> None:
    with pytest.raises(InvalidInput) as err:
        SimConfig.from_mapping({"pfabric": {"rto": 45_000}})
    assert err.value.field == "sim.pfabric.rto" and "rto_ns" in err.value.message
    with pytest.raises(InvalidInput) as err:
        SimConfig(pfabric={"buffer_bytes": 0})  # range checked before any topology is known
    assert err.value.field == "sim.pfabric.buffer_bytes"
    with pytest.raises(InvalidInput) as err:
        PfabricSender(Engine(1), Host("h", 1), 2, 1, 0, pfabric_config(_star(2), 1500), TransportStats(),
                      lambda fid: None)
    assert err.value.field == "size_bytes"

"""The real-time driver (safs.experiments.mininet.driver) against in-process agents on a fake clock.

The fake agents speak the agent control protocol (docs/mininet.md, "Host agent": expect,
send, events) and finish every flow at its uncontended transfer time (Topology.min_transfer_ns), so a workload run
through the
driver must give the same workload metrics as IdealNetwork, up to the poll period per
transfer on the critical path. The fake clock starts just below a 2^48 boundary, so fabric
times wrap during the run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from safs.core.errors import InvalidInput
from safs.core.timebase import TIME_MOD, wrap
from safs.core.topology import load_topology
from safs.experiments.mininet.agent_control import AgentError
from safs.experiments.mininet.driver import RealtimeNetwork
from safs.experiments.workloads.api import FlowSpec
from safs.experiments.workloads.ideal import IdealNetwork
from safs.experiments.workloads.zerobubble import ZeroBubbleTraining

ROOT = Path(__file__).resolve().parents[1]


class FakeClock:
    def __init__(self, start: int) -> None:
        self.t = start

    def __call__(self) -> int:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += max(1, int(s * 1e9))


class Fabric:
    """Flows complete at send_at + transfer time; receivers report done events."""

    def __init__(self, clock: FakeClock, topology, refuse: str | None = None) -> None:
        self.clock, self.topology, self.refuse = clock, topology, refuse
        self.ip_to_host = {
            ".".join(str((ip >> s) & 255) for s in (24, 16, 8, 0)): h for ip, h in topology.ip_to_host.items()
        }
        self.done: list[tuple[int, str, int, int]] = []  # (finish fabric-unwrapped, receiver, id, bytes)
        self.requests: list[dict] = []
        self.expected: dict[int, dict] = {}


class FakeAgent:
    def __init__(self, name: str, fabric: Fabric) -> None:
        self.name, self.fabric = name, fabric

    def request(self, msg):
        f = self.fabric
        f.requests.append({"host": self.name, **msg})
        if f.refuse == msg["op"]:
            raise AgentError(f"{self.name}: refused {msg['op']}")
        if msg["op"] == "expect":
            f.expected[msg["flow_id"]] = msg
            return {"ok": True, "port": 40000 + msg["flow_id"]} if msg["transport"] == "tcp" else {"ok": True}
        if msg["op"] == "send":
            assert msg["flow_id"] in f.expected, "receiver told first"
            receiver = f.ip_to_host[msg["dst_ip"]]
            now = f.clock()
            # send_at is 48-bit fabric time: unwrap it next to now
            send_at = now + ((msg["send_at_ns"] - wrap(now) + TIME_MOD // 2) % TIME_MOD - TIME_MOD // 2)
            finish = max(send_at, now) + f.topology.min_transfer_ns(self.name, receiver, msg["size_bytes"])
            f.done.append((finish, receiver, msg["flow_id"], msg["size_bytes"]))
            return {"ok": True}
        if msg["op"] == "events":
            now = f.clock()
            mine = [d for d in f.done if d[1] == self.name and d[0] <= now]
            for d in mine:
                f.done.remove(d)
            return {
                "ok": True,
                "events": [
                    {"event": "done", "flow_id": i, "role": "receiver", "finish_ns": wrap(t), "bytes": b}
                    for t, _, i, b in mine
                ],
            }
        return {"ok": True}


WRAP_IN_NS = 300_000  # the fake clock starts this long before a 2^48 boundary


def _net(topology, policy="safs", refuse=None, start=TIME_MOD * 6_000 - WRAP_IN_NS, poll_s=1e-5):
    clock = FakeClock(start)
    fabric = Fabric(clock, topology, refuse)
    agents = {h: FakeAgent(h, fabric) for h in topology.hosts()}
    ips = {h: ip for ip, h in fabric.ip_to_host.items()}
    return RealtimeNetwork(agents, ips, policy, clock=clock, sleep=clock.sleep, poll_s=poll_s), fabric


@pytest.fixture(scope="module")
def topo():
    return load_topology(ROOT / "topologies" / "zerobubble-pp.yaml")


PARAMS = {"stages": 4, "microbatches": 4, "iterations": 1, "scale": 0.002}


def test_workload_through_driver_matches_ideal_network(topo):
    ideal = ZeroBubbleTraining(PARAMS, topo)
    IdealNetwork(topo).run(ideal)
    wl = ZeroBubbleTraining(PARAMS, topo)
    net, fabric = _net(topo, poll_s=1e-6)
    net.run(wl, max_time_ns=10**10)
    assert wl.done()
    got, want = wl.metrics()["iteration_time_ms"], ideal.metrics()["iteration_time_ms"]
    transfers = 2 * (PARAMS["stages"] - 1) * PARAMS["microbatches"]
    # at most one poll period (1 us) late per transfer on the critical path
    assert want <= got <= want + transfers * 1e-3, (got, want)
    records = net.records()
    assert len(records) == transfers and all(r.finish_ns is not None for r in records)
    assert all(r.finish_ns >= r.start_ns for r in records)
    # the fabric clock wrapped during the run, and the records are in workload time anyway
    assert max(r.finish_ns for r in records) > WRAP_IN_NS


def test_transport_per_policy_and_class(topo):
    for policy, pipeline_transport in (("safs", "safs"), ("dctcp", "tcp")):
        net, fabric = _net(topo, policy)
        nb = 5_000_000
        net.start_flow(FlowSpec("stage0", "stage1", 1000, nb, "p", firm=True), lambda t: None, send_at_ns=1000)
        net.start_flow(FlowSpec("bg0", "stage1", 1000, None, "b", "background"), lambda t: None)
        sends = [r for r in fabric.requests if r["op"] == "send"]
        assert [s["transport"] for s in sends] == [pipeline_transport, "tcp"]
        assert sends[0]["no_bubble_ts_ns"] == net.fabric(nb) and sends[1]["no_bubble_ts_ns"] is None
        assert sends[0]["send_at_ns"] == net.fabric(1000) and sends[0]["dst_host"] == "stage1"
        expects = [r for r in fabric.requests if r["op"] == "expect"]
        assert expects[0]["host"] == "stage1" and expects[0]["src_ip"] == "10.0.0.1"
        # the receiver gets the no-bubble timestamp too (its admission plans with it)
        assert expects[0]["no_bubble_ts_ns"] == net.fabric(nb) and expects[1]["no_bubble_ts_ns"] is None
        # both ends are told a firm deadline (the receiver's admission may reject it, the sender give it up)
        assert [r["firm"] for r in expects] == [r["firm"] for r in sends] == [True, False]
        # a TCP receiver's port goes to the sender
        tcp_sends = [s for s in sends if s["transport"] == "tcp"]
        assert all(s["port"] == 40000 + s["flow_id"] for s in tcp_sends)


def test_unfinished_flows_at_max_time(topo):
    class Forever:
        def start(self, api):
            api.start_flow(FlowSpec("bg0", "stage1", 1 << 40, None, "bulk", "background"), lambda t: None)

        def done(self):
            return False

    net, _ = _net(topo)
    net.run(Forever(), max_time_ns=2_000_000)
    (rec,) = net.records()
    assert rec.finish_ns is None and net.stats.run_time_ns >= 2_000_000


def test_bad_input_and_agent_errors(topo):
    with pytest.raises(InvalidInput, match="policy"):
        _net(topo, "homa")
    net, _ = _net(topo)
    with pytest.raises(InvalidInput, match="flow.receiver"):
        net.start_flow(FlowSpec("stage0", "nobody", 10, 1, "x"), lambda t: None)
    net, _ = _net(topo, refuse="send")
    with pytest.raises(AgentError, match="refused send"):
        net.start_flow(FlowSpec("stage0", "stage1", 10, 1, "x"), lambda t: None)
    with pytest.raises(InvalidInput, match="max_time_ns"):
        net.run(ZeroBubbleTraining(PARAMS, topo), 0)

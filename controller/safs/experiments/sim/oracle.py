"""The ``"edf-oracle"`` policy: centralized preemptive earliest-deadline-first with full, instant
knowledge of every flow on every link, as a fluid (flow-level) model (docs/baselines.md).

A reference point for the pipeline flows, not a proven bound: on one bottleneck preemptive EDF
minimises the maximum lateness (Horn, "Some simple scheduling algorithms", Naval Research
Logistics Quarterly 21(1), 1974; Jackson's rule with preemption and release times), so there
every deadline that can be met is met; where several links bind, the greedy rule below is a
heuristic (an allocation that is EDF on each link separately need not be optimal).

Rates, recomputed at every flow arrival and completion with zero control latency:

1. Pipeline flows in order of no-bubble timestamp (ties: fewer remaining bytes, then flow id)
   each take the largest rate still free on every directed link of their path (sender uplink,
   fabric links, receiver downlink): ``rate = min(residual of the path's links)``; the full
   link rate is usable (no headroom). Where routes have several equal-cost next hops, each
   flow takes one path, hashed as the switches hash a UDP flow from source port ``1024 +
   flow_id % 64000`` (per-flow ECMP, :meth:`safs.core.topology.Topology.path`); the oracle does
   not route adaptively.
2. Background flows (no deadline) share what is left max-min fairly (progressive filling),
   the fair share DCTCP aims at, so background figures differ from the other policies only
   by the capacity the pipeline flows leave, not by a different background discipline.

Hosts send at exactly the assigned rates, so queues stay empty and nothing is dropped.

Packet overheads are kept so FCTs are comparable with the packet simulator: a flow of
``size`` bytes occupies its links for ``size + packets * 78`` wire bytes (payload in
MTU-sized SAFS DATA packets, ``safs.core.protocol.WIRE_OVERHEAD_BYTES`` each, as
:meth:`safs.core.topology.Topology.min_transfer_ns`), and its last byte arrives the path's
propagation delay plus one frame's store-and-forward time per switch after it left the
sender. An uncontended flow therefore takes exactly ``Topology.min_transfer_ns``.

Left out: control traffic (no REQUEST/GRANT, no ACKs), queueing and loss (rates never exceed
a link), packet granularity of the sharing itself (two flows on a link progress together,
not packet by packet), and the pipelining of one flow's bytes across links (the fluid flow
holds every link of its path from its first to its last byte). Of :class:`SimConfig` only
``mtu_bytes`` and ``max_time_ns`` apply; the run has no randomness (the seed is unused).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from safs.core.errors import InvalidInput
from safs.core.packet import PROTO_UDP
from safs.core.protocol import SAFS_UDP_PORT, WIRE_OVERHEAD_BYTES
from safs.experiments.metrics import FlowRecord
from safs.experiments.sim.config import SimConfig, SimResult
from safs.experiments.sim.control_plane import ControlStats
from safs.experiments.sim.engine import Engine
from safs.experiments.sim.workload_host import EngineWorkloadHost
from safs.hosts.stats import TransportStats

NS_PER_S = 1_000_000_000
_IN_MTU = WIRE_OVERHEAD_BYTES - 14  # IPv4 + UDP + SAFS header: the part inside the IP MTU

Link = tuple[str, str]  # a directed link (from node, to node)


class OracleFlow:
    """One flow of the oracle (fluid state in exact integers).

    Attributes:
        flow_id, spec, start_ns; ``finish_ns`` (None until its last byte arrived).
        links: directed links of its path.  latency_ns: propagation + store-and-forward.
        wire_bytes: bytes on the wire (payload + 78 per packet).
        rem: remaining wire bits times 1e9 (bit-ns/s), so ``rate_bps * dt_ns`` is exact.
        rate_bps: the rate the oracle assigned last.
        deadline: no-bubble timestamp (ns), None for background flows.
    """

    __slots__ = ("flow_id", "spec", "start_ns", "finish_ns", "on_done", "links", "latency_ns",
                 "wire_bytes", "rem", "rate_bps", "deadline")

    def __init__(self, flow_id: int, spec: Any, start_ns: int, on_done: Callable[[int], None],
                 links: list[Link], latency_ns: int, wire_bytes: int) -> None:
        self.flow_id = flow_id
        self.spec = spec
        self.start_ns = start_ns
        self.finish_ns: int | None = None
        self.on_done = on_done
        self.links = links
        self.latency_ns = latency_ns
        self.wire_bytes = wire_bytes
        self.rem = wire_bytes * 8 * NS_PER_S
        self.rate_bps = 0
        self.deadline = spec.no_bubble_ts_ns if spec.flow_class == "pipeline" else None


def edf_rates(flows: list[OracleFlow], capacity_bps: dict[Link, int]) -> None:
    """Set ``rate_bps`` of every flow: greedy EDF for pipeline flows, then max-min for the rest.

    Args:
        flows: active flows (each with ``links``, ``deadline``, ``rem``, ``flow_id``).
        capacity_bps: directed link -> capacity in bit/s; every link of every flow must be in it.

    Pipeline flows, in (deadline, remaining, flow id) order, each get the smallest residual
    capacity on their path; background flows then get max-min fair shares (integer bit/s,
    rounded down) of the residuals by progressive filling. The sum of rates on a link never
    exceeds its capacity.
    """
    residual = dict(capacity_bps)
    pipeline = sorted((f for f in flows if f.deadline is not None), key=lambda f: (f.deadline, f.rem, f.flow_id))
    for f in pipeline:
        rate = min(residual[link] for link in f.links)
        f.rate_bps = rate
        if rate:
            for link in f.links:
                residual[link] -= rate
    unfrozen = [f for f in flows if f.deadline is None]
    for f in unfrozen:
        f.rate_bps = 0
    while unfrozen:
        count: dict[Link, int] = {}
        for f in unfrozen:
            for link in f.links:
                count[link] = count.get(link, 0) + 1
        # The link whose equal share is smallest limits every unfrozen flow crossing it.
        share, tight = min((residual[link] // n, link) for link, n in count.items())
        keep = []
        for f in unfrozen:
            if tight in f.links:
                f.rate_bps = share
                for link in f.links:
                    residual[link] -= share
            else:
                keep.append(f)
        unfrozen = keep


class OracleNetwork(EngineWorkloadHost):
    """Fluid EDF oracle implementing :class:`safs.experiments.workloads.api.WorkloadAPI`; :meth:`run`
    returns a :class:`safs.experiments.sim.config.SimResult` like :func:`safs.experiments.sim.backend.simulate`.

    Args:
        topology: a :class:`safs.core.topology.Topology` (paths by its routes).
        config: :class:`SimConfig` (``mtu_bytes``, ``max_time_ns``).

    Raises:
        InvalidInput: an MTU too small for one payload byte.
    """

    def __init__(self, topology: Any, config: SimConfig | None = None) -> None:
        self.topology = topology
        self.config = config or SimConfig()
        self.payload_bytes = self.config.mtu_bytes - _IN_MTU
        if self.payload_bytes < 1:
            raise InvalidInput("sim.mtu_bytes", f"must exceed {_IN_MTU} bytes of headers, got {self.config.mtu_bytes}")
        self.engine = Engine(0)
        self.capacity: dict[Link, int] = {}
        for a, b, data in topology.graph.edges(data=True):
            self.capacity[(a, b)] = self.capacity[(b, a)] = data["rate_bps"]
        self._paths: dict[tuple[str, str, int], tuple[list[Link], int, list[int]]] = {}
        self.order: list[OracleFlow] = []
        self.active: list[OracleFlow] = []
        self._last = 0  # time the fluid state was last advanced to
        self._token = 0  # invalidates scheduled completion checks after a re-allocation
        self._realloc_pending = False
        self._next_id = 1
        self.reallocations = 0
        self.workload: Any = None
        self.workload_done = False

    # ---- WorkloadAPI ---------------------------------------------------------------------
    def start_flow(self, spec: Any, on_done: Callable[[int], None], send_at_ns: int | None = None) -> int:
        """Start ``spec`` (a FlowSpec) at ``send_at_ns`` (None: now); ``on_done(finish_ns)`` when
        its last byte arrives. Returns the flow id.

        Raises:
            InvalidInput: sender or receiver not a host of the topology; ``send_at_ns`` in the past.
        """
        start = self._flow_start(spec, send_at_ns)
        links, delay, hop_rates = self._path(spec.sender, spec.receiver, self._next_id)
        packets = -(-spec.size_bytes // self.payload_bytes)
        frame = min(spec.size_bytes, self.payload_bytes) + WIRE_OVERHEAD_BYTES
        latency = delay + sum(-(-frame * 8 * NS_PER_S // r) for r in hop_rates)
        flow = OracleFlow(self._next_id, spec, start, on_done, links, latency,
                          spec.size_bytes + packets * WIRE_OVERHEAD_BYTES)
        self._next_id += 1
        self.order.append(flow)
        self.engine.at(start, self._arrive, flow)
        return flow.flow_id

    # ---- fluid engine --------------------------------------------------------------------
    def _path(self, src: str, dst: str, flow_id: int) -> tuple[list[Link], int, list[int]]:
        flow = (PROTO_UDP, 1024 + flow_id % 64000, SAFS_UDP_PORT)
        key = (src, dst, flow[1])
        if key not in self._paths:
            nodes = self.topology.path(src, dst, flow)
            links = list(zip(nodes, nodes[1:]))
            delay = sum(self.topology.link(a, b)["delay_ns"] for a, b in links)
            hop_rates = [self.capacity[link] for link in links[1:]]  # store and forward per switch
            self._paths[key] = (links, delay, hop_rates)
        return self._paths[key]

    def _advance(self) -> None:
        """Serve every active flow at its rate from the last update to now."""
        dt = self.engine.now - self._last
        if dt:
            for f in self.active:
                f.rem -= f.rate_bps * dt
            self._last = self.engine.now

    def _arrive(self, flow: OracleFlow) -> None:
        self._advance()
        self.active.append(flow)
        self._request_realloc()

    def _request_realloc(self) -> None:
        # One re-allocation per instant: arrivals and completions at the same ns share it.
        if not self._realloc_pending:
            self._realloc_pending = True
            self.engine.at(self.engine.now, self._realloc, None)

    def _realloc(self, _: Any) -> None:
        self._realloc_pending = False
        self._advance()
        edf_rates(self.active, self.capacity)
        self.reallocations += 1
        now = self.engine.now
        nxt = min((now + -(-f.rem // f.rate_bps) for f in self.active if f.rate_bps > 0), default=None)
        self._token += 1
        if nxt is not None:
            self.engine.at(nxt, self._complete_due, self._token)

    def _complete_due(self, token: int) -> None:
        if token != self._token:
            return  # the rates changed since this completion was computed
        self._advance()
        now = self.engine.now
        keep = []
        for f in self.active:
            if f.rem <= 0:  # last byte left the sender: it arrives after the path latency
                f.rem = 0
                self.engine.at(now + f.latency_ns, self._deliver, f)
            else:
                keep.append(f)
        self.active = keep
        self._request_realloc()

    def _deliver(self, flow: OracleFlow) -> None:
        flow.finish_ns = self.engine.now
        done, flow.on_done = flow.on_done, _noop
        done(flow.finish_ns)
        self._check_done()

    # ---- running -------------------------------------------------------------------------
    def run(self, workload: Any) -> SimResult:
        """Start ``workload`` and run until it is done or ``config.max_time_ns``."""
        self.workload = workload
        workload.start(self)
        self._check_done()
        if not self.workload_done:
            self.engine.run(self.config.max_time_ns)
        self._advance()
        return self.result()

    def result(self) -> SimResult:
        """The result so far: flow records as the packet simulator's, data bytes = wire bytes
        served; control, drops and ECN marks are zero by construction."""
        records = [FlowRecord(f.flow_id, f.spec.label, f.spec.flow_class, f.spec.sender, f.spec.receiver,
                              f.spec.size_bytes, f.start_ns, f.finish_ns, f.spec.no_bubble_ts_ns)
                   for f in self.order]
        served = sum(f.wire_bytes - max(0, f.rem) // (8 * NS_PER_S) for f in self.order
                     if f.start_ns <= self._last)
        stats = TransportStats(data_bytes=served)
        return SimResult(
            flows=records,
            workload_metrics=dict(self.workload.metrics()) if self.workload is not None else {},
            workload_done=self.workload_done,
            control_bytes=0, control_packets=0, scheduler_control_messages=0, scheduler_control_bytes=0,
            data_bytes=served, retransmitted_bytes=0, drops=0, drops_by_port_class={}, ecn_marked_packets=0,
            events=self.engine.events, sim_time_ns=self.engine.now, transport=stats,
            control=ControlStats(), control_profile="none")


def _noop(_: int) -> None:
    return None

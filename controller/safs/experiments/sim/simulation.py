"""Run a workload on the simulated fabric under a policy: :func:`simulate`.

Policies (lower-case):

- ``"safs"``: pipeline flows use the SAFS transport. The in-process
  :class:`safs.core.scheduler.Scheduler` drives every switch's :class:`PipelineModel`: it gets each
  flow's hint (``announce``) ``hint_latency_ns`` after the workload announced it (the hint
  API's latency), activates it ``activation_lead_ns`` before its data starts
  (:meth:`Scheduler.activate`), learns of flows it was not told about from REQUEST digests
  (polled every ``digest_poll_ns``), gets each completion (``complete``) ``hint_latency_ns``
  after the last byte arrived and re-allocates (``tick``) every ``tick_ns``; all of these are
  simulator events.
- ``"dctcp"``: pipeline flows are DCTCP. Switches and pipeline model are the same (routes,
  ECN threshold installed by the same ``Scheduler.setup``); the SAFS tables stay idle.
- ``"d2tcp"``: pipeline flows are D2TCP (:mod:`safs.hosts.d2tcp`: DCTCP with the
  deadline-imminence gamma correction), each with its no-bubble timestamp as its deadline;
  switches as under ``"dctcp"``.

- ``"safs-no-grants"`` / ``"safs-no-classes"``: SAFS ablations (:mod:`safs.hosts.no_grants`):
  slack classes without rate grants (pipeline flows DCTCP under a SAFS header, no grants or
  meters), and rate grants without slack classes (all SAFS DATA in one queue).
- ``"edf-oracle"``: a fluid, centralized preemptive EDF reference (:mod:`safs.experiments.sim.oracle`),
  run by :func:`simulate` (not a packet-level :class:`Simulation`).
- ``"homa"``: every flow, pipeline AND background, is a Homa message
  (:mod:`safs.hosts.homa`: receiver-driven SRPT grants, RTTbytes unscheduled,
  overcommitment, receiver-chosen priorities); switches run :class:`HomaPipeline`, which keeps
  the host-chosen priority of Homa packets. Homa is a whole-fabric transport (in its paper all
  traffic is Homa), so background flows are not DCTCP under this policy.
- ``"pfabric"``: every flow, pipeline AND background, is pFabric
  (:mod:`safs.hosts.pfabric`: remaining-size priority in every packet, line-rate
  start, fixed timeouts, probe mode) and every port is a pFabric port (priority scheduling
  with starvation prevention, priority dropping, a 2 x BDP buffer per switch port); pFabric
  is a whole-fabric design (in its paper all traffic is pFabric), so background flows are not
  DCTCP under this policy either. Settings: ``sim.pfabric`` (:func:`pfabric_config`).

Background flows (``flow_class == "background"``, including persistent bulk flows) are
non-SAFS DCTCP under every packet-level policy.

The simulator implements :class:`safs.experiments.workloads.api.WorkloadAPI` (``now``, ``call_at``,
``start_flow``) for the workload and stops when ``workload.done()`` turns true (checked after
every workload callback) or at ``config.max_time_ns``; flows still in flight are then
reported unfinished (``finish_ns`` None).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from safs.core import p4names
from safs.core.allocator import AllocatorConfig
from safs.core.errors import InvalidInput, SafsError
from safs.core.hints import LABEL_MAX_LEN, FlowClass, FlowHint
from safs.experiments.metrics import FlowRecord
from safs.targets.homa_pipeline import HomaPipeline
from safs.targets.pipeline_model import PipelineModel
from safs.core.scheduler import Scheduler, SchedulerConfig
from safs.hosts.no_grants import SCHEDULER_OVERRIDES, no_grant_endpoints
from safs.experiments.sim.engine import Engine
from safs.experiments.sim.workload_host import EngineWorkloadHost
from safs.experiments.sim.network import Network, Port, build_network
from safs.experiments.sim.pfabric_port import pfabric_port_factory
from safs.core.packet import ETH_HEADER_BYTES
from safs.hosts.stats import TransportStats
from safs.hosts.d2tcp import D2tcpSender
from safs.hosts.dctcp import DctcpConfig, DctcpReceiver, DctcpSender, dctcp_k_packets
from safs.hosts.homa import HomaConfig, HomaHost
from safs.hosts.homa import resolve as homa_resolve
from safs.hosts.pfabric import (PfabricConfig, PfabricReceiver, PfabricSender, check_pfabric_overrides,
                                         pfabric_config)
from safs.hosts.safs import SafsConfig, SafsReceiver, SafsSender

POLICIES = ("safs", "dctcp", "d2tcp", "edf-oracle", "safs-no-grants", "safs-no-classes", "homa", "pfabric")
SAFS_POLICIES = ("safs", "safs-no-grants", "safs-no-classes")  # the scheduler gets hints and runs


@dataclass(frozen=True)
class SimConfig:
    """Simulator settings. Times in ns, sizes in bytes.

    Attributes:
        mtu_bytes: largest IP packet, default 9000 (jumbo frames). Packet-level Python
            simulation costs per packet; 9000-byte frames are standard in AI/RoCE fabrics and cut
            events 6x against 1500 (docs/simulator.md).
        max_time_ns: simulated-time horizon (default 1 s).
        activation_lead_ns: a flow announced ahead is activated (:meth:`Scheduler.activate`:
            the application told the controller when its data starts) this long before its
            first byte, or at the announce if that is later; default 5 µs, enough for the
            grant entry to be in place when the first REQUEST reaches the receiver's ToR.
        hint_latency_ns: application -> scheduler hint API latency (announce and complete),
            default 20 µs (a local gRPC call plus controller processing).
        tick_ns: period of ``Scheduler.tick`` (default: the scheduler config's ``tick_ns``).
        digest_poll_ns: period of digest polls, default 10 µs (on the AFD benchmark a 50 µs
            poll made decode steps about 2x slower: digests are the fast path for new flows).
        renew_fraction: SAFS lease renewal point, default 3/4 of the lease.
        safs_rto_ns: SAFS probe timeout, default 500 µs (docs/simulator.md "Loss recovery").
        safs_grant_poll_ns: SAFS REQUEST poll period while a sender holds no grant of its own or
            a very slow one (``SafsConfig.grant_poll_ns``), default 10 µs. Scale it with the
            fabric: it must stay above a control round trip (at 10 Mbit/s a 1500-byte frame
            alone takes 1.2 ms, so scenarios/mininet-*.yaml use 2 ms, as the emulation agent).
        safs_reorder_window_ns: how long a missing SAFS segment may stay missing before it is
            reported lost (``SafsConfig.reorder_window_ns``), default 200 µs; scaled likewise.
        buffer_dt_alpha: dynamic-threshold alpha of switch port buffers (0 = plain shared
            buffer). Default 1 (Choudhury and Hahne 1998; a common shared-buffer ASIC default):
            one class alone may fill half the port buffer, so a starved class-0 queue cannot
            take the space the SAFS classes need.
        dctcp: :class:`DctcpConfig` fields other than ``mtu_bytes`` (mapping).
        homa: :class:`safs.hosts.homa.HomaConfig` fields other than ``mtu_bytes``
            (mapping; policy ``"homa"``).
        pfabric: overrides of :class:`safs.hosts.pfabric.PfabricConfig` fields other
            than ``mtu_bytes`` (mapping; policy ``"pfabric"``; defaults from the topology).
        scheduler: :class:`SchedulerConfig` fields (mapping; ``allocator`` a mapping of
            :class:`AllocatorConfig` fields). Unset fields are derived from the topology and
            ``mtu_bytes``: ``max_frame_bytes`` = MTU + 14, ``ecn_threshold_pkts`` = DCTCP's K
            for the host link rate (:func:`dctcp_k_packets`) but at most a quarter of the
            smallest switch port buffer (below the dynamic-threshold limit of one class), ``allocator.line_rate_bps`` =
            the fastest host link.

    Raises:
        InvalidInput: a field out of range (field named).
    """

    mtu_bytes: int = 9000
    max_time_ns: int = 1_000_000_000
    hint_latency_ns: int = 20_000
    activation_lead_ns: int = 5_000
    tick_ns: int | None = None
    digest_poll_ns: int = 10_000
    renew_fraction: float = 0.75
    safs_rto_ns: int = 500_000
    safs_grant_poll_ns: int = 10_000
    safs_reorder_window_ns: int = 200_000
    buffer_dt_alpha: float = 1.0
    dctcp: Mapping[str, Any] = field(default_factory=dict)
    homa: Mapping[str, Any] = field(default_factory=dict)
    pfabric: Mapping[str, Any] = field(default_factory=dict)
    scheduler: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.mtu_bytes, bool) or not isinstance(self.mtu_bytes, int) or not 576 <= self.mtu_bytes <= 65535:
            # 576: the smallest MTU every IPv4 host must accept (RFC 791); 65535: IPv4 total length.
            raise InvalidInput("sim.mtu_bytes", f"must be an integer in 576..65535, got {self.mtu_bytes!r}")
        for name, low in (("max_time_ns", 1), ("hint_latency_ns", 0), ("activation_lead_ns", 0), ("digest_poll_ns", 1),
                          ("safs_rto_ns", 1), ("safs_grant_poll_ns", 1), ("safs_reorder_window_ns", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InvalidInput(f"sim.{name}", f"must be an integer >= {low} ns, got {v!r}")
        if isinstance(self.buffer_dt_alpha, bool) or not isinstance(self.buffer_dt_alpha, (int, float)) \
                or not 0 <= self.buffer_dt_alpha <= 64:
            raise InvalidInput("sim.buffer_dt_alpha", f"must be a number in [0, 64], got {self.buffer_dt_alpha!r}")
        if self.tick_ns is not None and (isinstance(self.tick_ns, bool) or not isinstance(self.tick_ns, int)
                                         or self.tick_ns < 1):
            raise InvalidInput("sim.tick_ns", f"must be an integer >= 1 ns or null, got {self.tick_ns!r}")
        # Validate the nested configs now so a bad scenario fails before any run.
        self.safs_config()
        self.dctcp_config()
        self.homa_config()
        self.pfabric_config(None)
        self.scheduler_config(None)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None, scheduler: Mapping[str, Any] | None = None,
                     max_time_ns: int | None = None, source: str | None = None) -> "SimConfig":
        """Build from a scenario's ``sim:`` mapping (plus its ``scheduler:`` mapping and horizon).

        Raises:
            InvalidInput: unknown key (the message lists the valid ones) or a bad value.
        """
        raw = dict(mapping or {})
        names = [f.name for f in dataclasses.fields(cls) if f.name != "scheduler"]
        for key in raw:
            if key not in names:
                raise InvalidInput(f"sim.{key}", f"unknown key; valid: {', '.join(names)}", source)
        if scheduler is not None:
            raw["scheduler"] = dict(scheduler)
        if max_time_ns is not None:
            raw["max_time_ns"] = max_time_ns
        try:
            return cls(**raw)
        except InvalidInput as exc:
            raise InvalidInput(exc.field, exc.message, source) from None

    def safs_config(self) -> SafsConfig:
        """The SAFS transport settings (default rate and unscheduled bytes from the scheduler's)."""
        sched = self.scheduler_config(None)
        return SafsConfig(mtu_bytes=self.mtu_bytes, default_rate_bps=sched.default_rate_bps,
                          renew_fraction=self.renew_fraction, rto_ns=self.safs_rto_ns,
                          grant_poll_ns=self.safs_grant_poll_ns, reorder_window_ns=self.safs_reorder_window_ns,
                          unscheduled_bytes=sched.unscheduled_bytes)

    def dctcp_config(self) -> DctcpConfig:
        """The DCTCP settings."""
        fields = {f.name for f in dataclasses.fields(DctcpConfig)} - {"mtu_bytes"}
        for key in self.dctcp:
            if key not in fields:
                raise InvalidInput(f"sim.dctcp.{key}", f"unknown key; valid: {', '.join(sorted(fields))}")
        try:
            return DctcpConfig(mtu_bytes=self.mtu_bytes, **self.dctcp)
        except InvalidInput as exc:
            raise InvalidInput(f"sim.dctcp.{exc.field}", exc.message) from None

    def homa_config(self) -> HomaConfig:
        """The Homa settings (policy ``"homa"``); unknown keys refused as ``sim.homa.<key>``."""
        fields = {f.name for f in dataclasses.fields(HomaConfig)} - {"mtu_bytes"}
        for key in self.homa:
            if key not in fields:
                raise InvalidInput(f"sim.homa.{key}", f"unknown key; valid: {', '.join(sorted(fields))}")
        raw = dict(self.homa)
        if isinstance(raw.get("unsched_cutoffs_bytes"), list):
            raw["unsched_cutoffs_bytes"] = tuple(raw["unsched_cutoffs_bytes"])
        try:
            return HomaConfig(mtu_bytes=self.mtu_bytes, **raw)
        except InvalidInput as exc:
            raise InvalidInput(f"sim.{exc.field}", exc.message) from None

    def pfabric_config(self, topology: Any | None) -> PfabricConfig | None:
        """The pFabric settings for ``topology`` (policy ``"pfabric"``: the paper's, derived from
        the topology by :func:`pfabric_config`, with ``sim.pfabric`` overrides); with ``topology``
        None only the overrides are checked and None is returned. Errors name ``sim.pfabric.<key>``."""
        try:
            if topology is None:
                check_pfabric_overrides(self.pfabric)
                return None
            return pfabric_config(topology, self.mtu_bytes, self.pfabric)
        except InvalidInput as exc:
            raise InvalidInput(f"sim.{exc.field}", exc.message) from None

    def scheduler_config(self, topology: Any | None) -> SchedulerConfig:
        """The scheduler settings, with unset fields derived from ``topology`` (see class doc)."""
        raw = dict(self.scheduler)
        alloc_raw = dict(raw.pop("allocator", None) or {})
        sched_fields = {f.name for f in dataclasses.fields(SchedulerConfig)} - {"allocator"}
        alloc_fields = {f.name for f in dataclasses.fields(AllocatorConfig)}
        for key in raw:
            if key not in sched_fields:
                raise InvalidInput(f"scheduler.{key}", f"unknown key; valid: allocator, {', '.join(sorted(sched_fields))}")
        for key in alloc_raw:
            if key not in alloc_fields:
                raise InvalidInput(f"scheduler.allocator.{key}", f"unknown key; valid: {', '.join(sorted(alloc_fields))}")
        if isinstance(alloc_raw.get("slack_thresholds_ns"), list):
            alloc_raw["slack_thresholds_ns"] = tuple(alloc_raw["slack_thresholds_ns"])
        raw.setdefault("max_frame_bytes", self.mtu_bytes + ETH_HEADER_BYTES)
        if topology is not None:
            rates = [topology.host_link_bps(h) for h in topology.hosts()]
            frame = self.mtu_bytes + ETH_HEADER_BYTES
            # K must sit well below what one class may hold (half the port buffer with dynamic
            # thresholds, alpha 1), so DCTCP sees marks before drops: at most a quarter of it.
            quarter_buffer_pkts = min(topology.buffer_bytes(sw) for sw in topology.switches()) // (4 * frame)
            raw.setdefault("ecn_threshold_pkts", max(1, min(dctcp_k_packets(max(rates), self.mtu_bytes),
                                                            quarter_buffer_pkts)))
            alloc_raw.setdefault("line_rate_bps", max(rates))
        try:
            return SchedulerConfig(allocator=AllocatorConfig(**alloc_raw), **raw)
        except InvalidInput as exc:
            raise InvalidInput(exc.field.replace("config.", "scheduler.", 1), exc.message) from None


@dataclass
class SimResult:
    """Outcome of one :func:`simulate` run.

    Attributes:
        flows: one :class:`safs.experiments.metrics.FlowRecord` per flow started, in start order
            (``finish_ns`` None for flows unfinished at the end; ``missed`` is a property).
        workload_metrics: ``workload.metrics()``.
        workload_done: the workload finished before ``max_time_ns``.
        control_bytes: SAFS REQUEST, GRANT and DONE wire bytes (each message once).
        control_packets: their number.
        scheduler_control_messages: table and meter updates the scheduler wrote.
        scheduler_control_bytes: the scheduler's estimate of their encoded size.
        data_bytes: wire bytes of DATA packets and TCP segments sent (retransmissions included).
        retransmitted_bytes: the retransmitted part of ``data_bytes``.
        drops: packets tail dropped in switches (all ports and classes).
        drops_by_port_class: (switch, port, class) -> drops, non-zero only.
        ecn_marked_packets: packets marked CE by switches.
        events: simulator events run.  sim_time_ns: simulated time reached.
        transport: the raw :class:`TransportStats`.
    """

    flows: list[FlowRecord]
    workload_metrics: dict[str, float]
    workload_done: bool
    control_bytes: int
    control_packets: int
    scheduler_control_messages: int
    scheduler_control_bytes: int
    data_bytes: int
    retransmitted_bytes: int
    drops: int
    drops_by_port_class: dict[tuple[str, int, int], int]
    ecn_marked_packets: int
    events: int
    sim_time_ns: int
    transport: TransportStats


class _Flow:
    """Per-flow bookkeeping (kept for the result; endpoints are dropped when the flow closes)."""

    __slots__ = ("flow_id", "spec", "start_ns", "finish_ns", "on_done", "safs")

    def __init__(self, flow_id: int, spec: Any, start_ns: int, on_done: Callable[[int], None], safs: bool) -> None:
        self.flow_id = flow_id
        self.spec = spec
        self.start_ns = start_ns
        self.finish_ns: int | None = None
        self.on_done = on_done
        self.safs = safs


class Simulation(EngineWorkloadHost):
    """One run: engine, network, scheduler and transports; implements ``WorkloadAPI``.

    Use :func:`simulate`; this class is public for tests that need to reach inside
    (``network``, ``scheduler``, ``senders``).

    Raises:
        InvalidInput: unknown policy (message lists the valid ones).
    """

    def __init__(self, topology: Any, policy: str, seed: int, config: SimConfig) -> None:
        if policy not in POLICIES:
            raise InvalidInput("policy", f"unknown policy {policy!r}; valid: {', '.join(POLICIES)}")
        if policy == "edf-oracle":
            raise InvalidInput("policy", "'edf-oracle' is a fluid model, not a packet-level Simulation: "
                               "run it with simulate() or safs.experiments.sim.oracle.OracleNetwork")
        self.topology = topology
        self.policy = policy
        self.config = config
        self.engine = Engine(seed)
        self.pfabric_cfg = config.pfabric_config(topology) if policy == "pfabric" else None
        self.network: Network = build_network(topology, self.engine,
                                               HomaPipeline if policy == "homa" else PipelineModel,
                                               float(config.buffer_dt_alpha),
                                               Port if self.pfabric_cfg is None
                                               else pfabric_port_factory(self.pfabric_cfg.buffer_bytes))
        self.stats = TransportStats()
        self.safs_cfg = config.safs_config()
        self.dctcp_cfg = config.dctcp_config()
        sched_cfg = config.scheduler_config(topology)
        if policy in SCHEDULER_OVERRIDES:  # an ablation switches one half of SAFS off
            sched_cfg = dataclasses.replace(sched_cfg, **SCHEDULER_OVERRIDES[policy])
        targets = {name: sw.pipeline for name, sw in self.network.switches.items()}
        self.scheduler = Scheduler(topology, targets, sched_cfg)
        # Fabric time = switch clock + offset; the switch clock is now - start_ns.
        self.scheduler.setup(0, {name: sw.start_ns for name, sw in self.network.switches.items()})
        self.tick_ns = config.tick_ns or sched_cfg.tick_ns
        self.flows: dict[int, _Flow] = {}
        self.order: list[_Flow] = []
        self.senders: dict[int, Any] = {}
        self._next_id = 1
        self.workload: Any = None
        self.workload_done = False
        self.scheduler_rejects = 0
        self._sched_on = policy in SAFS_POLICIES
        self.homa_params = homa_resolve(config.homa_config(), topology) if policy == "homa" else None
        self.homa_hosts: dict[str, HomaHost] = {}

    # ---- WorkloadAPI ---------------------------------------------------------------------
    def start_flow(self, spec: Any, on_done: Callable[[int], None], send_at_ns: int | None = None) -> int:
        """Announce ``spec`` (a FlowSpec) now and start sending at ``send_at_ns`` (None: now).

        Under ``safs`` the hint reaches the scheduler ``hint_latency_ns`` after the announce and
        the flow is activated ``activation_lead_ns`` before its data, so a flow announced ahead
        finds its grant installed when its first REQUEST arrives. Returns the flow id;
        ``on_done(finish_ns)`` later; the flow's FCT counts from ``send_at_ns``.

        Raises:
            InvalidInput: sender or receiver not a host of the topology; ``send_at_ns`` in the past.
        """
        now = self.engine.now
        start = self._flow_start(spec, send_at_ns)
        hosts = self.network.hosts
        fid = self._next_id
        self._next_id += 1
        src, dst = hosts[spec.sender], hosts[spec.receiver]
        hinted = self.policy in SAFS_POLICIES and spec.flow_class == "pipeline"  # the scheduler is told
        use_safs = hinted and self.policy != "safs-no-grants"  # SAFS transport (grant-paced)
        flow = _Flow(fid, spec, start, on_done, hinted)
        self.flows[fid] = flow
        self.order.append(flow)
        if self.policy == "homa":  # every flow, pipeline and background, is a Homa message
            return self._start_homa(fid, src, dst, spec.size_bytes, start)
        if use_safs:
            rx = SafsReceiver(self.engine, dst, src.ip, fid, spec.size_bytes, spec.no_bubble_ts_ns,
                              self.safs_cfg, self.stats, self._on_finish)
            tx: Any = SafsSender(self.engine, src, dst.ip, fid, spec.size_bytes, spec.no_bubble_ts_ns,
                                 False, self.safs_cfg, self.stats, self._on_closed)
        elif hinted:  # safs-no-grants: DCTCP window control under a SAFS header
            rx, tx = no_grant_endpoints(self.engine, src, dst, fid, spec.size_bytes, spec.no_bubble_ts_ns,
                                        self.dctcp_cfg, self.stats, self._on_finish, self._on_closed)
        if hinted:
            announce_at = now + self.config.hint_latency_ns
            self.engine.at(announce_at, self._announce, flow)
            self.engine.at(max(announce_at, start - self.config.activation_lead_ns), self._activate, flow)
        elif self.pfabric_cfg is not None:  # every flow, pipeline and background, is pFabric
            rx = PfabricReceiver(self.engine, dst, src.ip, fid, spec.size_bytes, self.stats, self._on_finish)
            tx = PfabricSender(self.engine, src, dst.ip, fid, spec.size_bytes, self.pfabric_cfg, self.stats,
                               self._on_closed)
        else:
            rx = DctcpReceiver(self.engine, dst, src.ip, fid, spec.size_bytes, self.stats, self._on_finish)
            if self.policy == "d2tcp" and spec.flow_class == "pipeline":
                tx = D2tcpSender(self.engine, src, dst.ip, fid, spec.size_bytes, self.dctcp_cfg, self.stats,
                                 self._on_closed, spec.no_bubble_ts_ns)
            else:
                tx = DctcpSender(self.engine, src, dst.ip, fid, spec.size_bytes, self.dctcp_cfg, self.stats,
                                 self._on_closed)
        dst.receivers[fid] = rx
        src.senders[fid] = tx
        self.senders[fid] = tx
        if start == now:
            tx.start()
        else:
            self.engine.at(start, _start_sender, tx)
        return fid

    # ---- internals -----------------------------------------------------------------------
    def _homa_host(self, host: Any) -> HomaHost:
        h = self.homa_hosts.get(host.name)
        if h is None:
            h = HomaHost(self.engine, host, self.homa_params, self.stats, self._on_finish, self._on_closed)
            self.homa_hosts[host.name] = h
        return h

    def _start_homa(self, fid: int, src: Any, dst: Any, size_bytes: int, start: int) -> int:
        tx, rx = self._homa_host(src), self._homa_host(dst)
        rx.expect(fid, src.ip, size_bytes)
        dst.receivers[fid] = rx
        src.senders[fid] = tx
        self.senders[fid] = tx
        msg = (tx, fid, dst.ip, size_bytes)
        if start == self.engine.now:
            _start_homa_message(msg)
        else:
            self.engine.at(start, _start_homa_message, msg)
        return fid

    def _on_finish(self, flow_id: int, finish_ns: int) -> None:
        flow = self.flows[flow_id]
        flow.finish_ns = finish_ns
        if flow.safs:
            self.engine.after(self.config.hint_latency_ns, self._complete, flow_id)
        flow.on_done(finish_ns)
        self._check_done()

    def _on_closed(self, flow_id: int) -> None:
        flow = self.flows[flow_id]
        self.network.hosts[flow.spec.sender].senders.pop(flow_id, None)
        self.network.hosts[flow.spec.receiver].receivers.pop(flow_id, None)
        self.senders.pop(flow_id, None)
        flow.on_done = _noop  # release the workload's closure

    def _announce(self, flow: _Flow) -> None:
        if flow.finish_ns is not None:
            return  # finished before the hint arrived: nothing to schedule
        spec = flow.spec
        hint = FlowHint(flow.flow_id, spec.sender, spec.receiver, spec.size_bytes,
                        spec.no_bubble_ts_ns if spec.no_bubble_ts_ns is not None else 0,
                        (spec.label or "flow")[:LABEL_MAX_LEN], FlowClass.PIPELINE)
        try:
            self.scheduler.announce(hint, self.engine.now)
        except SafsError:
            self.scheduler_rejects += 1  # e.g. no free meter slot: the flow keeps the default grant

    def _activate(self, flow: _Flow) -> None:
        if flow.finish_ns is not None or flow.flow_id not in self.scheduler.registry:
            return
        try:
            self.scheduler.activate(flow.flow_id, self.engine.now)
        except SafsError:
            self.scheduler_rejects += 1  # no free meter slot: the REQUEST's digest retries

    def _complete(self, flow_id: int) -> None:
        if flow_id in self.scheduler.registry:
            try:
                self.scheduler.complete(flow_id, self.engine.now)
            except SafsError:
                self.scheduler_rejects += 1

    def _poll(self, _: Any) -> None:
        try:
            self.scheduler.poll(self.engine.now)
        except SafsError:
            self.scheduler_rejects += 1
        self.engine.after(self.config.digest_poll_ns, self._poll, None)

    def _tick(self, _: Any) -> None:
        try:
            self.scheduler.tick(self.engine.now)
        except SafsError:
            self.scheduler_rejects += 1
        self.engine.after(self.tick_ns, self._tick, None)

    def run(self, workload: Any) -> SimResult:
        """Start ``workload`` and run until it is done or ``config.max_time_ns``."""
        self.workload = workload
        if self._sched_on:
            self.engine.after(self.config.digest_poll_ns, self._poll, None)
            self.engine.after(self.tick_ns, self._tick, None)
        workload.start(self)
        self._check_done()
        if not self.workload_done:
            self.engine.run(self.config.max_time_ns)
        return self.result()

    def result(self) -> SimResult:
        """The result so far (see :class:`SimResult`)."""
        records = [FlowRecord(f.flow_id, f.spec.label, f.spec.flow_class, f.spec.sender, f.spec.receiver,
                              f.spec.size_bytes, f.start_ns, f.finish_ns, f.spec.no_bubble_ts_ns)
                   for f in self.order]
        net = self.network
        ecn = 0
        for sw in net.switches.values():
            for port in sw.ports:
                ecn += sw.pipeline.read_counter(p4names.ECN_MARKED, port).packet_count
        sstats = self.scheduler.stats
        return SimResult(
            flows=records,
            workload_metrics=dict(self.workload.metrics()) if self.workload is not None else {},
            workload_done=self.workload_done,
            control_bytes=self.stats.control_bytes,
            control_packets=self.stats.control_packets,
            scheduler_control_messages=sstats.table_updates + sstats.meter_updates,
            scheduler_control_bytes=sstats.control_bytes,
            data_bytes=self.stats.data_bytes,
            retransmitted_bytes=self.stats.retransmitted_bytes,
            drops=net.drops(),
            drops_by_port_class=net.drops_by_port_class(),
            ecn_marked_packets=ecn,
            events=self.engine.events,
            sim_time_ns=self.engine.now,
            transport=self.stats,
        )


def _start_sender(sender: Any) -> None:
    sender.start()


def _start_homa_message(msg: tuple[HomaHost, int, int, int]) -> None:
    tx, fid, dst_ip, size_bytes = msg
    tx.send_message(fid, dst_ip, size_bytes)


def _noop(_: int) -> None:
    return None


def simulate(topology: Any, workload: Any, policy: str, seed: int, config: SimConfig | None = None) -> SimResult:
    """Simulate ``workload`` on ``topology`` under ``policy`` (one of :data:`POLICIES`;
    ``"edf-oracle"`` runs the fluid :class:`safs.experiments.sim.oracle.OracleNetwork`, the others a
    packet-level :class:`Simulation`).

    Args:
        topology: a :class:`safs.core.topology.Topology`.
        workload: a :class:`safs.experiments.workloads.api.Workload` (``start(api)``, ``done()``, ``metrics()``).
        policy: one of :data:`POLICIES`.
        seed: seeds the simulation's random stream (switch boot times); same seed, same result.
        config: :class:`SimConfig` (defaults when None).

    Raises:
        InvalidInput: unknown policy (lists the valid ones), bad config, or a flow between
            unknown hosts.
    """
    if policy == "edf-oracle":
        from safs.experiments.sim.oracle import OracleNetwork  # imports this module (SimResult)
        return OracleNetwork(topology, config or SimConfig()).run(workload)
    sim = Simulation(topology, policy, seed, config or SimConfig())
    return sim.run(workload)

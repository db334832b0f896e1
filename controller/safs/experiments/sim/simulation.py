"""The packet-level simulation of one run: :class:`Simulation` (engine, network of
:class:`~safs.targets.pipeline_model.PipelineModel` switches, scheduler, transport endpoints).

The policy (a :class:`safs.experiments.policies.Policy` from the registry) decides everything
policy-specific: its simulator binding (:mod:`safs.experiments.sim.bindings`) names the switch
pipeline and port discipline and creates each flow's endpoints; ``hinted`` policies (the SAFS
family) have their pipeline flows announced to the in-process
:class:`safs.core.scheduler.Scheduler`, which gets each flow's hint (``announce``)
``hint_latency_ns`` after the workload announced it (the hint API's latency), activates it
``activation_lead_ns`` before its data starts (:meth:`Scheduler.activate`), learns of flows it
was not told about from REQUEST digests (polled every ``digest_poll_ns``), gets each completion
(``complete``) ``hint_latency_ns`` after the last byte arrived and re-allocates (``tick``)
every ``tick_ns``; all of these are simulator events. Under every policy the scheduler installs
routes and ECN settings (``Scheduler.setup``). The policies themselves: docs/baselines.md and
:mod:`safs.experiments.policies`.

The simulator implements :class:`safs.experiments.workloads.api.WorkloadAPI` (``now``,
``call_at``, ``start_flow``) for the workload and stops when ``workload.done()`` turns true
(checked after every workload callback) or at ``config.max_time_ns``; flows still in flight
are then reported unfinished (``finish_ns`` None). Run a whole run with
:func:`safs.experiments.sim.backend.simulate`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from safs.core import p4names
from safs.core.errors import InvalidInput, SafsError
from safs.core.hints import LABEL_MAX_LEN, DependencyHint, FlowClass, FlowHint
from safs.core.scheduler import Scheduler
from safs.core.telemetry import BackgroundShareAdapter
from safs.core.topology import Topology
from safs.experiments.metrics import FlowRecord
from safs.experiments.policies import Policy, get_policy
from safs.experiments.sim.config import SimConfig, SimResult
from safs.experiments.sim.control_plane import SimControlPlane
from safs.experiments.sim.engine import Engine
from safs.experiments.sim.network import Network, build_network
from safs.experiments.sim.workload_host import EngineWorkloadHost
from safs.hosts.stats import TransportStats


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

    Use :func:`safs.experiments.sim.backend.simulate`; this class is public for tests that need
    to reach inside (``network``, ``scheduler``, ``senders``, ``binding``).

    Args:
        topology: the fabric.  policy: a registered policy or its name (packet-level, not
            ``fluid``).  seed: seeds the run's random stream.  config: simulator settings.

    Raises:
        InvalidInput: unknown policy (message lists the valid ones), a fluid policy, bad settings.
    """

    def __init__(self, topology: Topology, policy: str | Policy, seed: int, config: SimConfig) -> None:
        pol = policy if isinstance(policy, Policy) else get_policy(policy)
        if pol.sim is None:
            raise InvalidInput("policy", f"{pol.name!r} is a fluid model, not a packet-level Simulation: "
                               "run it with simulate() or safs.experiments.sim.oracle.OracleNetwork")
        config, sched_cfg = pol.configs(config, topology)
        self.topology = topology
        self.policy = pol.name
        self.config = config
        self.engine = Engine(seed)
        self.binding = pol.sim(topology, config)
        self.network: Network = build_network(topology, self.engine, self.binding.pipeline_class,
                                               float(config.buffer_dt_alpha), self.binding.make_port())
        self.stats = TransportStats()
        self.plane = SimControlPlane(self.engine, config.profile())
        targets = {name: self.plane.target(name, sw.pipeline) for name, sw in self.network.switches.items()}
        self.scheduler = Scheduler(topology, targets, sched_cfg)
        # Fabric time = switch clock + offset; the switch clock is now - start_ns. The fabric is
        # configured before the job starts: setup costs nothing on the run's clock.
        self.scheduler.setup(0, {name: sw.start_ns for name, sw in self.network.switches.items()})
        self.plane.setup_done = True
        self.tick_ns = config.tick_ns or sched_cfg.tick_ns
        self.adapter = (BackgroundShareAdapter(self.scheduler)
                        if pol.hinted and sched_cfg.background_share_max is not None else None)
        self.flows: dict[int, _Flow] = {}
        self.order: list[_Flow] = []
        self.senders: dict[int, Any] = {}
        self._next_id = 1
        self.workload: Any = None
        self.workload_done = False
        self.scheduler_rejects = 0
        self._sched_on = pol.hinted
        self._per_transfer = pol.per_transfer  # hinted per transfer, else per dependency

    # ---- WorkloadAPI ---------------------------------------------------------------------
    def start_flow(self, spec: Any, on_done: Callable[[int], None], send_at_ns: int | None = None) -> int:
        """Announce ``spec`` (a FlowSpec) now and start sending at ``send_at_ns`` (None: now).

        Under a policy hinted per transfer the hint reaches the scheduler when the control
        profile's hint costs have passed (RPC latency, queueing behind other controller work) and
        the flow is activated ``activation_lead_ns`` before its data, so a flow announced ahead
        finds its grant installed when its first REQUEST arrives. Under a policy hinted per
        dependency only a transfer of a new dependency sends a hint (the binding calls
        :meth:`new_dependency`). Returns the flow id; ``on_done(finish_ns)`` later; the flow's
        FCT counts from ``send_at_ns``.

        Raises:
            InvalidInput: sender or receiver not a host of the topology; ``send_at_ns`` in the past.
        """
        start = self._flow_start(spec, send_at_ns)
        hosts = self.network.hosts
        fid = self._next_id
        self._next_id += 1
        hinted = self._sched_on and self._per_transfer and spec.flow_class == "pipeline"  # told per transfer
        flow = _Flow(fid, spec, start, on_done, hinted)
        self.flows[fid] = flow
        self.order.append(flow)
        if hinted:
            self.plane.hint(self._announce, flow)
        self.binding.start_flow(self, fid, spec, hosts[spec.sender], hosts[spec.receiver], start)
        return fid

    # ---- internals -----------------------------------------------------------------------
    def _on_finish(self, flow_id: int, finish_ns: int) -> None:
        flow = self.flows[flow_id]
        flow.finish_ns = finish_ns
        if flow.safs:
            self.plane.hint(self._complete, flow_id)
        flow.on_done(finish_ns)
        self._check_done()

    def _on_closed(self, flow_id: int) -> None:
        flow = self.flows[flow_id]
        self.network.hosts[flow.spec.sender].senders.pop(flow_id, None)
        self.network.hosts[flow.spec.receiver].receivers.pop(flow_id, None)
        self.senders.pop(flow_id, None)
        flow.on_done = _noop  # release the workload's closure

    def new_dependency(self, dep: DependencyHint) -> None:
        """A sender started its first transfer of ``dep``: the application announces the
        dependency (one hint, charged as any hint); its transfers need none."""
        if not self._sched_on or self._per_transfer:
            return
        if not self.plane.setup_done:
            self._announce_dependency(dep)  # declared at launch
        else:
            self.plane.hint(self._announce_dependency, dep)

    def _announce_dependency(self, dep: DependencyHint) -> None:
        try:
            self.scheduler.announce_dependency(dep, self.engine.now)
        except SafsError:
            self.scheduler_rejects += 1  # e.g. no free meter slot: its transfers keep the default grant

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
        now = self.engine.now
        self.engine.at(max(now, flow.start_ns - self.config.activation_lead_ns), self._activate, flow)

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

    def _telemetry(self, _: Any) -> None:
        assert self.adapter is not None
        try:
            self.adapter.step_all(self.engine.now)
        except SafsError:
            self.scheduler_rejects += 1
        self.engine.after(self.config.telemetry_ns, self._telemetry, None)

    def run(self, workload: Any) -> SimResult:
        """Start ``workload`` and run until it is done or ``config.max_time_ns``."""
        self.workload = workload
        if self._sched_on and not self._per_transfer:
            # The job's dependencies are announced at launch: installed before its first
            # transfer, as part of the setup (like routes), not on the run's clock.
            self.plane.setup_done = False
            hosts = self.network.hosts
            for dep in workload.dependencies():
                self.binding.declare(self, dep, hosts[dep.sender], hosts[dep.receiver])
            self.plane.setup_done = True
        if self._sched_on:
            self.engine.after(self.config.digest_poll_ns, self._poll, None)
            self.engine.after(self.tick_ns, self._tick, None)
        if self.adapter is not None:
            self.engine.after(self.config.telemetry_ns, self._telemetry, None)
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
            control=self.plane.stats,
            control_profile=self.plane.profile.name,
        )


def _noop(_: int) -> None:
    return None

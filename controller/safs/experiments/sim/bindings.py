"""How each policy's flows run in the packet simulator (the ``sim`` part of a registry entry,
:mod:`safs.experiments.policies`).

A binding is built once per run, before the network, from the topology and the
:class:`~safs.experiments.sim.config.SimConfig`; it names the switch pipeline class and the
port factory the network is built with and creates each flow's endpoints. The simulation
itself knows no policy by name. Background flows (``flow_class == "background"``) are DCTCP
except under the whole-fabric transports (Homa, pFabric), where every flow uses them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from safs.core.errors import InvalidInput
from safs.core.hints import LABEL_MAX_LEN, DependencyHint, FlowClass
from safs.core.protocol import DEP_ID_MAX
from safs.core.topology import Topology
from safs.experiments.sim.config import SimConfig
from safs.experiments.sim.engine import Engine
from safs.experiments.sim.network import Host, Port
from safs.experiments.sim.pfabric_port import pfabric_port_factory
from safs.experiments.workloads.api import DependencySpec, FlowSpec
from safs.hosts.d2tcp import D2tcpSender
from safs.hosts.dctcp import DctcpReceiver, DctcpSender
from safs.hosts.homa import HomaHost
from safs.hosts.homa import resolve as homa_resolve
from safs.hosts.no_grants import no_grant_endpoints
from safs.hosts.pfabric import PfabricReceiver, PfabricSender
from safs.hosts.safs import ReceiverAdmission, SafsDependency, SafsReceiver, SafsSender, SendScheduler
from safs.hosts.stats import TransportStats
from safs.targets.homa_pipeline import HomaPipeline
from safs.targets.pipeline_model import PipelineModel

# The per-transfer design's grant poll when the config turns polls off: the config's default.
PER_TRANSFER_POLL_NS: int = SimConfig.model_fields["safs_grant_poll_ns"].default


class SimRun(Protocol):
    """What a binding uses of the running :class:`~safs.experiments.sim.simulation.Simulation`."""

    engine: Engine
    stats: TransportStats
    senders: dict[int, Any]

    def new_dependency(self, dep: DependencyHint) -> None: ...

    def _on_finish(self, flow_id: int, finish_ns: int) -> None: ...

    def _on_closed(self, flow_id: int) -> None: ...


class DctcpFlows:
    """Every flow is DCTCP (the ``dctcp`` policy; also the background of every SAFS-family and
    TCP-family policy). Switches run :class:`PipelineModel`, ports are plain shared-buffer ports.

    Args:
        topology, config: the run's topology and settings (subclasses derive their own
            transport settings from them and raise InvalidInput for bad ones).
    """

    pipeline_class: Callable[[str, Callable[[], int]], Any] = PipelineModel

    def __init__(self, topology: Topology, config: SimConfig) -> None:
        self.dctcp_cfg = config.dctcp_config()

    def make_port(self) -> Callable[..., Port]:
        """The port factory of :func:`safs.experiments.sim.network.build_network`."""
        return Port

    def declare(self, sim: SimRun, dep: DependencySpec, src: Host, dst: Host) -> object:
        """A dependency the workload knows at launch (only SAFS bindings keep them)."""
        return None

    def start_flow(self, sim: SimRun, fid: int, spec: FlowSpec, src: Host, dst: Host, start_ns: int) -> None:
        """Create flow ``fid``'s endpoints on ``src``/``dst`` and start its sender at ``start_ns``."""
        rx, tx = self.endpoints(sim, fid, spec, src, dst)
        _register(sim, fid, src, dst, rx, tx, start_ns)

    def endpoints(self, sim: SimRun, fid: int, spec: FlowSpec, src: Host, dst: Host) -> tuple[Any, Any]:
        """``(receiver, sender)`` of one flow; this class: DCTCP for every flow."""
        rx = DctcpReceiver(sim.engine, dst, src.ip, fid, spec.size_bytes, sim.stats, sim._on_finish)
        tx = DctcpSender(sim.engine, src, dst.ip, fid, spec.size_bytes, self.dctcp_cfg, sim.stats, sim._on_closed)
        return rx, tx


class D2tcpFlows(DctcpFlows):
    """Pipeline flows are D2TCP with their no-bubble timestamp as deadline (``d2tcp``)."""

    def endpoints(self, sim: SimRun, fid: int, spec: FlowSpec, src: Host, dst: Host) -> tuple[Any, Any]:
        if spec.flow_class != "pipeline":
            return super().endpoints(sim, fid, spec, src, dst)
        rx = DctcpReceiver(sim.engine, dst, src.ip, fid, spec.size_bytes, sim.stats, sim._on_finish)
        tx = D2tcpSender(sim.engine, src, dst.ip, fid, spec.size_bytes, self.dctcp_cfg, sim.stats,
                         sim._on_closed, spec.no_bubble_ts_ns)
        return rx, tx


class SafsFlows(DctcpFlows):
    """Pipeline flows use the SAFS endpoints (:mod:`safs.hosts.safs`) with dependency grants:
    the transfers a sender makes to one receiver under one dependency name
    (``FlowSpec.dependency_key``) share one :class:`SafsDependency`, announced to the
    scheduler once (``safs``; ``safs-no-classes`` differs only in the scheduler's settings)."""

    def __init__(self, topology: Topology, config: SimConfig) -> None:
        super().__init__(topology, config)
        # Dependency senders poll (with back-off) only while their grant is too slow for an
        # in-band push: they learn within one poll that a more urgent class left their port.
        self.safs_cfg = config.safs_config()
        self.deps: dict[tuple[str, str], SafsDependency] = {}  # (sender, dependency name) -> sender side
        self.last_dep_id: dict[str, int] = {}  # sender -> its last dependency id
        self.schedulers: dict[str, SendScheduler] = {}  # sender -> its send scheduler (send_order urgency)
        self.admissions: dict[str, ReceiverAdmission | None] = {}  # receiver -> its admission (receiver_admission)

    def declare(self, sim: SimRun, dep: DependencySpec, src: Host, dst: Host) -> SafsDependency:
        """The sender side of dependency ``dep``, created (and announced to the scheduler by
        :meth:`SimRun.new_dependency`) on first use; declared ones at setup."""
        key = (dep.sender, dep.name)
        found = self.deps.get(key)
        if found is not None:
            return found
        dep_id = self.last_dep_id.get(dep.sender, 0) + 1
        if dep_id > DEP_ID_MAX:
            raise InvalidInput("flow.dependency", f"{dep.sender!r} has more than {DEP_ID_MAX} dependencies")
        self.last_dep_id[dep.sender] = dep_id
        made = SafsDependency(sim.engine, src, dst.ip, dep_id, dep.flow_class == "background", self.safs_cfg,
                              sim.stats, self._scheduler(sim, src))
        self.deps[key] = made
        src.dependencies[dep_id] = made
        sim.new_dependency(DependencyHint(dep_id, dep.sender, dep.receiver, dep.name[:LABEL_MAX_LEN],
                                          FlowClass(dep.flow_class)))
        return made

    def _scheduler(self, sim: SimRun, src: Host) -> SendScheduler | None:
        """``src``'s :class:`SendScheduler` (one per host), or None under ``send_order: fifo``."""
        cfg = self.safs_cfg
        if cfg.send_order == "fifo":
            return None
        found = self.schedulers.get(src.name)
        if found is None:
            found = self.schedulers[src.name] = SendScheduler(
                sim.engine, src.nic.rate_bps, cfg.urgency_quantum_ns, late_below_ns=cfg.late_below_ns)
        return found

    def _admission(self, sim: SimRun, dst: Host) -> ReceiverAdmission | None:
        """``dst``'s :class:`ReceiverAdmission` (one per host), or None when
        ``receiver_admission`` is "off"."""
        if dst.name not in self.admissions:
            self.admissions[dst.name] = ReceiverAdmission.for_host(sim.engine, dst.nic.rate_bps, self.safs_cfg)
        return self.admissions[dst.name]

    def dependency(self, sim: SimRun, spec: FlowSpec, src: Host, dst: Host) -> SafsDependency | None:
        """The sender side of ``spec``'s dependency (declared at setup, or new now)."""
        return self.declare(sim, DependencySpec(spec.sender, spec.receiver, spec.dependency_key(), spec.flow_class),
                            src, dst)

    def endpoints(self, sim: SimRun, fid: int, spec: FlowSpec, src: Host, dst: Host) -> tuple[Any, Any]:
        if spec.flow_class != "pipeline":
            return super().endpoints(sim, fid, spec, src, dst)
        rx = SafsReceiver(sim.engine, dst, src.ip, fid, spec.size_bytes, spec.no_bubble_ts_ns, self.safs_cfg,
                          sim.stats, sim._on_finish, self._admission(sim, dst), spec.firm)
        tx = SafsSender(sim.engine, src, dst.ip, fid, spec.size_bytes, spec.no_bubble_ts_ns, False, self.safs_cfg,
                        sim.stats, sim._on_closed, self.dependency(sim, spec, src, dst), firm=spec.firm)
        return rx, tx


class SafsFifoSenderFlows(SafsFlows):
    """``safs-fifo-sender`` (ablation): :class:`SafsFlows` with ``send_order: fifo``: no
    :class:`SendScheduler`, each dependency paces into the NIC's FIFO on its own."""

    def __init__(self, topology: Topology, config: SimConfig) -> None:
        super().__init__(topology, config)
        self.safs_cfg = self.safs_cfg.replace(send_order="fifo")


class SafsPerTransferFlows(SafsFlows):
    """Today's design kept for comparison (``safs-per-transfer``): every pipeline transfer is
    its own dependency, announced, activated and completed at the scheduler, which installs a
    fixed-rate grant per transfer; waiting senders poll (``sim.safs_grant_poll_ns``; when 0,
    its default, 10 µs)."""

    def __init__(self, topology: Topology, config: SimConfig) -> None:
        super().__init__(topology, config)
        # the first design as it was: REQUEST polls, no urgency signals (docs/protocol.md rule 5a)
        self.safs_cfg = config.safs_config().replace(slack_thresholds_ns=(), grant_poll_backoff=1)
        if not self.safs_cfg.grant_poll_ns:
            self.safs_cfg = self.safs_cfg.replace(grant_poll_ns=PER_TRANSFER_POLL_NS)

    def dependency(self, sim: SimRun, spec: FlowSpec, src: Host, dst: Host) -> SafsDependency | None:
        return None  # the transfer's own (safs.core.protocol.transfer_dep_id)


class NoGrantsFlows(DctcpFlows):
    """Pipeline flows are DCTCP under a SAFS header (the ``safs-no-grants`` ablation,
    :mod:`safs.hosts.no_grants`)."""

    def endpoints(self, sim: SimRun, fid: int, spec: FlowSpec, src: Host, dst: Host) -> tuple[Any, Any]:
        if spec.flow_class != "pipeline":
            return super().endpoints(sim, fid, spec, src, dst)
        return no_grant_endpoints(sim.engine, src, dst, fid, spec.size_bytes, spec.no_bubble_ts_ns,
                                  self.dctcp_cfg, sim.stats, sim._on_finish, sim._on_closed)


class PfabricFlows(DctcpFlows):
    """Every flow, pipeline and background, is pFabric and every port a pFabric port
    (``pfabric``; settings from ``sim.pfabric`` and the topology)."""

    def __init__(self, topology: Topology, config: SimConfig) -> None:
        super().__init__(topology, config)
        cfg = config.pfabric_config(topology)
        assert cfg is not None  # a topology was given
        self.pfabric_cfg = cfg

    def make_port(self) -> Callable[..., Port]:
        return pfabric_port_factory(self.pfabric_cfg.buffer_bytes)

    def endpoints(self, sim: SimRun, fid: int, spec: FlowSpec, src: Host, dst: Host) -> tuple[Any, Any]:
        rx = PfabricReceiver(sim.engine, dst, src.ip, fid, spec.size_bytes, sim.stats, sim._on_finish)
        tx = PfabricSender(sim.engine, src, dst.ip, fid, spec.size_bytes, self.pfabric_cfg, sim.stats,
                           sim._on_closed)
        return rx, tx


class HomaFlows(DctcpFlows):
    """Every flow, pipeline and background, is a Homa message (``homa``); switches run
    :class:`HomaPipeline`, which keeps the host-chosen priority. One :class:`HomaHost` per host."""

    pipeline_class = HomaPipeline

    def __init__(self, topology: Topology, config: SimConfig) -> None:
        super().__init__(topology, config)
        self.params = homa_resolve(config.homa_config(), topology)
        self.hosts: dict[str, HomaHost] = {}

    def host(self, sim: SimRun, host: Host) -> HomaHost:
        """The :class:`HomaHost` of ``host`` (created on first use)."""
        h = self.hosts.get(host.name)
        if h is None:
            h = HomaHost(sim.engine, host, self.params, sim.stats, sim._on_finish, sim._on_closed)
            self.hosts[host.name] = h
        return h

    def start_flow(self, sim: SimRun, fid: int, spec: FlowSpec, src: Host, dst: Host, start_ns: int) -> None:
        tx, rx = self.host(sim, src), self.host(sim, dst)
        rx.expect(fid, src.ip, spec.size_bytes)
        dst.receivers[fid] = rx
        src.senders[fid] = tx
        sim.senders[fid] = tx
        msg = (tx, fid, dst.ip, spec.size_bytes)
        if start_ns == sim.engine.now:
            _start_homa_message(msg)
        else:
            sim.engine.at(start_ns, _start_homa_message, msg)


def _register(sim: SimRun, fid: int, src: Host, dst: Host, rx: Any, tx: Any, start_ns: int) -> None:
    dst.receivers[fid] = rx
    src.senders[fid] = tx
    sim.senders[fid] = tx
    if start_ns == sim.engine.now:
        tx.start()
    else:
        sim.engine.at(start_ns, _start_sender, tx)


def _start_sender(sender: Any) -> None:
    sender.start()


def _start_homa_message(msg: tuple[HomaHost, int, int, int]) -> None:
    tx, fid, dst_ip, size_bytes = msg
    tx.send_message(fid, dst_ip, size_bytes)

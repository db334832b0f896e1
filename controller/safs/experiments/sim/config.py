"""Simulator settings (:class:`SimConfig`) and the outcome of a run (:class:`SimResult`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from safs.core.allocator import AllocatorConfig
from safs.core.errors import InvalidInput
from safs.core.packet import ETH_HEADER_BYTES
from safs.core.scheduler import SchedulerConfig
from safs.experiments.metrics import FlowRecord
from safs.hosts.dctcp import DctcpConfig, dctcp_k_packets
from safs.hosts.homa import HomaConfig
from safs.hosts.pfabric import PfabricConfig, check_pfabric_overrides, pfabric_config
from safs.hosts.safs import SafsConfig
from safs.hosts.stats import TransportStats


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

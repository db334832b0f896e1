"""Simulator settings (:class:`SimConfig`) and the outcome of a run (:class:`SimResult`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from safs.core.config import ConfigModel
from safs.core.errors import InvalidInput
from safs.core.scheduler import SchedulerConfig, scheduler_config_for
from safs.experiments.control_profiles import ControlProfile, control_profile
from safs.experiments.metrics import FlowRecord
from safs.experiments.sim.control_plane import ControlStats
from safs.hosts.dctcp import DctcpConfig
from safs.hosts.homa import HomaConfig
from safs.hosts.pfabric import PfabricConfig, check_pfabric_overrides, pfabric_config
from safs.hosts.safs import SafsConfig
from safs.hosts.stats import TransportStats


class SimConfig(ConfigModel):
    """Simulator settings. Times in ns, sizes in bytes (:class:`safs.core.config.ConfigModel`;
    errors name ``sim.<key>``).

    Attributes:
        mtu_bytes: largest IP packet, default 9000 (jumbo frames). Packet-level Python
            simulation costs per packet; 9000-byte frames are standard in AI/RoCE fabrics and cut
            events 6x against 1500 (docs/simulator.md).
        max_time_ns: simulated-time horizon (default 1 s).
        activation_lead_ns: a flow announced ahead is activated (:meth:`Scheduler.activate`:
            the application told the controller when its data starts) this long before its
            first byte, or at the announce if that is later; default 5 µs, enough for the
            grant entry to be in place when the first REQUEST reaches the receiver's ToR.
        control_profile: the named control profile whose costs every switch write, counter read,
            digest and hint pays (:mod:`safs.experiments.control_profiles`): ``tofino``
            (default), ``bmv2``, or ``ideal`` (the free control plane: an ablation).
        hint_latency_ns: replaces the profile's hint RPC latency when set (ns; default None).
        control_costs: replaces some of the profile's costs (a mapping of
            :class:`~safs.experiments.control_profiles.ControlProfile` cost fields to ns, e.g.
            ``{switch_update_ns: 250000}``); the record's ``control_profile`` then names them
            (``tofino+switch_update_ns=250000``). For sweeps and for targets without a profile.
        tick_ns: period of ``Scheduler.tick`` (default: the scheduler config's ``tick_ns``).
        telemetry_ns: period of the telemetry read that adapts receiver ports' background shares
            (:class:`safs.core.telemetry.BackgroundShareAdapter`; only with
            ``scheduler.background_share_max`` set). Default 1 s, as in ``safs controller``
            (``--telemetry-s``); runs shorter than that need a shorter period (a scaled time,
            say so beside the results). Reads and writes pay the control profile's costs.
        digest_poll_ns: period of digest polls, default 10 µs (on the AFD benchmark a 50 µs
            poll made decode steps about 2x slower: digests are the fast path for new flows).
        renew_fraction: SAFS lease renewal point, in (0, 1), default 3/4 of the lease.
        safs_rto_ns: SAFS probe timeout, default 250 µs: the reorder window (200 µs) and 50 µs more, so
            the probe comes once a lost last segment's window would have passed (docs/simulator.md
            "Loss recovery"; 500 µs until 2026-12-04).
        safs_grant_poll_ns: the shortest REQUEST poll period of SAFS senders whose grant is
            too slow for in-band pushes (``SafsConfig.grant_poll_ns``; dependency senders back
            off to 16x it, ``safs-per-transfer`` polls at it), default 10 µs; 0: dependency
            senders never poll (``safs-per-transfer`` then uses 10 µs). Scale it with the
            fabric: it must stay above a control round trip (2 ms at 10 Mbit/s,
            scenarios/mininet-*.yaml, whose agents get the same poll and back-off).
        safs_reorder_window_ns: how long a missing SAFS segment may stay missing before it is
            reported lost (``SafsConfig.reorder_window_ns``), default 200 µs; scaled likewise.
        safs_burst_bytes: ``SafsConfig.burst_bytes`` of the SAFS hosts, wire bytes, at most 1 MiB:
            the pacer's token-bucket depth (a dependency the send scheduler held back while the
            NIC sent another's packets catches up to its grant by up to this much, at least two
            packets) and how far ahead of the line rate the send scheduler fills the NIC.
            Default 0: one packet at a time, and time held back is lost (a dependency sharing
            its NIC sends below its grant). Policies ``safs-overcommit`` and ``safs-admission``
            set 18,000 (two 9000-byte packets).
        safs_urgency_quantum_ns: ``SafsConfig.urgency_quantum_ns`` of the SAFS hosts: the
            send scheduler's deadline resolution, ns (>= 1), default 20 µs; independent of the
            scheduler's ``allocator.urgency_quantum_ns`` (scale both with the fabric).
        safs_receiver_admission: ``SafsConfig.receiver_admission`` of the SAFS hosts: "firm"
            (default: each receiving host rejects, of its inbound transfers with a firm deadline,
            those that keep the others from being on time), "moore-hodgson" (any transfer may be
            rejected; needs the scheduler's ``allocator.late_transfers`` "last"; policy
            ``safs-admission`` sets it) or "off".
        safs_admission_rate_fraction: ``SafsConfig.admission_rate_fraction``: the share of a
            receiver's line rate its admission plans with, in (0, 1], default 0.8 (measured;
            see there).
        safs_nic_yield_fraction: ``SafsConfig.nic_yield_fraction`` of the SAFS hosts, in
            [0, 0.5], default 0.25 (0: dependencies never yield their place when their NIC is
            taken; an ablation).
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
            :class:`AllocatorConfig` fields; errors name ``scheduler.<key>``, the scenario's
            own section). Unset fields are derived from the topology and ``mtu_bytes`` by
            :func:`safs.core.scheduler.scheduler_config_for`: ``max_frame_bytes`` = MTU + 14,
            ``ecn_threshold_pkts`` = DCTCP's K for the host link rate (:func:`safs.core.scheduler.dctcp_k_packets`)
            but at most a quarter of the smallest switch port buffer (below the
            dynamic-threshold limit of one class), ``allocator.line_rate_bps`` = the fastest
            host link.

    Raises:
        InvalidInput: a field out of range or an unknown key (field named; nested configs'
            errors as their methods say).
    """

    FIELD_PREFIX: ClassVar[str] = "sim."

    # 576: the smallest MTU every IPv4 host must accept (RFC 791); 65535: IPv4 total length.
    mtu_bytes: int = Field(9000, ge=576, le=65535)
    max_time_ns: int = Field(1_000_000_000, ge=1)
    control_profile: str = "tofino"
    hint_latency_ns: int | None = Field(None, ge=0)
    control_costs: dict[str, int] = Field(default_factory=dict)
    activation_lead_ns: int = Field(5_000, ge=0)
    tick_ns: int | None = Field(None, ge=1)
    telemetry_ns: int = Field(1_000_000_000, ge=100_000, le=3_600_000_000_000)
    digest_poll_ns: int = Field(10_000, ge=1)
    renew_fraction: float = Field(0.75, gt=0, lt=1)
    safs_rto_ns: int = Field(250_000, ge=1)
    safs_grant_poll_ns: int = Field(10_000, ge=0)
    safs_reorder_window_ns: int = Field(200_000, ge=0)
    safs_burst_bytes: int = Field(0, ge=0, le=1 << 20)
    safs_urgency_quantum_ns: int = Field(SafsConfig.model_fields["urgency_quantum_ns"].default, ge=1)
    safs_receiver_admission: Literal["off", "firm", "moore-hodgson"] = (
        SafsConfig.model_fields["receiver_admission"].default)
    safs_admission_rate_fraction: float = Field(SafsConfig.model_fields["admission_rate_fraction"].default, gt=0, le=1)
    safs_nic_yield_fraction: float = Field(SafsConfig.model_fields["nic_yield_fraction"].default, ge=0, le=0.5)
    buffer_dt_alpha: float = Field(1.0, ge=0, le=64)
    dctcp: dict[str, Any] = Field(default_factory=dict)
    homa: dict[str, Any] = Field(default_factory=dict)
    pfabric: dict[str, Any] = Field(default_factory=dict)
    scheduler: dict[str, Any] = Field(default_factory=dict)

    @field_validator("safs_receiver_admission", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        return "off" if v is False else v  # YAML reads an unquoted off as false

    @model_validator(mode="after")
    def _nested_configs(self) -> SimConfig:
        # Validate the nested configs now so a bad scenario fails before any run. Their errors
        # are InvalidInput with their full names (sim.dctcp.<key>, scheduler.<key>, ...).
        self.profile()
        self.safs_config(admission=False)  # its late_transfers may come from the policy: checked per run
        self.dctcp_config()
        self.homa_config()
        self.pfabric_config(None)
        return self

    @classmethod
    def from_mapping(cls, mapping: Any, scheduler: Mapping[str, Any] | None = None, max_time_ns: int | None = None,
                     source: str | None = None, *, prefix: str | None = None,
                     fixed: Mapping[str, Any] | None = None) -> SimConfig:
        """Build from a scenario's ``sim:`` mapping (plus its ``scheduler:`` mapping and horizon,
        which replaces the mapping's ``max_time_ns``).

        Raises:
            InvalidInput: unknown key (``sim.<key>``; ``scheduler`` is its own section, so not
                one; the message lists the valid ones) or a bad value; source ``source``.
        """
        if max_time_ns is not None and isinstance(mapping, Mapping):
            mapping = {**mapping, "max_time_ns": max_time_ns}
        return super().from_mapping(mapping, source=source, prefix=prefix,
                                    fixed={"scheduler": dict(scheduler or {}), **(fixed or {})})

    def profile(self) -> ControlProfile:
        """The control profile (:data:`control_profile`, with ``hint_latency_ns`` applied).

        Raises:
            InvalidInput: ``sim.control_profile`` not a known profile.
        """
        profile = control_profile(self.control_profile)
        if self.hint_latency_ns is not None:
            profile = profile.replace(hint_rpc_ns=self.hint_latency_ns)
        if self.control_costs:
            costs = [k for k in ControlProfile.model_fields if k.endswith("_ns")]
            for key, value in self.control_costs.items():
                if key not in costs:
                    raise InvalidInput(f"sim.control_costs.{key}", f"must be one of {', '.join(costs)}")
                if not isinstance(value, int) or value < 0:
                    raise InvalidInput(f"sim.control_costs.{key}", f"must be an integer >= 0 (ns), got {value!r}")
            label = "+".join([profile.name, *(f"{k}={v}" for k, v in sorted(self.control_costs.items()))])
            profile = profile.replace(name=label, **self.control_costs)
        return profile

    def safs_config(self, admission: bool = True) -> SafsConfig:
        """The SAFS transport settings (default rate and unscheduled bytes from the scheduler's).

        Raises:
            InvalidInput: as :meth:`scheduler_config`, the scheduler's default rate 0 (the
                transport's ``default_rate_bps`` must be > 0), or (unless ``admission`` is False:
                receiver admission left off) ``safs_receiver_admission`` "moore-hodgson" while
                the run's ``scheduler.allocator.late_transfers`` is not "last".
        """
        sched = self.scheduler_config(None)
        admit = self.safs_receiver_admission if admission else "off"
        if admit == "moore-hodgson" and sched.allocator.late_transfers != "last":
            raise InvalidInput("sim.safs_receiver_admission", f"{admit!r} needs scheduler.allocator.late_transfers "
                               f"'last' (policies safs-late-last, safs-overcommit and safs-admission set it), got "
                               f"{sched.allocator.late_transfers!r}")
        return SafsConfig(mtu_bytes=self.mtu_bytes, default_rate_bps=sched.default_rate_bps,
                          renew_fraction=self.renew_fraction, rto_ns=self.safs_rto_ns,
                          grant_poll_ns=self.safs_grant_poll_ns, reorder_window_ns=self.safs_reorder_window_ns,
                          unscheduled_bytes=sched.unscheduled_bytes,
                          urgency_quantum_ns=self.safs_urgency_quantum_ns,
                          slack_thresholds_ns=tuple(sched.allocator.slack_thresholds_ns) if sched.slack_classes else (),
                          late_transfers=sched.allocator.late_transfers, burst_bytes=self.safs_burst_bytes,
                          receiver_admission=admit,
                          admission_rate_fraction=self.safs_admission_rate_fraction,
                          nic_yield_fraction=self.safs_nic_yield_fraction)

    def dctcp_config(self) -> DctcpConfig:
        """The DCTCP settings (``sim.dctcp`` with the MTU).

        Raises:
            InvalidInput: ``sim.dctcp.<key>`` unknown or out of range.
        """
        return DctcpConfig.from_mapping(self.dctcp, prefix="sim.dctcp.", fixed={"mtu_bytes": self.mtu_bytes})

    def homa_config(self) -> HomaConfig:
        """The Homa settings (policy ``"homa"``; ``sim.homa`` with the MTU).

        Raises:
            InvalidInput: ``sim.homa.<key>`` unknown or out of range.
        """
        return HomaConfig.from_mapping(self.homa, prefix="sim.homa.", fixed={"mtu_bytes": self.mtu_bytes})

    def pfabric_config(self, topology: Any | None) -> PfabricConfig | None:
        """The pFabric settings for ``topology`` (policy ``"pfabric"``: the paper's, derived from
        the topology by :func:`pfabric_config`, with ``sim.pfabric`` overrides); with ``topology``
        None only the overrides are checked and None is returned.

        Raises:
            InvalidInput: ``sim.pfabric.<key>`` unknown or out of range.
        """
        if topology is None:
            check_pfabric_overrides(self.pfabric, prefix="sim.pfabric.")
            return None
        return pfabric_config(topology, self.mtu_bytes, self.pfabric, prefix="sim.pfabric.")

    def scheduler_config(self, topology: Any | None) -> SchedulerConfig:
        """The scheduler settings: ``scheduler`` with unset fields derived from ``topology`` and
        ``mtu_bytes`` by :func:`safs.core.scheduler.scheduler_config_for` (see class doc).

        Raises:
            InvalidInput: ``scheduler.<key>`` unknown or out of range.
        """
        return scheduler_config_for(topology, self.mtu_bytes, self.scheduler)


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
        control: the simulated control plane's counters (:class:`ControlStats`: writes and
            their delays, digests, hints, reads).  control_profile: the profile's name.
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
    control: ControlStats
    control_profile: str

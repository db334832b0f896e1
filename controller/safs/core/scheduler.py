"""The brain glue: hints -> allocator -> target writes. Target-agnostic (no gRPC, no simulator).

::

    announce / update / complete / digests          tick (time passes)
                     |                                     |
               HintRegistry (validate, merge)        estimate remaining bytes
                     \\______________  _________________/
                                    Allocator (grants that changed)
                                        |
                     per receiver ToR: dep_meter[slot] MODIFY, dep_grant INSERT/MODIFY/DELETE
                                        |   (diffed against a shadow of what is installed)
                                   Target.write(batch)   -- PipelineModel or P4Runtime switch

Each flow admitted (announced, or created by a REQUEST digest) gets a meter slot at its
receiver's ToR (slot 0 is the default-grant meter, so flows use 1..meter_slots-1) and a
``dep_grant`` entry there; the slot is freed on :meth:`Scheduler.complete`.

Meter sizing (per flow slot and for the default slot 0), rates from the grant ``rate`` in bit/s:

* ``cir = rate / 8`` bytes/s (the committed rate is the granted rate; BRIEF "Meters");
* ``pir = cir * (1 + yellow_fraction)`` bytes/s: packets between the two rates are yellow;
* ``cburst = max(2 * max_frame_bytes, cir * burst_ns / 1e9, unscheduled_bytes)`` bytes, and
  ``pburst`` the same with ``pir``: at least two full frames so a paced sender at exactly the
  granted rate is not demoted by timing jitter, ``burst_ns`` of traffic at the rate so
  line-rate bursts of a paced sender stay green, and the unscheduled bytes a sender may send at
  line rate before its grant arrives (so they keep their slack class).

Remaining bytes between reports (:meth:`Scheduler.tick`): the receiver's ToR counts each
flow's DATA in ``flow_bytes[slot]`` (BRIEF: the switch counts bytes), so a flow's remaining
bytes are estimated as ``last reported - payload counted since the report`` (payload = counted
bytes - packets * 78 header bytes, clamped to at least 1 byte). A flow announced ahead of its
data therefore keeps its full size until it really sends. The next :meth:`Scheduler.update`
replaces the estimate with the reported value. Estimates go to the allocator only, never to
the hint registry (whose remaining bytes may only shrink, so an over-estimate of progress
must not lock a real report out).

Control traffic is counted in :attr:`Scheduler.stats`: table and meter updates written, write
batches, and an estimate of their encoded size in bytes (``*_UPDATE_BYTES`` below), for the
"control bytes per data byte" metric.
"""

from __future__ import annotations

import heapq
import ipaddress
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, cast

from pydantic import Field, field_validator, model_validator

from safs.core import p4names as n
from safs.core.allocator import Allocator, AllocatorConfig, AllocFlow, Grant
from safs.core.config import ConfigModel, FieldError
from safs.core.errors import InvalidInput, TargetError, UpdateFailure
from safs.core.hints import DependencyHint, DependencyRegistry, FlowClass, FlowHint, HintRegistry
from safs.core.packet import ETH_HEADER_BYTES, PROTO_TCP, PROTO_UDP
from safs.core.protocol import (
    EPOCH_MAX,
    QUEUE_SLACK_LEAST_URGENT,
    WIRE_OVERHEAD_BYTES,
    lease_ns_to_us,
    rate_bps_to_kbps,
    transfer_dep_id,
)
from safs.core.target import (
    ActionProfileGroup,
    ActionProfileMember,
    CloneSession,
    CounterValue,
    Lpm,
    MatchValue,
    MeterConfig,
    Op,
    ProfileEntity,
    Range,
    RequestDigest,
    SwitchState,
    TableEntry,
    TableEntryKey,
    Target,
    Ternary,
    Update,
)
from safs.core.timebase import TIME_MASK, slack_to_key, wrap

if TYPE_CHECKING:  # annotations only
    from safs.core.topology import Topology

_log = logging.getLogger(__name__)

NS_PER_S = 1_000_000_000

# Encoded size of one P4Runtime Update (protobuf), measured by benchmarks/fit_control_profile.py:
# a dep_grant entry 62 bytes, a MeterConfig 38 bytes, WriteRequest overhead (device id, election
# id) under 10 bytes per batch.
TABLE_UPDATE_BYTES = 62
METER_UPDATE_BYTES = 38
BATCH_OVERHEAD_BYTES = 10


class TrafficClassSpec(ConfigModel):
    """One aggregate of non-SAFS traffic mapped to one queue (docs/dataplane.md, "Traffic
    classes"; p4src/include/traffic_class.p4), for example NCCL over RoCEv2.

    Attributes:
        name: a label (logs and docs only).
        src, dst: IPv4 networks (CIDR, e.g. ``10.0.1.0/24``; a bare address is a /32), or None
            for any.
        protocol: IP protocol 0..255 (6 TCP, 17 UDP), or None for any.
        src_ports, dst_ports: inclusive ``[low, high]`` L4 port ranges (UDP or TCP), or None for
            any. RoCEv2 is UDP to 4791; its source port is only ECMP entropy, so match on the
            destination port and the QP, not the source port.
        roce_qp, roce_qp_mask: the BTH destination QP (24 bits) and which of its bits must
            match (default all); None for any.
        queue: the strict-priority queue 0..6 (7 is SAFS control), or
        slack_ns: the aggregate's slack instead: it gets the queue SAFS gives a DATA packet
            with this much slack (the allocator's slack classes). Exactly one of the two.
        rate_bps: one meter for the whole aggregate, bit/s (None: unmetered). Over the rate
            (RED) a packet is ECN-marked CE if ECN-capable and dropped otherwise; it is never
            moved to another queue (reordering part of a RoCE flow sets off go-back-N).

    Entries earlier in ``SchedulerConfig.traffic_classes`` win where aggregates overlap.
    """

    name: str = Field(min_length=1, max_length=64)
    src: str | None = None
    dst: str | None = None
    protocol: int | None = Field(None, ge=0, le=255)
    src_ports: list[int] | None = Field(None, min_length=2, max_length=2)
    dst_ports: list[int] | None = Field(None, min_length=2, max_length=2)
    roce_qp: int | None = Field(None, ge=0, le=2**24 - 1)
    roce_qp_mask: int = Field(2**24 - 1, ge=1, le=2**24 - 1)
    queue: int | None = Field(None, ge=0, le=6)
    slack_ns: int | None = Field(None, ge=-(2**46), le=2**46)
    rate_bps: int | None = Field(None, gt=0, le=2**63 - 1)

    @field_validator("src", "dst")
    @classmethod
    def _cidr(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                ipaddress.IPv4Network(v, strict=True)
            except ValueError as exc:
                raise ValueError(f"expected an IPv4 network like 10.0.1.0/24 (host bits zero), got {v!r}: {exc}") \
                    from None
        return v

    @field_validator("src_ports", "dst_ports")
    @classmethod
    def _ports(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and not 0 <= v[0] <= v[1] <= 65535:
            raise ValueError(f"expected [low, high] with 0 <= low <= high <= 65535, got {v}")
        return v

    @model_validator(mode="after")
    def _queue_or_slack(self) -> TrafficClassSpec:
        if (self.queue is None) == (self.slack_ns is None):
            raise FieldError("queue", "give exactly one of queue (0..6) and slack_ns")
        if self.roce_qp is not None and self.roce_qp & self.roce_qp_mask != self.roce_qp:
            raise FieldError("roce_qp_mask",
                             f"roce_qp {self.roce_qp:#x} has bits outside the mask {self.roce_qp_mask:#x}")
        # A class that can never match would be accepted and silently change nothing.
        for key, ports in (("src_ports", self.src_ports), ("dst_ports", self.dst_ports)):
            if ports is not None and self.protocol not in (None, PROTO_TCP, PROTO_UDP):
                raise FieldError(key, f"L4 ports exist only for TCP ({PROTO_TCP}) and UDP ({PROTO_UDP}), "
                                      f"protocol is {self.protocol}: this class could never match")
        if self.roce_qp is None and "roce_qp_mask" in self.model_fields_set:
            raise FieldError("roce_qp_mask", "applies only with roce_qp (the QP it masks)")
        if self.roce_qp is not None:
            if self.protocol not in (None, PROTO_UDP):
                raise FieldError("roce_qp", f"a RoCEv2 QP is carried only over UDP ({PROTO_UDP}), protocol is "
                                            f"{self.protocol}: this class could never match")
            ports = self.dst_ports
            if ports is not None and not ports[0] <= n.ROCE_V2_UDP_PORT <= ports[1]:
                raise FieldError("roce_qp", f"the QP is parsed only in UDP packets to port {n.ROCE_V2_UDP_PORT}, "
                                            f"dst_ports {ports} exclude it: this class could never match")
        return self


class SchedulerConfig(ConfigModel):
    """Scheduler settings (validated on construction; InvalidInput names the field,
    ``config.<name>``; :class:`safs.core.config.ConfigModel`). :func:`scheduler_config_for`
    derives the topology-dependent ones (frame size, ECN K, line rate).

    Attributes:
        allocator: :class:`safs.core.allocator.AllocatorConfig` (headroom, margin, lease, re-send...).
        default_rate_bps: rate of the default grant (flows the controller has no grant for
            yet, and senders whose lease expired), bit/s, 0..2^32-1 kbit/s. Default 1 Gbit/s:
            small, so a dead controller cannot leave many senders fast (BRIEF "How grants reach
            senders"), yet a new flow starts before its grant is installed.
        default_lease_ns: lease of the default grant, ns (>= 1 µs). Default 1 ms.
        ecn_threshold_pkts: ECN marking threshold K in packets of enqueue depth, 1..2^19-1.
            Default 65: DCTCP's K for 10 Gbit/s (Alizadeh et al., "Data Center TCP", SIGCOMM
            2010, Section 3.4).
        max_frame_bytes: largest frame on the wire (``Packet.size``), bytes. Default 1514
            (1500-byte IP MTU + 14-byte Ethernet header).
        meter_burst_ns: burst allowance of a meter, ns of traffic at its rate (see module
            docstring). Default 20 µs.
        yellow_fraction: peak rate above committed rate, as a fraction, in [0, 10]. Default 0.1.
        meter_slots: meter slots usable per switch including slot 0, 2..DEP_SLOTS.
        tick_ns: suggested period of :meth:`Scheduler.tick` for drivers (the simulator), ns.
            Default 100 µs.
        admit_on_request: allocate a flow from its first REQUEST (the receiver's ToR digests
            REQUESTs of flows without a grant entry) rather than from its hint. Default True:
            applications announce transfers ahead of their data (BRIEF: hints carry the
            no-bubble timestamp), and rate granted to a flow that is not sending yet would be
            wasted. False allocates at announce (tests of the install path use it).
        unscheduled_bytes: bytes a sender may send at line rate at flow start before its grant
            arrives (the transports' setting; sizes meter bursts). Default 32 KiB: about one RTT
            of line rate at 100 Gbit/s on a two-tier fabric (Homa's RTTbytes rule).
        rate_grants: True (SAFS). False is the ablation "slack classes without rate grants"
            (policy ``safs-no-grants``, docs/baselines.md): hints are recorded but no flow is
            admitted to the allocator, so no grant entry or flow meter is ever written, and the
            default-grant meter (slot 0) is left unconfigured, so DATA is never demoted to queue 1
            (an unconfigured meter marks green, in the pipeline model as on BMv2).
        slack_classes: True (SAFS). False is the ablation "rate grants without slack classes"
            (policy ``safs-no-classes``): no ``slack_class`` ranges are installed, so every SAFS
            DATA packet takes the table's default action, one data queue
            (``QUEUE_SLACK_LEAST_URGENT``) and urgency 4 for share grants (so one class shares
            each port equally), whatever its slack; grants and meters are unchanged.
        grant_mode: ``"share"`` (default): dependency grants; the controller writes a
            dependency's entry and meter when it appears or ends, and the receiver's ToR gives
            each active dependency its share of the port (docs/protocol.md, "Grants").
            ``"per-transfer"``: the first design, kept as policy ``safs-per-transfer``: every
            transfer is a flow the allocator grants, and every grant change is a write.
        share_lease_ns: lease of share grants, ns. Default 20 ms: a dependency's transfers
            recur well within it (an AFD layer takes ~1 ms, a ZeroBubble micro-batch less), so
            they reuse the grant without a REQUEST; senders renew in-band (``FLAG_RENEW``).
        waiting_share: fraction of a receiver port's usable rate kept for dependencies waiting
            behind a more urgent slack class, split equally among them, in [0.001, 0.5]. They
            need some rate: the switch sees a dependency's urgency only in its packets, and a
            waiting one's grows until it shares the port. Default 1/32 (about 3 Gbit/s of
            100 Gbit/s: a 9000-byte packet each 24 µs for one waiting dependency). It is
            also the unit of the spare level: waiting dependencies share as many reserves as
            the top class left unused in the last window, up to ``MAX_SPARE_LEVEL`` (64)
            (docs/protocol.md, "Grants").
        link_shares: which fabric links of a ToR get share entries (docs/protocol.md, "Grants"):
            the links into it (``link_share``, ``link_spare_level``), so that the dependencies
            arriving on one share it as a receiver port's share it and each holds the smaller of
            its two shares, and the links out of it (``out_share``, ``out_spare_level``), where
            the dependencies its hosts send share the link the same way and the GRANTs coming
            back are capped to that share: ``"oversubscribed"`` (default) the links the
            hose-model check names (:meth:`Topology.oversubscribed_links`, none on a
            non-blocking fabric), ``"all"`` every such link, ``"off"`` none (the receiver ports
            alone, as before 2026-12-04). Out-links are shared in the share design only (a
            dependency's ``dep_claim`` entry gives its out slot, the same as its meter slot).
        holder_idle_ns: the port holder (docs/protocol.md, "Grants"): when two or more
            dependencies in a receiver port's most urgent class are their senders' only ones
            with data (``FLAG_SOLE``), they count as one in the port's share and take the full
            share one at a time, so equally urgent incast transfers finish one after another
            (as the EDF oracle's and Homa's do) instead of together near their deadline. A
            sole dependency's DATA takes the port from a holder that sent nothing for this
            long. Default 10 µs (about 8 packets at 100 Gbit/s); 0 turns the holder off
            (policy ``safs-no-holder``): sole dependencies share like the others.
        holder_release_bytes: a holder with at most this many bytes left frees the port and
            keeps its share, so the next one ramps up while it finishes. Default 60 kB (about
            5 µs at 100 Gbit/s; 100 kB and more overlap the two long enough to overflow a
            1 MiB port buffer: docs/evaluation.md).
        holder_preempt_ns: a sole dependency whose finish estimate (latest start + remaining
            bytes at 100 Gbit/s) is more than this before the holder's takes the port (EDF
            between holders). Default 100 µs. One finishing before the holder by less also takes
            it when it is shorter and its time at 100 Gbit/s fits in the holder's slack
            (docs/protocol.md, "Order within the class: the port holder").
        top_overcommit: the most a receiver port's top-class share is raised by when that class
            left the port partly idle in the last window (``top_boost``; docs/protocol.md,
            "Top-class overcommit"), in [1, 2]: a top-class dependency sharing the port with
            others gets its share x min(top_overcommit, U / top bytes), in steps of 1/16 rounded
            down, with U the bytes the port's usable rate moves in a window. Senders busy with
            other receivers then leave no idle capacity behind them, as Homa's overcommitted
            grants do, at the price of granting more than the usable rate for up to a window
            when they come back. Default 1: off (no entries), so grants never add up to more
            than the port's usable rate (BRIEF's first invariant); policies ``safs-overcommit``
            and ``safs-admission`` set 2, over a scenario's value (a scenario's value applies to
            the other SAFS policies). Share design only.
        traffic_classes: aggregates of non-SAFS traffic and their queues and meters
            (:class:`TrafficClassSpec`), installed on every switch; at most 255 (the P4
            program's ``traffic_class`` and ``aggregate_meter`` sizes). Default none: all
            non-SAFS traffic in queue 0.
        background_share: fraction of each receiver port kept from the dependencies' shares for
            traffic without a grant (class 0), in [0, 0.9]. Default 0. With
            ``background_share_max`` it is the floor of the adaptive share.
        background_share_max: ceiling of a receiver port's background share adapted from
            telemetry (:class:`safs.core.telemetry.BackgroundShareAdapter`: raised while the port
            carries background and marks ECN, lowered while the background uses less), in
            [background_share, 0.9]. Default None: no adaptation, every port keeps
            ``background_share``.
        background_share_step: how much one telemetry period moves a port's adaptive share,
            in [0.005, 0.5]. Default 0.05.
        control_share: rate of REQUEST and DONE packets a host may send into its ToR, as a
            fraction of its link rate, in [0.0001, 0.5] (``control_meter``; above it they are
            dropped and counted, ``forged[3]``). Default 1%: at 100 Gbit/s about 1.6 million
            78-byte packets per second, three orders above what the AFD and ZeroBubble
            workloads send (one REQUEST and one DONE per transfer).
    """

    FIELD_PREFIX: ClassVar[str] = "config."

    allocator: AllocatorConfig = Field(default_factory=AllocatorConfig)
    default_rate_bps: int = Field(1_000_000_000, ge=0, le=(2**32 - 1) * 1000)
    default_lease_ns: int = Field(1_000_000, ge=1_000, le=(2**32 - 1) * 1000)
    ecn_threshold_pkts: int = Field(65, ge=1, le=2**19 - 1)
    max_frame_bytes: int = Field(1514, ge=64, le=65_535)
    meter_burst_ns: int = Field(20_000, ge=0, le=10 * NS_PER_S)
    yellow_fraction: float = Field(0.1, ge=0, le=10)
    meter_slots: int = Field(n.DEP_SLOTS, ge=2, le=n.DEP_SLOTS)
    tick_ns: int = Field(100_000, ge=1, le=2**47)
    unscheduled_bytes: int = Field(32_768, ge=0, le=2**32)
    admit_on_request: bool = True
    rate_grants: bool = True
    slack_classes: bool = True
    grant_mode: Literal["share", "per-transfer"] = "share"
    share_lease_ns: int = Field(20_000_000, ge=1_000, le=(2**32 - 1) * 1000)
    waiting_share: float = Field(1 / 32, ge=0.001, le=0.5)
    background_share: float = Field(0.0, ge=0, le=0.9)
    background_share_max: float | None = Field(None, ge=0, le=0.9)
    background_share_step: float = Field(0.05, ge=0.005, le=0.5)
    control_share: float = Field(0.01, ge=0.0001, le=0.5)
    link_shares: Literal["oversubscribed", "all", "off"] = "oversubscribed"
    holder_idle_ns: int = Field(10_000, ge=0, le=2**32 - 1)
    holder_release_bytes: int = Field(60_000, ge=0, le=2**32 - 1)
    holder_preempt_ns: int = Field(100_000, ge=0, le=2**32 - 1)
    top_overcommit: float = Field(1.0, ge=1.0, le=2.0)
    traffic_classes: list[TrafficClassSpec] = Field(default_factory=list)

    @field_validator("traffic_classes")
    @classmethod
    def _traffic_class_limit(cls, v: list[TrafficClassSpec]) -> list[TrafficClassSpec]:
        limit = n.AGGREGATE_METERS - 1
        if len(v) > limit:
            raise ValueError(f"at most {limit} entries (the P4 program's traffic_class and aggregate_meter), "
                             f"got {len(v)}")
        names = [tc.name for tc in v]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"names must be unique (logs and metrics tell classes apart by name), "
                             f"{', '.join(map(repr, twice))} given more than once")
        return v

    @model_validator(mode="after")
    def _background_bounds(self) -> SchedulerConfig:
        if self.background_share_max is not None and self.background_share_max < self.background_share:
            raise FieldError("background_share_max", f"must be >= background_share ({self.background_share:g}), "
                             f"got {self.background_share_max:g}")
        if self.grant_mode == "per-transfer" and self.allocator.late_transfers != "first":
            # the per-transfer allocator orders by deadline only: "last" would be ignored there
            raise FieldError("allocator.late_transfers", "must be 'first' with grant_mode 'per-transfer', "
                             f"got {self.allocator.late_transfers!r}")
        if self.grant_mode == "per-transfer" and self.top_overcommit != 1:
            # per-transfer grants are fixed rates: there is no port share to raise
            raise FieldError("top_overcommit", "must be 1 with grant_mode 'per-transfer', "
                             f"got {self.top_overcommit:g}")
        return self

    def meter_for(self, slot: int, rate_bps: int) -> MeterConfig:
        """Meter config of ``dep_meter[slot]`` for a grant of ``rate_bps`` (module docstring)."""
        cir = rate_bps // 8
        pir = cir + int(cir * self.yellow_fraction)
        floor = max(2 * self.max_frame_bytes, self.unscheduled_bytes)
        cburst = max(floor, cir * self.meter_burst_ns // NS_PER_S)
        pburst = max(floor, pir * self.meter_burst_ns // NS_PER_S)
        return MeterConfig(n.DEP_METER, slot, cir=cir, cburst=cburst, pir=pir, pburst=pburst)


# Tables with an entry per admitted dependency (or per-transfer flow), planned by the
# dependency code rather than as static state: a grant at the receiver's ToR, a claim at the sender's.
_PER_DEPENDENCY_TABLES = frozenset({n.DEP_GRANT, n.DEP_CLAIM})
# Meters other than dep_meter, each indexed by aggregate or host port.
_PORT_METERS = (n.AGGREGATE_METER, n.CONTROL_METER, n.UNCLAIMED_METER)
# Share and spare-level tables: the port they are keyed by and their action.
_SHARE_TABLES = {
    n.PORT_SHARE: (n.F_EGRESS_PORT, n.ACT_SET_SHARE), n.SPARE_LEVEL: (n.F_EGRESS_PORT, n.ACT_SET_SPARE_LEVEL),
    n.LINK_SHARE: (n.F_INGRESS_PORT, n.ACT_SET_LINK_SHARE),
    n.LINK_SPARE_LEVEL: (n.F_INGRESS_PORT, n.ACT_SET_LINK_SPARE_LEVEL),
    n.OUT_SHARE: (n.F_EGRESS_PORT, n.ACT_SET_OUT_SHARE),
    n.OUT_SPARE_LEVEL: (n.F_EGRESS_PORT, n.ACT_SET_OUT_SPARE_LEVEL),
}


def _is_tor(topology: Topology, sw: str) -> bool:
    """``sw`` has a host attached (a ToR: it grants for its receivers and shares out-links)."""
    return any(topology.is_host(nb) for nb in topology.ports(sw).values())


DEFAULT_RATE_PERCENT = 1  # default grant, % of the fastest host link (scheduler_config_for)
DCTCP_K_PKTS_10G = 65  # DCTCP paper, Section 3.4: K = 65 packets at 10 Gbit/s
DCTCP_K_PKT_BYTES = 1500  # ... measured in 1500-byte packets
DCTCP_K_RATE_BPS = 10_000_000_000


def _ternary_net(cidr: str | None) -> Ternary:
    """An IPv4 network as a ternary match (None: don't care)."""
    if cidr is None:
        return Ternary(0, 0)
    net = ipaddress.IPv4Network(cidr)
    return Ternary(int(net.network_address), int(net.netmask))


def dctcp_k_packets(rate_bps: int, mtu_bytes: int) -> int:
    """ECN marking threshold K in packets of ``mtu_bytes`` for a link of ``rate_bps``.

    K = 65 packets of 1500 bytes at 10 Gbit/s (Alizadeh et al., "Data Center TCP", SIGCOMM
    2010, Section 3.4) scaled linearly with the rate (K is a bandwidth-delay product), then
    converted to packets of ``mtu_bytes``; at least 1. Example: 100 Gbit/s, 9000-byte MTU -> 109
    packets.

    Raises:
        InvalidInput: ``rate_bps`` or ``mtu_bytes`` not positive.
    """
    if rate_bps <= 0:
        raise InvalidInput("rate_bps", f"must be > 0 bit/s, got {rate_bps}")
    if mtu_bytes <= 0:
        raise InvalidInput("mtu_bytes", f"must be > 0, got {mtu_bytes}")
    k_bytes = DCTCP_K_PKTS_10G * DCTCP_K_PKT_BYTES * rate_bps // DCTCP_K_RATE_BPS
    return max(1, -(-k_bytes // mtu_bytes))


def scheduler_config_for(topology: Topology | None, mtu_bytes: int, overrides: Mapping[str, Any] | None = None, *,
                         prefix: str = "scheduler.", source: str | None = None) -> SchedulerConfig:
    """The scheduler settings for a fabric: ``overrides`` (a ``scheduler:`` mapping of
    :class:`SchedulerConfig` fields, ``allocator`` a mapping of :class:`AllocatorConfig`
    fields) with the fields they leave unset derived from ``topology`` and ``mtu_bytes``:

    * ``max_frame_bytes`` = ``mtu_bytes`` + 14 (Ethernet header);
    * ``ecn_threshold_pkts`` = :func:`dctcp_k_packets` for the fastest host link, but at most a
      quarter of the smallest switch port buffer in full frames (K must sit well below what one
      class may hold, half the port buffer under dynamic thresholds with alpha 1, so DCTCP sees
      marks before drops), and at least 1;
    * ``allocator.line_rate_bps`` = the fastest host link, bit/s;
    * ``default_rate_bps`` = DEFAULT_RATE_PERCENT (1%) of it: the default grant (and the
      sender's ToR's ``unclaimed_meter``) must stay well below a host link to limit anything;
      1 Gbit/s at 100 Gbit/s, the :class:`SchedulerConfig` default.

    With ``topology`` None only ``max_frame_bytes`` is derived (the rest keep their defaults).
    The simulator (``SimConfig.scheduler_config``), the Mininet backend and ``safs controller``
    all derive their settings here.

    Args:
        topology: a :class:`safs.core.topology.Topology`, or None.
        mtu_bytes: largest IP packet of the fabric, bytes (> 0).
        overrides: the user's keys (None: none).
        prefix, source: error field prefix and file, as :meth:`ConfigModel.from_mapping`.

    Raises:
        InvalidInput: an unknown key or a bad value (field ``prefix + key path``).
    """
    if overrides is not None and not isinstance(overrides, Mapping):
        return SchedulerConfig.from_mapping(  # type: ignore[unreachable]  # untyped callers may pass a non-mapping
            overrides, prefix=prefix, source=source)  # raises: not a mapping
    raw = dict(overrides or {})
    alloc = raw.get("allocator")
    if alloc is None or isinstance(alloc, Mapping):  # anything else is refused by from_mapping
        alloc = raw["allocator"] = dict(alloc or {})
    frame = mtu_bytes + ETH_HEADER_BYTES
    raw.setdefault("max_frame_bytes", frame)
    if topology is not None:
        line_rate = max(topology.host_link_bps(h) for h in topology.hosts())
        quarter_buffer_pkts = min(topology.buffer_bytes(sw) for sw in topology.switches()) // (4 * frame)
        raw.setdefault("ecn_threshold_pkts", max(1, min(dctcp_k_packets(line_rate, mtu_bytes), quarter_buffer_pkts)))
        raw.setdefault("default_rate_bps", line_rate * DEFAULT_RATE_PERCENT // 100)
        if isinstance(alloc, dict):
            alloc.setdefault("line_rate_bps", line_rate)
    return SchedulerConfig.from_mapping(raw, prefix=prefix, source=source)


def node_mac(topology: Topology, node: str) -> int:
    """MAC address (48-bit int) of a topology node, as the routes' ``dst_mac`` uses it.

    Locally administered unicast addresses: a host is ``02:00:<its IPv4 address>``, the i-th
    switch of ``topology.switches()`` (from 0) is ``02:01:00:00:<i+1 as 16 bits>``. Mininet
    hosts must be given the same MACs.

    Raises:
        InvalidInput: ``node`` is not in the topology.
    """
    if topology.is_host(node):
        return 0x020000000000 | topology.host_ip(node)
    switches = topology.switches()
    if node not in switches:
        raise InvalidInput("node", f"{node!r} is not a host or switch of {topology.name!r}")
    return 0x020100000000 | (switches.index(node) + 1)


def wire_epoch(epoch: int) -> int:
    """Epoch as carried in the 32-bit header/table field: 1..2^32-1, cycling and skipping 0
    (0 means "no grant", see :func:`safs.core.protocol.next_epoch`). ``epoch`` >= 1."""
    return (epoch - 1) % EPOCH_MAX + 1


@dataclass
class SchedulerStats:
    """Control-plane traffic written to targets since construction.

    Attributes:
        table_updates: table entry updates (INSERT/MODIFY/DELETE, defaults included).
        meter_updates: meter config MODIFYs.
        batches: write calls.
        control_bytes: estimated encoded bytes (see module constants).
        grant_changes: grants the allocator changed (each becomes at most one entry write).
        digests_merged: digests that changed the hint registry.
        digests_echoed: digests of flows already admitted (a REQUEST that passed before the
            flow's grant entry was written); ignored.
        digests_rejected: digests refused (bad content, or no free meter slot).
        write_failures: updates a target refused after reconciliation (retried by tick).
        dependencies: dependencies admitted (a grant entry and a meter written for each).

    Clone sessions are not counted in ``table_updates`` or ``control_bytes``: they are static,
    written by :meth:`Scheduler.setup` and :meth:`Scheduler.reinstall` in the same batch as the
    static table entries (so ``batches`` does not change either), and leaving them out keeps
    these figures comparable with runs recorded before the controller wrote them
    (tests/test_sim_golden.py pins them).
    """

    table_updates: int = 0
    meter_updates: int = 0
    batches: int = 0
    control_bytes: int = 0
    grant_changes: int = 0
    digests_merged: int = 0
    digests_echoed: int = 0
    digests_rejected: int = 0
    dependencies: int = 0
    write_failures: int = 0


class Journal(Protocol):
    """Where the scheduler reports the state it cannot read back from a switch, as it changes
    (the controller's durable store, :class:`safs.control.state.StateStore`). Calls are made
    under the caller's lock and must return quickly (queue, do not commit)."""

    def put_dependency(self, dep: DependencyHint, tor: str | None, slot: int | None) -> None: ...

    def end_dependency(self, sender: str, dep_id: int) -> None: ...

    def put_flow(self, hint: FlowHint, admitted: bool) -> None: ...

    def end_flow(self, flow_id: int) -> None: ...


@dataclass
class Repairs:
    """What one :meth:`Scheduler.reconcile` wrote to a switch to make it hold what it should.

    Attributes:
        missing: entities the switch lacked (INSERTs, and MODIFYs of unset meters and defaults).
        changed: entities it held with other content (MODIFYs).
        extra: entities it held that nothing wants: stale grants, entries written by another
            client (DELETEs).
    """

    missing: int = 0
    changed: int = 0
    extra: int = 0

    @property
    def total(self) -> int:
        """All repairs."""
        return self.missing + self.changed + self.extra


@dataclass
class _FlowState:
    tor: str
    slot: int
    src_ip: int  # the sender's address (with transfer_dep_id(flow id), the grant's key)
    sender_tor: str  # where its dep_claim entry goes (the source guard's check)
    reported: int  # remaining bytes at the last report (hint, update or digest)
    est_remaining: int  # bytes (allocator's view)
    base: CounterValue  # flow_bytes[slot] at the last report


class Scheduler:
    """Drives targets from hints through the allocator.

    Args:
        topology: a :class:`safs.core.topology.Topology` (hosts(), host_ip, tor_of, routes,
            ports, is_host, host_link_bps, switches()).
        targets: switch name -> Target; names must be switches of the topology. Switches with
            no target are not written (their flows are still allocated).
        config: :class:`SchedulerConfig`.

    Raises:
        InvalidInput: a target name that is not a topology switch (field ``targets``).

    Times (``now_ns``) are fabric time in ns, any int >= 0; they are reduced mod 2^48.
    """

    def __init__(self, topology: Topology, targets: Mapping[str, Target],
                 config: SchedulerConfig | None = None) -> None:
        self.config = config or SchedulerConfig()
        self._topo = topology
        switches = set(topology.switches())
        for name in targets:
            if name not in switches:
                raise InvalidInput("targets", f"{name!r} is not a switch of topology "
                                   f"{topology.name!r}; switches: {', '.join(sorted(switches))}")
        self._targets: dict[str, Target] = dict(targets)
        # BRIEF: every contended link on a flow's path is accounted, or the non-blocking-core
        # assumption is checked and the links that break it are named. A ToR shares out the
        # oversubscribed links into it (receiver side) and out of it (sender side): link_shares.
        self.oversubscribed_links = topology.oversubscribed_links()
        unaccounted = [(a, b, load, rate) for a, b, load, rate in self.oversubscribed_links
                       if self.config.link_shares == "off"
                       or not (_is_tor(topology, b) or (_is_tor(topology, a) and self.config.grant_mode == "share"))]
        if unaccounted:
            _log.warning("topology %r: these fabric links can be offered more than their rate (hose model, "
                         "balanced ECMP) and no ToR shares them out: %s", topology.name,
                         ", ".join(f"{a}->{b} {load / 1e9:g}/{rate / 1e9:g} Gbit/s"
                                   for a, b, load, rate in unaccounted))
        cfg = self.config
        off_rate = sorted({topology.host_link_bps(h) for h in topology.hosts()} - {n.FINISH_RATE_BPS})
        if cfg.holder_idle_ns and cfg.rate_grants and cfg.grant_mode == "share" and off_rate:
            _log.warning("topology %r: host links of %s Gbit/s; the port holder's finish estimate is for "
                         "%g Gbit/s (FINISH_SHIFT_* in defines.p4), so its preemption compares finishes "
                         "scaled wrong there (config.holder_idle_ns 0 turns the holder off)", topology.name,
                         ", ".join(f"{r / 1e9:g}" for r in off_rate), n.FINISH_RATE_BPS / 1e9)
        for sw in self._targets:
            for side, links in (("in", self.share_links(sw)), ("out", self.share_links(sw, out=True))):
                if len(links) > n.MAX_SHARE_LINKS:
                    raise InvalidInput("config.link_shares", f"{self.config.link_shares!r} gives switch {sw!r} "
                                       f"{len(links)} shared {side}-links; the P4 program's tables hold "
                                       f"{n.MAX_SHARE_LINKS} (use 'oversubscribed' or 'off')", topology.source)
        hosts = topology.hosts()
        self.registry = HintRegistry({h: topology.host_ip(h) for h in hosts})
        link = {h: topology.host_link_bps(h) for h in hosts}
        self.allocator = Allocator(self.config.allocator, link, link)
        self.stats = SchedulerStats()
        self._flows: dict[int, _FlowState] = {}
        self.dependencies = DependencyRegistry({h: topology.host_ip(h) for h in hosts})
        self._dep_slots: dict[tuple[str, int], tuple[str, int]] = {}  # (sender, dep_id) -> (ToR, slot)
        self._free_slots: dict[str, list[int]] = {
            sw: list(range(1, self.config.meter_slots)) for sw in switches}  # heaps (sorted lists)
        # Slots of the dependencies each ToR's hosts send (share design): a dependency's slot is
        # also its out slot at its sender's ToR (dep_claim), so it is free at both ToRs.
        self._out_slots: dict[str, set[int]] = {sw: set() for sw in switches}
        self._shadow: dict[str, dict[TableEntryKey, TableEntry]] = {sw: {} for sw in self._targets}
        self._shadow_meters: dict[str, dict[int, MeterConfig]] = {sw: {} for sw in self._targets}
        # the other meters (aggregate, control, unclaimed): switch -> meter name -> index -> config
        self._shadow_port_meters: dict[str, dict[str, dict[int, MeterConfig]]] = {
            sw: {m: {} for m in _PORT_METERS} for sw in self._targets}
        self._shadow_clones: dict[str, dict[int, CloneSession]] = {sw: {} for sw in self._targets}
        self._shadow_profiles: dict[str, dict[tuple[str, str, int], ProfileEntity]] = {sw: {} for sw in self._targets}
        # dep_grant and dep_claim entries in the shadow, by key (the part of it _plan_all_grants walks)
        self._shadow_grants: dict[str, dict[TableEntryKey, TableEntry]] = {sw: {} for sw in self._targets}
        self._ip_to_host = {topology.host_ip(h): h for h in hosts}
        self._host_ip = {h: topology.host_ip(h) for h in hosts}
        self._host_tor = {h: topology.tor_of(h) for h in hosts}
        # per-transfer flows holding each (sender address, transfer dep id): flows whose ids are
        # 65535 apart share it, and so one dep_claim entry at the sender's ToR
        self._transfer_claims: dict[tuple[int, int], int] = {}
        self._usable_bps: dict[str, int] = {}  # receiver -> usable rate of its link (dependency meters)
        # (ToR, port) -> background share adapted from telemetry (absent: config.background_share)
        self._port_background: dict[tuple[str, int], float] = {}
        # dependencies whose grant entry changed and is not written yet -> their ToR
        self._dirty_deps: dict[tuple[str, int], str] = {}
        self._holding = False  # restore(): plan nothing, write nothing
        self.journal: Journal | None = None

    # ------------------------------------------------------------------ setup

    def setup(self, now_ns: int, clock_offset_ns: Mapping[str, int] | None = None) -> None:
        """Install the static state on every target (idempotent: only differences are written).

        Per switch: ``ipv4_lpm`` routes (topology.routes; ``dst_mac`` = :func:`node_mac` of the
        next hop; a route with several next hops ``set_ecmp_group`` with an ``ecmp`` entry for its
        ``ecmp_selector`` group, whose members and groups (:meth:`ecmp_profile`) are written in a
        batch before the others), ``receiver_port`` for each port facing a host and, on switches with such
        ports, ``grant_route`` (the same routes keyed on the source address) and one clone
        session per port (:meth:`CloneSession.for_port`: a stale-epoch GRANT is cloned to
        session port + 1), ``slack_class`` ranges (allocator key ranges, disjoint, distinct
        priorities 1..5), ``default_grant``, ``ecn_threshold``, the clock offset, and ``dep_meter[0]`` at
        the default rate; then every current grant.

        Args:
            now_ns: fabric time, ns.
            clock_offset_ns: switch -> fabric time minus the switch's own clock (ns); 0 for
                switches not listed (a switch started at fabric time 0).

        Raises:
            TargetError: a target refused writes (the shadow holds what succeeded).
        """
        offsets = dict(clock_offset_ns or {})
        for sw in offsets:
            if sw not in self._targets:
                raise InvalidInput("clock_offset_ns", f"no target for switch {sw!r}")
        for sw, target in self._targets.items():
            target.set_clock_offset(offsets.get(sw, 0))
            self._count_clock_write()
        self._flush({sw: self._plan_profile(sw) for sw in self._targets})  # before the entries using it
        plans = {sw: self._plan_static(sw) for sw in self._targets}
        self._plan_all_grants(plans)
        self._flush(plans)

    def _plan_profile(self, sw: str) -> list[Update]:
        """Writes that bring ``sw``'s ECMP members and groups to :meth:`ecmp_profile`."""
        shadow = self._shadow_profiles[sw]
        return [Update(Op.INSERT if e.key() not in shadow else Op.MODIFY, e)
                for e in self.ecmp_profile(sw) if shadow.get(e.key()) != e]

    def _plan_static(self, sw: str, entries: list[TableEntry] | None = None) -> list[Update]:
        """Writes that bring ``sw``'s static state (:meth:`setup`) to what it should be
        (``entries``: its :meth:`_static_entries`, when the caller has them)."""
        plan: list[Update] = []
        for entry in self._static_entries(sw) if entries is None else entries:
            self._plan_entry(sw, entry, plan)
        for session in self._clone_sessions(sw):
            self._plan_clone_session(sw, session, plan)
        if self.config.rate_grants:  # without grants slot 0 stays unconfigured (never demotes)
            self._plan_meter(sw, self.config.meter_for(n.DEFAULT_METER_SLOT, self.config.default_rate_bps), plan)
        for meter in self.traffic_class_meters():
            self._plan_meter(sw, meter, plan)
        for meter in self.control_meters(sw) + self.unclaimed_meters(sw):
            self._plan_meter(sw, meter, plan)
        return plan

    def control_meters(self, sw: str) -> list[MeterConfig]:
        """``control_meter`` configs of ``sw``'s host ports: REQUEST and DONE a host may send,
        ``control_share`` of its link rate (bytes/s, with the usual burst)."""
        topo = self._topo
        return [replace(self.config.meter_for(port, int(topo.host_link_bps(nb) * self.config.control_share)),
                        meter=n.CONTROL_METER)
                for port, nb in sorted(topo.ports(sw).items()) if topo.is_host(nb)]

    def unclaimed_meters(self, sw: str) -> list[MeterConfig]:
        """``unclaimed_meter`` configs of ``sw``'s host ports: the DATA a host may send in its
        slack classes for dependencies not admitted for it (no ``dep_claim`` entry), the default
        grant's rate and burst (what an honest sender sends before its first GRANT); beyond it
        the sender's ToR demotes (p4src/include/source_guard.p4). None without ``rate_grants``
        (nothing is admitted then, and an unconfigured meter never demotes)."""
        if not self.config.rate_grants:
            return []
        topo = self._topo
        return [replace(self.config.meter_for(port, self.config.default_rate_bps), meter=n.UNCLAIMED_METER)
                for port, nb in sorted(topo.ports(sw).items()) if topo.is_host(nb)]

    def reinstall(self, switch: str, now_ns: int, clock_offset_ns: int = 0,
                  target: Target | None = None) -> None:
        """Re-install everything on ``switch`` after it restarted (its tables are empty).

        Args:
            target: a new Target object for the switch (e.g. a new connection), else the old one.

        Raises:
            InvalidInput: no target named ``switch``. TargetError: writes refused.
        """
        if switch not in self._targets:
            raise InvalidInput("switch", f"no target named {switch!r}")
        if target is not None:
            self._targets[switch] = target
        self._targets[switch].set_clock_offset(clock_offset_ns)
        self._count_clock_write()
        self.reconcile(switch, SwitchState())

    def reconcile(self, switch: str, observed: SwitchState) -> Repairs:
        """Make ``switch`` hold what it should, given what it was read back to hold: the shadow
        becomes ``observed``, then the differences are written (missing and changed entities,
        and DELETEs of extra table entries, clone sessions and ECMP members/groups: stale
        grants, or entries another client wrote). Default entries are never deleted, and the
        clock offset is left as it is.

        Raises:
            InvalidInput: no target named ``switch``. TargetError: writes refused (what
                succeeded is in the shadow; the next reconcile retries the rest).
        """
        if switch not in self._targets:
            raise InvalidInput("switch", f"no target named {switch!r}")
        self._shadow[switch] = {e.key(): e for e in observed.entries}
        self._shadow_grants[switch] = {k: e for k, e in self._shadow[switch].items()
                                       if e.table in _PER_DEPENDENCY_TABLES and not e.is_default}
        self._shadow_meters[switch] = {m.index: m for m in observed.meters if m.meter == n.DEP_METER}
        self._shadow_port_meters[switch] = {name: {m.index: m for m in observed.meters if m.meter == name}
                                            for name in _PORT_METERS}
        self._shadow_clones[switch] = {c.session_id: c for c in observed.clone_sessions}
        self._shadow_profiles[switch] = {p.key(): p for p in observed.profiles}
        profile = self._plan_profile(switch)
        entries = self._static_entries(switch)
        plan = self._plan_static(switch, entries)
        plans = {switch: plan}
        self._plan_all_grants(plans, only=switch)
        plans = {switch: plan}  # the other switches' grants are theirs to reconcile
        static = {e.key() for e in entries}
        plan += [Update(Op.DELETE, e) for k, e in self._shadow[switch].items()
                 if not e.is_default and e.table not in _PER_DEPENDENCY_TABLES and k not in static]
        sessions = {c.session_id for c in self._clone_sessions(switch)}
        plan += [Update(Op.DELETE, c) for sid, c in self._shadow_clones[switch].items() if sid not in sessions]
        wanted = {e.key() for e in self.ecmp_profile(switch)}
        extra_profile = sorted((p for k, p in self._shadow_profiles[switch].items() if k not in wanted),
                               key=lambda p: isinstance(p, ActionProfileMember))  # groups before members
        repairs = Repairs()
        for upd in profile + plan + [Update(Op.DELETE, p) for p in extra_profile]:
            if upd.op is Op.DELETE:
                repairs.extra += 1
            elif self._observed(switch, upd.entity):
                repairs.changed += 1
            else:
                repairs.missing += 1
        self._flush({switch: profile})
        self._flush(plans)
        self._flush({switch: [Update(Op.DELETE, p) for p in extra_profile]})
        return repairs

    def diff(self, switch: str, observed: SwitchState) -> Repairs:
        """What :meth:`reconcile` would repair on ``switch`` given ``observed``, without writing
        or changing anything.

        Raises:
            InvalidInput: no target named ``switch``.
        """
        if switch not in self._targets:
            raise InvalidInput("switch", f"no target named {switch!r}")
        shadows: tuple[dict[str, Any], ...] = (
            self._shadow, self._shadow_grants, self._shadow_meters, self._shadow_port_meters,
            self._shadow_clones, self._shadow_profiles)
        saved = [shadow[switch] for shadow in shadows]
        self._holding = True
        try:
            return self.reconcile(switch, observed)
        finally:
            self._holding = False
            for shadow, kept in zip(shadows, saved):
                shadow[switch] = kept

    def meter_cells(self, switch: str) -> dict[str, list[int]]:
        """The meter cells of ``switch`` this scheduler configures (meter name -> indices): the
        default slot 0, the slots of its dependencies and flows, the metered aggregates. A
        reconciliation needs to read back only these: a cell it does not know is written
        when it is taken."""
        slots = {n.DEFAULT_METER_SLOT} | {slot for tor, slot in self._dep_slots.values() if tor == switch}
        slots |= {state.slot for state in self._flows.values() if state.tor == switch}
        return {n.DEP_METER: sorted(slots), n.AGGREGATE_METER: [m.index for m in self.traffic_class_meters()],
                n.CONTROL_METER: [m.index for m in self.control_meters(switch)],
                n.UNCLAIMED_METER: [m.index for m in self.unclaimed_meters(switch)]}

    def _observed(self, sw: str, entity: object) -> bool:
        """True when the shadow holds a (set) version of ``entity``."""
        if isinstance(entity, MeterConfig):
            held = self._meter_shadow(sw, entity).get(entity.index)
            return held is not None and (held.cir, held.pir) != (0, 0)
        if isinstance(entity, CloneSession):
            return entity.session_id in self._shadow_clones[sw]
        if isinstance(entity, (ActionProfileMember, ActionProfileGroup)):
            return entity.key() in self._shadow_profiles[sw]
        assert isinstance(entity, TableEntry)
        return entity.key() in self._shadow[sw]

    def _static_entries(self, sw: str) -> list[TableEntry]:
        cfg = self.config
        topo = self._topo
        groups = self._ecmp_groups(sw)
        routes = [(prefix, plen, ports[0], node_mac(topo, topo.neighbor_at(sw, ports[0])), groups.get(ports, 0))
                  for prefix, plen, ports in topo.routes(sw)]
        out = [TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(prefix, plen)}, n.ACT_SET_ECMP_GROUP, {"group": group})
               if group else
               TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(prefix, plen)}, n.ACT_SET_EGRESS,
                          {"port": port, "dst_mac": mac})
               for prefix, plen, port, mac, group in routes]
        out += [TableEntry(n.ECMP, {n.F_ECMP_GROUP: group}, "", group_id=group) for group in groups.values()]
        host_ports = [port for port, nb in topo.ports(sw).items() if topo.is_host(nb)]
        out += [TableEntry(n.RECEIVER_PORT, {n.F_EGRESS_PORT: port}, n.ACT_MARK_RECEIVER)
                for port in host_ports]
        out += [TableEntry(n.HOST_PORT, {n.F_INGRESS_PORT: port}, n.ACT_SET_HOST_SOURCE,
                           {"src_addr": topo.host_ip(topo.neighbor_at(sw, port))})
                for port in host_ports]  # source guard (p4src/include/source_guard.p4)
        if host_ports:  # grant_route is applied only at a receiver's ToR (lowest port of a group)
            out += [TableEntry(n.GRANT_ROUTE, {n.F_SRC_ADDR: Lpm(prefix, plen)}, n.ACT_SET_GRANT_ROUTE,
                               {"port": port, "dst_mac": mac})
                    for prefix, plen, port, mac, _ in routes]
        if cfg.slack_classes:
            out += [TableEntry(n.SLACK_CLASS, {n.F_SLACK_KEY: Range(r.low_key, r.high_key)},
                               n.ACT_SET_SLACK_CLASS,
                               {"qclass": r.qclass},
                               priority=i + 1)
                    for i, r in enumerate(self.allocator.key_ranges())]
        if cfg.rate_grants and cfg.grant_mode == "share":
            for port, nb in topo.ports(sw).items():
                if topo.is_host(nb):
                    out += self._share_entries(port, topo.host_link_bps(nb), self.background_share(sw, port))
                    out += self._spare_entries(port, topo.host_link_bps(nb))
                    out += self._boost_entries(port, topo.host_link_bps(nb))
            for port, rate in self.share_links(sw):
                out += self._share_entries(port, rate, cfg.background_share, n.LINK_SHARE)
                out += self._spare_entries(port, rate, n.LINK_SPARE_LEVEL)
            for port, rate in self.share_links(sw, out=True):
                out += self._share_entries(port, rate, cfg.background_share, n.OUT_SHARE)
                out += self._spare_entries(port, rate, n.OUT_SPARE_LEVEL)
            out.append(TableEntry(n.SHARE_LEASE, {}, n.ACT_SET_SHARE_LEASE,
                                  {"lease_us": lease_ns_to_us(cfg.share_lease_ns)}, is_default=True))
            out.append(TableEntry(n.HOLDER, {}, n.ACT_SET_HOLDER,
                                  {"idle_ns": cfg.holder_idle_ns, "release_bytes": cfg.holder_release_bytes,
                                   "preempt_ns": cfg.holder_preempt_ns}, is_default=True))
        out.append(TableEntry(n.DEFAULT_GRANT, {}, n.ACT_SET_DEFAULT_GRANT, {
            "rate_kbps": rate_bps_to_kbps(cfg.default_rate_bps),
            "lease_us": lease_ns_to_us(cfg.default_lease_ns),
            "meter_slot": n.DEFAULT_METER_SLOT}, is_default=True))
        out.append(TableEntry(n.ECN_THRESHOLD, {}, n.ACT_SET_ECN_THRESHOLD,
                              {"qdepth_pkts": cfg.ecn_threshold_pkts}, is_default=True))
        out += self.traffic_class_entries()
        return out

    def _ecmp_groups(self, sw: str) -> dict[tuple[int, ...], int]:
        """``sw``'s ECMP groups: each distinct set of more than one next-hop port its routes
        use -> group id 1, 2, ... (ascending port tuples; the id is both the route's ``ecmp_group``
        and the selector group)."""
        sets = sorted({ports for _, _, ports in self._topo.routes(sw) if len(ports) > 1})
        return {ports: i + 1 for i, ports in enumerate(sets)}

    def ecmp_profile(self, sw: str) -> list[ActionProfileMember | ActionProfileGroup]:
        """``ecmp_selector`` members (one per next-hop port of any group, member id = port, in
        ascending order, so on a clean switch BMv2's member handles follow port order, which
        :func:`safs.core.ecmp.select` assumes) and then the groups."""
        topo = self._topo
        groups = self._ecmp_groups(sw)
        ports = sorted({p for ps in groups for p in ps})
        members: list[ActionProfileMember | ActionProfileGroup] = [
            ActionProfileMember(n.ECMP_SELECTOR, port, n.ACT_SET_EGRESS,
                                {"port": port, "dst_mac": node_mac(topo, topo.neighbor_at(sw, port))})
            for port in ports]
        return members + [ActionProfileGroup(n.ECMP_SELECTOR, gid, ps, max_size=len(ps)) for ps, gid in groups.items()]

    def traffic_class_entries(self) -> list[TableEntry]:
        """``traffic_class`` entries of ``config.traffic_classes``: the first listed gets the
        highest priority; a metered aggregate i (0-based) uses ``aggregate_meter[i + 1]``."""
        specs = self.config.traffic_classes
        out = []
        for i, tc in enumerate(specs):
            qclass = tc.queue if tc.queue is not None else self._slack_qclass(cast(int, tc.slack_ns))
            match: dict[str, MatchValue] = {
                n.F_SRC_ADDR: _ternary_net(tc.src), n.F_DST_ADDR: _ternary_net(tc.dst),
                n.F_PROTOCOL: Ternary(tc.protocol, 0xFF) if tc.protocol is not None else Ternary(0, 0),
                n.F_L4_SRC_PORT: Range(*tc.src_ports) if tc.src_ports else Range(0, 65535),
                n.F_L4_DST_PORT: Range(*tc.dst_ports) if tc.dst_ports else Range(0, 65535),
                n.F_ROCE_QP: Ternary(tc.roce_qp, tc.roce_qp_mask) if tc.roce_qp is not None else Ternary(0, 0),
            }
            if tc.rate_bps is None:
                out.append(TableEntry(n.TRAFFIC_CLASS, match, n.ACT_SET_TRAFFIC_CLASS, {"qclass": qclass},
                                      priority=len(specs) - i))
            else:
                out.append(TableEntry(n.TRAFFIC_CLASS, match, n.ACT_SET_METERED_TRAFFIC_CLASS,
                                      {"qclass": qclass, "meter_index": i + 1}, priority=len(specs) - i))
        return out

    def traffic_class_meters(self) -> list[MeterConfig]:
        """``aggregate_meter`` configs of the metered aggregates (index i + 1), bytes/s."""
        out = []
        for i, tc in enumerate(self.config.traffic_classes):
            if tc.rate_bps is not None:
                m = self.config.meter_for(i + 1, tc.rate_bps)
                out.append(replace(m, meter=n.AGGREGATE_METER))
        return out

    def _slack_qclass(self, slack_ns: int) -> int:
        """The queue the slack classes give a DATA packet with ``slack_ns`` of slack."""
        key = slack_to_key(slack_ns)
        for r in self.allocator.key_ranges() if self.config.slack_classes else []:
            if r.low_key <= key <= r.high_key:
                return r.qclass
        return QUEUE_SLACK_LEAST_URGENT

    def share_links(self, sw: str, out: bool = False) -> list[tuple[int, int]]:
        """``(port, rate bit/s)`` of the fabric links into ``sw`` (``out``: out of it) that get
        share entries (``config.link_shares``; out-links in the share design only); none
        unless ``sw`` has host ports (a ToR)."""
        topo = self._topo
        mode = self.config.link_shares
        if mode == "off" or not _is_tor(topo, sw) or (out and self.config.grant_mode != "share"):
            return []
        if mode == "all":
            links = [nb for nb in topo.ports(sw).values() if not topo.is_host(nb)]
        elif out:
            links = [b for a, b, _, _ in self.oversubscribed_links if a == sw]
        else:
            links = [a for a, b, _, _ in self.oversubscribed_links if b == sw]
        return sorted((topo.port_of(sw, nb), cast(int, topo.link(nb, sw)["rate_bps"])) for nb in links)

    def _share_entries(self, port: int, link_bps: int, background: float,
                       table: str = n.PORT_SHARE) -> list[TableEntry]:
        """``port_share`` of one receiver port (``link_share`` of an in-link, keyed by its
        ingress port): for every load 1..MAX_LOAD the rate of one
        dependency in each mode (grant_enforcer.p4): alone in the most urgent class, usable /
        load; sharing it while others wait, (usable - reserve) / load; waiting, reserve / load.
        usable is the link's usable rate less the ``background`` share, reserve its waiting share;
        rounded down, so the grants of a port never add up to more than its usable rate."""
        usable = self.allocator.config.usable_bps(link_bps)
        usable -= int(usable * background)
        reserve = int(usable * self.config.waiting_share)
        per_mode = {n.SHARE_ALONE: usable, n.SHARE_TOP: usable - reserve, n.SHARE_WAITING: reserve}
        key, action = _SHARE_TABLES[table]
        return [TableEntry(table, {key: port, n.F_LOAD: load, n.F_MODE: mode}, action,
                           {"rate_kbps": rate_bps_to_kbps(rate // load)})
                for mode, rate in per_mode.items() for load in range(1, n.MAX_LOAD + 1)]

    def _spare_entries(self, port: int, link_bps: int, table: str = n.SPARE_LEVEL) -> list[TableEntry]:
        """``spare_level`` of one receiver port (``link_spare_level`` of an in-link, keyed by its
        ingress port; grant_enforcer.p4): for the top class's DATA bytes in the last
        TOP_WINDOW_NS, how many reserves waiting dependencies share, level = floor((U - top) / R)
        in 2..MAX_SPARE_LEVEL (below 2: the default, 1), with U the bytes the link's usable rate
        moves in a window and R the waiting share of them. U and R leave the background share out,
        so these entries never change; the waiting entries they multiply include it (the spare is
        scaled by 1 - background)."""
        usable_bytes = self.allocator.config.usable_bps(link_bps) * n.TOP_WINDOW_NS // (8 * NS_PER_S)
        reserve_bytes = max(1, int(usable_bytes * self.config.waiting_share))
        top_level = min(usable_bytes // reserve_bytes, n.MAX_SPARE_LEVEL)
        def top_range(level: int) -> Range:
            low = 0 if level == top_level else usable_bytes - (level + 1) * reserve_bytes + 1
            return Range(low, usable_bytes - level * reserve_bytes)
        key, action = _SHARE_TABLES[table]
        return [TableEntry(table, {key: port, n.F_TOP_BYTES: top_range(level)},
                           action, {"level": level}, priority=level)
                for level in range(2, top_level + 1)]

    def _boost_entries(self, port: int, link_bps: int) -> list[TableEntry]:
        """``top_boost`` of one receiver port (grant_enforcer.p4; none with ``top_overcommit``
        1): for the top class's DATA bytes ``top`` in the last TOP_WINDOW_NS, the factor
        min(top_overcommit, U / top) rounded down to a step of 1/TOP_BOOST_STEPS, in 1/256,
        with U the bytes the port's usable rate moves in a window (background share left
        out, as for the spare level). Factor 1 + k/16 covers top in (U / (1 + (k+1)/16),
        U / (1 + k/16)], the largest step down to 1 byte; a silent window (0 bytes) has no
        entry: a burst of new transfers is not overcommitted."""
        steps = int((self.config.top_overcommit - 1) * n.TOP_BOOST_STEPS + 1e-9)
        if steps <= 0:
            return []
        usable_bytes = self.allocator.config.usable_bps(link_bps) * n.TOP_WINDOW_NS // (8 * NS_PER_S)
        per = n.TOP_BOOST_STEPS
        out = []
        for k in range(1, steps + 1):
            high = per * usable_bytes // (per + k)
            low = 1 if k == steps else per * usable_bytes // (per + k + 1) + 1
            if low <= high:
                out.append(TableEntry(n.TOP_BOOST, {n.F_EGRESS_PORT: port, n.F_TOP_BYTES: Range(low, high)},
                                      n.ACT_SET_TOP_BOOST, {"boost": n.TOP_BOOST_ONE * (per + k) // per},
                                      priority=k))
        return out

    # ------------------------------------------------------------------ background share

    def receiver_ports(self) -> list[tuple[str, int, str]]:
        """``(switch, port, host)`` of every port facing a host, on switches with a target."""
        topo = self._topo
        return [(sw, port, nb) for sw in self._targets for port, nb in sorted(topo.ports(sw).items())
                if topo.is_host(nb)]

    def background_share(self, sw: str, port: int) -> float:
        """The part of receiver port ``port`` of ``sw`` kept from the dependencies' shares for
        traffic without a grant, in [0, 0.9] (``config.background_share`` unless adapted)."""
        return self._port_background.get((sw, port), self.config.background_share)

    def set_background_share(self, sw: str, port: int, share: float) -> int:
        """Keep ``share`` of receiver port ``port`` of ``sw`` for traffic without a grant: its
        ``port_share`` entries (3 x MAX_LOAD) are rewritten when the share changes; returns how
        many updates were written.

        Raises:
            InvalidInput: ``port`` is not a host-facing port of a switch with a target
                (field ``port``), ``share`` outside [0, 0.9] (field ``share``).
            TargetError: the switch refused the writes (the share is kept; reconcile repairs).
        """
        topo = self._topo
        if sw not in self._targets or not topo.is_host(topo.ports(sw).get(port, "")):
            raise InvalidInput("port", f"{sw!r} port {port!r} does not face a host")
        if not 0 <= share <= 0.9:
            raise InvalidInput("share", f"expected 0..0.9, got {share!r}")
        self._port_background[(sw, port)] = share
        if not (self.config.rate_grants and self.config.grant_mode == "share"):
            return 0
        plan: list[Update] = []
        for entry in self._share_entries(port, topo.host_link_bps(topo.neighbor_at(sw, port)), share):
            self._plan_entry(sw, entry, plan)
        self._flush({sw: plan})
        return len(plan)

    def granted_slots(self, sw: str) -> dict[int, list[int]]:
        """Meter slots of the dependencies granted at ``sw``, by the port of their receiver
        (the ``dep_bytes`` cells that count their bytes there)."""
        topo = self._topo
        ports = {nb: port for port, nb in topo.ports(sw).items()}
        out: dict[int, list[int]] = {}
        for key, (tor, slot) in self._dep_slots.items():
            if tor == sw:
                out.setdefault(ports[self.dependencies.get(key).receiver], []).append(slot)
        return out

    def host_link_bps(self, host: str) -> int:
        """Rate of ``host``'s link, bit/s (the topology's)."""
        return self._topo.host_link_bps(host)

    def target(self, sw: str) -> Target:
        """The target of switch ``sw`` (reads; writes go through the scheduler)."""
        return self._targets[sw]

    def _clone_sessions(self, sw: str) -> list[CloneSession]:
        """One clone session per port of ``sw`` when it has a host-facing port (where
        ``grant_route`` is installed: its routes may point at any port), else none."""
        topo = self._topo
        ports = topo.ports(sw)
        if not any(topo.is_host(nb) for nb in ports.values()):
            return []
        return [CloneSession.for_port(port) for port in sorted(ports)]

    def restore(self, dependencies: Iterable[tuple[DependencyHint, int | None]],
                flows: Iterable[tuple[FlowHint, bool]], now_ns: int) -> None:
        """Load the state a :class:`Journal` kept (after a controller restart), before
        :meth:`setup` or :meth:`reconcile` write it: dependencies with the meter slot each
        held (None, taken, or out of range: a new slot), and flow hints with whether they were
        admitted (re-admitted to the allocator now). Nothing is written to any target here.

        Raises:
            InvalidInput: a stored hint the topology refuses (field named), or no free slot.
        """
        share = self.config.rate_grants and self.config.grant_mode == "share"
        self._holding = True
        try:
            # Kept slots first, each free heap rebuilt once (a list scan per dependency made a
            # takeover with thousands of dependencies spend seconds here); then new slots.
            free: dict[str, set[int]] = {}
            moved: list[tuple[str, int]] = []
            for dep, slot in dependencies:
                try:
                    self.dependencies.announce(dep)
                except InvalidInput as err:  # say which one: a host may have left the topology
                    raise InvalidInput(err.field, f"dependency {dep.dep_id} of {dep.sender!r} -> {dep.receiver!r}: "
                                       f"{err.message}") from None
                key = (dep.sender, dep.dep_id)
                if not share:
                    continue
                tor = self._topo.tor_of(dep.receiver)
                tor_free = free.setdefault(tor, set(self._free_slots[tor]))
                sent = self._out_slots[self._host_tor[dep.sender]]
                if slot in tor_free and slot not in sent:
                    tor_free.remove(slot)
                    sent.add(slot)
                    self._dep_slots[key] = (tor, slot)
                else:
                    moved.append(key)
            for tor, tor_free in free.items():
                self._free_slots[tor] = sorted(tor_free)  # a sorted list is a heap
            for key in moved:
                dep = self.dependencies.get(key)
                self._require_slot(self._host_tor[dep.receiver], "dependency.receiver", self._host_tor[dep.sender])
                self._admit_dependency(key)  # a new slot, journaled
            for hint, admitted in flows:
                self.registry.announce(hint, now_ns)
                if admitted and self.config.rate_grants:
                    self._require_slot(self._topo.tor_of(hint.receiver), "hint.receiver")
                    self._admit(hint.flow_id, now_ns)
        finally:
            self._holding = False
            self._dirty_deps.clear()

    # ------------------------------------------------------------------ hint intake

    def announce_dependency(self, dep: DependencyHint, now_ns: int, write: bool = True) -> bool:
        """Record a dependency and, when new, install its grant at the receiver's ToR: a meter
        slot and a ``dep_grant`` share entry keyed by the sender's address and ``dep_id``, and a
        ``dep_claim`` entry at the sender's ToR (three updates). Its transfers are then granted
        by the switch alone. Returns True when new.
        (Per-transfer mode, or without ``rate_grants``: recorded only.)

        Raises:
            InvalidInput: bad fields (``dependency.*``), a conflicting re-use of the id, or no
                free meter slot at the receiver's ToR (field ``dependency.receiver``); nothing
                changes then. TargetError: a target refused the writes (retried by the next
                tick).

        With ``write`` False the grant is only planned: :meth:`flush_dependencies` writes it
        (the controller commits the dependency to its store in between).
        """
        valid = self.dependencies.validated(dep)
        key = (valid.sender, valid.dep_id)
        share = self.config.rate_grants and self.config.grant_mode == "share"
        before = self.dependencies.get(key) if key in self.dependencies else None
        if share and before is None:
            self._require_slot(self._host_tor[valid.receiver], "dependency.receiver", self._host_tor[valid.sender])
        new = self.dependencies.announce(valid, checked=True)
        if new and share:
            self._admit_dependency(key, write)
        elif self.journal is not None and self.dependencies.get(key) != before:
            self._journal_dependency(key)  # a new label, or recorded only
        return new

    def _journal_dependency(self, key: tuple[str, int]) -> None:
        if self.journal is not None:
            tor, slot = self._dep_slots.get(key, (None, None))
            self.journal.put_dependency(self.dependencies.get(key), tor, slot)

    def flush_dependencies(self) -> None:
        """Write the grant entries and meters of dependencies announced or ended with
        ``write=False`` since the last flush (one batch per ToR).

        Raises:
            TargetError: writes refused; those dependencies are retried by the next flush or tick.
        """
        if not self._dirty_deps:
            return
        dirty, self._dirty_deps = self._dirty_deps, {}
        plans: dict[str, list[Update]] = {}
        for key, tor in dirty.items():
            if key in self._dep_slots:
                self._plan_dependency(key, plans)
                continue
            src_ip = self._host_ip[key[0]]
            for sw, table in ((tor, n.DEP_GRANT), (self._host_tor[key[0]], n.DEP_CLAIM)):
                shadow = self._shadow_grants.get(sw, {})
                entry = shadow.get(self._dep_key(src_ip, key[1], table))
                if entry is not None:
                    plans.setdefault(sw, []).append(Update(Op.DELETE, entry))
        try:
            self._flush(plans)
        except TargetError:
            for key, tor in dirty.items():
                self._dirty_deps.setdefault(key, tor)
            raise

    def end_dependency(self, sender: str, dep_id: int, now_ns: int, write: bool = True) -> None:
        """A dependency ended: delete its grant entry and free its meter slot (the delete is
        only planned with ``write`` False: :meth:`flush_dependencies`).

        Raises:
            InvalidInput: unknown dependency. TargetError: a target refused the delete.
        """
        self.dependencies.end((sender, dep_id))
        if self.journal is not None:
            self.journal.end_dependency(sender, dep_id)
        placed = self._dep_slots.pop((sender, dep_id), None)
        if placed is None:
            return
        tor, slot = placed
        heapq.heappush(self._free_slots[tor], slot)
        self._out_slots[self._host_tor[sender]].discard(slot)
        self._dirty_deps[(sender, dep_id)] = tor
        if write:
            self.flush_dependencies()

    def _admit_dependency(self, key: tuple[str, int], write: bool = True) -> None:
        """Give a dependency the lowest slot free at its receiver's ToR and among the slots of
        its sender's ToR (its out slot there); the caller checked one exists (_require_slot)."""
        dep = self.dependencies.get(key)
        tor = self._host_tor[dep.receiver]
        free, sent = self._free_slots[tor], self._out_slots[self._host_tor[dep.sender]]
        skipped = []
        slot = heapq.heappop(free)
        while slot in sent:
            skipped.append(slot)
            slot = heapq.heappop(free)
        for other in skipped:
            heapq.heappush(free, other)
        sent.add(slot)
        self._dep_slots[key] = (tor, slot)
        self.stats.dependencies += 1
        self._journal_dependency(key)
        self._dirty_deps[key] = tor
        if write:
            self.flush_dependencies()

    def _plan_dependency(self, key: tuple[str, int], plans: dict[str, list[Update]]) -> None:
        """Meter (committed = peak = the receiver link's usable rate: the most a share can be)
        and share entry of one admitted dependency at the receiver's ToR, and its claim at the
        sender's ToR, diffed against the shadow."""
        dep = self.dependencies.get(key)
        tor, slot = self._dep_slots[key]
        src_ip = self._host_ip[dep.sender]
        self._plan_claim(self._host_tor[dep.sender], src_ip, dep.dep_id, plans, slot)
        if tor not in self._targets:
            return
        plan = plans.setdefault(tor, [])
        usable = self._usable_bps.get(dep.receiver)
        if usable is None:
            usable = self._usable_bps[dep.receiver] = self.allocator.config.usable_bps(
                self._topo.host_link_bps(dep.receiver))
        meter = self.config.meter_for(slot, usable)
        if self._shadow_meters[tor].get(slot) != meter:
            plan.append(Update(Op.MODIFY, meter))
        entry = TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: src_ip, n.F_DEP_ID: dep.dep_id},
                           n.ACT_SET_SHARE_GRANT, {"meter_slot": slot})
        current = self._shadow_grants[tor].get(self._dep_key(src_ip, dep.dep_id))
        if current != entry:
            plan.append(Update(Op.INSERT if current is None else Op.MODIFY, entry))

    def announce(self, hint: FlowHint, now_ns: int) -> None:
        """Record or refresh a flow from an application hint and install what changed.

        With ``admit_on_request`` (the default) a new flow is only recorded: it gets rate when
        its sender's first REQUEST reaches the receiver's ToR (the digest, :meth:`on_digest`),
        so flows announced ahead of their data hold no capacity they cannot use yet.

        Raises:
            InvalidInput: bad hint (field named by :class:`HintRegistry`), or no free meter slot
                at the receiver's ToR (field ``hint.receiver``). Nothing admitted is changed.
            TargetError: a target refused writes (the hint is admitted; retried on tick).
            TargetConnectionError: a target's counter read failed (P4Runtime targets; the
                scheduler passes it on unchanged).
        """
        request_mode = self.config.admit_on_request
        if (not request_mode and isinstance(hint, FlowHint) and hint.flow_id not in self.registry
                and isinstance(hint.receiver, str) and self._topo.is_host(hint.receiver)):
            self._require_slot(self._topo.tor_of(hint.receiver), "hint.receiver")
        if not self.registry.announce(hint, now_ns):
            return
        if not (request_mode and hint.flow_id not in self._flows):  # else recorded; allocated at its first REQUEST
            self._admit(hint.flow_id, now_ns)
        self._journal_flow(hint.flow_id)

    def _journal_flow(self, flow_id: int) -> None:
        if self.journal is not None:
            self.journal.put_flow(self.registry.get(flow_id), flow_id in self._flows)

    def activate(self, flow_id: int, now_ns: int) -> bool:
        """The application says a recorded flow's data is about to start: allocate it now.

        With ``admit_on_request`` a hint announced ahead only records the flow; an application
        that also knows when its sender starts (the producer's compute ends) lets the controller
        install the grant just before the first REQUEST arrives, instead of after its digest.
        Returns True if the flow was admitted now (False: already admitted).

        Raises:
            InvalidInput: unknown flow (field ``flow_id``) or no free meter slot at the
                receiver's ToR (field ``hint.receiver``). TargetError: as :meth:`announce`.
        """
        hint = self.registry.get(flow_id)
        if flow_id in self._flows:
            return False
        self._require_slot(self._topo.tor_of(hint.receiver), "hint.receiver")
        self._admit(flow_id, now_ns)
        self._journal_flow(flow_id)
        return True

    def update(self, flow_id: int, remaining_bytes: int, now_ns: int, no_bubble_ts_ns: int | None = None) -> None:
        """Report a flow's remaining bytes (may only shrink), and optionally a new no-bubble
        timestamp (ns, reduced mod 2^48), and install what changed.

        Raises:
            InvalidInput: unknown flow, or a field out of range (remaining bytes grown); nothing
                changes then. TargetError: as :meth:`announce`.
        """
        changed = self.registry.update(flow_id, remaining_bytes, now_ns, no_bubble_ts_ns)
        if changed:
            self._journal_flow(flow_id)
        state = self._flows.get(flow_id)
        if state is None:
            return  # recorded, not yet allocated (admit_on_request)
        # An unchanged report still corrects a drifted tick estimate.
        if changed or state.est_remaining != remaining_bytes:
            self._admit(flow_id, now_ns)

    def complete(self, flow_id: int, now_ns: int) -> None:
        """A flow finished: delete its grant entry, free its meter slot, re-allocate the rest.

        Raises:
            InvalidInput: unknown flow. TargetError: as :meth:`announce`.
        """
        self.registry.complete(flow_id)
        if self.journal is not None:
            self.journal.end_flow(flow_id)
        state = self._flows.pop(flow_id, None)
        if state is None:
            return  # finished before its first REQUEST was digested: nothing installed
        changed = self.allocator.remove(flow_id, wrap(now_ns))
        heapq.heappush(self._free_slots[state.tor], state.slot)
        plans: dict[str, list[Update]] = {}
        shared = self._release_transfer_claim(state.src_ip, flow_id)
        for sw, table in ((state.tor, n.DEP_GRANT), (state.sender_tor, n.DEP_CLAIM)):
            entry = self._shadow_grants.get(sw, {}).get(self._dep_key(state.src_ip, transfer_dep_id(flow_id), table))
            if entry is not None and not (shared and table == n.DEP_CLAIM):
                plans.setdefault(sw, []).append(Update(Op.DELETE, entry))
        self._apply_changes(changed, now_ns, plans)

    def _release_transfer_claim(self, src_ip: int, flow_id: int) -> bool:
        """A per-transfer flow let go of its claim key; True while another flow still holds it."""
        claim = (src_ip, transfer_dep_id(flow_id))
        left = self._transfer_claims.pop(claim, 1) - 1
        if left:
            self._transfer_claims[claim] = left
        return left > 0

    def on_digest(self, switch: str, digest: RequestDigest, now_ns: int) -> bool:
        """Merge a REQUEST digest from ``switch``; an unknown flow becomes a provisional hint
        (pipeline class, label "digest") and gets a grant. Returns True if anything changed.

        Raises:
            InvalidInput: unknown switch, bad digest fields (named ``digest.*``), or no free
                meter slot at the receiver's ToR. TargetError: as :meth:`announce`.
        """
        if switch not in self._targets:
            raise InvalidInput("switch", f"no target named {switch!r}")
        if not isinstance(digest, RequestDigest):
            raise InvalidInput("digest", f"must be a RequestDigest, got {type(digest).__name__}")
        if self.config.grant_mode == "share":
            return self._dependency_digest(digest)
        if digest.flow_id in self._flows:
            # Admitted already: its REQUEST passed the ToR before the grant entry landed. The
            # ToR's counters track the flow's progress from here (tick); re-allocating on this
            # echo would cost a counter read and a write per REQUEST of every flow whose
            # activation is slow (hundreds per second on BMv2, docs/mininet.md).
            self.stats.digests_echoed += 1
            return False
        if digest.dst_addr in self._ip_to_host:
            self._require_slot(self._topo.tor_of(self._ip_to_host[digest.dst_addr]), "digest.dst_addr")
        changed = self.registry.merge_digest(digest.flow_id, digest.src_addr, digest.dst_addr,
                                             digest.remaining_bytes, self._no_bubble_of(digest), now_ns,
                                             FlowClass.PIPELINE)
        # A recorded hint's first REQUEST admits it; a stale REQUEST of a flow completed recently
        # (the registry ignored it: not in the registry) changes nothing.
        if changed or (digest.flow_id not in self._flows and digest.flow_id in self.registry):
            self.stats.digests_merged += 1
            self._admit(digest.flow_id, now_ns)
            self._journal_flow(digest.flow_id)
            return True
        return False

    def _dependency_digest(self, digest: RequestDigest) -> bool:
        """A REQUEST of a dependency the ToR has no grant for: learn the dependency (a
        placeholder when the application has not announced it) and install its grant."""
        if digest.dst_addr in self._ip_to_host and digest.src_addr in self._ip_to_host:
            key = (self._ip_to_host[digest.src_addr], digest.dep_id)
            if key in self._dep_slots or not self.config.rate_grants:
                self.stats.digests_echoed += 1  # a REQUEST that passed before the entry landed
                return False
            self._require_slot(self._topo.tor_of(self._ip_to_host[digest.dst_addr]), "digest.dst_addr")
        dep = self.dependencies.from_digest(digest.src_addr, digest.dst_addr, digest.dep_id)
        self.stats.digests_merged += 1
        self._admit_dependency((dep.sender, dep.dep_id))
        return True

    def _no_bubble_of(self, digest: RequestDigest) -> int:
        """A per-transfer digest's no-bubble timestamp: latest start + remaining bytes at the
        sender's line rate (the switch cannot divide, so the REQUEST carries the latest start)."""
        sender = self._ip_to_host.get(digest.src_addr)
        if sender is None:
            return digest.latest_start_ns  # unknown host: the registry refuses the digest
        rate = self._topo.host_link_bps(sender)
        return wrap(digest.latest_start_ns + -(-digest.remaining_bytes * 8 * NS_PER_S // rate))

    def poll(self, now_ns: int) -> int:
        """Poll every target's digests and merge them (:meth:`on_digest`). A digest that is
        refused (bad content, no slot) is counted in ``stats.digests_rejected`` and skipped, so
        one bad packet cannot stop the others. Returns the number of digests that changed
        something."""
        merged = 0
        for sw, target in self._targets.items():
            for digest in target.poll_digests():
                try:
                    merged += self.on_digest(sw, digest, now_ns)
                except InvalidInput:
                    self.stats.digests_rejected += 1
        return merged

    def tick(self, now_ns: int) -> None:
        """Re-allocate as time passes: estimate each flow's remaining bytes from the payload its
        receiver's ToR counted since the last report (module docstring), recompute all grants,
        and write what differs from the installed state (this also retries earlier failed writes).

        Raises:
            TargetError: a target refused writes.
            TargetConnectionError: a target's counter read failed (P4Runtime targets).
        """
        if not self._flows and self.config.grant_mode == "share":
            # dependency grants: nothing changes with time (the switch shares the ports), but
            # writes refused earlier are retried
            self.flush_dependencies()
            return
        now = wrap(now_ns)
        flows = self.allocator.flows()
        for fid, state, counted in self._flow_counters():
            payload = (counted.byte_count - state.base.byte_count
                       - (counted.packet_count - state.base.packet_count) * WIRE_OVERHEAD_BYTES)
            est = max(1, state.reported - max(0, payload))
            if est != state.est_remaining:
                state.est_remaining = est
                flows[fid] = replace(flows[fid], remaining_bytes=est)
        # One reallocation of every flow at `now` (upsert_many recomputes all touched components).
        changed = self.allocator.upsert_many(flows.values(), now) if flows else {}
        self.stats.grant_changes += len(changed)
        plans: dict[str, list[Update]] = {}
        self._plan_all_grants(plans)
        self._flush(plans)

    # ------------------------------------------------------------------ reading

    def slot_of(self, flow_id: int) -> int:
        """Meter slot of an admitted flow. Raises InvalidInput for an unknown flow."""
        if flow_id not in self._flows:
            raise InvalidInput("flow_id", f"unknown flow {flow_id!r}")
        return self._flows[flow_id].slot

    def free_slots(self, switch: str) -> int:
        """Number of free meter slots at ``switch``."""
        return len(self._free_slots[switch])

    def installed(self, switch: str) -> list[TableEntry]:
        """The shadow: table entries (defaults included) the scheduler believes are on ``switch``."""
        return list(self._shadow[switch].values())

    def installed_meters(self, switch: str) -> dict[int, MeterConfig]:
        """The shadow of meter configs on ``switch``, by slot."""
        return dict(self._shadow_meters[switch])

    def installed_clone_sessions(self, switch: str) -> dict[int, CloneSession]:
        """The shadow of clone sessions on ``switch``, by session id."""
        return dict(self._shadow_clones[switch])

    # ------------------------------------------------------------------ internals

    def _count_clock_write(self) -> None:
        self.stats.table_updates += 1
        self.stats.batches += 1
        self.stats.control_bytes += TABLE_UPDATE_BYTES + BATCH_OVERHEAD_BYTES

    def _require_slot(self, tor: str, field_name: str, sender_tor: str | None = None) -> None:
        """Raise InvalidInput unless ``tor`` has a free meter slot (with ``sender_tor``: one not
        among the slots of the dependencies ``sender_tor``'s hosts send)."""
        free = self._free_slots[tor]
        if not free:
            raise InvalidInput(field_name, f"the receiver's ToR {tor!r} has no free meter slot "
                               f"({self.config.meter_slots - 1} flows in use); retry after a flow completes")
        if sender_tor is not None:
            sent = self._out_slots[sender_tor]
            if all(slot in sent for slot in free):
                raise InvalidInput(field_name, f"no meter slot is free both at the receiver's ToR {tor!r} and "
                                   f"among the out slots of the sender's ToR {sender_tor!r} "
                                   f"({len(sent)} dependencies sent from it); retry after one ends")

    def _flow_counter(self, state: _FlowState) -> CounterValue:
        """``flow_bytes[slot]`` at the flow's ToR (zero where the ToR has no target)."""
        target = self._targets.get(state.tor)
        return target.read_counter(n.DEP_BYTES, state.slot) if target is not None else CounterValue(0, 0)

    def _flow_counters(self) -> list[tuple[int, _FlowState, CounterValue]]:
        """``(flow id, state, flow_bytes[slot] at its ToR)`` of every admitted flow, in admission
        order, with one :meth:`Target.read_counter_cells` per ToR (one P4Runtime Read, not one
        per flow; zero where the ToR has no target)."""
        by_tor: dict[str, list[tuple[int, _FlowState]]] = {}
        for fid, state in self._flows.items():
            by_tor.setdefault(state.tor, []).append((fid, state))
        counted: dict[int, CounterValue] = {}
        for tor, members in by_tor.items():
            target = self._targets.get(tor)
            if target is None:
                values = [CounterValue(0, 0)] * len(members)
            else:
                values = target.read_counter_cells(n.DEP_BYTES, [state.slot for _, state in members])
            for (fid, _), value in zip(members, values):
                counted[fid] = value
        return [(fid, state, counted[fid]) for fid, state in self._flows.items()]

    def _admit(self, flow_id: int, now_ns: int) -> None:
        """Push the registry's hint for ``flow_id`` into the allocator and install changes
        (nothing without ``rate_grants``: the flow stays a recorded hint)."""
        if not self.config.rate_grants:
            return
        hint = self.registry.get(flow_id)
        now = wrap(now_ns)
        state = self._flows.get(flow_id)
        if state is None:
            tor = self._topo.tor_of(hint.receiver)
            slot = heapq.heappop(self._free_slots[tor])
            sender = hint.sender
            state = self._flows[flow_id] = _FlowState(tor, slot, self._host_ip[sender], self._host_tor[sender],
                                                      hint.remaining_bytes, hint.remaining_bytes, CounterValue(0, 0))
            claim = (state.src_ip, transfer_dep_id(flow_id))
            self._transfer_claims[claim] = self._transfer_claims.get(claim, 0) + 1
        state.reported = state.est_remaining = hint.remaining_bytes
        state.base = self._flow_counter(state)
        flow = AllocFlow(flow_id, hint.sender, hint.receiver, hint.remaining_bytes,
                         hint.no_bubble_ts_ns & TIME_MASK, hint.flow_class == FlowClass.BACKGROUND)
        try:
            changed = self.allocator.upsert(flow, now)
        except InvalidInput:
            # Cannot happen for a registry-validated hint with topology hosts; keep state sane.
            if flow_id not in self.allocator.flows():
                heapq.heappush(self._free_slots[state.tor], state.slot)
                del self._flows[flow_id]
                self._release_transfer_claim(state.src_ip, flow_id)
            raise
        self._apply_changes(changed, now_ns, {})

    def _apply_changes(self, changed: Mapping[int, Grant], now_ns: int,
                       plans: dict[str, list[Update]]) -> None:
        self.stats.grant_changes += len(changed)
        for fid, grant in changed.items():
            self._plan_grant(fid, grant, plans)
        self._flush(plans)

    @staticmethod
    def _dep_key(src_ip: int, dep_id: int, table: str = n.DEP_GRANT) -> TableEntryKey:
        # TableEntry(table, {n.F_SRC_ADDR: src_ip, n.F_DEP_ID: dep_id}, ...).key() of a dep_grant
        # or dep_claim entry, built directly (hot path; tests/test_scheduler.py checks the two agree).
        return (table, False, ((n.F_DEP_ID, dep_id), (n.F_SRC_ADDR, src_ip)), 0)

    def _plan_claim(self, sender_tor: str, src_ip: int, dep_id: int, plans: dict[str, list[Update]],
                    out_slot: int = 0) -> None:
        """The ``dep_claim`` entry of an admitted dependency (or transfer) at its sender's ToR,
        unless the shadow holds it: its DATA keeps its slack class there (source_guard.p4), and
        a dependency of the share design is counted at its out-link in ``out_slot``."""
        shadow = self._shadow_grants.get(sender_tor)
        if shadow is None:
            return
        current = shadow.get(self._dep_key(src_ip, dep_id, n.DEP_CLAIM))
        if current is None or current.params["out_slot"] != out_slot:
            plans.setdefault(sender_tor, []).append(Update(Op.INSERT if current is None else Op.MODIFY, TableEntry(
                n.DEP_CLAIM, {n.F_SRC_ADDR: src_ip, n.F_DEP_ID: dep_id}, n.ACT_CLAIM, {"out_slot": out_slot})))

    def _grant_entry(self, state: _FlowState, flow_id: int, grant: Grant) -> TableEntry:
        return TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: state.src_ip, n.F_DEP_ID: transfer_dep_id(flow_id)},
                          n.ACT_SET_FIXED_GRANT, {
                              "rate_kbps": rate_bps_to_kbps(grant.rate_bps), "epoch": wire_epoch(grant.epoch),
                              "lease_us": lease_ns_to_us(grant.lease_ns), "meter_slot": state.slot})

    def _plan_grant(self, flow_id: int, grant: Grant, plans: dict[str, list[Update]]) -> None:
        state = self._flows[flow_id]
        tor = state.tor
        self._plan_claim(state.sender_tor, state.src_ip, transfer_dep_id(flow_id), plans)
        if tor not in self._targets:
            return
        plan = plans.setdefault(tor, [])
        # Meter first, so the first packet matching a new entry meets the flow's own rate.
        # (_plan_meter and _plan_entry inlined, with the entry's key built directly: this runs
        # for every changed grant of every re-allocation.)
        meter = self.config.meter_for(state.slot, grant.rate_bps)
        if self._shadow_meters[tor].get(state.slot) != meter:
            plan.append(Update(Op.MODIFY, meter))
        entry = self._grant_entry(state, flow_id, grant)
        current = self._shadow_grants[tor].get(self._dep_key(state.src_ip, transfer_dep_id(flow_id)))
        if current != entry:
            plan.append(Update(Op.INSERT if current is None else Op.MODIFY, entry))

    def _plan_all_grants(self, plans: dict[str, list[Update]], only: str | None = None) -> None:
        """Plan every installed grant and claim (per-transfer grants and dependencies, diffed)
        and delete stale dep_grant and dep_claim entries; with ``only``, just those of that
        switch (plans for other switches may be added too: the caller drops them)."""
        grants = self.allocator.grants()
        wanted: dict[str, set[TableEntryKey]] = {sw: set() for sw in self._targets if only in (None, sw)}

        def want(tor: str, sender_tor: str, src_ip: int, dep_id: int) -> bool:
            """Note the two entries as wanted; False when neither is on a switch planned here."""
            hit = False
            for sw, table in ((tor, n.DEP_GRANT), (sender_tor, n.DEP_CLAIM)):
                if sw in wanted:
                    wanted[sw].add(self._dep_key(src_ip, dep_id, table))
                    hit = True
            return hit

        for fid, grant in grants.items():
            state = self._flows[fid]
            if want(state.tor, state.sender_tor, state.src_ip, transfer_dep_id(fid)):
                self._plan_grant(fid, grant, plans)
        for key, (tor, _slot) in self._dep_slots.items():
            if want(tor, self._host_tor[key[0]], self._host_ip[key[0]], key[1]):
                self._plan_dependency(key, plans)
        for sw in wanted:
            shadow = self._shadow_grants[sw]
            for entry_key, entry in list(shadow.items()):
                if entry_key not in wanted[sw]:
                    plans.setdefault(sw, []).append(Update(Op.DELETE, entry))

    def _plan_entry(self, sw: str, entry: TableEntry, plan: list[Update]) -> None:
        current = self._shadow[sw].get(entry.key())
        if current == entry:
            return
        op = Op.MODIFY if entry.is_default or current is not None else Op.INSERT
        plan.append(Update(op, entry))

    def _plan_clone_session(self, sw: str, session: CloneSession, plan: list[Update]) -> None:
        current = self._shadow_clones[sw].get(session.session_id)
        if current != session:
            plan.append(Update(Op.INSERT if current is None else Op.MODIFY, session))

    def _meter_shadow(self, sw: str, cfg: MeterConfig) -> dict[int, MeterConfig]:
        if cfg.meter == n.DEP_METER:
            return self._shadow_meters[sw]
        return self._shadow_port_meters[sw][cfg.meter]

    def _plan_meter(self, sw: str, cfg: MeterConfig, plan: list[Update]) -> None:
        if self._meter_shadow(sw, cfg).get(cfg.index) != cfg:
            plan.append(Update(Op.MODIFY, cfg))

    def _flush(self, plans: Mapping[str, list[Update]]) -> None:
        """Write each switch's batch; record successes in the shadow; raise on failures.

        The shadow can be wrong about a switch (the controller restarted, a write timed out):
        an INSERT refused with ALREADY_EXISTS is retried once as MODIFY, a MODIFY refused with
        NOT_FOUND as INSERT, and a DELETE refused with NOT_FOUND counts as done.
        """
        if self._holding:
            return
        failures: list[UpdateFailure] = []
        for sw, plan in plans.items():
            if plan:
                failures.extend(self._write_reconciled(sw, plan))
        if failures:
            raise TargetError(failures)

    def _write_reconciled(self, sw: str, plan: list[Update]) -> list[UpdateFailure]:
        failed = self._write(sw, plan)
        retry_idx = [i for i, (code, _) in failed.items()
                     if (code == "ALREADY_EXISTS" and plan[i].op is Op.INSERT)
                     or (code == "NOT_FOUND" and plan[i].op is Op.MODIFY)]
        for i, (code, _) in list(failed.items()):
            if code == "NOT_FOUND" and plan[i].op is Op.DELETE:
                del failed[i]
                self._record(sw, plan[i])
        if retry_idx:
            flipped = {Op.INSERT: Op.MODIFY, Op.MODIFY: Op.INSERT}
            retry = [Update(flipped[plan[i].op], plan[i].entity) for i in retry_idx]
            again = self._write(sw, retry)
            for j, i in enumerate(retry_idx):
                if j in again:
                    failed[i] = again[j]
                else:
                    del failed[i]
        self.stats.write_failures += len(failed)
        return [UpdateFailure(i, code, f"{sw}: {msg}") for i, (code, msg) in sorted(failed.items())]

    def _write(self, sw: str, plan: list[Update]) -> dict[int, tuple[str, str]]:
        """One write call: counts it, records successes in the shadow, returns failures by index."""
        failed: dict[int, tuple[str, str]] = {}
        target = self._targets[sw]
        # A target class may offer write_trusted (PipelineModel does): the same write, skipping
        # schema checks of the grant entries and meters this class builds in range (see its
        # docstring). Looked up on the class, so a wrapper that forwards attributes to a
        # PipelineModel (e.g. to inject failures) keeps its own write.
        trusted = getattr(type(target), "write_trusted", None)
        try:
            if trusted is not None:
                trusted(target, plan)
            else:
                target.write(plan)
        except TargetError as err:
            failed = {f.index: (f.code, f.message) for f in err.failures}
        meters = clones = 0
        for i, upd in enumerate(plan):
            entity = upd.entity
            if isinstance(entity, MeterConfig):
                meters += 1
            elif isinstance(entity, CloneSession):
                clones += 1
            if i not in failed:
                self._record(sw, upd)
        stats = self.stats
        stats.batches += 1
        stats.meter_updates += meters
        tables = len(plan) - meters - clones  # clone sessions are not counted (SchedulerStats)
        stats.table_updates += tables
        stats.control_bytes += (BATCH_OVERHEAD_BYTES + meters * METER_UPDATE_BYTES
                                + tables * TABLE_UPDATE_BYTES)
        return failed

    def _record(self, sw: str, upd: Update) -> None:
        entity = upd.entity
        if isinstance(entity, MeterConfig):
            self._meter_shadow(sw, entity)[entity.index] = entity
        elif isinstance(entity, CloneSession):
            if upd.op is Op.DELETE:
                self._shadow_clones[sw].pop(entity.session_id, None)
            else:
                self._shadow_clones[sw][entity.session_id] = entity
        elif isinstance(entity, (ActionProfileMember, ActionProfileGroup)):
            if upd.op is Op.DELETE:
                self._shadow_profiles[sw].pop(entity.key(), None)
            else:
                self._shadow_profiles[sw][entity.key()] = entity
        elif upd.op is Op.DELETE:
            key = entity.key()
            self._shadow[sw].pop(key, None)
            self._shadow_grants[sw].pop(key, None)
        else:
            key = entity.key()
            self._shadow[sw][key] = entity
            if entity.table in _PER_DEPENDENCY_TABLES:
                self._shadow_grants[sw][key] = entity

"""Homa host transport (Montazeri, Li, Alizadeh, Ousterhout, "Homa: A Receiver-Driven
Low-Latency Transport Protocol Using Network Priorities", SIGCOMM 2018), for policy ``"homa"``.

Under policy ``"homa"`` every flow is a Homa message -- pipeline flows AND background flows:
Homa is a whole-fabric transport (in the paper's evaluation all traffic is Homa), and its
priorities only mean something when no other transport shares the queues.

What is modelled (paper sections in brackets):

- **Unscheduled bytes** [3.2, 3.3]: a sender transmits the first ``rtt_bytes`` of a message at
  once, without waiting for a grant (RTTbytes: the bytes a sender can put on the wire in one
  round trip; 9.7 KB at 10 Gbit/s in the paper's simulations [5.2], the HomaSimulation
  ``maxOutstandingRecvBytes = 9700B``). The simulator derives it from the topology (see
  :func:`rtt_bytes_for`) unless configured.
- **Grants, SRPT at the receiver** [3.3, 3.4]: for every DATA packet it receives, a receiver
  ranks its incoming messages that still need grants by remaining bytes (fewest first: SRPT)
  and sends each of the top ``overcommit`` messages a GRANT that keeps ``rtt_bytes`` granted
  but not yet received (grant offset = received + rtt_bytes, at most the message size).
- **Overcommitment** [3.5]: at most ``overcommit`` messages per receiver hold outstanding
  grants; the default degree is the number of scheduled priority levels (the paper's choice).
- **Priorities chosen by the receiver** [3.4]: of the 8 switch queues (queue 7 served first),
  the top ``8 - sched_priorities`` are *unscheduled* levels and the bottom ``sched_priorities``
  are *scheduled* levels. The number of unscheduled levels is proportional to the fraction of
  the workload's bytes that are unscheduled, and the size cutoffs between unscheduled levels
  split the unscheduled bytes equally, smaller messages higher
  (:func:`homa_priorities`, from the workload's message-size CDF). A message's unscheduled
  packets use the level of its size; scheduled packets use the level carried by its latest
  GRANT: with ``n`` messages granted, the one with the fewest remaining bytes gets scheduled
  level ``n - 1`` and the last gets 0 (the lowest levels are used when fewer messages than
  levels are active, so a new shorter message can preempt without reshuffling [3.4]).
  GRANT, RESEND and ACK packets go out at queue 7.
- **Sender SRPT** [3.2]: each host's NIC is fed one packet at a time (a pacer that sends when
  the NIC is idle), always from the sendable message with the fewest bytes left to send, so a
  short message never waits behind a long one's queued packets at the sender.
- Switches honour the host-chosen priority: :class:`safs.targets.homa_pipeline.HomaPipeline` keeps ``pkt.priority`` of
  Homa packets (IP protocol 146) and is otherwise the SAFS :class:`PipelineModel` (routes,
  counters).

Simplified, and documented as such:

- **Loss recovery** [3.7] is timer based: a receiver that got no new data of a message with
  granted-but-missing bytes for ``resend_ns`` sends a RESEND for each gap in what it received
  and one from the highest byte received up to the granted offset (which re-announces the
  grant, so lost GRANTs are recovered), as Linux Homa's ``homa_request_retrans`` does; the
  sender resends the part of each range it had already sent, before its other bytes, at the
  level the RESEND names, the highest (:data:`RESEND_PRIORITY`, as Linux Homa does). A sender that has
  sent everything it may and heard nothing from the receiver for ``sender_timeout_ns``
  resends the unscheduled part when it never heard from it at all (its packets may all have
  been lost, so the receiver does not know the message), else its last packet as a probe; a
  receiver answers DATA of a message it already completed with an ACK (so a lost ACK is
  recovered). Timers run per host, only while it has
  messages. Defaults follow the ns-3 Homa of Arslan (HomaL4Protocol-ns-3, paper-reproduction
  script): 1 ms inbound, 10 ms outbound.
- The receiver sends an ACK when the message is complete (the Linux Homa ACK packet; the 2018
  paper uses the RPC response as the acknowledgement); the sender then forgets the message.
- No BUSY packets, no per-RPC state, no incast optimisation, no cutoff-distribution packets
  (every host uses the same configured cutoffs, as if announced once).

Wire format in the simulator: a DATA packet is ``payload + HOMA_DATA_OVERHEAD_BYTES`` on the
wire (Ethernet 14 + IPv4 20 + Homa 38: the HomaSimulation's 8-byte UDP plus its ~30-byte data
header, see :data:`safs.core.distributions.HOMA_MAX_DATA_BYTES_PER_PKT`); control packets
are 64 bytes. ``Packet.flags`` holds the Homa type (codes of the Linux module's homa_wire.h),
``seq`` the DATA offset, ``ack`` a GRANT/RESEND offset, ``qclass`` the GRANT's or RESEND's priority.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator, model_validator

from safs.core.config import LIST_AS_TUPLE, ConfigModel, FieldError
from safs.core.distributions import SizeDistribution, load_distribution
from safs.core.errors import InvalidInput
from safs.core.packet import ETH_HEADER_BYTES, IPV4_HEADER_BYTES, PROTO_HOMA, Packet
from safs.core.protocol import NUM_QUEUES
from safs.hosts.env import Clock, HostPort
from safs.hosts.stats import TransportStats

HOMA_HEADER_BYTES = 38  # UDP 8 + ~30-byte Homa data header, as the HomaSimulation counts it
HOMA_IP_OVERHEAD_BYTES = IPV4_HEADER_BYTES + HOMA_HEADER_BYTES  # inside the MTU
HOMA_DATA_OVERHEAD_BYTES = ETH_HEADER_BYTES + HOMA_IP_OVERHEAD_BYTES  # 72 on the wire
HOMA_CONTROL_BYTES = 64  # GRANT / RESEND / ACK: one minimum Ethernet frame

# Packet types (Linux Homa, homa_wire.h: DATA 0x10, GRANT 0x11, RESEND 0x12, ACK 0x18).
HOMA_DATA, HOMA_GRANT, HOMA_RESEND, HOMA_ACK = 0x10, 0x11, 0x12, 0x18

QUEUE_HOMA_CONTROL = NUM_QUEUES - 1  # GRANT/RESEND/ACK at the highest priority [3.4]
# The level a RESEND asks for the bytes it names: the highest (Linux HomaModule, homa_wire.h
# resend_header "priority: the sender should transmit all the requested data using this
# priority"; homa_request_retrans sets num_priorities - 1). At the grant's level, a message
# whose scheduled packets were lost could be starved by higher-level ones for good.
RESEND_PRIORITY = NUM_QUEUES - 1

DEFAULT_SCHED_PRIORITIES = NUM_QUEUES // 2  # without a CDF: HomaSimulation homaTransportConfig.ini
#   schedPrioLevels = prioLevels / 2


class HomaConfig(ConfigModel):
    """Homa settings (sizes in bytes, times in ns; :class:`safs.core.config.ConfigModel`).
    ``None`` fields are derived.

    Attributes:
        mtu_bytes: largest IP packet; payload per DATA packet = MTU - 58 (IPv4 + Homa).
        rtt_bytes: unscheduled bytes per message and bytes kept granted per granted message
            (RTTbytes, paper Section 3.2; 9.7 KB at 10 Gbit/s in Section 5.2). None: derived
            from the topology, :func:`rtt_bytes_for`.
        sched_priorities: scheduled levels, 1..7 (the other 8 - n are unscheduled). None:
            from ``size_distribution`` (:func:`homa_priorities`, Section 3.4), else 4.
        overcommit: messages a receiver grants at once, >= 1. None: ``sched_priorities``
            (the paper's default degree, Section 3.5).
        unsched_cutoffs_bytes: ascending size cutoffs between unscheduled levels
            (``8 - sched_priorities - 1`` of them); None: from ``size_distribution``, else
            RTTbytes/8, /4, /2, ... (a fallback of this simulator, not from the paper).
        size_distribution: a flow-size CDF file (:func:`safs.core.distributions.
            load_distribution`; bare names are the shipped ones) whose sizes set the priority
            split; None: no CDF.
        resend_ns: receiver RESEND timeout, default 1 ms (ns-3 Homa InbndRtxTimeout).
        sender_timeout_ns: sender timeout without any reply, default 10 ms (ns-3 Homa
            OutbndRtxTimeout).

    Raises:
        InvalidInput: a field out of range (the field is named ``homa.<name>``).
    """

    FIELD_PREFIX: ClassVar[str] = "homa."

    mtu_bytes: int = Field(9000, ge=HOMA_IP_OVERHEAD_BYTES + 1, le=65535)
    rtt_bytes: int | None = Field(None, ge=1)
    sched_priorities: int | None = Field(None, ge=1, le=NUM_QUEUES - 1)
    overcommit: int | None = Field(None, ge=1)
    unsched_cutoffs_bytes: Annotated[tuple[Annotated[int, Field(ge=1)], ...] | None, LIST_AS_TUPLE] = None
    size_distribution: str | None = None
    resend_ns: int = Field(1_000_000, ge=1)
    sender_timeout_ns: int = Field(10_000_000, ge=1)

    @field_validator("unsched_cutoffs_bytes")
    @classmethod
    def _ascending(cls, cut: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if cut is not None and any(b <= a for a, b in zip(cut, cut[1:])):
            raise ValueError(f"must be strictly ascending integers >= 1 byte, got {cut!r}")
        return cut

    @model_validator(mode="after")
    def _cutoffs_fit_levels(self) -> HomaConfig:
        cut, sched = self.unsched_cutoffs_bytes, self.sched_priorities
        if cut is not None and sched is not None and len(cut) != NUM_QUEUES - sched - 1:
            raise FieldError("unsched_cutoffs_bytes", f"needs {NUM_QUEUES - sched - 1} cutoffs for "
                             f"{sched} scheduled levels, got {len(cut)}")
        return self

    @cached_property
    def max_payload(self) -> int:
        """Payload bytes per DATA packet (MTU - IPv4 - Homa headers; computed once)."""
        return self.mtu_bytes - HOMA_IP_OVERHEAD_BYTES


@dataclass(frozen=True)
class HomaParams:
    """Resolved per-run Homa parameters (see :class:`HomaConfig` for meanings).

    ``cutoffs`` has ``NUM_QUEUES - sched_priorities - 1`` ascending sizes; a message of size
    s gets unscheduled queue ``7 - bisect_left(cutoffs, s)`` (<= cutoffs[0]: queue 7).
    """

    max_payload: int
    rtt_bytes: int
    sched_priorities: int
    overcommit: int
    cutoffs: tuple[int, ...]
    resend_ns: int
    sender_timeout_ns: int

    def unsched_queue(self, size_bytes: int) -> int:
        """Queue of a message's unscheduled packets (smaller messages higher)."""
        return NUM_QUEUES - 1 - bisect.bisect_left(self.cutoffs, size_bytes)


def _masses(dist: SizeDistribution) -> list[tuple[float, float]]:
    """(size bytes, probability) points of ``dist`` (step CDF: mass at each size; interpolated
    CDF: each segment's mass at its mid size; a Pareto tail: its mass at its mean)."""
    out: list[tuple[float, float]] = []
    prev_p, prev_s = 0.0, 0.0
    for s, p in zip(dist.sizes, dist.cdf):
        if p > prev_p:
            out.append(((prev_s + s) / 2 if dist.interpolate and out else float(s), p - prev_p))
        prev_p, prev_s = p, float(s)
    if dist.pareto_tail is not None and prev_p < 1.0:
        k, sigma, _ = dist.pareto_tail
        out.append((prev_s + sigma / (1 - k), 1.0 - prev_p))
    return out


def homa_priorities(dist: SizeDistribution, rtt_bytes: int,
                    num_priorities: int = NUM_QUEUES) -> tuple[int, tuple[int, ...]]:
    """Split ``num_priorities`` levels between unscheduled and scheduled traffic (paper 3.4).

    Unscheduled levels U = round(P * f), clamped to 1..P-1, where f is the fraction of the
    workload's bytes that are unscheduled (E[min(size, rtt_bytes)] / E[size]); the U-1 size
    cutoffs split the unscheduled bytes into U equal shares, smaller messages on higher
    levels (the paper: "each unscheduled priority level carries the same amount of
    unscheduled bytes").

    Args:
        dist: the workload's message-size distribution.
        rtt_bytes: RTTbytes (>= 1).
        num_priorities: levels available (2..8).

    Returns:
        (scheduled levels, ascending cutoffs in bytes; ``len = P - scheduled - 1``).

    Raises:
        InvalidInput: ``rtt_bytes`` < 1 or ``num_priorities`` outside 2..8.
    """
    if isinstance(rtt_bytes, bool) or not isinstance(rtt_bytes, int) or rtt_bytes < 1:
        raise InvalidInput("rtt_bytes", f"must be an integer >= 1 byte, got {rtt_bytes!r}")
    if not 2 <= num_priorities <= NUM_QUEUES:
        raise InvalidInput("num_priorities", f"must be in 2..{NUM_QUEUES}, got {num_priorities!r}")
    masses = _masses(dist)
    total = sum(s * p for s, p in masses)
    unsched = [(s, p * min(s, rtt_bytes)) for s, p in masses]
    unsched_total = sum(b for _, b in unsched)
    levels_u = min(num_priorities - 1, max(1, round(num_priorities * unsched_total / total)))
    cutoffs: list[int] = []
    acc = 0.0
    share = unsched_total / levels_u
    for s, b in unsched:
        acc += b
        while len(cutoffs) < levels_u - 1 and acc >= share * (len(cutoffs) + 1) - 1e-12:
            c = max(1, int(s))
            if cutoffs and c <= cutoffs[-1]:
                c = cutoffs[-1] + 1
            cutoffs.append(c)
    return num_priorities - levels_u, tuple(cutoffs)


def rtt_bytes_for(topology: Any, mtu_bytes: int) -> int:
    """RTTbytes for ``topology``: host link rate x (idle one-way time of a full DATA packet
    plus that of a control packet back) between the farthest pair of hosts, in bytes.

    This is the paper's definition (Section 3.2: the bytes a sender can transmit in the time
    it takes a packet to reach the receiver and a grant to come back).
    """
    hosts = topology.hosts()
    rate = max(topology.host_link_bps(h) for h in hosts)
    worst = 0
    if len(hosts) >= 2:
        a = hosts[0]
        for b in hosts[1:]:
            t = (topology.min_transfer_ns(a, b, mtu_bytes - HOMA_IP_OVERHEAD_BYTES, mtu_bytes)
                 + topology.min_transfer_ns(b, a, 1, mtu_bytes))
            worst = max(worst, t)
    return max(1, -(-worst * rate // 8_000_000_000))


def resolve(config: HomaConfig, topology: Any) -> HomaParams:
    """Fill the derived fields of ``config`` for ``topology`` (see :class:`HomaConfig`).

    Raises:
        InvalidInput: an unreadable ``size_distribution`` (file named), or cutoffs that do
            not match the derived number of levels.
    """
    rtt = config.rtt_bytes if config.rtt_bytes is not None else rtt_bytes_for(topology, config.mtu_bytes)
    sched, cutoffs = config.sched_priorities, config.unsched_cutoffs_bytes
    if config.size_distribution is not None and (sched is None or cutoffs is None):
        d_sched, d_cut = homa_priorities(load_distribution(config.size_distribution), rtt)
        if sched is None:
            sched = d_sched
        if cutoffs is None:
            cutoffs = d_cut if sched == d_sched else None
    if sched is None:
        sched = DEFAULT_SCHED_PRIORITIES
    n_cut = NUM_QUEUES - sched - 1
    if cutoffs is None:
        cutoffs = tuple(sorted({max(1, rtt >> (n_cut - i)) for i in range(n_cut)}))
        while len(cutoffs) < n_cut:  # tiny rtt_bytes: keep the count right
            cutoffs = cutoffs + (cutoffs[-1] + 1 if cutoffs else 1,)
    if len(cutoffs) != n_cut:
        raise InvalidInput("homa.unsched_cutoffs_bytes", f"needs {n_cut} cutoffs for {sched} scheduled levels, "
                           f"got {len(cutoffs)}")
    return HomaParams(config.max_payload, rtt, sched, config.overcommit or sched, tuple(cutoffs),
                      config.resend_ns, config.sender_timeout_ns)


class _Out:
    """Sender-side state of one message."""

    __slots__ = ("fid", "dst", "size", "next", "granted", "unsched", "uprio", "sprio", "heard", "sent_high",
                 "last_heard", "retx", "rprio")

    def __init__(self, fid: int, dst: int, size: int, p: HomaParams, now: int) -> None:
        self.fid = fid
        self.dst = dst
        self.size = size
        self.next = 0  # next offset to send
        self.unsched = min(size, p.rtt_bytes)
        self.granted = self.unsched
        self.uprio = p.unsched_queue(size)
        self.sprio = 0
        self.heard = False  # any GRANT / RESEND from the receiver
        self.sent_high = 0  # highest offset ever sent (retransmission accounting)
        self.last_heard = now
        self.retx: list[list[int]] = []  # [start, end) ranges a RESEND asked for, sent first at rprio
        self.rprio = 0


class _In:
    """Receiver-side state of one message."""

    __slots__ = ("fid", "src", "size", "received", "contig", "ooo", "granted", "progress", "checked")

    def __init__(self, fid: int, src: int, size: int, p: HomaParams) -> None:
        self.fid = fid
        self.src = src
        self.size = size
        self.received = 0  # distinct payload bytes received
        self.contig = 0  # first offset not yet received
        self.ooo: dict[int, int] = {}  # offset -> end of packets received above contig
        self.granted = min(size, p.rtt_bytes)
        self.progress = 0  # bumped on every new packet
        self.checked = -1  # progress seen at the last timer check


class HomaHost:
    """Homa on one host: its outgoing messages (pacer, SRPT) and incoming ones (grants).

    Registered in ``Host.senders[fid]`` (GRANT, RESEND, ACK: payload 0) and
    ``Host.receivers[fid]`` (DATA) for each message it sends or receives.

    Args:
        engine: the simulator.  host: the network host.  params: resolved parameters.
        stats: shared counters.
        on_finish: ``on_finish(fid, now)`` when a message it receives is complete.
        on_closed: ``on_closed(fid)`` when a message it sends is acknowledged.
    """

    def __init__(self, engine: Clock, host: HostPort, params: HomaParams, stats: TransportStats,
                 on_finish: Callable[[int, int], None], on_closed: Callable[[int], None]) -> None:
        self.engine = engine
        self.host = host
        self.nic = host.nic
        self.ip = host.ip
        self.p = params
        self.stats = stats
        self.on_finish = on_finish
        self.on_closed = on_closed
        self.out: dict[int, _Out] = {}
        self.ready: list[_Out] = []  # messages with bytes to send (_sendable)
        self.inc: dict[int, _In] = {}
        self.wake_at = -1  # time of the queued pacer wake-up, -1 = none
        self.timer_on = False

    # ---- sender ---------------------------------------------------------------------------
    def send_message(self, fid: int, dst_ip: int, size_bytes: int) -> None:
        """Start sending a message of ``size_bytes`` (>= 1) to ``dst_ip`` now (unscheduled
        bytes at once, the rest as granted)."""
        if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 1:
            raise InvalidInput("size_bytes", f"must be an integer >= 1, got {size_bytes!r}")
        m = _Out(fid, dst_ip, size_bytes, self.p, self.engine.now)
        self.out[fid] = m
        self.ready.append(m)
        self._arm_timer()
        self._pump(None)

    def _pump(self, _: Any) -> None:
        """Send one packet when the NIC is idle: from the ready message with the fewest bytes
        left to send (SRPT); then wake when the NIC is free again."""
        engine = self.engine
        now = engine.now
        nic = self.nic
        if self.wake_at == now:
            self.wake_at = -1
        if nic.queued_packets or nic.busy_until > now:  # type: ignore[union-attr]
            self._wake(nic.busy_until if nic.busy_until > now else now)  # type: ignore[union-attr]
            return
        ready = self.ready
        if not ready:
            return
        m = min(ready, key=_left)
        retx = m.retx
        off = retx[0][0] if retx else m.next
        payload = min(self.p.max_payload, m.size - off)
        pkt = Packet(self.ip, m.dst, PROTO_HOMA, 0, 0, payload + HOMA_DATA_OVERHEAD_BYTES, payload)
        pkt.flow_id = m.fid
        pkt.flags = HOMA_DATA
        pkt.seq = off
        end = off + payload
        if retx:
            pkt.priority = m.rprio
            if end >= retx[0][1]:
                retx.pop(0)
            else:
                retx[0][0] = end
        else:
            pkt.priority = m.uprio if off < m.unsched else m.sprio
            m.next = end
        pkt.sent_ns = now
        stats = self.stats
        stats.data_bytes += pkt.size
        if off < m.sent_high:
            stats.retransmitted_bytes += pkt.size
        else:
            m.sent_high = end
        if not _sendable(m):
            ready.remove(m)
        nic.send(pkt)  # type: ignore[union-attr]
        if ready:
            self._wake(nic.busy_until)  # type: ignore[union-attr]

    def _wake(self, t: int) -> None:
        if self.wake_at < 0 or self.wake_at > t:
            self.wake_at = t
            self.engine.at(t, self._pump, None)

    def _on_control(self, pkt: Packet) -> None:
        m = self.out.get(pkt.flow_id)
        if m is None:
            return
        kind = pkt.flags
        if kind == HOMA_ACK:
            del self.out[pkt.flow_id]
            if _sendable(m):
                self.ready.remove(m)
            self.on_closed(m.fid)
            return
        m.heard = True
        m.last_heard = self.engine.now
        was_ready = _sendable(m)
        if kind == HOMA_GRANT:
            m.sprio = pkt.qclass
            if pkt.ack > m.granted:
                m.granted = min(pkt.ack, m.size)
        elif kind == HOMA_RESEND:  # bytes [seq, ack): resend what was sent; the rest goes as granted
            if pkt.ack > m.granted:
                m.granted = min(pkt.ack, m.size)
            end = min(pkt.ack, m.next)
            if pkt.seq < end and not any(a <= pkt.seq and end <= b for a, b in m.retx):
                m.retx.append([pkt.seq, end])
                m.rprio = pkt.qclass
        if not was_ready and _sendable(m):
            self.ready.append(m)
            self._pump(None)

    # ---- receiver -------------------------------------------------------------------------
    def expect(self, fid: int, src_ip: int, size_bytes: int) -> None:
        """Register an incoming message (state is used only once its first packet arrives)."""
        self.inc[fid] = _In(fid, src_ip, size_bytes, self.p)

    def receive(self, pkt: Packet) -> None:
        """Handle a Homa packet for this host (DATA as receiver, control as sender)."""
        if pkt.flags != HOMA_DATA:
            self._on_control(pkt)
            return
        m = self.inc.get(pkt.flow_id)
        if m is None:  # already complete (expect() runs before any packet): ACK the duplicate
            self._control(pkt.src, pkt.flow_id, HOMA_ACK, 0, 0)
            return
        seq = pkt.seq
        end = seq + pkt.payload
        if seq == m.contig:
            nxt = end
            ooo = m.ooo
            while nxt in ooo:
                nxt = ooo.pop(nxt)
            m.contig = nxt
        elif seq > m.contig and seq not in m.ooo:
            m.ooo[seq] = end
        else:
            return  # duplicate
        m.received += pkt.payload
        m.progress += 1
        if m.progress == 1:
            self._arm_timer()
        if m.received >= m.size:
            del self.inc[m.fid]
            self._control(m.src, m.fid, HOMA_ACK, 0, 0)
            self.on_finish(m.fid, self.engine.now)
        self._grant()

    def _grant(self) -> None:
        """SRPT grants: the top ``overcommit`` messages (fewest remaining bytes) that still
        need grants each get granted offset = received + rtt_bytes (at most the size)."""
        p = self.p
        cands = [m for m in self.inc.values() if m.granted < m.size and m.progress]
        if not cands:
            return
        if len(cands) > 1:
            cands.sort(key=_remaining)
        k = p.overcommit
        n = min(len(cands), k, p.sched_priorities)
        rtt = p.rtt_bytes
        for rank, m in enumerate(cands[:k]):
            want = m.received + rtt
            if want > m.size:
                want = m.size
            if want > m.granted:
                m.granted = want
                prio = n - 1 - rank
                self._control(m.src, m.fid, HOMA_GRANT, want, prio if prio > 0 else 0)

    def _control(self, dst: int, fid: int, kind: int, offset: int, prio: int, seq: int = 0) -> None:
        pkt = Packet(self.ip, dst, PROTO_HOMA, 0, 0, HOMA_CONTROL_BYTES, 0)
        pkt.flow_id = fid
        pkt.flags = kind
        pkt.ack = offset
        pkt.seq = seq
        pkt.qclass = prio
        pkt.priority = QUEUE_HOMA_CONTROL
        self.stats.control_bytes += HOMA_CONTROL_BYTES
        self.stats.control_packets += 1
        self.nic.send(pkt)  # type: ignore[union-attr]

    # ---- timers ---------------------------------------------------------------------------
    def _arm_timer(self) -> None:
        if not self.timer_on:
            self.timer_on = True
            self.engine.after(min(self.p.resend_ns, self.p.sender_timeout_ns), self._on_timer, None)

    def _on_timer(self, _: Any) -> None:
        """Receiver RESENDs for stalled messages; sender re-sends of unheard unscheduled bytes."""
        now = self.engine.now
        for m in self.inc.values():
            if not m.progress:
                continue
            if m.progress == m.checked and m.granted > m.received:
                self.stats.timeouts += 1
                for start, end in _missing(m):
                    self._control(m.src, m.fid, HOMA_RESEND, end, RESEND_PRIORITY, start)
            m.checked = m.progress
        for m in self.out.values():
            if m.next >= m.granted or m.next >= m.size:
                if now - m.last_heard >= self.p.sender_timeout_ns:
                    m.last_heard = now
                    self.stats.timeouts += 1
                    was_ready = _sendable(m)
                    if m.heard:  # probe with the last packet sent: a completed message is re-ACKed
                        m.next = (m.next - 1) // self.p.max_payload * self.p.max_payload
                    else:  # the receiver may not know the message: send its start again
                        m.next = 0
                    if not was_ready:
                        self.ready.append(m)
                    self._pump(None)
        self.timer_on = False
        if self.out or any(m.progress for m in self.inc.values()):
            self._arm_timer()


def _left(m: _Out) -> int:
    return m.size - m.next


def _sendable(m: _Out) -> bool:
    """Bytes a RESEND asked for, or granted bytes never sent."""
    return bool(m.retx) or (m.next < m.granted and m.next < m.size)


def _missing(m: _In) -> list[tuple[int, int]]:
    """[start, end) ranges of ``m`` to ask for again: each gap below the highest byte received,
    then from there to the granted offset (Linux Homa, homa_request_retrans)."""
    out = []
    at = m.contig
    for start in sorted(m.ooo):
        if start > at:
            out.append((at, start))
        at = max(at, m.ooo[start])
    if at < m.granted:
        out.append((at, m.granted))
    return out


def _remaining(m: _In) -> int:
    return m.size - m.received

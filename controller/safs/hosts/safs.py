"""SAFS host transport: dependencies with reusable grants, grant-paced transfers, and a
reassembling receiver per transfer (docs/protocol.md, "Grants").

A **dependency** (:class:`SafsDependency`) is what the receiver's ToR grants: one stream of
transfers from this host to one receiver (for example attention host i's A2F transfers to FFN
host j, layer after layer), named by ``dep_id`` (1..65535, unique per sender; the switch keys
its grant on the sender's address and ``dep_id``). The dependency holds the grant (rate, epoch,
lease) and paces the DATA of all its transfers, most urgent transfer (earliest latest start)
first. A **transfer** (:class:`SafsSender`) is one message: its bytes, its no-bubble timestamp,
its offsets and loss recovery.

Sender (../shared/BRIEF.md, "Design decisions / How grants reach senders"):

- A transfer of a dependency that holds a grant (lease not expired) is paced at the grant's
  rate from its first byte: no REQUEST, no unscheduled burst, so lock-step incasts of known
  dependencies do not overflow the receiver's port.
- A dependency without a usable grant (its first transfer, or its lease ran out) sends a
  REQUEST (the head transfer's remaining bytes and latest start), its first
  ``unscheduled_bytes`` at line rate (Homa's RTTbytes) and the rest at the default rate
  (``SafsConfig.default_rate_bps``, the switch's default grant) until a GRANT arrives.
- A GRANT with a newer epoch (``safs.core.protocol.epoch_newer``) replaces rate and epoch; the
  current epoch renews lease and rate; older GRANTs are ignored, except epoch 0
  (``EPOCH_NONE``), the switch's default grant, which always applies and carries no lease
  (docs/protocol.md rule 2).
- Every DATA carries the transfer's remaining bytes (including its payload), latest start =
  no-bubble ts - remaining*8/line_rate (48-bit, ``safs.core.protocol.latest_start_ns``), the
  dependency's id and the rate and epoch it holds, so the receiver's ToR can push a GRANT
  in-band when that rate is off the grant's; ``FLAG_LAST`` when the dependency has no unsent
  data after it (it goes idle: the ToR stops counting its weight), ``FLAG_RENEW`` once
  ``renew_fraction`` of the lease has passed (the ToR answers with a GRANT), ``FLAG_RESENT``
  on a retransmitted segment (the ToR ignores original DATA of a transfer whose LAST it has
  seen: stragglers; not retransmissions); background-class dependencies set
  ``FLAG_BACKGROUND``; DATA and REQUEST of a dependency that is the host's only one with data
  set ``FLAG_SOLE`` (it can use any rate it is granted: the ToR may let it hold the port). A
  sender polls only while its grant is too slow for an in-band push (``grant_poll_ns``, with
  back-off: ``SafsConfig``), and at ``grant_poll_ns`` whatever its rate while its GRANTs say
  ``FLAG_SOLE`` (it waits for the port's holder).
- Urgency signal: when the head transfer's slack falls below one of the switches' slack-class
  thresholds (``SafsConfig.slack_thresholds_ns``) before the next DATA would leave, a REQUEST
  goes at that moment, so the receiver's ToR sees the dependency become more urgent then
  (docs/protocol.md rule 5a); at most one per threshold crossed.
- If the lease expires without renewal the dependency falls back to the default rate and epoch
  0 (so a lost grant cannot leave a sender fast) and, with data to send, sends a REQUEST; its
  DATA then carry epoch 0, which the ToR answers with a GRANT in-band.
- DATA is paced per dependency: after a packet of ``size`` wire bytes the next one may leave
  ``ceil(size*8e9/rate)`` ns later (a token bucket with a one-packet burst). The dependencies
  of a host share its NIC through one :class:`SendScheduler` (``SafsConfig.send_order``
  ``urgency``, the default): when several are due and the NIC is busy, the one whose head
  transfer has the earliest no-bubble timestamp (at ``urgency_quantum_ns``), then the fewest
  bytes left, sends next, so a host whose grants add up to more than its uplink finishes its
  transfers in EDF order instead of all late together. ``send_order: fifo`` (the first design,
  policy ``safs-fifo-sender``): each dependency paces on its own into the NIC's FIFO.
- Catch-up: a dependency that falls due while the NIC holds a packet of its own or of a
  dependency of its host that the send scheduler orders after it (less urgent, or equally
  urgent with more bytes left), keeps up to one full packet's line-rate time of that wait
  on its pacing clock, so its next packet comes that much sooner: the less urgent dependency
  fills the gaps of a paced more urgent one without costing it rate (each 9,000-byte packet in
  its way delays it up to 720 ns at 100 Gbit/s; granted 60% of the line it got 83%
  of its grant, 90%: 55%), and a wait behind its own catch-up packet does not lose the rest of
  the credit (docs/protocol.md sender rule 5c). It never sends faster than the line, nor ahead
  of its grant's schedule. Waits behind a dependency the scheduler orders first are not caught
  up; without the credit behind an equally urgent one with more bytes left, two dependencies
  granted 99% of the line took turns packet by packet instead of fewest bytes first.
- Yielding (``SafsConfig.nic_yield_fraction``): a dependency whose host's more urgent
  dependencies hold grants that leave it less than that fraction of the line rate tells its
  receiver's ToR with a REQUEST carrying ``FLAG_BACKGROUND`` (the least urgent class there: the
  port's share goes to the receiver's other senders), and claims its place back with a REQUEST
  without the flag once they leave it twice that (docs/protocol.md, "Grants", sender rule 5b).
- Per-transfer mode (policy ``safs-per-transfer``, today's design kept for comparison): every
  transfer is its own dependency with a grant the controller installs (rate 0 possible while
  more urgent transfers use the link); it polls at a fixed ``grant_poll_ns``
  (``grant_poll_backoff`` 1).

Loss recovery (defined here; not part of the P4 program): the receiver sends a DONE
(remaining 0) once every byte has arrived, and again for any DATA arriving after that. SAFS
reorders by design (a packet over its grant waits in queue 1 while later ones pass in their
slack class), so a hole is not taken as a loss at once: a segment still missing
``reorder_window_ns`` (200 µs) after a segment ``reorder_segments`` (1) positions beyond it
arrived is reported in a NACK (below), RACK-style (RFC 8985, time-based loss detection: any
later arrival starts the clock, so holes among a transfer's last segments are found too). When
the sender has sent every byte and no DONE has come after ``rto_ns``, it re-sends the last
segment as a probe (doubling the timeout up to ``rto_max_ns``). A duplicate of the last
segment (the probe) at a receiver that is still missing bytes is answered with a NACK: a DONE
whose remaining bytes are the bytes still missing and whose payload lists up to
``nack_max_segments`` missing segment offsets (6 bytes each, counted in its size; in the
simulator the list rides in ``Packet.conn``). Any other duplicate is a late original or a
spurious retransmission and is only counted: answering it with every missing segment would
also list segments still in flight, whose retransmissions come back as duplicates, and so on
(on fabric-leaf-spine-64, with no packet dropped, 32 NACKs grew into 1,476 that way). The
sender queues NACKed segments for paced retransmission. So a lost segment costs about one
reorder window or timeout plus one RTT; a lost DONE is repaired by the next probe.

One implementation for every body: the sender and the receiver are state machines over a
:class:`safs.hosts.env.Clock` (``now``, ``at``, ``after``) and their host's
:class:`safs.hosts.env.Nic` (``send``). The simulator drives them with its engine and NIC
ports; the Mininet host agent (:mod:`safs.apps.agent.safs_socket`) with its real-time loop and
a UDP socket, whose timers wake late by up to tens of µs (milliseconds on a busy machine).
For that case pacing is a token bucket of ``SafsConfig.burst_bytes`` (0, the simulator's
default: one packet, each DATA exactly one gap after the previous): the average rate holds
when a wake-up is late, and a catch-up burst stays within the switch meter's burst (at least
``unscheduled_bytes``, ``SchedulerConfig.meter_for``), so it stays green. A NIC that cannot
take a packet now (``send`` False: a full socket buffer) is tried again
``SEND_RETRY_NS`` later; the simulator's host NICs always take it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from heapq import heappop, heappush
from typing import Literal

from pydantic import Field, model_validator

from safs.core.config import ConfigModel, FieldError
from safs.core.errors import InvalidInput
from safs.core.packet import IPV4_HEADER_BYTES, PROTO_UDP, UDP_HEADER_BYTES, Packet
from safs.core.protocol import (
    DEP_ID_MAX,
    DEP_ID_MIN,
    EPOCH_NONE,
    FLAG_BACKGROUND,
    FLAG_LAST,
    FLAG_LATE,
    FLAG_RENEW,
    FLAG_RESENT,
    FLAG_SOLE,
    HEADER_LEN,
    NACK_MAX_SEGMENTS_LIMIT,
    SAFS_UDP_PORT,
    SAFS_VERSION,
    WIRE_OVERHEAD_BYTES,
    MsgType,
    epoch_newer,
    latest_start_ns,
    rate_bps_to_kbps,
    transfer_dep_id,
)
from safs.core.timebase import wrap
from safs.hosts.env import Clock, HostPort
from safs.hosts.stats import TransportStats

DATA_OVERHEAD_BYTES = WIRE_OVERHEAD_BYTES  # 78: headers around a DATA payload
MIN_MTU_BYTES = IPV4_HEADER_BYTES + UDP_HEADER_BYTES + HEADER_LEN + 1  # one payload byte per DATA
NS_PER_S = 1_000_000_000
# A grant whose DATA packets are more than this many poll intervals apart counts as stalled:
# the sender polls with REQUESTs instead of waiting for an in-band push (40 µs at the default
# 10 µs poll: rates below 1.8 Gbit/s with 9000-byte packets).
SLOW_GAP_POLLS = 4
NACK_ENTRY_BYTES = 6  # one 48-bit segment offset per missing segment
NO_DEADLINE_NS = 1 << 46  # a flow without a no-bubble ts gets one ~19.5 h ahead (least urgent)
MAX_PACKETS_PER_WAKE = 64  # one flow never holds an agent's loop longer than this many sends
SEND_RETRY_NS = 100_000  # a NIC that refused a packet (full socket buffer) is tried again this late

_DATA = int(MsgType.DATA)
_REQUEST = int(MsgType.REQUEST)
_GRANT = int(MsgType.GRANT)
_DONE = int(MsgType.DONE)


class SafsConfig(ConfigModel):
    """SAFS transport settings (:class:`safs.core.config.ConfigModel`; errors name the bare field).

    Attributes:
        mtu_bytes: largest IP packet (default 9000, jumbo frames; docs/simulator.md says why).
        default_rate_bps: rate before the first grant and after a lease expires (bit/s, wire
            bytes); should equal the switch's default grant.
        renew_fraction: renew the lease when this fraction of it has passed (0 < f < 1).
        rto_ns: probe timeout after the last byte was sent without a DONE (default 250 µs: the
            reorder window and 50 µs more; the probe finds a lost last segment, which no later
            segment can reveal).
        rto_max_ns: cap of the doubling probe timeout.
        nack_max_segments: missing segments listed in one NACK.
        reorder_segments: a segment still missing when one this many positions later
            arrives is suspected lost (default 1: RACK's time-based detection, RFC 8985, which
            needs no duplicate count; TCP's duplicate-ACK threshold, RFC 5681, is 3, which
            left a hole among a transfer's last 3 segments to the sender's probe timeout) ...
        reorder_window_ns: ... and reported lost if it is still missing this long after
            (default 200 µs: two re-allocation ticks; queue-1 packets may wait behind urgent
            classes that long without being lost).
        unscheduled_bytes: the first bytes of a flow go at line rate without waiting for a
            grant (Homa's "unscheduled bytes", Montazeri et al., SIGCOMM 2018, sized there to one
            RTT of line rate); the rest follows the grant. Default 32 KiB (about 2.6 us at
            100 Gbit/s); should equal the scheduler's ``unscheduled_bytes`` (meter bursts).
        grant_poll_ns: 0 (default): senders never poll. > 0: while a dependency holds no
            grant of its own (epoch 0: default rate) or a grant so slow that its DATA packets
            are more than ``SLOW_GAP_POLLS`` times this far apart (rate 0 included), it re-sends
            a REQUEST after this long, then after twice as long each time while its rate stays
            the same, up to ``grant_poll_backoff`` times this (a GRANT that changes the rate
            starts over; one whose last GRANT said ``FLAG_SOLE``, waiting for its port's holder,
            polls at this period however fast its grant: docs/protocol.md "Grants"): a slow
            grant's DATA is too rare to carry the epoch for an in-band push, and a waiting
            dependency would otherwise learn late that the port's more urgent class has left
            (docs/protocol.md, sender rule 4). The simulator's dependency senders use 10 µs;
            the per-transfer design used 10 µs without back-off.
        grant_poll_backoff: the longest poll period as a multiple of ``grant_poll_ns``, >= 1
            (1: a fixed period). Default 16 (10 µs .. 160 µs in the simulator).
        burst_bytes: token-bucket depth of the pacer, wire bytes: 0 (default) paces one packet
            at a time, each exactly one gap after the previous (the simulator's exact timers);
            > 0 lets a late wake-up send what the rate allowed meanwhile, up to this many bytes
            but never less than two full packets (the Mininet agent: half of
            ``unscheduled_bytes``, within the switch meter's burst).
        send_order: how a host's dependencies share its NIC: ``urgency`` (default) through a
            :class:`SendScheduler` (EDF at ``urgency_quantum_ns``, then fewest bytes left);
            ``fifo``: each dependency paces on its own and the NIC's FIFO interleaves them (the
            first design; an ablation, policy ``safs-fifo-sender``).
        urgency_quantum_ns: the :class:`SendScheduler`'s deadline resolution, ns (> 0).
            Default 20 µs, finer than the allocator's 100 µs: the host reorders its own
            dependencies locally, with no control round per hand-over, so the allocator's
            reason for a coarse quantum does not apply. Measured on the fabric grid
            (docs/evaluation.md, "A send-scheduler quantum of its own"): 1-20 µs miss 4-5%
            fewer transfers than 100 µs; 20 µs keeps 16A2F's TPOT.
        slack_thresholds_ns: the switches' slack-class thresholds (the allocator's
            ``slack_thresholds_ns``, ascending; empty: no urgency signals). A dependency whose
            head transfer's slack falls below one of them before its next DATA would leave
            sends a REQUEST at that moment, so the receiver's ToR sees it become more urgent
            then and not one (slow) packet later (:meth:`SafsDependency._arm_urgency_signal`).
        late_transfers: ``"first"`` (default) or ``"last"``: the allocator's ``late_transfers``.
            With ``"last"`` a transfer whose slack is below the first of ``slack_thresholds_ns``
            (0 if there are none: it cannot meet its no-bubble timestamp even at line rate) is
            late: a dependency sends its on-time transfers first (its head), and the
            :class:`SendScheduler` sends a dependency whose head is late after the host's other
            dependencies, as the switches' slack classes then do. A transfer with a firm
            deadline is treated so under either setting (:class:`SafsSender`, ``firm``).
        receiver_admission: ``"firm"`` (default), ``"moore-hodgson"`` (needs ``late_transfers``
            "last") or ``"off"``: each receiving host keeps its inbound transfers in a
            :class:`ReceiverAdmission`, which rejects, by Moore and Hodgson's rule at its link
            rate, the ones that keep the others from being on time; a rejected transfer's
            sender is told by a DONE with ``FLAG_LATE`` and sends it as late. With "firm" only
            transfers with a firm deadline (the application's ``firm`` flag: late is worthless)
            may be rejected, the others only take their time; with "moore-hodgson" any may
            (policy ``safs-admission``); docs/protocol.md, "Receiver admission".
        nic_yield_fraction: a dependency whose host's more urgent dependencies hold grants that
            leave it less than this fraction of the line rate yields its place at its
            receiver's ToR, and claims it back once they leave it twice this fraction (0: never
            yields; at most 0.5; default 0.25): :meth:`SafsDependency._check_yield`. Chosen on
            seed 1 of the fabric grid among 0.1, 0.25 and 0.5 (misses 899 / 885 / 910 when any
            dependency ahead in the send order counts, 915 / 901 at 0.25 / 0.5 when only more
            urgent ones count, as here; 1,045 without; 898 as shipped, which also checks when a
            grant rises); docs/evaluation.md, "Senders yield".
        admission_rate_fraction: the share of the receiver's line rate the admission plans
            with, in (0, 1]. Default 0.8, measured (docs/evaluation.md, "Planning rate 0.8"): a busy
            receiver's 100 Gbit/s link delivers 85-90 Gbit/s of payload on average (headers,
            the 1% headroom, grant hand-overs and senders busy elsewhere take the rest: 89.7 on
            fabric-leaf-spine-64, 85.1 at load 0.9 of the fabric grid), and the rule needs a
            rate the link keeps up through a transfer, not its mean. Chosen on seeds 1-20 of
            the fabric grid among 0.7, 0.8, 0.85 and 0.9, checked on seeds 21-40 and the main
            scenario. At 1 the rule plans with time the link does not deliver and rejects too
            late.

    Raises:
        InvalidInput: a field out of its range (``mtu_bytes`` in MIN_MTU_BYTES..65535; rates and
            times > 0 (``grant_poll_ns`` >= 0); ``renew_fraction`` in (0, 1); ``rto_max_ns`` >= ``rto_ns``; counts >= 1;
            byte budgets >= 0; ``admission_rate_fraction`` in (0, 1]; ``nic_yield_fraction`` in
            [0, 0.5]), ``receiver_admission``
            "moore-hodgson" without ``late_transfers`` "last", or an unknown field.
    """

    mtu_bytes: int = Field(9000, ge=MIN_MTU_BYTES, le=65535)
    default_rate_bps: int = Field(10_000_000_000, gt=0)
    renew_fraction: float = Field(0.75, gt=0, lt=1)
    rto_ns: int = Field(250_000, gt=0)
    rto_max_ns: int = 64_000_000
    nack_max_segments: int = Field(128, ge=1, le=NACK_MAX_SEGMENTS_LIMIT)  # a NACK fits MAX_DONE_FRAME_BYTES
    reorder_segments: int = Field(1, ge=1)
    reorder_window_ns: int = Field(200_000, ge=0)
    grant_poll_ns: int = Field(0, ge=0)
    grant_poll_backoff: int = Field(16, ge=1)
    unscheduled_bytes: int = Field(32_768, ge=0)
    burst_bytes: int = Field(0, ge=0)
    send_order: Literal["urgency", "fifo"] = "urgency"
    urgency_quantum_ns: int = Field(20_000, gt=0)
    slack_thresholds_ns: tuple[int, ...] = ()
    late_transfers: Literal["first", "last"] = "first"
    receiver_admission: Literal["off", "firm", "moore-hodgson"] = "firm"
    admission_rate_fraction: float = Field(0.8, gt=0, le=1)
    nic_yield_fraction: float = Field(0.25, ge=0, le=0.5)

    @model_validator(mode="after")
    def _rto_max_covers_rto(self) -> SafsConfig:
        if self.rto_max_ns < self.rto_ns:
            raise FieldError("rto_max_ns", f"must be an integer >= rto_ns ({self.rto_ns}), got {self.rto_max_ns!r}")
        if self.receiver_admission == "moore-hodgson" and self.late_transfers != "last":
            raise FieldError("receiver_admission", f"{self.receiver_admission!r} needs late_transfers 'last' (a "
                             f"rejected transfer is sent as late), got late_transfers {self.late_transfers!r}")
        return self

    @cached_property
    def late_below_ns(self) -> int | None:
        """The :class:`SendScheduler`'s ``late_below_ns``: None with ``late_transfers`` "first",
        else the first slack threshold (0 without thresholds), ns."""
        if self.late_transfers == "first":
            return None
        return self.firm_late_below_ns

    @cached_property
    def firm_late_below_ns(self) -> int:
        """Slack, ns, below which a transfer with a firm deadline is given up whatever
        ``late_transfers`` says: the first slack threshold (0 without thresholds: it cannot
        meet its no-bubble timestamp even at line rate)."""
        return self.slack_thresholds_ns[0] if self.slack_thresholds_ns else 0

    @cached_property
    def segment_bytes(self) -> int:
        """Payload bytes of a full DATA packet: MTU - IPv4 - UDP - SAFS header (computed once)."""
        return self.mtu_bytes - IPV4_HEADER_BYTES - UDP_HEADER_BYTES - HEADER_LEN


def _control(src: int, dst: int, sport: int, dport: int, msg: int, flow_id: int, remaining: int,
             ts: int, extra_bytes: int = 0) -> Packet:
    pkt = Packet(src, dst, PROTO_UDP, sport, dport, WIRE_OVERHEAD_BYTES + extra_bytes)
    pkt.safs_version = SAFS_VERSION
    pkt.safs_type = msg
    pkt.flow_id = flow_id
    pkt.remaining = remaining
    pkt.ts = ts
    return pkt


class SendScheduler:
    """A host's sender-side scheduler: which of its dependencies sends the next DATA packet.

    Grants come from the ToRs of different receivers, so the grants one sender holds can add
    up to more than its NIC's rate (at fabric scale, many times it). Paced independently, the
    dependencies then interleave in the NIC's FIFO and every transfer of the host finishes late
    together (processor sharing). With a scheduler each dependency stays within its grant (its
    own pacer) and, whenever several are due to send and the NIC is busy, the most urgent goes
    first: earliest no-bubble timestamp, at the resolution of ``urgency_quantum_ns``
    (:attr:`SafsConfig.urgency_quantum_ns`), then the fewest bytes left to send (SRPT),
    then the order they became due (with ``late_below_ns`` set, a head transfer whose slack is
    below it, a late one, comes after all the others: ``SafsConfig.late_transfers`` "last").
    So spare capacity finishes transfers early in EDF order and
    equally urgent ones one after another, as Homa's sender does by SRPT (Montazeri et al.,
    SIGCOMM 2018, section 3.4), and the host's own queue stays about one packet deep.

    The scheduler tracks the NIC by the line rate (``free_at_ns``, when the bytes it let through
    will have left); control messages and other transports bypass it. Dependencies call
    :meth:`may_send` before each DATA packet and :meth:`sent` after it; one that may not send is
    called back (``SafsDependency._turn``) when its turn comes. ``burst_bytes`` lets that much
    be handed to the NIC ahead of the line rate (the Mininet agent's ``SafsConfig.burst_bytes``:
    a timer that wakes late may send what the line allowed meanwhile); 0 in the simulator.

    Args:
        clock: the endpoint's time and timers.  line_rate_bps: the NIC's rate, bit/s (> 0).
        urgency_quantum_ns: deadlines this close are equally urgent (> 0).
        burst_bytes: wire bytes the NIC may hold beyond the line rate (>= 0).
        late_below_ns: slack, ns, below which a head transfer is late and goes last (None:
            lateness does not change the order; :attr:`SafsConfig.late_below_ns`).
    """

    __slots__ = ("clock", "line_rate", "quantum", "late_below", "ahead_ns", "free_at_ns", "waiting", "order",
                 "turn", "wake_pending", "active", "nic_key", "nic_dep")

    def __init__(self, clock: Clock, line_rate_bps: int, urgency_quantum_ns: int, burst_bytes: int = 0,
                 late_below_ns: int | None = None) -> None:
        self.clock = clock
        self.line_rate = line_rate_bps
        self.quantum = urgency_quantum_ns
        self.late_below = late_below_ns
        self.ahead_ns = burst_bytes * 8 * NS_PER_S // line_rate_bps  # how far free_at_ns may lead now
        self.free_at_ns = 0
        self.waiting: list[tuple[bool, int, int, int, SafsDependency]] = []
        self.order = 0
        self.turn: SafsDependency | None = None  # the dependency called back, allowed one packet
        self.wake_pending = False
        # The host's dependencies with unfinished transfers (they add and drop themselves), as an
        # ordered set: the sole check walks these, not every dependency, on each DATA packet.
        self.active: dict[SafsDependency, None] = {}
        self.nic_key: tuple[bool, int, int] | None = None  # _key of the last packet let through
        self.nic_dep: SafsDependency | None = None  # whose it was

    def sole(self, dep: SafsDependency) -> bool:
        """No dependency of the host but ``dep`` has data to send (FLAG_SOLE)."""
        return not any(d is not dep and d.has_data() for d in self.active)

    def may_send(self, dep: SafsDependency, head: SafsSender, now: int) -> bool:
        """True if ``dep`` may send its next packet now; else it waits for :meth:`_wake`, with
        ``dep.catch_up`` set if the last packet let through was its own or that of a dependency
        this scheduler orders after it (less urgent, or equally urgent with more bytes left:
        catch-up, docs/protocol.md sender rule 5c)."""
        if self.turn is dep:
            self.turn = None
            self.nic_key, self.nic_dep = self._key(head, now), dep
            return True
        if now + self.ahead_ns >= self.free_at_ns and not self.waiting:
            self.nic_key, self.nic_dep = self._key(head, now), dep
            return True
        if not dep.sched_waiting:
            dep.sched_waiting = True
            key = self._queue(dep, head, now)
            held = self.nic_key
            dep.catch_up = self.nic_dep is dep or (held is not None and held > key)
            dep._check_yield(now)
        self._arm(now)
        return False

    def urgencies(self, now: int) -> list[tuple[tuple[bool, int], int, SafsDependency]]:
        """(urgency, held rate bit/s, dependency) of the host's dependencies with data; urgency
        = (late, no-bubble timestamp // ``urgency_quantum_ns``) of the head transfer."""
        out = []
        for d in self.active:
            h = d._head()
            if h is not None:
                out.append((self._urgency(h, now), d.rate_bps, d))
        return out

    def rate_left(self, dep: SafsDependency, head: SafsSender, now: int,
                  urgencies: list[tuple[tuple[bool, int], int, SafsDependency]] | None = None) -> int:
        """The line rate, bit/s, that the grants of the host's more urgent dependencies with
        data leave ``dep`` (whose head transfer is ``head``): more urgent = an earlier no-bubble
        timestamp at ``urgency_quantum_ns``, or on time while ``dep``'s head is late. Equally
        urgent ones do not count: they take turns with ``dep`` (fewest bytes left first) and
        each gets its grant in turn. May be negative. ``urgencies``: :meth:`urgencies` at
        ``now``, when the caller checks several dependencies."""
        key = self._urgency(head, now)
        if urgencies is None:
            urgencies = self.urgencies(now)
        return self.line_rate - sum(rate for k, rate, d in urgencies if k < key and d is not dep)

    def check_yields(self, now: int, waiting: bool = False) -> None:
        """The host's grants or urgencies changed: each yielded dependency checks whether it
        may claim its place back, and with ``waiting`` (a grant rose) each one waiting for the
        NIC whether it must yield."""
        checks = [d for d in self.active if d.yielded or (waiting and d.sched_waiting)]
        if checks:
            urgencies = self.urgencies(now)
            for d in checks:
                d._check_yield(now, urgencies)

    def requeue(self, dep: SafsDependency) -> None:
        """``dep``, waiting for its turn, got a new transfer: queue it by its (new) head now; its
        older entry is skipped when it comes up (a key fixed when the dependency started waiting
        kept a 30 KB transfer due in 32 µs behind its dependency's 1.5 MB one due in 377 µs)."""
        head = dep._head()
        if dep.sched_waiting and head is not None:
            self._queue(dep, head, self.clock.now)

    def _urgency(self, head: SafsSender, now: int) -> tuple[bool, int]:
        return head.late(now, self.late_below), head.no_bubble // self.quantum

    def _key(self, head: SafsSender, now: int) -> tuple[bool, int, int]:
        return (*self._urgency(head, now), head.remaining_unsent())

    def _queue(self, dep: SafsDependency, head: SafsSender, now: int) -> tuple[bool, int, int]:
        """Queue ``dep`` under its head transfer's :meth:`_key`; returns that key."""
        key = self._key(head, now)
        self.order += 1
        dep.sched_entry = self.order
        heappush(self.waiting, (*key, self.order, dep))
        return key

    def sent(self, size: int, now: int) -> None:
        """A packet of ``size`` wire bytes went to the NIC at ``now``."""
        start = self.free_at_ns if self.free_at_ns > now else now
        self.free_at_ns = start + (size * 8 * NS_PER_S + self.line_rate - 1) // self.line_rate

    def _arm(self, now: int) -> None:
        if not self.wake_pending:
            self.wake_pending = True
            due = self.free_at_ns - self.ahead_ns
            self.clock.at(due if due > now else now, self._wake, None)

    def _wake(self, _: object) -> None:
        self.wake_pending = False
        now = self.clock.now
        while self.waiting and now + self.ahead_ns >= self.free_at_ns:
            entry = heappop(self.waiting)
            dep = entry[-1]
            if entry[-2] != dep.sched_entry:
                continue  # superseded by a requeue
            # Its head may have become late (or finished) while it waited: queue it again if
            # another dependency now comes first.
            head = dep._head()
            if head is not None and self.waiting and (*self._key(head, now), entry[-2]) > self.waiting[0][:-1]:
                self._queue(dep, head, now)
                continue
            dep.sched_waiting = False
            self.turn = dep
            dep._turn()
            self.turn = None
        if self.waiting:
            self._arm(now)


class SafsDependency:
    """Sender side of one dependency on ``host``: the grant its transfers share and their pacer
    (module docstring).

    Args:
        clock: the endpoint's time and timers.  host: the sending host (``ip``; its NIC's
            ``rate_bps`` is the line rate).  dst_ip: the receiver's address.
        dep_id: 1..65535, unique among this host's dependencies.  background: set
            ``FLAG_BACKGROUND`` on every packet.  config: :class:`SafsConfig`.
        stats: counters shared by the run (or the host).
        scheduler: the host's :class:`SendScheduler`, shared by its dependencies; None: this
            dependency hands its packets straight to the NIC (its FIFO orders them).

    Observable state: ``rate_bps``, ``epoch``, ``lease_expiry_ns`` (None without a lease),
    ``transfers`` (unfinished, in start order), ``yielded``; counters ``requests``, ``grants``,
    ``grants_stale``, ``fallbacks``, ``yields``.

    Raises:
        InvalidInput: ``dep_id`` outside 1..65535.
    """

    __slots__ = ("clock", "host", "nic", "src", "dst", "sport", "dep_id", "flags", "cfg", "seg", "burst", "stats",
                 "line_rate", "full_packet_ns", "rate_bps", "epoch", "lease_expiry_ns", "transfers", "pace_token",
                 "pacing", "next_send_ns", "last_size", "last_send_ns", "renew_token", "renew_pending", "polling",
                 "poll_ns", "unscheduled_left", "requests", "grants", "grants_stale", "fallbacks", "scheduler",
                 "holder_wait", "sched_waiting", "sched_entry", "catch_up", "signal_token", "signals", "background",
                 "yielded", "yields")

    def __init__(self, clock: Clock, host: HostPort, dst_ip: int, dep_id: int, background: bool,
                 config: SafsConfig, stats: TransportStats, scheduler: SendScheduler | None = None) -> None:
        if type(dep_id) is not int or not DEP_ID_MIN <= dep_id <= DEP_ID_MAX:
            raise InvalidInput("dep_id", f"must be an integer in {DEP_ID_MIN}..{DEP_ID_MAX}, got {dep_id!r}")
        self.clock = clock
        self.host = host
        self.nic = host.nic
        self.src = host.ip
        self.dst = dst_ip
        self.sport = 1024 + dep_id % 64000
        self.dep_id = dep_id
        self.background = background
        self.flags = FLAG_BACKGROUND if background else 0  # FLAG_BACKGROUND also while yielded
        self.cfg = config
        self.seg = config.segment_bytes
        # Token-bucket depth (0: one packet at a time, exact gaps).
        self.burst = max(2 * (self.seg + DATA_OVERHEAD_BYTES), config.burst_bytes) if config.burst_bytes else 0
        self.stats = stats
        self.line_rate = host.nic.rate_bps
        self.full_packet_ns = (self.seg + DATA_OVERHEAD_BYTES) * 8 * NS_PER_S // self.line_rate  # catch-up cap
        self.rate_bps = config.default_rate_bps
        self.epoch = EPOCH_NONE
        self.lease_expiry_ns: int | None = None
        self.transfers: list[SafsSender] = []
        self.pace_token = 0
        self.pacing = False
        self.next_send_ns = 0  # earliest time the next packet may leave (token bucket)
        self.last_size = 0
        self.last_send_ns = 0
        self.renew_token = 0
        self.renew_pending = False  # the lease passed renew_fraction: DATA asks for a GRANT
        self.polling = False  # a grant-poll timer is queued
        self.poll_ns = 0  # the next poll's delay (0: grant_poll_ns); doubles while the rate stays
        self.holder_wait = False  # the last GRANT said FLAG_SOLE: waiting for the port's holder
        self.unscheduled_left = 0  # bytes that may still go at line rate (no grant held)
        self.requests = self.grants = self.grants_stale = self.fallbacks = 0
        self.scheduler = scheduler
        self.sched_waiting = False  # queued at the scheduler for a turn
        self.catch_up = False  # it waits behind its own packet or one the scheduler orders after it: keep that wait
        self.sched_entry = 0  # the scheduler's entry for it that counts (SendScheduler.requeue)
        self.signal_token = 0  # the armed urgency signal (_arm_urgency_signal)
        self.signals = 0  # urgency-signal REQUESTs sent
        self.yielded = False  # its place at the receiver's ToR given up (_check_yield)
        self.yields = 0  # times it yielded

    # ---- transfers ------------------------------------------------------------------------
    def add(self, sender: SafsSender) -> None:
        """Start ``sender``'s transfer: paced at once at the held grant, else after a REQUEST."""
        self.transfers.append(sender)
        if self.scheduler is not None:
            self.scheduler.active[self] = None
        now = self.clock.now
        if self.lease_expiry_ns is not None and now >= self.lease_expiry_ns:
            self._expire()
        if self.epoch == EPOCH_NONE:
            self._request(sender)
            self.unscheduled_left = self.cfg.unscheduled_bytes
        if not self.pacing:
            self.next_send_ns = now
            self._schedule_pace(now)
        elif self.sched_waiting and self.scheduler is not None:
            self.scheduler.requeue(self)
        self._start_poll()

    def remove(self, sender: SafsSender) -> None:
        """Forget a finished transfer."""
        if sender in self.transfers:
            self.transfers.remove(sender)
        if not self.transfers and self.scheduler is not None:
            self.scheduler.active.pop(self, None)
            if self.yielded:
                self._set_yielded(False)
            self.scheduler.check_yields(self.clock.now)

    def has_data(self) -> bool:
        """Some transfer has bytes to send (new or to retransmit)."""
        return any(t.has_data() for t in self.transfers)

    def sole(self) -> bool:
        """The host's only dependency with data (FLAG_SOLE): it can use whatever its receiver's
        ToR grants. False without a send scheduler (no view of the host's other dependencies)."""
        return self.scheduler is not None and self.scheduler.sole(self)

    def resume(self) -> None:
        """A transfer got segments to retransmit: pace again if idle."""
        if not self.pacing and self.rate_bps > 0:
            self._schedule_pace(self.clock.now)

    def _head(self) -> SafsSender | None:
        """The most urgent transfer with data: earliest latest start (the only one, mostly); with
        ``late_transfers`` "last", a late one (slack below ``late_below_ns``) only if all are, so
        a late transfer does not hold up an on-time one of its dependency."""
        transfers = self.transfers
        if len(transfers) == 1:  # the common case: nothing to compare
            t = transfers[0]
            return t if t.has_data() else None
        best: SafsSender | None = None
        best_key = (False, 0)
        late_below = self.cfg.late_below_ns
        now = self.clock.now
        for t in transfers:
            if not t.has_data():
                continue
            latest = t.latest_start_key()
            key = (t.late(now, late_below, latest), latest)
            if best is None or key < best_key:
                best, best_key = t, key
        return best

    # ---- control messages -----------------------------------------------------------------
    def _request(self, sender: SafsSender) -> None:
        remaining = min(sender.size, max(1, sender.remaining_unsent()))
        pkt = _control(self.src, self.dst, self.sport, SAFS_UDP_PORT, _REQUEST, sender.flow_id, remaining,
                       sender.wire_latest_start(remaining, self.clock.now))
        pkt.flags = self.flags | FLAG_SOLE if self.sole() else self.flags
        pkt.dep_id = self.dep_id
        self.stats.control_bytes += pkt.size
        self.stats.control_packets += 1
        self.requests += 1
        self.nic.send(pkt)

    def _expire(self) -> None:
        """Lease ran out without renewal: default rate, epoch 0."""
        self.rate_bps = self.cfg.default_rate_bps
        self.epoch = EPOCH_NONE
        self.lease_expiry_ns = None
        self.renew_token += 1
        self.renew_pending = False
        self.stats.lease_fallbacks += 1
        self.fallbacks += 1

    def _fallback(self) -> None:
        """The lease ran out while sending: default rate, epoch 0, ask again."""
        self._expire()
        head = self._head()
        if head is not None:
            self._request(head)
        self._start_poll()

    # ---- pacing ---------------------------------------------------------------------------
    def _schedule_pace(self, t_ns: int) -> None:
        self.pace_token += 1
        self.pacing = True
        self.clock.at(t_ns, self._pace, self.pace_token)

    def _pace(self, token: int) -> None:
        if token != self.pace_token:
            return
        now = self.clock.now
        if self.lease_expiry_ns is not None and now >= self.lease_expiry_ns:
            self._fallback()
        if self.burst:  # credit beyond the bucket's depth at the current rate is forgotten
            rate = self.line_rate if self.unscheduled_left > 0 else self.rate_bps
            depth_ns = self.burst * 8 * NS_PER_S // rate if rate > 0 else 0
            if self.next_send_ns < now - depth_ns:
                self.next_send_ns = now - depth_ns
        elif self.catch_up:  # at most one full packet's line-rate time of the wait is kept
            self.catch_up = False
            self.next_send_ns = max(self.next_send_ns, now - self.full_packet_ns)
        else:
            self.next_send_ns = now
        for _ in range(MAX_PACKETS_PER_WAKE):
            tx = self._head()
            sched = self.scheduler
            if tx is None:
                self.pacing = False
                if sched is not None:
                    sched.check_yields(now)  # its grant no longer takes the NIC from the others
                return
            if self.yielded:
                self._check_yield(now)
            if sched is not None and not sched.may_send(self, tx, now):
                return  # still pacing: the scheduler calls _turn when this dependency may send
            resent = bool(tx.retx)
            offset = tx.retx[-1] if resent else tx.next_offset
            last = not tx.has_data_after(resent) and not any(
                t.has_data() for t in self.transfers if t is not tx)
            size = tx.send_segment(offset, now, resent, last)
            if not size:  # the NIC refused it (full socket buffer): try again shortly
                self._schedule_pace(now + SEND_RETRY_NS)
                return
            self.last_size = size
            self.last_send_ns = now
            if sched is not None:
                sched.sent(size, now)
            # Unscheduled bytes (no grant held) leave at line rate, back to back.
            if self.unscheduled_left > 0 and not resent:
                self.unscheduled_left -= size - DATA_OVERHEAD_BYTES
                rate = self.line_rate
            else:
                rate = self.rate_bps
            if rate <= 0:  # a zero grant: wait for a new grant or the lease to run out
                self._stall()
                return
            self.next_send_ns += (size * 8_000_000_000 + rate - 1) // rate
            if self.next_send_ns > now:
                break
        self._schedule_pace(max(now, self.next_send_ns))
        self._arm_urgency_signal(now)

    def _turn(self) -> None:
        """The scheduler's call back: this dependency may send one packet now (if still pacing)."""
        if self.pacing:
            self._pace(self.pace_token)

    def _stall(self) -> None:
        """Rate 0: stop pacing until a grant with a rate arrives (or the lease runs out)."""
        self.pace_token += 1
        self.pacing = False
        self._start_poll()

    def _repace(self, now: int) -> None:
        """Re-time the next DATA for a new rate (the packet already sent keeps its gap)."""
        if not self.has_data():
            return
        rate = self.rate_bps
        if rate <= 0:
            self._stall()
            return
        gap = (self.last_size * 8_000_000_000 + rate - 1) // rate if self.last_size else 0
        self.next_send_ns = max(now, self.last_send_ns + gap)
        self._schedule_pace(self.next_send_ns)
        self._arm_urgency_signal(now)

    def _arm_urgency_signal(self, now: int) -> None:
        """If the head transfer's slack falls below a slack-class threshold after ``now`` but
        before its next DATA leaves (``next_send_ns``), send a REQUEST at that moment.

        The receiver's ToR sees a dependency's urgency only in its packets (its share is strict
        priority by slack class, docs/protocol.md "Grants"); a dependency waiting behind a more
        urgent class holds a small share and sends a packet seldom, so without this the ToR
        would see its slack cross into the next class one packet late (measured: a 9000-byte
        packet every 122 µs against a 100 µs class width). At most one REQUEST per threshold
        crossed; none while packets leave more often than the classes change."""
        thresholds = self.cfg.slack_thresholds_ns
        if not thresholds or self.next_send_ns <= now:
            return
        head = self._head()
        if head is None or head.given_up(now):  # a transfer given up stays in the least urgent class
            return
        latest = head.latest_start_key()
        for th in reversed(thresholds):  # the largest threshold not yet crossed is crossed first
            t = latest - th
            if t > now:
                if t < self.next_send_ns:
                    self.signal_token += 1
                    self.clock.at(t, self._urgency_signal, self.signal_token)
                return

    def _urgency_signal(self, token: int) -> None:
        """The armed threshold crossing: tell the ToR (a REQUEST), unless a DATA went meanwhile."""
        if token != self.signal_token or not self.pacing or self.next_send_ns <= self.clock.now:
            return
        head = self._head()
        if head is not None:
            self.signals += 1
            self._request(head)

    # ---- yielding its place when the NIC is taken -----------------------------------------
    def _check_yield(self, now: int,
                     urgencies: list[tuple[tuple[bool, int], int, SafsDependency]] | None = None) -> None:
        """Yield this dependency's place at its receiver's ToR while the host's more urgent
        dependencies hold grants that leave it less than ``nic_yield_fraction`` of the line
        rate (:meth:`SendScheduler.rate_left`), and claim it back once they leave twice that.

        Each receiver's ToR shares its port among the dependencies it counts, but one host's
        grants from several receivers can add up to more than its NIC, and its send scheduler
        serves the most urgent first: a dependency it cannot serve would hold a share that its
        receiver's other senders could use (BRIEF's invariant: no more than a sender's
        uplink). Yielding is a REQUEST with ``FLAG_BACKGROUND``, which moves the dependency to
        the least urgent class there (grant_enforcer.p4, update_share): the port's share goes
        to the others, and the dependency gets the waiting share, scaled by what they leave
        unused; its DATA carry the flag while it stays yielded. Claiming back is a REQUEST
        without it (its class by its slack again; the GRANT answers). No P4 change: a
        background dependency's flag and a REQUEST's class move already do this.
        ``urgencies``: :meth:`SendScheduler.urgencies` at ``now``, when several are checked."""
        frac = self.cfg.nic_yield_fraction
        sched = self.scheduler
        if not frac or sched is None or self.background:
            return
        head = self._head()
        if head is None:
            return
        left = sched.rate_left(self, head, now, urgencies)
        if self.yielded:
            if left >= 2 * frac * self.line_rate:
                self._set_yielded(False)
                self._request(head)
        elif left < frac * self.line_rate:
            self._set_yielded(True)
            self.yields += 1
            self._request(head)

    def _set_yielded(self, yielded: bool) -> None:
        self.yielded = yielded
        self.flags = self.flags | FLAG_BACKGROUND if yielded else self.flags & ~FLAG_BACKGROUND

    # ---- polling (per-transfer mode) ------------------------------------------------------
    def _start_poll(self) -> None:
        if self.cfg.grant_poll_ns and not self.polling:
            self.polling = True
            self.clock.after(self.poll_ns or self.cfg.grant_poll_ns, self._grant_poll, None)

    def _grant_poll(self, _: object) -> None:
        self.polling = False
        head = self._head()
        if head is None:
            return
        now = self.clock.now
        if self.lease_expiry_ns is not None and now >= self.lease_expiry_ns:
            self._fallback()  # sends a REQUEST; default rate > 0
            if not self.pacing:
                self._schedule_pace(now)
        elif self.epoch == EPOCH_NONE or self._slow() or self.holder_wait:
            self._request(head)
            cfg = self.cfg
            # One waiting for its port's holder polls at grant_poll_ns whatever its rate (its
            # waiting share's DATA may be 24 µs apart): the first REQUEST after the holder frees
            # the port takes it.
            self.poll_ns = (cfg.grant_poll_ns if self.holder_wait else
                            min(2 * (self.poll_ns or cfg.grant_poll_ns), cfg.grant_poll_backoff * cfg.grant_poll_ns))
        else:
            return  # a grant fast enough that DATA carries its epoch: in-band pushes take over
        self._start_poll()

    def _slow(self) -> bool:
        """The rate leaves more than ``SLOW_GAP_POLLS`` poll intervals between DATA packets (or
        is 0), so an in-band push of a newer grant would wait that long: keep asking instead."""
        rate = self.rate_bps
        return rate <= 0 or self.seg * 8 * NS_PER_S > SLOW_GAP_POLLS * self.cfg.grant_poll_ns * rate

    # ---- grants ---------------------------------------------------------------------------
    def _renew(self, token: int) -> None:
        if token == self.renew_token:
            self.renew_pending = True  # the next DATA carries FLAG_RENEW

    def receive(self, pkt: Packet) -> None:
        """Apply a GRANT for this dependency (docs/protocol.md, "Grants", sender rule 2)."""
        self.stats.control_bytes += pkt.size
        self.stats.control_packets += 1
        self.grants += 1
        epoch = pkt.epoch
        if not epoch_newer(epoch, self.epoch) and epoch != self.epoch and epoch != EPOCH_NONE:
            self.grants_stale += 1
            return  # stale grant (epoch 0, the switch's default grant, always applies: rule 2)
        now = self.clock.now
        rate = pkt.rate_kbps * 1000
        self.holder_wait = bool(pkt.flags & FLAG_SOLE)
        if rate != self.rate_bps:
            self.poll_ns = 0  # polls back at the shortest period
        if epoch == EPOCH_NONE:  # the switch's default grant: no lease (the held one is gone)
            rate = rate if rate > 0 else self.cfg.default_rate_bps
            self.lease_expiry_ns = None
            self.renew_token += 1
            self.renew_pending = False
        else:
            lease_ns = pkt.lease_us * 1000
            self.lease_expiry_ns = now + lease_ns
            self.renew_token += 1
            self.renew_pending = False
            self.unscheduled_left = 0
            self.clock.at(now + int(lease_ns * self.cfg.renew_fraction), self._renew, self.renew_token)
        self.epoch = epoch
        if rate != self.rate_bps:
            higher = rate > self.rate_bps
            self.rate_bps = rate
            if self.scheduler is not None:  # a lower grant leaves the others more, a higher one less
                self.scheduler.check_yields(now, waiting=higher)
            self._repace(now)
            if self._slow() or self.holder_wait:
                self._start_poll()
        elif self.holder_wait:
            self._start_poll()
        elif not self.pacing and rate > 0 and self.has_data():
            self._repace(now)


class SafsSender:
    """Sender side of one transfer (see the module docstring for behaviour).

    Args:
        clock: the endpoint's time and timers (the simulator's engine, the agent's loop).
        host: the sending host (``ip``; its NIC's ``rate_bps`` is the line rate).
        dst_ip: receiver address.  flow_id: the transfer's id, 1..2^32-1.  size_bytes: > 0.
        no_bubble_ts_ns: absolute no-bubble time in ns of the clock's fabric time (None: no
            deadline).
        background: set ``FLAG_BACKGROUND`` on every packet (own dependency only).
        config: :class:`SafsConfig`.  stats: counters shared by the run (or the host).
        on_closed: called with the flow id once the sender got the final DONE.
        dependency: the :class:`SafsDependency` whose grant paces it; None: a dependency of its
            own (``dep_id`` = the flow id modulo 65535, plus 1: per-transfer mode).
        on_sent: called once with the flow id when the last new byte has been sent, or
            earlier: when the new bytes left take at most ``complete_lead()`` ns at the held
            rate (the Mininet agent completes the flow at the hint API then). None: never.
        complete_lead: the lead in ns (read at each check; default 0: at the last byte).
        firm: its no-bubble timestamp is a firm deadline (the application's word: a late
            transfer is worthless, as for independent requests whose count of misses is the
            metric), not a pipeline's soft one (late is still needed, the sooner the better).
            A firm transfer is given up once its slack falls below the first slack threshold
            (``SafsConfig.firm_late_below_ns``) or its receiver rejects it (a DONE with
            ``FLAG_LATE``, any ``late_transfers``): its dependency then sends it after its
            other transfers and its DATA carries a latest start that puts it in the least
            urgent SAFS class at every switch (with ``late_transfers`` "first" the slack of a
            transfer without deadline, with "last" the late class), so it no longer takes
            capacity from transfers that can still be on time (docs/protocol.md, "Firm
            deadlines"). Default False.

    Observable state for tests: ``rate_bps``, ``epoch``, ``lease_expiry_ns`` (the dependency's),
    ``closed``; per-transfer counters ``data_packets``, ``retransmitted_bytes``, ``probes``, and
    the dependency's ``requests``, ``grants``, ``grants_stale``, ``fallbacks``.

    Raises:
        InvalidInput: ``size_bytes`` not an integer > 0.
    """

    __slots__ = ("clock", "dep", "flow_id", "size", "no_bubble", "cfg", "seg", "stats", "on_closed", "on_sent",
                 "complete_lead", "line_rate", "next_offset", "retx", "retx_set", "probe_token", "rto", "closed",
                 "started", "sent_reported", "data_packets", "retransmitted_bytes", "probes", "rejected", "firm")

    def __init__(self, clock: Clock, host: HostPort, dst_ip: int, flow_id: int, size_bytes: int,
                 no_bubble_ts_ns: int | None, background: bool, config: SafsConfig,
                 stats: TransportStats, on_closed: Callable[[int], None],
                 dependency: SafsDependency | None = None,
                 on_sent: Callable[[int], None] | None = None,
                 complete_lead: Callable[[], int] | None = None, firm: bool = False) -> None:
        if type(size_bytes) is not int or size_bytes <= 0:
            raise InvalidInput("size_bytes", f"must be an integer > 0, got {size_bytes!r}")
        self.clock = clock
        self.dep = dependency if dependency is not None else SafsDependency(
            clock, host, dst_ip, transfer_dep_id(flow_id), background, config, stats)
        self.flow_id = flow_id
        self.size = size_bytes
        self.no_bubble = (clock.now + NO_DEADLINE_NS) if no_bubble_ts_ns is None else no_bubble_ts_ns
        self.cfg = config
        self.seg = config.segment_bytes
        self.stats = stats
        self.on_closed = on_closed
        self.on_sent = on_sent
        self.complete_lead = complete_lead
        self.line_rate = host.nic.rate_bps
        self.next_offset = 0  # next never-sent byte
        self.retx: list[int] = []  # segment offsets to re-send (NACKed), popped from the end
        self.retx_set: set[int] = set()
        self.probe_token = 0
        self.rto = config.rto_ns
        self.closed = False
        self.started = False
        self.sent_reported = False
        self.data_packets = self.retransmitted_bytes = self.probes = 0
        self.rejected = False  # its receiver rejected it (a DONE with FLAG_LATE): it is late
        self.firm = firm

    # Grant state lives in the dependency.
    @property
    def rate_bps(self) -> int:
        """The rate this transfer's dependency holds (bit/s)."""
        return self.dep.rate_bps

    @property
    def epoch(self) -> int:
        """The epoch its dependency holds."""
        return self.dep.epoch

    @property
    def lease_expiry_ns(self) -> int | None:
        """When its dependency's lease runs out (None: no lease)."""
        return self.dep.lease_expiry_ns

    # ---- sending -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the transfer: its dependency paces it (and asks for a grant if it has none)."""
        if self.closed or self.started:
            return
        self.started = True
        self.dep.add(self)

    def stop(self) -> None:
        """Stop the transfer: nothing more is sent and its pending timers do nothing."""
        self.closed = True
        self.probe_token += 1
        self.dep.remove(self)

    def has_data(self) -> bool:
        """Bytes to send: segments to retransmit or never sent."""
        return not self.closed and (bool(self.retx) or self.next_offset < self.size)

    def has_data_after(self, resent: bool) -> bool:
        """Bytes left to send after the segment about to go (a retransmission if ``resent``)."""
        if resent:
            return len(self.retx) > 1 or self.next_offset < self.size
        return bool(self.retx) or self.next_offset + self.seg < self.size

    def remaining_unsent(self) -> int:
        """Bytes not yet sent, counting queued retransmissions."""
        return self.size - self.next_offset + len(self.retx) * self.seg

    def latest_start_key(self) -> int:
        """Urgency for the dependency's pacer: latest start of the next byte (ns, unwrapped)."""
        remaining = self.size - self.next_offset
        return self.no_bubble - (remaining * 8 * NS_PER_S) // self.line_rate

    def late(self, now: int, late_below_ns: int | None, latest: int | None = None) -> bool:
        """Late at ``now`` (host clock, ns): given up (:meth:`given_up`), or its slack is below
        ``late_below_ns`` (``SafsConfig.late_below_ns``; None: nothing counts as late).
        ``latest``: :meth:`latest_start_key` if the caller has it."""
        slack = (self.latest_start_key() if latest is None else latest) - now
        return self._given_up_with(slack) or (late_below_ns is not None and slack < late_below_ns)

    def given_up(self, now: int) -> bool:
        """Rejected by its receiver, or firm and below ``SafsConfig.firm_late_below_ns`` of
        slack at ``now`` (ns): sent after the others, in the least urgent class."""
        return self._given_up_with(self.latest_start_key() - now)

    def _given_up_with(self, slack_ns: int) -> bool:
        return self.rejected or (self.firm and slack_ns < self.cfg.firm_late_below_ns)

    def wire_latest_start(self, remaining: int, now: int) -> int:
        """The latest start its DATA and REQUESTs carry (48-bit): the real one, or for a transfer
        given up one that puts it in the least urgent SAFS class at every switch: with
        ``late_transfers`` "last" the late class (``late_below_ns`` - 1 ns of slack when it
        leaves), with "first" the class of a transfer without deadline."""
        if self.given_up(now):
            cfg = self.cfg
            slack = NO_DEADLINE_NS if cfg.late_below_ns is None else cfg.late_below_ns - 1
            return latest_start_ns(now + slack, 0, self.line_rate)
        return latest_start_ns(self.no_bubble, remaining, self.line_rate)

    def send_segment(self, offset: int, now: int, resent: bool, last: bool) -> int:
        """Send the segment at ``offset`` (the dependency's pacer decided it may leave now);
        returns its wire bytes, or 0 when the NIC refused it (nothing changes then)."""
        size = self._send_data(offset, now, last, resent)
        if not size:
            return 0
        if resent:
            self.retx.pop()
            self.retx_set.discard(offset)
            self.stats.retransmitted_bytes += size
            self.retransmitted_bytes += size
        else:
            self.next_offset = offset + self.seg
            if self.on_sent is not None and not self.sent_reported and self._sent_soon():
                self.sent_reported = True
                self.on_sent(self.flow_id)
        if not self.has_data():
            self._arm_probe()
        return size

    def _sent_soon(self) -> bool:
        """The last new byte is sent, or the rest takes at most ``complete_lead()`` at the held rate."""
        left = self.size - self.next_offset
        if left <= 0:
            return True
        rate = self.dep.rate_bps
        lead = self.complete_lead() if self.complete_lead is not None else 0
        if lead <= 0 or rate <= 0:
            return False
        packets = -(-left // self.seg)
        return (left + packets * DATA_OVERHEAD_BYTES) * 8 * NS_PER_S <= lead * rate

    def _send_data(self, offset: int, now: int, last: bool, resent: bool) -> int:
        """Send the segment at ``offset`` (``resent``: a retransmission, FLAG_RESENT); its wire
        bytes, or 0 when the NIC refused it."""
        dep = self.dep
        remaining = self.size - offset
        payload = remaining if remaining < self.seg else self.seg
        size = payload + DATA_OVERHEAD_BYTES
        pkt = Packet(dep.src, dep.dst, PROTO_UDP, dep.sport, SAFS_UDP_PORT, size, payload)
        pkt.safs_version = SAFS_VERSION
        pkt.safs_type = _DATA
        flags = dep.flags
        if last:
            flags |= FLAG_LAST
        if dep.renew_pending:
            flags |= FLAG_RENEW
        if resent:
            flags |= FLAG_RESENT
        if dep.sole():
            flags |= FLAG_SOLE
        pkt.flags = flags
        pkt.flow_id = self.flow_id
        pkt.dep_id = dep.dep_id
        pkt.remaining = remaining
        pkt.ts = self.wire_latest_start(remaining, now)
        pkt.epoch = dep.epoch
        pkt.rate_kbps = rate_bps_to_kbps(dep.rate_bps)
        pkt.sent_ns = now
        if not dep.nic.send(pkt):
            return 0
        self.stats.data_bytes += size
        self.stats.safs_data_bytes += size
        self.data_packets += 1
        return size

    # ---- timers --------------------------------------------------------------------------
    def _arm_probe(self) -> None:
        self.probe_token += 1
        self.clock.after(self.rto, self._probe, self.probe_token)

    def _probe(self, token: int) -> None:
        if token != self.probe_token or self.closed or self.has_data():
            return
        self.stats.timeouts += 1
        self.probes += 1
        last = ((self.size - 1) // self.seg) * self.seg
        size = self._send_data(last, self.clock.now, not self.dep.has_data(), True)
        self.stats.retransmitted_bytes += size
        self.retransmitted_bytes += size
        self.rto = min(self.rto * 2, self.cfg.rto_max_ns)
        self._arm_probe()

    # ---- receiving -----------------------------------------------------------------------
    def receive(self, pkt: Packet) -> None:
        """Handle a GRANT (for its dependency) or DONE/NACK (``pkt.conn``: a NACK's segment
        offsets) for this transfer."""
        if self.closed:
            return
        if pkt.safs_type == _GRANT:
            self.dep.receive(pkt)
        elif pkt.safs_type == _DONE:
            if pkt.flags & FLAG_LATE:  # rejected by its receiver (ReceiverAdmission): send it as late
                dep = self.dep
                if (self.firm or self.cfg.late_below_ns is not None) and not self.rejected:
                    self.rejected = True
                    if dep.sched_waiting and dep.scheduler is not None:
                        dep.scheduler.requeue(dep)
                return
            if pkt.remaining == 0:
                self.stop()
                self.on_closed(self.flow_id)
                return
            seg = self.seg
            for offset in pkt.conn or ():
                if offset not in self.retx_set and 0 <= offset < self.next_offset and offset % seg == 0:
                    self.retx_set.add(offset)
                    self.retx.append(offset)
            self.retx.sort(reverse=True)  # lowest offset first (popped from the end)
            self.rto = self.cfg.rto_ns
            if self.retx and self.started:
                self.dep.resume()


class SafsReceiver:
    """Receiver side of one SAFS flow: reassembles by offset, reports completion, sends DONE.

    Args:
        clock, host: the endpoint's time and timers, and the receiving host (``ip``, ``nic``).
        src_ip: the sender's address.  flow_id, size_bytes: the flow.
        no_bubble_ts_ns: echoed in DONE (None: no deadline).
        config: :class:`SafsConfig` (segment size, reorder window).  stats: shared counters.
        on_finish: ``on_finish(flow_id, now_ns)`` once, when the last byte arrived (``now_ns``
            of ``clock``).
        admission: its host's :class:`ReceiverAdmission` (``SafsConfig.receiver_admission``),
            which it joins at its first DATA and leaves when complete or stopped; None: none.
        firm: the transfer's deadline is firm (:class:`SafsSender`'s ``firm``, which the
            receiving application states as well): the admission may reject it. Default False.

    Per-flow counters: ``dones`` (DONE, remaining 0), ``nacks`` (DONE listing holes),
    ``duplicates`` (DATA for a segment already held); ``rejected``: the admission rejected it.
    """

    __slots__ = ("clock", "host", "nic", "src", "sender", "flow_id", "size", "seg", "got",
                 "received", "finish_ns", "ts", "no_bubble", "cfg", "stats", "on_finish", "sender_port", "nack_mark",
                 "dones", "nacks", "duplicates", "closed", "admission", "rejected", "firm")

    def __init__(self, clock: Clock, host: HostPort, src_ip: int, flow_id: int, size_bytes: int,
                 no_bubble_ts_ns: int | None, config: SafsConfig, stats: TransportStats,
                 on_finish: Callable[[int, int], None], admission: ReceiverAdmission | None = None,
                 firm: bool = False) -> None:
        self.clock = clock
        self.host = host
        self.nic = host.nic
        self.src = host.ip
        self.sender = src_ip
        self.flow_id = flow_id
        self.size = size_bytes
        self.seg = config.segment_bytes
        self.got: bytearray | None = bytearray(-(-size_bytes // self.seg))
        self.received = 0
        self.finish_ns: int | None = None
        self.no_bubble = (clock.now + NO_DEADLINE_NS) if no_bubble_ts_ns is None else no_bubble_ts_ns
        self.ts = wrap(self.no_bubble)
        self.cfg = config
        self.stats = stats
        self.on_finish = on_finish
        self.sender_port = 0
        self.nack_mark = 0  # segments below this index were checked for loss
        self.dones = self.nacks = self.duplicates = 0
        self.closed = False
        self.admission = admission
        self.rejected = False
        self.firm = firm

    def stop(self) -> None:
        """Stop the flow: pending loss reports do nothing and later DATA is not answered."""
        self.closed = True
        if self.admission is not None:
            self.admission.left(self)

    def receive(self, pkt: Packet) -> None:
        """Handle a DATA packet of this flow (other types are ignored)."""
        if pkt.safs_type != _DATA or self.closed:
            return
        self.sender_port = pkt.sport
        got = self.got
        if got is None:  # complete: the sender has not seen our DONE yet
            self._done(0, ())
            return
        offset = self.size - pkt.remaining
        if not 0 <= offset < self.size or offset % self.seg:
            return  # not a segment of this flow
        idx = offset // self.seg
        if got[idx]:
            self.duplicates += 1
            if idx != len(got) - 1:
                return  # a late original or a spurious retransmission (holes have timers or the probe)
            missing = [i * self.seg for i, v in enumerate(got) if not v]
            missing_bytes = sum(min(self.seg, self.size - o) for o in missing)
            self._done(missing_bytes, tuple(missing[: self.cfg.nack_max_segments]))
            return
        got[idx] = 1
        first = not self.received
        self.received += pkt.payload
        if self.received >= self.size:
            self.got = None
            now = self.clock.now
            self.finish_ns = now
            self.on_finish(self.flow_id, now)
            self._done(0, ())
            if self.admission is not None:
                self.admission.left(self)
            return
        if first and self.admission is not None:
            self.admission.arrived(self)
        limit = idx - self.cfg.reorder_segments  # segments this far back should have arrived
        if limit >= self.nack_mark:
            holes = tuple(i for i in range(self.nack_mark, limit + 1) if not got[i])
            self.nack_mark = limit + 1
            if holes:
                self.clock.after(self.cfg.reorder_window_ns, self._report_holes, holes)

    def _report_holes(self, holes: tuple[int, ...]) -> None:
        """NACK the suspected segments that are still missing after the reorder window."""
        got = self.got
        if got is None or self.closed:
            return
        missing = [i * self.seg for i in holes if not got[i]]
        if missing:
            lost = sum(min(self.seg, self.size - o) for o in missing)
            self._done(lost, tuple(missing[: self.cfg.nack_max_segments]))

    def missing_bytes(self) -> int:
        """Bytes not yet received (0 once complete)."""
        return self.size - self.received if self.got is not None else 0

    def reject(self) -> None:
        """Its host's admission rejected it: tell the sender once, by a DONE with ``FLAG_LATE``
        (remaining = the bytes still missing), to send the rest as late."""
        if self.rejected or self.closed:
            return
        self.rejected = True
        self._done(self.missing_bytes(), (), FLAG_LATE)

    def _done(self, missing_bytes: int, missing: tuple[int, ...], flags: int = 0) -> None:
        # To port 23285, which switches parse as SAFS (control queue 7), from the dependency's
        # port (docs/protocol.md, "Transport").
        pkt = _control(self.src, self.sender, self.sender_port, SAFS_UDP_PORT, _DONE, self.flow_id,
                       missing_bytes, self.ts, NACK_ENTRY_BYTES * len(missing))
        pkt.flags = flags
        pkt.conn = missing
        self.stats.control_bytes += pkt.size
        self.stats.control_packets += 1
        if not flags:  # a rejection (FLAG_LATE) is neither a DONE nor a NACK
            if missing_bytes:
                self.nacks += 1
            else:
                self.dones += 1
        self.nic.send(pkt)


class ReceiverAdmission:
    """A receiving host's admission of its inbound SAFS transfers
    (``SafsConfig.receiver_admission`` "moore-hodgson"; docs/protocol.md, "Receiver admission").

    Where demand is infeasible, the number of transfers that miss their no-bubble timestamps is
    smallest when the ones that cannot all be on time are given up early and sent after the
    others, not when every transfer is served by urgency until several are late together: on
    one link, Moore and Hodgson's rule (J. M. Moore, "An n job, one machine sequencing
    algorithm for minimizing the number of late jobs", Management Science 15(1), 1968) is
    optimal. Whenever a transfer's first DATA arrives or one completes, the host applies the
    rule to its inbound transfers that are not yet rejected: in order of no-bubble timestamp, add each
    one's missing bytes at ``rate_bps`` to a running finish time from now; when the finish
    passes the transfer's timestamp, reject the rejectable one with the most missing bytes so
    far (and take its time back). With ``firm_only`` (``receiver_admission`` "firm", the
    default) only transfers whose deadline is firm (``SafsReceiver.firm``) are checked and
    rejected: the others are a pipeline's, whose late bytes are still needed, so they keep their
    place and take their time, and a firm transfer is not given up for one of them; without it
    (``receiver_admission`` "moore-hodgson") every transfer. A rejected transfer's
    receiver tells its sender once (a DONE with ``FLAG_LATE``, :meth:`SafsReceiver.reject`); the
    sender then gives it up (:meth:`SafsSender.given_up`): sends it after its other transfers,
    in the least urgent SAFS class at every switch. A rejection is final; a lost one only
    leaves the transfer on time. The receiver's link is the one resource modelled: a transfer also held back by its
    sender or a fabric link is not seen as late here unless the link is.

    Args:
        clock: the host's time (``now``, ns).  rate_bps: the payload rate its link delivers while
            busy, bit/s (> 0): the line rate times ``SafsConfig.admission_rate_fraction``.
        firm_only: only transfers with a firm deadline may be rejected (default True).
    """

    __slots__ = ("clock", "rate", "firm_only", "inbound", "firm_inbound")

    def __init__(self, clock: Clock, rate_bps: int, firm_only: bool = True) -> None:
        self.clock = clock
        self.rate = rate_bps
        self.firm_only = firm_only
        self.firm_inbound = 0  # of them, how many are firm (with firm_only and none, nothing to check)
        self.inbound: dict[SafsReceiver, None] = {}  # transfers with bytes missing, in arrival order

    @classmethod
    def for_host(cls, clock: Clock, line_rate_bps: int, config: SafsConfig) -> ReceiverAdmission | None:
        """A receiving host's admission as ``config`` sets it (None with ``receiver_admission``
        "off"): planning at ``line_rate_bps`` (bit/s) times ``admission_rate_fraction``, only firm
        transfers rejectable under "firm". The simulator's hosts and the Mininet agent both use it."""
        if config.receiver_admission == "off":
            return None
        return cls(clock, int(line_rate_bps * config.admission_rate_fraction), config.receiver_admission == "firm")

    def arrived(self, rx: SafsReceiver) -> None:
        """``rx``'s first DATA arrived: admit it, then reject what is infeasible."""
        self.inbound[rx] = None
        self.firm_inbound += rx.firm
        self._check()

    def left(self, rx: SafsReceiver) -> None:
        """``rx`` is complete (or stopped): the others may fit now (none is taken back)."""
        if self.inbound.pop(rx, False) is None:
            self.firm_inbound -= rx.firm
            self._check()

    def _check(self) -> None:
        if self.firm_only and not self.firm_inbound:
            return
        finish = self.clock.now
        # Ties broken by (flow id, sender): unique per receiving host, and the same in every run.
        longest: list[tuple[int, int, int, SafsReceiver]] = []  # max-heap of (-time, flow id, sender, transfer)
        for due, fid, sender, rx in sorted((rx.no_bubble, rx.flow_id, rx.sender, rx) for rx in self.inbound
                                           if not rx.rejected):
            t = rx.missing_bytes() * 8 * NS_PER_S // self.rate
            finish += t
            if rx.firm or not self.firm_only:  # a soft one takes its time and is not checked
                heappush(longest, (-t, fid, sender, rx))
                if finish > due:
                    neg_t, _, _, out = heappop(longest)
                    finish += neg_t
                    out.reject()

"""DCTCP host transport (Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010; RFC 8257).

Sender: TCP-style window in bytes; slow start and congestion avoidance (RFC 5681); fast
retransmit after 3 duplicate ACKs with NewReno partial-ACK retransmission (RFC 6582, without
window inflation); retransmission timeout from RFC 6298 (SRTT/RTTVAR, RTO = SRTT + 4*RTTVAR,
at least ``min_rto_ns``, doubled per back-off, go-back-N from the first unacked byte). DCTCP
part (paper Section 3.1, RFC 8257 Section 3.3): every data packet is ECN-capable (ECT(0));
the sender keeps alpha <- (1-g)*alpha + g*F once per window of data, F = fraction of
acknowledged bytes whose ACK carried ECE, g = 1/16 (the paper's value); on an ECE it cuts
cwnd <- cwnd*(1 - alpha/2), at most once per window.

Receiver: cumulative ACK for every data packet (no delayed ACKs, so ECE echoes the CE bit of
exactly the packet being acknowledged, which is what the paper's two-state ACK machine
reproduces under delayed ACKs). Out-of-order segments are kept and acknowledged cumulatively.
The ACK echoes the data packet's send time, standing in for the TCP timestamp option
(RFC 7323) for RTT samples (so retransmitted segments give valid samples too).

Marking threshold K: the paper recommends K = 65 packets at 10 Gbit/s (Section 3.4, with
1500-byte packets) and K = 20 at 1 Gbit/s; :func:`dctcp_k_packets` scales K linearly with the
link rate in bytes and converts it to packets of the simulator's MTU (it lives in
:mod:`safs.core.scheduler`, next to the one derivation of the scheduler's settings from a
topology, :func:`safs.core.scheduler.scheduler_config_for`). Persistent flows
(``size_bytes`` None) send forever and never finish.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Literal

from pydantic import Field, model_validator

from safs.core.config import ConfigModel, FieldError
from safs.core.errors import InvalidInput
from safs.core.p4names import ROCE_V2_UDP_PORT
from safs.core.packet import (
    ETH_HEADER_BYTES,
    IPV4_HEADER_BYTES,
    PROTO_TCP,
    PROTO_UDP,
    TCP_ACK,
    TCP_ECE,
    TCP_HEADER_BYTES,
    Packet,
)
from safs.core.protocol import ECN_CE, ECN_ECT0
from safs.core.scheduler import dctcp_k_packets  # noqa: F401  (K for a link: re-exported, it lived here)
from safs.hosts.env import Clock, HostPort
from safs.hosts.stats import TransportStats

TCP_OVERHEAD_BYTES = ETH_HEADER_BYTES + IPV4_HEADER_BYTES + TCP_HEADER_BYTES  # 54
ROCE_QP_MASK = (1 << 24) - 1  # BTH destination QP: 24 bits
ACK_BYTES = 64  # a pure ACK (54 bytes of headers) padded to Ethernet's minimum frame


class DctcpConfig(ConfigModel):
    """DCTCP settings (defaults with sources; :class:`safs.core.config.ConfigModel`).

    Attributes:
        mtu_bytes: largest IP packet, 41..65535; MSS = MTU - 40 (IPv4 + TCP headers, no options).
        initial_cwnd_segments: 10 (RFC 6928), >= 1.
        g: alpha gain 1/16 (DCTCP paper Section 3.1; RFC 8257 Section 4.2), in (0, 1].
        min_rto_ns: 200 µs. Linux's 200 ms floor is three orders of magnitude above fabric RTTs;
            Vasudevan et al., "Safe and Effective Fine-grained TCP Retransmissions for
            Datacenter Communication" (SIGCOMM 2009) show microsecond-scale RTOs avoid incast
            collapse. (The DCTCP paper ran with 10 ms because of its OS timer granularity.)
        initial_rto_ns: RTO before the first RTT sample (1 ms; RFC 6298's 1 s is for the WAN).
        max_rto_ns: cap of the exponential back-off, >= ``min_rto_ns``. All times > 0.
        dupack_threshold: 3 (RFC 5681), >= 1.
        wire: ``"tcp"`` (default) or ``"rocev2"``: the same DCTCP congestion control (a stand-in
            for DCQCN, which also reacts to ECN marks) with a RoCEv2 identity on the wire: UDP to
            port 4791, the flow id's low 24 bits as BTH destination QP, a per-flow UDP source
            port (ECMP entropy); ACKs likewise. Sizes stay TCP's (RoCEv2's headers are 4 bytes
            longer). For traffic classes (``SchedulerConfig.traffic_classes``); simulator only.

    Raises:
        InvalidInput: a field out of range or unknown (the bare field name).
    """

    mtu_bytes: int = Field(9000, ge=IPV4_HEADER_BYTES + TCP_HEADER_BYTES + 1, le=65535)
    initial_cwnd_segments: int = Field(10, ge=1)
    g: float = Field(1.0 / 16.0, gt=0, le=1)
    min_rto_ns: int = Field(200_000, gt=0)
    initial_rto_ns: int = Field(1_000_000, gt=0)
    max_rto_ns: int = Field(200_000_000, gt=0)
    dupack_threshold: int = Field(3, ge=1)
    wire: Literal["tcp", "rocev2"] = "tcp"

    @model_validator(mode="after")
    def _max_rto_covers_min(self) -> DctcpConfig:
        if self.max_rto_ns < self.min_rto_ns:
            raise FieldError("max_rto_ns", f"must be >= min_rto_ns ({self.min_rto_ns}), got {self.max_rto_ns}")
        return self

    @cached_property
    def mss_bytes(self) -> int:
        """Payload bytes of a full segment (computed once)."""
        return self.mtu_bytes - IPV4_HEADER_BYTES - TCP_HEADER_BYTES


class DctcpSender:
    """Sender side of one DCTCP flow.

    Args:
        engine, host: the simulator and the sending host.  dst_ip: receiver address.
        flow_id: unique id (carried in ``Packet.flow_id``, which the sim uses to find endpoints).
        size_bytes: bytes to send, or None for a persistent flow.
        config: :class:`DctcpConfig`.  stats: shared counters.
        on_closed: called with the flow id when every byte is acknowledged.

    State in bytes: ``cwnd``, ``ssthresh``, ``snd_una``, ``snd_nxt``; ``alpha`` in [0, 1].
    """

    __slots__ = ("engine", "nic", "src", "dst", "flow_id", "size", "cfg", "mss", "stats",
                 "on_closed", "cwnd", "ssthresh", "snd_una", "snd_nxt", "high_sent", "dupacks",
                 "in_recovery", "recover", "alpha", "alpha_end", "win_acked", "win_marked",
                 "cwr_end", "srtt", "rttvar", "rto", "rto_deadline", "rto_event_at", "closed",
                 "ecn_cuts")

    def __init__(self, engine: Clock, host: HostPort, dst_ip: int, flow_id: int, size_bytes: int | None,
                 config: DctcpConfig, stats: TransportStats, on_closed: Callable[[int], None]) -> None:
        if size_bytes is not None and (type(size_bytes) is not int or size_bytes <= 0):
            raise InvalidInput("size_bytes", f"must be an integer > 0 or None, got {size_bytes!r}")
        self.engine = engine
        self.nic = host.nic
        self.src = host.ip
        self.dst = dst_ip
        self.flow_id = flow_id
        self.size = size_bytes if size_bytes is not None else (1 << 62)
        self.cfg = config
        self.mss = config.mss_bytes
        self.stats = stats
        self.on_closed = on_closed
        self.cwnd = float(config.initial_cwnd_segments * self.mss)
        self.ssthresh = float(1 << 62)
        self.snd_una = 0
        self.snd_nxt = 0
        self.high_sent = 0  # highest byte ever sent (for counting retransmissions)
        self.dupacks = 0
        self.in_recovery = False
        self.recover = 0
        self.alpha = 1.0  # RFC 8257 Section 4.2: initialise alpha to 1 (conservative)
        self.alpha_end = 0
        self.win_acked = 0
        self.win_marked = 0
        self.cwr_end = 0
        self.srtt = 0
        self.rttvar = 0
        self.rto = config.initial_rto_ns
        self.rto_deadline = 0  # 0 = timer off
        self.rto_event_at = -1  # time of the queued timer event, -1 = none
        self.closed = False
        self.ecn_cuts = 0

    def start(self) -> None:
        """Send the initial window."""
        self.alpha_end = 0
        self._try_send()

    def _send_segment(self, seq: int) -> int:
        payload = min(self.mss, self.size - seq)
        if self.cfg.wire == "rocev2":
            pkt = Packet(self.src, self.dst, PROTO_UDP, 1024 + self.flow_id % 64000, ROCE_V2_UDP_PORT,
                         payload + TCP_OVERHEAD_BYTES, payload, ECN_ECT0)
            pkt.roce_qp = self.flow_id & ROCE_QP_MASK
        else:
            pkt = Packet(self.src, self.dst, PROTO_TCP, 1024 + self.flow_id % 64000, 5001,
                         payload + TCP_OVERHEAD_BYTES, payload, ECN_ECT0)
        pkt.flow_id = self.flow_id
        pkt.seq = seq
        pkt.sent_ns = self.engine.now
        size = pkt.size
        self.stats.data_bytes += size
        if seq < self.high_sent:
            self.stats.retransmitted_bytes += size
        end = seq + payload
        if end > self.high_sent:
            self.high_sent = end
        self.nic.send(pkt)  # type: ignore[union-attr]
        return payload

    def _try_send(self) -> None:
        limit = self.snd_una + max(int(self.cwnd), self.mss)
        size = self.size
        sent = False
        while self.snd_nxt < size and self.snd_nxt < limit:
            self.snd_nxt += self._send_segment(self.snd_nxt)
            sent = True
        if sent and self.rto_deadline == 0:
            self._arm_rto()

    def _arm_rto(self) -> None:
        deadline = self.engine.now + self.rto
        self.rto_deadline = deadline
        if self.rto_event_at < 0 or self.rto_event_at > deadline:
            self.rto_event_at = deadline
            self.engine.at(deadline, self._on_timer, deadline)

    def _on_timer(self, at: int) -> None:
        if at != self.rto_event_at:
            return  # superseded by an earlier timer event
        self.rto_event_at = -1
        if self.closed or self.rto_deadline == 0:
            return
        now = self.engine.now
        if now < self.rto_deadline:  # the deadline moved on; sleep until it
            self.rto_event_at = self.rto_deadline
            self.engine.at(self.rto_deadline, self._on_timer, self.rto_deadline)
            return
        # Retransmission timeout (RFC 6298 5.4-5.7; RFC 5681 eq. 4 for ssthresh).
        self.stats.timeouts += 1
        flight = self.snd_nxt - self.snd_una
        self.ssthresh = float(max(flight // 2, 2 * self.mss))
        self.cwnd = float(self.mss)
        self.snd_nxt = self.snd_una
        self.in_recovery = False
        self.dupacks = 0
        self.rto = min(self.rto * 2, self.cfg.max_rto_ns)
        self.rto_deadline = 0
        self._try_send()

    def receive(self, pkt: Packet) -> None:
        """Handle an ACK (``pkt.ack`` cumulative, ``TCP_ECE`` flag, echoed ``sent_ns``)."""
        if self.closed:
            return
        now = self.engine.now
        ack = pkt.ack
        ece = pkt.tcp_flags & TCP_ECE
        if ack > self.snd_una:
            self._rtt_sample(now - pkt.sent_ns)
            acked = ack - self.snd_una
            self.snd_una = ack
            if self.snd_nxt < ack:  # after a go-back-N restart the receiver may be ahead
                self.snd_nxt = ack
            self.dupacks = 0
            # DCTCP alpha, once per window of data (RFC 8257 Section 3.3 steps 3-9).
            self.win_acked += acked
            if ece:
                self.win_marked += acked
            if ack >= self.alpha_end:
                g = self.cfg.g
                frac = self.win_marked / self.win_acked if self.win_acked else 0.0
                self.alpha = (1.0 - g) * self.alpha + g * frac
                self.win_acked = self.win_marked = 0
                self.alpha_end = self.snd_nxt
            if self.in_recovery:
                if ack >= self.recover:
                    self.in_recovery = False
                    self.cwnd = self.ssthresh
                else:  # NewReno partial ACK: the next hole is lost too
                    self._send_segment(ack)
            elif ece and ack > self.cwr_end:
                # At most one reduction per window (RFC 8257 Section 3.3 step 10).
                self.cwnd = max(self.cwnd * (1.0 - self._ecn_penalty() / 2.0), float(self.mss))
                self.ssthresh = self.cwnd
                self.cwr_end = self.snd_nxt
                self.ecn_cuts += 1
            elif self.cwnd < self.ssthresh:
                self.cwnd += acked  # slow start
            else:
                self.cwnd += self.mss * acked / self.cwnd  # congestion avoidance
            if self.snd_una >= self.size:
                self.closed = True
                self.rto_deadline = 0
                self.on_closed(self.flow_id)
                return
            self.rto_deadline = 0
            if self.snd_nxt > self.snd_una:
                self._arm_rto()
        elif ack == self.snd_una and self.snd_nxt > self.snd_una:
            self.dupacks += 1
            if self.dupacks == self.cfg.dupack_threshold and not self.in_recovery:
                self.stats.fast_retransmits += 1
                flight = self.snd_nxt - self.snd_una
                self.ssthresh = float(max(flight // 2, 2 * self.mss))
                self.cwnd = self.ssthresh
                self.in_recovery = True
                self.recover = self.snd_nxt
                self.cwr_end = self.snd_nxt
                self._send_segment(self.snd_una)
        self._try_send()

    def _ecn_penalty(self) -> float:
        """Penalty p of the ECN window cut cwnd <- cwnd * (1 - p/2); DCTCP's p is alpha.

        A hook for DCTCP variants (D2TCP's p = alpha^d); called once per cut, on ECE.
        """
        return self.alpha

    def _rtt_sample(self, r: int) -> None:
        """RFC 6298 Section 2 estimator (integer ns)."""
        if r <= 0:
            return
        if self.srtt == 0:
            self.srtt = r
            self.rttvar = r // 2
        else:
            self.rttvar = (3 * self.rttvar + abs(self.srtt - r)) // 4
            self.srtt = (7 * self.srtt + r) // 8
        self.rto = min(max(self.cfg.min_rto_ns, self.srtt + 4 * self.rttvar), self.cfg.max_rto_ns)


class DctcpReceiver:
    """Receiver side of one DCTCP flow: cumulative ACK per data packet, ECE = CE of that packet.

    Args:
        engine, host: the simulator and the receiving host.  src_ip: the sender's address.
        flow_id, size_bytes: the flow (None: persistent, never finishes).
        stats: shared counters.  on_finish: ``on_finish(flow_id, finish_ns)`` once.
    """

    __slots__ = ("engine", "nic", "src", "sender", "flow_id", "size", "rcv_nxt", "ooo", "stats",
                 "on_finish", "finished", "ce_seen")

    def __init__(self, engine: Clock, host: HostPort, src_ip: int, flow_id: int, size_bytes: int | None,
                 stats: TransportStats, on_finish: Callable[[int, int], None]) -> None:
        self.engine = engine
        self.nic = host.nic
        self.src = host.ip
        self.sender = src_ip
        self.flow_id = flow_id
        self.size = size_bytes
        self.rcv_nxt = 0
        self.ooo: dict[int, int] = {}  # seq -> end of segments above rcv_nxt
        self.stats = stats
        self.on_finish = on_finish
        self.finished = False
        self.ce_seen = 0

    def receive(self, pkt: Packet) -> None:
        self._take(pkt.seq, pkt.seq + pkt.payload)
        ce = pkt.ecn == ECN_CE
        if ce:
            self.ce_seen += 1
        self._ack(pkt, TCP_ACK | TCP_ECE if ce else TCP_ACK)

    def _take(self, seq: int, end: int) -> None:
        """Reassemble: bytes [seq, end) arrived (cumulative ``rcv_nxt``, out-of-order map)."""
        if seq == self.rcv_nxt:
            ooo = self.ooo
            while end in ooo:
                end = ooo.pop(end)
            self.rcv_nxt = end
        elif seq > self.rcv_nxt:
            self.ooo[seq] = end

    def _ack(self, pkt: Packet, flags: int, seq: int = 0) -> None:
        """ACK ``pkt`` (cumulative ``rcv_nxt``; ``seq`` names the segment, 0 for none) and
        report the flow finished once every byte arrived."""
        if pkt.proto == PROTO_UDP:  # RoCEv2 identity: the ACK goes to 4791 too, to the sender's QP
            ack = Packet(self.src, self.sender, PROTO_UDP, pkt.sport, ROCE_V2_UDP_PORT, ACK_BYTES, 0)
            ack.roce_qp = pkt.roce_qp
        else:
            ack = Packet(self.src, self.sender, PROTO_TCP, pkt.dport, pkt.sport, ACK_BYTES, 0)
        ack.flow_id = self.flow_id
        ack.ack = self.rcv_nxt
        ack.seq = seq
        ack.tcp_flags = flags
        ack.sent_ns = pkt.sent_ns
        self.stats.ack_bytes += ACK_BYTES
        self.nic.send(ack)  # type: ignore[union-attr]
        if not self.finished and self.size is not None and self.rcv_nxt >= self.size:
            self.finished = True
            self.on_finish(self.flow_id, self.engine.now)

"""pFabric: the switch queue discipline and the host transport (Alizadeh, Yang, Sharif, Katti,
McKeown, Prabhakar, Shenker, "pFabric: Minimal Near-Optimal Datacenter Transport", SIGCOMM 2013).

pFabric decouples flow scheduling from rate control (paper Section 3):

- Priority: every data packet carries its flow's **remaining size** (bytes not yet
  acknowledged, selectively or cumulatively); smaller is more urgent (Section 4.1, the
  SRPT approximation). ACKs carry priority 0, the highest (as the YAPS pFabric model,
  NetSys/simulator coresim/packet.cpp, does; the paper only prioritises data).
- Switch port (:class:`safs.experiments.sim.pfabric_port.PfabricPort`, Section 4.1): a small buffer (about 2 x BDP;
the paper's
  evaluation uses 36 KB per 10 Gbit/s port, Section 5) in arrival order.
  *Priority scheduling with starvation prevention*: when the port is free it sends the
  **earliest** buffered packet of the flow that holds the highest-priority buffered packet
  (so a flow's packets never reorder). *Priority dropping*: a packet arriving to a full
  buffer is dropped if its priority is lower than or equal to that of every buffered packet
  (ties drop the arrival); otherwise the lowest-priority buffered packets (the latest-arrived
  among equals) are dropped to make room.
- Rate control (:class:`PfabricSender`, Section 4.2): flows start at line rate with a window
  of one BDP; SACK-style selective acknowledgements (every data packet is acknowledged and the
  ACK names it, besides the cumulative ACK); additive increase per acknowledged packet as in
  TCP (slow start below ssthresh, congestion avoidance above); no fast retransmit: losses are
  found only by a fixed retransmission timeout of about 3 RTTs (45 us at 14.6 us RTT,
  Section 5); on a timeout ssthresh = window / 2, window = one packet, and every un-SACKed
  byte from the first unacknowledged one is sent again; after ``probe_after_timeouts``
  consecutive timeouts (5 in the paper's implementation, Section 4.2) the flow enters
  *probe mode*: each timeout it sends only a minimum-size probe (one byte of payload) and it
  leaves probe mode (slow start from one packet) on the first ACK.

Simplifications, each a documented choice: the window cap ``max_window_bytes`` (default 2 x
BDP: the pipe plus one port buffer) is ours, the paper does not state one (YAPS caps at 1.25
BDP); hosts serve their NIC queue with the same priority discipline, without a byte limit
(host memory); packets are IPv4/TCP-framed (54 bytes of headers), never ECN-capable. A
priority-dropped packet has already passed the pipeline's egress hook (counted in
``port_tx_bytes``), as a packet admitted and later evicted would be on hardware.

Under the simulator's ``"pfabric"`` policy every switch port is a
:class:`safs.experiments.sim.pfabric_port.PfabricPort` and
every flow (pipeline and background) uses this transport: pFabric needs the whole fabric.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any, ClassVar

from pydantic import Field, model_validator

from safs.core.config import ConfigModel, FieldError
from safs.core.errors import InvalidInput
from safs.core.packet import ETH_HEADER_BYTES, IPV4_HEADER_BYTES, PROTO_TCP, TCP_ACK, TCP_HEADER_BYTES, Packet
from safs.hosts.dctcp import ACK_BYTES, DctcpReceiver
from safs.hosts.env import Clock, HostPort
from safs.hosts.stats import TransportStats

PFABRIC_OVERHEAD_BYTES = ETH_HEADER_BYTES + IPV4_HEADER_BYTES + TCP_HEADER_BYTES  # 54 per packet
PROBE_BYTES = 64  # a probe: headers plus one payload byte, padded to the minimum frame
TCP_PROBE = 0x08  # flag bit (TCP PSH) marking a probe and the ACK that answers it
PFABRIC_PORT = 5002

RTO_RTTS = 3  # paper Section 5: retransmission timeout 45 us, about 3 x the 14.6 us fabric RTT
BUFFER_BDPS = 2  # paper Sections 4.1 and 5: 36 KB per port, about 2 x the 18 KB BDP
MAX_WINDOW_BDPS = 2  # ours (see module docstring)
PROBE_AFTER_TIMEOUTS = 5  # paper Section 4.2: probe mode after 5 consecutive timeouts
_NO_SEGMENT = -1  # ACK.seq of an ACK that names no segment (answer to a probe)


class PfabricConfig(ConfigModel):
    """pFabric settings (bytes, ns); :func:`pfabric_config` derives them from a topology
    (:class:`safs.core.config.ConfigModel`; every field is required).

    Attributes:
        mtu_bytes: largest IP packet, 41..65535; payload per packet (MSS) = MTU - 40.
        init_window_bytes: initial window, one BDP (paper Section 4.2), >= one MSS.
        max_window_bytes: window cap, >= ``init_window_bytes``.
        rto_ns: fixed retransmission timeout, about 3 RTTs (paper Section 5), >= 1.
        probe_after_timeouts: consecutive timeouts before probe mode (paper: 5), >= 1.
        buffer_bytes: switch port buffer, about 2 x BDP (paper Sections 4.1, 5); at least
            one full frame (MTU + 14).

    Raises:
        InvalidInput: a field out of range, missing or unknown, named ``pfabric.<field>``.
    """

    FIELD_PREFIX: ClassVar[str] = "pfabric."

    mtu_bytes: int = Field(ge=IPV4_HEADER_BYTES + TCP_HEADER_BYTES + 1, le=65535)
    init_window_bytes: int = Field(ge=1)
    max_window_bytes: int = Field(ge=1)
    rto_ns: int = Field(ge=1)
    probe_after_timeouts: int = Field(ge=1)
    buffer_bytes: int = Field(ge=1)

    @model_validator(mode="after")
    def _windows_and_buffer(self) -> PfabricConfig:
        if self.init_window_bytes < self.mss_bytes:
            raise FieldError(
                "init_window_bytes", f"must be >= one MSS ({self.mss_bytes} bytes), got {self.init_window_bytes}"
            )
        if self.max_window_bytes < self.init_window_bytes:
            raise FieldError(
                "max_window_bytes",
                f"must be >= init_window_bytes ({self.init_window_bytes}), got {self.max_window_bytes}",
            )
        frame = self.mtu_bytes + ETH_HEADER_BYTES
        if self.buffer_bytes < frame:
            raise FieldError("buffer_bytes", f"must hold one full frame (>= {frame} bytes), got {self.buffer_bytes}")
        return self

    @cached_property
    def mss_bytes(self) -> int:
        """Payload bytes of a full packet (computed once)."""
        return self.mtu_bytes - IPV4_HEADER_BYTES - TCP_HEADER_BYTES


PFABRIC_FIELDS = tuple(name for name in PfabricConfig.model_fields if name != "mtu_bytes")


def base_rtt_ns(topology: Any, mtu_bytes: int) -> int:
    """Fabric round-trip time without queueing, ns: from the first host (by name) to the farthest
    host, per link a full frame one way, an ACK back and the propagation delay both ways.

    Raises:
        InvalidInput: fewer than two hosts.
    """
    hosts = sorted(topology.hosts())
    if len(hosts) < 2:
        raise InvalidInput("topology.hosts", "pFabric needs at least two hosts")
    frame = mtu_bytes + ETH_HEADER_BYTES
    worst = 0
    for h in hosts[1:]:
        path = topology.path(hosts[0], h)
        rtt = 0
        for a, b in zip(path, path[1:]):
            link = topology.link(a, b)
            rate = link["rate_bps"]
            rtt += 2 * link["delay_ns"] + -(-frame * 8 * 10**9 // rate) + -(-ACK_BYTES * 8 * 10**9 // rate)
        worst = max(worst, rtt)
    return worst


def pfabric_config(
    topology: Any, mtu_bytes: int, overrides: Mapping[str, Any] | None = None, *, prefix: str = "pfabric."
) -> PfabricConfig:
    """The paper's settings for ``topology`` (Sections 4 and 5), with ``overrides`` applied.

    BDP = fastest host link rate x :func:`base_rtt_ns`, rounded up to whole frames (at least one).
    Defaults: ``init_window_bytes`` = BDP in MSS-sized packets, ``max_window_bytes`` = 2 x that,
    ``rto_ns`` = 3 x RTT, ``probe_after_timeouts`` = 5, ``buffer_bytes`` = 2 x BDP in frames.
    Example: 10 Gbit/s links with 3 us delay, 1500-byte MTU: RTT 14.6 us, BDP 12 packets,
    buffer 36 336 bytes, RTO 43.8 us (the paper's 18 KB, 36 KB and 45 us).

    Raises:
        InvalidInput: unknown override key (lists the valid ones) or a value out of range;
            the field is ``prefix + key`` (``"sim.pfabric."`` from a scenario).
    """
    check_pfabric_overrides(overrides or {}, prefix=prefix)
    raw = dict(overrides or {})
    rtt = base_rtt_ns(topology, mtu_bytes)
    rate = max(topology.host_link_bps(h) for h in topology.hosts())
    frame = mtu_bytes + ETH_HEADER_BYTES
    bdp_pkts = max(1, -(-rate * rtt // (8 * 10**9 * frame)))
    mss = mtu_bytes - IPV4_HEADER_BYTES - TCP_HEADER_BYTES
    init = raw.get("init_window_bytes", bdp_pkts * mss)
    values = {
        "init_window_bytes": init,
        "max_window_bytes": MAX_WINDOW_BDPS * bdp_pkts * mss,
        "rto_ns": RTO_RTTS * rtt,
        "probe_after_timeouts": PROBE_AFTER_TIMEOUTS,
        "buffer_bytes": BUFFER_BDPS * bdp_pkts * frame,
    }
    values["max_window_bytes"] = max(values["max_window_bytes"], init)  # init checked an integer above
    values.update(raw)
    return PfabricConfig.from_mapping(values, prefix=prefix, fixed={"mtu_bytes": mtu_bytes})


def check_pfabric_overrides(overrides: Any, *, prefix: str = "pfabric.") -> None:
    """Refuse unknown keys and out-of-range values of a ``pfabric:`` mapping without a topology
    (the checks across fields need the derived values: :func:`pfabric_config`).

    Raises:
        InvalidInput: ``<prefix><key>`` unknown (lists the valid ones) or out of range, or the
            overrides not a mapping (field ``<prefix>`` without the dot).
    """
    PfabricConfig.check_overrides(overrides, prefix=prefix, fixed=("mtu_bytes",))


def idle_fct_ns(topology: Any, src: str, dst: str, size_bytes: int, mtu_bytes: int) -> int:
    """FCT of a ``size_bytes`` pFabric flow alone in the fabric, ns (pFabric's normaliser,
    Section 5: the best possible FCT): its frames back to back on the sender's link, then
    store-and-forward at each switch, plus every link's propagation delay. Assumes fabric links
    at least as fast as the sender's (full frames never queue behind each other); the last,
    shorter frame may wait behind the last full one.

    Raises:
        InvalidInput: ``size_bytes`` < 1.
    """
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 1:
        raise InvalidInput("size_bytes", f"must be an integer >= 1, got {size_bytes!r}")
    mss = mtu_bytes - IPV4_HEADER_BYTES - TCP_HEADER_BYTES
    path = topology.path(src, dst)
    links = [topology.link(a, b) for a, b in zip(path, path[1:])]
    full, rest = divmod(size_bytes, mss)
    last = (rest or mss) + PFABRIC_OVERHEAD_BYTES  # the last frame
    n_full = full if rest else full - 1  # full frames before it
    big = mss + PFABRIC_OVERHEAD_BYTES

    def ser(nbytes: int, rate: int) -> int:
        return -(-nbytes * 8 * 10**9 // rate)

    rate0 = links[0]["rate_bps"]
    t_full = n_full * ser(big, rate0)  # the last full frame leaves the sender (0: none)
    t_last = t_full + ser(last, rate0)
    for prev, link in zip(links, links[1:]):
        d, r = prev["delay_ns"], link["rate_bps"]
        t_full = t_full + d + ser(big, r) if n_full else 0
        t_last = max(t_last + d, t_full) + ser(last, r)
    return t_last + links[-1]["delay_ns"]


class PfabricSender:
    """Sender side of one pFabric flow (rate control of paper Section 4.2, see module docstring).

    Args:
        engine, host: the simulator and the sending host.  dst_ip: receiver address.
        flow_id: unique id.  size_bytes: bytes to send (>= 1), or None for a persistent flow.
        config: :class:`PfabricConfig`.  stats: shared counters.
        on_closed: called with the flow id when every byte is acknowledged.

    State (bytes): ``cwnd``, ``ssthresh``, ``snd_una`` (cumulatively acknowledged),
    ``sacked`` (starts of selectively acknowledged packets above ``snd_una``), ``snd_nxt``;
    ``timeouts_in_row``, ``probing``.

    Raises:
        InvalidInput: ``size_bytes`` not an integer >= 1 or None.
    """

    __slots__ = (
        "engine",
        "nic",
        "src",
        "dst",
        "flow_id",
        "size",
        "mss",
        "cfg",
        "stats",
        "on_closed",
        "sport",
        "cwnd",
        "ssthresh",
        "snd_una",
        "snd_nxt",
        "high_sent",
        "sacked",
        "sacked_bytes",
        "rto_deadline",
        "rto_event_at",
        "timeouts_in_row",
        "probing",
        "probes",
        "closed",
    )

    def __init__(
        self,
        engine: Clock,
        host: HostPort,
        dst_ip: int,
        flow_id: int,
        size_bytes: int | None,
        config: PfabricConfig,
        stats: TransportStats,
        on_closed: Callable[[int], None],
    ) -> None:
        if size_bytes is not None and (
            isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 1
        ):
            raise InvalidInput("size_bytes", f"must be an integer >= 1 or None, got {size_bytes!r}")
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
        self.sport = 1024 + flow_id % 64000
        self.cwnd = float(config.init_window_bytes)
        self.ssthresh = float(1 << 62)
        self.snd_una = 0
        self.snd_nxt = 0
        self.high_sent = 0
        self.sacked: set[int] = set()
        self.sacked_bytes = 0
        self.rto_deadline = 0  # 0 = timer off
        self.rto_event_at = -1
        self.timeouts_in_row = 0
        self.probing = False
        self.probes = 0
        self.closed = False

    def start(self) -> None:
        """Send the initial window (one BDP: line rate)."""
        self._try_send()

    def remaining(self) -> int:
        """The priority carried by data packets: bytes not yet acknowledged."""
        return self.size - self.snd_una - self.sacked_bytes

    def _send_segment(self, seq: int) -> int:
        payload = min(self.mss, self.size - seq)
        pkt = Packet(self.src, self.dst, PROTO_TCP, self.sport, PFABRIC_PORT, payload + PFABRIC_OVERHEAD_BYTES, payload)
        pkt.flow_id = self.flow_id
        pkt.seq = seq
        pkt.sent_ns = self.engine.now
        pkt.remaining = self.size - self.snd_una - self.sacked_bytes
        stats = self.stats
        stats.data_bytes += pkt.size
        if seq < self.high_sent:
            stats.retransmitted_bytes += pkt.size
        else:
            self.high_sent = seq + payload
        self.nic.send(pkt)  # type: ignore[union-attr]
        return payload

    def _try_send(self) -> None:
        if self.probing:
            return
        size, mss, sacked = self.size, self.mss, self.sacked
        limit = self.snd_una + int(self.cwnd) + self.sacked_bytes
        seq = self.snd_nxt
        sent = False
        while seq < size and seq < limit:
            if sacked and seq in sacked:
                seq += mss
                continue
            seq += self._send_segment(seq)
            sent = True
        self.snd_nxt = seq
        if sent and self.rto_deadline == 0:
            self._arm(self.engine.now + self.cfg.rto_ns)

    def _arm(self, deadline: int) -> None:
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
        if now < self.rto_deadline:  # progress moved the deadline on; sleep until it
            self.rto_event_at = self.rto_deadline
            self.engine.at(self.rto_deadline, self._on_timer, self.rto_deadline)
            return
        self.stats.timeouts += 1
        self.timeouts_in_row += 1
        self.ssthresh = max(self.cwnd / 2.0, 2.0 * self.mss)
        self.cwnd = float(self.mss)
        self.snd_nxt = self.snd_una
        self.rto_deadline = 0
        if self.timeouts_in_row >= self.cfg.probe_after_timeouts:
            self.probing = True
            self._send_probe()
            self._arm(now + self.cfg.rto_ns)
        else:
            self._try_send()

    def _send_probe(self) -> None:
        pkt = Packet(self.src, self.dst, PROTO_TCP, self.sport, PFABRIC_PORT, PROBE_BYTES, 1)
        pkt.flow_id = self.flow_id
        pkt.seq = self.snd_una
        pkt.tcp_flags = TCP_PROBE
        pkt.sent_ns = self.engine.now
        pkt.remaining = self.size - self.snd_una - self.sacked_bytes
        self.probes += 1
        self.stats.data_bytes += PROBE_BYTES
        self.nic.send(pkt)  # type: ignore[union-attr]

    def receive(self, pkt: Packet) -> None:
        """Handle an ACK: ``pkt.ack`` cumulative, ``pkt.seq`` the packet it acknowledges."""
        if self.closed:
            return
        ack = pkt.ack
        progress = 0
        if ack > self.snd_una:
            progress = ack - self.snd_una
            self.snd_una = ack
            sacked = self.sacked
            if sacked:
                below = [s for s in sacked if s < ack]
                for s in below:
                    sacked.discard(s)
                    self.sacked_bytes -= min(self.mss, self.size - s)
                progress -= sum(min(self.mss, self.size - s) for s in below)
        seg = pkt.seq
        if seg >= self.snd_una and seg not in self.sacked:
            n = min(self.mss, self.size - seg)
            self.sacked.add(seg)
            self.sacked_bytes += n
            progress += n
        if self.snd_una >= self.size:
            self.closed = True
            self.rto_deadline = 0
            self.on_closed(self.flow_id)
            return
        now = self.engine.now
        if self.probing:  # any ACK ends probe mode: slow start from one packet
            self.probing = False
            self.timeouts_in_row = 0
            self.cwnd = float(self.mss)
            self.snd_nxt = self.snd_una
            self.rto_deadline = 0
        elif progress > 0:
            self.timeouts_in_row = 0
            if self.cwnd < self.ssthresh:
                self.cwnd += self.mss  # slow start: one packet per acknowledged packet
            else:
                self.cwnd += self.mss * self.mss / self.cwnd  # additive increase
            if self.cwnd > self.cfg.max_window_bytes:
                self.cwnd = float(self.cfg.max_window_bytes)
            self.rto_deadline = now + self.cfg.rto_ns
            if self.rto_event_at < 0:
                self._arm(self.rto_deadline)
        if self.snd_nxt < self.snd_una:
            self.snd_nxt = self.snd_una
        self._try_send()


class PfabricReceiver(DctcpReceiver):
    """Receiver side of one pFabric flow: one ACK per data packet (cumulative ACK plus the
    packet's own sequence number, i.e. a one-block SACK), priority 0 (highest). Reassembly,
    ACK and finish are DCTCP's receiver's; no ECN.

    Args:
        engine, host: the simulator and the receiving host.  src_ip: the sender's address.
        flow_id, size_bytes: the flow (None: persistent, never finishes).
        stats: shared counters.  on_finish: ``on_finish(flow_id, finish_ns)`` once, when the
            last byte has arrived.
    """

    __slots__ = ()

    def receive(self, pkt: Packet) -> None:
        probe = pkt.tcp_flags & TCP_PROBE
        if probe:
            self._ack(pkt, TCP_ACK | probe, _NO_SEGMENT)
        else:
            self._take(pkt.seq, pkt.seq + pkt.payload)
            self._ack(pkt, TCP_ACK, pkt.seq)

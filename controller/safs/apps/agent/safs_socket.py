"""SAFS over real UDP sockets: the grant-paced sender and the reassembling receiver of a host.

The behaviour is the simulator's (:mod:`safs.hosts.safs`, whose module docstring is
the specification): REQUEST at flow start, the first ``unscheduled_bytes`` at line rate, then
DATA paced at the held grant (default rate, epoch 0, until a GRANT arrives); a GRANT with a
newer epoch replaces the grant, the same epoch renews the lease, an older one is ignored, epoch
0 always applies (docs/protocol.md, "Grants", rule 2: the switch has no grant for the flow any
more); a REQUEST at ``renew_fraction`` of the lease renews it; an expired lease falls
back to the default rate and epoch 0; while holding epoch 0 or a grant too slow for in-band
pushes (``SLOW_GAP_POLLS``) the sender re-sends a REQUEST every ``grant_poll_ns``; every DATA
carries remaining bytes, latest start and its epoch, so the receiver's ToR pushes newer grants
in-band. Loss recovery: DONE when complete, RACK-style NACKs after ``reorder_window_ns``, a
probe of the last segment after ``rto_ns`` (doubling to ``rto_max_ns``).

What differs from the simulator is time: timers run on ``time.monotonic_ns`` in a
:class:`safs.apps.agent.loop.Loop` that wakes with ~50 µs precision, so pacing is a token bucket
holding at most ``burst_bytes`` (default half of ``unscheduled_bytes``, at least two full
packets) of credit: the average
rate holds when a wake-up is late (a busy machine deschedules the agent for milliseconds), and
a catch-up burst stays within the switch meter's burst, which is at least ``unscheduled_bytes``
(``SchedulerConfig.meter_for``), so it stays green. Emulated RTTs through BMv2 are about a millisecond, not microseconds,
so the time constants are scaled (:func:`emu_config`). Wire encoding uses
:func:`safs.core.protocol.pack_header_into` / :func:`safs.core.protocol.unpack_header` (struct; scapy is
far too slow for a data path).
"""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass
from typing import Callable

from safs.control.controller import fabric_clock
from safs.apps.agent.loop import Loop, Timer
from safs.core.protocol import (
    EPOCH_NONE,
    FLAG_BACKGROUND,
    HEADER_LEN,
    SAFS_UDP_PORT,
    WIRE_OVERHEAD_BYTES,
    MsgType,
    epoch_newer,
    latest_start_ns,
    malformed_reason,
    pack_header_into,
    unpack_header,
)
from safs.hosts.safs import NACK_ENTRY_BYTES, NO_DEADLINE_NS, SLOW_GAP_POLLS, SafsConfig
from safs.core.timebase import wrap

NS_PER_S = 1_000_000_000
MAX_PACKETS_PER_WAKE = 64  # one flow never holds the loop longer than this many sends
RECV_BATCH = 256  # datagrams read per readable event
SOCKET_BUFFER_BYTES = 4 << 20
SO_NO_CHECK = 11  # Linux <asm-generic/socket.h>: send UDP over IPv4 with checksum 0 (not in Python's socket)
_DATA, _REQUEST, _GRANT, _DONE = (int(t) for t in (MsgType.DATA, MsgType.REQUEST, MsgType.GRANT, MsgType.DONE))


GRANT_POLL_NS = 2_000_000  # emulated-fabric defaults (emu_config); a scenario's sim values override
REORDER_WINDOW_NS = 5_000_000
RTO_NS = 20_000_000


def emu_config(default_rate_bps: int, mtu_bytes: int = 1500, unscheduled_bytes: int = 32_768,
               grant_poll_ns: int = GRANT_POLL_NS, reorder_window_ns: int = REORDER_WINDOW_NS,
               rto_ns: int = RTO_NS) -> SafsConfig:
    """The simulator's :class:`SafsConfig` with time constants scaled to an emulated fabric.

    Mininet links with BMv2 switches have RTTs of about 1 ms (software switches, tens of Mbit/s)
    instead of the simulator's ~10 µs, and the agent's timers are good to ~50 µs, so the
    defaults are ``grant_poll_ns`` 2 ms (simulator 10 µs), ``reorder_window_ns`` 5 ms
    (200 µs), ``rto_ns`` 20 ms (500 µs); ``rto_max_ns`` 500 ms. The Mininet target passes the
    scenario's ``sim.safs_grant_poll_ns``, ``safs_reorder_window_ns`` and ``safs_rto_ns``, so
    both targets run the same timers. ``renew_fraction`` (3/4), ``reorder_segments`` (3),
    ``nack_max_segments`` (128) are the simulator's.

    Raises:
        InvalidInput: a value out of :class:`SafsConfig`'s ranges (named).
    """
    return SafsConfig(mtu_bytes=mtu_bytes, default_rate_bps=default_rate_bps, grant_poll_ns=grant_poll_ns,
                      reorder_window_ns=reorder_window_ns, rto_ns=rto_ns,
                      rto_max_ns=max(500_000_000, rto_ns), unscheduled_bytes=unscheduled_bytes)


@dataclass
class SafsStats:
    """Counters of one host's SAFS endpoint (bytes are wire bytes: payload + 78 header bytes).

    Attributes:
        requests_sent, grants_received, grants_stale (older epoch, ignored), dones_sent,
        nacks_sent (DONE with remaining > 0), dones_received.
        data_packets_sent, data_bytes_sent (retransmissions included), retransmitted_bytes,
        probes (timeouts that re-sent the last segment), lease_fallbacks.
        data_packets_received, duplicate_packets, unknown_flow_packets (DATA for a flow not
        expected (yet); kept and replayed when the expect arrives), malformed_packets.
        send_blocked: sends refused by the socket (buffer full); retried later.
        send_errors: sends that failed otherwise (no route...); counted as lost.
    """

    requests_sent: int = 0
    grants_received: int = 0
    grants_stale: int = 0
    dones_sent: int = 0
    nacks_sent: int = 0
    dones_received: int = 0
    data_packets_sent: int = 0
    data_bytes_sent: int = 0
    retransmitted_bytes: int = 0
    probes: int = 0
    lease_fallbacks: int = 0
    data_packets_received: int = 0
    duplicate_packets: int = 0
    unknown_flow_packets: int = 0
    malformed_packets: int = 0
    send_blocked: int = 0
    send_errors: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters by name."""
        return asdict(self)


class SafsEndpoint:
    """The host's one SAFS socket (UDP ``ip:23285``) with its senders and receivers.

    Args:
        loop: the agent's event loop.  ip: the host's address (dotted quad).
        config: transport settings (:func:`emu_config`).  line_rate_bps: the host link's rate
            (bit/s, > 0): pace of unscheduled bytes and the divisor of the latest start time.
        on_sender_done: ``f(flow_id, info)`` when a sender got its final DONE; ``info`` holds
            ``finish_ns`` (fabric), ``bytes`` and the flow's counters.
        on_receiver_done: ``f(flow_id, finish_ns, size_bytes)`` when the last byte arrived
            (``finish_ns`` fabric time).
        port: UDP port (default and on the wire: 23285; another only for tests).
        burst_bytes: token-bucket depth of each sender, wire bytes (None: half of
            ``config.unscheduled_bytes``; never below two full packets).
        on_sender_sent: ``f(flow_id)`` once per flow, when a sender has sent its last new
            byte, or earlier: when the new bytes it still has take at most
            :attr:`complete_lead_ns` at its rate. The agent completes the flow at the hint API
            then: the grant is not needed for bytes already on the wire, and the next flow's
            grant is installed while they drain (the simulator completes a flow
            ``hint_latency_ns`` after its last byte arrived, about the same moment). The lead
            makes up for the hint call's own latency (the agent sets it from the Complete calls
            it timed); bytes sent after the Complete keep the held grant until its lease ends.

    Raises:
        OSError: the socket cannot be bound.
    """

    def __init__(self, loop: Loop, ip: str, config: SafsConfig, line_rate_bps: int,
                 on_sender_done: Callable[[int, dict], None],
                 on_receiver_done: Callable[[int, int, int], None], port: int = SAFS_UDP_PORT,
                 burst_bytes: int | None = None, on_sender_sent: Callable[[int], None] | None = None) -> None:
        self.loop = loop
        self.burst_bytes = config.unscheduled_bytes // 2 if burst_bytes is None else burst_bytes
        self.ip = ip
        self.port = port
        self.cfg = config
        self.line_rate = line_rate_bps
        self.stats = SafsStats()
        self.senders: dict[int, SafsSender] = {}
        self.receivers: dict[int, SafsReceiver] = {}
        self.unknown: dict[int, list[tuple[int, int]]] = {}  # flow -> [(remaining, payload)]
        self.on_sender_done = on_sender_done
        self.on_sender_sent = on_sender_sent
        self.complete_lead_ns = 0  # report a flow as sent this long before its last byte leaves
        self.on_receiver_done = on_receiver_done
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
        try:  # docs/protocol.md: SAFS packets carry UDP checksum 0 (switches rewrite fields)
            self.sock.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
        except OSError:
            pass  # not Linux: the receiver's ToR zeroes the checksum when it rewrites a field
        self.sock.bind((ip, port))
        self.sock.setblocking(False)
        self._rbuf = bytearray(65536)
        self._ctl = bytearray(HEADER_LEN + NACK_ENTRY_BYTES * config.nack_max_segments)
        loop.watch(self.sock, self._on_readable)

    def close(self) -> None:
        """Stop every flow's timers and close the socket."""
        for sender in list(self.senders.values()):
            sender.stop()
        for receiver in self.receivers.values():
            receiver.stop()
        self.loop.unwatch(self.sock)
        self.sock.close()

    # ---- sending ---------------------------------------------------------------------------
    def sendto(self, data: bytes | bytearray | memoryview, dst_ip: str) -> bool:
        """Send one datagram to ``dst_ip``'s SAFS port; False when the socket buffer is full."""
        try:
            self.sock.sendto(data, (dst_ip, self.port))
            return True
        except (BlockingIOError, InterruptedError):
            self.stats.send_blocked += 1
            return False
        except OSError:  # e.g. no route, ICMP unreachable reported here: the packet is lost
            self.stats.send_errors += 1
            return True

    def control(self, msg: int, dst_ip: str, flow_id: int, remaining: int, ts: int, flags: int = 0,
                offsets: tuple[int, ...] = ()) -> None:
        """Send a REQUEST or DONE (a DONE with ``offsets`` lists them, 6 bytes each: a NACK)."""
        buf = self._ctl
        pack_header_into(buf, msg, flow_id, remaining, wrap(ts), flags=flags)
        end = HEADER_LEN
        for offset in offsets:
            buf[end:end + NACK_ENTRY_BYTES] = offset.to_bytes(NACK_ENTRY_BYTES, "big")
            end += NACK_ENTRY_BYTES
        self.sendto(memoryview(buf)[:end], dst_ip)

    def start_sender(self, flow_id: int, dst_ip: str, size_bytes: int, no_bubble_ts_ns: int | None,
                     background: bool, start_at_ns: int) -> SafsSender:
        """Create flow ``flow_id``'s sender and start it at monotonic time ``start_at_ns``."""
        sender = SafsSender(self, flow_id, dst_ip, size_bytes, no_bubble_ts_ns, background)
        self.senders[flow_id] = sender
        self.loop.at(start_at_ns, sender.start)
        return sender

    def expect(self, flow_id: int, src_ip: str, size_bytes: int) -> SafsReceiver:
        """Prepare to receive flow ``flow_id`` from ``src_ip``; replays DATA that came early."""
        receiver = SafsReceiver(self, flow_id, src_ip, size_bytes)
        self.receivers[flow_id] = receiver
        for remaining, payload in self.unknown.pop(flow_id, ()):
            receiver.on_data(remaining, payload)
        return receiver

    # ---- receiving -------------------------------------------------------------------------
    def _on_readable(self) -> None:
        buf = self._rbuf
        view = memoryview(buf)
        for _ in range(RECV_BATCH):
            try:
                n = self.sock.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. ICMP port unreachable reported on the socket
            if malformed_reason(view[:n]) is not None:
                self.stats.malformed_packets += 1
                continue
            (msg, _flags, _qc, _color, flow_id, remaining, _ts, rate_kbps, epoch, lease_us,
             _qdepth) = unpack_header(buf)
            if msg == _DATA:
                payload = n - HEADER_LEN
                receiver = self.receivers.get(flow_id)
                self.stats.data_packets_received += 1
                if receiver is not None:
                    receiver.on_data(remaining, payload)
                else:
                    self.stats.unknown_flow_packets += 1
                    early = self.unknown.setdefault(flow_id, [])
                    if len(early) < 4096:
                        early.append((remaining, payload))
            elif msg == _GRANT:
                sender = self.senders.get(flow_id)
                if sender is not None:
                    sender.on_grant(rate_kbps, epoch, lease_us)
            elif msg == _DONE:
                sender = self.senders.get(flow_id)
                self.stats.dones_received += 1
                if sender is not None:
                    offsets = tuple(int.from_bytes(view[i:i + NACK_ENTRY_BYTES], "big")
                                    for i in range(HEADER_LEN, n - NACK_ENTRY_BYTES + 1, NACK_ENTRY_BYTES))
                    sender.on_done(remaining, offsets)
            # REQUEST: consumed by the receiver's ToR in the fabric; a host ignores one.


class SafsSender:
    """One flow's sender (module docstring). Observable: ``rate_bps``, ``epoch``,
    ``lease_expiry_ns`` (monotonic, None without a lease), ``closed`` and per-flow counters
    ``requests``, ``grants``, ``data_packets``, ``retransmitted_bytes``, ``fallbacks``."""

    def __init__(self, ep: SafsEndpoint, flow_id: int, dst_ip: str, size_bytes: int,
                 no_bubble_ts_ns: int | None, background: bool) -> None:
        self.ep = ep
        self.loop = ep.loop
        self.cfg = ep.cfg
        self.seg = ep.cfg.segment_bytes
        self.flow_id = flow_id
        self.dst = dst_ip
        self.size = size_bytes
        self.no_bubble = wrap(fabric_clock() + NO_DEADLINE_NS if no_bubble_ts_ns is None else no_bubble_ts_ns)
        self.flags = FLAG_BACKGROUND if background else 0
        self.line_rate = ep.line_rate
        self.rate_bps = ep.cfg.default_rate_bps
        self.epoch = EPOCH_NONE
        self.lease_expiry_ns: int | None = None
        self.next_offset = 0
        self.retx: list[int] = []
        self.retx_set: set[int] = set()
        self.next_send_ns = 0  # token bucket: the earliest time the next packet may leave
        self.last_size = 0
        self.last_send_ns = 0
        self.rto = ep.cfg.rto_ns
        self.closed = False
        self.started = False
        self.sent_reported = False  # on_sender_sent called
        self.start_fabric_ns: int | None = None
        self.pace_timer: Timer | None = None
        self.renew_timer: Timer | None = None
        self.probe_timer: Timer | None = None
        self.poll_timer: Timer | None = None
        self.requests = self.grants = self.data_packets = self.retransmitted_bytes = self.fallbacks = 0
        self.buf = bytearray(HEADER_LEN + self.seg)
        self.burst_bytes = max(2 * (self.seg + WIRE_OVERHEAD_BYTES), ep.burst_bytes)

    # ---- control messages ------------------------------------------------------------------
    def _request(self) -> None:
        remaining = min(self.size, max(1, self.size - self.next_offset + len(self.retx) * self.seg))
        self.ep.control(_REQUEST, self.dst, self.flow_id, remaining, self.no_bubble, self.flags)
        self.requests += 1
        self.ep.stats.requests_sent += 1

    def start(self) -> None:
        """Send the REQUEST and start pacing DATA (unscheduled bytes at line rate)."""
        if self.closed:
            return
        self.started = True
        self.start_fabric_ns = fabric_clock()
        self._request()
        self.next_send_ns = self.loop.now()
        self._pace()
        self._start_poll()

    def stop(self) -> None:
        """Cancel every timer; the flow sends nothing more."""
        self.closed = True
        for timer in (self.pace_timer, self.renew_timer, self.probe_timer, self.poll_timer):
            if timer is not None:
                timer.cancel()

    # ---- pacing ----------------------------------------------------------------------------
    def _has_data(self) -> bool:
        return bool(self.retx) or self.next_offset < self.size

    def _pace(self) -> None:
        self.pace_timer = None
        if self.closed:
            return
        now = self.loop.now()
        if self.lease_expiry_ns is not None and now >= self.lease_expiry_ns:
            self._fallback()
        # Token bucket: credit beyond burst_bytes at the current rate is forgotten.
        rate = self.rate_bps if self.next_offset >= self.cfg.unscheduled_bytes else self.line_rate
        depth_ns = self.burst_bytes * 8 * NS_PER_S // rate if rate > 0 else 0
        if self.next_send_ns < now - depth_ns:
            self.next_send_ns = now - depth_ns
        for _ in range(MAX_PACKETS_PER_WAKE):
            if self.next_send_ns > now:
                break
            if self.retx:
                offset = self.retx[-1]
                resent = True
            elif self.next_offset < self.size:
                offset = self.next_offset
                resent = False
            else:
                self._arm_probe()
                return
            size = self._send_data(offset)
            if not size:  # socket buffer full: try again shortly
                self.pace_timer = self.loop.after(100_000, self._pace)
                return
            if resent:
                self.retx.pop()
                self.retx_set.discard(offset)
                self.retransmitted_bytes += size
                self.ep.stats.retransmitted_bytes += size
            else:
                self.next_offset = offset + self.seg
                if not self.sent_reported and self._sent_soon():
                    self.sent_reported = True
                    if self.ep.on_sender_sent is not None:
                        self.ep.on_sender_sent(self.flow_id)
            unscheduled = not resent and self.next_offset < self.cfg.unscheduled_bytes
            rate = self.line_rate if unscheduled else self.rate_bps
            if rate <= 0:  # a zero grant: wait for a new grant or the lease to run out
                self._start_poll()
                return
            self.next_send_ns += (size * 8 * NS_PER_S + rate - 1) // rate
        if self._has_data():
            self.pace_timer = self.loop.at(self.next_send_ns, self._pace)
        else:
            self._arm_probe()

    def _sent_soon(self) -> bool:
        """The last new byte is sent, or the rest takes at most the endpoint's complete lead."""
        left = self.size - self.next_offset
        if left <= 0:
            return True
        rate = self.rate_bps
        lead = self.ep.complete_lead_ns
        if lead <= 0 or rate <= 0:
            return False
        packets = -(-left // self.seg)
        return (left + packets * WIRE_OVERHEAD_BYTES) * 8 * NS_PER_S <= lead * rate

    def _send_data(self, offset: int) -> int:
        remaining = self.size - offset
        payload = remaining if remaining < self.seg else self.seg
        buf = self.buf
        pack_header_into(buf, _DATA, self.flow_id, remaining,
                         latest_start_ns(self.no_bubble, remaining, self.line_rate),
                         epoch=self.epoch, flags=self.flags)
        if not self.ep.sendto(memoryview(buf)[:HEADER_LEN + payload], self.dst):
            return 0
        size = payload + WIRE_OVERHEAD_BYTES
        self.last_size = size
        self.last_send_ns = self.loop.now()
        self.data_packets += 1
        self.ep.stats.data_packets_sent += 1
        self.ep.stats.data_bytes_sent += size
        return size

    def _repace(self) -> None:
        """Re-time the next DATA for a new rate (the packet already sent keeps its gap)."""
        if self.closed or not self._has_data() or not self.started:
            return
        rate = self.rate_bps
        if rate <= 0:
            if self.pace_timer is not None:
                self.pace_timer.cancel()
                self.pace_timer = None
            self._start_poll()
            return
        gap = (self.last_size * 8 * NS_PER_S + rate - 1) // rate if self.last_size else 0
        self.next_send_ns = max(self.loop.now(), self.last_send_ns + gap)
        if self.pace_timer is not None:
            self.pace_timer.cancel()
        self.pace_timer = self.loop.at(self.next_send_ns, self._pace)

    # ---- grants, leases, polling -----------------------------------------------------------
    def _slow(self) -> bool:
        rate = self.rate_bps
        return rate <= 0 or self.seg * 8 * NS_PER_S > SLOW_GAP_POLLS * self.cfg.grant_poll_ns * rate

    def _start_poll(self) -> None:
        if self.poll_timer is None and not self.closed:
            self.poll_timer = self.loop.after(self.cfg.grant_poll_ns, self._grant_poll)

    def _grant_poll(self) -> None:
        self.poll_timer = None
        if self.closed or not self._has_data():
            return
        now = self.loop.now()
        if self.lease_expiry_ns is not None and now >= self.lease_expiry_ns:
            self._fallback()  # sends a REQUEST; the default rate is > 0
            if self.pace_timer is None:
                self.next_send_ns = now
                self._pace()
        elif self.epoch == EPOCH_NONE or self._slow():
            self._request()
        else:
            return  # DATA carries the epoch often enough: in-band pushes take over
        self._start_poll()

    def _fallback(self) -> None:
        """Lease ran out without renewal: default rate, epoch 0, ask again."""
        self.rate_bps = self.cfg.default_rate_bps
        self.epoch = EPOCH_NONE
        self.lease_expiry_ns = None
        if self.renew_timer is not None:
            self.renew_timer.cancel()
            self.renew_timer = None
        self.fallbacks += 1
        self.ep.stats.lease_fallbacks += 1
        self._request()
        self._start_poll()

    def _renew(self) -> None:
        self.renew_timer = None
        if not self.closed and self._has_data():
            self._request()

    def on_grant(self, rate_kbps: int, epoch: int, lease_us: int) -> None:
        """Apply a GRANT (docs/protocol.md, "Grants", sender rule 2)."""
        if self.closed:
            return
        self.ep.stats.grants_received += 1
        self.grants += 1
        if epoch != EPOCH_NONE and epoch != self.epoch and not epoch_newer(epoch, self.epoch):
            self.ep.stats.grants_stale += 1
            return
        now = self.loop.now()
        rate = rate_kbps * 1000
        if epoch == EPOCH_NONE:  # the switch's default grant: no lease
            rate = rate if rate > 0 else self.cfg.default_rate_bps
            self.lease_expiry_ns = None
            if self.renew_timer is not None:
                self.renew_timer.cancel()
                self.renew_timer = None
        else:
            lease_ns = lease_us * 1000
            self.lease_expiry_ns = now + lease_ns
            if self.renew_timer is not None:
                self.renew_timer.cancel()
            self.renew_timer = self.loop.at(now + int(lease_ns * self.cfg.renew_fraction), self._renew)
        self.epoch = epoch
        if rate != self.rate_bps:
            self.rate_bps = rate
            self._repace()
            if self._slow():
                self._start_poll()
        elif self.pace_timer is None and rate > 0 and self._has_data() and self.started:
            self._repace()

    # ---- completion and loss recovery ------------------------------------------------------
    def _arm_probe(self) -> None:
        if self.probe_timer is not None:
            self.probe_timer.cancel()
        self.probe_timer = self.loop.after(self.rto, self._probe)

    def _probe(self) -> None:
        self.probe_timer = None
        if self.closed or self.pace_timer is not None:
            return
        self.ep.stats.probes += 1
        last = ((self.size - 1) // self.seg) * self.seg
        size = self._send_data(last)
        self.retransmitted_bytes += size
        self.ep.stats.retransmitted_bytes += size
        self.rto = min(self.rto * 2, self.cfg.rto_max_ns)
        self._arm_probe()

    def on_done(self, remaining: int, offsets: tuple[int, ...]) -> None:
        """A DONE (``remaining`` 0: complete, close) or a NACK listing missing offsets."""
        if self.closed:
            return
        if remaining == 0:
            self.stop()
            self.ep.senders.pop(self.flow_id, None)
            self.ep.on_sender_done(self.flow_id, {
                "finish_ns": fabric_clock(), "bytes": self.size, "start_ns": self.start_fabric_ns,
                "requests": self.requests, "grants": self.grants, "data_packets": self.data_packets,
                "retransmitted_bytes": self.retransmitted_bytes, "fallbacks": self.fallbacks})
            return
        for offset in offsets:
            if offset not in self.retx_set and 0 <= offset < self.next_offset and offset % self.seg == 0:
                self.retx_set.add(offset)
                self.retx.append(offset)
        self.retx.sort(reverse=True)  # lowest offset first (popped from the end)
        self.rto = self.cfg.rto_ns
        if self.retx and self.pace_timer is None and self.rate_bps > 0 and self.started:
            if self.probe_timer is not None:
                self.probe_timer.cancel()
                self.probe_timer = None
            self._pace()


class SafsReceiver:
    """One flow's receiver: reassembles by offset (= size - remaining), sends DONE when
    complete (and again for any later DATA), NACKs holes still open ``reorder_window_ns``
    after a segment ``reorder_segments`` beyond them arrived."""

    def __init__(self, ep: SafsEndpoint, flow_id: int, src_ip: str, size_bytes: int) -> None:
        self.ep = ep
        self.flow_id = flow_id
        self.src = src_ip
        self.size = size_bytes
        self.seg = ep.cfg.segment_bytes
        self.got: bytearray | None = bytearray(-(-size_bytes // self.seg))
        self.received = 0
        self.finish_ns: int | None = None
        self.nack_mark = 0
        self.timers: list[Timer] = []

    def stop(self) -> None:
        """Cancel pending NACK timers."""
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()

    def on_data(self, remaining: int, payload: int) -> None:
        """Handle one DATA packet of this flow (``remaining`` from its header)."""
        got = self.got
        if got is None:  # complete: the sender has not seen our DONE yet
            self._done(0, ())
            return
        offset = self.size - remaining
        if not 0 <= offset < self.size or offset % self.seg:
            return
        idx = offset // self.seg
        if got[idx]:
            self.ep.stats.duplicate_packets += 1
            missing = [i * self.seg for i, v in enumerate(got) if not v]
            self._done(sum(min(self.seg, self.size - o) for o in missing),
                       tuple(missing[: self.ep.cfg.nack_max_segments]))
            return
        got[idx] = 1
        self.received += payload
        if self.received >= self.size:
            self.got = None
            self.finish_ns = fabric_clock()
            self.stop()
            self._done(0, ())
            self.ep.on_receiver_done(self.flow_id, self.finish_ns, self.size)
            return
        limit = idx - self.ep.cfg.reorder_segments
        if limit >= self.nack_mark:
            holes = tuple(i for i in range(self.nack_mark, limit + 1) if not got[i])
            self.nack_mark = limit + 1
            if holes:
                self.timers = [t for t in self.timers if not t.cancelled and t.when_ns > self.ep.loop.now()]
                self.timers.append(self.ep.loop.after(self.ep.cfg.reorder_window_ns, self._report_holes, holes))

    def _report_holes(self, holes: tuple[int, ...]) -> None:
        got = self.got
        if got is None:
            return
        missing = [i * self.seg for i in holes if not got[i]]
        if missing:
            self._done(sum(min(self.seg, self.size - o) for o in missing),
                       tuple(missing[: self.ep.cfg.nack_max_segments]))

    def _done(self, missing_bytes: int, missing: tuple[int, ...]) -> None:
        self.ep.control(_DONE, self.src, self.flow_id, missing_bytes, 0, offsets=missing)
        if missing_bytes:
            self.ep.stats.nacks_sent += 1
        else:
            self.ep.stats.dones_sent += 1

"""SAFS over real UDP sockets: the host agent's driver of the SAFS endpoint.

The sender and the receiver are :mod:`safs.hosts.safs`'s, the very state machines the
simulator runs (its module docstring is the specification). This module only gives them
what the simulator's engine and NIC give them there: a clock on ``time.monotonic_ns`` with
timers in the agent's :class:`~safs.apps.agent.loop.Loop` (which wakes with ~50 µs
precision), a NIC that encodes each packet with :func:`safs.core.protocol.pack_header_into`
and sends it from the host's one SAFS socket (UDP ``ip:23285``; struct, because scapy is far
too slow for a data path), and the receive path that decodes datagrams back into
:class:`~safs.core.packet.Packet` s for them. Emulated RTTs through BMv2 are about a
millisecond, not microseconds, so the time constants are scaled (:func:`emu_config`), and the
pacer is a token bucket (``SafsConfig.burst_bytes``) so a late wake-up does not lose rate.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from safs.apps.agent.loop import Loop
from safs.core.packet import PROTO_UDP, Packet
from safs.core.protocol import (
    HEADER_LEN,
    SAFS_UDP_PORT,
    SAFS_VERSION,
    MsgType,
    malformed_reason,
    pack_header_into,
    unpack_header,
)
from safs.core.timebase import diff, fabric_clock, wrap
from safs.hosts.safs import (
    NACK_ENTRY_BYTES,
    ReceiverAdmission,
    SafsConfig,
    SafsDependency,
    SafsReceiver,
    SafsSender,
    SendScheduler,
)
from safs.hosts.stats import TransportStats

RECV_BATCH = 256  # datagrams read per readable event
SOCKET_BUFFER_BYTES = 4 << 20
SO_NO_CHECK = 11  # Linux <asm-generic/socket.h>: send UDP over IPv4 with checksum 0 (not in Python's socket)
_DATA, _REQUEST, _GRANT, _DONE = (int(t) for t in (MsgType.DATA, MsgType.REQUEST, MsgType.GRANT, MsgType.DONE))


GRANT_POLL_NS = 2_000_000  # emulated-fabric defaults (emu_config); a scenario's sim values override
REORDER_WINDOW_NS = 5_000_000
RTO_NS = 20_000_000


def emu_config(default_rate_bps: int, mtu_bytes: int = 1500, unscheduled_bytes: int = 32_768,
               grant_poll_ns: int = GRANT_POLL_NS, reorder_window_ns: int = REORDER_WINDOW_NS,
               rto_ns: int = RTO_NS, burst_bytes: int | None = None,
               urgency_quantum_ns: int = SafsConfig().urgency_quantum_ns,
               slack_thresholds_ns: tuple[int, ...] = (),
               grant_poll_backoff: int = 1, late_transfers: str = "first",
               receiver_admission: str = SafsConfig().receiver_admission,
               admission_rate_fraction: float = SafsConfig().admission_rate_fraction,
               nic_yield_fraction: float = SafsConfig().nic_yield_fraction) -> SafsConfig:
    """The simulator's :class:`SafsConfig` with time constants scaled to an emulated fabric.

    Mininet links with BMv2 switches have RTTs of about 1 ms (software switches, tens of Mbit/s)
    instead of the simulator's ~10 µs, and the agent's timers are good to ~50 µs, so the
    defaults are ``grant_poll_ns`` 2 ms (simulator 10 µs), ``reorder_window_ns`` 5 ms
    (200 µs), ``rto_ns`` 20 ms (250 µs); ``rto_max_ns`` 500 ms. The Mininet target passes the
    scenario's ``sim.safs_grant_poll_ns``, ``safs_reorder_window_ns`` and ``safs_rto_ns``, so
    both targets run the same timers. ``burst_bytes`` (None: half of ``unscheduled_bytes``)
    is the pacer's token-bucket depth (never below two full packets; the switch meter's burst
    is at least ``unscheduled_bytes``, so a catch-up burst stays green). ``renew_fraction``
    (3/4), ``reorder_segments`` (1), ``nack_max_segments`` (128) are the simulator's;
    ``urgency_quantum_ns``, the send scheduler's deadline resolution, and
    ``slack_thresholds_ns``, the switches' slack classes (for urgency signals; empty: none),
    are the scenario's allocator settings, as is ``late_transfers`` (the Mininet target passes
    them); ``receiver_admission`` and ``admission_rate_fraction`` are the run's (policy
    ``safs-admission``: the simulator's ``sim.safs_receiver_admission``), as is
    ``nic_yield_fraction`` (``sim.safs_nic_yield_fraction``). Polls back off up
    to ``grant_poll_backoff`` times ``grant_poll_ns`` (default 1: a fixed period); the Mininet
    target passes the simulator's: 16 for dependency senders, 1 for the per-transfer design.

    Raises:
        InvalidInput: a value out of :class:`SafsConfig`'s ranges (named).
    """
    burst = unscheduled_bytes // 2 if burst_bytes is None else burst_bytes
    return SafsConfig(mtu_bytes=mtu_bytes, default_rate_bps=default_rate_bps, grant_poll_ns=grant_poll_ns,
                      reorder_window_ns=reorder_window_ns, rto_ns=rto_ns,
                      rto_max_ns=max(500_000_000, rto_ns), unscheduled_bytes=unscheduled_bytes,
                      burst_bytes=max(1, burst), urgency_quantum_ns=urgency_quantum_ns,
                      slack_thresholds_ns=slack_thresholds_ns, grant_poll_backoff=grant_poll_backoff,
                      late_transfers=late_transfers, receiver_admission=receiver_admission,
                      admission_rate_fraction=admission_rate_fraction, nic_yield_fraction=nic_yield_fraction)


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

    def add_sender(self, s: SafsSender) -> None:
        """Add one transfer's counters."""
        self.data_packets_sent += s.data_packets
        self.probes += s.probes

    def add_dependency(self, d: SafsDependency) -> None:
        """Add one dependency's counters (its REQUESTs and GRANTs)."""
        self.requests_sent += d.requests
        self.grants_received += d.grants
        self.grants_stale += d.grants_stale

    def add_receiver(self, r: SafsReceiver) -> None:
        """Add one receiver's per-flow counters."""
        self.dones_sent += r.dones
        self.nacks_sent += r.nacks
        self.duplicate_packets += r.duplicates


class _LoopClock:
    """:class:`safs.hosts.env.Clock` on the agent's loop, reading fabric time: wall-clock ns
    (``time.time_ns()``, unwrapped; :func:`safs.core.timebase.fabric_clock` is it mod 2^48).

    The host logic compares its clock with fabric times (a transfer's no-bubble timestamp and
    latest start, as hints and DATA carry them): slack, lateness, urgency signals, admission.
    Timers run on the loop's monotonic clock, shifted by the offset between the two clocks
    taken once at start (a wall-clock step during a run moves no timer).
    """

    __slots__ = ("loop", "offset")

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self.offset = time.time_ns() - loop.now()

    @property
    def now(self) -> int:
        return self.loop.now() + self.offset

    def unwrap(self, t_ns: int) -> int:
        """A 48-bit fabric time as this clock's ns: the one nearest now."""
        now = self.now
        return now + diff(t_ns, wrap(now))

    def at(self, t_ns: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        self.loop.at(t_ns - self.offset, fn, arg)

    def after(self, dt_ns: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        self.loop.after(dt_ns, fn, arg)


class _SocketNic:
    """:class:`safs.hosts.env.Nic` on the host's SAFS socket: encodes each :class:`Packet`."""

    def __init__(self, ep: SafsEndpoint, rate_bps: int) -> None:
        self.ep = ep
        self.rate_bps = rate_bps
        self._data = bytearray(HEADER_LEN + 65536)
        self._ctl = bytearray(HEADER_LEN + NACK_ENTRY_BYTES * ep.cfg.nack_max_segments)

    def send(self, pkt: Packet) -> bool:
        """Send ``pkt`` to its destination's SAFS port; False when the socket buffer is full."""
        if pkt.safs_type == _DATA:
            buf = self._data
            pack_header_into(buf, _DATA, pkt.flow_id, pkt.remaining, pkt.ts, rate_kbps=pkt.rate_kbps,
                             epoch=pkt.epoch, flags=pkt.flags, dep_id=pkt.dep_id)
            return self.ep.sendto(memoryview(buf)[:HEADER_LEN + pkt.payload], pkt.dst)
        buf = self._ctl
        pack_header_into(buf, pkt.safs_type, pkt.flow_id, pkt.remaining, wrap(pkt.ts), flags=pkt.flags,
                         dep_id=pkt.dep_id)
        end = HEADER_LEN
        for offset in pkt.conn or ():  # a NACK's missing segments, 6 bytes each
            buf[end:end + NACK_ENTRY_BYTES] = offset.to_bytes(NACK_ENTRY_BYTES, "big")
            end += NACK_ENTRY_BYTES
        self.ep.sendto(memoryview(buf)[:end], pkt.dst)
        return True  # a control message lost to a full buffer is repaired like a lost packet


class _Host:
    """:class:`safs.hosts.env.HostPort` of this agent's host."""

    def __init__(self, name: str, ip: int, nic: _SocketNic) -> None:
        self.name = name
        self.ip = ip
        self.nic = nic


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
        on_sender_sent: ``f(flow_id)`` once per flow, when a sender has sent its last new
            byte, or earlier: when the new bytes it still has take at most
            :attr:`complete_lead_ns` at its rate (:class:`safs.hosts.safs.SafsSender`,
            ``on_sent``). The agent completes the flow at the hint API then; the lead makes up
            for the hint call's own latency (the agent sets it from the Complete calls it timed).

    Raises:
        OSError: the socket cannot be bound.
    """

    def __init__(self, loop: Loop, ip: str, config: SafsConfig, line_rate_bps: int,
                 on_sender_done: Callable[[int, dict], None],
                 on_receiver_done: Callable[[int, int, int], None], port: int = SAFS_UDP_PORT,
                 on_sender_sent: Callable[[int], None] | None = None) -> None:
        self.loop = loop
        self.clock = _LoopClock(loop)
        self.ip = ip
        self.port = port
        self.cfg = config
        self.burst_bytes = config.burst_bytes
        self.line_rate = line_rate_bps
        self.stats = SafsStats()
        self.transport = TransportStats()  # the endpoint's byte counters, as the simulator keeps them
        self.host = _Host(ip, int(ipaddress.IPv4Address(ip)), _SocketNic(self, line_rate_bps))
        self.senders: dict[int, SafsSender] = {}
        self.dependencies: dict[int, SafsDependency] = {}  # dep_id -> its sender side
        # the host's dependencies share its NIC through one send scheduler (SafsConfig.send_order)
        self.scheduler = (SendScheduler(self.clock, line_rate_bps, config.urgency_quantum_ns, config.burst_bytes,
                                        config.late_below_ns)
                          if config.send_order == "urgency" else None)
        self.receivers: dict[int, SafsReceiver] = {}
        # receiver admission (SafsConfig.receiver_admission), as the simulator's hosts have it
        self.admission = ReceiverAdmission.for_host(self.clock, line_rate_bps, config)
        self.unknown: dict[int, list[Packet]] = {}  # flow -> DATA that came before its expect
        self.on_sender_done = on_sender_done
        self.on_sender_sent = on_sender_sent
        self.complete_lead_ns = 0  # report a flow as sent this long before its last byte leaves
        self.on_receiver_done = on_receiver_done
        self._start_fabric: dict[int, int] = {}
        self._addr: dict[int, str] = {}
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
        loop.watch(self.sock, self._on_readable)

    def close(self) -> None:
        """Stop every flow's timers and close the socket."""
        for sender in self.senders.values():
            sender.stop()
        for receiver in self.receivers.values():
            receiver.stop()
        self.loop.unwatch(self.sock)
        self.sock.close()

    def stats_dict(self) -> dict[str, int]:
        """:class:`SafsStats` of everything so far: finished flows plus the live ones."""
        stats = SafsStats(**self.stats.as_dict())
        for sender in self.senders.values():
            stats.add_sender(sender)
            if sender.dep.dep_id not in self.dependencies:
                stats.add_dependency(sender.dep)  # its own (per-transfer mode)
        for dep in self.dependencies.values():
            stats.add_dependency(dep)
        for receiver in self.receivers.values():
            stats.add_receiver(receiver)
        stats.data_bytes_sent = self.transport.data_bytes
        stats.retransmitted_bytes = self.transport.retransmitted_bytes
        stats.lease_fallbacks = self.transport.lease_fallbacks
        return stats.as_dict()

    # ---- sending ---------------------------------------------------------------------------
    def _dst(self, ip: int) -> str:
        addr = self._addr.get(ip)
        if addr is None:
            addr = self._addr[ip] = str(ipaddress.IPv4Address(ip))
        return addr

    def sendto(self, data: bytes | bytearray | memoryview, dst_ip: int) -> bool:
        """Send one datagram to ``dst_ip``'s SAFS port; False when the socket buffer is full."""
        try:
            self.sock.sendto(data, (self._dst(dst_ip), self.port))
            return True
        except (BlockingIOError, InterruptedError):
            self.stats.send_blocked += 1
            return False
        except OSError:  # e.g. no route, ICMP unreachable reported here: the packet is lost
            self.stats.send_errors += 1
            return True

    def start_sender(self, flow_id: int, dst_ip: str, size_bytes: int, no_bubble_ts_ns: int | None,
                     background: bool, start_at_ns: int, dep_id: int = 0, firm: bool = False) -> SafsSender:
        """Create flow ``flow_id``'s sender and start it at monotonic time ``start_at_ns``.

        ``no_bubble_ts_ns`` is fabric time (48-bit; None: no deadline); latest start times are
        stamped from it.
        ``dep_id``: the dependency whose grant it shares (created on first use); 0: a
        dependency of its own (per-transfer mode). ``firm``: its deadline is firm
        (:class:`SafsSender`).
        """
        dst = int(ipaddress.IPv4Address(dst_ip))
        dep = None
        if dep_id:
            dep = self.dependencies.get(dep_id)
            if dep is None:
                dep = self.dependencies[dep_id] = SafsDependency(self.clock, self.host, dst, dep_id, background,
                                                                 self.cfg, self.transport, self.scheduler)
        no_bubble = None if no_bubble_ts_ns is None else self.clock.unwrap(no_bubble_ts_ns)
        sender = SafsSender(self.clock, self.host, dst, flow_id, size_bytes, no_bubble, background, self.cfg,
                            self.transport, self._sender_closed, dep, self.on_sender_sent, self._complete_lead,
                            firm)
        self.senders[flow_id] = sender
        self.loop.at(start_at_ns, self._start, sender)
        return sender

    def _start(self, sender: SafsSender) -> None:
        if not sender.closed:
            self._start_fabric[sender.flow_id] = fabric_clock()
            sender.start()

    def _complete_lead(self) -> int:
        return self.complete_lead_ns

    def _sender_closed(self, flow_id: int) -> None:
        sender = self.senders.pop(flow_id)
        self.stats.add_sender(sender)
        if sender.dep.dep_id not in self.dependencies:
            self.stats.add_dependency(sender.dep)
        self.on_sender_done(flow_id, {
            "finish_ns": fabric_clock(), "bytes": sender.size, "start_ns": self._start_fabric.pop(flow_id, None),
            # REQUESTs, GRANTs and fallbacks are the dependency's (shared by its transfers)
            "requests": sender.dep.requests, "grants": sender.dep.grants, "data_packets": sender.data_packets,
            "retransmitted_bytes": sender.retransmitted_bytes, "fallbacks": sender.dep.fallbacks})

    def expect(self, flow_id: int, src_ip: str, size_bytes: int, no_bubble_ts_ns: int | None = None,
               firm: bool = False) -> SafsReceiver:
        """Prepare to receive flow ``flow_id`` from ``src_ip``; replays DATA that came early.
        ``no_bubble_ts_ns``: its no-bubble timestamp, fabric time (48-bit; None: no deadline),
        which the receiver admission plans with; ``firm``: its deadline is firm, so the
        admission may reject it (:class:`SafsReceiver`)."""
        no_bubble = None if no_bubble_ts_ns is None else self.clock.unwrap(no_bubble_ts_ns)
        receiver = SafsReceiver(self.clock, self.host, int(ipaddress.IPv4Address(src_ip)), flow_id, size_bytes,
                                no_bubble, self.cfg, self.transport, self._receiver_finished, self.admission, firm)
        self.receivers[flow_id] = receiver
        for pkt in self.unknown.pop(flow_id, ()):
            receiver.receive(pkt)
        return receiver

    def _receiver_finished(self, flow_id: int, _now_ns: int) -> None:
        receiver = self.receivers[flow_id]
        finish = fabric_clock()
        receiver.finish_ns = finish
        self.on_receiver_done(flow_id, finish, receiver.size)

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
            (msg, flags, qclass, color, flow_id, remaining, ts, rate_kbps, epoch, lease_us,
             qdepth, dep_id) = unpack_header(buf)
            # The source address is not needed: receivers answer the address they were told to
            # expect, senders match GRANTs and DONEs by flow id.
            pkt = Packet(0, self.host.ip, PROTO_UDP, SAFS_UDP_PORT, SAFS_UDP_PORT, n, n - HEADER_LEN)
            pkt.safs_version = SAFS_VERSION
            pkt.safs_type = msg
            pkt.flags, pkt.qclass, pkt.color, pkt.flow_id, pkt.remaining = flags, qclass, color, flow_id, remaining
            pkt.ts, pkt.rate_kbps, pkt.epoch, pkt.lease_us, pkt.qdepth = ts, rate_kbps, epoch, lease_us, qdepth
            pkt.dep_id = dep_id
            if msg == _DATA:
                self.stats.data_packets_received += 1
                receiver = self.receivers.get(flow_id)
                if receiver is not None:
                    receiver.receive(pkt)
                else:
                    self.stats.unknown_flow_packets += 1
                    early = self.unknown.setdefault(flow_id, [])
                    if len(early) < 4096:
                        early.append(pkt)
            elif msg == _GRANT:  # for the dependency, whichever of its transfers it names
                dep = self.dependencies.get(dep_id)
                sender = self.senders.get(flow_id)
                if dep is not None:
                    dep.receive(pkt)
                elif sender is not None:
                    sender.receive(pkt)
            elif msg == _DONE:
                self.stats.dones_received += 1
                sender = self.senders.get(flow_id)
                if sender is not None:
                    pkt.conn = tuple(int.from_bytes(view[i:i + NACK_ENTRY_BYTES], "big")
                                     for i in range(HEADER_LEN, n - NACK_ENTRY_BYTES + 1, NACK_ENTRY_BYTES))
                    sender.receive(pkt)
            # REQUEST: consumed by the receiver's ToR in the fabric; a host ignores one.

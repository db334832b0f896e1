"""Baseline transport: plain Linux TCP sockets, DCTCP where the kernel offers it.

Each agent listens on one TCP port (``--tcp-port``). A flow is one connection: the sender
writes a 12-byte preamble (flow id u32, size u64, network byte order; not counted in the
flow's size) and then ``size`` bytes, half-closes, and waits for the receiver to close; the
receiver reports the flow done when the last byte arrived and closes. Connections of flows the
receiver was not told about (the background generator's) are accepted the same way.

Congestion control: each socket asks for ``dctcp`` with ``TCP_CONGESTION``; where the kernel
has no tcp_dctcp (``/proc/sys/net/ipv4/tcp_available_congestion_control``) it uses ``cubic``
(the Linux default), else the namespace's default. Which one was used and the namespace's
``net.ipv4.tcp_ecn`` (1: request ECN on outgoing connections; DCTCP needs it, and classic ECN
makes cubic halve its window on CE marks instead of losses) are in :attr:`TcpEndpoint.info`, so
results can say which baseline ran.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from safs.apps.agent.loop import Loop
from safs.core.timebase import fabric_clock

PREAMBLE = struct.Struct("!IQ")  # flow_id, size_bytes
CHUNK_BYTES = 64 * 1024
_ZEROS = memoryview(bytes(CHUNK_BYTES))
PREFERRED_CC = ("dctcp", "cubic")
TCP_ECN_SYSCTL = Path("/proc/sys/net/ipv4/tcp_ecn")
TCP_CC_SYSCTL = Path("/proc/sys/net/ipv4/tcp_congestion_control")


def pick_congestion_control(preferred: tuple[str, ...] = PREFERRED_CC) -> str:
    """The first of ``preferred`` a TCP socket here accepts (``TCP_CONGESTION``), else the
    namespace default (``net.ipv4.tcp_congestion_control``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        for name in preferred:
            try:
                probe.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
                return name
            except OSError:
                continue
    return TCP_CC_SYSCTL.read_text().strip()


def tcp_ecn(set_on: bool = False) -> int:
    """This namespace's ``net.ipv4.tcp_ecn`` (0 off, 1 request ECN, 2 accept only), after
    writing 1 when ``set_on`` (needs root; the value is per network namespace).

    Raises:
        OSError: ``set_on`` and the sysctl cannot be written.
    """
    if set_on:
        TCP_ECN_SYSCTL.write_text("1\n")
    return int(TCP_ECN_SYSCTL.read_text().strip())


@dataclass
class TcpStats:
    """Counters of one host's TCP endpoint (bytes are payload bytes, preamble excluded).

    Attributes: flows_sent, flows_received, bytes_sent, bytes_received, connect_errors,
    unexpected_flows (connections for flows no ``expect`` announced, e.g. background).
    """

    flows_sent: int = 0
    flows_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    connect_errors: int = 0
    unexpected_flows: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters by name."""
        return asdict(self)


class TcpEndpoint:
    """The host's TCP listener and its outgoing flows.

    Args:
        loop: the agent's event loop.  ip: the host's address.  port: listening port (1..65535).
        on_sender_done: ``f(flow_id, info)`` when the receiver closed after the last byte
            (``info``: ``finish_ns`` fabric, ``bytes``, ``start_ns``).
        on_receiver_done: ``f(flow_id, finish_ns, size_bytes)`` when the last byte arrived.
        on_error: ``f(flow_id, message)`` when an outgoing flow fails (refused, reset).
        set_ecn: write ``net.ipv4.tcp_ecn = 1`` in this namespace first.

    Raises:
        OSError: the port cannot be bound, or ``set_ecn`` and the sysctl is not writable.
    """

    def __init__(self, loop: Loop, ip: str, port: int, on_sender_done: Callable[[int, dict], None],
                 on_receiver_done: Callable[[int, int, int], None],
                 on_error: Callable[[int, str], None], set_ecn: bool = False) -> None:
        self.loop = loop
        self.ip = ip
        self.port = port
        self.cc = pick_congestion_control()
        self.info = {"tcp_congestion_control": self.cc, "tcp_ecn": tcp_ecn(set_ecn),
                     "tcp_congestion_control_wanted": PREFERRED_CC[0]}
        self.stats = TcpStats()
        self.expected: set[int] = set()
        self.on_sender_done = on_sender_done
        self.on_receiver_done = on_receiver_done
        self.on_error = on_error
        self.open: set[socket.socket] = set()
        self.listener = self._socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((ip, port))
        self.listener.listen(256)
        self.listener.setblocking(False)
        loop.watch(self.listener, self._accept)

    def _socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.cc.encode())
        return sock

    def close(self) -> None:
        """Close the listener and every open connection."""
        for sock in list(self.open) + [self.listener]:
            self.loop.unwatch(sock)
            sock.close()
        self.open.clear()

    def _drop(self, sock: socket.socket) -> None:
        self.loop.unwatch(sock)
        self.open.discard(sock)
        sock.close()

    # ---- receiver --------------------------------------------------------------------------
    def expect(self, flow_id: int) -> None:
        """Note that flow ``flow_id`` is expected (connections are accepted either way)."""
        self.expected.add(flow_id)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            self.open.add(conn)
            state = {"head": b"", "flow_id": 0, "size": -1, "got": 0}
            self.loop.watch(conn, lambda c=conn, s=state: self._read(c, s))

    def _read(self, conn: socket.socket, st: dict) -> None:
        try:
            data = conn.recv(1 << 18)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if not data:
            self._drop(conn)  # sender went away before the end
            return
        if st["size"] < 0:
            st["head"] += data
            if len(st["head"]) < PREAMBLE.size:
                return
            st["flow_id"], st["size"] = PREAMBLE.unpack_from(st["head"])
            data = st["head"][PREAMBLE.size:]
            if st["flow_id"] not in self.expected:
                self.stats.unexpected_flows += 1
            self.expected.discard(st["flow_id"])
        st["got"] += len(data)
        self.stats.bytes_received += len(data)
        if st["got"] >= st["size"]:
            finish = fabric_clock()
            self.stats.flows_received += 1
            self._drop(conn)
            self.on_receiver_done(st["flow_id"], finish, st["size"])

    # ---- sender ----------------------------------------------------------------------------
    def start_sender(self, flow_id: int, dst_ip: str, dst_port: int, size_bytes: int, start_at_ns: int) -> None:
        """Open the connection of flow ``flow_id`` at monotonic time ``start_at_ns``."""
        self.loop.at(start_at_ns, self._connect, flow_id, dst_ip, dst_port, size_bytes)

    def _connect(self, flow_id: int, dst_ip: str, dst_port: int, size: int) -> None:
        sock = self._socket()
        sock.setblocking(False)
        self.open.add(sock)
        st = {"flow_id": flow_id, "size": size, "sent": -PREAMBLE.size, "start_ns": fabric_clock(),
              "first": PREAMBLE.pack(flow_id, size)}
        err = sock.connect_ex((dst_ip, dst_port))
        if err not in (0, 115):  # EINPROGRESS
            self._fail(sock, flow_id, f"connect to {dst_ip}:{dst_port}: errno {err}")
            return
        self.loop.watch(sock, None, lambda: self._write(sock, st))

    def _fail(self, sock: socket.socket, flow_id: int, message: str) -> None:
        self.stats.connect_errors += 1
        self._drop(sock)
        self.on_error(flow_id, message)

    def _write(self, sock: socket.socket, st: dict) -> None:
        zeros = _ZEROS
        if st["sent"] == -PREAMBLE.size:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._fail(sock, st["flow_id"], f"connect: errno {err}")
                return
        try:
            while st["sent"] < st["size"]:
                if st["sent"] < 0:
                    n = sock.send(st["first"][PREAMBLE.size + st["sent"]:])
                else:
                    n = sock.send(zeros[: min(CHUNK_BYTES, st["size"] - st["sent"])])
                    self.stats.bytes_sent += n
                st["sent"] += n
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            self._fail(sock, st["flow_id"], f"send: {err}")
            return
        sock.shutdown(socket.SHUT_WR)
        self.stats.flows_sent += 1
        self.loop.watch(sock, lambda: self._await_close(sock, st))

    def _await_close(self, sock: socket.socket, st: dict) -> None:
        try:
            data = sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            return
        self._drop(sock)
        self.on_sender_done(st["flow_id"], {"finish_ns": fabric_clock(), "bytes": st["size"],
                                            "start_ns": st["start_ns"]})

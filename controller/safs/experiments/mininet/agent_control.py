"""The agent's control protocol: JSON lines over a Unix stream socket (docs/mininet.md,
"Host agent").

One request per line, one reply line: ``{"ok": true, ...}`` or ``{"ok": false, "error":
"<field>: <allowed range>"}``; a refused request changes nothing and the agent keeps running.
This module holds the request checks (one place: :func:`parse_request`), the server side the
agent runs in its event loop (:class:`safs.apps.agent.control_server.ControlServer`) and the client the run driver uses
(:class:`AgentClient`).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safs.core.distributions import shipped_distributions
from safs.core.errors import InvalidInput, SafsError
from safs.core.hints import FLOW_CLASSES, LABEL_MAX_LEN
from safs.core.protocol import DEP_ID_MAX, FLOW_ID_MAX, FLOW_ID_MIN, REMAINING_BYTES_MAX

TRANSPORTS = ("safs", "tcp")
OPS = ("expect", "send", "background", "events", "watch", "stats", "shutdown")
MAX_LINE_BYTES = 1 << 16
WRITE_TIMEOUT_S = 1.0  # longest the agent blocks writing to a control client that does not read
_U63 = (1 << 63) - 1


# ---- request checks -----------------------------------------------------------------------
def _int(req: dict, field: str, lo: int, hi: int, allowed: str, default: Any = ...) -> Any:
    value = req.get(field, default)
    if value is ...:
        raise InvalidInput(field, f"required, an integer in {allowed}")
    if value is default and default is not ...:
        return value
    if type(value) is not int or not lo <= value <= hi:
        raise InvalidInput(field, f"must be an integer in {allowed}, got {value!r}")
    return value


def _choice(req: dict, field: str, choices: tuple[str, ...], default: str | None = None) -> str:
    value = req.get(field, default)
    if value not in choices:
        raise InvalidInput(field, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def _bool(req: dict, field: str) -> bool:
    value = req.get(field, False)
    if type(value) is not bool:
        raise InvalidInput(field, f"must be true or false, got {value!r}")
    return value


def _ip(req: dict, field: str) -> str:
    value = req.get(field)
    try:
        return str(ipaddress.IPv4Address(value))
    except (ipaddress.AddressValueError, ValueError, TypeError):
        raise InvalidInput(field, f"must be an IPv4 address A.B.C.D, got {value!r}") from None


def _text(req: dict, field: str, max_len: int, default: str | None = "") -> str | None:
    value = req.get(field, default)
    if value is None:  # null: the default
        return default
    if not isinstance(value, str) or len(value) > max_len:
        raise InvalidInput(field, f"must be text of at most {max_len} characters, got {value!r}")
    return value


@dataclass(frozen=True)
class Expect:
    """``{"op": "expect"}``: receive flow ``flow_id`` (1..2^32-1) of ``size_bytes``
    (1..2^48-1) from ``src_ip`` over ``transport``; ``no_bubble_ts_ns``: its no-bubble
    timestamp, fabric ns (0..2^63-1, reduced mod 2^48) or None (no deadline), which a SAFS
    receiver's admission plans with (``--receiver-admission``); ``firm``: the deadline is
    firm, so the admission may reject the flow (``safs.hosts.safs.SafsReceiver``)."""

    flow_id: int
    src_ip: str
    size_bytes: int
    transport: str
    no_bubble_ts_ns: int | None = None
    firm: bool = False


@dataclass(frozen=True)
class Send:
    """``{"op": "send"}``: send flow ``flow_id`` to ``dst_ip``.

    ``no_bubble_ts_ns``: fabric ns (0..2^63-1, reduced mod 2^48) or None (no deadline);
    ``send_at_ns``: fabric ns when data starts (0 or past: now); ``port``: the receiver's TCP
    port (None: the agent's own ``--tcp-port``); ``dst_host``: the receiver's topology name,
    required for SAFS flows when the agent has a hint address (the hint names hosts);
    ``dep_id``: the SAFS dependency the transfer belongs to (1..65535, the id the controller
    was told at launch; its transfers share one grant); 0: its own dependency, announced and
    completed per transfer at the hint API (policy ``safs-per-transfer``); ``firm``: the
    deadline is firm (``safs.hosts.safs.SafsSender``).
    """

    flow_id: int
    dst_ip: str
    size_bytes: int
    transport: str
    flow_class: str
    no_bubble_ts_ns: int | None
    send_at_ns: int
    label: str
    port: int | None
    dst_host: str | None
    dep_id: int = 0
    firm: bool = False


@dataclass(frozen=True)
class Background:
    """``{"op": "background"}``: Poisson TCP flows from this host (module
    :mod:`safs.apps.agent.background`): to ``dst_ips`` (uniform), sizes from the shipped
    ``distribution`` capped at ``max_size_bytes``, offered load ``load`` (0, 1] of
    ``link_rate_bps``, for ``duration_ns``, flow ids ``flow_id_base``.. (at most ``max_flows``),
    random stream ``seed``."""

    dst_ips: tuple[str, ...]
    distribution: str
    load: float
    link_rate_bps: int
    duration_ns: int
    flow_id_base: int
    max_flows: int
    max_size_bytes: int
    seed: int
    port: int | None


def parse_request(req: object) -> tuple[str, Expect | Send | Background | None]:
    """Check one decoded request line; returns ``(op, parsed)`` (parsed None for
    events/watch/stats/shutdown).

    Raises:
        InvalidInput: naming the field and its allowed values (``op``, ``flow_id``, ...).
    """
    if not isinstance(req, dict):
        raise InvalidInput("request", "must be a JSON object")
    op = _choice(req, "op", OPS)
    if op == "expect":
        _int(req, "port", 1, 65535, "1..65535", None)
        return op, Expect(_int(req, "flow_id", FLOW_ID_MIN, FLOW_ID_MAX, "1..2^32-1"), _ip(req, "src_ip"),
                          _int(req, "size_bytes", 1, REMAINING_BYTES_MAX, "1..2^48-1 bytes"),
                          _choice(req, "transport", TRANSPORTS),
                          _int(req, "no_bubble_ts_ns", 0, _U63, "0..2^63-1 ns (fabric time) or null", None),
                          _bool(req, "firm"))
    if op == "send":
        return op, Send(
            _int(req, "flow_id", FLOW_ID_MIN, FLOW_ID_MAX, "1..2^32-1"), _ip(req, "dst_ip"),
            _int(req, "size_bytes", 1, REMAINING_BYTES_MAX, "1..2^48-1 bytes"),
            _choice(req, "transport", TRANSPORTS), _choice(req, "flow_class", FLOW_CLASSES, "pipeline"),
            _int(req, "no_bubble_ts_ns", 0, _U63, "0..2^63-1 ns (fabric time) or null", None),
            _int(req, "send_at_ns", 0, _U63, "0..2^63-1 ns (fabric time; 0 = now)", 0),
            _text(req, "label", LABEL_MAX_LEN), _int(req, "port", 1, 65535, "1..65535", None),
            _text(req, "dst_host", 128, None), _int(req, "dep_id", 0, DEP_ID_MAX, f"0..{DEP_ID_MAX}", 0),
            _bool(req, "firm"))
    if op == "background":
        ips = req.get("dst_ips")
        if not isinstance(ips, list) or not ips:
            raise InvalidInput("dst_ips", f"must be a non-empty list of IPv4 addresses, got {ips!r}")
        load = req.get("load")
        if isinstance(load, bool) or not isinstance(load, (int, float)) or not 0.0 < load <= 1.0:
            raise InvalidInput("load", f"must be in (0, 1] (fraction of link_rate_bps), got {load!r}")
        names = shipped_distributions()
        dist = req.get("distribution")
        if dist not in names:
            raise InvalidInput("distribution", f"must be one of {', '.join(names)}, got {dist!r}")
        return op, Background(
            tuple(_ip({"dst_ips": ip}, "dst_ips") for ip in ips), dist, float(load),
            _int(req, "link_rate_bps", 1, 10**12, "1..10^12 bit/s"),
            _int(req, "duration_ns", 1, _U63, "1..2^63-1 ns"),
            _int(req, "flow_id_base", FLOW_ID_MIN, FLOW_ID_MAX, "1..2^32-1"),
            _int(req, "max_flows", 1, 1_000_000, "1..10^6", 10_000),
            _int(req, "max_size_bytes", 1, REMAINING_BYTES_MAX, "1..2^48-1 bytes", 10_000_000),
            _int(req, "seed", 0, _U63, "0..2^63-1", 1), _int(req, "port", 1, 65535, "1..65535", None))
    return op, None


# ---- server (inside the agent) ----------------------------------------------------------
class AgentError(SafsError):
    """The agent refused a request for a reason other than a named field, or went away."""


class AgentClient:
    """Client of one agent's control socket.

    ::

        agent = AgentClient.connect("/tmp/run/h1.sock", timeout_s=10)
        agent.expect(7, "10.0.0.2", 1 << 20, "safs")
        agent.send(8, "10.0.0.3", 1 << 20, "safs", no_bubble_ts_ns=t, dst_host="h3")
        for ev in agent.events(): ...
        agent.shutdown()

    Errors: an ``ok: false`` reply ``"<field>: <message>"`` raises
    :class:`safs.core.errors.InvalidInput` with that field; others :class:`AgentError`.
    """

    def __init__(self, path: str | Path, timeout_s: float = 10.0) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self.sock.connect(self.path)
        self.rfile = self.sock.makefile("rb")

    @classmethod
    def connect(cls, path: str | Path, timeout_s: float = 10.0, poll_s: float = 0.01) -> AgentClient:
        """Connect once the agent listens at ``path``, polling (no fixed sleep).

        Raises:
            AgentError: nothing listens there within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return cls(path, timeout_s)
            except (FileNotFoundError, ConnectionRefusedError) as err:
                if time.monotonic() >= deadline:
                    raise AgentError(f"no agent at {path} after {timeout_s} s: {err}") from None
                time.sleep(poll_s)

    def close(self) -> None:
        """Close the connection (the agent keeps running)."""
        self.rfile.close()
        self.sock.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, req: dict) -> dict:
        """Send one request, return the ``ok: true`` reply.

        Raises:
            InvalidInput: the agent named a field.  AgentError: other refusals, or no reply.
        """
        self.submit(req)
        return self.reply()

    def submit(self, req: dict) -> None:
        """Send one request without waiting; :meth:`reply` reads its answer (replies come in
        request order). Lets a caller ask several agents at once and then collect the replies."""
        self.sock.sendall(json.dumps(req).encode() + b"\n")

    def reply(self) -> dict:
        """The reply to the oldest request sent with :meth:`submit` (errors as :meth:`request`)."""
        line = self.rfile.readline()
        if not line:
            raise AgentError(f"agent at {self.path} closed the connection")
        reply = json.loads(line)
        if not reply.get("ok"):
            field, sep, message = str(reply.get("error", "")).partition(": ")
            if sep and field != "internal":
                raise InvalidInput(field, message)
            raise AgentError(str(reply.get("error")))
        return reply

    def expect(self, flow_id: int, src_ip: str, size_bytes: int, transport: str = "safs",
               no_bubble_ts_ns: int | None = None, firm: bool = False) -> dict:
        """Receiver side of a flow (fields: :class:`Expect`); the reply has ``port`` for TCP."""
        return self.request({"op": "expect", "flow_id": flow_id, "src_ip": src_ip, "size_bytes": size_bytes,
                             "transport": transport, "no_bubble_ts_ns": no_bubble_ts_ns, "firm": firm})

    def send(self, flow_id: int, dst_ip: str, size_bytes: int, transport: str = "safs", *,
             flow_class: str = "pipeline", no_bubble_ts_ns: int | None = None, send_at_ns: int = 0,
             label: str = "", port: int | None = None, dst_host: str | None = None, dep_id: int = 0,
             firm: bool = False) -> dict:
        """Sender side of a flow (fields: :class:`Send`)."""
        req = {"op": "send", "flow_id": flow_id, "dst_ip": dst_ip, "size_bytes": size_bytes,
               "transport": transport, "flow_class": flow_class, "no_bubble_ts_ns": no_bubble_ts_ns,
               "send_at_ns": send_at_ns, "label": label, "firm": firm}
        if port is not None:
            req["port"] = port
        if dst_host is not None:
            req["dst_host"] = dst_host
        if dep_id:
            req["dep_id"] = dep_id
        return self.request(req)

    def background(self, **fields: Any) -> dict:
        """Start a background generator (fields: :class:`Background`)."""
        return self.request({"op": "background", **fields})

    def events(self) -> list[dict]:
        """Events since the last call (each ``{"event": "done"|"error", "flow_id", "role", ...}``)."""
        return self.request({"op": "events"})["events"]

    def watch(self) -> EventStream:
        """Open a second connection on which the agent pushes every event as it happens (the
        agent then keeps none for :meth:`events`). Raises AgentError: the agent went away."""
        stream = AgentClient(self.path, self.sock.gettimeout() or 10.0)
        stream.request({"op": "watch"})
        return EventStream(stream)

    def stats(self) -> dict:
        """The agent's counters and transport settings."""
        return self.request({"op": "stats"})

    def shutdown(self) -> None:
        """Ask the agent to exit (it closes its sockets and removes its control path)."""
        try:
            self.request({"op": "shutdown"})
        except (AgentError, OSError):
            pass


class EventStream:
    """The agent's pushed events (:meth:`AgentClient.watch`): :meth:`fileno` for ``select``,
    :meth:`read` for the events that arrived (never blocks)."""

    def __init__(self, client: AgentClient) -> None:
        self.client = client
        self.sock = client.sock
        self.sock.setblocking(False)
        self.buf = bytearray()

    def fileno(self) -> int:
        """The socket's descriptor (readable: events arrived)."""
        return self.sock.fileno()

    def read(self) -> list[dict]:
        """Every complete event line received so far, decoded.

        Raises:
            AgentError: the agent closed the stream.
        """
        while True:
            try:
                data = self.sock.recv(MAX_LINE_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                raise AgentError(f"agent at {self.client.path} closed its event stream")
            self.buf += data
        events = []
        while (end := self.buf.find(b"\n")) >= 0:
            events.append(json.loads(bytes(self.buf[:end])))
            del self.buf[: end + 1]
        return events

    def close(self) -> None:
        """Close the stream's connection."""
        self.client.close()

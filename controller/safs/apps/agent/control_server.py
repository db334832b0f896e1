"""The agent's side of the control protocol (:mod:`safs.experiments.mininet.agent_control`):
a Unix stream socket served from the agent's event loop."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safs.apps.agent.loop import Loop
from safs.core.errors import InvalidInput
from safs.experiments.mininet.agent_control import MAX_LINE_BYTES, WRITE_TIMEOUT_S, parse_request


class ControlServer:
    """Listens on a Unix stream socket at ``path`` and answers JSON lines with ``handle``.

    Args:
        loop: the agent's event loop (requests are handled on it, between packets).
        path: socket path; an existing file there is replaced.
        handle: ``handle(op, parsed) -> dict`` for a checked request; raising InvalidInput
            turns into an ``ok: false`` reply naming the field.

    Raises:
        OSError: the path cannot be bound.
    """

    def __init__(self, loop: Loop, path: Path, handle: Callable[[str, Any], dict]) -> None:
        self.loop = loop
        self.path = Path(path)
        self.handle = handle
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.conns: dict[socket.socket, bytearray] = {}
        self.watchers: list[socket.socket] = []  # connections that asked to "watch": event streams
        loop.watch(self.sock, self._accept)

    def push(self, event: dict) -> None:
        """Write ``event`` as one line to every watching connection (a broken one is dropped)."""
        line = json.dumps(event).encode() + b"\n"
        for conn in list(self.watchers):
            self._write(conn, line)

    def _write(self, conn: socket.socket, data: bytes) -> bool:
        """Send ``data`` on ``conn``; a peer that does not read for :data:`WRITE_TIMEOUT_S`
        (or is gone) is dropped, so one stuck client cannot stall the agent's loop."""
        try:
            conn.settimeout(WRITE_TIMEOUT_S)
            conn.sendall(data)
            conn.setblocking(False)
            return True
        except OSError:
            self._drop(conn)
            return False

    def close(self) -> None:
        """Close every connection and the listener; remove the socket file."""
        for conn in list(self.conns):
            self._drop(conn)
        self.loop.unwatch(self.sock)
        self.sock.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def _accept(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        conn.setblocking(False)
        self.conns[conn] = bytearray()
        self.loop.watch(conn, lambda c=conn: self._read(c))

    def _drop(self, conn: socket.socket) -> None:
        self.loop.unwatch(conn)
        self.conns.pop(conn, None)
        if conn in self.watchers:
            self.watchers.remove(conn)
        conn.close()

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(MAX_LINE_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        buf = self.conns[conn]
        buf += data
        while (end := buf.find(b"\n")) >= 0:
            line = bytes(buf[:end])
            del buf[: end + 1]
            reply = self.answer(line, conn)
            if not self._write(conn, json.dumps(reply).encode() + b"\n"):
                return
        if len(buf) > MAX_LINE_BYTES:
            self._drop(conn)

    def answer(self, line: bytes, conn: socket.socket | None = None) -> dict:
        """The reply to one request line from ``conn`` (never raises). ``watch`` makes ``conn``
        an event stream: after its reply every event the agent reports is pushed to it as one
        line (:meth:`push`), and the agent keeps none of them for ``events``."""
        try:
            try:
                req = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise InvalidInput("request", f"must be one JSON object per line ({err.msg})") from None
            op, parsed = parse_request(req)
            if op == "watch":
                if conn is None:
                    raise InvalidInput("op", "watch needs a connection to push events to")
                if conn not in self.watchers:
                    self.watchers.append(conn)
                return {"ok": True}
            return {"ok": True, **self.handle(op, parsed)}
        except InvalidInput as err:
            return {"ok": False, "error": f"{err.field}: {err.message}"}
        except Exception as err:  # noqa: BLE001 - the agent must keep serving
            return {"ok": False, "error": f"internal: {type(err).__name__}: {err}"}


# ---- client (in the run driver) -----------------------------------------------------------

"""A small single-threaded event loop for the host agent: sockets plus ns timers.

asyncio and epoll wait in whole milliseconds; the agent paces packets a few hundred µs apart,
so this loop waits with ``select`` (µs timeouts; the kernel's timer slack, 50 µs by default,
bounds the precision) and keeps its timers on ``time.monotonic_ns``.
"""

from __future__ import annotations

import heapq
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

MAX_WAIT_S = 0.05  # wake at least this often, so a stop request is seen promptly


class Timer:
    """Handle of a scheduled call; :meth:`cancel` makes it a no-op."""

    __slots__ = ("when_ns", "fn", "args", "cancelled")

    def __init__(self, when_ns: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when_ns = when_ns
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run this call (idempotent)."""
        self.cancelled = True


class Loop:
    """Sockets (read/write callbacks) and timers on ``time.monotonic_ns``; run by :meth:`run`."""

    def __init__(self) -> None:
        self._sel = selectors.SelectSelector()
        self._timers: list[tuple[int, int, Timer]] = []
        self._seq = 0
        self.running = False

    @staticmethod
    def now() -> int:
        """Monotonic time, ns."""
        return time.monotonic_ns()

    def at(self, when_ns: int, fn: Callable[..., Any], *args: Any) -> Timer:
        """Call ``fn(*args)`` at monotonic time ``when_ns`` (or as soon as possible after)."""
        timer = Timer(when_ns, fn, args)
        self._seq += 1
        heapq.heappush(self._timers, (when_ns, self._seq, timer))
        return timer

    def after(self, delay_ns: int, fn: Callable[..., Any], *args: Any) -> Timer:
        """Call ``fn(*args)`` ``delay_ns`` from now."""
        return self.at(time.monotonic_ns() + delay_ns, fn, *args)

    def watch(self, sock: socket.socket, on_read: Callable[[], None] | None,
              on_write: Callable[[], None] | None = None) -> None:
        """Call ``on_read``/``on_write`` when ``sock`` is readable/writable (None: not watched);
        both None stops watching."""
        events = (selectors.EVENT_READ if on_read else 0) | (selectors.EVENT_WRITE if on_write else 0)
        key = self._sel.get_map().get(sock.fileno()) if sock.fileno() >= 0 else None
        if key is not None:
            if events:
                self._sel.modify(sock, events, (on_read, on_write))
            else:
                self._sel.unregister(sock)
        elif events:
            self._sel.register(sock, events, (on_read, on_write))

    def unwatch(self, sock: socket.socket) -> None:
        """Stop watching ``sock`` (no-op if it is not watched or already closed)."""
        try:
            self._sel.unregister(sock)
        except (KeyError, ValueError):
            pass

    def run(self) -> None:
        """Dispatch socket events and timers until :attr:`running` turns false."""
        self.running = True
        timers = self._timers
        while self.running:
            now = time.monotonic_ns()
            while timers and timers[0][0] <= now:
                timer = heapq.heappop(timers)[2]
                if not timer.cancelled:
                    timer.fn(*timer.args)
                now = time.monotonic_ns()
            wait = MAX_WAIT_S
            if timers:
                wait = min(wait, max(0, timers[0][0] - now) / 1e9)
            for key, events in self._sel.select(wait):
                on_read, on_write = key.data
                if events & selectors.EVENT_READ and on_read:
                    on_read()
                if events & selectors.EVENT_WRITE and on_write and key.fd in self._sel.get_map():
                    on_write()

    def close(self) -> None:
        """Release the selector."""
        self._sel.close()

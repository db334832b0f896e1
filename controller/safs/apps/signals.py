"""Turn SIGINT/SIGTERM into a :class:`threading.Event` without the signal handler deadlock."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGINT or SIGTERM while the block runs; restore the previous handlers.

    The handler sets the event from a new thread: Python runs handlers in the main thread,
    which may hold the event's (non-reentrant) lock inside ``stop.wait()`` at that moment, and
    a ``stop.set()`` there would wait for itself forever (a ``safs controller`` polling every
    1 ms hung on 1 % of SIGTERMs that way).
    """
    def handler(signum: int, frame: object) -> None:
        threading.Thread(target=stop.set, name="stop-on-signal", daemon=True).start()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)

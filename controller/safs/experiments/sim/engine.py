"""Discrete-event engine: an integer-nanosecond event loop on a binary heap.

Events are ``(time_ns, seq, fn, arg)`` tuples; ``seq`` grows by one per scheduled event, so
events at the same time run in the order they were scheduled (FIFO) and a run is fully
deterministic. One event is one callback taken from the queue and run as ``fn(arg)``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

from safs.core.errors import InvalidInput


class Engine:
    """The simulator clock and event queue.

    Attributes:
        now: current simulated time in ns (int); starts at 0.
        events: number of callbacks run so far.
        rng: the simulation's only random stream, ``random.Random(seed)``.

    Args:
        seed: seed of :attr:`rng` (int).
    """

    __slots__ = ("now", "events", "rng", "_queue", "_seq", "_stopped")

    def __init__(self, seed: int = 0) -> None:
        self.now = 0
        self.events = 0
        self.rng = random.Random(seed)
        self._queue: list[tuple[int, int, Callable[[Any], None], Any]] = []
        self._seq = 0
        self._stopped = False

    def at(self, t_ns: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at absolute time ``t_ns`` (int ns).

        Raises:
            InvalidInput: ``t_ns`` is earlier than :attr:`now` (the past cannot be scheduled).
        """
        if t_ns < self.now:
            raise InvalidInput("t_ns", f"must be >= now ({self.now} ns), got {t_ns}")
        self._seq += 1
        heappush(self._queue, (t_ns, self._seq, fn, arg))

    def after(self, dt_ns: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` ``dt_ns`` >= 0 ns from now.

        Raises:
            InvalidInput: ``dt_ns`` is negative.
        """
        if dt_ns < 0:
            raise InvalidInput("dt_ns", f"must be >= 0, got {dt_ns}")
        self._seq += 1
        heappush(self._queue, (self.now + dt_ns, self._seq, fn, arg))

    def stop(self) -> None:
        """Make :meth:`run` return after the current callback (events left stay queued)."""
        self._stopped = True

    def pending(self) -> int:
        """Number of events still queued."""
        return len(self._queue)

    def run(self, until_ns: int) -> int:
        """Run events in time order up to and including ``until_ns``, or until :meth:`stop`.

        Returns the time reached: ``until_ns`` when an event lies beyond the horizon (the clock
        is advanced to it), else the time of the last event run (stopped, or queue empty).
        """
        self._stopped = False
        queue = self._queue
        pop = heappop
        n = 0
        try:
            while queue:
                item = queue[0]
                t = item[0]
                if t > until_ns:
                    self.now = until_ns
                    break
                pop(queue)
                self.now = t
                item[2](item[3])
                n += 1
                if self._stopped:
                    break
            return self.now
        finally:
            self.events += n

"""A contention-free network: every flow takes ``size*8/rate + path delay``.

Used by tests and by the runner to compute no-contention references (ideal TPOT, ideal
iteration time). It has its own event heap; nothing is shared between flows.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from safs.errors import InvalidInput
from safs.workloads.api import FlowSpec, Workload

if TYPE_CHECKING:
    from safs.topology import Topology

NS_PER_S = 1_000_000_000


def transfer_ns(size_bytes: int, rate_bps: int) -> int:
    """Serialisation time of ``size_bytes`` at ``rate_bps``, rounded up to whole ns."""
    return -(-size_bytes * 8 * NS_PER_S // rate_bps)


@dataclass
class IdealFlow:
    """A flow carried by :class:`IdealNetwork` (times in ns)."""

    flow_id: int
    spec: FlowSpec
    start_ns: int
    finish_ns: int


class IdealNetwork:
    """:class:`~safs.workloads.api.WorkloadAPI` without contention.

    Args:
        topology: if given, a flow runs at min(sender link, receiver link) rate and takes the
            sum of link delays along its route; hosts must exist in it.
        rate_bps: rate used when ``topology`` is None (bit/s, > 0).
        delay_ns: one-way delay used when ``topology`` is None (ns, >= 0).

    Raises:
        InvalidInput: non-positive rate or negative delay; unknown host in a flow.
    """

    def __init__(self, topology: Topology | None = None, rate_bps: int = 100_000_000_000,
                 delay_ns: int = 0) -> None:
        if rate_bps <= 0:
            raise InvalidInput("rate_bps", f"must be > 0, got {rate_bps}")
        if delay_ns < 0:
            raise InvalidInput("delay_ns", f"must be >= 0, got {delay_ns}")
        self.topology = topology
        self.rate_bps = rate_bps
        self.delay_ns = delay_ns
        self.flows: list[IdealFlow] = []
        self._now = 0
        self._seq = 0
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._path_cache: dict[tuple[str, str], tuple[int, int]] = {}

    def now(self) -> int:
        return self._now

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None:
        if t_ns < self._now:
            raise InvalidInput("t_ns", f"must be >= now ({self._now} ns), got {t_ns}")
        self._seq += 1
        heapq.heappush(self._heap, (t_ns, self._seq, fn))

    def path_rate_delay(self, sender: str, receiver: str) -> tuple[int, int]:
        """``(rate_bps, delay_ns)`` a flow from ``sender`` to ``receiver`` gets."""
        if self.topology is None:
            return self.rate_bps, self.delay_ns
        key = (sender, receiver)
        if key not in self._path_cache:
            topo = self.topology
            path = topo.path(sender, receiver)
            delay = sum(topo.link(a, b)["delay_ns"] for a, b in zip(path, path[1:]))
            rate = min(topo.host_link_bps(sender), topo.host_link_bps(receiver))
            self._path_cache[key] = (rate, delay)
        return self._path_cache[key]

    def start_flow(self, spec: FlowSpec, on_done: Callable[[int], None]) -> int:
        rate, delay = self.path_rate_delay(spec.sender, spec.receiver)
        finish = self._now + transfer_ns(spec.size_bytes, rate) + delay
        flow = IdealFlow(len(self.flows) + 1, spec, self._now, finish)
        self.flows.append(flow)
        self.call_at(finish, lambda: on_done(finish))
        return flow.flow_id

    def run(self, workload: Workload | None = None, until_ns: int | None = None, max_events: int = 10_000_000) -> int:
        """Start ``workload`` (if given) and run events until the heap is empty, ``until_ns``
        is passed, or the workload is done. Returns the time reached (ns).

        Raises:
            InvalidInput: more than ``max_events`` events (a workload that never ends).
        """
        if workload is not None:
            workload.start(self)
        events = 0
        while self._heap:
            if workload is not None and workload.done():
                break
            t, _, fn = self._heap[0]
            if until_ns is not None and t > until_ns:
                self._now = until_ns
                break
            heapq.heappop(self._heap)
            self._now = t
            fn()
            events += 1
            if events > max_events:
                raise InvalidInput("max_events", f"workload did not finish within {max_events} events")
        return self._now

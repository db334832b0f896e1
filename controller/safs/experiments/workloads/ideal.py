"""A contention-free network: every flow takes its uncontended packet-level transfer time
(:meth:`safs.core.topology.Topology.min_transfer_ns`; without a topology ``size*8/rate + delay``).

Used by tests and by the runner to compute no-contention references (ideal TPOT, ideal
iteration time). It has its own event heap; nothing is shared between flows.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from safs.core.errors import InvalidInput
from safs.experiments.workloads.api import FlowSpec, Workload

if TYPE_CHECKING:
    from safs.core.topology import Topology

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
    """:class:`~safs.experiments.workloads.api.WorkloadAPI` without contention.

    Args:
        topology: if given, a flow runs at min(sender link, receiver link) rate and takes the
            sum of link delays along its route; hosts must exist in it.
        rate_bps: rate used when ``topology`` is None (bit/s, > 0).
        delay_ns: one-way delay used when ``topology`` is None (ns, >= 0).
        keep_flows: keep every :class:`IdealFlow` in ``flows`` (False for reference runs, whose
            memory would otherwise grow with their length).

    Raises:
        InvalidInput: non-positive rate or negative delay; unknown host in a flow.
    """

    def __init__(self, topology: Topology | None = None, rate_bps: int = 100_000_000_000,
                 delay_ns: int = 0, keep_flows: bool = True) -> None:
        if rate_bps <= 0:
            raise InvalidInput("rate_bps", f"must be > 0, got {rate_bps}")
        if delay_ns < 0:
            raise InvalidInput("delay_ns", f"must be >= 0, got {delay_ns}")
        self.topology = topology
        self.rate_bps = rate_bps
        self.delay_ns = delay_ns
        self.flows: list[IdealFlow] = []  # every flow carried, when keep_flows (tests look at them)
        self.keep_flows = keep_flows
        self._count = 0
        self._now = 0
        self._seq = 0
        self._heap: list[tuple[int, int, Callable[[], None]]] = []

    def now(self) -> int:
        return self._now

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None:
        if t_ns < self._now:
            raise InvalidInput("t_ns", f"must be >= now ({self._now} ns), got {t_ns}")
        self._seq += 1
        heapq.heappush(self._heap, (t_ns, self._seq, fn))

    def transfer_ns(self, sender: str, receiver: str, size_bytes: int) -> int:
        """Time a flow of ``size_bytes`` from ``sender`` to ``receiver`` takes here, ns."""
        if self.topology is None:
            return transfer_ns(size_bytes, self.rate_bps) + self.delay_ns
        return self.topology.min_transfer_ns(sender, receiver, size_bytes)

    def start_flow(self, spec: FlowSpec, on_done: Callable[[int], None], send_at_ns: int | None = None) -> int:
        start = self._now if send_at_ns is None else send_at_ns
        if start < self._now:
            raise InvalidInput("send_at_ns", f"must be >= now ({self._now} ns), got {start}")
        finish = start + self.transfer_ns(spec.sender, spec.receiver, spec.size_bytes)
        self._count += 1
        flow = IdealFlow(self._count, spec, start, finish)
        if self.keep_flows:
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

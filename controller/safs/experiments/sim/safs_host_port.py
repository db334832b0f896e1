"""The SAFS host NIC queue of the simulator: the sender's own packets leave in slack order.

A SAFS host's dependencies are granted by the ToRs of different receivers, so the grants of
one sender can add up to more than its uplink; with a FIFO NIC the excess waits in one queue and
a short, urgent transfer waits behind every earlier packet of slack-rich ones (at fabric scale,
tests in docs/evaluation.md "Fabric scale", host NIC queues reached megabytes). A host stack
that knows each transfer's no-bubble timestamp serves its NIC the way the switches serve their
ports: SAFS control messages first, then DATA in order of the latest start time the packet
carries (EDF over the host's own dependencies), non-SAFS packets as if due when queued (so they
are not starved). This is a host qdisc (as Linux ``sch_fq``/``mqprio`` are), not a NIC feature
the paper assumes; policy ``safs-host-edf`` uses it, ``safs`` keeps the FIFO NIC.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

from safs.core.packet import Packet
from safs.core.protocol import MsgType
from safs.core.timebase import HALF, diff, wrap
from safs.experiments.sim.engine import Engine
from safs.experiments.sim.network import Port

_DATA = int(MsgType.DATA)


class SafsHostPort(Port):
    """A host NIC (``strict=False`` port) whose queue is ordered by the packet's urgency (module
    docstring); switch ports are plain :class:`Port` s (see :func:`safs_host_port_factory`).
    Same constructor as :class:`Port`; the buffer is unbounded as every host NIC's."""

    __slots__ = ("heap", "_order")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.heap: list[tuple[int, int, Packet]] = []
        self._order = 0  # FIFO among equal keys

    def send(self, pkt: Packet) -> bool:
        """Transmit at once when idle, else queue by urgency; never drops."""
        engine = self.engine
        now = engine.now
        if not self.heap and now >= self.busy_until:
            self._transmit(pkt, now)
            return True
        if pkt.safs_type == _DATA:
            key = now + diff(pkt.ts, wrap(now))
        elif pkt.safs_type:
            key = now - HALF  # REQUEST, DONE: ahead of every DATA
        else:
            key = now
        self._order += 1
        heappush(self.heap, (key, self._order, pkt))
        self.queued_bytes += pkt.size
        self.queued_packets += 1
        self._schedule_wake()
        return True

    def _on_free(self, _: Any) -> None:
        self.wake_pending = False
        if not self.heap:
            return
        _, _, pkt = heappop(self.heap)
        self.queued_bytes -= pkt.size
        self.queued_packets -= 1
        self._transmit(pkt, self.engine.now)
        if self.heap:
            self._schedule_wake()



def safs_host_port_factory(engine: Engine, owner: str, number: int, rate_bps: int, delay_ns: int, buffer: int,
                           strict: bool, egress: Callable[[Packet, int, int], None] | None = None,
                           dt_alpha: float = 0.0) -> Port:
    """A ``make_port`` for :func:`safs.experiments.sim.network.build_network`: host NICs
    (``strict=False``) are :class:`SafsHostPort` s, switch ports plain :class:`Port` s."""
    cls = Port if strict else SafsHostPort
    return cls(engine, owner, number, rate_bps, delay_ns, buffer, strict, egress, dt_alpha)

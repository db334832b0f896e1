"""The pFabric switch port of the simulator (queue discipline of :mod:`safs.hosts.pfabric`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from safs.core.errors import InvalidInput
from safs.core.packet import Packet
from safs.experiments.sim.engine import Engine
from safs.experiments.sim.network import Port


class PfabricPort(Port):
    """A pFabric egress port: one buffer in arrival order, priority = ``pkt.remaining`` (smaller
    first), priority scheduling with starvation prevention and priority dropping (see the module
    docstring; paper Section 4.1).

    Same constructor as :class:`safs.experiments.sim.network.Port` (``strict`` and ``dt_alpha`` are kept
    but unused: there is one queue). Drops are counted in ``drops[0]``. The buffer holds a few
    tens of packets, so enqueue and dequeue are linear scans.
    """

    __slots__ = ("buf",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.buf: list[Packet] = []

    def send(self, pkt: Packet) -> bool:
        """Enqueue ``pkt``; False when it is the packet priority dropping discards."""
        engine = self.engine
        now = engine.now
        buf = self.buf
        size = pkt.size
        if not buf and now >= self.busy_until:
            if self.egress is not None:
                self.egress(pkt, self.number, 0)
            self._transmit(pkt, now)
            return True
        if self.queued_bytes + size > self.buffer_bytes and not self._make_room(pkt):
            self.drops[0] += 1
            self.drop_bytes += size
            return False
        if self.egress is not None:
            self.egress(pkt, self.number, len(buf))
        buf.append(pkt)
        self.queued_bytes += size
        self.queued_packets += 1
        self._schedule_wake()
        return True

    def _make_room(self, pkt: Packet) -> bool:
        """Drop buffered packets of lower priority than ``pkt`` (lowest first, latest first
        among equals) until it fits; False (nothing dropped) when they cannot free enough."""
        buf = self.buf
        prio = pkt.remaining
        need = self.queued_bytes + pkt.size - self.buffer_bytes
        if sum(p.size for p in buf if p.remaining > prio) < need:
            return False
        while need > 0:
            worst_i, worst = 0, -1
            for i, p in enumerate(buf):
                if p.remaining >= worst:
                    worst_i, worst = i, p.remaining
            victim = buf.pop(worst_i)
            need -= victim.size
            self.queued_bytes -= victim.size
            self.queued_packets -= 1
            self.drops[0] += 1
            self.drop_bytes += victim.size
        return True

    def _on_free(self, _: Any) -> None:
        self.wake_pending = False
        buf = self.buf
        if not buf:
            return
        best = buf[0]
        best_r = best.remaining
        for p in buf:
            if p.remaining < best_r:
                best, best_r = p, p.remaining
        fid, dst = best.flow_id, best.dst
        for i, p in enumerate(buf):  # noqa: B007 (i, the packet found, is used after the loop)
            if p.flow_id == fid and p.dst == dst:
                break
        pkt = buf.pop(i)
        self.queued_bytes -= pkt.size
        self.queued_packets -= 1
        self._transmit(pkt, self.engine.now)
        if buf:
            self._schedule_wake()



def pfabric_port_factory(buffer_bytes: int) -> Callable[..., Port]:
    """A ``make_port`` for :func:`safs.experiments.sim.network.build_network`: :class:`PfabricPort` s, with
    ``buffer_bytes`` per switch port (``strict`` ports) and the host NIC's unbounded buffer.

    Raises:
        InvalidInput: ``buffer_bytes`` < 1.
    """
    if isinstance(buffer_bytes, bool) or not isinstance(buffer_bytes, int) or buffer_bytes < 1:
        raise InvalidInput("pfabric.buffer_bytes", f"must be an integer >= 1, got {buffer_bytes!r}")

    def make(engine: Engine, owner: str, number: int, rate_bps: int, delay_ns: int, buffer: int, strict: bool,
             egress: Callable[[Packet, int, int], None] | None = None, dt_alpha: float = 0.0) -> Port:
        return PfabricPort(engine, owner, number, rate_bps, delay_ns, buffer_bytes if strict else buffer, strict,
                           egress, dt_alpha)

    return make

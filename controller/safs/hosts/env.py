"""What a transport endpoint sees of the world: a clock with timers and its host's NIC.

Endpoints in :mod:`safs.hosts` are state machines over these two interfaces and nothing else,
so one implementation runs in the packet simulator (:class:`safs.experiments.sim.engine.Engine`
and :class:`safs.experiments.sim.network.Host`) and in the Mininet host agent
(:class:`safs.apps.agent.loop.Loop` and its UDP socket).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from safs.core.packet import Packet


class Clock(Protocol):
    """Time in integer ns and one-shot timers.

    ``now`` is the endpoint's time (the simulator's clock, or the host's monotonic clock);
    timers are never cancelled: endpoints guard each callback with a token or a state check.
    """

    @property
    def now(self) -> int: ...

    def at(self, t_ns: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at ``t_ns`` (>= now)."""

    def after(self, dt_ns: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` ``dt_ns`` (>= 0) from now."""


class Nic(Protocol):
    """The host's network interface: FIFO transmission at ``rate_bps`` (bit/s)."""

    rate_bps: int

    def send(self, pkt: Packet) -> bool:
        """Hand ``pkt`` to the link; False when it was dropped or could not be queued."""


class HostPort(Protocol):
    """The host an endpoint runs on: its IPv4 address (int) and NIC."""

    name: str
    ip: int
    nic: Nic

"""Telemetry-driven background share: each receiver port keeps a part of its rate from the
dependencies' shares for traffic without a grant (class 0) only while that traffic is there.

A static ``SchedulerConfig.background_share`` is taken from every receiver port whether or not
background uses it (docs/dataplane.md measured +47-58% TPOT for 0.2-0.3 on AFD 16A2F). The
adapter reads the counters the switch already keeps, once per telemetry period (1 s in
``safs controller``, as Aegis reads its switches; a scenario setting in the simulator), per
host-facing port of every ToR:

- ``port_tx_bytes[port]``: everything the port sent;
- ``dep_bytes[slot]`` of the dependencies whose receiver is on the port: their granted bytes
  (DATA without a grant, at the default rate, counts as background here);
- ``ecn_marked[port]``: packets marked CE (the port's queue above the ECN threshold).

Background rate = (sent - granted) bytes over the period. Rule per port and period, between
``background_share`` (floor) and ``background_share_max`` (ceiling), ``background_share_step``
at a time (an additive step each way: the share moves at most one step per period):

- background above 1% of the link and ECN marks: one step up (background is there and queues);
- background below the share less one step (or the floor): one step down (the reserve is not
  used);
- otherwise unchanged.

A change rewrites the port's ``port_share`` entries (3 x 128 updates: about 0.1 s of this
controller's CPU per change under the ``tofino`` control profile, charged in the simulator).
The shares are soft state: after a controller restart every port starts from the floor.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from safs.core import p4names as n
from safs.core.errors import InvalidInput
from safs.core.scheduler import NS_PER_S, Scheduler

_log = logging.getLogger(__name__)

ACTIVE_FRACTION = 0.01  # background below 1% of the link counts as absent


@dataclass
class _PortCounters:
    """Cumulative counters of one receiver port at the last read."""

    time_ns: int
    tx_bytes: int
    ecn_marks: int


class BackgroundShareAdapter:
    """Adapts every receiver port's background share of ``scheduler`` from its counters.

    Args:
        scheduler: the scheduler whose ports it adapts (``config.background_share_max`` set).

    Raises:
        InvalidInput: ``background_share_max`` is not set (field ``background_share_max``).
    """

    def __init__(self, scheduler: Scheduler) -> None:
        cfg = scheduler.config
        if cfg.background_share_max is None:
            raise InvalidInput("background_share_max", "not set: nothing to adapt")
        self._sched = scheduler
        self.floor = cfg.background_share
        self.ceiling = cfg.background_share_max
        self.step = cfg.background_share_step
        self._last: dict[tuple[str, int], _PortCounters] = {}
        self._slot_bytes: dict[tuple[str, int], int] = {}  # (ToR, slot) -> dep_bytes at the last read
        self.changes = 0  # share changes written
        self.updates = 0  # port_share updates they took

    def step_all(self, now_ns: int) -> dict[tuple[str, int], float]:
        """Read every receiver port's counters, move its share (module docstring) and write
        what changed; returns ``{(switch, port): new share}`` of the ports that changed.

        Raises:
            TargetError: a switch refused the writes. TargetConnectionError: a read failed.
        """
        sched = self._sched
        by_switch: dict[str, list[tuple[int, str]]] = {}
        for sw, port, host in sched.receiver_ports():
            by_switch.setdefault(sw, []).append((port, host))
        changed: dict[tuple[str, int], float] = {}
        for sw, ports in by_switch.items():
            target = sched.target(sw)
            cells = [port for port, _ in ports]
            sent = target.read_counter_cells(n.PORT_TX_BYTES, cells)
            marks = target.read_counter_cells(n.ECN_MARKED, cells)
            granted = self._granted_bytes(sw, sched.granted_slots(sw))
            for (port, host), tx, ecn in zip(ports, sent, marks):
                share = self._port_step(sw, port, host, now_ns, tx.byte_count, ecn.packet_count,
                                        granted.get(port, 0))
                if share is not None:
                    self.updates += sched.set_background_share(sw, port, share)
                    self.changes += 1
                    changed[(sw, port)] = share
        return changed

    def _granted_bytes(self, sw: str, slots: dict[int, list[int]]) -> dict[int, int]:
        """Port -> dep_bytes counted since the last read over the slots granted there now."""
        flat = [(port, slot) for port, ss in slots.items() for slot in ss]
        if not flat:
            return {}
        values = self._sched.target(sw).read_counter_cells(n.DEP_BYTES, [slot for _, slot in flat])
        out: dict[int, int] = {}
        for (port, slot), value in zip(flat, values):
            last = self._slot_bytes.get((sw, slot), value.byte_count)
            self._slot_bytes[(sw, slot)] = value.byte_count
            out[port] = out.get(port, 0) + max(0, value.byte_count - last)
        return out

    def _port_step(self, sw: str, port: int, host: str, now_ns: int, tx_bytes: int, ecn_marks: int,
                   granted: int) -> float | None:
        last = self._last.get((sw, port))
        self._last[(sw, port)] = _PortCounters(now_ns, tx_bytes, ecn_marks)
        if last is None or now_ns <= last.time_ns:
            return None
        link_bps = self._sched.host_link_bps(host)
        background = max(0, tx_bytes - last.tx_bytes - granted) * 8 * NS_PER_S / (now_ns - last.time_ns) / link_bps
        current = self._sched.background_share(sw, port)
        if background > ACTIVE_FRACTION and ecn_marks > last.ecn_marks:
            share = min(self.ceiling, current + self.step)
        elif background < max(self.floor, current - self.step):
            share = max(self.floor, current - self.step)
        else:
            return None
        if abs(share - current) < 1e-9:
            return None
        _log.info("%s port %d (%s): background %.1f%% of the link, %d ECN marks: background share %.2f -> %.2f",
                  sw, port, host, 100 * background, ecn_marks - last.ecn_marks, current, share)
        return share

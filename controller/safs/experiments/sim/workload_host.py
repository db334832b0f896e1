"""The part of :class:`safs.experiments.workloads.api.WorkloadAPI` every simulator engine shares."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from safs.core.errors import InvalidInput
from safs.experiments.sim.engine import Engine


class EngineWorkloadHost:
    """``now`` and ``call_at`` on an :class:`Engine`, and the stop rule: the engine stops as soon
    as ``workload.done()`` turns true, checked after every workload callback.

    Subclasses (:class:`safs.experiments.sim.simulation.Simulation`,
    :class:`safs.experiments.sim.oracle.OracleNetwork`) set
    ``engine`` and ``topology``, call :meth:`_check_done` after each flow completion and add
    ``start_flow`` (which checks its arguments with :meth:`_flow_start`).
    """

    engine: Engine
    topology: Any  # safs.core.topology.Topology
    workload: Any = None
    workload_done: bool = False

    def now(self) -> int:
        """Current fabric time in ns (simulation time; not wrapped)."""
        return self.engine.now

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None:
        """Run ``fn()`` at ``t_ns`` (>= now). Raises InvalidInput for a time in the past."""
        self.engine.at(t_ns, self._run_callback, fn)

    def _flow_start(self, spec: Any, send_at_ns: int | None) -> int:
        """The start time (ns) of flow ``spec`` (a FlowSpec) sent at ``send_at_ns`` (None: now).

        Raises:
            InvalidInput: ``send_at_ns`` not an integer >= now; sender or receiver not a host of
                the topology (field ``flow.sender`` / ``flow.receiver``).
        """
        now = self.engine.now
        start = now if send_at_ns is None else send_at_ns
        if isinstance(start, bool) or not isinstance(start, int) or start < now:
            raise InvalidInput("send_at_ns", f"must be an integer ns >= now ({now}), got {send_at_ns!r}")
        for fname in ("sender", "receiver"):
            if not self.topology.is_host(getattr(spec, fname)):
                raise InvalidInput(f"flow.{fname}", f"unknown host {getattr(spec, fname)!r}")
        return start

    def _check_done(self) -> None:
        if not self.workload_done and self.workload is not None and self.workload.done():
            self.workload_done = True
            self.engine.stop()

    def _run_callback(self, fn: Callable[[], None]) -> None:
        fn()
        self._check_done()

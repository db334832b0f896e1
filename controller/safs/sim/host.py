"""The part of :class:`safs.workloads.api.WorkloadAPI` every simulator engine shares."""

from __future__ import annotations

from typing import Any, Callable

from safs.sim.engine import Engine


class EngineWorkloadHost:
    """``now`` and ``call_at`` on an :class:`Engine`, and the stop rule: the engine stops as soon
    as ``workload.done()`` turns true, checked after every workload callback.

    Subclasses (:class:`safs.sim.run.Simulation`, :class:`safs.sim.oracle.OracleNetwork`) set
    ``engine``, call :meth:`_check_done` after each flow completion and add ``start_flow``.
    """

    engine: Engine
    workload: Any = None
    workload_done: bool = False

    def now(self) -> int:
        """Current fabric time in ns (simulation time; not wrapped)."""
        return self.engine.now

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None:
        """Run ``fn()`` at ``t_ns`` (>= now). Raises InvalidInput for a time in the past."""
        self.engine.at(t_ns, self._run_callback, fn)

    def _check_done(self) -> None:
        if not self.workload_done and self.workload is not None and self.workload.done():
            self.workload_done = True
            self.engine.stop()

    def _run_callback(self, fn: Callable[[], None]) -> None:
        fn()
        self._check_done()

"""The control plane's real cost in the simulator: every switch write, counter read, digest and
hint takes the time a named control profile (:mod:`safs.experiments.control_profiles`) says.

Model (docs/simulator.md, "Control plane cost"):

- **One controller process.** A hint it handles, a digest it merges, a counter read it issues
  and the encoding of each write request take controller time on one timeline
  (:attr:`SimControlPlane.cpu_free_ns`): work queues behind earlier work.
- **One writer per switch.** A write request leaves the controller when it is encoded, waits
  until the switch applied the previous request, takes ``switch_request_ns + n *
  switch_update_ns`` there, and its ``n`` updates take effect in the switch's pipeline model at
  the end, in order. The time an update waits from the scheduler's decision to its effect is
  its *write delay*.
- **Digests** reach the controller ``digest_latency_ns`` after the switch generated them.
- **Reads** (counter cells) cost ``read_request_ns + n * read_cell_ns`` of controller time;
  the values returned are those at the time of the call (optimistic by the read's duration).
- **Setup** (routes, receiver ports, share tables: state installed before the workload
  starts) is applied at once and counted apart (:attr:`ControlStats.setup_updates`).

The scheduler itself stays synchronous: it decides at the time the simulator calls it, and
its shadow of the switch assumes every write lands; the costs only move when the writes take
effect. Writes the pipeline model refuses when they land are counted in
:attr:`ControlStats.failed_updates`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from safs.core.errors import TargetError
from safs.core.scheduler import BATCH_OVERHEAD_BYTES, METER_UPDATE_BYTES, TABLE_UPDATE_BYTES
from safs.core.target import CounterValue, MeterConfig, RequestDigest, Update
from safs.experiments.control_profiles import ControlProfile
from safs.experiments.sim.engine import Engine
from safs.targets.pipeline_model import PipelineModel

WINDOW_NS = 10_000_000  # the window of the peak write-rate figure (10 ms)


@dataclass
class ControlStats:
    """What the simulated control plane did (all switches unless noted).

    Attributes:
        requested_updates: updates the scheduler asked for after setup.
        updates: updates applied after setup.  failed_updates: refused when they landed.
        setup_updates: updates of the initial installation (applied at once, not charged).
        write_requests: write requests after setup.  write_bytes: their encoded size
            (protobuf estimate, :mod:`safs.core.scheduler`).
        applied_ns: switch -> apply time of every update after setup (ns, sorted).
        delays_ns: write delay of every update after setup (ns).
        digests: digests delivered to the controller.  hints: hint calls handled.
        reads: counter-read requests.  cpu_busy_ns: controller time spent.
    """

    requested_updates: int = 0
    updates: int = 0
    failed_updates: int = 0
    setup_updates: int = 0
    write_requests: int = 0
    write_bytes: int = 0
    applied_ns: dict[str, list[int]] = field(default_factory=dict)
    delays_ns: list[int] = field(default_factory=list)
    digests: int = 0
    hints: int = 0
    reads: int = 0
    cpu_busy_ns: int = 0

    def updates_per_s(self, start_ns: int, end_ns: int) -> float:
        """The largest per-switch average write rate over ``[start_ns, end_ns)`` (updates/s)."""
        if end_ns <= start_ns:
            return float("nan")
        most = max((bisect_left(t, end_ns) - bisect_left(t, start_ns) for t in self.applied_ns.values()), default=0)
        return most * 1e9 / (end_ns - start_ns)

    def updates_per_s_peak(self, window_ns: int = WINDOW_NS) -> float:
        """The most updates applied to one switch in any ``window_ns`` window, per second."""
        best = 0
        for times in self.applied_ns.values():
            j = 0
            for i, t in enumerate(times):
                while times[j] <= t - window_ns:
                    j += 1
                best = max(best, i - j + 1)
        return best * 1e9 / window_ns

    def write_delay_p99_ns(self) -> float:
        """99th percentile of the write delay (ns); NaN without writes."""
        if not self.delays_ns:
            return float("nan")
        ordered = sorted(self.delays_ns)
        return float(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))])


class SimControlPlane:
    """The controller's and the switches' control timelines of one simulation run.

    Args:
        engine: the run's event loop (its ``now`` is fabric time).
        profile: the costs (:class:`ControlProfile`).
    """

    def __init__(self, engine: Engine, profile: ControlProfile) -> None:
        self.engine = engine
        self.profile = profile
        self.stats = ControlStats()
        self.cpu_free_ns = 0
        self.setup_done = False

    def charge_cpu(self, cost_ns: int) -> int:
        """Occupy the controller for ``cost_ns`` from now (or when it is free); returns the end."""
        start = max(self.engine.now, self.cpu_free_ns)
        self.cpu_free_ns = start + cost_ns
        self.stats.cpu_busy_ns += cost_ns
        return self.cpu_free_ns

    def hint(self, handler: Callable[[Any], None], arg: Any) -> None:
        """A hint call made now: it reaches the controller ``hint_rpc_ns`` later, waits there
        behind earlier controller work, takes ``hint_cpu_ns``, and then ``handler(arg)`` runs
        (the scheduler acting on it). The controller is not held while the call is in flight."""
        self.stats.hints += 1
        self.engine.after(self.profile.hint_rpc_ns, self._hint_arrived, (handler, arg))

    def _hint_arrived(self, job: tuple[Callable[[Any], None], Any]) -> None:
        handler, arg = job
        self.engine.at(self.charge_cpu(self.profile.hint_cpu_ns), handler, arg)

    def target(self, name: str, pipeline: PipelineModel) -> CostedTarget:
        """The :class:`Target` the scheduler writes ``pipeline`` (switch ``name``) through."""
        self.stats.applied_ns[name] = []
        return CostedTarget(self, name, pipeline)


class CostedTarget:
    """A :class:`PipelineModel` behind the simulated control plane (implements ``Target``)."""

    def __init__(self, plane: SimControlPlane, name: str, pipeline: PipelineModel) -> None:
        self.plane = plane
        self.name = name
        self.pipeline = pipeline
        self.writer_free_ns = 0
        self._pending = 0  # write requests queued, not yet applied (they apply in order)
        self._digests: list[tuple[int, RequestDigest]] = []

    def write(self, updates: Sequence[Update]) -> None:
        """Queue one write request; its updates take effect when the switch applied them."""
        plane, profile, stats = self.plane, self.plane.profile, self.plane.stats
        if not plane.setup_done:
            stats.setup_updates += len(updates)
            self.pipeline.write(updates)
            return
        n_upd = len(updates)
        stats.requested_updates += n_upd
        stats.write_requests += 1
        meters = sum(1 for u in updates if isinstance(u.entity, MeterConfig))
        stats.write_bytes += BATCH_OVERHEAD_BYTES + meters * METER_UPDATE_BYTES + (n_upd - meters) * TABLE_UPDATE_BYTES
        encoded = plane.charge_cpu(profile.write_request_cpu_ns + n_upd * profile.write_update_cpu_ns)
        start = max(encoded + profile.rpc_ns, self.writer_free_ns)
        done = start + profile.switch_request_ns + n_upd * profile.switch_update_ns
        self.writer_free_ns = done
        asked = plane.engine.now
        if done <= asked and not self._pending:  # a free control plane (ideal profile): apply now
            self._apply((asked, list(updates)))
        else:  # behind earlier requests, even when due now: the switch applies them in order
            self._pending += 1
            plane.engine.at(done, self._apply_queued, (asked, list(updates)))

    def _apply_queued(self, job: tuple[int, list[Update]]) -> None:
        self._pending -= 1
        self._apply(job)

    def _apply(self, job: tuple[int, list[Update]]) -> None:
        asked, updates = job
        now = self.plane.engine.now
        stats = self.plane.stats
        failed = 0
        try:
            self.pipeline.write(updates)
        except TargetError as err:
            failed = len(err.failures)
        stats.failed_updates += failed
        stats.updates += len(updates) - failed
        stats.applied_ns[self.name].extend([now] * (len(updates) - failed))
        stats.delays_ns.extend([now - asked] * len(updates))

    def read_counter(self, counter: str, index: int) -> CounterValue:
        """One counter cell (charged as a one-cell read)."""
        return self.read_counter_cells(counter, [index])[0]

    def read_counter_cells(self, counter: str, indices: Sequence[int]) -> list[CounterValue]:
        """Counter cells in one read request (charged to the controller)."""
        plane = self.plane
        if plane.setup_done:
            plane.stats.reads += 1
            plane.charge_cpu(plane.profile.read_request_ns + len(indices) * plane.profile.read_cell_ns)
        return self.pipeline.read_counter_cells(counter, indices)

    def set_clock_offset(self, offset_ns: int) -> None:
        """Set at setup (the controller does it before the workload starts)."""
        self.pipeline.set_clock_offset(offset_ns)

    def poll_digests(self) -> list[RequestDigest]:
        """Digests the switch generated at least ``digest_latency_ns`` ago."""
        plane = self.plane
        now = plane.engine.now
        for digest in self.pipeline.poll_digests():
            self._digests.append((now + plane.profile.digest_latency_ns, digest))
        ready = [d for t, d in self._digests if t <= now]
        if ready:
            self._digests = [(t, d) for t, d in self._digests if t > now]
            plane.stats.digests += len(ready)
            plane.charge_cpu(len(ready) * plane.profile.digest_cpu_ns)
        return ready

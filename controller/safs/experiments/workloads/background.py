"""Background traffic sharing the pipeline's bottleneck links.

Two sources, both emitting :class:`~safs.experiments.workloads.api.FlowSpec` with ``flow_class
"background"`` and ``no_bubble_ts_ns None`` (the runner sends them as non-SAFS DCTCP under
every policy):

* :class:`BulkFlows` -- 0..N persistent bulk flows from background hosts to the pipeline's
  receivers (flow ``i`` goes from ``senders[i % len(senders)]`` to
  ``receivers[i % len(receivers)]``). Each is restarted when it finishes, so it lasts until
  the pipeline workload is done.
* :class:`PoissonArrivals` -- flows arriving as a Poisson process at each receiver with
  offered load ``load`` (fraction of that receiver's link rate, in (0, 1]) and sizes drawn
  from a published distribution (:mod:`safs.core.distributions`). Mean inter-arrival
  gap at a receiver = mean size * 8 / (load * link rate); senders drawn uniformly from the
  background hosts.

:class:`WithBackground` runs a pipeline workload together with them; it is done when the
pipeline workload is done, and background sources stop starting flows at that point.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from safs.core.distributions import SizeDistribution
from safs.core.errors import InvalidInput
from safs.experiments.workloads.api import DependencySpec, FlowSpec, Workload, WorkloadAPI

NS_PER_S = 1_000_000_000
BULK_FLOW_BYTES = 1 << 36  # 64 GiB: longer than any run at 100 Gbit/s (5.5 s), restarted anyway
MAX_BULK_FLOWS = 64


class BulkFlows:
    """Persistent bulk flows (see module docstring).

    Args:
        count: number of flows, 0..64.
        senders: background host names (non-empty when count > 0).
        receivers: pipeline receiver host names (non-empty when count > 0).
        size_bytes: size of each flow instance (restarted when it finishes).

    Raises:
        InvalidInput: count out of range, no senders/receivers, or a sender that is also the
            receiver it would be paired with.
    """

    def __init__(self, count: int, senders: list[str], receivers: list[str], size_bytes: int = BULK_FLOW_BYTES) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_BULK_FLOWS:
            raise InvalidInput("background.bulk_flows", f"must be an integer in 0..{MAX_BULK_FLOWS}, got {count!r}")
        if count and (not senders or not receivers):
            raise InvalidInput("background.bulk_flows", "needs background hosts (named bg*) and pipeline receivers")
        self.pairs = [(senders[i % len(senders)], receivers[i % len(receivers)]) for i in range(count)]
        for s, r in self.pairs:
            if s == r:
                raise InvalidInput("background.bulk_flows", f"sender {s!r} is also a receiver")
        self.size_bytes = size_bytes
        self.stopped = False
        self.started = 0

    def start(self, api: WorkloadAPI) -> None:
        """Start every bulk flow now."""
        for i, (s, r) in enumerate(self.pairs):
            self._launch(api, i, s, r)

    def _launch(self, api: WorkloadAPI, i: int, s: str, r: str) -> None:
        if self.stopped:
            return
        self.started += 1
        spec = FlowSpec(s, r, self.size_bytes, None, f"bulk{i} {s}->{r}", "background")
        api.start_flow(spec, lambda _t: self._launch(api, i, s, r))


class PoissonArrivals:
    """Poisson background arrivals per receiver (see module docstring).

    Args:
        load: offered load per receiver link, fraction of its rate, in (0, 1].
        senders: background host names (non-empty).
        receivers: receiver host name -> link rate in bit/s (non-empty).
        distribution: flow sizes.
        rng: the random stream (seeded by the caller).

    Raises:
        InvalidInput: load not in (0, 1], no senders or receivers.
    """

    def __init__(self, load: float, senders: list[str], receivers: dict[str, int],
                 distribution: SizeDistribution, rng: random.Random) -> None:
        if isinstance(load, bool) or not isinstance(load, (int, float)) or not 0.0 < load <= 1.0:
            raise InvalidInput(
                "background.load", f"must be in (0, 1] (fraction of the receiver link rate), got {load!r}"
            )
        if not senders or not receivers:
            raise InvalidInput("background.load", "needs background hosts (named bg*) and receivers")
        self.load = float(load)
        self.senders = list(senders)
        self.receivers = dict(receivers)
        self.distribution = distribution
        self.rng = rng
        self.mean_bytes = distribution.mean_bytes()
        self.stopped = False
        self.started = 0

    def mean_gap_ns(self, receiver: str) -> float:
        """Mean inter-arrival gap at ``receiver`` in ns: mean size * 8 / (load * rate)."""
        return self.mean_bytes * 8 * NS_PER_S / (self.load * self.receivers[receiver])

    def start(self, api: WorkloadAPI) -> None:
        """Schedule the first arrival at every receiver."""
        for r in self.receivers:
            self._schedule(api, r)

    def _schedule(self, api: WorkloadAPI, receiver: str) -> None:
        gap = max(1, round(self.rng.expovariate(1.0 / self.mean_gap_ns(receiver))))
        api.call_at(api.now() + gap, lambda: self._arrive(api, receiver))

    def _arrive(self, api: WorkloadAPI, receiver: str) -> None:
        if self.stopped:
            return
        candidates = [s for s in self.senders if s != receiver]
        sender = candidates[self.rng.randrange(len(candidates))]
        size = self.distribution.sample(self.rng)
        self.started += 1
        api.start_flow(
            FlowSpec(sender, receiver, size, None, f"poisson {sender}->{receiver}", "background"), lambda _t: None
        )
        self._schedule(api, receiver)


class WithBackground:
    """A pipeline workload plus background sources; done when the pipeline workload is done.

    Args:
        main: the pipeline workload.
        sources: background sources with ``start(api)`` and a ``stopped`` flag.
    """

    def __init__(self, main: Workload, sources: list[BulkFlows | PoissonArrivals]) -> None:
        self.main = main
        self.sources = sources

    def start(self, api: WorkloadAPI) -> None:
        self.main.start(api)
        for src in self.sources:
            src.start(api)

    def done(self) -> bool:
        finished = self.main.done()
        if finished:
            for src in self.sources:
                src.stopped = True
        return finished

    def metrics(self) -> dict[str, float]:
        return self.main.metrics()

    def samples(self) -> dict[str, list[float]]:
        return self.main.samples()

    def warmup_end_ns(self) -> int | None:
        return self.main.warmup_end_ns()

    def dependencies(self) -> list[DependencySpec]:
        return self.main.dependencies()

    def __getattr__(self, name: str) -> Callable:
        # Expose the pipeline workload's extras (e.g. ideal_metrics, flows) unchanged.
        return getattr(self.main, name)

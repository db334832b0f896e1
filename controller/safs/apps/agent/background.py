"""Background traffic from one host: Poisson arrivals of TCP flows, sizes from a published
flow-size distribution (:mod:`safs.core.distributions`, the files shipped in
controller/safs/data/flow-sizes/).

The arrival process is the simulator's :class:`safs.experiments.workloads.background.PoissonArrivals`
seen from the sender: mean inter-arrival gap = mean size * 8 / (load * link rate), destination
drawn uniformly from the given addresses. Sizes above ``max_size_bytes`` are cut to it (at
tens of Mbit/s a 30 MB web-search flow would outlast the run); the cut is reported in the
agent's stats. Background flows are non-SAFS TCP (class 0 in the switch), as in the
simulator, where background flows are non-SAFS DCTCP under every policy.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from safs.apps.agent.loop import Loop
from safs.core.distributions import DATA_DIR, load_distribution
from safs.experiments.mininet.agent_control import Background

NS_PER_S = 1_000_000_000


class BackgroundGenerator:
    """Starts Poisson TCP flows until ``duration_ns`` passed or ``max_flows`` were started.

    Args:
        loop: the agent's event loop.
        params: the checked ``background`` request.
        start_flow: ``f(flow_id, dst_ip, size_bytes, port)`` starts one TCP flow now.

    Attributes:
        started, truncated: flows started, and how many had their size cut to ``max_size_bytes``.
        mean_bytes: the distribution's mean (bytes; before the cut).
    """

    def __init__(self, loop: Loop, params: Background,
                 start_flow: Callable[[int, str, int, int | None], None]) -> None:
        self.loop = loop
        self.p = params
        self.dist = load_distribution(DATA_DIR / params.distribution)
        self.rng = random.Random(params.seed)
        self.start_flow = start_flow
        self.mean_bytes = self.dist.mean_bytes()
        self.mean_gap_ns = self.mean_bytes * 8 * NS_PER_S / (params.load * params.link_rate_bps)
        self.end_ns = loop.now() + params.duration_ns
        self.started = 0
        self.truncated = 0
        self.stopped = False
        self._next()

    def _next(self) -> None:
        gap = max(1, round(self.rng.expovariate(1.0 / self.mean_gap_ns)))
        if self.loop.now() + gap < self.end_ns:
            self.loop.after(gap, self._arrive)

    def _arrive(self) -> None:
        if self.stopped or self.started >= self.p.max_flows:
            return
        size = self.dist.sample(self.rng)
        if size > self.p.max_size_bytes:
            size = self.p.max_size_bytes
            self.truncated += 1
        dst = self.p.dst_ips[self.rng.randrange(len(self.p.dst_ips))]
        self.start_flow(self.p.flow_id_base + self.started, dst, size, self.p.port)
        self.started += 1
        self._next()

    def summary(self) -> dict:
        """What was generated so far (for the agent's stats)."""
        return {"distribution": self.p.distribution, "load": self.p.load, "started": self.started,
                "truncated": self.truncated, "mean_bytes": round(self.mean_bytes, 1),
                "mean_gap_ns": round(self.mean_gap_ns)}

"""Own-paper check of the pFabric baseline (:mod:`safs.hosts.pfabric`).

Reproduces one published number of Alizadeh et al., "pFabric: Minimal Near-Optimal
Datacenter Transport" (SIGCOMM 2013): the average normalized FCT (FCT / FCT alone in an idle
fabric, the paper's metric, Section 5) of flows in (0, 100 KB] under the web-search workload
at 60% load (paper Fig. 8(a), "(0, 100KB]: Avg", pFabric curve).

Setup, scaled down to run in a minute of pure-Python simulation (paper setup in brackets):
one switch with :data:`HOSTS` hosts [a 144-host leaf-spine with packet spraying, which the
paper treats as one big switch], 10 Gbit/s host links [same], 3 us per link so the base RTT
is 14.5 us [14.6 us, 10 us of it in the hosts], 1500-byte MTU [same], 36 KB port buffers,
BDP window of 12 packets, RTO 43.6 us and probe mode after 5 timeouts (the defaults of
:func:`safs.hosts.pfabric.pfabric_config`) [36 KB, 12 packets, 45 us, 5]; flows
arrive as a Poisson process at every host as receiver, 60% of its link, sizes from the
web-search distribution (``hpcc_WebSearch_distribution.txt``, the DCTCP paper's, which
pFabric used), senders uniform among the other hosts [sources and destinations uniform];
flows in the first :data:`WARMUP_FRACTION` of the arrival window are not measured.

Run: ``python -m safs.experiments.eval.checks.pfabric [--full]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from safs.core.distributions import load_distribution
from safs.core.topology import Topology, build_topology
from safs.experiments.sim.config import SimConfig
from safs.experiments.sim.simulation import Simulation
from safs.experiments.workloads.api import FlowSpec
from safs.experiments.workloads.background import PoissonArrivals
from safs.hosts.pfabric import idle_fct_ns

PAPER_VALUE = 1.2  # pFabric, Fig. 8(a), web search, load 0.6 (read off the plot; see docs/baselines.md)
PAPER_SOURCE = ("Alizadeh et al., pFabric, SIGCOMM 2013, Section 5 (evaluation), Fig. 8(a): web search, "
                "(0,100KB] average normalized FCT, pFabric at load 0.6 (value read off the plot)")
LOAD = 0.6
SHORT_BYTES = 100_000  # the paper's small-flow bin (0, 100KB]
HOSTS = 8
RATE = "10Gbps"
LINK_DELAY_NS = 3_000
MTU_BYTES = 1500
WARMUP_FRACTION = 0.1
ARRIVALS_NS = {True: 80_000_000, False: 400_000_000}  # quick / full arrival windows
SEED = 1


def check_topology(hosts: int = HOSTS) -> Topology:
    """One switch, ``hosts`` hosts, 10 Gbit/s links with 3 us delay."""
    return build_topology({
        "name": "pfabric-check", "defaults": {"rate": RATE, "delay_ns": LINK_DELAY_NS},
        "switches": ["s0"],
        "hosts": {f"h{i}": {"ip": f"10.0.0.{i + 1}", "switch": "s0"} for i in range(hosts)}})


class _Counting:
    """The simulator's WorkloadAPI, counting short flows still in flight."""

    def __init__(self, api: Any, owner: PoissonCheck) -> None:
        self.api = api
        self.owner = owner

    def now(self) -> int:
        return self.api.now()

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None:
        self.api.call_at(t_ns, fn)

    def start_flow(self, spec: FlowSpec, on_done: Callable[[int], None], send_at_ns: int | None = None) -> int:
        if spec.size_bytes > SHORT_BYTES:
            return self.api.start_flow(spec, on_done, send_at_ns)
        self.owner.short_left += 1
        return self.api.start_flow(spec, self.owner.short_done, send_at_ns)


class PoissonCheck:
    """Poisson web-search arrivals for ``arrivals_ns``; done when every short flow finished."""

    def __init__(self, topology: Topology, load: float, arrivals_ns: int, seed: int) -> None:
        hosts = topology.hosts()
        dist = load_distribution("hpcc_WebSearch_distribution.txt")
        self.source = PoissonArrivals(load, hosts, {h: topology.host_link_bps(h) for h in hosts}, dist,
                                      random.Random(seed))
        self.arrivals_ns = arrivals_ns
        self.short_left = 0
        self.stopped = False

    def start(self, api: Any) -> None:
        self.source.start(_Counting(api, self))
        api.call_at(api.now() + self.arrivals_ns, self._stop)

    def _stop(self) -> None:
        self.source.stopped = True
        self.stopped = True

    def short_done(self, _t: int) -> None:
        self.short_left -= 1

    def done(self) -> bool:
        return self.stopped and self.short_left == 0

    def metrics(self) -> dict[str, float]:
        return {}


def run_check(quick: bool = True) -> dict[str, Any]:
    """Run the check (quick: 80 ms of arrivals, about 10-20 s; full: 400 ms, about 1-2 min).

    Returns:
        ``{"baseline": "pfabric", "metric", "paper_value", "measured", "deviation"
        (measured / paper - 1), "setup", "source"}`` plus ``"flows"`` (short flows measured),
        ``"p99"`` (their 99th-percentile normalized FCT), ``"drops"``, ``"timeouts"``,
        ``"wall_s"``.
    """
    topology = check_topology()
    arrivals = ARRIVALS_NS[quick]
    wall = time.monotonic()
    sim = Simulation(topology, "pfabric", SEED, SimConfig(mtu_bytes=MTU_BYTES, max_time_ns=10 * arrivals))
    res = sim.run(PoissonCheck(topology, LOAD, arrivals, SEED))
    wall = time.monotonic() - wall
    warmup = int(WARMUP_FRACTION * arrivals)
    norm = [(f.finish_ns - f.start_ns) / idle_fct_ns(topology, f.sender, f.receiver, f.size_bytes, MTU_BYTES)
            for f in res.flows
            if f.size_bytes <= SHORT_BYTES and warmup <= f.start_ns < arrivals and f.finish_ns is not None]
    measured = statistics.fmean(norm)
    p99 = sorted(norm)[min(len(norm) - 1, int(0.99 * len(norm)))]
    cfg = sim.binding.pfabric_cfg
    setup = (f"1 switch, {HOSTS} hosts, {RATE} links, {LINK_DELAY_NS} ns/link, MTU {MTU_BYTES}, buffer "
             f"{cfg.buffer_bytes} B/port, window {cfg.init_window_bytes} B, RTO {cfg.rto_ns} ns; web search, "
             f"Poisson load {LOAD}, {arrivals / 1e6:.0f} ms of arrivals (first {WARMUP_FRACTION:.0%} not measured), "
             f"seed {SEED}; {len(norm)} flows <= 100 KB measured")
    return {"baseline": "pfabric", "metric": "avg normalized FCT, flows (0,100KB], web search, load 0.6",
            "paper_value": PAPER_VALUE, "measured": measured, "deviation": measured / PAPER_VALUE - 1.0,
            "setup": setup, "source": PAPER_SOURCE, "flows": len(norm), "p99": p99, "drops": res.drops,
            "timeouts": res.transport.timeouts, "wall_s": wall}


def main() -> None:
    """Command line: print the check's result as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the longer run (about 1-2 min)")
    args = parser.parse_args()
    print(json.dumps(run_check(quick=not args.full), indent=2))


if __name__ == "__main__":
    main()

"""Own-paper check of the D2TCP baseline (:mod:`safs.sim.transports.d2tcp`).

Published number: Vamanan, Hasan, Vijaykumar, "Deadline-Aware Datacenter TCP (D2TCP)",
SIGCOMM 2012, abstract: in their at-scale simulations D2TCP "reduces the fraction of missed
deadlines compared to DCTCP ... by 75%". Measured here: ``1 - missed(D2TCP) / missed(DCTCP)``,
the fractions of deadline flows that finish late, on the same workload and seed.

Setup (a scaled fan-in; not the paper's workload, whose response sizes and deadline
distribution the abstract does not give): one switch, an aggregator ``h0``, :data:`FAN_IN`
workers and 2 long background flows into ``h0`` (DCTCP under both policies), 10 Gbit/s links
with 5 us delay (base RTT 20 us), 1500-byte MTU, 1 MiB port buffers, DCTCP's K for 10 Gbit/s
(65 packets). Closed-loop partition-aggregate rounds: every worker answers at once with
U[200, 600] KB; each response's deadline is the round start plus U[0.7, 2.5] times the time
the whole round's bytes take at line rate (a spread of tight and lax deadlines, which is what
D2TCP's imminence factor separates); the next round starts 50 us after the last response.
Senders start with alpha = 0 (:data:`INITIAL_ALPHA`), as DCTCP simulations of that time did;
our DCTCP default is RFC 8257's alpha = 1, with which both protocols cut almost the same on
short flows (alpha^d is close to 1 for any d), and the reduction is smaller (docs/baselines.md).

Run: ``python -m safs.eval.checks.d2tcp [--full]`` (quick: about 10 s, full: about 1.5 min).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any, Callable

from safs.sim.run import SimConfig, SimResult, Simulation
from safs.topology import Topology, build_topology
from safs.workloads.api import FlowSpec

PAPER_VALUE = 0.75
PAPER_SOURCE = ("Vamanan, Hasan, Vijaykumar, D2TCP, SIGCOMM 2012, abstract: D2TCP reduces the fraction "
                "of missed deadlines compared to DCTCP by 75% (https://research.google/pubs/pub37678/)")
METRIC = "reduction of the fraction of missed deadlines, D2TCP vs DCTCP (1 - missed_d2tcp / missed_dctcp)"
FAN_IN = 10
BULK_FLOWS = 2
RATE_BPS = 10_000_000_000
LINK_DELAY_NS = 5_000
MTU_BYTES = 1500
SIZE_RANGE = (200_000, 600_000)  # response bytes, uniform
DEADLINE_FACTORS = (0.7, 2.5)  # deadline = start + U[lo, hi] * round bytes at line rate
ROUND_GAP_NS = 50_000
INITIAL_ALPHA = 0.0
ROUNDS = {True: 30, False: 250}  # quick / full
SEED = 1


def check_topology(workers: int = FAN_IN, bulk: int = BULK_FLOWS) -> Topology:
    """One switch: aggregator h0, workers h1..h<workers>, then the bulk senders."""
    hosts = workers + bulk + 1
    return build_topology({
        "name": "d2tcp-check",
        "defaults": {"rate": "10Gbps", "delay_ns": LINK_DELAY_NS, "buffer_bytes": 1 << 20},
        "switches": ["s0"],
        "hosts": {f"h{i}": {"ip": f"10.0.{i // 250}.{i % 250 + 1}", "switch": "s0"} for i in range(hosts)}})


class FanInRounds:
    """Closed-loop partition-aggregate rounds (see the module docstring); done after ``rounds``.

    Raises:
        ValueError: ``rounds`` or ``workers`` below 1.
    """

    def __init__(self, rounds: int, workers: int = FAN_IN, bulk: int = BULK_FLOWS, seed: int = SEED) -> None:
        if rounds < 1 or workers < 1:
            raise ValueError("rounds and workers must be >= 1")
        self.rounds, self.workers, self.bulk = rounds, workers, bulk
        self.rng = random.Random(seed)
        self.round = 0
        self.left = 0
        self.finished = False
        self.api: Any = None

    def start(self, api: Any) -> None:
        self.api = api
        for j in range(self.bulk):
            api.start_flow(FlowSpec(f"h{self.workers + 1 + j}", "h0", 1 << 36, None, f"bulk{j}", "background"),
                           _ignore)
        self._start_round()

    def _start_round(self) -> None:
        now = self.api.now()
        sizes = [self.rng.randint(*SIZE_RANGE) for _ in range(self.workers)]
        round_ns = sum(sizes) * 8 * 1_000_000_000 / RATE_BPS
        self.left = self.workers
        for i, size in enumerate(sizes):
            deadline = now + int(round_ns * self.rng.uniform(*DEADLINE_FACTORS))
            self.api.start_flow(FlowSpec(f"h{i + 1}", "h0", size, deadline, f"r{self.round} w{i}"), self._done)

    def _done(self, _: int) -> None:
        self.left -= 1
        if self.left == 0:
            self.round += 1
            if self.round >= self.rounds:
                self.finished = True
            else:
                self.api.call_at(self.api.now() + ROUND_GAP_NS, self._start_round)

    def done(self) -> bool:
        return self.finished

    def metrics(self) -> dict[str, float]:
        return {"rounds": float(self.round)}


def _ignore(_: int) -> None:
    return None


class _AlphaSimulation(Simulation):
    """The packet simulator with every DCTCP-family sender's alpha started at ``initial_alpha``."""

    initial_alpha = INITIAL_ALPHA

    def start_flow(self, spec: FlowSpec, on_done: Callable[[int], None], send_at_ns: int | None = None) -> int:
        fid = super().start_flow(spec, on_done, send_at_ns)
        self.senders[fid].alpha = self.initial_alpha
        return fid


def missed_fraction(result: SimResult) -> float:
    """Fraction of deadline (pipeline) flows that missed (``FlowRecord.missed``)."""
    flows = [f for f in result.flows if f.flow_class == "pipeline"]
    return sum(f.missed for f in flows) / len(flows) if flows else 0.0


def run_policy(policy: str, rounds: int, initial_alpha: float = INITIAL_ALPHA) -> SimResult:
    """One run of the fan-in under ``policy`` ("dctcp" or "d2tcp")."""
    sim = _AlphaSimulation(check_topology(), policy, SEED, SimConfig(mtu_bytes=MTU_BYTES, max_time_ns=10**11))
    sim.initial_alpha = initial_alpha
    return sim.run(FanInRounds(rounds))


def run_check(quick: bool = True) -> dict:
    """Run the check; returns ``{"baseline": "d2tcp", "metric", "paper_value", "measured",
    "deviation" (measured / paper_value - 1), "setup", "source"}`` plus the two missed
    fractions, the flow count and the wall time."""
    t0 = time.monotonic()
    rounds = ROUNDS[quick]
    missed = {}
    for policy in ("dctcp", "d2tcp"):
        res = run_policy(policy, rounds)
        if not res.workload_done:
            raise RuntimeError(f"{policy}: the fan-in did not finish within the horizon")
        missed[policy] = missed_fraction(res)
    measured = 1.0 - missed["d2tcp"] / missed["dctcp"] if missed["dctcp"] > 0 else 0.0
    setup = (f"fan-in {FAN_IN} workers -> 1 aggregator + {BULK_FLOWS} long DCTCP flows, 10 Gbit/s, 5 us links, "
             f"MTU {MTU_BYTES}, responses U{SIZE_RANGE} B, deadlines start + U{DEADLINE_FACTORS} x round "
             f"time at line rate, {rounds} closed-loop rounds, initial alpha {INITIAL_ALPHA}, seed {SEED}")
    return {
        "baseline": "d2tcp", "metric": METRIC, "paper_value": PAPER_VALUE, "measured": measured,
        "deviation": measured / PAPER_VALUE - 1.0, "setup": setup, "source": PAPER_SOURCE,
        "missed_fraction_dctcp": missed["dctcp"], "missed_fraction_d2tcp": missed["d2tcp"],
        "deadline_flows": rounds * FAN_IN, "wall_s": time.monotonic() - t0,
    }


def main(argv: list[str] | None = None) -> None:
    """``python -m safs.eval.checks.d2tcp [--full]``: print the check's result as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help=f"{ROUNDS[False]} rounds instead of {ROUNDS[True]}")
    args = parser.parse_args(argv)
    print(json.dumps(run_check(quick=not args.full), indent=2))


if __name__ == "__main__":
    main()

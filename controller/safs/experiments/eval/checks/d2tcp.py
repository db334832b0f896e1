"""Own-paper check of the D2TCP baseline (:mod:`safs.hosts.d2tcp`).

Published number: Vamanan, Hasan, Vijaykumar, "Deadline-Aware Datacenter TCP (D2TCP)",
SIGCOMM 2012, abstract: in their at-scale simulations D2TCP "reduces the fraction of missed
deadlines compared to DCTCP ... by 75%". Measured here: ``1 - missed(D2TCP) / missed(DCTCP)``,
the fractions of deadline flows that finish late, on the same workload and seed.

Workload (:class:`FanInSetup`; a scaled stand-in for the paper's OLDI trees, whose full
evaluation setup we could not retrieve, see docs/baselines.md "## D2TCP"): one switch, an
aggregator ``h0``, ``fan_in`` workers and ``bulk_flows`` long background flows into ``h0``
(DCTCP under both policies, like the paper's deadline-less flows, d = 1), 10 Gbit/s links with
5 us delay (base RTT 20 us), 1500-byte MTU, 1 MiB port buffers, DCTCP's K for 10 Gbit/s (65
packets), g = 1/16. Closed-loop partition-aggregate rounds: every worker answers at once with
U[``size_range``] bytes; the workers form ``trees`` equal groups (concurrent OLDI trees), and
each tree's responses share one deadline, the round start plus U[``deadline_factors``] times
the time the whole round's bytes take at line rate (``trees == fan_in``: every response has
its own deadline); the next round starts ``round_gap_ns`` after the last response. Senders
start with alpha = ``initial_alpha`` (0 for the reported check, as DCTCP simulations of the
paper's time did; our DCTCP default is RFC 8257's alpha = 1).

Run: ``python -m safs.experiments.eval.checks.d2tcp [--full] [--sweep]`` (quick: seed 1, 30 rounds, about
15 s; full: seeds 1-3, 50 rounds each, about 1 min; on a busy core; ``--sweep`` prints the
sensitivity rows of docs/baselines.md, about 5 min).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from safs.core.errors import InvalidInput
from safs.core.topology import Topology, build_topology
from safs.experiments.sim.config import SimConfig, SimResult
from safs.experiments.sim.simulation import Simulation
from safs.experiments.workloads.api import FlowSpec

PAPER_VALUE = 0.75
PAPER_SOURCE = ("Vamanan, Hasan, Vijaykumar, D2TCP, SIGCOMM 2012, abstract: D2TCP reduces the fraction "
                "of missed deadlines compared to DCTCP by 75% (https://research.google/pubs/pub37678/)")
METRIC = "reduction of the fraction of missed deadlines, D2TCP vs DCTCP (1 - missed_d2tcp / missed_dctcp)"
RATE_BPS = 10_000_000_000
LINK_DELAY_NS = 5_000
MTU_BYTES = 1500


@dataclass(frozen=True)
class FanInSetup:
    """One fan-in workload (module docstring). Sizes in bytes, times in ns.

    Attributes:
        fan_in: workers answering the aggregator each round (>= 1).
        trees: concurrent OLDI trees the workers are split into; a tree's responses share one
            deadline (1 <= trees <= fan_in; ``fan_in`` = one deadline per response).
        bulk_flows: long background (deadline-less, DCTCP) flows into the aggregator (>= 0).
        size_range: (lo, hi) response bytes, uniform, 1 <= lo <= hi.
        deadline_factors: (lo, hi): deadline = round start + U[lo, hi] x (round bytes at line
            rate), 0 < lo <= hi.
        rounds: closed-loop rounds (>= 1).
        initial_alpha: DCTCP/D2TCP alpha at flow start, in [0, 1].
        round_gap_ns: idle time between rounds (>= 0).
        seed: workload and simulator seed.

    Raises:
        InvalidInput: a field outside the range above (the field is named).
    """

    fan_in: int = 10
    trees: int = 10
    bulk_flows: int = 2
    size_range: tuple[int, int] = (200_000, 600_000)
    deadline_factors: tuple[float, float] = (0.7, 2.5)
    rounds: int = 30
    initial_alpha: float = 0.0
    round_gap_ns: int = 50_000
    seed: int = 1

    def __post_init__(self) -> None:
        if self.fan_in < 1:
            raise InvalidInput("fan_in", f"must be >= 1, got {self.fan_in!r}")
        if not 1 <= self.trees <= self.fan_in:
            raise InvalidInput("trees", f"must be in [1, fan_in={self.fan_in}], got {self.trees!r}")
        if self.bulk_flows < 0:
            raise InvalidInput("bulk_flows", f"must be >= 0, got {self.bulk_flows!r}")
        if not 1 <= self.size_range[0] <= self.size_range[1]:
            raise InvalidInput("size_range", f"must be (lo, hi) bytes with 1 <= lo <= hi, got {self.size_range!r}")
        if not 0 < self.deadline_factors[0] <= self.deadline_factors[1]:
            raise InvalidInput("deadline_factors", f"must be (lo, hi) with 0 < lo <= hi, got {self.deadline_factors!r}")
        if self.rounds < 1:
            raise InvalidInput("rounds", f"must be >= 1, got {self.rounds!r}")
        if not 0.0 <= self.initial_alpha <= 1.0:
            raise InvalidInput("initial_alpha", f"must be in [0, 1], got {self.initial_alpha!r}")
        if self.round_gap_ns < 0:
            raise InvalidInput("round_gap_ns", f"must be >= 0 ns, got {self.round_gap_ns!r}")

    def describe(self) -> str:
        """One line for reports."""
        dl = "one deadline per response" if self.trees == self.fan_in else f"{self.trees} trees, one deadline each"
        return (f"fan-in {self.fan_in} workers -> 1 aggregator ({dl}) + {self.bulk_flows} long DCTCP flows, "
                f"10 Gbit/s, 5 us links, MTU {MTU_BYTES}, K 65, g 1/16, responses U{self.size_range} B, "
                f"deadlines start + U{self.deadline_factors} x round time at line rate, {self.rounds} closed-loop "
                f"rounds, initial alpha {self.initial_alpha}, seed {self.seed}")


# The reported check (closest to the paper we can state; docs/baselines.md) and its sizes:
# quick = seed 1, 30 rounds (300 deadline flows); full = seeds 1-3, 50 rounds each (1500).
CHECK_SETUP = FanInSetup()
ROUNDS = {True: 30, False: 50}
SEEDS = {True: (1,), False: (1, 2, 3)}


def check_topology(workers: int, bulk: int) -> Topology:
    """One switch: aggregator h0, workers h1..h<workers>, then the bulk senders."""
    hosts = workers + bulk + 1
    return build_topology({
        "name": "d2tcp-check",
        "defaults": {"rate": "10Gbps", "delay_ns": LINK_DELAY_NS, "buffer_bytes": 1 << 20},
        "switches": ["s0"],
        "hosts": {f"h{i}": {"ip": f"10.0.{i // 250}.{i % 250 + 1}", "switch": "s0"} for i in range(hosts)}})


def draw_round(rng: random.Random, setup: FanInSetup) -> tuple[list[int], list[int]]:
    """One round's response sizes (bytes) and deadlines (ns after the round start), worker by
    worker; worker i belongs to tree i mod ``trees`` and takes that tree's deadline."""
    sizes = [rng.randint(*setup.size_range) for _ in range(setup.fan_in)]
    round_ns = sum(sizes) * 8 * 1_000_000_000 / RATE_BPS
    trees = [int(round_ns * rng.uniform(*setup.deadline_factors)) for _ in range(setup.trees)]
    return sizes, [trees[i % setup.trees] for i in range(setup.fan_in)]


def min_missed_fraction(setup: FanInSetup) -> float:
    """Fewest responses any scheduler could make late on the same rounds: a fluid reference.

    Each round is one machine (the aggregator's link at line rate, payload bytes only, no RTT,
    no background flows) with all responses released at the round start; Moore-Hodgson's rule
    (Moore, Management Science 15(1), 1968: EDF order, and whenever the running completion
    time passes a deadline drop the largest job so far) gives the minimum number of late jobs.
    The draws are the ones :class:`FanInRounds` makes (same seed), so this is the floor for
    both DCTCP and D2TCP on this workload; 1 - floor / missed(DCTCP) bounds the reduction.
    """
    rng = random.Random(setup.seed)
    late = 0
    for _ in range(setup.rounds):
        sizes, deadlines = draw_round(rng, setup)
        kept: list[int] = []
        done_ns = 0.0
        for deadline, size in sorted(zip(deadlines, sizes)):
            kept.append(size)
            done_ns += size * 8e9 / RATE_BPS
            if done_ns > deadline:
                biggest = max(kept)
                kept.remove(biggest)
                done_ns -= biggest * 8e9 / RATE_BPS
                late += 1
    return late / (setup.rounds * setup.fan_in)


class FanInRounds:
    """Closed-loop partition-aggregate rounds of a :class:`FanInSetup`; done after its rounds."""

    def __init__(self, setup: FanInSetup) -> None:
        self.s = setup
        self.rng = random.Random(setup.seed)
        self.round = 0
        self.left = 0
        self.finished = False
        self.api: Any = None

    def start(self, api: Any) -> None:
        self.api = api
        for j in range(self.s.bulk_flows):
            api.start_flow(FlowSpec(f"h{self.s.fan_in + 1 + j}", "h0", 1 << 36, None, f"bulk{j}", "background"),
                           _ignore)
        self._start_round()

    def _start_round(self) -> None:
        now = self.api.now()
        sizes, deadlines = draw_round(self.rng, self.s)
        self.left = self.s.fan_in
        for i, (size, deadline) in enumerate(zip(sizes, deadlines)):
            self.api.start_flow(FlowSpec(f"h{i + 1}", "h0", size, now + deadline, f"r{self.round} w{i}"), self._done)

    def _done(self, _: int) -> None:
        self.left -= 1
        if self.left == 0:
            self.round += 1
            if self.round >= self.s.rounds:
                self.finished = True
            else:
                self.api.call_at(self.api.now() + self.s.round_gap_ns, self._start_round)

    def done(self) -> bool:
        return self.finished

    def metrics(self) -> dict[str, float]:
        return {"rounds": float(self.round)}


def _ignore(_: int) -> None:
    return None


class _AlphaSimulation(Simulation):
    """The packet simulator with every DCTCP-family sender's alpha started at ``initial_alpha``."""

    initial_alpha = 0.0

    def start_flow(self, spec: FlowSpec, on_done: Callable[[int], None], send_at_ns: int | None = None) -> int:
        fid = super().start_flow(spec, on_done, send_at_ns)
        self.senders[fid].alpha = self.initial_alpha
        return fid


def missed_fraction(result: SimResult) -> float:
    """Fraction of deadline (pipeline) flows that missed (``FlowRecord.missed``)."""
    flows = [f for f in result.flows if f.flow_class == "pipeline"]
    return sum(f.missed for f in flows) / len(flows) if flows else 0.0


def run_policy(policy: str, setup: FanInSetup) -> SimResult:
    """One run of ``setup`` under ``policy`` ("dctcp" or "d2tcp").

    Raises:
        RuntimeError: the rounds did not finish within the 100 s horizon.
    """
    sim = _AlphaSimulation(check_topology(setup.fan_in, setup.bulk_flows), policy, setup.seed,
                           SimConfig(mtu_bytes=MTU_BYTES, max_time_ns=10**11))
    sim.initial_alpha = setup.initial_alpha
    res = sim.run(FanInRounds(setup))
    if not res.workload_done:
        raise RuntimeError(f"{policy}: the fan-in did not finish within the horizon")
    return res


def compare(setup: FanInSetup) -> dict[str, float]:
    """Missed fractions of DCTCP and D2TCP on ``setup`` and the reduction (0 if DCTCP missed none)."""
    dctcp = missed_fraction(run_policy("dctcp", setup))
    d2tcp = missed_fraction(run_policy("d2tcp", setup))
    return {"missed_fraction_dctcp": dctcp, "missed_fraction_d2tcp": d2tcp,
            "reduction": 1.0 - d2tcp / dctcp if dctcp > 0 else 0.0,
            "missed_fraction_floor": min_missed_fraction(setup),
            "deadline_flows": float(setup.rounds * setup.fan_in)}


def run_check(quick: bool = True, setup: FanInSetup | None = None) -> dict:
    """Run the check; returns ``{"baseline": "d2tcp", "metric", "paper_value", "measured",
    "deviation" (measured / paper_value - 1), "setup", "source"}`` plus the missed fractions
    of both protocols pooled over the seeds, the fluid floor (:func:`min_missed_fraction`),
    the per-seed reductions, the deadline-flow count and the wall time.

    ``setup`` None: :data:`CHECK_SETUP` with :data:`ROUNDS` [quick] rounds for each of
    :data:`SEEDS` [quick]; otherwise exactly ``setup`` (its own seed and rounds).
    """
    t0 = time.monotonic()
    base = setup or dataclasses.replace(CHECK_SETUP, rounds=ROUNDS[quick])
    runs = [compare(base)] if setup else [compare(dataclasses.replace(base, seed=s)) for s in SEEDS[quick]]
    flows = sum(r["deadline_flows"] for r in runs)
    pooled = {key: sum(r[key] * r["deadline_flows"] for r in runs) / flows
              for key in ("missed_fraction_dctcp", "missed_fraction_d2tcp", "missed_fraction_floor")}
    dctcp, d2tcp = pooled["missed_fraction_dctcp"], pooled["missed_fraction_d2tcp"]
    measured = 1.0 - d2tcp / dctcp if dctcp > 0 else 0.0
    seeds = [base.seed] if setup else list(SEEDS[quick])
    described = base.describe()
    if len(seeds) > 1:
        described = described.replace(f"rounds, initial alpha {base.initial_alpha}, seed {base.seed}",
                                      f"rounds per seed, initial alpha {base.initial_alpha}, seeds "
                                      + ", ".join(map(str, seeds)))
    return {
        "baseline": "d2tcp", "metric": METRIC, "paper_value": PAPER_VALUE, "measured": measured,
        "deviation": measured / PAPER_VALUE - 1.0, "setup": described, "source": PAPER_SOURCE,
        **pooled, "reduction_per_seed": [r["reduction"] for r in runs],
        "deadline_flows": int(flows), "wall_s": time.monotonic() - t0,
    }


def sweep_setups(deadline_flows: int = 300) -> list[tuple[str, FanInSetup]]:
    """One-at-a-time variations of :data:`CHECK_SETUP` (about ``deadline_flows`` flows each)."""
    base = CHECK_SETUP

    def v(**kw: Any) -> FanInSetup:
        fan_in = kw.get("fan_in", base.fan_in)
        kw.setdefault("trees", fan_in)
        return dataclasses.replace(base, rounds=max(3, deadline_flows // fan_in), **kw)

    return [
        ("check setup", v()),
        ("fan-in 4", v(fan_in=4)),
        ("fan-in 20", v(fan_in=20)),
        ("fan-in 40 (100-300 KB)", v(fan_in=40, size_range=(100_000, 300_000))),
        ("tight U[0.5, 1.5]", v(deadline_factors=(0.5, 1.5))),
        ("lax U[1.0, 3.5]", v(deadline_factors=(1.0, 3.5))),
        ("narrow U[1.0, 1.4]", v(deadline_factors=(1.0, 1.4))),
        ("2 trees, shared deadline", v(trees=2)),
        ("1 tree (one deadline per round)", v(trees=1)),
        ("no bulk flows", v(bulk_flows=0)),
        ("6 bulk flows", v(bulk_flows=6)),
        ("initial alpha 1", v(initial_alpha=1.0)),
        ("initial alpha 0.5", v(initial_alpha=0.5)),
        ("small responses 20-60 KB", v(size_range=(20_000, 60_000))),
    ]


def run_sweep(deadline_flows: int = 300) -> list[dict]:
    """:func:`compare` on every :func:`sweep_setups` entry; rows with the label and setup."""
    rows = []
    for label, setup in sweep_setups(deadline_flows):
        row = {"case": label, **compare(setup), "setup": setup.describe()}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    """``python -m safs.experiments.eval.checks.d2tcp [--full] [--sweep]``: print the result as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true",
                        help=f"seeds {SEEDS[False]} x {ROUNDS[False]} rounds instead of seed 1 x {ROUNDS[True]}")
    parser.add_argument("--sweep", action="store_true", help="sensitivity sweep (one JSON line per case)")
    args = parser.parse_args(argv)
    if args.sweep:
        run_sweep()
        return
    print(json.dumps(run_check(quick=not args.full), indent=2))


if __name__ == "__main__":
    main()

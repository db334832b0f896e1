"""One run of a scenario, independent of the backend that runs it: :class:`RunSpec`, the
order of a scenario's runs (:func:`expand`) and what every backend builds from them
(:func:`build_run`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from safs.core.errors import InvalidInput
from safs.core.topology import Topology, load_topology
from safs.experiments.policies import get_policy
from safs.experiments.scenario import Scenario
from safs.experiments.sim.config import SimConfig
from safs.experiments.workloads import Workload, build_workload


@dataclass(frozen=True)
class RunSpec:
    """One run of a scenario: the swept values that identify it."""

    policy: str
    seed: int
    repetition: int
    background_flows: int
    load: float
    workload_sweep: tuple[tuple[str, Any], ...] = ()  # (param, value) of the scenario's workload.sweep

    def params(self) -> dict[str, Any]:
        """The swept parameters, as recorded (``background_flows``, ``load``, then each
        ``workload.sweep`` parameter under its own name)."""
        return {"background_flows": self.background_flows, "load": self.load, **dict(self.workload_sweep)}

    def record_head(self, scenario: Scenario, backend: str) -> dict[str, Any]:
        """The identity keys that start every record of this run (docs/results.md)."""
        return {"scenario": scenario.name, "target": backend, "policy": self.policy, "seed": self.seed,
                "repetition": self.repetition, **self.params()}


def expand(scenario: Scenario) -> Iterator[RunSpec]:
    """All runs of a scenario in a fixed order (parameters, then policy, seed, repetition)."""
    sweep = scenario.workload.sweep
    combos = [tuple(zip(sweep, values)) for values in itertools.product(*sweep.values())]
    for combo, bulk, load, policy, seed, rep in itertools.product(
        combos, scenario.background.bulk_flows, scenario.background.load, scenario.policies, scenario.seeds,
        range(scenario.repetitions)
    ):
        yield RunSpec(policy=policy, seed=seed, repetition=rep, background_flows=bulk, load=load,
                      workload_sweep=combo)


def build_run(scenario: Scenario, spec: RunSpec) -> tuple[Topology, Workload, SimConfig]:
    """Topology, workload and run settings of one run. The settings (:class:`SimConfig`, the
    scenario's ``sim:`` and ``scheduler:`` sections) hold what both backends share: MTU,
    scheduler and allocator settings, hint and activation timing, SAFS host timers.

    Raises:
        InvalidInput: any bad input; the error names the scenario file when the failing piece
            (workload parameters, simulator settings) came from it.
    """
    topology = load_topology(scenario.topology_path())
    try:
        config = SimConfig.from_mapping(scenario.sim, scheduler=scenario.scheduler,
                                        max_time_ns=int(scenario.max_time_ms * 1_000_000))
        topology.mtu_bytes = config.mtu_bytes  # ideal times and no-bubble floors at the run's MTU
        workload = build_workload(
            scenario.workload.kind, {**scenario.workload.params, **dict(spec.workload_sweep)}, topology,
            seed=run_seed(spec),
            background_flows=spec.background_flows, load=spec.load,
            distribution=scenario.background.distribution, source=scenario.source, horizon_ns=config.max_time_ns,
        )
    except InvalidInput as exc:
        if exc.source:
            raise
        raise InvalidInput(exc.field, exc.message, source=scenario.source) from None
    return topology, workload, config


def cli_overrides(seeds: list[int] | None, policies: list[str] | None) -> dict[str, Any]:
    """Scenario overrides from the ``--seeds`` and ``--policies`` options (None or empty:
    keep the scenario's).

    Raises:
        InvalidInput: a policy the registry does not know (field ``--policies``).
    """
    overrides: dict[str, Any] = {}
    if seeds:
        overrides["seeds"] = seeds
    if policies:
        for policy in policies:
            get_policy(policy, "--policies")
        overrides["policies"] = policies
    return overrides


def miss_tolerance_ns(scenario: Scenario) -> int:
    """The scenario's deadline-miss tolerance (``miss_tolerance_us``) in ns."""
    return round(scenario.miss_tolerance_us * 1000)


def run_seed(spec: RunSpec) -> int:
    """The random seed of one run: each repetition gets its own stream; ``spec.seed`` stays
    the reported identity."""
    return spec.seed * 1000 + spec.repetition

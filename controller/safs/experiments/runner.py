"""Run scenarios: every (policy, seed, repetition, swept parameter) combination, on a target.

Writes ``results.json`` (a list of records, schema in docs/results.md) and ``results.csv`` into
the output directory and returns the records. Records hold numbers only, with the unit in the
key name (``tpot_p99_ms``); NaN (no samples) is written as ``null``.
"""

from __future__ import annotations

import csv
import importlib.util
import itertools
import json
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from safs.core.errors import InvalidInput
from safs.experiments.metrics import flow_metrics
from safs.experiments.scenario import Scenario

TARGETS = ("sim", "mininet")  # mininet: safs.experiments.mininet.backend, docs/mininet.md
RESULT_FILES = ("results.json", "results.csv", "samples.jsonl")  # moved aside, not overwritten


@dataclass(frozen=True)
class RunSpec:
    """One run of a scenario: the swept values that identify it."""

    policy: str
    seed: int
    repetition: int
    background_flows: int
    load: float

    def params(self) -> dict[str, float]:
        return {"background_flows": self.background_flows, "load": self.load}


def expand(scenario: Scenario) -> Iterator[RunSpec]:
    """All runs of a scenario in a fixed order (parameters, then policy, seed, repetition)."""
    for bulk, load, policy, seed, rep in itertools.product(
        scenario.background.bulk_flows, scenario.background.load, scenario.policies, scenario.seeds,
        range(scenario.repetitions)
    ):
        yield RunSpec(policy=policy, seed=seed, repetition=rep, background_flows=bulk, load=load)


def _build(scenario: Scenario, spec: RunSpec) -> tuple[Any, Any, Any]:
    """Topology, workload and simulator config of one run.

    Raises:
        InvalidInput: any bad input; the error names the scenario file when the failing piece
            (workload parameters, simulator settings) came from it.
    """
    from safs.experiments.sim.simulation import SimConfig
    from safs.core.topology import load_topology
    from safs.experiments.workloads import build_workload

    topology = load_topology(scenario.topology_path())
    try:
        config = SimConfig.from_mapping(scenario.sim, scheduler=scenario.scheduler,
                                        max_time_ns=int(scenario.max_time_ms * 1_000_000))
        topology.mtu_bytes = config.mtu_bytes  # ideal times and no-bubble floors at the run's MTU
        workload = build_workload(
            scenario.workload.kind, scenario.workload.params, topology, seed=_run_seed(spec),
            background_flows=spec.background_flows, load=spec.load,
            distribution=scenario.background.distribution, source=scenario.source,
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
        InvalidInput: a policy the simulator does not know (field ``--policies``).
    """
    overrides: dict[str, Any] = {}
    if seeds:
        overrides["seeds"] = seeds
    if policies:
        from safs.experiments.sim.simulation import POLICIES  # noqa: PLC0415 (the simulator only when needed)

        for policy in policies:
            if policy not in POLICIES:
                raise InvalidInput("--policies", f"unknown policy {policy!r}; valid: {', '.join(POLICIES)}")
        overrides["policies"] = policies
    return overrides


def miss_tolerance_ns(scenario: Scenario) -> int:
    """The scenario's deadline-miss tolerance (``miss_tolerance_us``) in ns."""
    return round(scenario.miss_tolerance_us * 1000)


def _run_seed(spec: RunSpec) -> int:
    # Each repetition gets its own random stream; the seed stays the reported identity.
    return spec.seed * 1000 + spec.repetition


def check(scenario: Scenario, target: str = "sim") -> None:
    """Validate everything every run of ``scenario`` needs, without simulating.

    Raises:
        InvalidInput: unknown target or policy (the message lists the valid ones), or a bad
            topology, workload parameter, background setting or simulator setting.
    """
    if target not in TARGETS:
        raise InvalidInput("--target", f"unknown target {target!r}; valid: {', '.join(TARGETS)}")
    from safs.experiments.sim.simulation import POLICIES

    for policy in scenario.policies:
        if policy not in POLICIES:
            raise InvalidInput("policies", f"unknown policy {policy!r}; valid: {', '.join(POLICIES)}",
                               source=scenario.source)
    if target == "mininet":
        from safs.experiments.mininet.backend import check_policies

        check_policies(scenario.policies, scenario.source)
    seen = set()
    for spec in expand(scenario):
        if (spec.background_flows, spec.load) not in seen:  # workloads differ only by these
            seen.add((spec.background_flows, spec.load))
            _build(scenario, spec)


def run_samples(workload: Any) -> dict[str, list[float]]:
    """Per-run sample lists kept beside the numbers-only record (docs/results.md, "Samples").

    Keys (present when the workload has them): ``tpot_ms`` (AFD, per decode step n >= 1),
    ``iteration_time_ms`` (ZeroBubble, per iteration), ``urgent_fct_ms`` (urgent
    microbenchmark, per finished urgent flow).
    """
    out: dict[str, list[float]] = {}
    tpot = getattr(workload, "tpot_samples_ns", None)
    if tpot is not None:
        out["tpot_ms"] = [v / 1e6 for v in tpot()]
    iterations = getattr(workload, "iteration_times_ns", None)
    if iterations is not None:
        out["iteration_time_ms"] = [v / 1e6 for v in iterations]
    urgent = getattr(workload, "flow_records", None)
    if urgent is not None and getattr(workload, "urgent_senders", None) is not None:
        out["urgent_fct_ms"] = [r.fct_ns / 1e6 for r in urgent("urgent") if r.fct_ns is not None]
    return out


@dataclass(frozen=True)
class RunOutput:
    """One run's record (numbers only) and its sample lists (:func:`run_samples`)."""

    record: dict[str, Any]
    samples: dict[str, list[float]]


def run_one_output(scenario: Scenario, spec: RunSpec, target: str = "sim") -> RunOutput:
    """One simulator run with its samples; module-level so process pools and Ray can call it.

    Raises:
        InvalidInput: ``target`` other than ``sim`` (Mininet runs go one after another through
            :func:`safs.experiments.mininet.backend.run_mininet`, never through a pool).
    """
    if target != "sim":
        raise InvalidInput("--target", f"only sim runs go through the pool, got {target!r}")
    samples: dict[str, list[float]] = {}
    record = run_one_sim(scenario, spec, samples)
    return RunOutput(record, samples)


def run_one_sim(scenario: Scenario, spec: RunSpec, samples: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """Simulate one run and return its record (keys documented in docs/results.md).

    ``samples``, when given, is filled with the run's sample lists (:func:`run_samples`).
    """
    from safs.experiments.sim.simulation import simulate

    topology, workload, config = _build(scenario, spec)
    started = time.perf_counter()
    result = simulate(topology, workload, spec.policy, _run_seed(spec), config)
    wall = time.perf_counter() - started
    record: dict[str, Any] = {
        "scenario": scenario.name, "target": "sim", "policy": spec.policy, "seed": spec.seed,
        "repetition": spec.repetition, **spec.params(),
    }
    record.update(result.workload_metrics)
    record.update(flow_metrics(result.flows, miss_tolerance_ns(scenario)))
    record["miss_tolerance_ms"] = scenario.miss_tolerance_us / 1000
    record["control_bytes_per_data_byte"] = result.control_bytes / result.data_bytes if result.data_bytes else float("nan")
    record["control_bytes"] = result.control_bytes
    record["data_bytes"] = result.data_bytes
    record["drops"] = result.drops
    record["sim_events"] = result.events
    record["sim_time_ms"] = result.sim_time_ns / 1_000_000
    record["wall_time_s"] = wall
    if samples is not None:
        samples.update(run_samples(workload))
    return record


def run_scenario(scenario: Scenario, target: str = "sim",
                 progress: Callable[[RunSpec], None] | None = None, jobs: int | None = 1,
                 ray_address: str | None = None) -> list[dict[str, Any]]:
    """Run every combination of a scenario on ``target`` (``sim``, or ``mininet``: serial, as root
    with Mininet and BMv2, docs/mininet.md).

    ``jobs`` local worker processes (1: serial, None: one per CPU) or an existing Ray cluster
    at ``ray_address`` (:func:`safs.experiments.eval.parallel.map_ordered`); the records are the same
    and in :func:`expand` order either way, apart from ``wall_time_s``.

    Raises:
        InvalidInput: as :func:`check`, which runs first; bad ``jobs`` or ``ray_address``.
    """
    return [out.record for out in run_scenario_outputs(scenario, target, progress, jobs, ray_address)]


def run_scenario_outputs(scenario: Scenario, target: str = "sim",
                         progress: Callable[[RunSpec], None] | None = None, jobs: int | None = 1,
                         ray_address: str | None = None) -> list[RunOutput]:
    """As :func:`run_scenario`, with each run's samples (:class:`RunOutput`)."""
    from safs.experiments.eval.parallel import map_ordered

    check(scenario, target)
    specs = list(expand(scenario))
    if target == "mininet":  # one emulated network, runs one after another in real time
        from safs.experiments.mininet.backend import run_mininet

        return [RunOutput(record, samples) for record, samples in run_mininet(scenario, specs, progress)]
    done = (lambda i: progress(specs[i])) if progress else None
    return map_ordered(run_one_output, [(scenario, spec, target) for spec in specs], jobs, ray_address, done)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def check_target_available(target: str) -> None:
    """Cheap check, starting nothing, that ``target`` can run on this machine.

    ``sim`` always can; ``mininet`` needs root, the Mininet Python package and BMv2's
    ``simple_switch_grpc`` on PATH (docs/mininet.md).

    Raises:
        InvalidInput: field ``--target mininet``, one line naming everything missing.
    """
    if target != "mininet":
        return
    missing = []
    if os.geteuid() != 0:
        missing.append("root (run as root, e.g. sudo .venv/bin/safs run ... --target mininet)")
    if importlib.util.find_spec("mininet") is None:
        missing.append("Mininet (the mininet Python package, docs/mininet.md)")
    if shutil.which("simple_switch_grpc") is None:
        missing.append("BMv2 (simple_switch_grpc on PATH)")
    if missing:
        raise InvalidInput("--target mininet", "needs " + "; ".join(missing))


def check_out_dir(out_dir: Path, option: str = "--out") -> None:
    """Refuse an output path that is an existing file, creating nothing.

    Raises:
        InvalidInput: field ``option`` (e.g. ``--out README.md``), "is a file, not a directory".
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise InvalidInput(f"{option} {out_dir}", "is a file, not a directory")


def archive_previous(out_dir: Path, names: tuple[str, ...], stamp: str | None = None) -> list[tuple[Path, Path]]:
    """Move earlier output files ``out_dir/NAME`` aside so a new run loses nothing.

    ``results.json`` becomes ``results.<stamp>.json`` (``stamp``: local time, YYYYMMDDTHHMMSS;
    ``-1``, ``-2``... appended if that name is taken). Files that do not exist are skipped.

    Returns:
        ``(old path, new path)`` per file moved.

    Raises:
        InvalidInput: a file cannot be moved (field ``--out``).
    """
    stamp = stamp or time.strftime("%Y%m%dT%H%M%S")
    moved = []
    for name in names:
        old = out_dir / name
        if not old.is_file():
            continue
        stem, dot, ext = name.partition(".")
        for n in itertools.count():
            new = out_dir / f"{stem}.{stamp}{'' if n == 0 else f'-{n}'}{dot}{ext}"
            if not new.exists():
                break
        try:
            old.rename(new)
        except OSError as exc:
            raise InvalidInput("--out", f"cannot move earlier {old} aside: {exc.strerror}") from None
        moved.append((old, new))
    return moved


def missing_dirs(path: Path) -> list[Path]:
    """``path`` and its parents that do not exist yet, deepest first (what
    :func:`prepare_out_dir` will create; :func:`remove_empty` undoes it after a failure)."""
    out = []
    for d in (path, *path.parents):
        if d.exists():
            break
        out.append(d)
    return out


def remove_empty(dirs: list[Path]) -> None:
    """Remove each of ``dirs`` that is an empty directory (deepest first), so a run that failed
    before writing anything leaves no empty output directory; non-empty ones stay."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            pass


def prepare_out_dir(out_dir: Path) -> None:
    """Create ``out_dir`` (and parents) now, so a bad ``--out`` fails before any run.

    Raises:
        InvalidInput: ``out_dir`` is a file (:func:`check_out_dir`), or the directory cannot
            be created or written (field ``--out``).
    """
    check_out_dir(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".safs-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise InvalidInput("--out", f"cannot write results to {out_dir}: {exc.strerror}") from None


def write_results(records: list[dict[str, Any]], out_dir: Path) -> tuple[Path, Path]:
    """Write ``results.json`` and ``results.csv`` into ``out_dir`` (created if missing).

    Raises:
        InvalidInput: the files cannot be written (field ``--out``).
    """
    prepare_out_dir(out_dir)
    clean = [{k: _jsonable(v) for k, v in r.items()} for r in records]
    json_path = out_dir / "results.json"
    csv_path = out_dir / "results.csv"
    keys = list(dict.fromkeys(k for r in clean for k in r))
    try:
        json_path.write_text(json.dumps(clean, indent=1) + "\n")
        with csv_path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=keys)
            writer.writeheader()
            writer.writerows(clean)
    except OSError as exc:
        raise InvalidInput("--out", f"cannot write results to {out_dir}: {exc.strerror}") from None
    return json_path, csv_path

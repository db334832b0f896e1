"""Run scenarios: every (policy, seed, repetition, swept parameter) combination, on a run
backend: ``sim`` (the packet simulator, :mod:`safs.experiments.sim.backend`) or ``mininet``
(BMv2 in Mininet, :mod:`safs.experiments.mininet.backend`); the CLI calls the backend
``--target``.

Writes ``results.json`` (a list of records, schema in docs/results.md) and ``results.csv`` into
the output directory and returns the records. Records hold numbers only, with the unit in the
key name (``tpot_p99_ms``); NaN (no samples) is written as ``null``.
"""

from __future__ import annotations

import csv
import importlib.util
import itertools
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safs.core.errors import InvalidInput
from safs.experiments.backends import BACKENDS
from safs.experiments.metrics import flow_metrics
from safs.experiments.mininet.backend import check_policies, run_mininet
from safs.experiments.parallel import map_ordered
from safs.experiments.policies import get_policy
from safs.experiments.runs import RunSpec, build_run, expand, miss_tolerance_ns, run_seed
from safs.experiments.scenario import Scenario
from safs.experiments.sim.backend import simulate
from safs.experiments.sim.bindings import SafsFlows
from safs.experiments.sim.config import SimResult

log = logging.getLogger(__name__)

RESULT_FILES = ("results.json", "results.csv", "samples.jsonl")  # moved aside, not overwritten


def check(scenario: Scenario, backend: str = "sim") -> None:
    """Validate everything every run of ``scenario`` needs, without simulating.

    Raises:
        InvalidInput: unknown backend or policy (the message lists the valid ones), or a bad
            topology, workload parameter, background setting or simulator setting.
    """
    if backend not in BACKENDS:
        raise InvalidInput("--target", f"unknown target {backend!r}; valid: {', '.join(BACKENDS)}")
    for policy in scenario.policies:
        get_policy(policy, "policies", scenario.source)
    if backend == "mininet":
        check_policies(scenario.policies, scenario.source)
    seen = set()
    config = None
    for spec in expand(scenario):
        if (spec.background_flows, spec.load) not in seen:  # workloads differ only by these
            seen.add((spec.background_flows, spec.load))
            _, _, config = build_run(scenario, spec)
    # The SAFS hosts' settings under each SAFS policy's own (a policy may set late_transfers).
    for policy in scenario.policies if config is not None else ():
        pol = get_policy(policy)
        try:
            if pol.sim is not None and issubclass(pol.sim, SafsFlows):
                pol.sim_config(config)[0].safs_config()
        except InvalidInput as exc:
            raise InvalidInput(exc.field, f"{exc.message} under policy {policy!r}", scenario.source) from None


@dataclass(frozen=True)
class RunOutput:
    """One run's record (numbers only) and its sample lists (``Workload.samples()``)."""

    record: dict[str, Any]
    samples: dict[str, list[float]]


def run_one_output(scenario: Scenario, spec: RunSpec, backend: str = "sim") -> RunOutput:
    """One simulator run with its samples; module-level so process pools and Ray can call it.

    Raises:
        InvalidInput: ``backend`` other than ``sim`` (Mininet runs go one after another through
            :func:`safs.experiments.mininet.backend.run_mininet`, never through a pool).
    """
    if backend != "sim":
        raise InvalidInput("--target", f"only sim runs go through the pool, got {backend!r}")
    samples: dict[str, list[float]] = {}
    record = run_one_sim(scenario, spec, samples)
    return RunOutput(record, samples)


def run_one_sim(scenario: Scenario, spec: RunSpec, samples: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """Simulate one run and return its record (keys documented in docs/results.md).

    ``samples``, when given, is filled with the run's sample lists (``Workload.samples()``).
    """
    topology, workload, config = build_run(scenario, spec)
    started = time.perf_counter()
    result = simulate(topology, workload, spec.policy, run_seed(spec), config)
    wall = time.perf_counter() - started
    record = spec.record_head(scenario, "sim")
    record.update(result.workload_metrics)
    record.update(flow_metrics(result.flows, miss_tolerance_ns(scenario)))
    record["miss_tolerance_ms"] = scenario.miss_tolerance_us / 1000
    record.update(control_metrics(result, workload.warmup_end_ns()))
    record["data_bytes"] = result.data_bytes
    record["drops"] = result.drops
    record["sim_events"] = result.events
    record["sim_time_ms"] = result.sim_time_ns / 1_000_000
    record["workload_done"] = result.workload_done
    record["wall_time_s"] = wall
    if samples is not None:
        samples.update(workload.samples())
    return record


def control_metrics(result: SimResult, warmup_end_ns: int | None) -> dict[str, Any]:
    """The control-plane figures of one simulated run (docs/results.md, "Control"): switch
    updates asked for and written (all switches), the largest per-switch write rate averaged
    after the workload's warm-up (``warmup_end_ns``; the whole run without one) and in the
    busiest 10 ms window, the write delay's p99, SAFS control packets and their bytes, the
    encoded size of the writes, the profile, and (control packet bytes + write bytes) per SAFS
    data byte."""
    c = result.control
    safs_data = result.transport.safs_data_bytes
    control = result.control_bytes + c.write_bytes
    return {
        "control_profile": result.control_profile,
        "control_updates_requested": c.requested_updates,
        "control_updates": c.updates,
        "control_updates_per_s": c.updates_per_s(warmup_end_ns or 0, result.sim_time_ns),
        "control_updates_per_s_peak": c.updates_per_s_peak(),
        "control_write_delay_p99_ms": c.write_delay_p99_ns() / 1e6,
        "control_packets": result.control_packets,
        "control_packet_bytes": result.control_bytes,
        "control_write_bytes": c.write_bytes,
        "control_bytes_per_data_byte": control / safs_data if safs_data else float("nan"),
    }


def run_scenario(
    scenario: Scenario,
    backend: str = "sim",
    progress: Callable[[RunSpec], None] | None = None,
    jobs: int | None = 1,
    ray_address: str | None = None,
) -> list[dict[str, Any]]:
    """Run every combination of a scenario on ``backend`` (``sim``, or ``mininet``: serial, as
    root with Mininet and BMv2, docs/mininet.md).

    ``jobs`` local worker processes (1: serial, None: one per CPU) or an existing Ray cluster
    at ``ray_address`` (:func:`safs.experiments.parallel.map_ordered`); the records are the same
    and in :func:`expand` order either way, apart from ``wall_time_s``.

    Raises:
        InvalidInput: as :func:`check`, which runs first; bad ``jobs`` or ``ray_address``.
    """
    return [out.record for out in run_scenario_outputs(scenario, backend, progress, jobs, ray_address)]


def run_scenario_outputs(
    scenario: Scenario,
    backend: str = "sim",
    progress: Callable[[RunSpec], None] | None = None,
    jobs: int | None = 1,
    ray_address: str | None = None,
) -> list[RunOutput]:
    """As :func:`run_scenario`, with each run's samples (:class:`RunOutput`)."""
    check(scenario, backend)
    specs = list(expand(scenario))
    if backend == "mininet":  # one emulated network, runs one after another in real time
        outputs = [RunOutput(record, samples) for record, samples in run_mininet(scenario, specs, progress)]
    else:
        done = (lambda i: progress(specs[i])) if progress else None
        outputs = map_ordered(run_one_output, [(scenario, spec, backend) for spec in specs], jobs, ray_address, done)
    warn_unfinished(scenario, [out.record for out in outputs])
    return outputs


def warn_unfinished(scenario: Scenario, records: list[dict[str, Any]]) -> int:
    """Log one warning naming the scenario file and its ``max_time_ms`` when runs reached the
    horizon before their workload finished (their figures count unfinished flows as missed
    and leave out what never started). Returns how many runs did."""
    unfinished = [r for r in records if r.get("workload_done") is False or r.get("pipeline_unfinished", 0) > 0]
    if unfinished:
        first = unfinished[0]
        log.warning("%s: max_time_ms %g: %d of %d runs ended before the workload finished (first: policy %s, "
                    "%s bulk flows, seed %s, %s pipeline flows unfinished); raise max_time_ms",
                    scenario.source, scenario.max_time_ms, len(unfinished), len(records), first.get("policy"),
                    first.get("background_flows"), first.get("seed"), first.get("pipeline_unfinished", "?"))
    return len(unfinished)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def check_backend_available(backend: str) -> None:
    """Cheap check, starting nothing, that ``backend`` can run on this machine.

    ``sim`` always can; ``mininet`` needs root, the Mininet Python package and BMv2's
    ``simple_switch_grpc`` on PATH (docs/mininet.md).

    Raises:
        InvalidInput: field ``--target mininet``, one line naming everything missing.
    """
    if backend != "mininet":
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
    """Move earlier output files (or folders) ``out_dir/NAME`` aside so a new run loses nothing.

    ``results.json`` becomes ``results.<stamp>.json``, a folder ``plots`` ``plots.<stamp>``
    (``stamp``: local time, YYYYMMDDTHHMMSS; ``-1``, ``-2``... appended if that name is taken).
    Names that do not exist are skipped.

    Returns:
        ``(old path, new path)`` per file moved.

    Raises:
        InvalidInput: a file cannot be moved (field ``--out``).
    """
    stamp = stamp or time.strftime("%Y%m%dT%H%M%S")
    moved = []
    for name in names:
        old = out_dir / name
        if not old.exists():
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

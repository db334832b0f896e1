"""``safs run SCENARIO... [--out DIR]``: run scenario files (simulator or Mininet) and print
one table per scenario (README.md, docs/results.md)."""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from safs.apps.cliargs import progress_bar
from safs.core.errors import InvalidInput
from safs.core.files import scenario_path
from safs.core.numfmt import sig
from safs.experiments.parallel import check_jobs, check_ray
from safs.experiments.runner import (
    RESULT_FILES,
    archive_previous,
    check,
    check_backend_available,
    check_out_dir,
    missing_dirs,
    prepare_out_dir,
    remove_empty,
    run_scenario,
    write_results,
)
from safs.experiments.runs import cli_overrides, expand
from safs.experiments.scenario import load_scenario


def _fmt(value: Any, digits: int = 3) -> str:
    return sig(value, digits)


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
    return statistics.fmean(vals) if vals else float("nan")


def summary_table(name: str, records: list[dict[str, Any]], swept: Sequence[str] = ()) -> Table:
    """One row per (policy, swept parameters): means over seeds and repetitions; misses summed.
    ``swept``: the scenario's ``workload.sweep`` parameters, one column each."""
    has_tpot = any("tpot_p99_ms" in r for r in records)
    has_iter = any("iteration_time_ms" in r for r in records)
    has_coll = any("collective_time_ms" in r for r in records)
    has_load = any(r["load"] for r in records)

    runs = len({(r["seed"], r["repetition"]) for r in records})
    target = records[0]["target"] if records else "?"
    profiles = sorted({str(r["control_profile"]) for r in records if "control_profile" in r})
    has_control = any("control_updates_per_s" in r for r in records)
    profile_note = "".join(f"; control profile {p}{' (ablation)' if p.startswith('ideal') else ''}" for p in profiles)
    table = Table(title=f"{name} (target {target}{profile_note}; {runs} run(s) per row, means; misses summed)")
    for col in ("policy", *swept, "bg"):
        table.add_column(col)
    if has_load:
        table.add_column("load")
    if has_tpot:
        table.add_column("TPOT ms p50/p99", justify="right")
    if has_iter:
        table.add_column("iter ms (/ideal)", justify="right")
    if has_coll:
        table.add_column("coll ms (/bound)", justify="right")
    for col in ("misses", "late ms p99/max", "pipe FCT ms mean/p99", "bg FCT ms mean/p99", "ctrl/data B"):
        table.add_column(col, justify="right")
    if has_control:
        for col in ("upd/s avg/peak", "write p99 ms"):
            table.add_column(col, justify="right")
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        key = (tuple(r[k] for k in swept), r["background_flows"], r["load"], r["policy"])
        groups.setdefault(key, []).append(r)
    for (values, bulk, load, policy), rows in groups.items():
        cells = [policy, *(str(v) for v in values), str(bulk)] + ([_fmt(load)] if has_load else [])
        if has_tpot:
            cells.append(f"{_fmt(_mean(rows, 'tpot_p50_ms'))}/{_fmt(_mean(rows, 'tpot_p99_ms'))}")
        if has_iter:
            cells.append(f"{_fmt(_mean(rows, 'iteration_time_ms'))} ({_fmt(_mean(rows, 'iteration_time_ratio'))})")
        if has_coll:
            cells.append(f"{_fmt(_mean(rows, 'collective_time_ms'))} ({_fmt(_mean(rows, 'collective_ratio'))})")
        misses = sum(int(r["pipeline_deadline_misses"]) for r in rows)
        flows = sum(int(r["pipeline_flows"]) for r in rows)
        cells += [
            f"{misses}/{flows}",
            f"{_fmt(_mean(rows, 'pipeline_late_p99_ms'))}/{_fmt(_mean(rows, 'pipeline_late_max_ms'))}",
            f"{_fmt(_mean(rows, 'pipeline_fct_mean_ms'))}/{_fmt(_mean(rows, 'pipeline_fct_p99_ms'))}",
            f"{_fmt(_mean(rows, 'background_fct_mean_ms'))}/{_fmt(_mean(rows, 'background_fct_p99_ms'))}",
            _fmt(_mean(rows, "control_bytes_per_data_byte"), 2),
        ]
        if has_control:
            cells += [f"{_fmt(_mean(rows, 'control_updates_per_s'))}/{_fmt(_mean(rows, 'control_updates_per_s_peak'))}",
                      _fmt(_mean(rows, "control_write_delay_p99_ms"))]
        table.add_row(*cells)
    return table


def run(args: argparse.Namespace, console: Console) -> int:
    """``safs run``: check every scenario and option first, then run them; returns the exit status."""
    overrides = cli_overrides(args.seeds, args.policies)
    # Everything is checked before the first run and before the output directory is created,
    # so a typo in the last file or a bad option costs nothing and leaves nothing behind.
    check_out_dir(args.out)
    if args.target == "mininet" and (args.jobs is not None or args.ray is not None):
        raise InvalidInput(
            "--target mininet",
            f"runs one run at a time in real time; drop {'--jobs' if args.jobs is not None else '--ray'}",
        )
    check_ray(args.ray, args.jobs)
    if args.ray is None:
        check_jobs(args.jobs)
    check_backend_available(args.target)
    scenarios = [load_scenario(scenario_path(p), overrides) for p in args.scenarios]
    for scenario in scenarios:
        check(scenario, args.target)
    created = missing_dirs(args.out)
    prepare_out_dir(args.out)
    try:
        return _run_all(args, console, scenarios)
    except BaseException:
        remove_empty(created)  # e.g. Ray unreachable: no empty --out left behind
        raise


def _run_all(args: argparse.Namespace, console: Console, scenarios: list[Any]) -> int:
    for old, new in archive_previous(args.out, RESULT_FILES):
        console.print(f"earlier {old.name} moved to {new}", highlight=False)
    all_records: list[dict[str, Any]] = []
    total = sum(len(list(expand(s))) for s in scenarios)
    with progress_bar(console, args.quiet) as progress:
        task = progress.add_task("simulating", total=total)
        for scenario in scenarios:
            progress.update(task, description=f"{scenario.name}")
            records = run_scenario(
                scenario,
                args.target,
                progress=lambda spec: progress.advance(task),
                jobs=args.jobs,
                ray_address=args.ray,
            )
            all_records.extend(records)
            write_results(all_records, args.out)  # after each scenario: nothing finished is lost
            progress.console.print(summary_table(scenario.name, records, list(scenario.workload.sweep)))
    n = len(all_records)
    console.print(
        f"wrote {n} record{'s' if n != 1 else ''} to {args.out / 'results.json'} (and results.csv); "
        "columns: docs/results.md"
    )
    return 0

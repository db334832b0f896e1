"""``safs eval``: run the paper's experiments (or the baselines' own-paper checks) and write
results, summaries with confidence intervals, and plots (docs/evaluation.md).

    safs eval --list
    safs eval zerobubble afd-16a2f urgent [--out results/eval] [--jobs N | --ray ADDRESS]
    safs eval all                      # the paper's three experiments and the baseline checks
    safs eval baseline-checks
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from safs.apps.cliargs import progress_bar
from safs.core.errors import InvalidInput
from safs.core.numfmt import percent, sig
from safs.experiments.eval import experiments as ex
from safs.experiments.eval.experiments import CHECKS_NAME, EXPERIMENTS, write_outputs
from safs.experiments.parallel import check_jobs, check_ray, map_ordered
from safs.experiments.runner import (
    RunOutput,
    archive_previous,
    check_out_dir,
    missing_dirs,
    prepare_out_dir,
    remove_empty,
    run_one_output,
)
from safs.experiments.runs import cli_overrides

# An experiment directory's data files and plots: moved aside (results.<time>.json,
# plots.<time>/), never overwritten.
EXPERIMENT_FILES = ("results.json", "results.csv", "samples.jsonl", "summary.json", "summary.csv", "plots")
CHECK_FILES = ("checks.json", "checks.csv")


def _fmt(mean: float, half: float) -> str:
    if mean is None or math.isnan(mean):
        return "-"
    text = sig(mean, 3)
    return text if half is None or math.isnan(half) else f"{text} ± {sig(half, 2)}"


def _summary_table(exp: Any, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=f"{exp.name}: mean ± 95% t-interval half-width over seeds")
    for col in ("policy", *exp.group_by, "bg", "runs", *exp.metrics):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in rows:
        table.add_row(
            r["policy"],
            *(str(r[k]) for k in exp.group_by),
            str(r["background_flows"]),
            str(r["runs"]),
            *[_fmt(r[f"{m}_mean"], r[f"{m}_ci95"]) for m in exp.metrics],
        )
    return table


def _verdict_table(name: str, verdict: list[dict[str, Any]]) -> Table:
    table = Table(title=f"{name}: against the paper or the issue's target")
    for col in ("check", "ours", "paper", "pass"):
        table.add_column(col)
    for v in verdict:
        table.add_row(v["check"], v["ours"], v["paper"], "yes" if v["pass"] else "NO")
    return table


def _ablation_table(name: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(
        title=f"{name}: share of SAFS's gain over {rows[0]['reference']} kept by each ablation ({rows[0]['metric']})"
    )
    for col in ("bg", "gain", "without grants", "without classes"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["background_flows"]),
            sig(r["gain"]),
            f"{r['kept_without_grants']:.0%}",
            f"{r['kept_without_classes']:.0%}",
        )
    return table


def _list(console: Console) -> int:
    table = Table(title="safs eval NAME")
    table.add_column("name")
    table.add_column("what")
    table.add_column("scenario")
    for e in EXPERIMENTS.values():
        table.add_row(e.name, e.what, f"scenarios/{e.scenario}")
    table.add_row(
        CHECKS_NAME,
        "the baselines' own-paper checks (Homa, pFabric, D2TCP; docs/baselines.md)",
        "controller/safs/experiments/eval/checks/",
    )
    table.add_row("all", "the paper's three experiments and the baseline checks (the others: by name)", "")
    console.print(table)
    return 0


def run(args: argparse.Namespace, console: Console) -> int:
    """Execute ``safs eval``; returns the exit status (1 if a baseline check is missing).

    Raises:
        InvalidInput: unknown experiment or policy (the message lists the valid ones), bad
            ``--jobs``/``--ray``, unwritable ``--out``, or a bad scenario.
    """
    if args.list:
        if args.names:
            raise InvalidInput("--list", f"lists every experiment and takes no NAME; got {' '.join(args.names)}")
        return _list(console)
    if not args.names:
        raise InvalidInput(
            "NAME", f"give experiment name(s); valid: {', '.join([*ex.EXPERIMENTS, ex.CHECKS_NAME, 'all'])}"
        )
    names: list[str] = []
    for n in args.names:
        names += [*ex.PAPER_EXPERIMENTS, ex.CHECKS_NAME] if n == "all" else [n]
    names = list(dict.fromkeys(names))
    exps = []
    for n in names:
        if n != ex.CHECKS_NAME:
            try:
                exps.append(ex.experiment(n))
            except InvalidInput as exc:
                raise InvalidInput("NAME", exc.message) from None
    run_checks = ex.CHECKS_NAME in names
    for option, value in (("--seeds", args.seeds), ("--policies", args.policies)):
        if value and run_checks:
            raise InvalidInput(
                option,
                f"does not apply to {ex.CHECKS_NAME} (each check uses its paper's setup); "
                f"name the experiments instead: {', '.join(ex.EXPERIMENTS)}",
            )
    check_out_dir(args.out)
    check_ray(args.ray, args.jobs)
    if args.ray is None:
        check_jobs(args.jobs)
    overrides = cli_overrides(args.seeds, args.policies)
    if args.policies and "safs" not in args.policies:
        console.print("no safs in --policies: the comparison with the paper is skipped", highlight=False)
    # Load and check every scenario before the first run.
    if args.replot:
        return _replot(args, console, exps)
    scenarios = []
    for e in exps:
        scenario = e.load(args.quick, overrides)
        have, lacking = ex.available_policies(scenario)
        if lacking:
            console.print(f"[yellow]{e.name}: policies not in this build, skipped: {', '.join(lacking)}[/yellow]")
            scenario = e.load(args.quick, {**overrides, "policies": have})
        scenarios.append(scenario)
    task_lists = [ex.tasks(s) for s in scenarios]
    # Directories created here are removed again if the sweep fails before writing into them.
    created = [args.out / e.name for e in exps if not (args.out / e.name).exists()] + missing_dirs(args.out)
    try:
        return _run_all(args, console, ex, exps, task_lists, run_checks)
    except BaseException:
        remove_empty(created)
        raise


def _run_all(
    args: argparse.Namespace,
    console: Console,
    ex: Any,
    exps: list[Any],
    task_lists: list[list[tuple]],
    run_checks: bool,
) -> int:
    """The runs, output files and tables of :func:`run` once everything is checked."""
    prepare_out_dir(args.out)
    for e in exps:
        prepare_out_dir(args.out / e.name)
        _moved(console, archive_previous(args.out / e.name, EXPERIMENT_FILES))
    flat = [t for ts in task_lists for t in ts]
    started = time.perf_counter()
    with progress_bar(console, args.quiet) as progress:
        bar = progress.add_task("simulating", total=len(flat))
        outputs = map_ordered(run_one_output, flat, args.jobs, args.ray, lambda i: progress.advance(bar))
    status = 0
    simulation_wall_s = time.perf_counter() - started
    timings: dict[str, dict[str, Any]] = {}
    pos = 0
    for e, ts in zip(exps, task_lists):
        mine = outputs[pos : pos + len(ts)]
        pos += len(ts)
        timings[e.name] = {
            "runs": len(mine),
            "quick": bool(args.quick),
            "run_cpu_s": sum(o.record["wall_time_s"] for o in mine),
        }
        result = ex.write_outputs(e, mine, args.out / e.name)
        console.print(_summary_table(e, result["summary"]))
        if result["verdict"]:
            console.print(_verdict_table(e.name, result["verdict"]))
        if result["ablation"]:
            console.print(_ablation_table(e.name, result["ablation"]))
        console.print(
            f"{e.name}: {len(mine)} runs -> {args.out / e.name} (results.json/csv, samples.jsonl, "
            f"summary.csv/json, {len(result['plots'])} plot files)"
        )
    if run_checks:
        status = _checks(args, console, ex, map_ordered)
    if not flat:
        return status
    executor = f"Ray {args.ray}" if args.ray else f"{check_jobs(args.jobs)} local worker(s)"
    sweep = {
        "sweep": [e.name for e in exps],
        "sweep_runs": len(flat),
        "sweep_simulation_wall_s": simulation_wall_s,
        "sweep_total_wall_s": time.perf_counter() - started,
        "executor": executor,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _merge_timing(console, args.out / "timing.json", {name: {**t, **sweep} for name, t in timings.items()})
    console.print(f"simulated {len(flat)} runs in {simulation_wall_s:.0f} s ({executor})")
    return status


def _moved(console: Console, moved: list[tuple[Path, Path]]) -> None:
    for old, new in moved:
        console.print(f"earlier {old} moved to {new.name}", highlight=False)


def _merge_timing(console: Console, path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Merge ``entries`` (experiment name -> its timing) into ``path``; other experiments' entries
    stay. A file in another form is moved aside first (nothing is lost)."""
    old: dict[str, Any] = {}
    if path.is_file():
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = None  # type: ignore[assignment]
        if not isinstance(old, dict) or not all(isinstance(v, dict) for v in old.values()):
            _moved(console, archive_previous(path.parent, (path.name,)))
            old = {}
    path.write_text(json.dumps({**old, **entries}, indent=1) + "\n")


def _replot(args: argparse.Namespace, console: Console, exps: list[Any]) -> int:
    """Summaries and plots of earlier runs, from their results.json and samples.jsonl."""
    missing = 0
    for e in exps:
        d = args.out / e.name
        try:
            records = json.loads((d / "results.json").read_text())
            lines = [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]
            if len(lines) != len(records):
                raise ValueError(f"samples.jsonl has {len(lines)} lines for {len(records)} records")
        except (OSError, ValueError) as exc:
            missing += 1
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            console.print(
                f"[yellow]{e.name}: no earlier results to replot in {d} ({why}); "
                f"run: safs eval {e.name} --out {args.out}[/yellow]",
                highlight=False,
            )
            continue
        records = [{k: (float("nan") if v is None else v) for k, v in r.items()} for r in records]
        samples = [{k: v for k, v in x.items() if isinstance(v, list)} for x in lines]
        result = write_outputs(e, [RunOutput(r, s) for r, s in zip(records, samples)], d)
        console.print(_summary_table(e, result["summary"]))
        if result["verdict"]:
            console.print(_verdict_table(e.name, result["verdict"]))
        if result["ablation"]:
            console.print(_ablation_table(e.name, result["ablation"]))
    return 1 if missing else 0


def _checks(args: argparse.Namespace, console: Console, ex: Any, map_ordered: Any) -> int:
    """Run the baseline checks that exist; write checks.json/csv; 1 if any is missing."""
    missing = ex.check_missing()
    present = [m for m in ex.CHECK_MODULES if m not in missing]
    results = map_ordered(ex.run_check, [(m, True) for m in present], args.jobs, args.ray)
    rows = [{"baseline": m, **r} for m, r in zip(present, results)]
    rows += [
        {"baseline": m, "error": f"safs.experiments.eval.checks.{m} is missing (docs/baselines.md)"} for m in missing
    ]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    out = args.out / ex.CHECKS_NAME
    out.mkdir(parents=True, exist_ok=True)
    _moved(console, archive_previous(out, CHECK_FILES))
    (out / "checks.json").write_text(json.dumps(rows, indent=1, default=str) + "\n")
    with (out / "checks.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    # The common keys in columns; the rest (setup, source, extra figures) below the table.
    main = [k for k in ("baseline", "metric", "paper_value", "measured", "deviation", "error") if k in keys]
    table = Table(title="baselines' own-paper checks (docs/baselines.md)")
    for k in main:
        table.add_column(k, justify="left" if k in ("baseline", "metric", "error") else "right")
    for r in rows:
        table.add_row(
            *[
                percent(r[k])
                if k == "deviation" and isinstance(r.get(k), float)
                else sig(r[k])
                if isinstance(r.get(k), float)
                else str(r.get(k, ""))
                for k in main
            ]
        )
    console.print(table)
    for r in rows:
        for k, v in r.items():
            if k not in main:
                console.print(
                    f"  {r['baseline']} {k}: {v:.4g}" if isinstance(v, float) else f"  {r['baseline']} {k}: {v}",
                    highlight=False,
                )
    console.print(f"-> {out / 'checks.json'} (and checks.csv)")
    for m in missing:
        console.print(
            f"[red]safs eval: error: safs.experiments.eval.checks.{m} is missing: the {m} check did not run[/red]"
        )
    return 1 if missing else 0

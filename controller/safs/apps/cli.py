"""The ``safs`` command line.

``safs run SCENARIO... [--out DIR]`` runs scenarios on the simulator and prints one table per
scenario. ``safs controller --topology FILE --switch NAME=HOST:PORT[:DEVICE_ID]...`` runs the
controller over P4Runtime with the hint API (docs/controller.md). ``safs eval NAME...`` runs
the paper's experiments (docs/evaluation.md); ``run`` and ``eval`` take ``--jobs N`` (local
processes, default one per CPU) or ``--ray ADDRESS`` (an existing Ray cluster). User errors (bad files, bad values)
print one line naming the file and key and exit
with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import statistics
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from safs import __version__
from safs.apps.cliargs import OneLineParser
from safs.apps.eval_command import add_parser as add_eval_parser
from safs.apps.eval_command import run as run_eval
from safs.apps.fake_switch_command import add_parser as add_fake_switch_parser
from safs.apps.fake_switch_command import run as run_fake_switch
from safs.control.controller import ControllerApp, config_from_args
from safs.control.metrics import parse_metrics_addr, serve_metrics
from safs.core.errors import InvalidInput, SafsError, TargetConnectionError, TargetError
from safs.core.files import BMV2_JSON_PATH, P4INFO_PATH, scenario_path
from safs.core.numfmt import sig
from safs.core.topology import load_topology
from safs.experiments.parallel import check_jobs, check_ray
from safs.experiments.runner import (
    BACKENDS,
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
from safs.targets.p4rt.p4info import P4InfoIndex


def _unique(values: list[Any], text: str) -> list[Any]:
    # A repeated seed or policy would count the same runs twice and narrow the intervals.
    dup = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if dup is not None:
        raise argparse.ArgumentTypeError(f"duplicate {dup} in {text!r}; each may appear once")
    return values


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 0, got {text!r}")
    return _unique(values, text)


def _name_list(text: str) -> list[str]:
    names = text.split(",")
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return _unique(names, text)


def _build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="safs", description="Slack-Aware Flow Scheduling for pipelined AI workloads")
    parser.add_argument("--version", action="version", version=f"safs {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run scenario files and print a table per scenario")
    run.add_argument(
        "scenarios",
        nargs="+",
        metavar="SCENARIO",
        help="scenario YAML file(s) or shipped scenario names (e.g. zerobubble, afd-16a2f)",
    )
    run.add_argument(
        "--out",
        type=Path,
        default=Path("results"),
        help="directory for results.json/csv (default: results); earlier results there are moved "
        "aside as results.<YYYYMMDDTHHMMSS>.json/csv",
    )
    run.add_argument("--target", default="sim", choices=BACKENDS, help="where to run (default: sim)")
    run.add_argument("--seeds", type=_int_list, help="override the scenario's seeds, e.g. 1,2,3")
    run.add_argument("--policies", type=_name_list, help="override the policies, e.g. safs,dctcp")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--jobs", type=int, default=None, help="local worker processes (default: one per CPU)")
    run.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="run on an existing Ray cluster instead: auto, local, ray://HOST:PORT or HOST:PORT (not with --jobs)",
    )
    add_eval_parser(sub, _int_list, _name_list)
    add_fake_switch_parser(sub)
    ctl = sub.add_parser(
        "controller", help="run the SAFS controller: switches over P4Runtime, hint API (docs/controller.md)"
    )
    ctl.add_argument("--topology", required=True, metavar="FILE", help="topology YAML")
    ctl.add_argument(
        "--switch",
        action="append",
        metavar="NAME=HOST:PORT[:DEVICE_ID]",
        help="a topology switch's P4Runtime address (repeat per switch; device id default 0)",
    )
    ctl.add_argument(
        "--hint-addr",
        default="127.0.0.1:50051",
        metavar="HOST:PORT",
        help="address the hint API binds (default 127.0.0.1:50051)",
    )
    ctl.add_argument(
        "--p4info", default=None, metavar="FILE", help="compiled P4Info (default: the shipped v1model program's)"
    )
    ctl.add_argument(
        "--bmv2-json", default=None, metavar="FILE", help="compiled BMv2 JSON (default: the shipped v1model program's)"
    )
    ctl.add_argument("--tick-ms", default="1", metavar="MS", help="scheduler tick period in ms (default 1)")
    ctl.add_argument(
        "--metrics-addr",
        default=None,
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off; docs/controller.md)",
    )
    ctl.add_argument(
        "--duration-s", default=None, metavar="S", help="stop after S seconds (default: until SIGINT/SIGTERM)"
    )
    ctl.add_argument(
        "--scheduler-config",
        default=None,
        metavar="YAML",
        help="SchedulerConfig fields (allocator: AllocatorConfig fields)",
    )
    for flag, what in (("--tls-cert", "PEM certificate of the hint API (TLS)"),
                       ("--tls-key", "its private key"),
                       ("--tls-client-ca", "CA of the applications' client certificates: mutual TLS (recommended)"),
                       ("--tls-identities", "YAML: applications by certificate name, their hosts and quotas "
                        "(docs/operations.md)"),
                       ("--p4rt-ca", "CA to verify the switches' P4Runtime certificates against (TLS)"),
                       ("--p4rt-cert", "this controller's certificate for switches that demand client auth"),
                       ("--p4rt-key", "its private key")):
        ctl.add_argument(flag, default=None, metavar="FILE", help=what)
    ctl.add_argument(
        "--insecure",
        action="store_true",
        help="allow a plaintext, unauthenticated hint API on a non-loopback address (local tests only)",
    )
    ctl.add_argument(
        "--election-id",
        default="1",
        metavar="N",
        help="P4Runtime election id (1..2^64-1, default 1): the highest connected controller is primary, "
        "the others stand by as backups and take over when it is gone (docs/operations.md)",
    )
    ctl.add_argument(
        "--model",
        action="store_true",
        help="run every topology switch as an in-process pipeline model instead of --switch (try the "
        "controller, hint API and metrics without BMv2; docs/controller.md)",
    )
    ctl.add_argument(
        "--state",
        default=None,
        metavar="DIR",
        help="keep the controller's state (dependencies, flows) in DIR/safs-state.sqlite3, so a restart "
        "loses nothing acknowledged (default: none; docs/operations.md)",
    )
    ctl.add_argument(
        "--reconcile-s",
        default="10",
        metavar="S",
        help="read every switch back and repair what differs every S seconds (0: only at start and "
        "reconnection; default 10)",
    )
    ctl.add_argument(
        "--clock-offset",
        action="append",
        metavar="NAME=NS",
        help="a switch's clock offset in ns, instead of the estimate (repeatable)",
    )
    ctl.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default INFO)",
    )
    return parser


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


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
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
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=args.quiet,
        transient=True,
    ) as progress:
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


def _cmd_controller(args: argparse.Namespace) -> int:
    """``safs controller``: validate everything, start, run until SIGINT/SIGTERM or --duration-s,
    stop cleanly. User errors raise SafsError (one line, exit 2)."""
    load_topology(Path(args.topology))  # a bad --topology first, before the --switch checks
    for option, attr, path in (("--p4info", "p4info", P4INFO_PATH), ("--bmv2-json", "bmv2_json", BMV2_JSON_PATH)):
        if getattr(args, attr) is None:
            if not path.is_file():
                raise InvalidInput(
                    option, f"default {path} does not exist (build it: docs/controller.md, or pass {option} FILE)"
                )
            setattr(args, attr, str(path))
    try:
        P4InfoIndex.from_file(args.p4info)
    except InvalidInput as exc:
        raise InvalidInput("--p4info", exc.message) from None
    try:
        json.loads(Path(args.bmv2_json).read_text())
    except OSError as exc:
        raise InvalidInput("--bmv2-json", f"cannot read {args.bmv2_json}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput("--bmv2-json", f"{args.bmv2_json} is not a BMv2 JSON file: {exc}") from None
    config = config_from_args(args)
    metrics_addr = parse_metrics_addr(args.metrics_addr) if args.metrics_addr is not None else None
    app = ControllerApp(config)  # checks the switch names against the topology
    logging.basicConfig(
        level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    metrics_server = None
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            app.start()
        except (TargetConnectionError, TargetError) as exc:  # name the switch as the user gave it
            if isinstance(exc, TargetConnectionError):
                if "election id already in use" in exc.message.lower():
                    raise InvalidInput("--election-id", f"{config.election_id[1]} is already used by another "
                                       f"controller of {exc.switch or exc.address} (after a takeover the primary "
                                       "runs with an id it chose: see its log); give another id") from None
                spec = next((s for s in config.switches if s.grpc_addr == exc.address), None)
                code, message = exc.code, f"{exc.operation} failed: {exc.message}"
            else:
                spec = next((s for s in config.switches if f"{s.name}:" in str(exc)), None)
                code, message = exc.failures[0].code, exc.failures[0].message
            if spec is None:
                raise
            raise InvalidInput(
                f"--switch {spec.name}={spec.grpc_addr}", f"switch unusable ({code}): {message}"
            ) from None
        if metrics_addr is not None:
            metrics_server = serve_metrics(app, *metrics_addr)
            logging.getLogger("safs.control.metrics").info(
                "Prometheus metrics at http://%s:%d/metrics", *metrics_server.server_address[:2])
        app.run(stop)
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
        app.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``safs`` console script; returns the exit status."""
    args = _build_parser().parse_args(argv)
    console = Console()
    if not console.is_terminal:  # files and pipes: wide enough that no column is cut
        console = Console(width=160)
    try:
        if args.command == "run":
            return _cmd_run(args, console)
        if args.command == "controller":
            return _cmd_controller(args)
        if args.command == "eval":
            return run_eval(args, console)
        if args.command == "fake-switch":
            return run_fake_switch(args)
    except SafsError as exc:
        print(f"safs: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("safs: interrupted", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())

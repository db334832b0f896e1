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
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from safs import __version__
from safs.apps.cliargs import OneLineParser
from safs.core.errors import SafsError
from safs.experiments.backends import BACKENDS

POLICIES_HELP = ("override the policies, e.g. safs,dctcp (docs/baselines.md lists them; an unknown name prints "
                 "the valid ones)")

# Each subcommand's module, imported only when that subcommand runs: `safs controller` does not
# pay for the simulator, SciPy and Matplotlib that `safs eval` imports (about 2 s of a restart).
COMMANDS = {
    "run": "safs.apps.run_command",
    "eval": "safs.apps.eval_command",
    "fake-switch": "safs.apps.fake_switch_command",
    "controller": "safs.apps.controller_command",
}


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


def _add_eval_parser(sub: Any) -> None:
    """Register the ``eval`` subcommand on ``sub`` (argparse subparsers)."""
    ev = sub.add_parser("eval", help="run the paper's experiments: results, CIs over seeds, plots (docs/evaluation.md)")
    ev.add_argument("names", nargs="*", metavar="NAME", help="experiment(s), 'baseline-checks' or 'all' (see --list)")
    ev.add_argument("--list", action="store_true", help="list the experiments and exit")
    ev.add_argument(
        "--out",
        type=Path,
        default=Path("results/eval"),
        help="output directory (default results/eval); earlier files of an experiment "
        "(and plots/) are moved aside as NAME.<YYYYMMDDTHHMMSS>.EXT, timing.json is merged per experiment",
    )
    ev.add_argument("--seeds", type=_int_list, help="override the seeds, e.g. 1,2,3")
    ev.add_argument("--policies", type=_name_list, help=POLICIES_HELP)
    ev.add_argument("--jobs", type=int, default=None, help="local worker processes (default: one per CPU)")
    ev.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="run on an existing Ray cluster instead: auto, local, ray://HOST:PORT or HOST:PORT (not with --jobs)",
    )
    ev.add_argument("--quick", action="store_true", help="smoke-size runs (fewer steps, seeds and levels)")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    ev.add_argument(
        "--replot",
        action="store_true",
        help="no runs: redo summaries and plots from OUT/NAME/results.json and samples.jsonl",
    )


def _add_fake_switch_parser(sub: Any) -> None:
    """Register the ``fake-switch`` subcommand on ``sub`` (argparse subparsers)."""
    fake = sub.add_parser(
        "fake-switch",
        help="serve in-process fake P4Runtime switches for a topology on loopback, to try the controller "
        "without BMv2 (docs/controller.md)",
    )
    fake.add_argument("--topology", required=True, metavar="FILE", help="topology YAML")
    fake.add_argument("--base-port", type=int, default=50100, metavar="PORT",
                      help="the first switch's TCP port on 127.0.0.1, the next ones follow (default 50100)")
    fake.add_argument("--duration-s", type=float, default=None, metavar="S",
                      help="stop after S seconds (default: until SIGINT/SIGTERM)")


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
    run.add_argument("--policies", type=_name_list, help=POLICIES_HELP)
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--jobs", type=int, default=None, help="local worker processes (default: one per CPU)")
    run.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="run on an existing Ray cluster instead: auto, local, ray://HOST:PORT or HOST:PORT (not with --jobs)",
    )
    _add_eval_parser(sub)
    _add_fake_switch_parser(sub)
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
        "--telemetry-s",
        default="1",
        metavar="S",
        help="read the receiver ports' counters and adapt their background shares every S seconds, "
        "with scheduler background_share_max set (0: never; default 1; docs/operations.md)",
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``safs`` console script; returns the exit status."""
    args = _build_parser().parse_args(argv)
    console = Console()
    if not console.is_terminal:  # files and pipes: wide enough that no column is cut
        console = Console(width=160)
    try:
        return int(importlib.import_module(COMMANDS[args.command]).run(args, console))
    except SafsError as exc:
        print(f"safs: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("safs: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""``safs controller``: the SAFS controller over P4Runtime (or in-process pipeline models) with
the hint API and, optionally, Prometheus metrics (docs/controller.md, docs/operations.md)."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import threading
from pathlib import Path

from rich.console import Console

from safs.apps.signals import stop_on_signals
from safs.control.bind import check_listen
from safs.control.controller import ControllerApp, StartInterrupted, config_from_args
from safs.control.metrics import parse_metrics_addr, serve_metrics
from safs.core.errors import InvalidInput, TargetConnectionError, TargetError
from safs.core.files import BMV2_JSON_PATH, P4INFO_PATH
from safs.core.topology import load_topology
from safs.targets.p4rt.p4info import P4InfoIndex

# Allocations between collections of the youngest generation (CPython's default is 700). The
# controller allocates a few short-lived objects per hint (protobuf messages, table entries) and
# keeps tens of thousands of long-lived ones (shadow state, the topology, the P4Info): at the
# default every 700 allocations a collection ran, and the older generations' collections walked
# all the long-lived ones. With gc.freeze() after start-up and this threshold the hint flood of
# benchmarks/bench_hints.py costs about a fifth less controller CPU per hint.
GC_GEN0_THRESHOLD = 20_000


def tune_gc() -> None:
    """Move what start-up built out of the collector's way (gc.freeze) and collect the youngest
    generation every GC_GEN0_THRESHOLD allocations; the older thresholds stay CPython's."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, older, oldest)


def run(args: argparse.Namespace, console: Console) -> int:
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
    if metrics_addr is not None:  # before any switch is touched, as the hint API's address
        check_listen("--metrics-addr", "{}:{}".format(*metrics_addr))
    app = ControllerApp(config)  # checks the switch names against the topology
    logging.basicConfig(
        level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    metrics_server = None
    with stop_on_signals(stop):
        try:
            try:
                app.start(stop)
            except StartInterrupted:
                logging.getLogger("safs.control.controller").info("stopped during start")
                return 0
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
            tune_gc()
            if metrics_addr is not None:
                metrics_server = serve_metrics(app, *metrics_addr)
                logging.getLogger("safs.control.metrics").info(
                    "Prometheus metrics at http://%s:%d/metrics", *metrics_server.server_address[:2])
            app.run(stop)
        finally:
            if metrics_server is not None:
                metrics_server.shutdown()
            app.stop()
    return 0

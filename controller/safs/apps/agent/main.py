"""The SAFS host agent: one process per emulated host (``python -m safs.apps.agent ...``).

::

    run driver --JSON lines (unix socket)--> agent --hint API (gRPC, unix:PATH)--> controller
                                               |  SAFS UDP :23285 (REQUEST/DATA <-> GRANT/DONE)
                                               |  TCP :5001 (baseline, background)

It announces SAFS flows to the controller (hint API, at once), sends them at their start
time with the SAFS transport (:mod:`safs.apps.agent.safs_socket`) or over Linux TCP
(:mod:`safs.apps.agent.tcp`), receives flows it was told to expect, tells the controller
when its SAFS flows completed (hint API Complete, once the last byte is sent), and keeps
``done`` events (fabric-time finish) for the driver to poll. Control protocol:
:mod:`safs.experiments.mininet.agent_control`; settings and behaviour: docs/mininet.md, "Host agent".

It prints ``READY <pid>`` on stdout once every socket is bound; SIGTERM (or the ``shutdown``
request) closes the sockets and removes the control path.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from safs.apps.agent.background import BackgroundGenerator
from safs.apps.agent.control_server import ControlServer
from safs.apps.agent.loop import Loop
from safs.apps.agent.safs_socket import GRANT_POLL_NS, REORDER_WINDOW_NS, RTO_NS, SafsEndpoint, emu_config
from safs.apps.agent.tcp import TcpEndpoint
from safs.apps.cliargs import OneLineParser
from safs.control.hintapi.client import HintClient
from safs.core.errors import InvalidInput, SafsError
from safs.core.hints import FlowClass, FlowHint
from safs.core.scheduler import SchedulerConfig
from safs.core.timebase import diff, fabric_clock, wrap
from safs.experiments.mininet.agent_control import Background, Expect, Send
from safs.hosts.safs import NO_DEADLINE_NS, SafsConfig

COMPLETE_LEAD_MAX_NS = 20_000_000  # cap of the sender's early Complete (SafsEndpoint.complete_lead_ns)
HINT_CONNECT_TIMEOUT_S = 5.0  # the warm-up connect of the hint channel (calls retry afterwards)
_log = logging.getLogger("safs.apps.agent")
DEFAULT_TCP_PORT = 5001
DEFAULT_LINE_RATE_BPS = 100_000_000


class Agent:
    """Everything one host runs (see module docstring); :meth:`run` blocks until stopped.

    Args:
        args: parsed command line (:func:`parse_args`).

    Raises:
        OSError: a socket cannot be bound (address not on this host, port in use).
        InvalidInput: a setting out of range (named).
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.host = args.host
        self.loop = Loop()
        self.events: list[dict[str, Any]] = []
        self.cfg = emu_config(args.default_rate_bps, args.mtu_bytes, args.unscheduled_bytes,
                              args.grant_poll_ns, args.reorder_window_ns, args.rto_ns, args.pace_burst_bytes,
                              args.urgency_quantum_ns, tuple(args.slack_thresholds_ns), args.grant_poll_backoff,
                              args.late_transfers, args.receiver_admission, args.admission_rate_fraction,
                              args.nic_yield_fraction)
        with _naming(f"--ip {args.ip}: SAFS UDP socket"):
            self.safs = SafsEndpoint(self.loop, args.ip, self.cfg, args.line_rate_bps,
                                     self._sender_done("safs"), self._receiver_done("safs"),
                                     on_sender_sent=self._sender_sent)
        with _naming(f"--ip {args.ip} --tcp-port {args.tcp_port}: TCP listener"):
            self.tcp = TcpEndpoint(self.loop, args.ip, args.tcp_port, self._sender_done("tcp"),
                                   self._receiver_done("tcp"), self._tcp_error, set_ecn=args.set_tcp_ecn)
        self.tcp_sending: set[int] = set()
        self.hints = None
        self.hint_pool: ThreadPoolExecutor | None = None  # Announce calls, in order
        self.complete_pool: ThreadPoolExecutor | None = None  # Complete calls, in order
        self.announced: dict[int, Future] = {}  # flow id -> its Announce call (until completed)
        self.hint_counts = {"announced": 0, "completed": 0, "errors": 0}
        self.hint_counts_lock = threading.Lock()  # two hint threads count
        self.hints_submitted = 0  # calls handed to the hint thread (pending = this - the three above)
        self.hints_ready = False  # the hint channel connected (stats "hints.ready")
        self.last_hint_error = ""
        if args.hint_addr:
            self.hints = HintClient(args.hint_addr)
            # Two workers: a Complete frees capacity other flows wait for, so it must not queue
            # behind Announces of later flows (which the controller only needs by their start).
            self.hint_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hints")
            self.complete_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="completes")
            # Connect before the first flow: a lazy connect made the run's first Announces late.
            self.hint_pool.submit(self._connect_hints)
        self.generators: list[BackgroundGenerator] = []
        with _naming(f"--control {args.control}"):
            self.control = ControlServer(self.loop, Path(args.control), self.handle)

    # ---- lifecycle -------------------------------------------------------------------------
    def run(self) -> None:
        """Serve until SIGTERM or ``shutdown``; then close everything."""
        try:
            self.loop.run()
        finally:
            self.close()

    def stop(self) -> None:
        """Make :meth:`run` return (safe from a signal handler)."""
        self.loop.running = False

    def close(self) -> None:
        """Close sockets, the hint channel, and remove the control path."""
        for gen in self.generators:
            gen.stopped = True
        self.control.close()
        self.safs.close()
        self.tcp.close()
        for pool in (self.hint_pool, self.complete_pool):
            if pool is not None:  # queued calls dropped; a running one ends within its timeout
                pool.shutdown(wait=True, cancel_futures=True)
        if self.hints is not None:
            self.hints.close()
        self.loop.close()

    # ---- control requests ------------------------------------------------------------------
    def handle(self, op: str, req: Any) -> dict[str, Any]:
        """Apply one checked control request (:func:`safs.experiments.mininet.agent_control.parse_request`).

        Raises:
            InvalidInput: the request conflicts with this host's state (flow id in use,
                missing ``dst_host``); nothing was changed.
        """
        if op == "expect":
            return self._expect(req)
        if op == "send":
            return self._send(req)
        if op == "background":
            return self._background(req)
        if op == "events":
            events, self.events = self.events, []
            return {"events": events}
        if op == "stats":
            return self.stats()
        self.loop.after(0, self.stop)  # shutdown: reply first
        return {}

    def _expect(self, req: Expect) -> dict[str, Any]:
        if req.transport == "tcp":
            self.tcp.expect(req.flow_id)
            return {"port": self.args.tcp_port}
        if req.flow_id in self.safs.receivers:
            raise InvalidInput("flow_id", f"flow {req.flow_id} is already expected on {self.host}; ids must be unique")
        self.safs.expect(req.flow_id, req.src_ip, req.size_bytes, req.no_bubble_ts_ns, req.firm)
        return {}

    def _start_at(self, send_at_ns: int) -> int:
        """Monotonic ns for a fabric time (0 or past: now)."""
        now = self.loop.now()
        if send_at_ns == 0:
            return now
        return now + max(0, diff(wrap(send_at_ns), fabric_clock()))

    def _send(self, req: Send) -> dict[str, Any]:
        if req.flow_id in self.safs.senders or req.flow_id in self.tcp_sending:
            raise InvalidInput("flow_id",
                               f"flow {req.flow_id} is already being sent from {self.host}; ids must be unique")
        if req.dst_ip == self.args.ip:
            raise InvalidInput("dst_ip", f"must be another host's address, got this host's {req.dst_ip}")
        start_at = self._start_at(req.send_at_ns)
        if req.transport == "tcp":
            self.tcp_sending.add(req.flow_id)
            self.tcp.start_sender(req.flow_id, req.dst_ip, req.port or self.args.tcp_port, req.size_bytes, start_at)
            return {}
        if self.hints is not None and not req.dst_host:
            raise InvalidInput(
                "dst_host",
                "required for safs flows when the agent has --hint-addr: the receiver's host name in the topology",
            )
        no_bubble = req.no_bubble_ts_ns
        if no_bubble is None:
            no_bubble = fabric_clock() + NO_DEADLINE_NS  # no deadline: least urgent
        no_bubble = wrap(no_bubble)
        if self.hints is not None and not req.dep_id:  # per-transfer mode: announce the transfer
            hint = FlowHint(
                req.flow_id,
                self.host,
                req.dst_host,
                req.size_bytes,
                no_bubble,
                req.label or f"flow{req.flow_id}",
                FlowClass(req.flow_class),
            )
            start_fabric = wrap(req.send_at_ns) if req.send_at_ns else fabric_clock()
            self.hints_submitted += 1
            self.announced[req.flow_id] = self.hint_pool.submit(  # type: ignore[union-attr]
                self._announce, hint, start_fabric
            )
        self.safs.start_sender(
            req.flow_id, req.dst_ip, req.size_bytes, no_bubble, req.flow_class == "background", start_at, req.dep_id,
            req.firm,
        )
        return {}

    def _background(self, req: Background) -> dict[str, Any]:
        def start(flow_id: int, dst_ip: str, size: int, port: int | None) -> None:
            if flow_id in self.tcp_sending:
                return
            self.tcp_sending.add(flow_id)
            self.tcp.start_sender(flow_id, dst_ip, port or self.args.tcp_port, size, self.loop.now())

        gen = BackgroundGenerator(self.loop, req, start)
        self.generators.append(gen)
        return {"mean_bytes": round(gen.mean_bytes, 1), "mean_gap_ns": round(gen.mean_gap_ns)}

    # ---- hint API (worker thread: calls block) -----------------------------------------------
    def _announce(self, hint: FlowHint, start_fabric_ns: int) -> None:
        try:
            self.hints.announce(hint, start_time_ns=start_fabric_ns)  # type: ignore[union-attr]
            self._count("announced")
        except SafsError as err:
            self._hint_failed("announce", hint.flow_id, err)

    def _complete(self, flow_id: int, announce: Future | None) -> None:
        if announce is not None:
            wait([announce])  # the controller must know the flow first (its own call, in order)
        try:
            began = time.monotonic_ns()
            self.hints.complete(flow_id)  # type: ignore[union-attr]
            # Senders report a flow this much before its last byte leaves, so the controller
            # frees its grant about when that happens (an EWMA of the call's latency, capped).
            took = time.monotonic_ns() - began
            lead = self.safs.complete_lead_ns
            self.safs.complete_lead_ns = min(COMPLETE_LEAD_MAX_NS, took if lead == 0 else (4 * lead + took) // 5)
            self._count("completed")
        except SafsError as err:
            self._hint_failed("complete", flow_id, err)

    def _connect_hints(self) -> None:
        self.hints_ready = self.hints.wait_ready(HINT_CONNECT_TIMEOUT_S)  # type: ignore[union-attr]
        if not self.hints_ready:
            _log.warning(
                "hint API at %s not reachable after %.0f s; calls will retry",
                self.args.hint_addr,
                HINT_CONNECT_TIMEOUT_S,
            )

    def _count(self, key: str) -> None:
        with self.hint_counts_lock:
            self.hint_counts[key] += 1

    def _hint_failed(self, call: str, flow_id: int, err: Exception) -> None:
        self._count("errors")
        self.last_hint_error = f"{call} flow {flow_id}: {err}"
        _log.warning("hint API %s", self.last_hint_error)

    # ---- events ----------------------------------------------------------------------------
    def _emit(self, event: dict[str, Any]) -> None:
        """Push ``event`` to the watching driver at once, or keep it for the next ``events``."""
        if self.control.watchers:
            self.control.push(event)
        else:
            self.events.append(event)

    def _sender_done(self, transport: str):
        def done(flow_id: int, info: dict) -> None:
            self._emit({"event": "done", "flow_id": flow_id, "role": "sender", "transport": transport, **info})
            if transport == "tcp":
                self.tcp_sending.discard(flow_id)

        return done

    def _sender_sent(self, flow_id: int) -> None:
        """A SAFS sender put its last byte on the wire: complete the flow at the hint API (on
        the Complete thread, once the flow's Announce returned); only transfers announced one by
        one (per-transfer mode) are completed there."""
        if self.complete_pool is not None and flow_id in self.announced:
            self.hints_submitted += 1
            self.complete_pool.submit(self._complete, flow_id, self.announced.pop(flow_id, None))

    def _receiver_done(self, transport: str):
        def done(flow_id: int, finish_ns: int, size: int) -> None:
            self._emit(
                {
                    "event": "done",
                    "flow_id": flow_id,
                    "role": "receiver",
                    "transport": transport,
                    "finish_ns": finish_ns,
                    "bytes": size,
                }
            )

        return done

    def _tcp_error(self, flow_id: int, message: str) -> None:
        self.tcp_sending.discard(flow_id)
        self._emit({"event": "error", "flow_id": flow_id, "role": "sender", "transport": "tcp", "message": message})

    def stats(self) -> dict[str, Any]:
        """Counters and settings (``safs``, ``tcp``, ``hints``, ``config``)."""
        return {
            "host": self.host,
            "ip": self.args.ip,
            "safs": self.safs.stats_dict(),
            "tcp": {**self.tcp.stats.as_dict(), **self.tcp.info},
            "hints": {
                **self.hint_counts,
                "last_error": self.last_hint_error,
                "ready": self.hints_ready,
                "pending": self.hints_submitted - sum(self.hint_counts.values()),
            },
            "background": [g.summary() for g in self.generators],
            "active": {
                "safs_senders": len(self.safs.senders),
                "tcp_senders": len(self.tcp_sending),
                "safs_receivers_incomplete": sum(1 for r in self.safs.receivers.values() if r.got is not None),
            },
            "config": {
                "default_rate_bps": self.cfg.default_rate_bps,
                "line_rate_bps": self.args.line_rate_bps,
                "mtu_bytes": self.cfg.mtu_bytes,
                "segment_bytes": self.cfg.segment_bytes,
                "unscheduled_bytes": self.cfg.unscheduled_bytes,
                "pace_burst_bytes": self.safs.burst_bytes,
                "grant_poll_ns": self.cfg.grant_poll_ns,
                "renew_fraction": self.cfg.renew_fraction,
                "rto_ns": self.cfg.rto_ns,
                "reorder_window_ns": self.cfg.reorder_window_ns,
            },
        }


@contextlib.contextmanager
def _naming(what: str):
    """Re-raise an OSError (a socket that cannot be bound) with the option it came from."""
    try:
        yield
    except OSError as err:
        raise OSError(err.errno, f"{what}: {err.strerror or err}") from None


# ---- command line ------------------------------------------------------------------------
def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer > 0, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be an integer > 0, got {value}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value}")
    return value


def _port(text: str) -> int:
    value = _positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port in 1..65535, got {value}")
    return value


def _ipv4(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an IPv4 address A.B.C.D, got {text!r}") from None


def _yield_fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 0.5], got {text!r}") from None
    if not 0 <= value <= 0.5:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 0.5], got {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {value}")
    return value


def _int_list(text: str) -> list[int]:
    """Comma-separated integers (argparse type), e.g. ``0,100000,1000000``."""
    try:
        return [int(x) for x in text.split(",")] if text else []
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The agent's command line (docs/mininet.md, "Host agent")."""
    p = OneLineParser(prog="python -m safs.apps.agent", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", required=True, help="this host's name in the topology")
    p.add_argument("--ip", required=True, type=_ipv4, help="this host's address (SAFS and TCP sockets bind it)")
    p.add_argument("--control", required=True, help="unix socket path the agent listens on")
    p.add_argument("--hint-addr", default=None, help="hint API address, e.g. unix:/tmp/run/hints.sock")
    p.add_argument(
        "--default-rate-bps",
        type=_positive,
        default=SchedulerConfig().default_rate_bps,
        help="rate before the first grant and after a lease expires, bit/s (the switch's default grant)",
    )
    p.add_argument(
        "--line-rate-bps",
        type=_positive,
        default=DEFAULT_LINE_RATE_BPS,
        help="this host's link rate, bit/s: unscheduled bytes go at it; latest start uses it",
    )
    p.add_argument("--mtu-bytes", type=_positive, default=1500)
    p.add_argument(
        "--unscheduled-bytes",
        type=int,
        default=SchedulerConfig().unscheduled_bytes,
        help="first bytes of a flow sent at line rate before any grant (match the scheduler's)",
    )
    p.add_argument(
        "--grant-poll-ns",
        type=_non_negative,
        default=GRANT_POLL_NS,
        help="first REQUEST poll period while a SAFS sender's grant is too slow for in-band pushes, ns "
             "(0: never poll; the Mininet target passes sim.safs_grant_poll_ns)",
    )
    p.add_argument(
        "--grant-poll-backoff",
        type=_positive,
        default=1,
        help="the poll period doubles while the answered rate stays the same, up to this many times "
             "--grant-poll-ns (default 1: a fixed period; the Mininet target passes 16 to dependency senders, "
             "as the simulator's, and 1 to the per-transfer design)",
    )
    p.add_argument(
        "--reorder-window-ns",
        type=_positive,
        default=REORDER_WINDOW_NS,
        help="how long a SAFS receiver waits for a missing segment before a NACK, ns",
    )
    p.add_argument(
        "--rto-ns",
        type=_positive,
        default=RTO_NS,
        help="SAFS probe timeout without DONE after the last segment, ns (doubles up to 500 ms)",
    )
    p.add_argument(
        "--urgency-quantum-ns",
        type=_positive,
        default=SafsConfig().urgency_quantum_ns,
        help="deadlines this close are equally urgent to the send scheduler (then fewest bytes first), ns "
             "(a scenario's sim.safs_urgency_quantum_ns)",
    )
    p.add_argument(
        "--slack-thresholds-ns",
        type=_int_list,
        default=[],
        metavar="NS,NS,...",
        help="the switches' slack-class thresholds, ascending (the scheduler's allocator.slack_thresholds_ns); "
             "a waiting sender sends a REQUEST when its slack crosses one (default: none)",
    )
    p.add_argument(
        "--late-transfers",
        choices=("first", "last"),
        default="first",
        help="'last': send a dependency whose head transfer's slack is below the first slack threshold after "
             "the others (the scheduler's allocator.late_transfers; default: first)",
    )
    p.add_argument(
        "--receiver-admission",
        choices=("off", "firm", "moore-hodgson"),
        default=SafsConfig().receiver_admission,
        help="reject, at this host's link, the inbound transfers that keep the others from being on time: "
             "'firm' only those whose deadline is firm (the expect's firm), 'moore-hodgson' any (needs "
             "--late-transfers last; policy safs-admission) (default: %(default)s)",
    )
    p.add_argument(
        "--admission-rate-fraction",
        type=_fraction,
        default=SafsConfig().admission_rate_fraction,
        help="share of --line-rate-bps the receiver admission plans with, in (0, 1] (default: %(default)s)",
    )
    p.add_argument(
        "--nic-yield-fraction",
        type=_yield_fraction,
        default=SafsConfig().nic_yield_fraction,
        help="a dependency whose host's more urgent grants leave it less than this share of --line-rate-bps "
             "yields its place at its receiver's ToR, in [0, 0.5]; 0: never (default: %(default)s)",
    )
    p.add_argument(
        "--pace-burst-bytes",
        type=_positive,
        default=None,
        help="token-bucket depth of SAFS pacing, wire bytes (default: half of --unscheduled-bytes; "
        "keep it within the switch meter's burst so catch-up bursts stay green)",
    )
    p.add_argument("--tcp-port", type=_port, default=DEFAULT_TCP_PORT, help="TCP listening port (baseline), 1..65535")
    p.add_argument(
        "--set-tcp-ecn", action="store_true", help="write net.ipv4.tcp_ecn=1 in this network namespace at start"
    )
    p.add_argument("--log", default=None, help="log file (default: warnings to stderr)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the agent; exit status 0 after a clean stop, 2 on bad arguments or setup errors."""
    args = parse_args(argv)
    try:
        with _naming(f"--log {args.log}"):
            logging.basicConfig(
                filename=args.log,
                level=logging.INFO if args.log else logging.WARNING,
                format="%(asctime)s %(name)s %(levelname)s %(message)s",
            )
        agent = Agent(args)
    except (InvalidInput, OSError) as err:
        print(f"safs.apps.agent: {err}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    signal.signal(signal.SIGINT, lambda *_: agent.stop())
    print(f"READY {os.getpid()}", flush=True)
    _log.info("agent %s on %s ready (tcp cc %s, ecn %s)", args.host, args.ip, agent.tcp.cc, agent.tcp.info["tcp_ecn"])
    agent.run()
    return 0

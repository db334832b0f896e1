"""``safs fake-switch``: try the controller without BMv2.

Serves one in-process fake P4Runtime switch per switch of a topology on loopback
(:class:`safs.testing.fake_p4rt.FakeP4RuntimeServer`: it answers arbitration, pipeline pushes,
table, meter, action-profile and clone-session writes and reads as BMv2's PI does, and forwards
no packets), and prints the ``safs controller`` command that drives them. Runs until
SIGINT/SIGTERM or ``--duration-s``. docs/controller.md, "Without a switch".
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from rich.console import Console

from safs.apps.signals import stop_on_signals
from safs.core.errors import InvalidInput
from safs.core.topology import Topology, load_topology
from safs.testing.fake_p4rt import FakeP4RuntimeServer


def start_fake_switches(topo: Topology, base_port: int) -> list[tuple[str, FakeP4RuntimeServer]]:
    """One started fake P4Runtime server per switch of ``topo``, on 127.0.0.1 from ``base_port``
    on, in the topology's switch order: ``(switch name, server)``; ``server.address`` is where
    it listens. Stop them with ``server.stop()``.

    Raises:
        InvalidInput: a port in use (``--base-port``, naming the switch); the servers already
            started are stopped first.
    """
    started: list[tuple[str, FakeP4RuntimeServer]] = []
    for i, name in enumerate(topo.switches()):
        server = FakeP4RuntimeServer()
        try:
            server.start(base_port + i)
        except InvalidInput as exc:
            for _, other in started:
                other.stop()
            raise InvalidInput("--base-port", f"switch {name}: {exc.message}") from None
        started.append((name, server))
    return started


def run(args: argparse.Namespace, console: Console) -> int:
    """Serve until stopped (prints to stdout, not ``console``); returns 0.

    Raises:
        InvalidInput: a bad topology, ``--base-port`` out of 1..65535 for all switches, a port
            in use (``--base-port``), or a negative ``--duration-s``.
    """
    topo = load_topology(Path(args.topology))
    n = len(topo.switches())
    if not 1 <= args.base_port <= 65536 - n:
        raise InvalidInput("--base-port", f"must be in 1..{65536 - n} for {n} switches, got {args.base_port}")
    if args.duration_s is not None and args.duration_s < 0:
        raise InvalidInput("--duration-s", f"must be >= 0, got {args.duration_s}")
    stop = threading.Event()
    with stop_on_signals(stop):
        servers: list[tuple[str, FakeP4RuntimeServer]] = []
        try:
            servers = start_fake_switches(topo, args.base_port)
            print(f"{n} fake P4Runtime switch(es) of {topo.name} on loopback (answer like BMv2's PI; "
                  "forward no packets):", flush=True)
            for name, server in servers:
                print(f"  {name}  {server.address}", flush=True)
            flags = " ".join(f"--switch {name}={server.address}" for name, server in servers)
            print(f"try: safs controller --topology {args.topology} {flags}", flush=True)
            stop.wait(args.duration_s)
        finally:
            for _, server in servers:
                server.stop()
    return 0

"""Controller restart without loss: SIGKILL with N admitted dependencies, restart, grants back.

One run, printed figures (docs/operations.md):

1. Switches: one in-process fake P4Runtime server per switch of ``--topology`` (``--target
   fake``), or one ``simple_switch_grpc`` each (``--target bmv2``: ``--no-p4``, 8 priority
   queues, free ports; stopped by PID).
2. ``safs controller --state DIR --reconcile-s 0`` as a child process (hint API on a Unix
   socket). ``--deps`` N dependencies (sender -> receiver over every host pair, ids counting
   up per sender) are announced with ``AnnounceDependencies`` in batches of ``--batch``; each
   call answers after its dependencies are committed (group commit) and their grants
   written: the rate printed is acknowledged, durable dependencies per second.
3. The controller is killed with SIGKILL (no cleanup) and started again on the same state
   directory. Printed: how long the new process took until its hint API served (Python start
   and imports, connections, the pipeline cookie check, reading every switch back and
   reconciling, all before serving), the reconciliation time the controller logs, and how
   many acknowledged dependencies are missing from the switches (read back over P4Runtime on
   a backup connection; a ``dep_grant`` share entry per dependency at its receiver's ToR).
   While the controller is dead and restarting, a thread reads the grants back every 50 ms:
   the fewest seen is printed (the switches keep enforcing the grants while no controller
   runs, since the restarted controller keeps the pipeline and its tables).

Run (about 40 s with the fakes on 2 cores):

    PYTHONPATH=controller .venv/bin/python benchmarks/bench_restart.py [--target bmv2] [--deps 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from bench_p4rt import bmv2_switch

from safs.control.hintapi.client import HintClient
from safs.core import p4names as n
from safs.core.hints import DependencyHint
from safs.core.topology import load_topology
from safs.targets.p4rt.target import P4RuntimeTarget
from safs.testing.fake_p4rt import FakeP4RuntimeServer

ROOT = Path(__file__).resolve().parents[1]
P4INFO = ROOT / "p4src" / "build" / "safs.p4info.txtpb"
BMV2_JSON = ROOT / "p4src" / "build" / "safs.json"


@contextlib.contextmanager
def switches(kind: str, names: list[str], work: Path) -> Iterator[dict[str, str]]:
    """name -> P4Runtime address of a fresh switch per name."""
    with contextlib.ExitStack() as stack:
        out = {}
        for name in names:
            if kind == "fake":
                server = stack.enter_context(FakeP4RuntimeServer())
                out[name] = server.address
            else:
                out[name] = stack.enter_context(bmv2_switch(shutil.which("simple_switch_grpc") or "",
                                                            work / f"{name}.log"))
        yield out


def start_controller(topology: Path, addresses: dict[str, str], state: Path, sock: Path, log: Path
                     ) -> tuple[subprocess.Popen[bytes], float]:
    """The controller process and the seconds until its hint API answered."""
    sock.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "safs.apps.cli", "controller", "--topology", str(topology),
           "--p4info", str(P4INFO), "--bmv2-json", str(BMV2_JSON), "--hint-addr", f"unix:{sock}",
           "--state", str(state), "--reconcile-s", "0"]
    for name, addr in addresses.items():
        cmd += ["--switch", f"{name}={addr}"]
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    # The controller's own log says when it serves (a gRPC client polling a Unix socket that
    # does not exist yet backs off for seconds and would see it late).
    deadline = time.monotonic() + 120
    while (serving := re.search(r"^(\S+ \S+) INFO \S+ hint API listening", log.read_text(), re.MULTILINE)) is None:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit(f"controller did not serve within 120 s; log: {log}")
        time.sleep(0.05)
    served = datetime.datetime.strptime(serving.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return proc, served - t0


def installed(topology, addresses: dict[str, str]) -> set[tuple[int, int]]:
    """(sender address, dep_id) of every share grant on the switches with host ports."""
    out: set[tuple[int, int]] = set()
    for name, addr in addresses.items():
        if not any(topology.is_host(nb) for nb in topology.ports(name).values()):
            continue
        reader = P4RuntimeTarget(name, addr, 0, P4INFO, election_id=(0, 0), timeout_s=30)  # a backup: reads only
        try:
            out |= {(e.match[n.F_SRC_ADDR], e.match[n.F_DEP_ID]) for e in reader.read_table(n.DEP_GRANT)
                    if e.action == n.ACT_SET_SHARE_GRANT}
        finally:
            reader.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=("fake", "bmv2"), default="fake")
    ap.add_argument("--topology", default=str(ROOT / "topologies" / "leaf-spine.yaml"))
    ap.add_argument("--deps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100)
    args = ap.parse_args()
    if args.target == "bmv2" and not shutil.which("simple_switch_grpc"):
        raise SystemExit("--target bmv2 needs simple_switch_grpc on PATH")
    topology = load_topology(Path(args.topology))
    hosts = topology.hosts()
    pairs = [(s, r) for s, r in itertools.product(hosts, hosts) if s != r]
    next_id: dict[str, int] = {}
    deps = []
    for s, r in itertools.islice(itertools.cycle(pairs), args.deps):
        next_id[s] = next_id.get(s, 0) + 1
        deps.append(DependencyHint(next_id[s], s, r, "bench"))
    with tempfile.TemporaryDirectory(prefix="safs-restart-") as tmp:
        work = Path(tmp)
        state, sock = work / "state", work / "hints.sock"
        with switches(args.target, topology.switches(), work) as addresses:
            proc, first_start = start_controller(Path(args.topology), addresses, state, sock, work / "first.log")
            t0 = time.perf_counter()
            with HintClient(f"unix:{sock}", timeout_s=60) as hints:
                for i in range(0, len(deps), args.batch):
                    hints.announce_dependencies(deps[i:i + args.batch])
            announce_s = time.perf_counter() - t0
            acked = {(topology.host_ip(d.sender), d.dep_id) for d in deps}
            before = installed(topology, addresses)
            seen: list[int] = []
            stop = threading.Event()

            def watch() -> None:
                while not stop.wait(0.05):
                    seen.append(len(installed(topology, addresses) & acked))

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            log = work / "second.log"
            proc, restart_s = start_controller(Path(args.topology), addresses, state, sock, log)
            stop.set()
            watcher.join()
            after = installed(topology, addresses)
            proc.terminate()
            proc.wait(timeout=30)
            text = log.read_text()
            reconciled = re.search(r"reconciled routes.* in ([0-9.]+) ms", text)
            restored = re.search(r"(\d+) dependencies and \d+ flows restored", text)
    print(f"target {args.target}, topology {topology.name} ({len(topology.switches())} switches), "
          f"durable state on, announces write grants")
    print(f"announce: {len(deps)} dependencies in {announce_s:.2f} s = {len(deps) / announce_s:,.0f} acknowledged/s "
          f"(batches of {args.batch}); first start {first_start:.2f} s")
    print(f"grants on the switches before SIGKILL: {len(before & acked)} of {len(acked)}")
    print(f"restart: hint API serving {restart_s:.2f} s after the process started (its log's timestamp); restored "
          f"{restored.group(1) if restored else '?'} dependencies; reconciliation "
          f"{reconciled.group(1) if reconciled else '?'} ms (read back + diff + repair, before serving)")
    print(f"during the restart ({len(seen)} reads): at least {min(seen, default=0)} of {len(acked)} grants "
          "installed at every read")
    print(f"lost: {len(acked - after)} of {len(acked)} acknowledged dependencies missing after the restart")
    return 0 if acked <= after else 1


if __name__ == "__main__":
    sys.exit(main())

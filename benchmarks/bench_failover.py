"""Primary/backup takeover: the primary controller killed mid-run, how long until the backup writes.

One run (docs/operations.md, "Primary and backup"):

1. Switches: one in-process fake P4Runtime server per switch of ``--topology`` (``--target
   fake``, PI's behaviour: the switch promotes the highest connected client; ``--target
   fake-spec``: the specification's, no primary until a backup arbitrates higher), or one
   ``simple_switch_grpc`` each (``--target bmv2``).
2. A primary ``safs controller --election-id 5`` and a backup ``--election-id 1``, child
   processes sharing one ``--state`` directory; ``--deps`` dependencies announced through the
   primary; the backup is up and standing by.
3. The primary is killed with SIGKILL. Printed: the time until every switch reports the backup
   as primary (arbitration, read on an observer connection with election id 0), until the
   backup reconciles (writes to) its first and its last switch (each right after its own
   read-back), and until it serves hints (it has re-arbitrated above every id seen, restored the state, read
   every switch back and reconciled it: writing), and how many dependencies' grants are on the
   switches afterwards.

    PYTHONPATH=controller:benchmarks .venv/bin/python benchmarks/bench_failover.py [--target bmv2]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench_p4rt import bmv2_switch
from bench_restart import BMV2_JSON, P4INFO, installed

from safs.control.hintapi.client import HintClient
from safs.core.hints import DependencyHint
from safs.core.topology import load_topology
from safs.targets.p4rt.target import P4RuntimeTarget
from safs.testing.fake_p4rt import FakeP4RuntimeServer

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def switches(kind: str, names: list[str], work: Path) -> Iterator[dict[str, str]]:
    """name -> P4Runtime address of a fresh switch per name."""
    with contextlib.ExitStack() as stack:
        if kind == "bmv2":
            yield {n: stack.enter_context(bmv2_switch("simple_switch_grpc", work / f"{n}.log")) for n in names}
        else:
            yield {n: stack.enter_context(FakeP4RuntimeServer(auto_promote=kind == "fake")).address for n in names}


def controller(topology: Path, addresses: dict[str, str], state: Path, sock: Path, election: int, log: Path
               ) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "safs.apps.cli", "controller", "--topology", str(topology), "--p4info",
           str(P4INFO), "--bmv2-json", str(BMV2_JSON), "--hint-addr", f"unix:{sock}", "--state", str(state),
           "--reconcile-s", "0", "--election-id", str(election)]
    for name, addr in addresses.items():
        cmd += ["--switch", f"{name}={addr}"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("w"))


def wait_until(cond, timeout_s: float, what: str) -> float:
    """Poll ``cond`` every 5 ms; the time.monotonic() when it held."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.005)
    return time.monotonic()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=("fake", "fake-spec", "bmv2"), default="fake")
    ap.add_argument("--topology", default=str(ROOT / "topologies" / "leaf-spine.yaml"))
    ap.add_argument("--deps", type=int, default=200)
    args = ap.parse_args()
    topology = load_topology(Path(args.topology))
    hosts = topology.hosts()
    deps = [DependencyHint(i // len(hosts) + 1, hosts[i % len(hosts)], hosts[(i + 1) % len(hosts)], "failover")
            for i in range(args.deps)]
    with tempfile.TemporaryDirectory(prefix="safs-failover-") as tmp:
        work = Path(tmp)
        state = work / "state"
        with switches(args.target, topology.switches(), work) as addresses:
            primary = controller(Path(args.topology), addresses, state, work / "primary.sock", 5, work / "p.log")
            with HintClient(f"unix:{work / 'primary.sock'}", timeout_s=60) as hints:
                if not hints.wait_ready(120):
                    raise SystemExit(f"primary did not serve: {(work / 'p.log').read_text()[-2000:]}")
                hints.announce_dependencies(deps)
            backup = controller(Path(args.topology), addresses, state, work / "backup.sock", 1, work / "b.log")
            wait_until(lambda: "standing by as backup" in (work / "b.log").read_text(), 120, "the backup")
            observers = [P4RuntimeTarget(n, a, 0, P4INFO, election_id=(0, 0), timeout_s=30)
                         for n, a in addresses.items()]
            try:
                t_kill, wall_kill = time.monotonic(), time.time()
                primary.send_signal(signal.SIGKILL)
                primary.wait()
                t_arb = wait_until(lambda: all(o.primary_election not in (None, (0, 5)) for o in observers), 60,
                                   "the backup primary at every switch")
                wait_until(lambda: "hint API listening" in (work / "b.log").read_text(), 60, "the backup serving")
            finally:
                for o in observers:
                    o.close()

            def since_kill(stamp: str) -> float:
                """Seconds from the kill to a log line's timestamp."""
                return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() - wall_kill

            acked = {(topology.host_ip(d.sender), d.dep_id) for d in deps}
            after = installed(topology, addresses)
            backup.terminate()
            backup.wait(timeout=30)
            text = (work / "b.log").read_text()
            took = [line for line in text.splitlines() if "took over" in line]
            new_id = re.search(r"taking over with election id (\(\d+, \d+\))", text)
            serving = re.search(r"^(\S+ \S+) INFO \S+ hint API listening", text, re.MULTILINE)
            t_serving = since_kill(serving.group(1)) if serving else float("nan")
            # a switch is reconciled (read back, then written) right after this line of its own
            adopted = [since_kill(m.group(1)) for m in re.finditer(
                r"^(\S+ \S+) INFO \S+ \S+: keeps its clock offset", text, re.MULTILINE)]
    print(f"target {args.target}, topology {topology.name} ({len(topology.switches())} switches), "
          f"{args.deps} dependencies, state shared through one --state directory")
    print(f"primary (election id 5) SIGKILLed; the switches report another primary after {t_arb - t_kill:.2f} s; "
          f"the backup (now election id {new_id.group(1) if new_id else '?'}) serves hints (restored, reconciled: "
          f"writing) {t_serving:.2f} s after the kill (its log's timestamp)")
    if adopted:
        print(f"the backup reconciles (writes) its first switch {min(adopted):.2f} s after the kill, its last "
              f"{max(adopted):.2f} s after ({len(adopted)} switches, each as soon as it is read back)")
    print(f"grants on the switches after the takeover: {len(acked & after)} of {len(acked)}")
    if took:
        print("backup's log:", took[-1].split(": ", 1)[-1])
    return 0 if acked <= after else 1


if __name__ == "__main__":
    sys.exit(main())

"""Hint throughput: a 100,000-hint flood against ``safs controller --model``, with and without
durable state, and the controller's memory over the flood.

For each mode (durable state on: ``--state DIR``; off), one ``safs controller --model`` child
process (every switch of ``--topology`` an in-process pipeline model; hint API on a Unix
socket; ``--reconcile-s 0``) is flooded from this process: ``--hints`` N dependencies
(sender -> receiver over every host pair, ids counting up per sender) announced with
``AnnounceDependencies`` in batches of ``--batch`` B, each batch ended with ``EndDependencies``
right after, so at most B are live (every host's ToR has 4,095 meter slots). Each announce
writes a grant (a ``dep_grant`` entry and a meter at the receiver's ToR) and each end deletes
it; with durable state every call answers after its changes are committed (group commit).

Printed per mode: announces per second over the whole flood (each with its end: a pair),
hints per second counting announces and ends, and the controller's resident memory (VmRSS of
/proc/PID/status) after 10%, 50% and 100% of it; then the durable/plain ratio. Target:
switch model (in-process), no network to the switches; the client is one Python process
(pure-Python protobuf), which is part of what is measured.

    PYTHONPATH=controller .venv/bin/python benchmarks/bench_hints.py [--hints 100000] [--batch 1000]
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from safs.control.hintapi.client import HintClient
from safs.core.hints import DependencyHint
from safs.core.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid``, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def flood(topology: Path, hosts: list[str], hints: int, batch: int, state: Path | None, work: Path
          ) -> tuple[float, list[tuple[int, float]]]:
    """Seconds the flood took, and (hints sent, controller RSS MiB) at 10%, 50%, 100%."""
    sock = work / "hints.sock"
    sock.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "safs.apps.cli", "controller", "--topology", str(topology), "--model",
           "--hint-addr", f"unix:{sock}", "--reconcile-s", "0", "--log-level", "WARNING"]
    if state is not None:
        cmd += ["--state", str(state)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=(work / "controller.log").open("w"))
    try:
        with HintClient(f"unix:{sock}", timeout_s=120) as client:
            if not client.wait_ready(120):
                raise SystemExit(f"controller did not serve within 120 s: {work / 'controller.log'}")
            pairs = itertools.cycle([(s, r) for s, r in itertools.product(hosts, hosts) if s != r])
            next_id: dict[str, int] = {}
            marks = {hints // 10, hints // 2, hints}
            memory = []
            sent = 0
            t0 = time.perf_counter()
            while sent < hints:
                deps = []
                for s, r in itertools.islice(pairs, min(batch, hints - sent)):
                    next_id[s] = next_id.get(s, 0) % 65535 + 1
                    deps.append(DependencyHint(next_id[s], s, r, "flood"))
                client.announce_dependencies(deps)
                client.end_dependencies([(d.sender, d.dep_id) for d in deps])
                before, sent = sent, sent + len(deps)
                for m in marks:
                    if before < m <= sent:
                        memory.append((sent, rss_mib(proc.pid)))
            elapsed = time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return elapsed, sorted(memory)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default=str(ROOT / "topologies" / "leaf-spine.yaml"))
    ap.add_argument("--hints", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    args = ap.parse_args()
    topology = Path(args.topology)
    hosts = load_topology(topology).hosts()
    rates = {}
    for mode in ("durable", "plain"):
        with tempfile.TemporaryDirectory(prefix="safs-hints-") as tmp:
            work = Path(tmp)
            elapsed, memory = flood(topology, hosts, args.hints, args.batch,
                                    work / "state" if mode == "durable" else None, work)
        rates[mode] = args.hints / elapsed
        mem = ", ".join(f"{n:,}: {m:.0f} MiB" for n, m in memory)
        print(f"{mode:8s} target switch model (in-process), announces write grants, durable state "
              f"{'on' if mode == 'durable' else 'off'}: {args.hints:,} dependencies announced and ended in "
              f"{elapsed:.1f} s = {rates[mode]:,.0f} announces/s ({2 * rates[mode]:,.0f} hints/s counting each "
              f"announce and end, batches of {args.batch}); controller RSS after {mem}")
    print(f"durable / plain throughput: {rates['durable'] / rates['plain']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

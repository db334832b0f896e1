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

Each mode runs with one caller and with ``--callers`` K (default 2) concurrent callers: K
threads of this process, each its own application with its own channel announcing for every
K-th host (as K applications on one controller; the first is one application calling
back to back, so the controller idles while the client encodes).

Printed per run: announces per second over the whole flood (each with its end: a pair),
hints per second counting announces and ends, the controller's resident memory (VmRSS of
/proc/PID/status) after 10%, 50% and 100% of it, and the CPU time per hint the controller
process and this client used (less noisy than the rate on a shared machine); then the
durable/plain ratios. Target: switch model (in-process), no network to the switches; the
client is Python too (pure-Python protobuf, as p4runtime-shell pins protobuf 3.20), which
is part of what is measured.

    PYTHONPATH=controller .venv/bin/python benchmarks/bench_hints.py [--hints 100000] [--batch 1000] [--callers 2]
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
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


def cpu_s(pid: int) -> float:
    """CPU time (user + system) ``pid`` has used, seconds (/proc/PID/stat utime and stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def flood(topology: Path, hosts: list[str], hints: int, batch: int, callers: int, state: Path | None,
          work: Path) -> tuple[float, float, float, list[tuple[int, float]]]:
    """Seconds the flood took, CPU seconds the controller and this client used over it, and
    (hints sent, controller RSS MiB) at 10%, 50%, 100%."""
    sock = work / "hints.sock"
    sock.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "safs.apps.cli", "controller", "--topology", str(topology), "--model",
           "--hint-addr", f"unix:{sock}", "--reconcile-s", "0", "--log-level", "WARNING"]
    if state is not None:
        cmd += ["--state", str(state)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=(work / "controller.log").open("w"))
    marks = {hints // 10, hints // 2, hints}
    memory: list[tuple[int, float]] = []
    sent = 0
    lock = threading.Lock()

    def caller(senders: list[str], share: int) -> None:
        """One application: floods ``share`` dependencies from ``senders`` over its own channel."""
        nonlocal sent
        pairs = itertools.cycle([(s, r) for s in senders for r in hosts if s != r])
        next_id: dict[str, int] = {}
        done = 0
        with HintClient(f"unix:{sock}", timeout_s=120) as client:
            while done < share:
                deps = []
                for s, r in itertools.islice(pairs, min(batch, share - done)):
                    next_id[s] = next_id.get(s, 0) % 65535 + 1
                    deps.append(DependencyHint(next_id[s], s, r, "flood"))
                client.announce_dependencies(deps)
                client.end_dependencies([(d.sender, d.dep_id) for d in deps])
                done += len(deps)
                with lock:
                    before, sent = sent, sent + len(deps)
                    memory.extend((sent, rss_mib(proc.pid)) for m in marks if before < m <= sent)

    try:
        with HintClient(f"unix:{sock}", timeout_s=120) as client:
            if not client.wait_ready(120):
                raise SystemExit(f"controller did not serve within 120 s: {work / 'controller.log'}")
        # caller k announces for every callers-th host (disjoint senders: no dep id collides)
        with ThreadPoolExecutor(callers) as pool:
            cpu0, client0 = cpu_s(proc.pid), time.process_time()
            t0 = time.perf_counter()
            runs = [pool.submit(caller, hosts[k::callers], hints // callers + (k < hints % callers))
                    for k in range(callers)]
            for run in runs:
                run.result()
            elapsed = time.perf_counter() - t0
            controller_cpu, client_cpu = cpu_s(proc.pid) - cpu0, time.process_time() - client0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return elapsed, controller_cpu, client_cpu, sorted(memory)


def main() -> int:
    ap = argparse.ArgumentParser(description="Hint throughput of safs controller --model: a flood of "
                                 "dependencies announced and ended, durable state on and off (module docstring).",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--topology", default=str(ROOT / "topologies" / "leaf-spine.yaml"),
                    help="topology YAML; every switch an in-process pipeline model")
    ap.add_argument("--hints", type=int, default=100_000, help="dependencies announced (and ended) per run")
    ap.add_argument("--batch", type=int, default=1000, help="dependencies per AnnounceDependencies call")
    ap.add_argument("--callers", type=int, default=2, help="concurrent applications (threads) in the flood")
    args = ap.parse_args()
    for option, value, low, high in (("--callers", args.callers, 1, 16), ("--batch", args.batch, 1, 4096),
                                     ("--hints", args.hints, 1, 10**8)):
        if not low <= value <= high:
            ap.error(f"{option}: {value} is outside {low}..{high}")
    topology = Path(args.topology)
    hosts = load_topology(topology).hosts()
    rates = {}
    for mode, callers in itertools.product(("durable", "plain"), sorted({1, args.callers})):
        with tempfile.TemporaryDirectory(prefix="safs-hints-") as tmp:
            work = Path(tmp)
            elapsed, controller_cpu, client_cpu, memory = flood(
                topology, hosts, args.hints, args.batch, callers, work / "state" if mode == "durable" else None, work)
        rates[mode, callers] = rate = args.hints / elapsed
        mem = ", ".join(f"{n:,}: {m:.0f} MiB" for n, m in memory)
        print(f"{mode:8s} target switch model (in-process), announces write grants, durable state "
              f"{'on' if mode == 'durable' else 'off'}, {callers} caller{'s' * (callers > 1)}: {args.hints:,} "
              f"dependencies announced and ended in {elapsed:.1f} s = {rate:,.0f} announces/s "
              f"({2 * rate:,.0f} hints/s counting each announce and end, batches of {args.batch}); controller RSS "
              f"after {mem}; CPU per hint (an announce or an end): controller "
              f"{controller_cpu / (2 * args.hints) * 1e6:.0f} us, client {client_cpu / (2 * args.hints) * 1e6:.0f} us")
    for callers in sorted({1, args.callers}):
        print(f"durable / plain throughput, {callers} caller{'s' * (callers > 1)}: "
              f"{rates['durable', callers] / rates['plain', callers]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Simulator speed and memory benchmark.

Speed: events per second of :func:`safs.experiments.sim.simulation.simulate` on the shipped 16A2F topology with
the AFD decode workload and persistent bulk DCTCP background, next to a bare event loop
(heapq with trivial callbacks) run in the same process, and their ratio.

Memory: peak RSS (``resource.getrusage``, KiB on Linux) of a fresh subprocess that simulates
T decode steps and of one that simulates 4T; the ratio must stay within 1.10 because the
simulator keeps no per-packet history (only per-flow records).

Usage::

    PYTHONPATH=controller .venv/bin/python benchmarks/bench_sim.py [--steps 6] [--policy safs]
"""

from __future__ import annotations

import argparse
import heapq
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "topologies" / "afd-16a2f.yaml"


def run_sim(steps: int, policy: str, bulk: int, seed: int = 1) -> dict[str, float]:
    """Simulate ``steps`` AFD decode steps; returns events, wall seconds, events/s, peak RSS."""
    import resource

    from safs.core.topology import load_topology
    from safs.experiments.sim.backend import simulate
    from safs.experiments.sim.config import SimConfig
    from safs.experiments.workloads import build_workload

    topo = load_topology(TOPOLOGY)
    workload = build_workload("afd", {"decode_steps": steps, "warmup_steps": 10}, topo, seed=seed,
                              background_flows=bulk)
    t0 = time.perf_counter()
    res = simulate(topo, workload, policy, seed, SimConfig(max_time_ns=10_000_000_000))
    wall = time.perf_counter() - t0
    return {"events": res.events, "wall_s": wall, "events_per_s": res.events / wall,
            "sim_ms": res.sim_time_ns / 1e6, "flows": len(res.flows),
            "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def bare_loop(n: int) -> float:
    """Events per second of a bare heapq loop with trivial callbacks (same tuple shape)."""
    q: list = []
    push, pop = heapq.heappush, heapq.heappop
    count = [0]

    def cb(arg: int) -> None:
        count[0] += 1
        if arg:
            push(q, (arg + 7, count[0] + n, cb, arg - 1))

    for i in range(64):
        push(q, (i, i, cb, n // 64))
    t0 = time.perf_counter()
    while q:
        t, _, fn, arg = pop(q)
        fn(arg)
    return count[0] / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=6, help="decode steps T (memory check uses T and 4T)")
    ap.add_argument("--policy", default="safs", choices=("safs", "dctcp"))
    ap.add_argument("--bulk", type=int, default=2, help="persistent bulk DCTCP flows")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_sim(args.child, args.policy, args.bulk)))
        return

    speed = run_sim(args.steps, args.policy, args.bulk)
    bare = bare_loop(max(200_000, int(speed["events"])))
    rss = {}
    for steps in (args.steps, 4 * args.steps):
        out = subprocess.run([sys.executable, __file__, "--child", str(steps), "--policy", args.policy,
                              "--bulk", str(args.bulk)], check=True, capture_output=True, text=True)
        rss[steps] = json.loads(out.stdout.strip().splitlines()[-1])
    t, t4 = rss[args.steps], rss[4 * args.steps]
    rows = [
        ("scenario", f"afd-16a2f, {args.policy}, {args.bulk} bulk DCTCP, T={args.steps} decode steps"),
        ("sim events", f"{speed['events']:,}"),
        ("sim events/s", f"{speed['events_per_s']:,.0f}"),
        ("bare heapq loop events/s", f"{bare:,.0f}"),
        ("sim / bare", f"{speed['events_per_s'] / bare:.3f}"),
        ("simulated time (ms)", f"{speed['sim_ms']:.2f}"),
        (
            f"peak RSS, T={args.steps} (MiB)",
            f"{t['peak_rss_kib'] / 1024:.1f}  ({t['events']:,} events, {t['flows']} flows)",
        ),
        (
            f"peak RSS, 4T={4 * args.steps} (MiB)",
            f"{t4['peak_rss_kib'] / 1024:.1f}  ({t4['events']:,} events, {t4['flows']} flows)",
        ),
        ("RSS ratio 4T / T (want <= 1.10)", f"{t4['peak_rss_kib'] / t['peak_rss_kib']:.3f}"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()

"""Allocator speed: full allocation at 10 / 1,000 / 100,000 flows, one hint update at 10,000.

Fabric (stated, synthetic, seeded): for N flows, H = max(4, N // 100) receiver hosts and H
sender hosts, 100 Gbit/s each, grouped into jobs of ``--job-size`` senders and as many
receivers (pipeline/AFD locality: a job's hosts talk among themselves, e.g. 16A2F or one
ZeroBubble pipeline); each flow picks a job, then a sender and a receiver in it. Sizes
10 kB-100 MB, no-bubble timestamps 0.1-50 ms ahead, 10% background. ``--job-size 0`` puts all
hosts in one job (all-to-all: one connected component, the incremental worst case).

Timings are medians over ``--repeat`` runs of ``time.perf_counter`` (the benchmark's own
clock; the allocator never reads a clock). Run:

    PYTHONPATH=controller .venv/bin/python benchmarks/bench_allocator.py
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from safs.core.allocator import Allocator, AllocatorConfig, AllocFlow

G = 1_000_000_000


def build(n_flows: int, job_size: int, seed: int) -> tuple[Allocator, list[AllocFlow]]:
    """A fabric and ``n_flows`` flows on it (see module docstring)."""
    rng = random.Random(seed)
    hosts = max(4, n_flows // 100)
    group = hosts if job_size <= 0 else min(job_size, hosts)
    receivers = {f"r{i}": 100 * G for i in range(hosts)}
    senders = {f"s{i}": 100 * G for i in range(hosts)}
    jobs = max(1, hosts // group)
    flows = []
    for fid in range(1, n_flows + 1):
        job = rng.randrange(jobs)
        s = job * group + rng.randrange(group)
        r = job * group + rng.randrange(group)
        flows.append(AllocFlow(fid, f"s{s}", f"r{r}", rng.randint(10_000, 100_000_000),
                               rng.randint(100_000, 50_000_000), background=rng.random() < 0.1))
    return Allocator(AllocatorConfig(), receivers, senders), flows


def median_time(fn, repeat: int) -> float:
    """Median wall time of ``fn()`` in seconds."""
    samples = []
    for i in range(repeat):
        start = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1_000, 100_000])
    parser.add_argument("--update-flows", type=int, default=10_000)
    parser.add_argument("--job-size", type=int, default=4, help="senders (= receivers) per job; 0 = all-to-all")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions for full allocations")
    parser.add_argument("--updates", type=int, default=200, help="hint updates timed")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    rows = []
    for n in args.sizes:
        alloc, flows = build(n, args.job_size, args.seed)
        alloc.upsert_many(flows, 0)
        repeat = max(1, args.repeat if n <= 10_000 else 3)
        full = median_time(lambda i, alloc=alloc: alloc.recompute(1000 * (i + 1)), repeat)
        rows.append((f"full allocation, {n:,} flows", full, ""))

    n = args.update_flows
    alloc, flows = build(n, args.job_size, args.seed)
    alloc.upsert_many(flows, 0)
    full = median_time(lambda i, alloc=alloc: alloc.recompute(1000 * (i + 1)), args.repeat)
    rng = random.Random(args.seed + 1)
    picks = [rng.choice(flows) for _ in range(args.updates)]
    t0 = 1000 * (args.repeat + 1)

    def hint(i: int) -> None:
        f = picks[i]
        alloc.upsert(AllocFlow(f.flow_id, f.sender, f.receiver, max(1, f.remaining_bytes - 1000 * (i + 1)),
                               f.deadline_ns, f.background), t0 + 1000 * i)

    update = median_time(hint, args.updates)
    rows.append((f"full recompute, {n:,} flows", full, ""))
    rows.append((f"one hint update, {n:,} flows", update, f"{update / full:.3f} of full"))

    layout = "all-to-all" if args.job_size <= 0 else f"jobs of {args.job_size} senders x {args.job_size} receivers"
    print(f"fabric: N//100 (min 4) receivers and senders at 100 Gbit/s, {layout}; seed {args.seed}")
    print(f"{'case':<34} {'median':>12}  note")
    for name, sec, note in rows:
        print(f"{name:<34} {sec * 1e3:>9.3f} ms  {note}")


if __name__ == "__main__":
    main()

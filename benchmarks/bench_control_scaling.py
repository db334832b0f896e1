"""Control packets per transfer as transfers grow: four staggered-deadline flows on one link.

The case (issue 11): senders h1..h4 each send ``size`` bytes to h0 at time 0 over a one-switch
star of 100 Gbit/s links; flow i's no-bubble timestamp is (i + 1) / 0.9 x the time one flow
needs alone, so EDF order meets every deadline and a fair share misses three. A design whose
control grows with waiting time (a waiting sender polling for its grant) sends more control
packets per transfer as ``size`` grows; one whose control grows with rate changes stays flat.

Prints, per policy and size: SAFS control packets (REQUEST, GRANT, DONE) per transfer, switch
updates after setup, deadline misses, the last flow's FCT, and per policy the ratio of control
packets per transfer at the largest size to the smallest (target: within 2x). Run:

    PYTHONPATH=controller .venv/bin/python benchmarks/bench_control_scaling.py
"""

from __future__ import annotations

import argparse

from safs.core.topology import Topology, build_topology
from safs.experiments.sim.backend import simulate
from safs.experiments.sim.config import SimConfig
from safs.experiments.workloads.api import FlowSpec
from safs.experiments.workloads.trace import TraceWorkload

LINK_BPS = 100_000_000_000
FLOWS = 4


def star(n_hosts: int) -> Topology:
    """One ToR, ``n_hosts`` hosts h0..h{n-1} on 100 Gbit/s links (500 ns, 1 MiB buffers)."""
    return build_topology({
        "name": "star", "defaults": {"rate": "100Gbps", "delay_ns": 500, "buffer_bytes": 1 << 20},
        "switches": ["tor0"],
        "hosts": {f"h{i}": {"ip": f"10.0.0.{i + 1}", "switch": "tor0"} for i in range(n_hosts)}})


def staggered(size: int) -> TraceWorkload:
    """The four flows into h0, all starting at 0, deadlines 1.11, 2.22, 3.33 and 4.44 x alone (EDF-feasible at 90%)."""
    alone_ns = size * 8 * 1_000_000_000 // LINK_BPS
    return TraceWorkload([
        (0, FlowSpec(f"h{i + 1}", "h0", size, int((i + 1) * alone_ns / 0.9), f"stage{i}"))
        for i in range(FLOWS)])


def main() -> None:
    """Run the sweep and print the table (see module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", default="1,5,10,50", help="transfer sizes in MB (10^6 bytes), comma-separated")
    ap.add_argument("--policies", default="safs,safs-per-transfer,dctcp,d2tcp")
    ap.add_argument("--profile", default="tofino", help="control profile (bmv2, tofino, ideal)")
    args = ap.parse_args()
    sizes = [int(float(s) * 1_000_000) for s in args.sizes_mb.split(",")]
    print(f"control profile {args.profile}; {FLOWS} flows into h0, deadlines (i+1) / 0.9 x alone")
    print(f"{'policy':<18} {'MB':>4} {'ctrl pkts/transfer':>18} {'updates':>8} {'misses':>6} {'last FCT ms':>11}")
    for policy in args.policies.split(","):
        per_transfer = []
        for size in sizes:
            config = SimConfig(control_profile=args.profile, max_time_ns=200_000_000)
            result = simulate(star(FLOWS + 1), staggered(size), policy, 1, config)
            pkts = result.control_packets / FLOWS
            per_transfer.append(pkts)
            misses = sum(f.missed for f in result.flows)
            fcts = [f.fct_ns for f in result.flows]
            last = "unfinished" if None in fcts else f"{max(f for f in fcts if f is not None) / 1e6:.3f}"
            print(f"{policy:<18} {size / 1e6:>4.0f} {pkts:>18.1f} {result.control.updates:>8} {misses:>6} {last:>11}")
        if per_transfer[0]:
            print(f"{policy:<18} control packets per transfer, {sizes[-1] / 1e6:.0f} MB / {sizes[0] / 1e6:.0f} MB:"
                  f" {per_transfer[-1] / per_transfer[0]:.2f}x")


if __name__ == "__main__":
    main()

"""Evaluation benchmark: wall time and peak memory of each experiment's run, and their growth
when the number of hosts doubles.

For each experiment of ``safs eval`` (zerobubble, afd-16a2f, urgent) one representative run --
its evaluation scenario at the default size, the heaviest background level, seed 1 -- is
simulated in a fresh subprocess, once as shipped and once with every host family doubled
(AFD: 32 attention and 4 FFN instances; ZeroBubble: 8 pipeline stages; urgent: twice the
incast degree and loose flows, and twice the round period so rounds still do not overlap;
twice the background hosts; background flows unchanged). Each
subprocess reports its wall time and its peak RSS (``resource.getrusage``, KiB on Linux);
the benchmark prints both and the ratios doubled / default. A full ``safs eval`` sweep is
this per-run cost times its run count, divided by the workers (docs/evaluation.md gives the
measured total).

Usage::

    PYTHONPATH=controller .venv/bin/python benchmarks/bench_eval.py [--policy safs] [--only NAME]

Takes about 1-2 minutes on two idle cores.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
# Workload parameters doubled with the hosts, per workload kind, and their shipped defaults.
# Urgent: twice the senders make each round's incast twice as long, so the round period doubles
# too (the workload refuses overlapping rounds).
HOST_PARAMS = {"afd": {"n_attn": 16, "n_ffn": 2}, "zerobubble": {"stages": 4},
               "urgent": {"incast_degree": 8, "loose_flows": 2, "round_period_us": 4000}}


def double_topology(topo: dict[str, Any]) -> dict[str, Any]:
    """A copy of a topology mapping with every host family (``a0..a15`` -> ``a0..a31``)
    doubled; each new host hangs off the same switch as its original, with a fresh IP."""
    hosts = dict(topo["hosts"])
    families: dict[str, list[str]] = {}
    for name in hosts:
        m = re.fullmatch(r"([A-Za-z_]+)(\d+)", name)
        if m:
            families.setdefault(m.group(1), []).append(name)
    serial = 0
    for prefix, names in families.items():
        for i, original in enumerate(sorted(names, key=lambda n: int(n[len(prefix):]))):
            serial += 1
            hosts[f"{prefix}{len(names) + i}"] = {**hosts[original], "ip": f"10.200.{serial // 250}.{serial % 250 + 1}"}
    return {**topo, "name": f"{topo['name']}-x2", "hosts": hosts}


def one_run(name: str, doubled: bool, policy: str) -> dict[str, float]:
    """Simulate the representative run of experiment ``name`` (in this process)."""
    import resource
    import time

    from safs.experiments.eval.experiments import experiment
    from safs.experiments.runner import run_one_sim
    from safs.experiments.runs import expand
    from safs.experiments.scenario import load_scenario

    exp = experiment(name)
    base = exp.load()
    raw = base.model_dump()
    raw.update({"policies": [policy], "seeds": [1]})
    raw["background"]["bulk_flows"] = [max(base.background.bulk_flows)]
    with tempfile.TemporaryDirectory() as tmp:
        topo = yaml.safe_load(base.topology_path().read_text())
        if doubled:
            topo = double_topology(topo)
            params = dict(raw["workload"]["params"])
            for key, default in HOST_PARAMS[base.workload.kind].items():
                params[key] = 2 * params.get(key, default)
            raw["workload"]["params"] = params
        (Path(tmp) / "topology.yaml").write_text(yaml.safe_dump(topo))
        raw["topology"] = "topology.yaml"
        (Path(tmp) / "scenario.yaml").write_text(yaml.safe_dump(raw))
        scenario = load_scenario(Path(tmp) / "scenario.yaml")
        t0 = time.perf_counter()
        record = run_one_sim(scenario, next(expand(scenario)))
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "events": record["sim_events"], "pipeline_flows": record["pipeline_flows"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="safs")
    parser.add_argument("--only", default=None, help="one experiment name")
    parser.add_argument("--child", nargs=2, metavar=("NAME", "DOUBLED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(args.child[0], args.child[1] == "1", args.policy)))
        return
    from safs.experiments.eval.experiments import EXPERIMENTS

    names = [args.only] if args.only else list(EXPERIMENTS)
    print(f"{'experiment':<12} {'hosts':<8} {'wall s':>8} {'peak RSS MiB':>13} {'events':>10} {'flows':>7}")
    for name in names:
        res = {}
        for doubled in (False, True):
            out = subprocess.run(
                [sys.executable, __file__, "--policy", args.policy, "--child", name, str(int(doubled))],
                capture_output=True,
                text=True,
            )
            if out.returncode:
                sys.exit(f"{name} ({'x2' if doubled else 'default'}) failed:\n{out.stderr}")
            res[doubled] = r = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"{name:<12} {'x2' if doubled else 'default':<8} {r['wall_s']:>8.2f} {r['peak_rss_kib'] / 1024:>13.1f} "
                f"{r['events']:>10} {r['pipeline_flows']:>7}",
                flush=True,
            )
        print(
            f"{name:<12} {'ratio':<8} {res[True]['wall_s'] / res[False]['wall_s']:>8.2f} "
            f"{res[True]['peak_rss_kib'] / res[False]['peak_rss_kib']:>13.2f} "
            f"{res[True]['events'] / res[False]['events']:>10.2f} "
            f"{res[True]['pipeline_flows'] / res[False]['pipeline_flows']:>7.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Where each grant design breaks: a sweep of the control plane's cost per switch update.

Runs a shipped scenario (default ``afd-16a2f``: 16A2F decode, lock-step) at one background
level under a base profile (``--base``: ``ideal``, every other cost 0, so the sweep isolates the
per-update cost; or ``tofino``, whose per-request, digest and hint costs stay) with its
per-update cost replaced: the controller's encoding cost per update (``write_update_cpu_ns``)
set to 0 and the switch's (``switch_update_ns``) to each swept value, so the swept figure is
the whole cost of one update (tofino's own: 220 + 58 us). Policies ``safs``
(dependency grants: the controller writes when a dependency appears or ends) and
``safs-per-transfer`` (the first design: every grant change is a write). Prints, per cost and
policy, the scenario's main metric, pipeline deadline misses, switch updates per second after
warm-up (largest per switch), the p99 write delay, and the updates asked for and written.

    PYTHONPATH=controller .venv/bin/python benchmarks/bench_control_sweep.py
    PYTHONPATH=controller .venv/bin/python benchmarks/bench_control_sweep.py --scenario zerobubble --bg 2
"""

from __future__ import annotations

import argparse
from typing import Any

from safs.core.files import scenario_path
from safs.experiments.runner import run_one_sim
from safs.experiments.runs import expand
from safs.experiments.scenario import load_scenario

METRIC = {"afd-16a2f": "tpot_p99_ms", "zerobubble": "iteration_time_ms", "urgent": "urgent_fct_mean_ms"}


def run(scenario: str, policy: str, bg: int, base: str, update_ns: int) -> dict[str, Any]:
    """One run of ``scenario`` under ``policy`` at ``bg`` bulk flows, profile ``base`` with a
    per-update cost of ``update_ns`` (see module docstring); the runner's record."""
    sc = load_scenario(scenario_path(scenario), {
        "policies": [policy], "background": {"bulk_flows": [bg]}, "seeds": [1],
        "sim": {"control_profile": base,
                "control_costs": {"write_update_cpu_ns": 0, "switch_update_ns": update_ns}}})
    spec = next(iter(expand(sc)))
    return run_one_sim(sc, spec)


def main() -> None:
    """Run the sweep and print the table (see module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="afd-16a2f", choices=sorted(METRIC))
    ap.add_argument("--bg", type=int, default=2, help="bulk background flows (default 2)")
    ap.add_argument("--costs-us", default="0,1,10,30,100,278,1000",
                    help="per-update costs in us (278 = the tofino profile's 220 + 58)")
    ap.add_argument("--policies", default="safs,safs-per-transfer")
    ap.add_argument("--base", default="ideal", choices=("ideal", "tofino", "bmv2"), help="base profile (default ideal)")
    args = ap.parse_args()
    metric = METRIC[args.scenario]
    print(f"{args.scenario}, {args.bg} bulk flows, profile {args.base} with the per-update cost replaced")
    print(f"{'us/update':>9} {'policy':<18} {metric:>18} {'misses':>7} {'upd/s':>9} {'delay p99 ms':>12}"
          f" {'asked':>7} {'written':>7}")
    for cost in (float(c) for c in args.costs_us.split(",")):
        for policy in args.policies.split(","):
            r = run(args.scenario, policy, args.bg, args.base, int(cost * 1000))
            print(f"{cost:>9g} {policy:<18} {r[metric]:>18.3f} {r['pipeline_deadline_misses']:>7}"
                  f" {r['control_updates_per_s']:>9.0f} {r['control_write_delay_p99_ms']:>12.3f}"
                  f" {r['control_updates_requested']:>7} {r['control_updates']:>7}", flush=True)


if __name__ == "__main__":
    main()

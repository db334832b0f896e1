"""The simulator run backend: one run of a workload under a policy (:func:`simulate`)."""

from __future__ import annotations

from typing import Any

from safs.core.topology import Topology
from safs.experiments.policies import get_policy
from safs.experiments.sim.config import SimConfig, SimResult
from safs.experiments.sim.oracle import OracleNetwork
from safs.experiments.sim.simulation import Simulation


def simulate(topology: Topology, workload: Any, policy: str, seed: int, config: SimConfig | None = None) -> SimResult:
    """Simulate ``workload`` on ``topology`` under ``policy`` (a name in
    :data:`safs.experiments.policies.POLICIES`): fluid policies (``edf-oracle``) run the
    flow-level :class:`~safs.experiments.sim.oracle.OracleNetwork`, the others a packet-level
    :class:`~safs.experiments.sim.simulation.Simulation`.

    Args:
        topology: the fabric.
        workload: a :class:`safs.experiments.workloads.api.Workload` (``start(api)``, ``done()``,
            ``metrics()``).
        policy: a registered policy name.
        seed: seeds the simulation's random stream (switch boot times); same seed, same result.
        config: :class:`SimConfig` (defaults when None).

    Raises:
        InvalidInput: unknown policy (lists the valid ones), bad config, or a flow between
            unknown hosts.
    """
    pol = get_policy(policy)
    if pol.fluid:
        return OracleNetwork(topology, config or SimConfig()).run(workload)
    return Simulation(topology, pol, seed, config or SimConfig()).run(workload)

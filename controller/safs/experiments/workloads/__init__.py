"""Workloads: AFD 16A2F decode, ZeroBubble ZB-H1 training, the urgent-flow microbenchmark,
collectives (all-to-all, allreduce, allgather, reduce-scatter), fabric-scale many-to-many transfers,
background traffic, flow traces.

Workloads drive a network through :class:`~safs.experiments.workloads.api.WorkloadAPI` (the simulator or
:class:`~safs.experiments.workloads.ideal.IdealNetwork`); see docs/workloads.md. The runner builds one
with :func:`build_workload`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from safs.core.distributions import load_distribution
from safs.core.errors import InvalidInput
from safs.experiments.workloads.afd import AfdDecode
from safs.experiments.workloads.api import FlowSpec, Workload, WorkloadAPI
from safs.experiments.workloads.background import BulkFlows, PoissonArrivals, WithBackground
from safs.experiments.workloads.collective import COLLECTIVES, Collective
from safs.experiments.workloads.fabric import FabricTransfers
from safs.experiments.workloads.jobs import Jobs
from safs.experiments.workloads.trace import TraceWorkload, load_trace_file
from safs.experiments.workloads.urgent import UrgentIncast
from safs.experiments.workloads.zerobubble import ZeroBubbleTraining

__all__ = ["FlowSpec", "Workload", "WorkloadAPI", "build_workload", "background_hosts"]

# "jobs" last: a job of a jobs workload may be of any kind before it
KINDS = ("afd", "zerobubble", "urgent", "trace", "fabric", *COLLECTIVES, "jobs")


def background_hosts(topology: Any) -> list[str]:
    """Hosts whose name starts with ``bg`` (the background senders), in file order."""
    return [h for h in topology.hosts() if h.startswith("bg")]


def build_workload(kind: str, params: dict[str, Any], topology: Any, seed: int = 1, background_flows: int = 0,
                   load: float = 0.0, distribution: str = "hpcc_WebSearch_distribution.txt",
                   source: str | None = None, horizon_ns: int | None = None) -> Workload:
    """Build a pipeline workload plus its background traffic.

    Args:
        kind: ``"afd"``, ``"zerobubble"``, ``"urgent"``, ``"trace"``, ``"fabric"``, a collective
            (``"alltoall"``, ``"allreduce"``, ``"allgather"``, ``"reduce-scatter"``) or ``"jobs"``
            (several of those at once, :mod:`safs.experiments.workloads.jobs`).
        params: the workload's parameters (checked by the workload; see docs/workloads.md).
        topology: a :class:`safs.core.topology.Topology`.
        seed: seeds the background traffic's ``random.Random``, the urgent workload's draws and
            the AFD/ZeroBubble ``compute_jitter`` (off by default).
        background_flows: persistent bulk flows from ``bg*`` hosts to the pipeline receivers.
        load: Poisson background load per receiver link, in [0, 1] (0 = none).
        distribution: flow-size file name (shipped) or path, for the Poisson arrivals.
        source: the scenario file, for error messages and relative trace paths.
        horizon_ns: the run's horizon (``max_time_ms``); a trace flow starting at or after it is
            refused (it would never run). None: not checked.

    Raises:
        InvalidInput: unknown kind, bad parameter, missing hosts, bad load.
    """
    if kind == "jobs":
        main: Any = Jobs(params, lambda k, p: _pipeline(k, p, topology, seed, source, horizon_ns), KINDS[:-1])
    else:
        main = _pipeline(kind, params, topology, seed, source, horizon_ns)
    sources: list[Any] = []
    senders = background_hosts(topology) if topology is not None else []
    receivers = main.receivers()
    if background_flows:
        sources.append(BulkFlows(background_flows, senders, receivers))
    if isinstance(load, bool) or not isinstance(load, (int, float)) or not 0.0 <= load <= 1.0:
        raise InvalidInput("background.load", f"must be in [0, 1], got {load!r}", source)
    if load > 0:
        dist = load_distribution(distribution)
        rates = {r: topology.host_link_bps(r) for r in receivers}
        sources.append(PoissonArrivals(load, senders, rates, dist, random.Random(seed)))
    return WithBackground(main, sources)


def _pipeline(kind: str, params: dict[str, Any], topology: Any, seed: int, source: str | None,
              horizon_ns: int | None) -> Any:
    """The pipeline workload of one kind (not ``jobs``), without background (build_workload's args)."""
    if kind == "afd":
        return AfdDecode(params, topology, source, seed=seed)
    if kind == "zerobubble":
        return ZeroBubbleTraining(params, topology, seed=seed)
    if kind == "urgent":
        return UrgentIncast(params, topology, seed)
    if kind == "fabric":
        return FabricTransfers(params, topology, seed)
    if kind in COLLECTIVES:
        return Collective(kind, params, topology, seed)
    if kind == "trace":
        if set(params) - {"path"} or "path" not in params:
            raise InvalidInput("workload.params", "trace workloads take exactly one parameter: path", source)
        path = Path(str(params["path"]))
        if not path.is_absolute() and source:
            path = Path(source).parent / path
        hosts = set(topology.hosts()) if topology is not None else None
        return TraceWorkload(load_trace_file(path, hosts, horizon_ns))
    raise InvalidInput("workload.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}", source)


"""Fabric-scale many-to-many pipeline transfers: an open-loop family of transfers between the
hosts of a leaf-spine (or any) fabric, each with its own no-bubble timestamp.

Model (docs/workloads.md, "Fabric-scale transfers"). ``transfers`` transfers arrive as a Poisson
process; each picks a sender and a different receiver uniformly among ``hosts`` and a size
from ``distribution``. The arrival rate makes the offered load ``offered_load`` of the fabric's
bisection bandwidth: with uniform pairs half the bytes cross a balanced bisection, so the
aggregate arrival rate is ``2 * offered_load * B`` bit/s, where

    B = min(sum of the hosts' access rates / 2, sum of the ToRs' uplink rates / 2)

(:func:`bisection_bps`: half the ToRs cut off from the core, or half the hosts from the other
half, whichever is smaller). On a non-blocking fabric this is ``offered_load`` on every host
link, the load definition of the Homa and pFabric evaluations; on an oversubscribed one the core binds.

Each transfer is due ``deadline_factor`` times its uncontended time
(:meth:`safs.core.topology.Topology.min_transfer_ns`, the "line-rate time") plus
``deadline_slack_us`` after its first byte, and is announced ``announce_lead_us`` before that
byte (as a runtime that knows the transfer when the producing op starts). Transfers of one
(sender, receiver) pair form one SAFS dependency. With ``firm`` their deadlines are firm: a late
transfer is worthless, as the family's metric (the count of misses) says, and SAFS may give it
up to keep others on time (``FlowSpec.firm``; docs/protocol.md, "Firm deadlines").

Seeded: arrivals, pairs and sizes come from ``random.Random("fabric:<seed>")``.

Metrics: ``fabric_transfers``, ``fabric_transfers_done``, ``fabric_offered_gbps`` (the
aggregate offered rate) and ``fabric_firm`` (1 if the deadlines are firm, else 0); misses,
lateness and FCTs are the runner's ``pipeline_*`` keys.
"""

from __future__ import annotations

import math
import random
from typing import Any

from safs.core.distributions import load_distribution
from safs.core.errors import InvalidInput
from safs.experiments.workloads.api import DependencySpec, FlowSpec, WorkloadAPI
from safs.experiments.workloads.params import bool_param, check_known, float_param, int_param

NS_PER_US = 1_000
LOG_UNIFORM = "log-uniform"
MAX_BYTES = 1 << 32


def bisection_bps(topology: Any, hosts: list[str]) -> float:
    """Bisection bandwidth of ``hosts`` on ``topology``, bit/s (module docstring): the smaller
    of half their access rates and half the uplink rate of the ToRs they hang off (a ToR's
    uplinks: its links to other switches)."""
    access = sum(topology.host_link_bps(h) for h in hosts)
    tors = sorted({topology.tor_of(h) for h in hosts})
    uplinks = sum(topology.graph.edges[tor, nb]["rate_bps"] for tor in tors
                  for nb in topology.ports(tor).values() if not topology.is_host(nb))
    if len(tors) == 1:  # one ToR: its switching capacity is not modelled, the hosts bind
        return access / 2
    return min(access, uplinks) / 2


class FabricTransfers:
    """Many-to-many pipeline transfers (module docstring).

    Params (defaults): ``hosts`` (list of host names; default every host whose name does not
    start with ``bg``, at least 2), ``transfers`` 5000 (1..1_000_000), ``offered_load`` 0.5 ((0,
    1]: of the bisection), ``deadline_factor`` 3.0 ((1, 100]), ``deadline_slack_us`` 20 (0..100_000),
    ``distribution`` ``log-uniform`` (sizes log-uniform in ``[min_bytes, max_bytes]``, defaults
    10_000 and 2_000_000) or a flow-size file (shipped name or path; then ``min_bytes`` /
    ``max_bytes`` are refused), ``announce_lead_us`` 0 (0..100_000), ``start_us`` 50 (0..10^6:
    the first arrival no earlier, so persistent background has started), ``firm`` false (true:
    every transfer's deadline is firm, ``FlowSpec.firm``).

    Raises:
        InvalidInput: an unknown or out-of-range parameter (field ``workload.params.<key>``).
    """

    KNOWN = {"hosts", "transfers", "offered_load", "deadline_factor", "deadline_slack_us", "distribution",
             "min_bytes", "max_bytes", "announce_lead_us", "start_us", "firm"}

    def __init__(self, params: dict[str, Any], topology: Any, seed: int = 1) -> None:
        check_known(params, self.KNOWN)
        hosts = params.get("hosts")
        if hosts is None:
            hosts = [h for h in topology.hosts() if not h.startswith("bg")]
        known = set(topology.hosts())
        if (not isinstance(hosts, list) or len(hosts) < 2 or len(set(hosts)) != len(hosts)
                or not all(isinstance(h, str) and h in known for h in hosts)):
            raise InvalidInput("workload.params.hosts", f"must be a list of at least 2 distinct hosts of topology "
                               f"{topology.name!r}, got {hosts!r}")
        self.hosts: list[str] = hosts
        self.n_transfers = int_param(params, "transfers", 5000, 1, 1_000_000)
        self.load = float_param(params, "offered_load", 0.5, 0.0, 1.0)
        self.deadline_factor = float_param(params, "deadline_factor", 3.0, 1.0, 100.0)
        slack_ns = int_param(params, "deadline_slack_us", 20, 0, 100_000) * NS_PER_US
        lead_ns = int_param(params, "announce_lead_us", 0, 0, 100_000) * NS_PER_US
        start_ns = int_param(params, "start_us", 50, 0, 1_000_000) * NS_PER_US
        self.firm = bool_param(params, "firm", False)
        dist_name = params.get("distribution", LOG_UNIFORM)
        if not isinstance(dist_name, str) or not dist_name:
            raise InvalidInput("workload.params.distribution",
                               f"must be {LOG_UNIFORM!r} or a flow-size file name, got {dist_name!r}")
        rng = random.Random(f"fabric:{seed}")
        if dist_name == LOG_UNIFORM:
            lo = int_param(params, "min_bytes", 10_000, 1, MAX_BYTES)
            hi = int_param(params, "max_bytes", 2_000_000, 1, MAX_BYTES)
            if hi < lo:
                raise InvalidInput("workload.params.max_bytes", f"must be >= min_bytes ({lo}), got {hi}")
            log_lo, log_hi = math.log(lo), math.log(hi)
            mean = (hi - lo) / (log_hi - log_lo) if hi > lo else float(lo)
            def size() -> int:
                return min(hi, max(lo, round(math.exp(rng.uniform(log_lo, log_hi)))))
        else:
            for key in ("min_bytes", "max_bytes"):
                if key in params:
                    raise InvalidInput(f"workload.params.{key}", f"only with distribution {LOG_UNIFORM!r}; "
                                       f"{dist_name!r} gives the sizes as they are")
            dist = load_distribution(dist_name)
            mean = dist.mean_bytes()
            def size() -> int:
                return dist.sample(rng)
        self.offered_bps = 2 * self.load * bisection_bps(topology, hosts)
        mean_gap_ns = mean * 8 / self.offered_bps * 1e9
        # (start_ns, FlowSpec): send times relative to the workload's start.
        self.flows: list[tuple[int, FlowSpec]] = []
        t = float(start_ns + lead_ns)
        for i in range(self.n_transfers):
            t += rng.expovariate(1.0 / mean_gap_ns)
            src, dst = rng.sample(hosts, 2)
            nbytes = size()
            send = round(t)
            due = send + round(self.deadline_factor * topology.min_transfer_ns(src, dst, nbytes)) + slack_ns
            self.flows.append((send, FlowSpec(src, dst, nbytes, due, f"fabric {i} {src}->{dst}", firm=self.firm)))
        self.lead_ns = lead_ns
        self.finished = 0

    def receivers(self) -> list[str]:
        """Every receiving host (where background traffic is aimed)."""
        return sorted({spec.receiver for _, spec in self.flows})

    def start(self, api: WorkloadAPI) -> None:
        base = api.now()
        for send, spec in self.flows:
            # No-bubble timestamps are relative to the workload's start, like the send times.
            spec = FlowSpec(spec.sender, spec.receiver, spec.size_bytes, base + (spec.no_bubble_ts_ns or 0),
                            spec.label, firm=spec.firm)
            api.call_at(base + send - self.lead_ns,
                        lambda spec=spec, at=base + send: api.start_flow(spec, self._done, send_at_ns=at))

    def _done(self, _t: int) -> None:
        self.finished += 1

    def done(self) -> bool:
        return self.finished >= len(self.flows)

    def metrics(self) -> dict[str, float]:
        return {"fabric_transfers": float(len(self.flows)), "fabric_transfers_done": float(self.finished),
                "fabric_offered_gbps": self.offered_bps / 1e9, "fabric_firm": float(self.firm)}

    def dependencies(self) -> list[DependencySpec]:
        """One per (sender, receiver) pair that has a transfer."""
        return [DependencySpec.of(a, b) for a, b in dict.fromkeys((s.sender, s.receiver) for _, s in self.flows)]

    def warmup_end_ns(self) -> int | None:
        """No warm-up: the family counts from its start."""
        return None

    def samples(self) -> dict[str, list[float]]:
        """No per-step samples."""
        return {}

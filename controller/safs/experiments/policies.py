"""The policy registry: every transport/scheduling policy a scenario can name, in one place.

Each :class:`Policy` says whether the scheduler is told about pipeline flows (``hinted``), how
it changes the scheduler's settings (ablations), how the packet simulator runs its flows
(``sim``: a binding class of :mod:`safs.experiments.sim.bindings`), whether it is the fluid
EDF reference instead (``fluid``), and which host-agent transport carries its pipeline flows on
Mininet (``mininet_transport``; None: not available there). The simulator, the Mininet backend,
``safs run`` and ``safs eval`` read this registry; none of them branches on a policy's name.
Baseline definitions and their parameters: docs/baselines.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from safs.core.errors import InvalidInput
from safs.core.scheduler import SchedulerConfig
from safs.core.topology import Topology
from safs.experiments.sim.bindings import (
    D2tcpFlows,
    DctcpFlows,
    HomaFlows,
    NoGrantsFlows,
    PfabricFlows,
    SafsFifoSenderFlows,
    SafsFlows,
    SafsPerTransferFlows,
)
from safs.experiments.sim.config import SimConfig


@dataclass(frozen=True)
class Policy:
    """One registered policy.

    Attributes:
        name: the name scenarios and ``--policies`` use.
        summary: one line for listings.
        hinted: pipeline flows are announced to, activated by and completed at the scheduler
            (the SAFS family); otherwise the scheduler only installs routes and ECN settings.
        scheduler_overrides: :class:`safs.core.scheduler.SchedulerConfig` fields this policy
            sets (the SAFS ablations switch one half of SAFS off); ``allocator`` is a mapping of
            :class:`safs.core.allocator.AllocatorConfig` fields merged into the scenario's, which
            the hosts see too (``safs-late-last``).
        sim_overrides: :class:`safs.experiments.sim.config.SimConfig` fields this policy sets in
            the simulator over the scenario's (``safs-overcommit``: the SAFS hosts' pacer burst).
        sim: the simulator binding class (None for the fluid reference).
        fluid: run by the flow-level EDF oracle (:mod:`safs.experiments.sim.oracle`), not packets.
        mininet_transport: the host agent's transport for pipeline flows on Mininet
            (``"safs"`` or ``"tcp"``, the kernel's), None where the policy does not run there.
        per_transfer: hinted per transfer (announce, activate, complete each transfer: the
            per-transfer design); otherwise hinted per dependency (announced once).
    """

    name: str
    summary: str
    hinted: bool = False
    scheduler_overrides: Mapping[str, Any] = field(default_factory=dict)
    sim_overrides: Mapping[str, Any] = field(default_factory=dict)
    sim: type[DctcpFlows] | None = None
    fluid: bool = False
    mininet_transport: str | None = None
    per_transfer: bool = False

    def sim_config(self, config: SimConfig) -> tuple[SimConfig, dict[str, Any]]:
        """``config`` with this policy's allocator settings (the hosts use them too) and
        ``sim_overrides`` applied, and its other scheduler overrides (for the scheduler's config).

        Raises:
            InvalidInput: a merged setting out of range (as :class:`SimConfig`).
        """
        overrides = dict(self.scheduler_overrides)
        if "allocator" in overrides:
            sched = config.scheduler
            allocator = {**sched.get("allocator", {}), **overrides.pop("allocator")}
            config = config.replace(scheduler={**sched, "allocator": allocator})
        if self.sim_overrides:
            config = config.replace(**self.sim_overrides)
        return config, overrides

    def configs(self, config: SimConfig, topology: Topology | None) -> tuple[SimConfig, SchedulerConfig]:
        """The run's settings under this policy, for either target: ``config`` as
        :meth:`sim_config` returns it, and the scheduler's settings derived from it for
        ``topology`` with this policy's other scheduler overrides applied (the controller's
        config on Mininet, the simulated scheduler's on the simulator).

        Raises:
            InvalidInput: a merged setting out of range (named).
        """
        config, overrides = self.sim_config(config)
        sched = config.scheduler_config(topology)
        return config, sched.replace(**overrides) if overrides else sched


POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("safs", "SAFS: slack classes, rate grants and meters at the receiver's ToR", hinted=True,
           sim=SafsFlows, mininet_transport="safs"),
    Policy("safs-fifo-sender", "SAFS ablation: each dependency paced on its own into the sender's NIC FIFO "
           "(no send scheduler: a host's transfers share its NIC)", hinted=True, sim=SafsFifoSenderFlows),
    Policy("safs-per-transfer", "SAFS as first built: the controller grants every transfer (per-transfer "
           "hints and grant writes, polling senders)", hinted=True, per_transfer=True,
           scheduler_overrides={"grant_mode": "per-transfer"}, sim=SafsPerTransferFlows,
           mininet_transport="safs"),
    Policy("dctcp", "DCTCP (ECN window control) for every flow", sim=DctcpFlows, mininet_transport="tcp"),
    Policy("d2tcp", "D2TCP: DCTCP with deadline-aware backoff, no-bubble timestamp as the deadline",
           sim=D2tcpFlows),
    Policy("homa", "Homa: receiver-driven SRPT grants, unscheduled RTTbytes, every flow", sim=HomaFlows),
    Policy("pfabric", "pFabric: remaining-size priority in every packet and port, every flow", sim=PfabricFlows),
    Policy("edf-oracle", "flow-level centralized preemptive EDF (fluid reference)", fluid=True),
    Policy("safs-no-grants", "SAFS ablation: slack classes without rate grants (DCTCP under a SAFS header)",
           scheduler_overrides={"rate_grants": False}, sim=NoGrantsFlows),
    Policy("safs-no-classes", "SAFS ablation: rate grants without slack classes (one data queue)", hinted=True,
           scheduler_overrides={"slack_classes": False}, sim=SafsFlows),
    Policy("safs-no-holder", "SAFS ablation: no port holder (equally urgent sole dependencies share the port)",
           hinted=True, scheduler_overrides={"holder_idle_ns": 0}, sim=SafsFlows),
    Policy("safs-late-last", "SAFS variant: late transfers after on-time ones (allocator.late_transfers last: "
           "fewer misses, later late transfers)", hinted=True,
           scheduler_overrides={"allocator": {"late_transfers": "last"}}, sim=SafsFlows, mininet_transport="safs"),
    Policy("safs-overcommit", "SAFS variant: safs-late-last with top-class overcommit (a port's top-class "
           "shares raised up to 2x while its senders leave it partly idle) and senders that catch up on "
           "time their NIC gave others (a two-packet pacer burst)", hinted=True,
           scheduler_overrides={"allocator": {"late_transfers": "last"}, "top_overcommit": 2.0},
           sim_overrides={"safs_burst_bytes": 18_000}, sim=SafsFlows, mininet_transport="safs"),
    Policy("safs-admission", "SAFS variant: safs-overcommit with receiver admission (each receiving host "
           "rejects, by Moore and Hodgson's rule at its link, the transfers that keep the others from being "
           "on time; their senders send them as late)", hinted=True,
           scheduler_overrides={"allocator": {"late_transfers": "last"}, "top_overcommit": 2.0},
           sim_overrides={"safs_burst_bytes": 18_000, "safs_receiver_admission": "moore-hodgson"}, sim=SafsFlows,
           mininet_transport="safs"),
)}


def get_policy(name: str, field_name: str = "policy", source: str | None = None) -> Policy:
    """The registered policy called ``name``.

    Raises:
        InvalidInput: unknown name (field ``field_name``; the message lists the valid ones).
    """
    policy = POLICIES.get(name) if isinstance(name, str) else None
    if policy is None:
        raise InvalidInput(field_name, f"unknown policy {name!r}; valid: {', '.join(POLICIES)}", source)
    return policy


def mininet_policies() -> list[str]:
    """Names of the policies the Mininet backend runs, in registry order."""
    return [p.name for p in POLICIES.values() if p.mininet_transport is not None]

"""The one-switch star topology and the all-flows-at-time-0 workload the simulator's transport
and ablation tests share."""

from __future__ import annotations

from safs.core.topology import Topology, build_topology
from safs.experiments.workloads.api import DependencySpec, FlowSpec


def star(n_hosts: int, rate: str = "100Gbps", delay_ns: int = 500, buffer_bytes: int = 1 << 20,
         switch: str = "tor0") -> Topology:
    """One switch, hosts h0..h{n-1} (addresses 10.0.0.1..) at ``rate``."""
    return build_topology({
        "name": "star", "defaults": {"rate": rate, "delay_ns": delay_ns, "buffer_bytes": buffer_bytes},
        "switches": [switch],
        "hosts": {f"h{i}": {"ip": f"10.0.0.{i + 1}", "switch": switch} for i in range(n_hosts)}}, "inline")


class AllAtZero:
    """A workload: every spec starts at 0; done when all pipeline flows finished."""

    def __init__(self, specs: list[FlowSpec]) -> None:
        self.specs = specs
        self.left = sum(s.flow_class == "pipeline" for s in specs)

    def start(self, api) -> None:  # noqa: ANN001 - safs.experiments.workloads.api.WorkloadAPI
        for s in self.specs:
            api.start_flow(s, self._done if s.flow_class == "pipeline" else (lambda t: None))

    def _done(self, _: int) -> None:
        self.left -= 1

    def done(self) -> bool:
        return self.left == 0

    def metrics(self) -> dict[str, float]:
        return {}

    def dependencies(self) -> list[DependencySpec]:
        """One per (sender, receiver) of the pipeline flows, declared at launch."""
        pairs = dict.fromkeys((s.sender, s.receiver) for s in self.specs if s.flow_class == "pipeline")
        return [DependencySpec.of(a, b) for a, b in pairs]

    def warmup_end_ns(self) -> int | None:
        return None

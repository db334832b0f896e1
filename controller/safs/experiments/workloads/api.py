"""The workload interface: how workloads drive a network (docs/design.md, "Workload interface").

Workloads are closed-loop: a flow starts when its producer's compute finishes, and the
consumer's compute starts when the flow's ``on_done`` fires. The simulator
(:mod:`safs.experiments.sim`) and :class:`safs.experiments.workloads.ideal.IdealNetwork` implement :class:`WorkloadAPI`.
Times are integer ns of the fabric clock (not wrapped), sizes integer bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from safs.core.errors import InvalidInput
from safs.core.hints import FLOW_CLASSES


@dataclass(frozen=True)
class FlowSpec:
    """One transfer a workload asks the network to carry.

    Attributes:
        sender: host name of the sender.
        receiver: host name of the receiver (must differ from ``sender``).
        size_bytes: bytes to deliver, >= 1.
        no_bubble_ts_ns: the time by which all bytes must have arrived for the consumer to
            start without a bubble (ns, fabric time); None for background flows.
        label: free text naming the transfer (e.g. ``"A2F s3 l1 mb0 a5->f0"``).
        flow_class: ``"pipeline"`` or ``"background"``.
        dependency: the SAFS dependency the transfer belongs to, a name unique per sender (its
            transfers share one grant at the receiver's ToR, docs/protocol.md "Grants"); None:
            the sender's dependency for this receiver and class.
        firm: the no-bubble timestamp is a firm deadline: the transfer is worthless once late
            (independent requests whose count of misses is the metric), so SAFS may give it up
            to keep others on time (docs/protocol.md, "Firm deadlines"). Default False: a
            pipeline's soft deadline (late bytes still hold up the consumer). Only a pipeline
            flow can be firm.

    Raises:
        InvalidInput: empty or equal endpoints, size < 1, unknown class, a pipeline flow
            without a no-bubble timestamp, or ``firm`` not a bool or true for a background flow.
    """

    sender: str
    receiver: str
    size_bytes: int
    no_bubble_ts_ns: int | None
    label: str
    flow_class: str = "pipeline"
    dependency: str | None = None
    firm: bool = False

    def __post_init__(self) -> None:
        if not self.sender or not self.receiver:
            raise InvalidInput("flow.sender", "sender and receiver must be host names")
        if self.sender == self.receiver:
            raise InvalidInput("flow.receiver", f"must differ from the sender ({self.sender!r})")
        if isinstance(self.size_bytes, bool) or not isinstance(self.size_bytes, int) or self.size_bytes < 1:
            raise InvalidInput("flow.size_bytes", f"must be an integer >= 1, got {self.size_bytes!r}")
        if self.dependency is not None and (not isinstance(self.dependency, str) or not self.dependency):
            raise InvalidInput("flow.dependency", f"must be a non-empty name or None, got {self.dependency!r}")
        if self.flow_class not in FLOW_CLASSES:
            raise InvalidInput("flow.flow_class", f"must be one of {', '.join(FLOW_CLASSES)}, got {self.flow_class!r}")
        if self.flow_class == "pipeline" and self.no_bubble_ts_ns is None:
            raise InvalidInput("flow.no_bubble_ts_ns", "a pipeline flow needs a no-bubble timestamp")
        if type(self.firm) is not bool or (self.firm and self.flow_class != "pipeline"):
            raise InvalidInput("flow.firm", f"must be true only for a pipeline flow, else false, got {self.firm!r} "
                               f"for a {self.flow_class} flow")
        if self.no_bubble_ts_ns is not None and (isinstance(self.no_bubble_ts_ns, bool)
                                                 or not isinstance(self.no_bubble_ts_ns, int)
                                                 or self.no_bubble_ts_ns < 0):
            raise InvalidInput(
                "flow.no_bubble_ts_ns", f"must be an integer ns >= 0 or None, got {self.no_bubble_ts_ns!r}"
            )


    def dependency_key(self) -> str:
        """The name of the dependency it belongs to (``dependency``, else receiver and class)."""
        return self.dependency if self.dependency is not None else f"{self.receiver}/{self.flow_class}"


@dataclass(frozen=True)
class DependencySpec:
    """A SAFS dependency a workload knows at launch (a pipeline's stage pairs): its transfers
    are the FlowSpecs from ``sender`` to ``receiver`` whose ``dependency_key()`` is ``name``.
    Declared before the job starts, so its grant is installed before the first transfer."""

    sender: str
    receiver: str
    name: str
    flow_class: str = "pipeline"

    @classmethod
    def of(cls, sender: str, receiver: str, flow_class: str = "pipeline") -> DependencySpec:
        """The default dependency of ``sender``'s transfers to ``receiver`` (FlowSpec without a
        ``dependency`` name)."""
        return cls(sender, receiver, f"{receiver}/{flow_class}", flow_class)


class WorkloadAPI(Protocol):
    """What a workload may ask of the network it runs on (implemented by the simulator)."""

    def now(self) -> int:
        """Current fabric time in ns."""
        ...

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None:
        """Run ``fn()`` at absolute time ``t_ns`` (>= now)."""
        ...

    def start_flow(self, spec: FlowSpec, on_done: Callable[[int], None], send_at_ns: int | None = None) -> int:
        """Announce a flow now and send its first byte at ``send_at_ns`` (>= now; None = now).

        Announcing ahead is how SAFS applications work: the producer knows, when its compute
        starts, which transfer it will make when the compute ends, so the hint (and the grant)
        can be in place before the data moves. Returns the flow id; ``on_done(finish_ns)`` is
        called when the last byte arrives. FCT counts from ``send_at_ns``.
        """
        ...


class Workload(Protocol):
    """A closed-loop traffic source."""

    def start(self, api: WorkloadAPI) -> None:
        """Schedule the first events / flows on ``api``."""
        ...

    def done(self) -> bool:
        """True when the workload has finished (the run may stop)."""
        ...

    def metrics(self) -> dict[str, float]:
        """Workload metrics, units in the key (``tpot_p99_ms``, ``iteration_time_ms``)."""
        ...

    def dependencies(self) -> list[DependencySpec]:
        """The dependencies its pipeline transfers use, known at launch ([] if none are)."""
        ...

    def warmup_end_ns(self) -> int | None:
        """When the workload's warm-up ended (AFD: the first decode step; ZeroBubble: the first
        iteration), or None without one; control-rate figures count after it."""
        ...

    def samples(self) -> dict[str, list[float]]:
        """Per-run sample lists kept beside the numbers-only record (docs/results.md,
        "Samples"), units in the key: ``tpot_ms`` (AFD, per decode step n >= 1),
        ``iteration_time_ms`` (ZeroBubble, per iteration), ``urgent_fct_ms`` (urgent
        microbenchmark, per finished urgent flow); empty where the workload has none."""
        ...

"""The SAFS allocator: no-bubble rate demand -> safe scheduled rate -> reusable rate grants.

Pure and deterministic: no I/O, no clock, no gRPC, no simulator. Source of every rule:
../shared/BRIEF.md, "The idea", "Design decisions" (Who allocates, Background) and
"Invariants"; interface: docs/design.md, "Allocator interface".

Model
-----
* Resources. One logical allocator per **receiver link** (the last hop to a receiver host) and
  one per **sender uplink**; each has a capacity in bit/s, of which
  ``usable = floor(capacity * (1 - headroom))`` may be allocated. The fabric core is assumed
  non-blocking (BRIEF, "Who allocates"), so a flow uses exactly two resources: its sender's
  uplink and its receiver's link.
* No-bubble rate demand of a pipeline flow at time ``now`` (all integers, ``ceil``)::

      demand = ceil(remaining_bytes * 8 * 1e9 * (1 + safety_margin) / (deadline - now))  [bit/s]

  with ``deadline - now`` the signed 48-bit difference (:func:`safs.core.timebase.diff`). A late
  flow (``deadline <= now``) demands the maximum, ``min(receiver usable, sender usable)``
  (BRIEF: "Late flows are legal ... accepted as most urgent").
* Urgency. Flows are served in **deadline order** (earliest no-bubble timestamp first; ties by
  latest start time, then flow id). Deadline order is Jackson's rule (J. R. Jackson, 1955;
  preemptive form: Liu & Layland 1973), which is what makes the BRIEF invariant "maximum
  lateness no worse than EDF" provable on one bottleneck (proof sketch in
  :meth:`Allocator.recompute`). Ordering by latest start time (least laxity first) is available
  as ``AllocatorConfig(urgency="latest_start")`` but is *not* the default: on an overloaded link
  least-laxity-first equalises lateness and can be strictly worse than EDF (tests/
  test_allocator.py::test_latest_start_order_can_lose_to_edf shows a case). Latest start time
  (``deadline - remaining_bytes * 8 / line_rate``) stays the dataplane's per-packet slack
  (BRIEF, "Slack without division"), see :func:`slack_class_table`. A late flow has the
  earliest deadline, so it is the most urgent.
* Safe scheduled rate (computed rates), a greedy pass in urgency order over all flows that
  share a resource, three phases:

  1. pipeline flows, most urgent first: ``min(demand, residual receiver, residual sender)``;
  2. background SAFS flows, most urgent first: ``min(residual receiver, residual sender)``
     (only capacity that phase 1 left, i.e. that pipeline flows do not need);
  3. pipeline flows again, most urgent first: add ``min(residual receiver, residual sender)``.

  "Most urgent first" is at the resolution of ``urgency_quantum_ns``: flows whose time to
  deadline falls in the same quantum first get shares of the residual receiver and sender
  capacity in proportion to their remaining bytes (capped as the phase caps them), then are
  served greedily in order (:func:`_fill`).

  Every flow ends with its receiver link or its sender uplink saturated, which is the work
  conservation invariant: on each receiver link the computed rates sum to its usable capacity
  unless every flow on it is stopped by its sender's uplink. A sender's uplink is shared most
  urgent first among its flows to different receivers, and receiver capacity that a sender
  cannot use stays for later flows from other senders (one global greedy; no iteration).
* Installed grants (what the switch holds) follow the re-send rule of BRIEF "Invariants":
  the installed rate of a flow is replaced by its computed rate (``epoch += 1``; first grant
  epoch 1) only when (a) it has no grant yet, (b) ``|computed - installed| > resend_fraction *
  installed``, (c) ``computed > installed`` and ``installed < demand / (1 + safety_margin)``
  (an increase needed to meet the no-bubble timestamp: the installed rate no longer covers the
  no-bubble rate itself; the margin is the hysteresis), or (d) the installed rates on one of its resources would exceed
  usable capacity (then every flow there whose installed rate is above its computed rate gets
  its computed rate; since computed rates fit, so do the results). Installed rates therefore
  always satisfy the capacity invariant, and re-running with nothing changed changes no grant.

Incremental updates
-------------------
The greedy only couples flows through shared resources, so it decomposes over the connected
components of the bipartite graph (senders, receivers; flows as edges). :meth:`Allocator.upsert`
and :meth:`Allocator.remove` recompute only the component(s) the change touches, at ``now``,
and give exactly the rates a full :meth:`Allocator.recompute` at the same ``now`` gives
(tests/test_allocator.py checks this). Other components keep the rates of their last
computation; call :meth:`Allocator.recompute` when time has passed. Cost of one update: the
touched component's hosts and flows, O(m log m) for m flows in it (benchmarks/
bench_allocator.py: about 1 ms for a 400-flow component in CPython; an all-to-all fabric is one
component, so there an update costs about half a full recompute).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from safs.core import protocol
from safs.core.config import ConfigModel
from safs.core.errors import InvalidInput, SafsError
from safs.core.timebase import HALF, TIME_MASK, slack_to_key

NS_PER_S = 1_000_000_000
PPM = 1_000_000  # fractions (headroom, margin, re-send) are resolved to parts per million
RATE_BPS_MAX = protocol.RATE_KBPS_MAX * 1000  # largest rate the GRANT header can carry
LEASE_NS_MAX = protocol.LEASE_US_MAX * 1000
SLACK_MIN_NS, SLACK_MAX_NS = -HALF, HALF - 1  # signed 48-bit slack range
URGENCY_ORDERS = ("deadline", "latest_start")


def _check_int(field: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise InvalidInput(field, f"must be in {low}..{high}, got {value}")


def _fill(flows: list[tuple[int, str, str, int, int]], want: Mapping[int, int] | None,
          rate: dict[int, int], res_r: dict[str, int], res_s: dict[str, int]) -> None:
    """Hand residual capacity to ``flows`` (in urgency order) up to ``want`` (None: no cap).

    ``flows`` are ``(flow_id, receiver, sender, bucket, weight)``; consecutive flows with the
    same urgency bucket form a group. Within a group each flow first gets its share of what its
    receiver and its sender have left, in proportion to its weight (remaining bytes), then the
    group is served greedily in order for what rounding or a saturated peer left. Updates
    ``rate``, ``res_r`` and ``res_s`` in place.
    """
    # Every give is capped by its receiver's and its sender's residual, so with no residual
    # left on every receiver (or on every sender) nothing can change: skip the passes.
    if not any(res_r.values()) or not any(res_s.values()):
        return
    start = 0
    while start < len(flows):
        end = start + 1
        while end < len(flows) and flows[end][3] == flows[start][3]:
            end += 1
        group = flows[start:end]
        if len(group) > 1:
            weight_r: dict[str, int] = {}
            weight_s: dict[str, int] = {}
            for _, r, s, _, w in group:
                weight_r[r] = weight_r.get(r, 0) + w
                weight_s[s] = weight_s.get(s, 0) + w
            base_r = {r: res_r[r] for r in weight_r}
            base_s = {s: res_s[s] for s in weight_s}
            for fid, r, s, _, w in group:
                give = min(base_r[r] * w // weight_r[r], base_s[s] * w // weight_s[s], res_r[r], res_s[s])
                if want is not None:
                    give = min(give, want[fid] - rate[fid])
                if give > 0:
                    rate[fid] += give
                    res_r[r] -= give
                    res_s[s] -= give
        for fid, r, s, _, _ in group:
            give = res_r[r]
            if res_s[s] < give:
                give = res_s[s]
            if want is not None and want[fid] - rate[fid] < give:
                give = want[fid] - rate[fid]
            if give > 0:
                rate[fid] += give
                res_r[r] -= give
                res_s[s] -= give
        start = end


_SlackThreshold = Annotated[int, Field(ge=SLACK_MIN_NS + 1, le=SLACK_MAX_NS)]
# One threshold between each pair of adjacent slack classes (4 for the 5 classes 6..2).
if TYPE_CHECKING:  # mypy needs the tuple spelled out; at run time its length follows SLACK_QUEUES
    _SlackThresholds = tuple[_SlackThreshold, _SlackThreshold, _SlackThreshold, _SlackThreshold]
else:
    _SlackThresholds = tuple[(_SlackThreshold,) * (len(protocol.SLACK_QUEUES) - 1)]


class AllocatorConfig(ConfigModel):
    """Allocator settings (validated on construction; raises InvalidInput naming the field,
    ``config.<name>``; :class:`safs.core.config.ConfigModel`).

    Attributes:
        headroom: fraction of each link/uplink capacity never allocated, in [0, 1)
            (BRIEF, "Invariants": "capacity minus its configured headroom"). Default 0.01:
            what it protects is the data path's control packets (REQUEST/DONE, which a host may
            send at most at ``SchedulerConfig.control_share``, 1%, and which measured 0.2-0.4%
            of the data bytes in the shipped scenarios) and pacing error, which the meters'
            yellow band and the port buffers absorb. 0.05 (the first default) left 4% of every
            link idle under load: docs/evaluation.md, "Headroom".
        safety_margin: pipeline flows demand ``(1 + safety_margin)`` times their no-bubble rate,
            in [0, 10] (BRIEF, "Background": "plus a configurable safety margin"). Default 0.1.
        lease_ns: lease of every grant, ns, in 1_000..LEASE_US_MAX*1000 (the wire carries µs).
            Default 10 ms.
        resend_fraction: an installed grant is replaced when the computed rate differs by more
            than this fraction of it, in [0, 1] (BRIEF, "Invariants"). Default 0.1.
        line_rate_bps: sender NIC line rate for latest start time
            (``deadline - remaining_bytes * 8 / line_rate``), bit/s, in 1..RATE_BPS_MAX.
            Default 100 Gbit/s.
        slack_thresholds_ns: 4 strictly increasing signed slack thresholds (ns) separating the
            5 slack classes 6..2 (BRIEF, "Queues"): class 6 below the first (default 0 = late),
            class 2 at or above the last. Default (0, 100 µs, 1 ms, 10 ms).
        late_transfers: where the switches' slack classes put a transfer whose slack is below
            the first threshold (with the default 0: it cannot meet its no-bubble timestamp even
            at line rate). ``"first"`` (default): in class 6, before every on-time transfer,
            which keeps the largest lateness small; right when a late transfer holds up a
            pipeline stage or a collective step. ``"last"``: in class 2, after every on-time
            transfer (the other classes move up one: [t0, t1) is class 6 .. slack >= t3 class
            3), and the SAFS host sends it after its on-time dependencies: fewer transfers miss
            (a late one no longer takes the capacity of those that can still make it; Moore and
            Hodgson's rule for the fewest late jobs puts them last too) while the late ones are
            later; for independent transfers whose count of misses is the metric
            (docs/evaluation.md, "Late transfers last"). Only the slack classes (share grants)
            and the SAFS host's send order use it: ``grant_mode: per-transfer`` rejects "last".
        urgency: ``"deadline"`` (EDF order, default) or ``"latest_start"`` (least laxity).
        urgency_quantum_ns: resolution, in ns (>= 1), of "most urgent first": pipeline flows
            whose time to deadline falls in the same quantum are equally urgent and share
            capacity in proportion to their remaining bytes (so one micro-batch's incast, or a
            host's fan-out of late flows, finish together instead of one at a time behind the
            control loop, which needs a hint-to-grant round per hand-over). Default 100 µs: the
            simulator's control loop (20 µs hint latency, 10 µs digest and grant polls, 100 µs
            re-allocation tick) cannot hand capacity over faster than that; on 16A2F decode a
            10 µs quantum gave a 30% higher TPOT than 100 µs (docs/simulator.md). The EDF invariants hold exactly at
            quantum 1; at quantum q maximum
            lateness is within q of EDF's.
    """

    FIELD_PREFIX: ClassVar[str] = "config."

    headroom: float = Field(0.01, ge=0, lt=1)
    safety_margin: float = Field(0.1, ge=0, le=10)
    lease_ns: int = Field(10_000_000, ge=1_000, le=LEASE_NS_MAX)
    resend_fraction: float = Field(0.1, ge=0, le=1)
    line_rate_bps: int = Field(100_000_000_000, ge=1, le=RATE_BPS_MAX)
    slack_thresholds_ns: _SlackThresholds = (0, 100_000, 1_000_000, 10_000_000)
    late_transfers: Literal["first", "last"] = "first"
    urgency: Literal[URGENCY_ORDERS] = "deadline"  # type: ignore[valid-type]  # Literal of a tuple constant: valid at run time
    urgency_quantum_ns: int = Field(100_000, ge=1, le=SLACK_MAX_NS)

    @field_validator("headroom")
    @classmethod
    def _headroom_below_one_ppm(cls, v: float) -> float:
        if round(v * PPM) >= PPM:  # resolved to parts per million: 1 - 1e-6 would allocate nothing
            raise ValueError(f"must be below 1 - 1e-6, got {v}")
        return v

    @field_validator("slack_thresholds_ns")
    @classmethod
    def _increasing(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(a >= b for a, b in zip(v, v[1:])):
            raise ValueError(f"must be strictly increasing, got {v!r}")
        return v

    def usable_bps(self, capacity_bps: int) -> int:
        """Allocatable part of a capacity: ``floor(capacity * (1 - headroom))``, bit/s."""
        return capacity_bps * (PPM - round(self.headroom * PPM)) // PPM


@dataclass(frozen=True)
class AllocFlow:
    """One flow as the allocator sees it (docs/design.md, "Allocator interface").

    Attributes:
        flow_id: 1..2^32-1.
        sender: sender host name (must be a key of ``sender_uplink_bps``).
        receiver: receiver host name (must be a key of ``receiver_capacity_bps``).
        remaining_bytes: bytes still to deliver, 1..2^48-1.
        deadline_ns: no-bubble timestamp, 48-bit fabric time (0..2^48-1).
        background: True for SAFS flows hinted as background (served after pipeline flows).
    """

    flow_id: int
    sender: str
    receiver: str
    remaining_bytes: int
    deadline_ns: int
    background: bool = False


@dataclass(frozen=True)
class Grant:
    """An installed (reusable) rate grant.

    Attributes:
        flow_id: the flow.
        rate_bps: installed rate, bit/s (may be 0: the link is taken by more urgent flows).
        epoch: grows by 1 each time the installed grant changes; the first grant has epoch 1.
            Unbounded here; the wire carries it modulo 2^32.
        lease_ns: lease, ns (``AllocatorConfig.lease_ns``).
    """

    flow_id: int
    rate_bps: int
    epoch: int
    lease_ns: int


@dataclass(frozen=True)
class SlackClassRange:
    """Signed slack range ``[low_slack_ns, high_slack_ns]`` (inclusive, ns) -> queue ``qclass``."""

    low_slack_ns: int
    high_slack_ns: int
    qclass: int


@dataclass(frozen=True)
class SlackKeyRange:
    """Unsigned 48-bit range-match keys ``[low_key, high_key]`` (inclusive) -> queue ``qclass``.

    Keys are :func:`safs.core.timebase.slack_to_key` of the slack bounds (sign bit flipped), so a
    P4 range match on the switch's one-subtraction key selects the class.
    """

    low_key: int
    high_key: int
    qclass: int


def slack_class_table(thresholds_ns: tuple[int, ...], late_transfers: str = "first") -> list[SlackClassRange]:
    """Slack classes for the dataplane, covering all signed 48-bit slack without gaps/overlaps.

    Args:
        thresholds_ns: 4 strictly increasing thresholds ``t0 < t1 < t2 < t3`` (validated by
            :class:`AllocatorConfig`).
        late_transfers: ``"first"`` or ``"last"`` (:class:`AllocatorConfig`).

    Returns:
        5 ranges, by slack: with ``"first"`` class 6 for slack < t0 (t0 = 0: late), 5 for
        [t0, t1), 4 for [t1, t2), 3 for [t2, t3), 2 for slack >= t3 (queue map: BRIEF,
        "Queues"; ``safs.core.protocol.SLACK_QUEUES``); with ``"last"`` class 2 for slack < t0
        and 6, 5, 4, 3 for the others.
    """
    bounds = [SLACK_MIN_NS, *thresholds_ns, SLACK_MAX_NS + 1]
    queues = protocol.SLACK_QUEUES
    if late_transfers == "last":
        queues = (queues[-1], *queues[:-1])
    return [SlackClassRange(bounds[i], bounds[i + 1] - 1, qclass) for i, qclass in enumerate(queues)]


def key_ranges(table: list[SlackClassRange]) -> list[SlackKeyRange]:
    """Turn a slack class table into unsigned 48-bit key ranges for the range-match table.

    Raises:
        SafsError: if the key mapping is not monotonic (contiguous, increasing keys); that
            would be a bug in :func:`safs.core.timebase.slack_to_key`.
    """
    out = [SlackKeyRange(slack_to_key(r.low_slack_ns), slack_to_key(r.high_slack_ns), r.qclass) for r in table]
    expected_low = 0
    for r in out:
        if r.low_key != expected_low or r.high_key < r.low_key:
            raise SafsError(f"slack key mapping not monotonic at {r}")
        expected_low = r.high_key + 1
    if expected_low != TIME_MASK + 1:
        raise SafsError("slack key ranges do not cover all 48-bit keys")
    return out


class Allocator:
    """Receiver-driven rate allocator for all receiver links and sender uplinks of a fabric.

    Args:
        config: :class:`AllocatorConfig`.
        receiver_capacity_bps: receiver host name -> capacity of its last-hop link, bit/s
            (1..RATE_BPS_MAX).
        sender_uplink_bps: sender host name -> capacity of its uplink, bit/s (1..RATE_BPS_MAX).
            A host that both sends and receives appears in both (distinct directions).

    Raises:
        InvalidInput: bad config, name or capacity (field ``receiver_capacity_bps[name]`` etc.).

    All methods that take ``now_ns`` require a 48-bit fabric time (0..2^48-1). Returned dicts
    are ordered by flow id.
    """

    def __init__(
        self,
        config: AllocatorConfig,
        receiver_capacity_bps: Mapping[str, int],
        sender_uplink_bps: Mapping[str, int],
    ) -> None:
        if not isinstance(config, AllocatorConfig):
            raise InvalidInput("config", f"must be an AllocatorConfig, got {type(config).__name__}")
        self._cfg = config
        self._margin_scale = 8 * NS_PER_S * (PPM + round(config.safety_margin * PPM))
        self._resend_ppm = round(config.resend_fraction * PPM)
        self._recv_usable = self._usable_map("receiver_capacity_bps", receiver_capacity_bps)
        self._send_usable = self._usable_map("sender_uplink_bps", sender_uplink_bps)
        self._recv_capacity = {name: receiver_capacity_bps[name] for name in self._recv_usable}
        self._send_capacity = {name: sender_uplink_bps[name] for name in self._send_usable}
        self._flows: dict[int, AllocFlow] = {}
        self._by_receiver: dict[str, set[int]] = {name: set() for name in self._recv_usable}
        self._by_sender: dict[str, set[int]] = {name: set() for name in self._send_usable}
        # Host graph for component search: receiver -> {sender: flow count} and back.
        self._peers_of_receiver: dict[str, dict[str, int]] = {name: {} for name in self._recv_usable}
        self._peers_of_sender: dict[str, dict[str, int]] = {name: {} for name in self._send_usable}
        # Per flow, constants of the greedy: (deadline_ns, tx time at line rate in ns,
        # bits * 1e9 * (1 + margin) in ppm, receiver, sender, background).
        self._consts: dict[int, tuple[int, int, int, str, str, bool]] = {}
        self._computed: dict[int, int] = {}
        self._demand: dict[int, int] = {}
        self._installed: dict[int, Grant] = {}
        self._installed_rate: dict[int, int] = {}  # mirror of _installed[fid].rate_bps (speed)

    def _usable_map(self, field: str, capacities: Mapping[str, int]) -> dict[str, int]:
        usable: dict[str, int] = {}
        for name in sorted(capacities):
            if not isinstance(name, str) or not name:
                raise InvalidInput(field, f"host names must be non-empty strings, got {name!r}")
            _check_int(f"{field}[{name}]", capacities[name], 1, RATE_BPS_MAX)
            usable[name] = self._cfg.usable_bps(capacities[name])
        return usable

    # ----------------------------------------------------------------- public API

    @property
    def config(self) -> AllocatorConfig:
        """The configuration in force."""
        return self._cfg

    def receiver_capacity_bps(self) -> dict[str, int]:
        """Receiver link capacities as configured (before headroom), bit/s, by host name."""
        return dict(self._recv_capacity)

    def sender_uplink_bps(self) -> dict[str, int]:
        """Sender uplink capacities as configured (before headroom), bit/s, by host name."""
        return dict(self._send_capacity)

    def receiver_usable_bps(self, receiver: str) -> int:
        """Usable capacity (capacity minus headroom) of a receiver link, bit/s."""
        self._check_name("receiver", receiver, self._recv_usable)
        return self._recv_usable[receiver]

    def sender_usable_bps(self, sender: str) -> int:
        """Usable capacity (capacity minus headroom) of a sender uplink, bit/s."""
        self._check_name("sender", sender, self._send_usable)
        return self._send_usable[sender]

    def flows(self) -> dict[int, AllocFlow]:
        """The admitted flows, by flow id."""
        return {fid: self._flows[fid] for fid in sorted(self._flows)}

    def upsert(self, flow: AllocFlow, now_ns: int) -> dict[int, Grant]:
        """Admit a new flow or replace a known one, and reallocate what it can affect.

        Args:
            flow: the flow (new, or new values for a known flow id).
            now_ns: current 48-bit fabric time, ns.

        Returns:
            Installed grants that changed (any flow of the touched components), by flow id.

        Raises:
            InvalidInput: bad field (``flow.flow_id``, ``flow.sender``, ``flow.receiver``,
                ``flow.remaining_bytes``, ``flow.deadline_ns``, ``flow.background``) or
                ``now_ns``; nothing is changed then.
        """
        return self.upsert_many([flow], now_ns)

    def upsert_many(self, flows: Iterable[AllocFlow], now_ns: int) -> dict[int, Grant]:
        """Like :meth:`upsert` for several flows at once (one reallocation; all or nothing).

        Raises:
            InvalidInput: as :meth:`upsert` (field ``flows[i].<name>``), or a flow id repeated.
        """
        batch = list(flows)
        self._check_now(now_ns)
        seen: set[int] = set()
        for i, flow in enumerate(batch):
            self._check_flow(flow, f"flows[{i}]" if len(batch) > 1 else "flow")
            if flow.flow_id in seen:
                raise InvalidInput(f"flows[{i}].flow_id", f"repeated flow id {flow.flow_id}")
            seen.add(flow.flow_id)
        receivers: set[str] = set()
        senders: set[str] = set()
        for flow in batch:
            old = self._flows.get(flow.flow_id)
            if old is not None:
                self._unindex(old)
                receivers.add(old.receiver)
                senders.add(old.sender)
            self._index(flow)
            receivers.add(flow.receiver)
            senders.add(flow.sender)
        return self._reallocate(*self._component(receivers, senders), now_ns)

    def remove(self, flow_id: int, now_ns: int) -> dict[int, Grant]:
        """Forget a flow (finished or cancelled) and give its capacity to the others.

        Returns:
            Installed grants of the remaining flows that changed, by flow id. The removed flow's
            grant is dropped (the caller deletes its switch entry).

        Raises:
            InvalidInput: ``flow_id`` unknown, or bad ``now_ns``; nothing is changed then.
        """
        self._check_now(now_ns)
        if isinstance(flow_id, bool) or not isinstance(flow_id, int) or flow_id not in self._flows:
            raise InvalidInput("flow_id", f"unknown flow id {flow_id!r}")
        old = self._flows[flow_id]
        self._unindex(old)
        for table in (self._computed, self._demand, self._installed, self._installed_rate):
            table.pop(flow_id, None)
        return self._reallocate(*self._component({old.receiver}, {old.sender}), now_ns)

    def recompute(self, now_ns: int) -> dict[int, Grant]:
        """Reallocate every flow at ``now_ns`` (time has passed: demands changed).

        Why the single-bottleneck invariant holds (flows on one link, no other constraint, the
        allocation recomputed at least whenever a flow finishes): suppose flow k ends late by
        L > 0 and let [s, e) be the last recompute interval before k's finish in which a flow
        with a later deadline than k got a positive rate. In that interval every flow with
        deadline <= d_k was served at least at its no-bubble rate (phase 1 serves in deadline
        order and a late flow would take the whole link), so at e their remaining bits fit in
        ``usable * (d_k - e)``; after e the link serves only them, at full rate (work
        conservation), so k finishes by d_k: contradiction. Hence no such interval exists, the
        link served only flows with deadline <= d_k from 0 to k's finish, and EDF cannot finish
        the last of them earlier: our maximum lateness <= EDF's; if EDF is feasible, no flow is
        late. Integer rounding adds at most a few ns per recompute.

        Returns:
            Installed grants that changed, by flow id.
        """
        self._check_now(now_ns)
        return self._reallocate(set(self._flows), set(self._recv_usable), set(self._send_usable), now_ns)

    def grants(self) -> dict[int, Grant]:
        """Installed grants, by flow id."""
        return {fid: self._installed[fid] for fid in sorted(self._installed)}

    def computed_rates(self) -> dict[int, int]:
        """Safe scheduled rates of the last allocation (before the re-send rule), bit/s."""
        return {fid: self._computed[fid] for fid in sorted(self._computed)}

    def demands(self) -> dict[int, int]:
        """No-bubble rate demands (with safety margin) of the last allocation, bit/s.

        Background flows have demand 0 (they only take capacity that pipeline flows leave).
        """
        return {fid: self._demand[fid] for fid in sorted(self._demand)}

    def slack_class_table(self) -> list[SlackClassRange]:
        """Slack class ranges for the configured thresholds (see :func:`slack_class_table`)."""
        return slack_class_table(self._cfg.slack_thresholds_ns, self._cfg.late_transfers)

    def key_ranges(self) -> list[SlackKeyRange]:
        """Unsigned 48-bit key ranges of :meth:`slack_class_table` (see :func:`key_ranges`)."""
        return key_ranges(self.slack_class_table())

    # ----------------------------------------------------------------- validation

    @staticmethod
    def _check_now(now_ns: int) -> None:
        _check_int("now_ns", now_ns, 0, TIME_MASK)

    @staticmethod
    def _check_name(field: str, name: object, known: Mapping[str, int]) -> None:
        if not isinstance(name, str) or name not in known:
            shown = ", ".join(sorted(known)[:8]) + (", ..." if len(known) > 8 else "")
            raise InvalidInput(field, f"unknown host {name!r}; known: {shown}")

    def _check_flow(self, flow: AllocFlow, prefix: str) -> None:
        if not isinstance(flow, AllocFlow):
            raise InvalidInput(prefix, f"must be an AllocFlow, got {type(flow).__name__}")
        _check_int(f"{prefix}.flow_id", flow.flow_id, protocol.FLOW_ID_MIN, protocol.FLOW_ID_MAX)
        self._check_name(f"{prefix}.sender", flow.sender, self._send_usable)
        self._check_name(f"{prefix}.receiver", flow.receiver, self._recv_usable)
        _check_int(f"{prefix}.remaining_bytes", flow.remaining_bytes, 1, protocol.REMAINING_BYTES_MAX)
        _check_int(f"{prefix}.deadline_ns", flow.deadline_ns, 0, TIME_MASK)
        if not isinstance(flow.background, bool):
            raise InvalidInput(f"{prefix}.background", f"must be a bool, got {flow.background!r}")

    # ----------------------------------------------------------------- internals

    def _index(self, flow: AllocFlow) -> None:
        fid = flow.flow_id
        self._flows[fid] = flow
        self._by_receiver[flow.receiver].add(fid)
        self._by_sender[flow.sender].add(fid)
        peers = self._peers_of_receiver[flow.receiver]
        peers[flow.sender] = peers.get(flow.sender, 0) + 1
        peers = self._peers_of_sender[flow.sender]
        peers[flow.receiver] = peers.get(flow.receiver, 0) + 1
        tx_ns = -(-flow.remaining_bytes * 8 * NS_PER_S // self._cfg.line_rate_bps)
        self._consts[fid] = (
            flow.deadline_ns,
            tx_ns,
            flow.remaining_bytes * self._margin_scale,
            flow.receiver,
            flow.sender,
            flow.background,
        )

    def _unindex(self, flow: AllocFlow) -> None:
        fid = flow.flow_id
        del self._flows[fid], self._consts[fid]
        self._by_receiver[flow.receiver].discard(fid)
        self._by_sender[flow.sender].discard(fid)
        for peers, other in (
            (self._peers_of_receiver[flow.receiver], flow.sender),
            (self._peers_of_sender[flow.sender], flow.receiver),
        ):
            if peers[other] == 1:
                del peers[other]
            else:
                peers[other] -= 1

    def _component(self, receivers: set[str], senders: set[str]) -> tuple[set[int], set[str], set[str]]:
        """Flows, receivers and senders connected (through shared resources) to the given ones.

        Searches the host graph (one edge per sender-receiver pair with flows), then collects
        the flows of the receivers found: cost is hosts + flows of the component.
        """
        seen_r: set[str] = set()
        seen_s: set[str] = set()
        todo_r, todo_s = list(receivers), list(senders)
        while todo_r or todo_s:
            while todo_r:
                r = todo_r.pop()
                if r not in seen_r:
                    seen_r.add(r)
                    todo_s.extend(self._peers_of_receiver[r])
            while todo_s:
                s = todo_s.pop()
                if s not in seen_s:
                    seen_s.add(s)
                    todo_r.extend(self._peers_of_sender[s])
        flow_ids: set[int] = set()
        for r in seen_r:
            flow_ids |= self._by_receiver[r]
        return flow_ids, seen_r, seen_s

    def _allocate(
        self, flow_ids: set[int], receivers: set[str], senders: set[str], now_ns: int
    ) -> tuple[dict[int, int], dict[int, int]]:
        """The three-phase greedy (module docstring) over a closed set of flows and resources.

        Returns:
            (computed rate, demand) per flow id, bit/s.
        """
        by_deadline = self._cfg.urgency == "deadline"
        quantum = self._cfg.urgency_quantum_ns
        consts = self._consts
        mod = TIME_MASK + 1
        order = []
        for fid in flow_ids:
            c = consts[fid]
            left_ns = (c[0] - now_ns) & TIME_MASK  # timebase.diff, inlined for speed
            if left_ns >= HALF:
                left_ns -= mod
            if by_deadline:
                order.append((left_ns, left_ns - c[1], fid, left_ns, c))
            else:
                order.append((left_ns - c[1], left_ns, fid, left_ns, c))
        order.sort()

        recv_usable, send_usable = self._recv_usable, self._send_usable
        res_r = {r: recv_usable[r] for r in receivers}
        res_s = {s: send_usable[s] for s in senders}
        rate: dict[int, int] = {}
        demand: dict[int, int] = {}
        pipeline = []  # (fid, receiver, sender, urgency bucket, weight = scaled remaining bytes)
        background = []
        for _, _, fid, left_ns, c in order:
            _, _, scaled, r, s, is_background = c
            rate[fid] = 0
            if is_background:
                background.append((fid, r, s, 0, scaled))
                demand[fid] = 0
                continue
            pipeline.append((fid, r, s, left_ns // quantum, scaled))
            if left_ns <= 0:  # late: demand the most the path can carry
                ur, us = recv_usable[r], send_usable[s]
                demand[fid] = ur if ur < us else us
            else:
                demand[fid] = -(-scaled // (left_ns * PPM))
        # Phase 1: pipeline flows get their no-bubble rate demand, most urgent first.
        _fill(pipeline, demand, rate, res_r, res_s)
        # Phase 2: background SAFS flows get what pipeline flows do not need.
        _fill([(fid, r, s, i, w) for i, (fid, r, s, _, w) in enumerate(background)], None, rate, res_r, res_s)
        # Phase 3: leftover to pipeline flows, most urgent first (work conservation).
        _fill(pipeline, None, rate, res_r, res_s)
        return rate, demand

    def _reallocate(self, flow_ids: set[int], receivers: set[str], senders: set[str], now_ns: int) -> dict[int, Grant]:
        """Recompute the given closed set of flows/resources and apply the re-send rule."""
        rate, demand = self._allocate(flow_ids, receivers, senders, now_ns)
        self._computed.update(rate)
        self._demand.update(demand)
        return self._install(flow_ids, rate, demand, receivers, senders)

    def _install(
        self,
        flow_ids: set[int],
        rate: dict[int, int],
        demand: dict[int, int],
        receivers: set[str],
        senders: set[str],
    ) -> dict[int, Grant]:
        """Apply the re-send rule (module docstring, (a)-(d)); return changed grants by flow id."""
        installed_rate = self._installed_rate
        resend_ppm = self._resend_ppm
        flows, consts = self._flows, self._consts
        target: dict[int, int] = {}
        sum_r = dict.fromkeys(receivers, 0)
        sum_s = dict.fromkeys(senders, 0)
        margin_ppm = PPM + round(self._cfg.safety_margin * PPM)
        for fid in flow_ids:
            new = rate[fid]
            old = installed_rate.get(fid)
            # (c) compares with the no-bubble rate itself (demand without the safety margin):
            # the margin is the hysteresis that keeps a slowly rising demand from re-sending
            # a grant at every recomputation.
            if (
                old is None
                or (abs(new - old) * PPM > resend_ppm * old)
                or (new > old and old * margin_ppm < demand[fid] * PPM)
            ):
                old = new
            target[fid] = old
            c = consts[fid]
            sum_r[c[3]] += old
            sum_s[c[4]] += old
        # (d) a decrease needed to stay within capacity. Lowering only ever reduces sums, so
        # one pass over receivers, then senders, leaves every resource within usable capacity.
        for sums, usable, index in (
            (sum_r, self._recv_usable, self._by_receiver),
            (sum_s, self._send_usable, self._by_sender),
        ):
            for name, total in sums.items():
                if total > usable[name]:
                    for fid in index[name]:
                        if target[fid] > rate[fid]:
                            f = flows[fid]
                            sum_r[f.receiver] -= target[fid] - rate[fid]
                            sum_s[f.sender] -= target[fid] - rate[fid]
                            target[fid] = rate[fid]
        lease = self._cfg.lease_ns
        installed = self._installed
        changed: dict[int, Grant] = {}
        for fid in sorted(fid for fid in flow_ids if installed_rate.get(fid) != target[fid]):
            grant = installed.get(fid)
            epoch = 1 if grant is None else grant.epoch + 1
            installed[fid] = changed[fid] = Grant(fid, target[fid], epoch, lease)
            installed_rate[fid] = target[fid]
        return changed

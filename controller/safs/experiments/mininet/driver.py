"""The real-time run driver: a workload's :class:`~safs.experiments.workloads.api.WorkloadAPI` in wall-clock
time over host agents (docs/mininet.md, "Driver").

::

    workload --now/call_at/start_flow--> RealtimeNetwork --JSON lines--> agent(receiver): expect
                                          (one thread)    --JSON lines--> agent(sender):   send
    on_done(finish) <-- done events <-- pushed at once ---- agent(receiver): watch stream
                                        (or polled every poll_s from agents without ``watch``)

Time: the workload sees ns since the run began (``now() == 0`` at :meth:`RealtimeNetwork.run`),
as the simulator shows it ns since its start. Agents and switches use fabric time
(:func:`safs.core.timebase.fabric_clock`, the host's wall clock in ns modulo 2^48): a
workload time ``t`` is fabric time ``wrap(t0 + t)``, where ``t0`` is ``time.time_ns()`` at the
start; agents' fabric times are mapped back by signed 48-bit difference (``safs.core.timebase``).

Transports: under policy ``"safs"`` pipeline flows use the agents' ``safs`` transport (hint API
announce, REQUEST/GRANT, paced DATA); everything else (policy ``"dctcp"``, background flows
under every policy, as in the simulator) uses ``tcp``. The receiver is told first
(``expect``; for TCP it answers the port it listens on), then the sender (``send``) with the
data start ``send_at_ns``; the FCT counts from ``send_at_ns`` to the receiver's ``done``
event (docs/mininet.md, "Host agent").

Done events: agents that offer ``watch`` (:class:`safs.experiments.mininet.agent_control.AgentClient`) push every
event on a second connection the moment it happens, and the loop waits on those connections
until its next timer (``select``): no polling, and a finished flow's ``on_done`` runs within
the loop's wake-up time. Polling every 1 ms instead cost the run's process about a core's
fifth in JSON round trips, time the controller thread (same process, one GIL) then lacked
(docs/mininet.md). Agents without ``watch`` (test fakes) are polled every ``poll_s``.

Callbacks (``call_at`` functions, ``on_done``) run on the thread that called :meth:`run`, in
time order, never concurrently; a callback that runs late (the loop was busy) runs as soon as
possible and sees the real ``now()``. Lateness of timers is measured (``timer_late_max_ns``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import selectors
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from safs.core.errors import InvalidInput
from safs.core.timebase import diff, wrap
from safs.experiments.metrics import FlowRecord
from safs.experiments.policies import POLICIES, mininet_policies
from safs.experiments.workloads.api import FlowSpec

log = logging.getLogger(__name__)

IDLE_WAKE_NS = 50_000_000  # with every agent watched: longest wait without a timer (max_time check)


class AgentPort(Protocol):
    """One host agent's control connection (:class:`safs.experiments.mininet.agent_control.AgentClient`): send one
    request, get its reply.

    ``request({"op": ..., ...})`` returns the ``{"ok": true, ...}`` reply and raises
    :class:`safs.core.errors.InvalidInput` (the agent named a field) or
    :class:`safs.experiments.mininet.agent_control.AgentError` (other refusals, broken connection).
    """

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        ...


@dataclass
class _Flow:
    flow_id: int
    spec: FlowSpec
    start_ns: int
    on_done: Callable[[int], None]
    transport: str
    finish_ns: int | None = None


@dataclass
class DriverStats:
    """Counters of a run.

    Attributes:
        flows_started: flows handed to agents.
        callbacks: workload callbacks run (timers and ``on_done``).
        timer_late_max_ns: largest delay of a timer callback behind its due time, ns.
        polls: event polls of agents.
        run_time_ns: wall time the run loop ran, ns.
    """

    flows_started: int = 0
    callbacks: int = 0
    timer_late_max_ns: int = 0
    polls: int = 0
    run_time_ns: int = 0


@dataclass
class RealtimeNetwork:
    """:class:`~safs.experiments.workloads.api.WorkloadAPI` in wall-clock time over host agents.

    Args:
        agents: host name -> its :class:`AgentPort`; every host a flow uses must be here.
        host_ips: host name -> dotted IPv4 address.
        policy: ``"safs"`` or ``"dctcp"`` (module docstring).
        clock: ``time.time_ns``-like wall clock, ns (the fabric clock before the 2^48 wrap).
        sleep: ``time.sleep``-like function (tests pass fakes with the clock).
        poll_s: period of event polls of agents without ``watch``, s (> 0). Default 1 ms.
        dep_ids: (sender, dependency name) -> SAFS dependency id of the dependencies announced
            at launch (:meth:`declare`); a transfer of another dependency gets the sender's next
            id (the receiver's ToR digests its first REQUEST).

    Attributes (after a run):
        stats: :class:`DriverStats`.
        sender_events: flow id -> the sender agent's done event (fabric ``start_ns`` and
            ``finish_ns``; for SAFS ``requests``, ``grants``, ``data_packets``,
            ``retransmitted_bytes``, ``fallbacks``); complete after :meth:`drain`.
        errors: error events agents reported (a TCP connection that failed), with ``host``.

    Raises:
        InvalidInput: unknown policy, or ``poll_s`` <= 0.
    """

    agents: Mapping[str, AgentPort]
    host_ips: Mapping[str, str]
    policy: str
    clock: Callable[[], int] = time.time_ns
    sleep: Callable[[float], None] = time.sleep
    poll_s: float = 0.001
    stats: DriverStats = field(default_factory=DriverStats)
    _t0: int = 0
    _timers: list = field(default_factory=list)
    _seq: Any = field(default_factory=itertools.count)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _flows: dict[int, _Flow] = field(default_factory=dict)
    _pending: dict[int, _Flow] = field(default_factory=dict)
    sender_events: dict[int, dict[str, Any]] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    _streams: dict[str, Any] = field(default_factory=dict)  # host -> EventStream (watched agents)
    _selector: Any = field(default_factory=selectors.DefaultSelector)
    dep_ids: dict[tuple[str, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        transport = POLICIES[self.policy].mininet_transport if self.policy in POLICIES else None
        if transport is None:
            raise InvalidInput("policy",
                               f"the mininet target runs {', '.join(mininet_policies())}, got {self.policy!r}")
        self.pipeline_transport = transport
        self.per_transfer = POLICIES[self.policy].per_transfer
        if not self.poll_s > 0:
            raise InvalidInput("poll_s", f"must be > 0 s, got {self.poll_s!r}")
        self._t0 = self.clock()

    # ------------------------------------------------------------------ WorkloadAPI

    def now(self) -> int:
        """ns since the run began."""
        return self.clock() - self._t0

    def fabric(self, t_ns: int) -> int:
        """Fabric time (48-bit) of workload time ``t_ns``."""
        return wrap(self._t0 + t_ns)

    def from_fabric(self, fabric_ns: int) -> int:
        """Workload time of a fabric time an agent reported (nearest in signed 48-bit terms)."""
        now = self.now()
        return now + diff(fabric_ns, self.fabric(now))

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None:
        """Run ``fn()`` at workload time ``t_ns`` (a past time: as soon as possible)."""
        heapq.heappush(self._timers, (t_ns, next(self._seq), fn))

    def declare(self, sender: str, name: str) -> int:
        """The dependency id of ``sender``'s dependency ``name`` (the next free one when new)."""
        key = (sender, name)
        if key not in self.dep_ids:
            self.dep_ids[key] = 1 + sum(1 for s, _ in self.dep_ids if s == sender)
        return self.dep_ids[key]

    def start_flow(self, spec: FlowSpec, on_done: Callable[[int], None], send_at_ns: int | None = None) -> int:
        """Tell the receiver's agent to expect the flow, then the sender's to send it at
        ``send_at_ns`` (None: now); ``on_done(finish_ns)`` runs when the receiver reports the
        last byte. Returns the flow id (1, 2, ...).

        Raises:
            InvalidInput: a host without an agent or address (field ``flow.sender`` /
                ``flow.receiver``), or ``send_at_ns`` before now by more than 1 s.
            AgentError: an agent refused the flow.
        """
        for role, host in (("sender", spec.sender), ("receiver", spec.receiver)):
            if host not in self.agents or host not in self.host_ips:
                raise InvalidInput(f"flow.{role}", f"host {host!r} has no agent in this network")
        now = self.now()
        start = now if send_at_ns is None else send_at_ns
        flow_id = next(self._ids)
        transport = self.pipeline_transport if spec.flow_class == "pipeline" else "tcp"
        flow = _Flow(flow_id, spec, start, on_done, transport)
        no_bubble = None if spec.no_bubble_ts_ns is None else self.fabric(spec.no_bubble_ts_ns)
        reply = self.agents[spec.receiver].request(
            {
                "op": "expect",
                "flow_id": flow_id,
                "src_ip": self.host_ips[spec.sender],
                "size_bytes": spec.size_bytes,
                "transport": transport,
                "no_bubble_ts_ns": no_bubble,
                "firm": spec.firm,
            }
        )
        send = {
            "op": "send",
            "flow_id": flow_id,
            "dst_ip": self.host_ips[spec.receiver],
            "size_bytes": spec.size_bytes,
            "transport": transport,
            "flow_class": spec.flow_class,
            "no_bubble_ts_ns": no_bubble,
            "send_at_ns": self.fabric(start),
            "label": spec.label,
            "dst_host": spec.receiver,
            "firm": spec.firm,
        }
        if reply.get("port") is not None:
            send["port"] = int(reply["port"])
        if transport == "safs" and not self.per_transfer:
            send["dep_id"] = self.declare(spec.sender, spec.dependency_key())
        self.agents[spec.sender].request(send)
        self._flows[flow_id] = flow
        self._pending[flow_id] = flow
        self.stats.flows_started += 1
        return flow_id

    # ------------------------------------------------------------------ the loop

    def _ask(self, hosts: list[str], message: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Send ``message`` to every agent of ``hosts`` and return their replies by host. Agents
        with ``submit``/``reply`` (:class:`safs.experiments.mininet.agent_control.AgentClient`) are asked all at once
        and answer in parallel, so a poll costs about one round trip, not one per agent."""
        split = [h for h in hosts if hasattr(self.agents[h], "submit")]
        for h in split:
            self.agents[h].submit(message)  # type: ignore[attr-defined]
        replies = {}
        for h in hosts:
            agent: Any = self.agents[h]
            replies[h] = agent.reply() if h in split else agent.request(message)
        return replies

    def poll(self, hosts: list[str] | None = None) -> int:
        """Collect events from the agents that receive a pending flow and are not watched (or
        from ``hosts``) and run ``on_done`` of flows that finished; returns how many finished.
        Sender-side done events are kept in :attr:`sender_events` (per-flow SAFS counters),
        error events (a failed TCP connection) in :attr:`errors` and logged."""
        self.stats.polls += 1
        if hosts is None:
            hosts = sorted({f.spec.receiver for f in self._pending.values()} - set(self._streams))
        return sum(
            self._handle(host, reply.get("events", [])) for host, reply in self._ask(hosts, {"op": "events"}).items()
        )

    def _handle(self, host: str, events: list[dict[str, Any]]) -> int:
        finished = 0
        for ev in events:
            if ev.get("event") == "error":
                self.errors.append({"host": host, **ev})
                log.warning("%s: flow %s: %s", host, ev.get("flow_id"), ev.get("message"))
                continue
            if ev.get("event") != "done":
                continue
            if ev.get("role") == "sender":
                self.sender_events[int(ev["flow_id"])] = ev
                continue
            flow = self._pending.pop(int(ev["flow_id"]), None)
            if flow is None:
                continue  # not ours, or reported twice
            flow.finish_ns = self.from_fabric(int(ev["finish_ns"]))
            finished += 1
            self.stats.callbacks += 1
            flow.on_done(flow.finish_ns)
        return finished

    def _watch(self) -> None:
        """Open the event stream of every agent that offers one (module docstring)."""
        for host, agent in sorted(self.agents.items()):
            if hasattr(agent, "watch") and host not in self._streams:
                stream = agent.watch()  # type: ignore[attr-defined]
                self._streams[host] = stream
                self._selector.register(stream, selectors.EVENT_READ, host)

    def _wait(self, timeout_s: float) -> int:
        """Sleep up to ``timeout_s``, or until a watched agent pushes events (then handle
        them); returns how many flows finished."""
        if not self._streams:
            self.sleep(timeout_s)
            return 0
        return sum(
            self._handle(key.data, self._streams[key.data].read()) for key, _ in self._selector.select(timeout_s)
        )

    def drain(self) -> None:
        """Poll every agent once more (after :meth:`run`), so :attr:`sender_events` and
        :attr:`errors` hold what the agents reported until now, then close the event streams.
        (An agent answers ``events`` after writing every event it pushed before, so the
        streams hold them all by then.)"""
        self.poll(sorted(self.agents))
        for host, stream in self._streams.items():
            self._handle(host, stream.read())
            self._selector.unregister(stream)
            stream.close()
        self._streams.clear()

    def run(self, workload: Any, max_time_ns: int) -> None:
        """Start ``workload`` and serve timers and done events until ``workload.done()`` or
        ``max_time_ns`` of workload time passed (flows in flight then stay unfinished).

        Raises:
            InvalidInput: ``max_time_ns`` < 1.
            AgentError: an agent refused a request or went away.
        """
        if max_time_ns < 1:
            raise InvalidInput("max_time_ns", f"must be >= 1 ns, got {max_time_ns}")
        began = self.clock()
        self._t0 = began
        self._watch()
        workload.start(self)
        next_poll = 0
        try:
            while not workload.done():
                now = self.now()
                if now >= max_time_ns:
                    log.info("max time %.3g s reached with %d flows in flight", max_time_ns / 1e9, len(self._pending))
                    break
                while self._timers and self._timers[0][0] <= now:
                    due, _, fn = heapq.heappop(self._timers)
                    self.stats.timer_late_max_ns = max(self.stats.timer_late_max_ns, now - due)
                    self.stats.callbacks += 1
                    fn()
                    if workload.done():
                        return
                    now = self.now()
                if now >= next_poll:
                    if len(self._streams) < len(self.agents):
                        self.poll()
                        next_poll = self.now() + int(self.poll_s * 1e9)
                    else:  # every agent pushes: wake for timers (and max_time) only
                        next_poll = self.now() + IDLE_WAKE_NS
                    continue
                wake = next_poll
                if self._timers:
                    wake = min(wake, self._timers[0][0])
                wait = (wake - self.now()) / 1e9
                if wait > 0:
                    self._wait(wait)
        finally:
            self.stats.run_time_ns = self.clock() - began

    def records(self) -> list[FlowRecord]:
        """One :class:`FlowRecord` per flow started (workload times; unfinished: ``finish_ns`` None)."""
        return [
            FlowRecord(
                f.flow_id,
                f.spec.label,
                f.spec.flow_class,
                f.spec.sender,
                f.spec.receiver,
                f.spec.size_bytes,
                f.start_ns,
                f.finish_ns,
                f.spec.no_bubble_ts_ns,
            )
            for f in self._flows.values()
        ]

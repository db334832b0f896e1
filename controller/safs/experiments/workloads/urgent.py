"""Urgent-flow microbenchmark: a tight-deadline incast on one receiver link, repeated in rounds.

The SAFS paper's third experiment reports zero urgent deadline misses and a mean urgent FCT
of 14.3 ms under its own setup, which it does not publish; this is our definition of that
experiment (docs/workloads.md, "Urgent-flow microbenchmark").

Setup. One receiver ``r0``; its ToR downlink is the only bottleneck (a single non-blocking
ToR, all access links at the same rate). Every round ``r`` (``rounds`` of them, one every
``round_period_us``, the first ``warmup_us`` after the start so persistent background flows
have ramped up):

* **Urgent incast**: ``incast_degree`` senders ``u0..u{N-1}`` each send one flow to ``r0``
  of ``U(urgent_min_bytes, urgent_max_bytes)`` bytes, first byte at ``base_r + U(0,
  jitter_us)``. A flow is *urgent* because its no-bubble timestamp leaves little slack:
  ``no_bubble_ts = send_at + slack_factor * T_incast``, where ``T_incast`` is the
  uncontended time of the round's *whole* incast (the sum of its bytes,
  :meth:`Topology.min_transfer_ns`): the receiver's consumer needs all of them, and no
  network delivers the last of them before ``T_incast``. With ``slack_factor`` close to 1
  the incast meets its timestamps only if it gets nearly the whole link (``1 /
  slack_factor`` of it) ahead of everything else.
* **Loose pipeline flows**: ``loose_flows`` senders ``p0..p{M-1}`` each send a
  ``loose_bytes`` pipeline flow to ``r0`` at ``base_r + U(0, jitter_us)``, with
  ``no_bubble_ts = send_at + loose_slack_factor * T_round`` (``T_round`` the uncontended time
  of all the round's pipeline bytes, urgent and loose): they are on a pipeline too, but not on
  its critical path right now.
* **Background** comes from the scenario's ``background:`` section (persistent bulk flows and
  Poisson arrivals from the ``bg*`` hosts to ``r0``; :mod:`safs.experiments.workloads.background`).

Every flow is announced ``announce_lead_us`` before its first byte (``send_at_ns``), as a
runtime that knows its next transfer when the producing op starts.

Feasibility: within a round the urgent flows alone are EDF-feasible for any ``slack_factor``
>= 1 (for any interval ``[a, d]``, the urgent bytes arriving after ``a`` with timestamp <= ``d``
take at most ``T_incast <= d - a``); a scheduler that serves them ahead of the loose and
background traffic meets every urgent timestamp, as long as rounds do not overlap
(``round_period_us`` comfortably above ``T_round``, checked at build time).

Seeded: sizes and send times are drawn from ``random.Random("urgent:<seed>")``, so seeds and
repetitions differ while one seed replays exactly.

Metrics (:meth:`UrgentIncast.metrics`): ``urgent_flows``, ``urgent_deadline_misses``
(finished more than :data:`safs.experiments.metrics.MISS_TOLERANCE_NS` after the no-bubble timestamp,
or unfinished), ``urgent_unfinished``, ``urgent_fct_mean_ms``, ``urgent_fct_p99_ms``,
``urgent_late_p99_ms``, and ``loose_flows``, ``loose_deadline_misses``,
``loose_fct_mean_ms`` for the loose pipeline flows. The runner's ``pipeline_*`` keys count
urgent and loose flows together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from safs.core.errors import InvalidInput
from safs.experiments.metrics import FlowRecord, flow_metrics
from safs.experiments.workloads.api import DependencySpec, FlowSpec, WorkloadAPI
from safs.experiments.workloads.params import check_known, int_param

NS_PER_US = 1_000
RECEIVER = "r0"
MAX_BYTES = 1 << 32  # 4 GiB per flow: far beyond what a packet-level run can carry


def _number(params: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    """``params[key]`` (or ``default``) as a number in ``[lo, hi]`` inclusive."""
    v = params.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise InvalidInput(f"workload.params.{key}", f"must be a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


@dataclass
class _Sent:
    """A flow as announced: absolute times (ns), ``finish_ns`` None until its last byte arrives."""

    spec: FlowSpec
    start_ns: int
    finish_ns: int | None = None


class UrgentIncast:
    """The urgent-flow microbenchmark (see module docstring).

    Params (defaults): ``incast_degree`` 8 (1..64, senders ``u0..``), ``urgent_min_bytes``
    1_000_000 and ``urgent_max_bytes`` 4_000_000 (bytes, 1..2^32, min <= max),
    ``slack_factor`` 1.3 ([1, 100]), ``loose_flows`` 2 (0..64, senders ``p0..``),
    ``loose_bytes`` 4_000_000 (1..2^32), ``loose_slack_factor`` 4.0 ([1, 1000]), ``rounds`` 10
    (1..10000), ``round_period_us`` 4000 (> 0), ``jitter_us`` 100 ([0, round_period_us)),
    ``warmup_us`` 200 (>= 0), ``announce_lead_us`` 50 (>= 0).

    Args:
        params: the scenario's ``workload.params``.
        topology: a :class:`safs.core.topology.Topology` with hosts ``r0``, ``u0..u{N-1}`` and
            ``p0..p{M-1}``; None only on :class:`~safs.experiments.workloads.ideal.IdealNetwork` without
            a topology (then ``T_incast`` is the serialisation time at ``rate_bps``).
        seed: seeds the sizes and send times (the runner passes ``seed * 1000 + repetition``).
        rate_bps: link rate used when ``topology`` is None (bit/s).

    Raises:
        InvalidInput: an unknown or out-of-range parameter (field ``workload.params.<key>``,
            message with the allowed range), a host missing from the topology, or rounds that
            would overlap (``round_period_us`` not above ``T_round`` of the largest round).
    """

    KNOWN = {"incast_degree", "urgent_min_bytes", "urgent_max_bytes", "slack_factor", "loose_flows",
             "loose_bytes", "loose_slack_factor", "rounds", "round_period_us", "jitter_us", "warmup_us",
             "announce_lead_us"}

    def __init__(self, params: dict[str, Any], topology: Any = None, seed: int = 1,
                 rate_bps: int = 100_000_000_000) -> None:
        check_known(params, self.KNOWN)
        self.n_urgent = int_param(params, "incast_degree", 8, 1, 64)
        self.urgent_min = int_param(params, "urgent_min_bytes", 1_000_000, 1, MAX_BYTES)
        self.urgent_max = int_param(params, "urgent_max_bytes", 4_000_000, 1, MAX_BYTES)
        if self.urgent_max < self.urgent_min:
            raise InvalidInput("workload.params.urgent_max_bytes",
                               f"must be >= urgent_min_bytes ({self.urgent_min}), got {self.urgent_max}")
        self.slack_factor = _number(params, "slack_factor", 1.3, 1.0, 100.0)
        self.n_loose = int_param(params, "loose_flows", 2, 0, 64)
        self.loose_bytes = int_param(params, "loose_bytes", 4_000_000, 1, MAX_BYTES)
        self.loose_slack_factor = _number(params, "loose_slack_factor", 4.0, 1.0, 1000.0)
        self.rounds = int_param(params, "rounds", 10, 1, 10_000)
        self.period_ns = round(_number(params, "round_period_us", 4000.0, 1e-3, 1e9) * NS_PER_US)
        self.jitter_ns = round(_number(params, "jitter_us", 100.0, 0.0, 1e9) * NS_PER_US)
        if self.jitter_ns >= self.period_ns:
            raise InvalidInput("workload.params.jitter_us",
                               f"must be below round_period_us ({self.period_ns / NS_PER_US:g}), "
                               f"got {self.jitter_ns / NS_PER_US:g}")
        self.warmup_ns = round(_number(params, "warmup_us", 200.0, 0.0, 1e9) * NS_PER_US)
        self.lead_ns = round(_number(params, "announce_lead_us", 50.0, 0.0, 1e9) * NS_PER_US)
        self.urgent_senders = [f"u{i}" for i in range(self.n_urgent)]
        self.loose_senders = [f"p{i}" for i in range(self.n_loose)]
        self.topology = topology
        self.rate_bps = rate_bps
        if topology is not None:
            for h in [RECEIVER] + self.urgent_senders + self.loose_senders:
                if not topology.is_host(h):
                    raise InvalidInput("workload.params", f"topology {topology.name!r} has no host {h!r} (needs "
                                       f"{RECEIVER}, u0..u{self.n_urgent - 1}"
                                       + (f", p0..p{self.n_loose - 1})" if self.n_loose else ")"))
        worst_round = self._transfer_ns(self.n_urgent * self.urgent_max + self.n_loose * self.loose_bytes)
        if self.period_ns <= worst_round + self.jitter_ns:
            raise InvalidInput("workload.params.round_period_us",
                               f"must exceed jitter_us plus the uncontended time of the largest round "
                               f"({(worst_round + self.jitter_ns) / NS_PER_US:.1f} us), so rounds do not "
                               f"overlap; got {self.period_ns / NS_PER_US:g}")
        self.seed = seed
        self.plan = self._plan(random.Random(f"urgent:{seed}"))
        self.sent: dict[int, _Sent] = {}  # plan index -> the flow as announced
        self.finished = 0
        self._t0 = 0

    def _transfer_ns(self, size_bytes: int) -> int:
        """Uncontended time of ``size_bytes`` into ``r0`` (ns)."""
        if self.topology is not None:
            sender = self.urgent_senders[0]
            return self.topology.min_transfer_ns(sender, RECEIVER, size_bytes)
        return -(-size_bytes * 8 * 1_000_000_000 // self.rate_bps)

    def _plan(self, rng: random.Random) -> list[tuple[int, FlowSpec]]:
        """Every flow of the run: ``(send offset from start in ns, FlowSpec)`` in send order."""
        plan = []
        for r in range(self.rounds):
            base = self.warmup_ns + r * self.period_ns
            sizes = [rng.randint(self.urgent_min, self.urgent_max) for _ in self.urgent_senders]
            t_incast = self._transfer_ns(sum(sizes))
            t_round = self._transfer_ns(sum(sizes) + self.n_loose * self.loose_bytes)
            for sender, size in zip(self.urgent_senders, sizes):
                send = base + rng.randint(0, self.jitter_ns)
                deadline = send + round(self.slack_factor * t_incast)
                plan.append((send, FlowSpec(sender, RECEIVER, size, deadline, f"urgent r{r} {sender}->{RECEIVER}")))
            for sender in self.loose_senders:
                send = base + rng.randint(0, self.jitter_ns)
                deadline = send + round(self.loose_slack_factor * t_round)
                plan.append((send, FlowSpec(sender, RECEIVER, self.loose_bytes, deadline,
                                            f"loose r{r} {sender}->{RECEIVER}")))
        plan.sort(key=lambda item: item[0])
        return plan

    def receivers(self) -> list[str]:
        """The bottleneck receiver (where background traffic is aimed)."""
        return [RECEIVER]

    def start(self, api: WorkloadAPI) -> None:
        """Announce every flow ``announce_lead_us`` before its send time (times relative to now)."""
        self._t0 = t0 = api.now()
        for i, (offset, _spec) in enumerate(self.plan):
            send = t0 + offset
            api.call_at(max(t0, send - self.lead_ns), lambda i=i, send=send: self._announce(api, i, send))

    def _announce(self, api: WorkloadAPI, i: int, send: int) -> None:
        planned = self.plan[i][1]  # its no-bubble timestamp is relative to the start
        spec = FlowSpec(planned.sender, planned.receiver, planned.size_bytes,
                        self._t0 + planned.no_bubble_ts_ns, planned.label)
        sent = _Sent(spec, send)
        self.sent[i] = sent
        api.start_flow(spec, lambda t: self._done(sent, t), send_at_ns=send)

    def _done(self, sent: _Sent, finish_ns: int) -> None:
        sent.finish_ns = finish_ns
        self.finished += 1

    def done(self) -> bool:
        return self.finished >= len(self.plan)

    def flow_records(self, label_prefix: str) -> list[FlowRecord]:
        """The run's flows whose label starts with ``label_prefix`` (``"urgent"``, ``"loose"``)
        as :class:`FlowRecord` (flow id = position in the plan; flows not yet announced count
        as unfinished, with times relative to the start)."""
        out = []
        for i, (offset, planned) in enumerate(self.plan):
            if planned.label.startswith(label_prefix):
                sent = self.sent.get(i, _Sent(planned, offset))
                s = sent.spec
                out.append(FlowRecord(i, s.label, "pipeline", s.sender, s.receiver, s.size_bytes,
                                      sent.start_ns, sent.finish_ns, s.no_bubble_ts_ns))
        return out

    def dependencies(self) -> list[DependencySpec]:
        """One per sender of the plan (all send to the one receiver)."""
        return [DependencySpec.of(s, r) for s, r in dict.fromkeys((p.sender, p.receiver) for _, p in self.plan)]

    def warmup_end_ns(self) -> int | None:
        """No warm-up: every round counts."""
        return None

    def samples(self) -> dict[str, list[float]]:
        """``urgent_fct_ms``: FCT of each finished urgent flow (ms)."""
        return {"urgent_fct_ms": [r.fct_ns / 1e6 for r in self.flow_records("urgent") if r.fct_ns is not None]}

    def metrics(self) -> dict[str, float]:
        urgent = flow_metrics(self.flow_records("urgent"))
        loose = flow_metrics(self.flow_records("loose"))
        return {
            "urgent_flows": float(urgent["pipeline_flows"]),
            "urgent_deadline_misses": float(urgent["pipeline_deadline_misses"]),
            "urgent_unfinished": float(urgent["pipeline_unfinished"]),
            "urgent_fct_mean_ms": urgent["pipeline_fct_mean_ms"],
            "urgent_fct_p99_ms": urgent["pipeline_fct_p99_ms"],
            "urgent_late_p99_ms": urgent["pipeline_late_p99_ms"],
            "loose_flows": float(loose["pipeline_flows"]),
            "loose_deadline_misses": float(loose["pipeline_deadline_misses"]),
            "loose_fct_mean_ms": loose["pipeline_fct_mean_ms"],
        }

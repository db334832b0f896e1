"""ZeroBubble ZB-H1, ZB-H2 (or 1F1B) pipeline-parallel training (Qi et al., "Zero Bubble
Pipeline Parallelism", ICLR 2024, arXiv 2401.10241).

Schedule (pure, :func:`zb_h1_order`): stage ``s`` of ``p`` (0-based) runs
``w = min(p-s-1, m)`` warm-up forwards F, then ``m-w`` rounds of (F, B) where, in round
``i``, a deferred weight-gradient pass W is also run after B when ``i >= s``; then ``w``
cool-down rounds of (B, W); then the remaining W's. This is the order of the authors'
ZB-H1 quick-start patch (sail-sg/zero-bubble-pipeline-parallelism, branch zb-h1-quick-start:
``WeightGradStore.pop()`` only ``if i >= rank`` in the steady phase), as re-implemented in
InternLM's ``ZeroBubblePipelineScheduler``. Each stage runs m F, m B and m W.

Dependencies: F(s, i) needs the activation of F(s-1, i); B(s, i) needs the gradient of
B(s+1, i) (the last stage's B needs only its own F); W(s, i) follows B(s, i) on the same
stage. Bubble of ZB-H1 per the paper's Table 2: (p-1)(T_F + T_B - T_W), against
(p-1)(T_F + T_B + T_W) for 1F1B, so the makespan without communication is
``m (T_F+T_B+T_W) + (p-1)(T_F+T_B-T_W)`` (tested for T_W <= T_F, T_B, the paper's regime).

ZB-H2 (pure, :func:`zb_h2_order`): stage ``s`` runs ``w = min(2(p-s)-1, m)`` warm-up F (the
1F1B warm-up plus ``p-s`` more), then ``m-w`` rounds of (B, F) where a W is run between B and F
whenever the stage already holds ``2p-1`` micro-batches' activations (F done, W not yet done),
then ``w`` cool-down rounds of (B, W), then the remaining W's: every stage defers its W's as long
as the ``(2p-1) M_B`` activation memory of the paper's Table 2 allows. For p = 4, m = 8 this is
the paper's Figure 3 (bottom) as we read a transcription of it (not the PDF; micro-batches
1-based): stage 0 runs F1-F7, B1 W1 F8, then (B, W) for 2..8; the last stage runs (F, B) for
1..7, then W1 F8 B8 and W2-W8. The authors' repository has no hand-written ZB-H2 (its "ZB2P"
is the automatic scheduler with ``--zero-bubble-max-pending-backward 2p``), so the middle
stages follow the rule above, checked only by simulation. Peak activations: ``min(2p-1, m)``
micro-batches on every stage (tested).

The paper's ZB-H2 bubble (Table 2) is ``(p-1)(T_F+T_B-2T_W)``, i.e. ``m (T_F+T_B+T_W) +
(p-1)(T_F+T_B-2T_W)`` per iteration (:func:`zb_h2_formula_ns`). That figure assumes the
optimizer-step synchronisation between iterations is removed (the paper's optimizer
post-validation, Section 4; the authors' README: the all-reduce before the step "breaks
parallelogram and makes zero bubble impossible"), so iteration n+1's forwards on stage s start as
soon as stage s has finished iteration n. With iterations run back to back that way
(:func:`repeat_order`), the time per iteration equals the formula. One iteration started on an
empty pipeline -- what :func:`schedule_times` of one iteration and this workload (a barrier
between iterations) measure -- cannot start the last stage before ``(p-1) T_F``, so its makespan
is ``m (T_F+T_B+T_W) + (p-1) max(T_F, T_F+T_B-2T_W)`` (:func:`zb_h2_barrier_formula_ns`): the
paper's formula only when ``T_B >= 2 T_W``. Both are tested, without communication, for
``m >= 2p-1`` and ``T_W <= T_F, T_B``. There ZB-H2 is never slower than ZB-H1: under the barrier
it saves ``(p-1) min(T_W, T_B-T_W)`` (nothing when T_B = T_W), back to back ``(p-1) T_W`` per
iteration (ZB-H1 and 1F1B gain nothing from overlapping iterations: their per-iteration time
stays their makespan).

Costs: F/B/W FLOPs per transformer layer from the paper's Table 1 -- F: ``sbh(24h+4s)``,
B: ``sbh(24h+8s)``, W: ``sbh(24h)`` (s sequence length, b micro-batch size, h hidden size) --
as we read that table; not re-verified against the PDF here. Divided by an achieved
throughput (default 156 TFLOP/s = 50% of the A100's 312 TFLOP/s dense BF16 peak, NVIDIA A100
datasheet; the 50% is our assumption, not the paper's measurement). The paper's profiled
T_F/T_B/T_W values (appendix) could not be verified here, so they are not used.

Model configurations: the paper's Table 3 (GPT-3-like models, sequence length 1024), as we
read it -- see :data:`MODELS`. Activation / gradient bytes at a stage boundary =
``s * b * h * 2`` (BF16).

Scaling: simulated time and bytes are multiplied by ``scale`` (default 0.01) so one packet-
level run takes seconds; the ratio of transfer time to compute time at a given link rate is
unchanged, fixed per-hop delays are not scaled (docs/workloads.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from safs.core.errors import InvalidInput
from safs.experiments.workloads.api import DependencySpec, FlowSpec, WorkloadAPI
from safs.experiments.workloads.ideal import IdealNetwork
from safs.experiments.workloads.instance import SerialInstance
from safs.experiments.workloads.jitter import jitter_param, jittered_ns
from safs.experiments.workloads.params import check_known, float_param, hosts_param, int_param

NS_PER_S = 1_000_000_000
BF16_BYTES = 2
A100_BF16_PEAK_FLOPS = 312e12  # NVIDIA A100 datasheet, dense BF16 Tensor Core peak
DEFAULT_MFU = 0.5  # assumption (see module docstring)


@dataclass(frozen=True)
class ModelConfig:
    """A GPT-3-like model of the ZeroBubble paper's Table 3 (as we read it)."""

    name: str
    layers: int
    hidden: int
    seq_len: int
    microbatch_size: int


# Qi et al., ICLR 2024, Table 3 "Models and fixed settings used in experiments" (as we read
# it): layers, hidden size, sequence length 1024, micro-batch size.
MODELS = {
    "1.5B": ModelConfig("1.5B", layers=22, hidden=2304, seq_len=1024, microbatch_size=6),
    "6.2B": ModelConfig("6.2B", layers=30, hidden=4096, seq_len=1024, microbatch_size=3),
    "14.6B": ModelConfig("14.6B", layers=46, hidden=5120, seq_len=1024, microbatch_size=1),
    "28.3B": ModelConfig("28.3B", layers=62, hidden=6144, seq_len=1024, microbatch_size=1),
}


@dataclass(frozen=True)
class Op:
    """One pass on a stage: kind ``"F"``, ``"B"`` or ``"W"`` of micro-batch ``mb``."""

    kind: str
    mb: int


def _check_shape(p: int, m: int) -> None:
    if p < 1 or m < 1:
        raise InvalidInput("stages/microbatches", f"need p >= 1 and m >= 1, got p={p}, m={m}")


def zb_h1_order(p: int, m: int) -> list[list[Op]]:
    """The ZB-H1 op order of every stage (see module docstring). Pure.

    Args:
        p: stages, >= 1. m: micro-batches, >= 1.

    Returns:
        ``order[s]`` = list of 3m ops of stage s.

    Raises:
        InvalidInput: p or m < 1.
    """
    _check_shape(p, m)
    order = []
    for s in range(p):
        warmup = min(p - s - 1, m)
        ops = [Op("F", f) for f in range(warmup)]
        f_next, b_next, w_next = warmup, 0, 0
        for i in range(m - warmup):
            ops += [Op("F", f_next), Op("B", b_next)]
            f_next += 1
            b_next += 1
            if i >= s:  # deferred W: stage s delays its first W by s rounds
                ops.append(Op("W", w_next))
                w_next += 1
        order.append(_cool_down(ops, warmup, b_next, w_next, m))
    return order


def _cool_down(ops: list[Op], rounds: int, b_next: int, w_next: int, m: int) -> list[Op]:
    """``ops`` followed by ``rounds`` (B, W) pairs from ``b_next`` and ``w_next``, then the W's
    left up to micro-batch ``m - 1`` (the tail of every ZB schedule)."""
    for k in range(rounds):
        ops += [Op("B", b_next + k), Op("W", w_next + k)]
    return ops + [Op("W", w) for w in range(w_next + rounds, m)]


def zb_h2_order(p: int, m: int) -> list[list[Op]]:
    """The ZB-H2 op order of every stage (see module docstring). Pure.

    Stage ``s`` runs ``w = min(2(p-s)-1, m)`` warm-up F; ``m-w`` rounds of (B, F), with a W
    before the F when the stage holds ``2p-1`` activations (F done, W not done); ``w``
    cool-down rounds of (B, W); then the remaining W's.

    Args:
        p: stages, >= 1. m: micro-batches, >= 1.

    Returns:
        ``order[s]`` = list of 3m ops of stage s.

    Raises:
        InvalidInput: p or m < 1.
    """
    _check_shape(p, m)
    cap = 2 * p - 1  # activation memory (2p-1) M_B, the paper's Table 2
    order = []
    for s in range(p):
        warmup = min(2 * (p - s) - 1, m)
        ops = [Op("F", f) for f in range(warmup)]
        f_next, b_next, w_next = warmup, 0, 0
        for _ in range(m - warmup):
            ops.append(Op("B", b_next))
            b_next += 1
            if f_next - w_next >= cap:  # one more F would exceed the memory bound: free one first
                ops.append(Op("W", w_next))
                w_next += 1
            ops.append(Op("F", f_next))
            f_next += 1
        order.append(_cool_down(ops, warmup, b_next, w_next, m))
    return order


def one_f_one_b_order(p: int, m: int) -> list[list[Op]]:
    """The 1F1B (PipeDream-flush / Megatron) op order of every stage. Pure.

    Stage ``s`` runs ``w = min(p-s-1, m)`` warm-up F, then ``m-w`` (F, B) rounds, then ``w``
    cool-down B. The backward pass is not split: each B computes the input and the weight
    gradient (its duration is T_B + T_W) and there is no W op.

    Raises:
        InvalidInput: p or m < 1.
    """
    _check_shape(p, m)
    order = []
    for s in range(p):
        warmup = min(p - s - 1, m)
        ops = [Op("F", i) for i in range(warmup)]
        for i in range(m - warmup):
            ops += [Op("F", warmup + i), Op("B", i)]
        ops += [Op("B", i) for i in range(m - warmup, m)]
        order.append(ops)
    return order


def one_f_one_b_formula_ns(p: int, m: int, t_f: int, t_b: int, t_w: int) -> int:
    """(m + p - 1)(T_F+T_B+T_W): 1F1B makespan, bubble (p-1)(T_F+T_B+T_W) from the paper's Table 2."""
    return (m + p - 1) * (t_f + t_b + t_w)


SCHEDULES = {"zb-h1": zb_h1_order, "zb-h2": zb_h2_order, "1f1b": one_f_one_b_order}


def repeat_order(order: list[list[Op]], m: int, iterations: int) -> list[list[Op]]:
    """``iterations`` iterations of ``order`` back to back, without a barrier between them. Pure.

    Stage s runs iteration k+1's ops right after its own iteration-k ops (micro-batch ``mb`` of
    iteration k becomes ``k*m + mb``): the optimizer step is local and takes 0 ns, as with the
    paper's optimizer post-validation. Dependencies stay within an iteration.
    """
    return [[Op(op.kind, k * m + op.mb) for k in range(iterations) for op in ops] for ops in order]


def op_inputs(p: int, s: int, op: Op) -> list[tuple[int, Op]]:
    """Cross-stage inputs of ``op`` on stage ``s``: list of (producer stage, producer op)."""
    if op.kind == "F" and s > 0:
        return [(s - 1, Op("F", op.mb))]
    if op.kind == "B" and s < p - 1:
        return [(s + 1, Op("B", op.mb))]
    return []


def schedule_times(order: list[list[Op]], t_f: int, t_b: int, t_w: int,
                   comm_ns: int = 0) -> dict[tuple[int, Op], tuple[int, int]]:
    """Ideal timing of an op order: every op starts as soon as its stage is free and its
    cross-stage input has arrived (``comm_ns`` after the producer ends). Pure.

    Returns:
        ``(stage, op) -> (start_ns, end_ns)``.

    Raises:
        InvalidInput: the order deadlocks (an op waits for an op that never runs first).
    """
    p = len(order)
    dur = {"F": t_f, "B": t_b, "W": t_w}
    times: dict[tuple[int, Op], tuple[int, int]] = {}
    pos = [0] * p
    free = [0] * p
    remaining = sum(len(o) for o in order)
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(order[s]):
                op = order[s][pos[s]]
                start = free[s]
                ready = True
                for src in op_inputs(p, s, op):
                    if src not in times:
                        ready = False
                        break
                    start = max(start, times[src][1] + comm_ns)
                if not ready:
                    break
                end = start + dur[op.kind]
                times[(s, op)] = (start, end)
                free[s] = end
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise InvalidInput("schedule", "op order deadlocks")
    return times


def makespan(times: dict[tuple[int, Op], tuple[int, int]]) -> int:
    """Latest end time of a timing (ns)."""
    return max(end for _, end in times.values())


def zb_h1_formula_ns(p: int, m: int, t_f: int, t_b: int, t_w: int) -> int:
    """m (T_F+T_B+T_W) + (p-1)(T_F+T_B-T_W): ZB-H1 makespan, bubble from the paper's Table 2."""
    return m * (t_f + t_b + t_w) + (p - 1) * (t_f + t_b - t_w)


def zb_h2_formula_ns(p: int, m: int, t_f: int, t_b: int, t_w: int) -> int:
    """m (T_F+T_B+T_W) + (p-1)(T_F+T_B-2T_W): ZB-H2 time per iteration, bubble from the paper's Table 2.

    Holds for iterations run back to back without the optimizer-step barrier (the paper's
    post-validation; :func:`repeat_order`): tested as the steady per-iteration time of
    :func:`zb_h2_order` for ``m >= 2p-1`` and ``T_W <= T_F, T_B``, without communication. A
    single iteration from an empty pipeline takes :func:`zb_h2_barrier_formula_ns`, equal to this
    only when ``T_B >= 2 T_W``.
    """
    return m * (t_f + t_b + t_w) + (p - 1) * (t_f + t_b - 2 * t_w)


def zb_h2_barrier_formula_ns(p: int, m: int, t_f: int, t_b: int, t_w: int) -> int:
    """m (T_F+T_B+T_W) + (p-1) max(T_F, T_F+T_B-2T_W): makespan of one ZB-H2 iteration started
    on an empty pipeline (a barrier between iterations, as in :class:`ZeroBubbleTraining`).

    Ours, not the paper's: the last stage cannot start before the first micro-batch's forwards
    have crossed ``p-1`` stages, ``(p-1) T_F``, and then runs ``m (T_F+T_B+T_W)`` of work, so
    the paper's bubble ``(p-1)(T_F+T_B-2T_W)`` (:func:`zb_h2_formula_ns`) is out of reach
    when ``T_B < 2 T_W`` (e.g. T_F = T_B = T_W: ZB-H2 then ties ZB-H1). Tested against
    :func:`schedule_times` of :func:`zb_h2_order` for ``m >= 2p-1`` and ``T_W <= T_F, T_B``,
    without communication.
    """
    return m * (t_f + t_b + t_w) + (p - 1) * max(t_f, t_f + t_b - 2 * t_w)


class ZeroBubbleTraining:
    """Closed-loop ZB-H1 / ZB-H2 / 1F1B training on hosts ``stage0..stage{p-1}`` (or the list
    ``stage_hosts``, whose length then sets ``stages``).

    Params (``workload.params`` of a scenario):
        stages (4, 2..16), microbatches (8, 1..256; >= stages recommended, >= 2*stages-1 for
        zb-h2), iterations (2, 1..100), model ("1.5B"; keys of :data:`MODELS`), scale (0.01,
        (0, 1]), mfu (0.5, (0, 1]: fraction of the A100 BF16 peak achieved), schedule ("zb-h1" |
        "zb-h2" | "1f1b", the keys of :data:`SCHEDULES`), compute_jitter (0.0, [0, 0.5]: each
        op's duration varies uniformly by up to this fraction, drawn per seed, iteration and op;
        :mod:`safs.experiments.workloads.jitter`). ``seed`` (the run's seed) only matters with jitter.

    No-bubble timestamp of a transfer: the time the consumer stage could start the consuming
    op if the data were there (end of the consumer's previous op), but not before the
    transfer's uncontended arrival (:meth:`SerialInstance.no_bubble_ts`); without contention
    this is the op's start in the ideal timing. A transfer is announced when its producing op
    begins and sent when it ends. Iterations are separated by a barrier (the optimizer step,
    taken as 0 ns).

    Metrics: iteration_time_ms (mean over iterations), iteration_time_ideal_ms (the ideal
    timing with every transfer at its uncontended packet-level time, :func:`schedule_times`),
    iteration_time_ratio, iterations_done.

    Raises:
        InvalidInput: a bad parameter or a stage host missing from the topology.
    """

    def __init__(self, params: dict[str, Any], topology: Any = None, seed: int = 1) -> None:
        known = {"stages", "microbatches", "iterations", "model", "scale", "mfu", "compute_jitter", "schedule",
                 "stage_hosts"}
        check_known(params, known)
        self.params = dict(params)
        self.seed = seed
        self.jitter = jitter_param(params)
        stage_hosts = hosts_param(params, "stage_hosts", [], topology, "stages", 2, 16)
        self.p = len(stage_hosts) or int_param(params, "stages", 4, 2, 16)
        self.m = int_param(params, "microbatches", 8, 1, 256)
        self.iterations = int_param(params, "iterations", 2, 1, 100)
        model = params.get("model", "1.5B")
        if not isinstance(model, str) or model not in MODELS:
            raise InvalidInput("workload.params.model", f"must be one of {', '.join(MODELS)}, got {model!r}")
        self.model = MODELS[model]
        self.scale = float_param(params, "scale", 0.01, 0.0, 1.0)
        mfu = float_param(params, "mfu", DEFAULT_MFU, 0.0, 1.0)
        cfg = self.model
        s, b, h = cfg.seq_len, cfg.microbatch_size, cfg.hidden
        layers_per_stage = cfg.layers / self.p
        flops = A100_BF16_PEAK_FLOPS * mfu
        # Table 1 of Qi et al. (FLOPs per layer), times layers per stage, at the achieved rate.
        self.t_f = max(1, round(layers_per_stage * s * b * h * (24 * h + 4 * s) / flops * NS_PER_S * self.scale))
        self.t_b = max(1, round(layers_per_stage * s * b * h * (24 * h + 8 * s) / flops * NS_PER_S * self.scale))
        self.t_w = max(1, round(layers_per_stage * s * b * h * (24 * h) / flops * NS_PER_S * self.scale))
        self.boundary_bytes = max(1, round(s * b * h * BF16_BYTES * self.scale))  # activation = gradient size
        self.hosts = stage_hosts or [f"stage{i}" for i in range(self.p)]
        self.topology = topology
        if topology is not None and not stage_hosts:
            for host in self.hosts:
                if not topology.is_host(host):
                    raise InvalidInput("workload.params.stages",
                                       f"topology {topology.name!r} has no host {host!r} "
                                       f"(needs stage0..stage{self.p - 1}, or name the hosts in stage_hosts)")
        schedule = params.get("schedule", "zb-h1")
        if not isinstance(schedule, str) or schedule not in SCHEDULES:
            raise InvalidInput("workload.params.schedule", f"must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        self.order = SCHEDULES[schedule](self.p, self.m)
        # 1F1B does not split the backward pass: its B carries the weight gradient too.
        self.durations = ({"F": self.t_f, "B": self.t_b + self.t_w} if schedule == "1f1b"
                          else {"F": self.t_f, "B": self.t_b, "W": self.t_w})
        self.iteration_times_ns: list[int] = []
        self._first_end_ns: int | None = None
        self._api: WorkloadAPI | None = None

    # -- pure references -------------------------------------------------------------------
    def comm_ns(self) -> int:
        """Ideal transfer time of one boundary transfer (slowest stage pair), ns."""
        if self.topology is None:
            return 0
        return max(
            self.topology.min_transfer_ns(src, dst, self.boundary_bytes)
            for a, b in zip(self.hosts, self.hosts[1:])
            for src, dst in ((a, b), (b, a))
        )

    def ideal_iteration_ns(self) -> float:
        """Makespan of one iteration in the ideal timing with line-rate transfers.

        With ``compute_jitter`` the op durations differ per iteration, so the reference is the
        mean iteration time of the same workload (same seed, same draws) run on
        :class:`~safs.experiments.workloads.ideal.IdealNetwork`, every transfer at its own uncontended time.
        """
        if self.jitter == 0:
            d = self.durations
            return makespan(schedule_times(self.order, d["F"], d["B"], d.get("W", 0), self.comm_ns()))
        twin = ZeroBubbleTraining(self.params, self.topology, seed=self.seed)
        net = (
            IdealNetwork(self.topology, keep_flows=False)
            if self.topology is not None
            else IdealNetwork(keep_flows=False)
        )
        net.run(twin)
        return sum(twin.iteration_times_ns) / len(twin.iteration_times_ns)

    def receivers(self) -> list[str]:
        """Hosts that receive pipeline transfers (every stage)."""
        return list(self.hosts)

    # -- closed loop -----------------------------------------------------------------------
    def start(self, api: WorkloadAPI) -> None:
        self._api = api
        self._start_iteration(0)

    def _start_iteration(self, it: int) -> None:
        api = self._api
        self._it = it
        self._it_start = api.now()
        self._ops_left = sum(len(ops) for ops in self.order)
        self._stages = []
        for s in range(self.p):
            inst = SerialInstance(
                self.hosts[s],
                api,
                lambda key, end, s=s: self._op_end(s, key, end),
                lambda key, end, s=s: self._op_begin(s, key, end),
                paused=True,
            )
            self._stages.append(inst)
        for s, ops in enumerate(self.order):
            for op in ops:
                duration = jittered_ns(self.durations[op.kind], self.jitter, self.seed, self.hosts[s], (it, op))
                self._stages[s].add(op, duration, len(op_inputs(self.p, s, op)))
        for inst in self._stages:
            inst.resume()

    def _op_begin(self, s: int, op: Op, end: int) -> None:
        """An op starts: announce the boundary transfer it will send when it ends."""
        if op.kind == "F" and s < self.p - 1:
            self._send(s, s + 1, Op("F", op.mb), "act", end)
        elif op.kind == "B" and s > 0:
            self._send(s, s - 1, Op("B", op.mb), "grad", end)

    def _op_end(self, s: int, op: Op, end: int) -> None:
        self._ops_left -= 1
        if self._ops_left == 0:
            self.iteration_times_ns.append(end - self._it_start)
            if self._first_end_ns is None:
                self._first_end_ns = end
            if self._it + 1 < self.iterations:
                self._start_iteration(self._it + 1)

    def _send(self, src: int, dst: int, consumer: Op, what: str, send_at_ns: int) -> None:
        inst = self._stages[dst]
        transfer = (
            self.topology.min_transfer_ns(self.hosts[src], self.hosts[dst], self.boundary_bytes)
            if self.topology is not None
            else 0
        )
        deadline = inst.no_bubble_ts(consumer, send_at_ns, transfer)
        spec = FlowSpec(
            self.hosts[src],
            self.hosts[dst],
            self.boundary_bytes,
            deadline,
            f"{what} it{self._it} mb{consumer.mb} stage{src}->stage{dst}",
            "pipeline",
        )
        self._api.start_flow(spec, lambda _t: inst.deliver(consumer), send_at_ns=send_at_ns)

    def done(self) -> bool:
        return len(self.iteration_times_ns) >= self.iterations

    def dependencies(self) -> list[DependencySpec]:
        """Activations stage s -> s+1 and gradients stage s+1 -> s (known at launch)."""
        hosts = list(self.hosts)
        return ([DependencySpec.of(a, b) for a, b in zip(hosts, hosts[1:])]
                + [DependencySpec.of(b, a) for a, b in zip(hosts, hosts[1:])])

    def warmup_end_ns(self) -> int | None:
        """When the first iteration ended (the pipeline fill; control rates count after it)."""
        return self._first_end_ns

    def samples(self) -> dict[str, list[float]]:
        """``iteration_time_ms``: each finished iteration's time (ms)."""
        return {"iteration_time_ms": [v / 1e6 for v in self.iteration_times_ns]}

    def metrics(self) -> dict[str, float]:
        ideal = self.ideal_iteration_ns()
        n = len(self.iteration_times_ns)
        mean = sum(self.iteration_times_ns) / n if n else float("nan")
        return {
            "iteration_time_ms": mean / 1e6,
            "iteration_time_ideal_ms": ideal / 1e6,
            "iteration_time_ratio": mean / ideal if n else float("nan"),
            "iterations_done": float(n),
        }

"""Attention-FFN disaggregated (AFD) decode, 16 attention instances feeding 2 FFN instances.

Per layer and micro-batch k (M micro-batches pipelined, default 3): every attention host
runs attention A(g, k), then sends its tokens' hidden states to every FFN host (A2F,
StepMesh "broadcast to all FFN instances"); each FFN host runs F(g, k) once it has the data of
all attention hosts, then sends results back to every attention host (F2A); A(g+1, k) starts
when both FFN results are in. ``g`` is the global layer index, step n covers layers
``n*L .. n*L+L-1`` where L = ``layers_simulated``.

Model presets (``model``: step3, llama-3-70b, mixtral-8x22b, qwen3-235b-a22b) are in
:data:`MODELS`, each number beside its source. The default, Step-3 (stepfun-ai/StepMesh,
Introduction.md, "Traffic Characteristics of AFD", arXiv 2507.19427):
* hidden size 7168 (StepMesh Table 1 "128 x 7168"; Step-3 config).
* A2F in FP8 (1 byte/element), F2A in BF16 (2 bytes/element) -- StepMesh Table 1.
* 61 layers, 50 ms TPOT target, so 819 us per layer; 3-stage pipeline of micro-batches, so
  A_{x,y} <= 273 us per micro-batch and A ~= F -- StepMesh Introduction.md. We use 273 us for
  each attention and each FFN op, constant per layer and micro-batch (the source gives no
  batch-size scaling), times ``compute_scale``.

Bytes per transfer: A2F = tokens(a, k) * hidden * a2f_bytes * bytes_scale, F2A = tokens(a, k) *
hidden * f2a_bytes * bytes_scale, where tokens(a, k) is host a's share of micro-batch k, at least 1 (an empty
slot still carries one padding row, so FFN barriers stay well defined).

Batches from the Azure LLM inference trace (controller/safs/data/llm-inference/, CC-BY,
Splitwise ISCA 2024): request i arrives at virtual time ``(TIMESTAMP_i - TIMESTAMP_0 -
trace_offset) / time_compression`` and stays for GeneratedTokens decode steps. At the start
of each step (when its first A2F is sent) finished requests leave and waiting ones join FIFO
up to ``max_batch`` active requests; a joining request goes to the attention host with the
fewest active requests (lowest index on ties). Virtual time advances by the measured
simulated time times layers / L (61 / L for Step-3), i.e. as if all layers had run. Before the simulation starts,
``warmup_steps`` steps are played analytically at the ideal step time so the batch is in
steady state.

No-bubble timestamp: A2F(g, k) -> FFN f: the time f could start F(g, k) if the data were
there = the (predicted) end of f's previous op, but not before the transfer could arrive
uncontended (:meth:`SerialInstance.no_bubble_ts`). F(g, k) needs the A2F of all attention
hosts, which all cross f's link, so that floor is the uncontended time of the whole incast
(the sum of the micro-batch's A2F bytes) rather than of one transfer: a transfer only counts
as late when it arrives after the consumer could have had all its inputs. Likewise F2A(g, k)
-> attention a, for A(g+1, k), with the floor of FFN f's whole fan-out over its link.
Transfers are announced when the producing op begins and sent when it ends (``send_at_ns``),
as an AFD runtime knows its next transfer when it launches the op.

TPOT: step n ends when the last F2A of its last simulated layer has arrived for every
micro-batch (T_n). TPOT_n = (T_n - T_{n-1}) * layers / L for n >= 1 (the first step, which
includes the pipeline fill, is not a sample). The ideal TPOT is the p50 of the same workload
run on :class:`~safs.experiments.workloads.ideal.IdealNetwork` (no contention).
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from safs.core.errors import InvalidInput
from safs.core.files import data_path, read_text
from safs.experiments.workloads.api import DependencySpec, FlowSpec, WorkloadAPI
from safs.experiments.workloads.ideal import IdealNetwork
from safs.experiments.workloads.instance import SerialInstance
from safs.experiments.workloads.jitter import jitter_param, jittered_ns
from safs.experiments.workloads.params import check_known, float_param, hosts_param, int_param

DATA_DIR = data_path("llm-inference")
TRACES = {"conv": "AzureLLMInferenceTrace_conv.csv", "code": "AzureLLMInferenceTrace_code.csv"}

MICROBATCHES = 3  # "3-stage AFD pipeline"; StepMesh Introduction.md
TPOT_TARGET_US = 50_000  # 20 tokens/s SLA, StepMesh Introduction.md (50 ms TPOT)


@dataclass(frozen=True)
class AfdModel:
    """One model's AFD parameters (``workload.params.model``).

    Fields: hidden_size (elements per token row), layers (decoder layers), a2f/f2a
    bytes per element, attention/FFN op time per layer and micro-batch (us), max_batch
    (default active requests, across all attention instances), source (where each number
    comes from).
    """

    name: str
    hidden_size: int
    layers: int
    a2f_bytes_per_elem: int
    f2a_bytes_per_elem: int
    attention_op_us: float
    ffn_op_us: float
    max_batch: int
    source: str


def _budget_op_us(layers: int) -> float:
    """Op time when a token meets the 50 ms TPOT SLA with attention ~= FFN over a 3-micro-batch
    pipeline: 50 ms / (layers * 3). This is how StepMesh derives Step-3's 273 us; no AFD paper
    we could read gives batch-scaled op times for the other models (docs/workloads.md)."""
    return TPOT_TARGET_US / (layers * MICROBATCHES)


def _same_load_batch(hidden_size: int, op_us: float) -> int:
    """Default max_batch offering the FFN links the same bytes per op time as Step-3's
    512 (A2F incast ~36%, F2A fan-out ~72% of a 100 Gbit/s link): 512 * (op / 273 us) *
    (7168 / hidden_size), rounded."""
    return round(512 * (op_us / 273.0) * (7168 / hidden_size))


# Step-3: stepfun-ai/StepMesh Introduction.md ("Traffic Characteristics of AFD", Table 1
# "128 x 7168", FP8 A2F / BF16 F2A, "Step-3 has 61 layers", A_{x,y} <= 273 us, A ~= F).
# max_batch 512: 32 active requests per attention instance, a quarter of Table 1's 128-token
# tensor, so the FFN links are loaded, not saturated (docs/workloads.md).
# The others: hidden_size and num_hidden_layers from the model's published config.json;
# A2F FP8 / F2A BF16 as StepMesh (a deployment choice: the FFN runs FP8 GEMMs); op times by
# the StepMesh budget derivation (:func:`_budget_op_us`); max_batch by :func:`_same_load_batch`.
_LLAMA_OP = _budget_op_us(80)
_MIXTRAL_OP = _budget_op_us(56)
_QWEN3_OP = _budget_op_us(94)
MODELS = {
    "step3": AfdModel("step3", 7168, 61, 1, 2, 273.0, 273.0, 512,
                      "StepMesh Introduction.md, Step-3 (arXiv 2507.19427)"),
    # Dense: the FFN instances hold the MLP split tensor-parallel along the intermediate
    # dimension (28672); each needs every token (A2F broadcast) and returns a partial sum
    # (F2A), which the attention instance adds: the same traffic as Step-3's experts.
    "llama-3-70b": AfdModel("llama-3-70b", 8192, 80, 1, 2, _LLAMA_OP, _LLAMA_OP, _same_load_batch(8192, _LLAMA_OP),
                            "meta-llama/Meta-Llama-3-70B config.json (hidden_size 8192, num_hidden_layers 80)"),
    "mixtral-8x22b": AfdModel("mixtral-8x22b", 6144, 56, 1, 2, _MIXTRAL_OP, _MIXTRAL_OP,
                              _same_load_batch(6144, _MIXTRAL_OP),
                              "mistralai/Mixtral-8x22B-v0.1 config.json (hidden_size 6144, num_hidden_layers 56, "
                              "8 experts, top-2); MegaScale-Infer (arXiv 2504.02263) serves it disaggregated"),
    "qwen3-235b-a22b": AfdModel("qwen3-235b-a22b", 4096, 94, 1, 2, _QWEN3_OP, _QWEN3_OP,
                                _same_load_batch(4096, _QWEN3_OP),
                                "Qwen/Qwen3-235B-A22B config.json (hidden_size 4096, num_hidden_layers 94, "
                                "128 experts, top-8)"),
}
DEFAULT_MODEL = "step3"
NS_PER_S = 1_000_000_000


def _ignore_end(key: object, end_ns: int) -> None:
    """Ops announce their transfers when they begin; nothing happens at their end."""


@dataclass(frozen=True)
class Request:
    """A trace request: arrival (ns since the trace's first request) and decode length."""

    arrival_ns: int
    generated_tokens: int


def _timestamp_ns(text: str) -> int:
    """'2023-11-16 18:15:46.6805900' -> ns since midnight of that day plus days*86400 s."""
    date, clock = text.strip().split(" ")
    y, mo, d = (int(x) for x in date.split("-"))
    hh, mm, ss = clock.split(":")
    whole, _, frac = ss.partition(".")
    frac_ns = int((frac + "000000000")[:9]) if frac else 0
    days = np.datetime64(f"{y:04d}-{mo:02d}-{d:02d}", "D").astype(np.int64)
    return ((int(days) * 86400 + int(hh) * 3600 + int(mm) * 60 + int(whole)) * NS_PER_S) + frac_ns


@functools.lru_cache(maxsize=4)  # every run of a sweep reads the same trace
def load_trace(path: str | Path) -> tuple[Request, ...]:
    """Read an Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``).

    Returns requests sorted by arrival, arrival relative to the first request (ns).

    Raises:
        InvalidInput: unreadable file, wrong header, or a bad row (naming line and column).
    """
    path = Path(path)
    text = read_text(path, "trace")
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
        raise InvalidInput("line 1", "expected header TIMESTAMP,ContextTokens,GeneratedTokens", source=str(path))
    rows = []
    for line_no, row in enumerate(reader, start=2):
        if len(row) != 3:
            raise InvalidInput(f"line {line_no}", f"expected 3 columns, got {len(row)}", source=str(path))
        try:
            t = _timestamp_ns(row[0])
        except (ValueError, IndexError):
            raise InvalidInput(f"line {line_no}, column TIMESTAMP",
                               f"expected 'YYYY-MM-DD HH:MM:SS.fffffff', got {row[0]!r}", source=str(path)) from None
        try:
            gen = int(row[2])
        except ValueError:
            gen = -1
        if gen < 1:
            raise InvalidInput(f"line {line_no}, column GeneratedTokens",
                               f"expected an integer >= 1, got {row[2]!r}", source=str(path))
        rows.append((t, gen))
    if not rows:
        raise InvalidInput("line 2", "trace has no requests", source=str(path))
    rows.sort()
    t0 = rows[0][0]
    return tuple(Request(t - t0, g) for t, g in rows)


def _model(params: dict[str, Any]) -> AfdModel:
    """The preset named by ``params["model"]`` with the explicit overrides applied.

    Raises:
        InvalidInput: unknown preset or an override out of range (naming the field).
    """
    name = params.get("model", DEFAULT_MODEL)
    if not isinstance(name, str) or name not in MODELS:
        raise InvalidInput("workload.params.model", f"must be one of {', '.join(MODELS)}, got {name!r}")
    base = MODELS[name]
    elem = {}
    for field in ("a2f_bytes_per_elem", "f2a_bytes_per_elem"):
        v = params.get(field, getattr(base, field))
        if isinstance(v, bool) or v not in (1, 2, 4):
            raise InvalidInput(f"workload.params.{field}", f"must be 1, 2 or 4 (FP8, BF16, FP32), got {v!r}")
        elem[field] = int(v)
    return replace(
        base,
        hidden_size=int_param(params, "hidden_size", base.hidden_size, 64, 65_536),
        layers=int_param(params, "layers", base.layers, 1, 1000),
        **elem,
        attention_op_us=float_param(params, "attention_op_us", base.attention_op_us, 0.0, 100_000.0),
        ffn_op_us=float_param(params, "ffn_op_us", base.ffn_op_us, 0.0, 100_000.0),
    )


class AfdDecode:
    """16A2F decode driven by the Azure LLM trace (see module docstring).

    Params: n_attn (16, 1..64), n_ffn (2, 1..16), layers_simulated (2, 1..the model's layers), decode_steps
    (12, 2..10000), microbatches (3, 1..16), max_batch (128, 1..100000 active requests),
    time_compression (20.0, > 0: trace time is divided by it, so larger = more load),
    trace ("conv" | "code" | a CSV path), trace_offset_s (0.0), warmup_steps (200),
    compute_scale (1.0, (0, 1000]), bytes_scale (1.0, (0, 100]), compute_jitter (0.0, [0, 0.5]:
    each op's duration varies uniformly by up to this fraction, drawn per seed and op;
    :mod:`safs.experiments.workloads.jitter`); model ("step3", a key of :data:`MODELS`) and
    its overrides hidden_size (64..65536), layers (1..1000), a2f_bytes_per_elem and
    f2a_bytes_per_elem (1, 2 or 4), attention_op_us and ffn_op_us ((0, 100000]); max_batch
    defaults to the model's.

    ``seed`` (the run's seed) only matters when ``compute_jitter`` > 0.

    Hosts: a0..a{n_attn-1}, f0..f{n_ffn-1} must exist in the topology, or the lists
    ``attention_hosts`` and ``ffn_hosts`` name them (their lengths then set n_attn and n_ffn;
    several jobs on one fabric, kind ``jobs``).

    Raises:
        InvalidInput: bad parameter, unreadable trace, or missing hosts.
    """

    KNOWN = {"n_attn", "n_ffn", "layers_simulated", "decode_steps", "microbatches", "max_batch",
             "time_compression", "trace", "trace_offset_s", "warmup_steps", "compute_scale", "bytes_scale",
             "compute_jitter", "model", "hidden_size", "layers", "a2f_bytes_per_elem", "f2a_bytes_per_elem",
             "attention_op_us", "ffn_op_us", "attention_hosts", "ffn_hosts"}

    def __init__(self, params: dict[str, Any], topology: Any = None, source: str | None = None,
                 seed: int = 1) -> None:
        check_known(params, self.KNOWN)
        self.params = dict(params)
        self.seed = seed
        self.jitter = jitter_param(params)
        attn_hosts = hosts_param(params, "attention_hosts", [], topology, "n_attn", 1, 64)
        ffn_hosts = hosts_param(params, "ffn_hosts", [], topology, "n_ffn", 1, 16)
        self.n_attn = len(attn_hosts) or int_param(params, "n_attn", 16, 1, 64)
        self.n_ffn = len(ffn_hosts) or int_param(params, "n_ffn", 2, 1, 16)
        self.attn = attn_hosts or [f"a{i}" for i in range(self.n_attn)]
        self.ffn = ffn_hosts or [f"f{i}" for i in range(self.n_ffn)]
        both = sorted(set(self.attn) & set(self.ffn))
        if both:  # given, or given on one side and the other side's default names
            given = "ffn_hosts" if ffn_hosts else "attention_hosts"
            raise InvalidInput(f"workload.params.{given}", f"an instance host is both attention and FFN: {both} "
                               f"(attention {self.attn}, FFN {self.ffn}); give both lists", source)
        self.model = _model(params)
        self.model_layers = self.model.layers
        self.layers = int_param(params, "layers_simulated", 2, 1, self.model_layers)
        self.steps = int_param(params, "decode_steps", 12, 2, 10_000)
        self.m = int_param(params, "microbatches", MICROBATCHES, 1, 16)
        self.max_batch = int_param(params, "max_batch", self.model.max_batch, 1, 100_000)
        self.compression = float_param(params, "time_compression", 20.0, 0.0, 1e9)
        self.offset_ns = round(float(params.get("trace_offset_s", 0.0)) * NS_PER_S)
        self.warmup_steps = int_param(params, "warmup_steps", 200, 0, 1_000_000)
        compute_scale = float_param(params, "compute_scale", 1.0, 0.0, 1000.0)
        self.bytes_scale = float_param(params, "bytes_scale", 1.0, 0.0, 100.0)
        self.attention_ns = max(1, round(self.model.attention_op_us * 1000 * compute_scale))
        self.ffn_ns = max(1, round(self.model.ffn_op_us * 1000 * compute_scale))
        trace = params.get("trace", "conv")
        if not isinstance(trace, str):
            raise InvalidInput("workload.params.trace", f"must be conv, code or a CSV path, got {trace!r}", source)
        trace_path = DATA_DIR / TRACES[trace] if trace in TRACES else Path(trace)
        self.requests = load_trace(trace_path)
        self.topology = topology
        if topology is not None:
            defaulted = [(f, p, h) for f, p, h, given in (("n_attn", "a", self.attn, attn_hosts),
                                                          ("n_ffn", "f", self.ffn, ffn_hosts)) if not given]
            for field, prefix, hosts in defaulted:
                missing = next((h for h in hosts if not topology.is_host(h)), None)
                if missing is not None:
                    have = 0
                    while topology.is_host(f"{prefix}{have}"):
                        have += 1
                    raise InvalidInput(f"workload.params.{field}",
                                       f"topology {topology.name!r} has no host {missing!r}: it has "
                                       f"{prefix}0..{prefix}{have - 1}, so {field} must be in 1..{have}"
                                       if have else f"topology {topology.name!r} has no host {missing!r} "
                                       f"(hosts {prefix}0, {prefix}1, ... are needed)", source)
        self.step_end_ns: list[int] = []
        self.batch_sizes: list[int] = []
        self._api: WorkloadAPI | None = None

    def receivers(self) -> list[str]:
        """The pipeline's bottleneck receivers: the FFN hosts (16-to-1 A2F incast)."""
        return list(self.ffn)

    # -- batching --------------------------------------------------------------------------
    def _reset_batching(self) -> None:
        self._next_req = 0
        self._waiting: list[int] = []  # request indices, FIFO
        self._active: dict[int, list[int]] = {}  # req -> [remaining steps, attention host]
        self._host_load = [0] * self.n_attn
        self._virtual_ns = self.offset_ns

    def _advance_batch(self) -> list[int]:
        """One step's admission at virtual time ``self._virtual_ns``; returns tokens per host."""
        for req, state in list(self._active.items()):
            if state[0] <= 0:
                self._host_load[state[1]] -= 1
                del self._active[req]
        reqs = self.requests
        while self._next_req < len(reqs) and reqs[self._next_req].arrival_ns / self.compression <= self._virtual_ns:
            self._waiting.append(self._next_req)
            self._next_req += 1
        while self._waiting and len(self._active) < self.max_batch:
            req = self._waiting.pop(0)
            host = min(range(self.n_attn), key=lambda a: (self._host_load[a], a))
            self._host_load[host] += 1
            self._active[req] = [reqs[req].generated_tokens, host]
        for state in self._active.values():
            state[0] -= 1  # each active request gets one token this step
        return list(self._host_load)

    def _ideal_layer_ns(self) -> int:
        return self.m * max(self.attention_ns, self.ffn_ns)  # per layer: the slower side paces the pipeline

    # -- closed loop -----------------------------------------------------------------------
    def start(self, api: WorkloadAPI) -> None:
        self._api = api
        self._reset_batching()
        step_virtual = self._ideal_layer_ns() * self.model_layers
        for _ in range(self.warmup_steps):
            self._advance_batch()
            self._virtual_ns += step_virtual
        self._t0 = api.now()
        self._virtual_t0 = self._virtual_ns
        self._step_tokens: dict[int, list[list[int]]] = {}  # step -> [host][mb] tokens
        self._tokens_done: dict[int, int] = {}  # step -> micro-batches whose token is out
        self._attn_inst = [SerialInstance(a, api, _ignore_end, lambda key, end, i=i: self._attn_begin(i, key, end))
                           for i, a in enumerate(self.attn)]
        self._ffn_inst = [SerialInstance(f, api, _ignore_end, lambda key, end, j=j: self._ffn_begin(j, key, end))
                          for j, f in enumerate(self.ffn)]
        self._arrived: dict[tuple[int, int], int] = {}  # (g, k) F2A flows arrived at all hosts
        for inst in self._attn_inst:
            for k in range(self.m):
                inst.add((0, k), self._op_ns(inst.name, (0, k)), 0)

    def _tokens(self, step: int) -> list[list[int]]:
        if step not in self._step_tokens:
            api = self._api
            self._virtual_ns = self._virtual_t0 + (api.now() - self._t0) * self.model_layers // self.layers
            per_host = self._advance_batch()
            self.batch_sizes.append(sum(per_host))
            self._step_tokens[step] = [[max(1, t // self.m + (1 if k < t % self.m else 0)) for k in range(self.m)]
                                       for t in per_host]
        return self._step_tokens[step]

    def _ensure(self, inst: SerialInstance, g: int, k: int, needs: int) -> None:
        """Add ops up to (g, k) to ``inst`` in (layer, micro-batch) order."""
        while not inst.has((g, k)):
            last = inst.ops[-1].key if inst.ops else (0, -1)
            lg, lk = last
            nxt = (lg, lk + 1) if lk + 1 < self.m else (lg + 1, 0)
            inst.add(nxt, self._op_ns(inst.name, nxt), needs)

    def _op_ns(self, host: str, key: tuple[int, int]) -> int:
        nominal = self.ffn_ns if host in self.ffn else self.attention_ns
        return jittered_ns(nominal, self.jitter, self.seed, host, key)

    def _transfer_ns(self, src: str, dst: str, size: int) -> int:
        return self.topology.min_transfer_ns(src, dst, size) if self.topology is not None else 0

    def _bytes(self, tokens: int, bytes_per_elem: int) -> int:
        return max(1, round(tokens * self.model.hidden_size * bytes_per_elem * self.bytes_scale))

    def _attn_begin(self, i: int, key: tuple[int, int], end: int) -> None:
        """A(g, k) starts on attention host i: announce its A2F transfers, sent at ``end``.

        F(g, k) needs the A2F of every attention host, so the FFN link must carry the whole
        incast before F can start: the no-bubble floor is the uncontended time of the incast's
        bytes, not of this transfer alone (module docstring).
        """
        g, k = key
        step = g // self.layers
        if step >= self.steps:
            return
        tokens = self._tokens(step)
        size = self._bytes(tokens[i][k], self.model.a2f_bytes_per_elem)
        incast = sum(self._bytes(t[k], self.model.a2f_bytes_per_elem) for t in tokens)
        for j, inst in enumerate(self._ffn_inst):
            self._ensure(inst, g, k, self.n_attn)
            deadline = inst.no_bubble_ts((g, k), end, self._transfer_ns(self.attn[i], self.ffn[j], incast))
            spec = FlowSpec(self.attn[i], self.ffn[j], size, deadline, f"A2F l{g} mb{k} {self.attn[i]}->{self.ffn[j]}",
                            "pipeline")
            self._api.start_flow(spec, lambda _t, inst=inst: inst.deliver((g, k)), send_at_ns=end)

    def _ffn_begin(self, j: int, key: tuple[int, int], end: int) -> None:
        """F(g, k) starts on FFN host j: announce its F2A transfers, sent at ``end``.

        They all leave through FFN j's link, so each one's no-bubble floor is the uncontended
        time of the whole fan-out (module docstring).
        """
        g, k = key
        tokens = self._tokens(g // self.layers)
        fanout = sum(self._bytes(t[k], self.model.f2a_bytes_per_elem) for t in tokens)
        for i, inst in enumerate(self._attn_inst):
            self._ensure(inst, g + 1, k, self.n_ffn)
            size = self._bytes(tokens[i][k], self.model.f2a_bytes_per_elem)
            deadline = inst.no_bubble_ts((g + 1, k), end, self._transfer_ns(self.ffn[j], self.attn[i], fanout))
            spec = FlowSpec(self.ffn[j], self.attn[i], size, deadline, f"F2A l{g} mb{k} {self.ffn[j]}->{self.attn[i]}",
                            "pipeline")
            self._api.start_flow(spec, lambda t, inst=inst: self._f2a_done(inst, g, k, t), send_at_ns=end)

    def _f2a_done(self, inst: SerialInstance, g: int, k: int, t: int) -> None:
        inst.deliver((g + 1, k))
        n = self._arrived.get((g, k), 0) + 1
        self._arrived[(g, k)] = n
        if n == self.n_attn * self.n_ffn and (g + 1) % self.layers == 0:
            step = g // self.layers
            done = self._tokens_done.get(step, 0) + 1
            self._tokens_done[step] = done
            if done == self.m:
                self.step_end_ns.append(t)

    def done(self) -> bool:
        return len(self.step_end_ns) >= self.steps

    def tpot_samples_ns(self) -> list[int]:
        """TPOT per step n >= 1, scaled to all the model's layers (ns)."""
        ends = self.step_end_ns
        return [(b - a) * self.model_layers // self.layers for a, b in zip(ends, ends[1:])]

    def dependencies(self) -> list[DependencySpec]:
        """A2F from every attention host to every FFN host and F2A back (known at launch)."""
        return ([DependencySpec.of(a, f) for a in self.attn for f in self.ffn]
                + [DependencySpec.of(f, a) for f in self.ffn for a in self.attn])

    def warmup_end_ns(self) -> int | None:
        """When the first decode step ended (it includes the pipeline fill; not a TPOT sample)."""
        return self.step_end_ns[0] if self.step_end_ns else None

    def samples(self) -> dict[str, list[float]]:
        """``tpot_ms``: TPOT per decode step n >= 1 (ms, all layers)."""
        return {"tpot_ms": [v / 1e6 for v in self.tpot_samples_ns()]}

    def ideal_tpot_samples_ns(self) -> list[int]:
        """TPOT samples (ns) of this workload on a contention-free network: the same requests
        and op times, every transfer at its uncontended time."""
        twin = AfdDecode(self.params, None, seed=self.seed)
        twin.requests = self.requests
        net = (IdealNetwork(self.topology, keep_flows=False) if self.topology is not None
               else IdealNetwork(keep_flows=False))
        net.run(twin)
        return twin.tpot_samples_ns()

    def metrics(self) -> dict[str, float]:
        samples = self.tpot_samples_ns()
        ideal = self.ideal_tpot_samples_ns()

        def pct_ms(values: list[int], q: int) -> float:
            return float(np.percentile(values, q)) / 1e6 if values else float("nan")

        return {
            "tpot_p50_ms": pct_ms(samples, 50),
            "tpot_p99_ms": pct_ms(samples, 99),
            "tpot_samples": float(len(samples)),
            "tpot_ideal_ms": pct_ms(ideal, 50),
            "tpot_ideal_p99_ms": pct_ms(ideal, 99),
            "batch_mean": float(np.mean(self.batch_sizes)) if self.batch_sizes else float("nan"),
        }

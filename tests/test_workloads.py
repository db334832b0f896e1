"""Workloads: ZB-H1 / ZB-H2 schedule properties, closed-loop runs on the ideal network, AFD batching
and TPOT, background sources, flow traces, build_workload."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safs.core.distributions import load_distribution
from safs.core.errors import InvalidInput
from safs.core.topology import load_topology
from safs.experiments.workloads import build_workload
from safs.experiments.workloads.afd import MODELS, AfdDecode, load_trace
from safs.experiments.workloads.api import DependencySpec, FlowSpec
from safs.experiments.workloads.background import BulkFlows, PoissonArrivals
from safs.experiments.workloads.fabric import FabricTransfers, bisection_bps
from safs.experiments.workloads.ideal import IdealNetwork, transfer_ns
from safs.experiments.workloads.trace import load_trace_file
from safs.experiments.workloads.zerobubble import (
    SCHEDULES,
    Op,
    ZeroBubbleTraining,
    makespan,
    one_f_one_b_formula_ns,
    one_f_one_b_order,
    op_inputs,
    repeat_order,
    schedule_times,
    zb_h1_formula_ns,
    zb_h1_order,
    zb_h2_barrier_formula_ns,
    zb_h2_formula_ns,
    zb_h2_order,
)

ROOT = Path(__file__).resolve().parents[1]
TOPO = ROOT / "topologies"


@pytest.fixture(scope="module")
def afd_topo():
    return load_topology(TOPO / "afd-16a2f.yaml")


@pytest.fixture(scope="module")
def zb_topo():
    return load_topology(TOPO / "zerobubble-pp.yaml")


# ---- ZB-H1 schedule (pure) -------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.integers(2, 8), st.integers(1, 24))
def test_zb_h1_each_stage_runs_m_f_b_w_in_dependency_order(p, m):
    order = zb_h1_order(p, m)
    assert len(order) == p
    for s, ops in enumerate(order):
        for kind in "FBW":
            assert [op.mb for op in ops if op.kind == kind] == list(range(m))
        pos = {op: i for i, op in enumerate(ops)}
        for i in range(m):
            assert pos[Op("F", i)] < pos[Op("B", i)] < pos[Op("W", i)]
        # Same in-flight bound as 1F1B: at most min(p-s, m) micro-batches between F and B.
        inflight = peak = 0
        for op in ops:
            inflight += 1 if op.kind == "F" else (-1 if op.kind == "B" else 0)
            peak = max(peak, inflight)
        assert peak == min(p - s, m)
        # W deferred: stage s runs its first W after its (s+1)-th B (or after all B when m <= s).
        bs_before_first_w = sum(1 for op in ops[:pos[Op("W", 0)]] if op.kind == "B")
        assert bs_before_first_w == min(s + 1, m) if m - min(p - s - 1, m) > s else bs_before_first_w >= 1


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 6), st.integers(1, 16), st.integers(1, 40), st.integers(1, 40), st.integers(1, 40),
       st.integers(0, 10))
def test_timing_respects_dependencies(p, m, tf, tb, tw, comm):
    order = zb_h1_order(p, m)
    times = schedule_times(order, tf, tb, tw, comm)
    for (s, op), (start, end) in times.items():
        assert end - start == {"F": tf, "B": tb, "W": tw}[op.kind]
        for src in op_inputs(p, s, op):
            assert start >= times[src][1] + comm
    for s, ops in enumerate(order):  # one op at a time per stage, in order
        spans = [times[(s, op)] for op in ops]
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 8), st.integers(0, 16), st.integers(1, 50), st.integers(1, 50), st.data())
def test_makespan_matches_paper_bubble_formula(p, extra, tf, tb, data):
    # Qi et al. Table 2: ZB-H1 bubble (p-1)(T_F+T_B-T_W); holds for m >= p and T_W <= T_F, T_B.
    m = p + extra
    tw = data.draw(st.integers(1, min(tf, tb)))
    times = schedule_times(zb_h1_order(p, m), tf, tb, tw)
    assert makespan(times) == zb_h1_formula_ns(p, m, tf, tb, tw)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 8), st.integers(1, 40), st.integers(1, 50), st.integers(1, 50), st.integers(0, 50))
def test_1f1b_makespan_matches_paper_bubble_formula(p, m, tf, tb, tw):
    # Qi et al. Table 2: 1F1B bubble (p-1)(T_F+T_B+T_W); the fused B takes T_B + T_W.
    times = schedule_times(one_f_one_b_order(p, m), tf, tb + tw, 0)
    assert makespan(times) == one_f_one_b_formula_ns(p, m, tf, tb, tw)


def test_1f1b_keeps_at_most_p_minus_s_microbatches_in_flight():
    p, m = 4, 10
    for s, ops in enumerate(one_f_one_b_order(p, m)):
        assert [o.kind for o in ops].count("F") == [o.kind for o in ops].count("B") == m
        in_flight = peak = 0
        for op in ops:
            in_flight += 1 if op.kind == "F" else -1
            peak = max(peak, in_flight)
        assert peak == min(p - s, m)


def test_zerobubble_closed_loop_1f1b_slower_than_zb_h1_slower_than_zb_h2(zb_topo):
    runs = {}
    for schedule in SCHEDULES:
        w = ZeroBubbleTraining({"schedule": schedule, "iterations": 1}, zb_topo)
        IdealNetwork(zb_topo).run(w)
        runs[schedule] = w.metrics()
        assert runs[schedule]["iteration_time_ratio"] == pytest.approx(1.0, abs=1e-9)
    assert runs["1f1b"]["iteration_time_ms"] > runs["zb-h1"]["iteration_time_ms"] > runs["zb-h2"]["iteration_time_ms"]


def test_zb_h1_bubble_is_a_third_of_1f1b_for_equal_costs():
    p, m, t = 4, 12, 10
    bubble = makespan(schedule_times(zb_h1_order(p, m), t, t, t)) - m * 3 * t
    assert bubble * 3 == (p - 1) * 3 * t  # 1F1B bubble (p-1)(F+B+W) = 3(p-1)T


# ---- ZB-H2 schedule (pure) -------------------------------------------------------------

def _peak_activations(ops):
    """Most micro-batches whose activations a stage holds at once: F done, W not yet done."""
    held = peak = 0
    for op in ops:
        held += 1 if op.kind == "F" else (-1 if op.kind == "W" else 0)
        peak = max(peak, held)
    return peak


def _per_iteration_ns(order, m, tf, tb, tw, iterations=3):
    """Makespans of 1..iterations back-to-back iterations (no barrier): their steps must agree."""
    spans = [makespan(schedule_times(repeat_order(order, m, k), tf, tb, tw)) for k in range(1, iterations + 1)]
    steps = {b - a for a, b in zip(spans, spans[1:])}
    assert len(steps) == 1, spans
    return steps.pop()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(1, 24), st.integers(0, 10))
def test_zb_h2_each_stage_runs_each_f_b_w_once_in_dependency_order(p, m, comm):
    order = zb_h2_order(p, m)
    assert len(order) == p
    for s, ops in enumerate(order):
        assert len(ops) == 3 * m
        for kind in "FBW":
            assert [op.mb for op in ops if op.kind == kind] == list(range(m))
        pos = {op: i for i, op in enumerate(ops)}
        for i in range(m):
            assert pos[Op("F", i)] < pos[Op("B", i)] < pos[Op("W", i)]
        # Warm-up: min(2(p-s)-1, m) forwards before the first B.
        assert pos[Op("B", 0)] == min(2 * (p - s) - 1, m)
    times = schedule_times(order, 10, 12, 8, comm)  # does not deadlock, with or without comm
    for (s, op), (start, _end) in times.items():
        for src in op_inputs(p, s, op):
            assert start >= times[src][1] + comm


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(1, 40))
def test_zb_h2_holds_at_most_2p_minus_1_activations(p, m):
    # Qi et al. Table 2: ZB-H2 activation memory (2p-1) M_B; ZB-H2 uses all of it on every stage.
    for ops in zb_h2_order(p, m):
        assert _peak_activations(ops) == min(2 * p - 1, m) <= 2 * p - 1
    for ops in repeat_order(zb_h2_order(p, m), m, 2):  # also across back-to-back iterations
        assert _peak_activations(ops) <= 2 * p - 1
    for ops in zb_h1_order(p, m):  # ZB-H1: p M_B
        assert _peak_activations(ops) == min(p, m)


# (p, m, T_F, T_B, T_W) with m >= 2p and T_W <= T_F, T_B: equal costs, the 1.5B model's Table 1
# FLOP ratios (F 24h+4s, B 24h+8s, W 24h; h=2304, s=1024) and other unequal costs, with T_B < 2T_W
# and with T_B >= 2T_W.
ZB_CASES = [(p, m, *t) for p, m in ((4, 8), (8, 24), (4, 16)) for t in
            ((10, 10, 10), (59392, 63488, 55296), (12, 10, 8), (10, 12, 8), (20, 10, 10), (10, 20, 10),
             (10, 20, 5), (10, 10, 2), (30, 25, 1))]


@pytest.mark.parametrize("p,m,tf,tb,tw", ZB_CASES)
def test_zb_h2_matches_paper_bubble_back_to_back_and_its_barrier_bound_per_iteration(p, m, tf, tb, tw):
    order = zb_h2_order(p, m)
    one = makespan(schedule_times(order, tf, tb, tw))
    # One iteration from an empty pipeline (the workload's barrier): the fill (p-1)T_F bounds it.
    assert one == zb_h2_barrier_formula_ns(p, m, tf, tb, tw)
    assert one >= m * (tf + tb + tw) + (p - 1) * tf
    # The paper's Table 2 bubble (p-1)(T_F+T_B-2T_W) holds for one iteration iff T_B >= 2 T_W ...
    assert (one == zb_h2_formula_ns(p, m, tf, tb, tw)) == (tb >= 2 * tw)
    # ... and always per iteration once iterations run back to back (optimizer post-validation).
    assert _per_iteration_ns(order, m, tf, tb, tw) == zb_h2_formula_ns(p, m, tf, tb, tw)


@pytest.mark.parametrize("p,m,tf,tb,tw", ZB_CASES)
def test_zb_h2_never_slower_than_zb_h1_never_slower_than_1f1b(p, m, tf, tb, tw):
    h2, h1 = zb_h2_order(p, m), zb_h1_order(p, m)
    f1b = one_f_one_b_order(p, m)
    one = {"zb-h2": makespan(schedule_times(h2, tf, tb, tw)), "zb-h1": makespan(schedule_times(h1, tf, tb, tw)),
           "1f1b": makespan(schedule_times(f1b, tf, tb + tw, 0))}
    assert one["zb-h2"] <= one["zb-h1"] <= one["1f1b"]
    assert one["zb-h1"] - one["zb-h2"] == (p - 1) * min(tw, tb - tw)
    back = {"zb-h2": _per_iteration_ns(h2, m, tf, tb, tw), "zb-h1": _per_iteration_ns(h1, m, tf, tb, tw),
            "1f1b": _per_iteration_ns(f1b, m, tf, tb + tw, 0)}
    assert back["zb-h2"] <= back["zb-h1"] <= back["1f1b"]
    assert back["zb-h1"] == one["zb-h1"] and back["1f1b"] == one["1f1b"]  # nothing gained without the barrier
    assert back["zb-h1"] - back["zb-h2"] == (p - 1) * tw


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 8), st.integers(0, 16), st.integers(1, 50), st.integers(1, 50), st.data())
def test_zb_h2_formulas_hold_for_m_at_least_2p_minus_1(p, extra, tf, tb, data):
    # Regime of both formulas: m >= 2p-1 and T_W <= T_F, T_B; no communication.
    m = 2 * p - 1 + extra
    tw = data.draw(st.integers(1, min(tf, tb)))
    order = zb_h2_order(p, m)
    assert makespan(schedule_times(order, tf, tb, tw)) == zb_h2_barrier_formula_ns(p, m, tf, tb, tw)
    assert _per_iteration_ns(order, m, tf, tb, tw) == zb_h2_formula_ns(p, m, tf, tb, tw)


def test_zb_h2_bubble_is_zero_back_to_back_and_ties_zb_h1_under_a_barrier_for_equal_costs():
    p, m, t = 4, 12, 10
    order = zb_h2_order(p, m)
    assert _per_iteration_ns(order, m, t, t, t) == m * 3 * t  # the paper's "zero bubble"
    assert makespan(schedule_times(order, t, t, t)) == makespan(schedule_times(zb_h1_order(p, m), t, t, t))


def test_zerobubble_closed_loop_on_ideal_network_equals_ideal_timing(zb_topo):
    w = ZeroBubbleTraining({"stages": 4, "microbatches": 6, "iterations": 2}, zb_topo)
    net = IdealNetwork(zb_topo)
    net.run(w)
    m = w.metrics()
    assert w.done() and m["iterations_done"] == 2
    assert m["iteration_time_ms"] == pytest.approx(m["iteration_time_ideal_ms"])
    assert m["iteration_time_ratio"] == pytest.approx(1.0)
    flows = net.flows
    assert len(flows) == 2 * 2 * 3 * 6  # iterations x (act+grad) x boundaries x micro-batches
    assert all(f.spec.size_bytes == w.boundary_bytes for f in flows)
    # Bytes from the Table 3 config: s*b*h*2 (BF16), scaled.
    assert w.boundary_bytes == round(1024 * 6 * 2304 * 2 * w.scale)


def test_zerobubble_slower_network_stretches_iterations(zb_topo):
    fast = ZeroBubbleTraining({"microbatches": 4, "iterations": 1}, None)
    IdealNetwork(rate_bps=100_000_000_000).run(fast)
    slow = ZeroBubbleTraining({"microbatches": 4, "iterations": 1}, None)
    IdealNetwork(rate_bps=1_000_000_000).run(slow)
    assert slow.iteration_times_ns[0] > fast.iteration_times_ns[0]


@pytest.mark.parametrize("params,field", [({"stages": 1}, "stages"), ({"microbatches": 0}, "microbatches"),
                                          ({"model": "7B"}, "model"), ({"scale": 0}, "scale"),
                                          ({"bogus": 1}, "bogus"), ({"stages": 8}, "stages"),
                                          ({"schedule": "zb-v"}, "schedule")])
def test_zerobubble_bad_params(zb_topo, params, field):
    with pytest.raises(InvalidInput) as exc:
        ZeroBubbleTraining(params, zb_topo)
    assert field in exc.value.field


def test_zerobubble_bad_schedule_lists_every_schedule(zb_topo):
    with pytest.raises(InvalidInput) as exc:
        ZeroBubbleTraining({"schedule": "zb-v"}, zb_topo)
    assert "zb-h1, zb-h2, 1f1b" in str(exc.value)


# ---- AFD ---------------------------------------------------------------------------------

def test_azure_trace_loads():
    reqs = load_trace(ROOT / "controller/safs/data/llm-inference/AzureLLMInferenceTrace_conv.csv")
    assert len(reqs) == 19366 and reqs[0].arrival_ns == 0
    assert all(a.arrival_ns <= b.arrival_ns for a, b in zip(reqs, reqs[1:]))
    assert all(r.generated_tokens >= 1 for r in reqs)


def test_afd_ideal_tpot_matches_stepmesh_budget(afd_topo):
    w = AfdDecode({"decode_steps": 6}, afd_topo)
    net = IdealNetwork(afd_topo)
    net.run(w)
    m = w.metrics()
    assert m["tpot_samples"] == 5
    # 61 layers x 3 micro-batches x 273 us = 50 ms (StepMesh) plus transfer time.
    assert 49.9 <= m["tpot_p50_ms"] <= 55
    assert m["tpot_p50_ms"] == pytest.approx(m["tpot_ideal_ms"], rel=1e-6)
    a2f = [f for f in net.flows if f.spec.label.startswith("A2F")]
    f2a = [f for f in net.flows if f.spec.label.startswith("F2A")]
    assert len(a2f) == len(f2a) == 6 * 2 * 3 * 16 * 2
    # F2A carries BF16, A2F FP8: twice the bytes for the same tokens.
    assert sum(f.spec.size_bytes for f in f2a) == 2 * sum(f.spec.size_bytes for f in a2f)


def test_afd_batch_follows_load(afd_topo):
    light = AfdDecode({"decode_steps": 3, "time_compression": 0.5, "max_batch": 10_000}, None)
    IdealNetwork().run(light)
    heavy = AfdDecode({"decode_steps": 3, "time_compression": 50.0, "max_batch": 10_000}, None)
    IdealNetwork().run(heavy)
    capped = AfdDecode({"decode_steps": 3, "time_compression": 50.0, "max_batch": 64}, None)
    IdealNetwork().run(capped)
    assert light.batch_sizes[0] < heavy.batch_sizes[0]
    assert max(capped.batch_sizes) <= 64


def test_afd_contention_raises_tpot(afd_topo):
    base = AfdDecode({"decode_steps": 4, "compute_scale": 0.05}, None)
    IdealNetwork(rate_bps=100_000_000_000).run(base)
    slow = AfdDecode({"decode_steps": 4, "compute_scale": 0.05}, None)
    IdealNetwork(rate_bps=10_000_000_000).run(slow)
    assert slow.metrics()["tpot_p50_ms"] > base.metrics()["tpot_p50_ms"]


def test_afd_tpot_scales_with_layers():
    w = AfdDecode({"decode_steps": 3, "layers_simulated": 4, "compute_scale": 1.0}, None)
    IdealNetwork(rate_bps=10**15).run(w)  # ~no transfer time
    ends = w.step_end_ns
    assert w.tpot_samples_ns()[0] == (ends[1] - ends[0]) * MODELS["step3"].layers // 4


# Published configurations (each model's config.json; Step-3 from StepMesh Table 1): hidden size
# and decoder layers. A second copy on purpose: the presets are checked against the sources.
PUBLISHED = {"step3": (7168, 61), "llama-3-70b": (8192, 80), "mixtral-8x22b": (6144, 56),
             "qwen3-235b-a22b": (4096, 94)}


@pytest.mark.parametrize("model", sorted(PUBLISHED))
def test_afd_preset_bytes_per_layer_match_published_config(model):
    hidden, layers = PUBLISHED[model]
    w = AfdDecode({"model": model, "decode_steps": 3}, None)
    net = IdealNetwork(rate_bps=10**15)
    net.run(w)
    assert w.model_layers == layers
    # Per layer and micro-batch each attention host sends tokens x hidden x 1 byte (FP8) to each
    # FFN and gets tokens x hidden x 2 bytes (BF16) back: bytes per token row = hidden x width.
    first_layer = [f for f in net.flows if " l0 " in f.spec.label]
    tokens = sum(t for per_host in w._step_tokens[0] for t in per_host) * w.n_ffn
    a2f = sum(f.spec.size_bytes for f in first_layer if f.spec.label.startswith("A2F"))
    f2a = sum(f.spec.size_bytes for f in first_layer if f.spec.label.startswith("F2A"))
    assert (a2f, f2a) == (tokens * hidden * 1, tokens * hidden * 2)
    # TPOT on an (almost) free network: the StepMesh budget, 50 ms for every preset.
    assert w.metrics()["tpot_p50_ms"] == pytest.approx(50.0, rel=0.005)


def test_afd_overrides_and_ratio():
    w = AfdDecode({"model": "llama-3-70b", "n_attn": 8, "n_ffn": 1, "hidden_size": 1024, "layers": 10,
                   "a2f_bytes_per_elem": 2, "f2a_bytes_per_elem": 4, "attention_op_us": 100, "ffn_op_us": 300,
                   "decode_steps": 3}, None)
    net = IdealNetwork(rate_bps=10**15)
    net.run(w)
    a2f = [f for f in net.flows if f.spec.label.startswith("A2F l0 mb0 a3")]
    assert len(a2f) == 1 and a2f[0].spec.size_bytes == w._step_tokens[0][3][0] * 1024 * 2
    assert {f.spec.receiver for f in net.flows if f.spec.label.startswith("A2F")} == {"f0"}
    # FFN-bound pipeline: 3 micro-batches x 300 us per layer, 10 layers.
    assert w.metrics()["tpot_p50_ms"] == pytest.approx(10 * 3 * 0.3, rel=0.05)


@pytest.mark.parametrize("params,field", [({"model": "gpt-5"}, "model"),
                                          ({"a2f_bytes_per_elem": 3}, "a2f_bytes_per_elem"),
                                          ({"f2a_bytes_per_elem": True}, "f2a_bytes_per_elem"),
                                          ({"hidden_size": 0}, "hidden_size"), ({"layers": 0}, "layers"),
                                          ({"attention_op_us": 0}, "attention_op_us"), ({"ffn_op_us": -1}, "ffn_op_us"),
                                          ({"model": "qwen3-235b-a22b", "layers_simulated": 95}, "layers_simulated")])
def test_afd_bad_model_params(params, field):
    with pytest.raises(InvalidInput) as exc:
        AfdDecode(params, None)
    assert exc.value.field == f"workload.params.{field}"


@pytest.mark.parametrize("params,field", [({"n_attn": 0}, "n_attn"), ({"layers_simulated": 62}, "layers_simulated"),
                                          ({"time_compression": 0}, "time_compression"), ({"foo": 1}, "foo"),
                                          ({"decode_steps": 1}, "decode_steps")])
def test_afd_bad_params(params, field):
    with pytest.raises(InvalidInput) as exc:
        AfdDecode(params, None)
    assert field in exc.value.field


def test_afd_missing_hosts():
    topo = load_topology(TOPO / "zerobubble-pp.yaml")
    with pytest.raises(InvalidInput, match="no host 'a0'") as exc:
        AfdDecode({}, topo)
    assert exc.value.field == "workload.params.n_attn"
    with pytest.raises(InvalidInput, match="it has a0..a15, so n_attn must be in 1..16") as exc:
        AfdDecode({"n_attn": 17}, load_topology(TOPO / "afd-16a2f.yaml"))
    assert exc.value.field == "workload.params.n_attn"
    with pytest.raises(InvalidInput, match="n_ffn must be in 1..2") as exc:
        AfdDecode({"n_ffn": 3}, load_topology(TOPO / "afd-16a2f.yaml"))


def test_azure_trace_bad_rows(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,0\n")
    with pytest.raises(InvalidInput) as exc:
        load_trace(f)
    assert exc.value.field == "line 2, column GeneratedTokens"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,3\n")
    with pytest.raises(InvalidInput, match="TIMESTAMP"):
        load_trace(f)


# ---- background --------------------------------------------------------------------------

def test_bulk_flows_pair_round_robin_and_restart():
    bulk = BulkFlows(3, ["bg0", "bg1"], ["f0", "f1"], size_bytes=1_000_000)
    assert bulk.pairs == [("bg0", "f0"), ("bg1", "f1"), ("bg0", "f0")]
    net = IdealNetwork(rate_bps=8_000_000_000)  # 1 ms per flow
    bulk.start(net)
    net.run(until_ns=3_500_000)
    assert bulk.started == 3 * 4  # initial + 3 restarts each by 3.5 ms
    assert all(f.spec.flow_class == "background" and f.spec.no_bubble_ts_ns is None for f in net.flows)


@pytest.mark.parametrize("load", [0, -0.1, 1.5, True])
def test_poisson_load_must_be_in_0_1(load):
    dist = load_distribution("hpcc_WebSearch_distribution.txt")
    with pytest.raises(InvalidInput) as exc:
        PoissonArrivals(load, ["bg0"], {"f0": 10**11}, dist, random.Random(1))
    assert exc.value.field == "background.load"


def test_poisson_offered_load_matches_target():
    dist = load_distribution("homa_Google_SearchRPC.txt")
    src = PoissonArrivals(0.4, ["bg0", "bg1"], {"f0": 10**10}, dist, random.Random(5))
    net = IdealNetwork()
    src.start(net)
    horizon = 200_000_000  # 200 ms
    net.run(until_ns=horizon)
    offered_bps = sum(f.spec.size_bytes for f in net.flows) * 8 / (horizon / 1e9)
    assert offered_bps == pytest.approx(0.4 * 10**10, rel=0.15)


def test_build_workload_with_background(zb_topo):
    w = build_workload("zerobubble", {"microbatches": 4, "iterations": 1}, zb_topo, seed=3, background_flows=2,
                       load=0.2)
    net = IdealNetwork(zb_topo)
    net.run(w)
    assert w.done()
    bg = [f for f in net.flows if f.spec.flow_class == "background"]
    assert any(f.spec.label.startswith("bulk") for f in bg) and any(f.spec.label.startswith("poisson") for f in bg)
    assert all(f.spec.sender.startswith("bg") and f.spec.receiver.startswith("stage") for f in bg)
    assert "iteration_time_ms" in w.metrics()
    with pytest.raises(InvalidInput):
        build_workload("nope", {}, zb_topo)
    with pytest.raises(InvalidInput):
        build_workload("zerobubble", {}, zb_topo, load=1.5)


# ---- traces ------------------------------------------------------------------------------

EXAMPLE = ROOT / "controller/safs/data/traces/example-incast.csv"


def test_example_trace_runs_and_reports_misses():
    topo = load_topology(TOPO / "leaf-spine.yaml")
    w = build_workload("trace", {"path": str(EXAMPLE)}, topo)
    net = IdealNetwork(topo)
    net.run(w)
    assert w.done() and w.metrics()["trace_flows_done"] == 5
    starts = sorted(f.start_ns for f in net.flows)
    assert starts == [0, 100_000, 100_000, 100_000, 500_000]


def test_trace_csv_and_json_agree(tmp_path):
    flows = load_trace_file(EXAMPLE)
    rows = [{"start_ns": t, "sender": s.sender, "receiver": s.receiver, "bytes": s.size_bytes,
             "no_bubble_ts_ns": s.no_bubble_ts_ns, "label": s.label, "class": s.flow_class} for t, s in flows]
    j = tmp_path / "t.json"
    j.write_text(json.dumps(rows))
    assert load_trace_file(j) == flows


HEADER = "start_ns,sender,receiver,bytes,no_bubble_ts_ns,label,class\n"
BAD_TRACES = [
    ("x,h1,h0,10,5,l,pipeline\n", "line 2, column start_ns"),
    ("0,h1,h0,0,5,l,pipeline\n", "line 2, column bytes"),
    ("0,h1,h0,10,,l,pipeline\n", "line 2, column no_bubble_ts_ns"),
    ("0,h1,h0,10,-3,l,pipeline\n", "line 2, column no_bubble_ts_ns"),
    ("0,h1,h1,10,5,l,pipeline\n", "line 2, column receiver"),
    ("0,h1,h0,10,5,l,urgent\n", "line 2, column class"),
    ("0,h1,zz,10,5,l,pipeline\n", "line 2, column receiver"),
    ("0,h1,h0,10,5,l,pipeline\n0,h1,h0,10\n", "line 3"),
    # the 48-bit fabric clock: a start past 2^48 - 1 ns, a deadline 2^47 ns or more after the start
    (f"{2**48},h1,h0,10,{2**48 + 5},l,pipeline\n", "line 2, column start_ns"),
    (f"0,h1,h0,10,5,l,pipeline\n7,h1,h0,10,{7 + 2**47},l,pipeline\n", "line 3, column no_bubble_ts_ns"),
]


def test_trace_deadline_column_marks_firm_flows(tmp_path):
    f = tmp_path / "firm.csv"
    f.write_text(HEADER.rstrip() + ",deadline\n0,h1,h0,10,5,a,pipeline,firm\n1,h1,h0,10,5,b,pipeline,\n"
                 "2,h1,h0,10,,c,background,soft\n")
    assert [s.firm for _, s in load_trace_file(f)] == [True, False, False]
    for body in ("0,h1,h0,10,,c,background,firm\n", "0,h1,h0,10,5,a,pipeline,hard\n"):
        f.write_text(HEADER.rstrip() + ",deadline\n" + body)
        with pytest.raises(InvalidInput) as exc:
            load_trace_file(f)
        assert exc.value.field == "line 2, column deadline" and exc.value.source == str(f)


@pytest.mark.parametrize("body,field", BAD_TRACES)
def test_bad_trace_rows_name_line_and_column(tmp_path, body, field):
    f = tmp_path / "bad.csv"
    f.write_text(HEADER + body)
    with pytest.raises(InvalidInput) as exc:
        load_trace_file(f, hosts={"h0", "h1"})
    assert exc.value.field == field and exc.value.source == str(f)


def test_trace_limits_are_inclusive_where_they_should_be(tmp_path):
    f = tmp_path / "edge.csv"
    f.write_text(HEADER + f"{2**48 - 1},h1,h0,10,{2**48 - 1 + 2**47 - 1},l,pipeline\n")
    ((start, spec),) = load_trace_file(f)
    assert start == 2**48 - 1 and spec.no_bubble_ts_ns == 2**48 - 1 + 2**47 - 1


def test_empty_trace_and_flows_past_the_horizon_are_refused(tmp_path):
    for name, text in (("empty.csv", HEADER), ("empty.json", "[]")):
        f = tmp_path / name
        f.write_text(text)
        with pytest.raises(InvalidInput, match="no flows") as exc:
            load_trace_file(f)
        assert exc.value.field == "trace" and exc.value.source == str(f)
    f = tmp_path / "late.csv"
    f.write_text(HEADER + "0,h1,h0,10,5,a,pipeline\n1000000,h1,h0,10,1000005,b,pipeline\n")
    assert len(load_trace_file(f, horizon_ns=1_000_001)) == 2
    with pytest.raises(InvalidInput, match="max_time_ms") as exc:
        load_trace_file(f, horizon_ns=1_000_000)  # a flow starting at the horizon never runs
    assert exc.value.field == "line 3, column start_ns"


def test_bad_trace_header_and_json(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("start,sender\n1,2\n")
    with pytest.raises(InvalidInput, match="header lacks"):
        load_trace_file(f)
    j = tmp_path / "bad.json"
    j.write_text("{not json")
    with pytest.raises(InvalidInput, match="JSON"):
        load_trace_file(j)


def test_flowspec_validation():
    with pytest.raises(InvalidInput):
        FlowSpec("a", "a", 10, 5, "x")
    with pytest.raises(InvalidInput):
        FlowSpec("a", "b", 0, 5, "x")
    with pytest.raises(InvalidInput):
        FlowSpec("a", "b", 10, None, "x", "pipeline")
    assert FlowSpec("a", "b", 10, None, "x", "background").no_bubble_ts_ns is None
    assert transfer_ns(1250, 10**10) == 1000


def test_serial_instance_drops_old_ops_and_keeps_working() -> None:
    """Memory does not grow with the run: ops before the last started one are forgotten, while
    timing and no-bubble answers stay those of a full history."""
    from safs.experiments.workloads.instance import SerialInstance

    net = IdealNetwork()
    ends: list[int] = []
    inst = SerialInstance("x", net, lambda key, end: ends.append(end))
    for i in range(1_000):
        inst.add(i, 10, 0)
    net.run()
    assert ends == [10 * (i + 1) for i in range(1_000)]
    assert len(inst.ops) <= 70 and inst.has(999) and not inst.has(0)
    inst.add(1_000, 10, 1)  # waits for one input
    assert inst.ready_time(1_000) == net.now() and inst.no_bubble_ts(1_000, net.now(), 5) == net.now() + 5


# ---- dependencies declared at launch -------------------------------------------------------

def _declared_covers_every_transfer(w, net) -> set[tuple[str, str, str, str]]:
    declared = [(d.sender, d.receiver, d.name, d.flow_class) for d in w.dependencies()]
    assert len(declared) == len(set(declared))
    used = {(f.spec.sender, f.spec.receiver, f.spec.dependency_key(), f.spec.flow_class)
            for f in net.flows if f.spec.flow_class == "pipeline"}
    assert used and used <= set(declared)  # no transfer needs a digest to find its dependency
    return used


def test_zerobubble_declares_its_stage_pairs_and_warms_up_over_the_first_iteration(zb_topo):
    w = build_workload("zerobubble", {"stages": 4, "microbatches": 4, "iterations": 2}, zb_topo, background_flows=1)
    assert w.warmup_end_ns() is None  # not yet run
    net = IdealNetwork(zb_topo)
    net.run(w)
    used = _declared_covers_every_transfer(w, net)
    assert len(w.dependencies()) == len(used) == 2 * 3  # activations down, gradients up, 3 boundaries
    first = w.main.iteration_times_ns[0]
    assert w.warmup_end_ns() is not None and first <= w.warmup_end_ns() < sum(w.main.iteration_times_ns)


def test_afd_declares_a2f_and_f2a_and_warms_up_over_the_first_step(afd_topo):
    w = AfdDecode({"layers_simulated": 1, "decode_steps": 3}, afd_topo)
    net = IdealNetwork(afd_topo)
    net.run(w)
    used = _declared_covers_every_transfer(w, net)
    assert len(w.dependencies()) == 2 * len(w.attn) * len(w.ffn) == len(used)
    assert w.warmup_end_ns() == w.step_end_ns[0]


def test_trace_declares_one_dependency_per_pipeline_pair_and_has_no_warmup():
    topo = load_topology(TOPO / "leaf-spine.yaml")
    w = build_workload("trace", {"path": str(EXAMPLE)}, topo)
    net = IdealNetwork(topo)
    net.run(w)
    _declared_covers_every_transfer(w, net)
    assert w.warmup_end_ns() is None


def test_flowspec_dependency_names():
    spec = FlowSpec("a", "b", 10, 5, "x")
    assert spec.dependency_key() == "b/pipeline" == DependencySpec.of("a", "b").name
    assert FlowSpec("a", "b", 10, 5, "x", dependency="layer-kv").dependency_key() == "layer-kv"
    for bad in ("", 7):
        with pytest.raises(InvalidInput) as err:
            FlowSpec("a", "b", 10, 5, "x", dependency=bad)
        assert err.value.field == "flow.dependency"


@pytest.mark.parametrize("params,field", [({"model": ["llama-3-70b"]}, "model"), ({"trace": ["conv"]}, "trace")])
def test_afd_list_values_where_names_belong_are_refused(params, field):
    with pytest.raises(InvalidInput) as exc:
        AfdDecode(params, None)
    assert exc.value.field == f"workload.params.{field}"


@pytest.mark.parametrize("params,field", [({"schedule": ["zb-h1"]}, "schedule"), ({"model": ["1.5B"]}, "model")])
def test_zerobubble_list_values_where_names_belong_are_refused(zb_topo, params, field):
    with pytest.raises(InvalidInput) as exc:
        ZeroBubbleTraining(params, zb_topo)
    assert exc.value.field == f"workload.params.{field}"


# ---- fabric-scale transfers ----------------------------------------------------------------

def test_fabric_transfers_offer_the_bisection_load_and_the_deadline_rule():
    topo = load_topology(TOPO / "leaf-spine-64.yaml")
    hosts = topo.hosts()
    assert len(hosts) == 64
    # 64 x 100G hosts, 8 leaves x 4 x 400G uplinks: the hosts bind, B = 3.2 Tbit/s
    assert bisection_bps(topo, hosts) == 3.2e12
    w = FabricTransfers({"transfers": 4000, "offered_load": 0.6, "deadline_factor": 4.0, "deadline_slack_us": 10}, topo,
                        seed=3)
    sends = [t for t, _ in w.flows]
    offered = sum(s.size_bytes for _, s in w.flows) * 8 / ((sends[-1] - sends[0]) / 1e9)
    assert offered == pytest.approx(2 * 0.6 * 3.2e12, rel=0.1)
    for t, s in w.flows[:200]:
        assert s.sender != s.receiver and 10_000 <= s.size_bytes <= 2_000_000
        assert s.no_bubble_ts_ns - t == round(4.0 * topo.min_transfer_ns(s.sender, s.receiver, s.size_bytes)) + 10_000
    pairs = {(s.sender, s.receiver) for _, s in w.flows}
    assert {(d.sender, d.receiver) for d in w.dependencies()} == pairs
    again = FabricTransfers({"transfers": 4000, "offered_load": 0.6, "deadline_factor": 4.0, "deadline_slack_us": 10},
                            topo, seed=3)
    assert again.flows == w.flows  # one seed replays exactly
    # On the ideal network every transfer finishes, on time when alone.
    small = build_workload("fabric", {"transfers": 50, "offered_load": 0.05}, topo)
    net = IdealNetwork(topo)
    net.run(small)
    assert small.done() and small.metrics()["fabric_transfers_done"] == 50


def test_fabric_firm_marks_every_transfer_and_a_flow_spec_checks_it():
    topo = load_topology(TOPO / "leaf-spine-64.yaml")
    firm = build_workload("fabric", {"transfers": 20, "firm": True}, topo)
    soft = build_workload("fabric", {"transfers": 20}, topo)
    assert all(spec.firm for _, spec in firm.flows) and not any(spec.firm for _, spec in soft.flows)
    assert (firm.metrics()["fabric_firm"], soft.metrics()["fabric_firm"]) == (1.0, 0.0)  # in the run records
    assert [(t, s.size_bytes) for t, s in firm.flows] == [(t, s.size_bytes) for t, s in soft.flows]
    with pytest.raises(InvalidInput, match="flow.firm"):
        FlowSpec("h0", "h1", 10, None, "bulk", "background", firm=True)  # only a pipeline deadline can be firm
    with pytest.raises(InvalidInput, match="flow.firm"):
        FlowSpec("h0", "h1", 10, 5, "p", firm=1)  # type: ignore[arg-type]


def test_fabric_bisection_of_an_oversubscribed_fabric_is_the_core():
    topo = load_topology(TOPO / "leaf-spine-oversub.yaml")  # 4 x 200G uplinks, 20 x 100G hosts
    assert bisection_bps(topo, topo.hosts()) == 4 * 200e9 / 2


@pytest.mark.parametrize("params, field", [
    ({"offered_load": 0}, "offered_load"), ({"offered_load": 1.5}, "offered_load"),
    ({"deadline_factor": 1}, "deadline_factor"),
    ({"transfers": 0}, "transfers"), ({"hosts": ["h0"]}, "hosts"), ({"hosts": ["h0", "nope"]}, "hosts"),
    ({"min_bytes": 10, "max_bytes": 5}, "max_bytes"), ({"distribution": ""}, "distribution"),
    ({"distribution": "hpcc_WebSearch_distribution.txt", "max_bytes": 5}, "max_bytes"), ({"rate": 1}, "rate"),
    ({"firm": 1}, "firm"), ({"firm": "yes"}, "firm"),
])
def test_fabric_bad_params(params, field):
    topo = load_topology(TOPO / "leaf-spine-64.yaml")
    with pytest.raises(InvalidInput, match=f"workload.params.{field}"):
        build_workload("fabric", params, topo)


# ---- several jobs at once (kind: jobs) ----------------------------------------------------

TWO_JOBS = {"jobs": [
    {"name": "afd", "kind": "afd", "params": {"attention_hosts": ["a0", "a1", "a2", "a3"], "ffn_hosts": ["f0"],
                                              "layers_simulated": 1, "decode_steps": 3}},
    {"name": "train", "kind": "zerobubble", "params": {"stage_hosts": ["a8", "f0", "a9"], "microbatches": 3,
                                                       "iterations": 1}},
]}


def test_two_jobs_share_a_host_and_keep_their_own_metrics_labels_and_dependencies(afd_topo):
    w = build_workload("jobs", TWO_JOBS, afd_topo)
    net = IdealNetwork(afd_topo)
    net.run(w)
    m = w.metrics()
    assert w.done()
    alone = {"afd": AfdDecode(TWO_JOBS["jobs"][0]["params"], afd_topo),
             "train": ZeroBubbleTraining(TWO_JOBS["jobs"][1]["params"], afd_topo)}
    for job, ref in alone.items():
        IdealNetwork(afd_topo).run(ref)
        for key, value in ref.metrics().items():
            assert m[f"{job}.{key}"] == pytest.approx(value)  # no contention on the ideal network
        assert m[f"{job}.misses"] == 0 and m[f"{job}.late_max_us"] == 0
    labels = [f.spec.label for f in net.flows]
    assert m["afd.transfers"] == sum(x.startswith("afd: ") for x in labels) > 0
    assert m["train.transfers"] == sum(x.startswith("train: ") for x in labels) > 0
    assert m["afd.transfers"] + m["train.transfers"] == len(labels)
    assert {f.spec.receiver for f in net.flows if f.spec.label.startswith("train: ")} >= {"f0"}  # shared with afd
    deps = w.dependencies()
    assert {d.name.split(":")[0] for d in deps} == {"afd", "train"}
    assert all(f.spec.dependency_key() in {d.name for d in deps if d.sender == f.spec.sender} for f in net.flows)
    assert w.receivers() == ["f0", "a8", "a9"]  # AFD aims background at its FFN hosts, ZeroBubble at every stage


def test_a_late_transfer_counts_against_its_own_job(afd_topo):
    w = build_workload("jobs", TWO_JOBS, afd_topo)
    job = w.main.jobs[1]
    spec = FlowSpec("a8", "f0", 1000, 10_000, "x")
    job.finished(spec, 10_000 + 2_000)  # within the 2 us tolerance
    job.finished(spec, 10_000 + 7_000)
    m = w.metrics()
    assert (m["train.transfers"], m["train.misses"], m["train.late_max_us"]) == (2, 1, 7.0)
    assert m["afd.transfers"] == 0


@pytest.mark.parametrize("params, field", [
    ({"jobs": []}, "workload.params.jobs"),
    ({"jobs": [{"name": "a", "kind": "afd"}], "extra": 1}, "workload.params.extra"),
    ({"jobs": [{"name": "a b", "kind": "afd"}]}, "workload.params.jobs[0].name"),
    ({"jobs": [{"name": "a", "kind": "afd"}, {"name": "a", "kind": "zerobubble"}]}, "workload.params.jobs[1].name"),
    ({"jobs": [{"name": "a", "kind": "jobs"}]}, "workload.params.jobs[0].kind"),
    ({"jobs": [{"name": "a", "kind": "afd", "colour": 1}]}, "workload.params.jobs[0].colour"),
    ({"jobs": [{"kind": "afd"}]}, "workload.params.jobs[0].name"),
    ({"jobs": ["afd"]}, "workload.params.jobs[0]"),
    ({"jobs": [{"name": "a", "kind": "zerobubbel"}]}, "workload.params.jobs[0].kind"),
    ({"jobs": [{"name": "a", "kind": "afd", "params": {"attention_hosts": ["f0", "a1"]}}]},
     "workload.params.jobs[0].params.attention_hosts"),  # f0 is a default FFN host
    ({"jobs": [{"name": "a", "kind": "afd", "params": {"ffn_hosts": ["a0"]}}]},
     "workload.params.jobs[0].params.ffn_hosts"),  # a0 is a default attention host
    ({"jobs": [{"name": "a", "kind": "afd", "params": {"n_attn": 0}}]}, "workload.params.jobs[0].params.n_attn"),
    ({"jobs": [{"name": "a", "kind": "afd", "params": {"attention_hosts": ["a0", "nope"]}}]},
     "workload.params.jobs[0].params.attention_hosts"),
    ({"jobs": [{"name": "a", "kind": "afd", "params": {"attention_hosts": ["a0"], "n_attn": 2}}]},
     "workload.params.jobs[0].params.n_attn"),
    ({"jobs": [{"name": "a", "kind": "afd", "params": {"attention_hosts": ["f0"], "ffn_hosts": ["f0"]}}]},
     "workload.params.jobs[0].params.ffn_hosts"),
    ({"jobs": [{"name": "a", "kind": "zerobubble", "params": {"stage_hosts": ["a0"]}}]},
     "workload.params.jobs[0].params.stage_hosts"),
])
def test_bad_jobs_are_refused_naming_the_entry(afd_topo, params, field):
    with pytest.raises(InvalidInput) as exc:
        build_workload("jobs", params, afd_topo)
    assert exc.value.field == field

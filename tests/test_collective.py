"""Collective workloads: ring and tree schedules, all-to-all matrices, bandwidth bounds, the
closed loop on the ideal network, parameter errors, and the scenario's workload sweep."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from safs.core.errors import InvalidInput
from safs.core.topology import load_topology
from safs.experiments.runner import run_scenario
from safs.experiments.runs import expand
from safs.experiments.scenario import load_scenario
from safs.experiments.workloads.collective import (
    Collective,
    alltoall_matrix,
    level_fractions,
    ring_phase,
    tree_phase,
)
from safs.experiments.workloads.ideal import IdealNetwork

ROOT = Path(__file__).resolve().parents[1]
OVERSUB = load_topology(ROOT / "topologies" / "leaf-spine-oversub.yaml")
TOR = load_topology(ROOT / "topologies" / "afd-16a2f.yaml")
RANKS = [f"h{i}" for i in range(16)]


def test_ring_steps_chain_each_rank_to_its_left_neighbour():
    ranks = ["a", "b", "c", "d"]
    phase = ring_phase(ranks, 10, 3)
    assert len(phase) == 12 and Counter(t.src for t in phase) == {r: 3 for r in ranks}
    for t in phase:
        assert t.dst == ranks[(ranks.index(t.src) + 1) % 4]
        if t.level > 1:
            (dep,) = t.after
            assert phase[dep].dst == t.src and phase[dep].level == t.level - 1
    assert level_fractions(phase) == {1: 1 / 3, 2: 2 / 3, 3: 1.0}


def test_broadcast_trees_reach_every_rank_once_and_cross_each_tor_uplink_once():
    phase = tree_phase(RANKS, OVERSUB.tor_of, 100, reduce=False)
    for root in RANKS:
        tree = [t for t in phase if t.root == root]
        assert sorted(t.dst for t in tree) == sorted(r for r in RANKS if r != root)
        crossing = [t for t in tree if OVERSUB.tor_of(t.src) != OVERSUB.tor_of(t.dst)]
        assert len(crossing) == 3  # one per other leaf
        for t in tree:  # a forward waits for the shard to arrive
            assert all(phase[a].dst == t.src for a in t.after)
    # Leaders rotate: every rank sends and receives n-1 shards over all trees.
    assert Counter(t.src for t in phase) == {r: 15 for r in RANKS}
    assert Counter(t.dst for t in phase) == {r: 15 for r in RANKS}


def test_reduce_trees_send_to_the_root_after_all_children():
    phase = tree_phase(RANKS, OVERSUB.tor_of, 100, reduce=True)
    for root in RANKS:
        tree = [t for t in phase if t.root == root]
        assert sorted(t.src for t in tree) == sorted(r for r in RANKS if r != root)
        for t in tree:
            children = [phase[a] for a in t.after]
            assert all(c.dst == t.src for c in children)
            assert len(children) == sum(1 for x in tree if x.dst == t.src)


def test_alltoall_matrix_uniform_and_skewed():
    ranks = ["a", "b", "c", "d"]
    uniform = alltoall_matrix(ranks, 100.0, 0.0, 1)
    assert len(uniform) == 12 and set(uniform.values()) == {100}
    skewed = alltoall_matrix(ranks, 100.0, 1.0, 1)
    into = Counter()
    for (_, d), b in skewed.items():
        into[d] += b
    assert max(into.values()) > 2 * min(into.values())
    assert skewed == alltoall_matrix(ranks, 100.0, 1.0, 1) != alltoall_matrix(ranks, 100.0, 1.0, 2)


def test_bandwidth_bounds_follow_the_formulas():
    size = 16 << 20
    ag = Collective("allgather", {"size_bytes": size, "ranks": RANKS}, OVERSUB)
    # Access links bind an allgather even at 2:1: (n-1)/n S over 100G beats (n-k)/n S over 200G.
    assert ag.bounds_ns == [round(15 / 16 * size * 8e9 / 100e9)]
    ar = Collective("allreduce", {"size_bytes": size, "ranks": RANKS}, OVERSUB)
    assert ar.bounds_ns == [2 * ag.bounds_ns[0]]
    a2a = Collective("alltoall", {"ranks": RANKS, "tokens_per_rank": 128}, OVERSUB)
    share = 128 * 8 * 7168 / 16  # DeepSeek-V3 top-8, hidden 7168, FP8 dispatch
    # All-to-all crosses the uplinks: 4 ranks x 12 remote ranks x share out of each leaf at 200G.
    dispatch = round(4 * 12 * round(share) * 8e9 / 200e9)
    assert a2a.bounds_ns == [dispatch, 2 * dispatch]


@pytest.mark.parametrize("kind,algorithm", [("allgather", "ring"), ("allgather", "tree"), ("reduce-scatter", "ring"),
                                            ("reduce-scatter", "tree"), ("allreduce", "ring"),
                                            ("allreduce", "tree"), ("alltoall", "direct")])
def test_closed_loop_on_the_ideal_network_meets_every_timestamp(kind, algorithm):
    params = {"algorithm": algorithm, "iterations": 2, "ranks": RANKS}
    if kind != "alltoall":
        params["size_bytes"] = 4 << 20
    w = Collective(kind, params, OVERSUB)
    net = IdealNetwork(OVERSUB)
    net.run(w)
    assert w.done() and w.metrics()["collective_rounds"] == 2
    assert all(f.finish_ns <= f.spec.no_bubble_ts_ns for f in net.flows)
    if algorithm == "ring":
        # On a free network each ring step takes one chunk's uncontended time on its hop, and
        # the last chunk into rank i has crossed every hop but the one leaving i.
        hop = [OVERSUB.min_transfer_ns(f"h{i}", f"h{(i + 1) % 16}", (4 << 20) // 16) for i in range(16)]
        one_pass = sum(hop) - min(hop)
        if kind == "allreduce":  # two passes; the second starts where each rank's first ended
            one_pass = max(sum(hop[(j - k) % 16] for k in range(1, 31)) for j in range(16))
        assert w.round_times_ns == [one_pass] * 2
        assert 1.0 < w.metrics()["collective_ratio"] < 1.15


def test_allreduce_broadcast_waits_for_the_reduction():
    w = Collective("allreduce", {"size_bytes": 1 << 20, "algorithm": "tree", "ranks": RANKS}, OVERSUB)
    (phase,) = w.phases
    half = len(phase) // 2
    for t in phase[half:]:
        if t.src == t.root:
            assert {phase[a].dst for a in t.after} == {t.root} and len(t.after) > 0


@pytest.mark.parametrize("kind,params,field", [
    ("allgather", {"algorithm": "direct"}, "algorithm"), ("alltoall", {"algorithm": "ring"}, "algorithm"),
    ("allreduce", {"ranks": ["h0", "nope"]}, "ranks"), ("allreduce", {"ranks": ["h0"]}, "ranks"),
    ("allreduce", {"size_bytes": 0}, "size_bytes"), ("alltoall", {"skew": 5}, "skew"),
    ("alltoall", {"dispatch_bytes_per_elem": 4}, "dispatch_bytes_per_elem"),
    ("alltoall", {"combine_bytes_per_elem": 2.0}, "combine_bytes_per_elem"),
    ("alltoall", {"size_bytes": 1}, "size_bytes"), ("allgather", {"tokens_per_rank": 1}, "tokens_per_rank"),
])
def test_bad_collective_params_name_the_field(kind, params, field):
    with pytest.raises(InvalidInput) as exc:
        Collective(kind, params, OVERSUB)
    assert exc.value.field == f"workload.params.{field}"


SWEEP = """
name: sweep
topology: {topo}
workload: {{kind: allgather, params: {{iterations: 1, ranks: [a0, a1, a2, a3]}},
           sweep: {{size_bytes: [65536, 1048576], algorithm: [ring, tree]}}}}
policies: [safs, dctcp]
seeds: [1]
max_time_ms: 50
"""


def test_workload_sweep_runs_every_combination_and_records_it(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP.format(topo=ROOT / "topologies" / "afd-16a2f.yaml"))
    scenario = load_scenario(path)
    assert len(list(expand(scenario))) == 2 * 2 * 2
    records = run_scenario(scenario)
    assert {(r["size_bytes"], r["algorithm"], r["policy"]) for r in records} == {
        (s, a, p) for s in (65536, 1048576) for a in ("ring", "tree") for p in ("safs", "dctcp")}
    big = [r for r in records if r["size_bytes"] == 1048576]
    small = [r for r in records if r["size_bytes"] == 65536]
    assert min(r["collective_time_ms"] for r in big) > max(r["collective_time_ms"] for r in small)


@pytest.mark.parametrize("sweep,msg", [("{policy: [safs]}", "record key"), ("{size_bytes: []}", "at least one"),
                                       ("{size_bytes: [1, 1]}", "duplicate")])
def test_bad_sweeps_are_refused(tmp_path, sweep, msg):
    path = tmp_path / "s.yaml"
    text = SWEEP.format(topo=ROOT / "topologies" / "afd-16a2f.yaml")
    path.write_text(text.replace("{size_bytes: [65536, 1048576], algorithm: [ring, tree]}", sweep))
    with pytest.raises(InvalidInput, match=msg) as exc:
        load_scenario(path)
    assert "workload.sweep" in exc.value.field and "s.yaml" in str(exc.value)


def test_single_tor_trees_are_stars():
    w = Collective("allgather", {"algorithm": "tree", "ranks": ["a0", "a1", "a2"]}, TOR)
    assert all(t.src == t.root and t.level == 1 for t in w.phases[0])


def test_a_swept_parameter_also_set_in_params_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    text = SWEEP.format(topo=ROOT / "topologies" / "afd-16a2f.yaml")
    path.write_text(text.replace("{iterations: 1, ranks: [a0, a1, a2, a3]}",
                                 "{iterations: 1, ranks: [a0, a1, a2, a3], size_bytes: 1024}"))
    with pytest.raises(InvalidInput, match="also set in workload.params") as exc:
        load_scenario(path)
    assert exc.value.field == "workload.sweep.size_bytes"


@pytest.mark.parametrize("kind,params,field", [
    ("allgather", {"ranks": ["h0", ["h1"]]}, "ranks"), ("allgather", {"algorithm": ["ring"]}, "algorithm"),
])
def test_list_values_where_names_belong_are_refused(kind, params, field):
    with pytest.raises(InvalidInput) as exc:
        Collective(kind, params, OVERSUB)
    assert exc.value.field == f"workload.params.{field}"

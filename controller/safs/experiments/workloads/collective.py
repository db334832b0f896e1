"""Collective communication: MoE all-to-all, allreduce, allgather and reduce-scatter.

``kind: alltoall | allreduce | allgather | reduce-scatter`` (docs/workloads.md, "Collectives").
A run is ``iterations`` rounds of: every rank computes for ``compute_us``, then the collective
runs; the next round starts when every rank has its result (the compute the collective feeds
needs it: a training step's next layer or optimizer step, an MoE layer's experts).

Algorithms (``algorithm``):

* ``ring`` (allgather, reduce-scatter, allreduce): ranks in the order given, chunk ``S/n``;
  reduce-scatter and allgather take ``n-1`` steps each, allreduce both (``2(n-1)``). In step
  ``k`` rank ``r`` sends one chunk to ``r+1``; from step 1 on it needs the chunk of step ``k-1``
  from ``r-1`` first (reduction time is taken as 0: GPUs reduce at memory speed, far above a
  link's).
* ``tree`` (same three): one spanning tree per root rank, as ForestColl (arXiv 2402.06787)
  builds for switch topologies: the root's shard crosses each ToR's uplinks once. In the tree
  of root ``r`` (ToR ``T``), ``r`` sends to every other rank under ``T`` and to one leader
  under each other ToR, which forwards to the other ranks under its ToR. Leaders rotate with
  the root's position under its ToR, so every rank sends and receives ``n-1`` shards over all
  trees. Reduce-scatter runs the trees backwards (leaders reduce their ToR's contributions,
  then send one shard to the root); allreduce is reduce-scatter then allgather.
* all-to-all (MoE expert-parallel dispatch and combine; ``algorithm`` must be ``direct``):
  every rank holds ``tokens_per_rank`` tokens, each routed to ``top_k`` experts spread evenly
  over the ranks; rank ``s`` sends ``tokens * top_k * share(r) * hidden * dispatch_bytes`` to
  each ``r != s`` (dispatch), ``r`` runs its experts for ``expert_us`` once all of its dispatch
  has arrived, then returns ``combine_bytes / dispatch_bytes`` times as much (combine). Expert
  load shares: uniform (``skew`` 0) or Zipf with exponent ``skew`` over a seeded permutation of
  the ranks (rank-level load imbalance, as with popular experts). Defaults from DeepSeek-V3's
  configuration (hidden_size 7168, num_experts_per_tok 8) at the decode batch of DeepEP's
  low-latency benchmark (128 tokens per rank, FP8 dispatch, BF16 combine;
  deepseek-ai/DeepEP README, as we read it).

No-bubble timestamp: a collective that finishes at its bandwidth bound ``B`` (below) has its
busiest access link carry its bytes at line rate from the start, so level ``l`` (ring step,
tree depth; all-to-all: 1 per phase) is done by ``start + f(l) * B``, ``f(l)`` the share of
that link's bytes at levels <= l (:func:`level_fractions`: ``l/L`` for a ring). A transfer of
level ``l`` is due then (its consumer, the next level's send or the compute the collective
feeds, could start then), never earlier than its own uncontended arrival
(:meth:`Topology.min_transfer_ns` from its send time).

Bandwidth bound (:func:`bandwidth_bound_ns`): the largest, over every rank's access link (in and
out) and every ToR's uplinks (in and out, the links the installed routes use), of the bytes
the collective must move across it divided by its rate. Allgather of ``S`` (each rank ends with
all ``S``, contributing ``S/n``): a rank receives ``(n-1)S/n``; a ToR with ``k`` ranks receives
``(n-k)S/n`` and sends ``kS/n``. Reduce-scatter: the mirror image. Allreduce: the sum of the
two bounds (``2(n-1)S/(nB)`` on access links of rate B, the classic bound for reduction at the
hosts, Patarasuk and Yuan, JPDC 2009). All-to-all: each phase's byte matrix summed per cut.
Latency is not included, so small messages sit far above the bound.

Metrics: ``collective_time_ms`` (mean over rounds: from the first send to the last rank's
result; all-to-all: dispatch plus combine), ``collective_bound_ms``, ``collective_ratio``
(time / bound), ``collective_rounds``. Samples: ``collective_time_ms`` per round.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from safs.core.errors import InvalidInput
from safs.experiments.workloads.api import DependencySpec, FlowSpec, WorkloadAPI
from safs.experiments.workloads.params import check_known, float_param, int_param

COLLECTIVES = ("alltoall", "allreduce", "allgather", "reduce-scatter")
ALGORITHMS = {"alltoall": ("direct",), "allreduce": ("ring", "tree"), "allgather": ("ring", "tree"),
              "reduce-scatter": ("ring", "tree")}
DEEPSEEK_V3_HIDDEN = 7168  # deepseek-ai/DeepSeek-V3 config.json, hidden_size
DEEPSEEK_V3_TOP_K = 8  # config.json, num_experts_per_tok
DEEPEP_DECODE_TOKENS = 128  # DeepEP README, low-latency kernels: 128 tokens per batch (as we read it)


@dataclass(frozen=True)
class Transfer:
    """One transfer of a collective: ``size`` bytes ``src -> dst`` at ``level`` (1-based), sent
    once every transfer in ``after`` (indices into the same phase) has arrived; ``root``: the
    tree it belongs to (tree algorithms), else empty."""

    src: str
    dst: str
    size: int
    level: int
    after: tuple[int, ...]
    root: str = ""


def ring_phase(ranks: list[str], chunk: int, steps: int) -> list[Transfer]:
    """``steps`` ring steps: in step k rank i sends ``chunk`` bytes to rank i+1, after the step
    k-1 transfer into rank i. Pure. Returns transfers in (step, rank) order."""
    n = len(ranks)
    out: list[Transfer] = []
    for k in range(steps):
        for i in range(n):
            after = ((k - 1) * n + (i - 1) % n,) if k else ()
            out.append(Transfer(ranks[i], ranks[(i + 1) % n], chunk, k + 1, after))
    return out


def _tree_edges(ranks: list[str], tor_of: Callable[[str], str], root: str) -> list[tuple[str, str, int]]:
    """The broadcast tree of ``root``: (parent, child, depth) edges (see module docstring)."""
    groups: dict[str, list[str]] = {}
    for r in ranks:
        groups.setdefault(tor_of(r), []).append(r)
    home = tor_of(root)
    position = groups[home].index(root)
    edges = [(root, r, 1) for r in groups[home] if r != root]
    for tor, members in groups.items():
        if tor == home:
            continue
        leader = members[position % len(members)]
        edges.append((root, leader, 1))
        edges += [(leader, r, 2) for r in members if r != leader]
    return edges


def tree_phase(ranks: list[str], tor_of: Callable[[str], str], shard: int, reduce: bool) -> list[Transfer]:
    """All n spanning trees; broadcast (allgather) or, with ``reduce``, the same trees
    backwards (reduce-scatter: a leader sends to the root after all its children). Pure."""
    out: list[Transfer] = []
    for root in ranks:
        edges = _tree_edges(ranks, tor_of, root)
        depth = max((d for _, _, d in edges), default=1)
        base = len(out)
        if not reduce:
            index = {child: base + i for i, (_, child, _) in enumerate(edges)}
            for parent, child, d in edges:
                after = (index[parent],) if parent in index else ()
                out.append(Transfer(parent, child, shard, d, after, root))
        else:
            # Deepest edges first: a child's contribution reaches its parent before the parent
            # sends on. Level counts from the leaves (depth d -> level depth - d + 1).
            ordered = sorted(edges, key=lambda e: -e[2])
            index = {child: base + i for i, (_, child, _) in enumerate(ordered)}
            for parent, child, d in ordered:
                after = tuple(index[c] for p, c, _ in ordered if p == child)
                out.append(Transfer(child, parent, shard, depth - d + 1, after, root))
    return out


def level_fractions(transfers: list[Transfer]) -> dict[int, float]:
    """Level -> the share of the bandwidth bound by which that level must be done: the most
    loaded access link's (in or out) bytes at levels <= l over its bytes at all levels. Ring
    steps get equal shares; a tree's first level the root's share. Pure."""
    levels = sorted({t.level for t in transfers})
    load: dict[tuple[str, str], dict[int, int]] = {}
    for t in transfers:
        for end in (("out", t.src), ("in", t.dst)):
            per = load.setdefault(end, {})
            per[t.level] = per.get(t.level, 0) + t.size
    total = max(sum(per.values()) for per in load.values())
    return {lv: max(sum(b for lvl, b in per.items() if lvl <= lv) for per in load.values()) / total
            for lv in levels}


def alltoall_matrix(ranks: list[str], bytes_per_share: float, skew: float, seed: int) -> dict[tuple[str, str], int]:
    """Dispatch bytes ``(src, dst) -> bytes`` for ``src != dst``: each rank sends
    ``bytes_per_share * n * share(dst)``, shares uniform (``skew`` 0) or Zipf(``skew``) over a
    permutation drawn from ``random.Random("alltoall:<seed>")``. Pure."""
    n = len(ranks)
    if skew == 0:
        shares = [1.0 / n] * n
    else:
        order = list(range(n))
        random.Random(f"alltoall:{seed}").shuffle(order)
        weights = [1.0 / (order[i] + 1) ** skew for i in range(n)]
        shares = [w / sum(weights) for w in weights]
    return {(s, d): max(1, round(bytes_per_share * n * shares[j]))
            for s in ranks for j, d in enumerate(ranks) if s != d}


def bandwidth_bound_ns(topology: Any, link_bytes: dict[tuple[str, str], int]) -> int:
    """Largest (bytes across a cut) / (its rate) over every access link and ToR uplink set.

    Args:
        topology: the run's Topology.
        link_bytes: cut -> bytes, cut = ``("in", host)``, ``("out", host)``, ``("in", tor)``,
            ``("out", tor)`` (a ToR's cut is its uplinks that the routes between the ranks use).

    Returns:
        The bound in ns (0 for no bytes).
    """
    worst = 0.0
    for (_, node), size in link_bytes.items():
        rate = topology.host_link_bps(node) if topology.is_host(node) else _uplink_bps(topology, node)
        if rate:
            worst = max(worst, size * 8e9 / rate)
    return round(worst)


def _uplink_bps(topology: Any, tor: str) -> int:
    """Sum of the rates of ``tor``'s links to other switches that some route leaves it by."""
    used = {topology.neighbor_at(tor, port)
            for dst in topology.hosts() if topology.tor_of(dst) != tor
            for port in topology.next_hop_ports(tor, dst)}
    return sum(topology.link(tor, nxt)["rate_bps"] for nxt in used)


def _cuts(topology: Any, pairs: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """Bytes per cut for a set of (src, dst) -> bytes that must cross the network as given."""
    cuts: dict[tuple[str, str], int] = {}
    for (s, d), size in pairs.items():
        cuts[("out", s)] = cuts.get(("out", s), 0) + size
        cuts[("in", d)] = cuts.get(("in", d), 0) + size
        ts, td = topology.tor_of(s), topology.tor_of(d)
        if ts != td:
            cuts[("out", ts)] = cuts.get(("out", ts), 0) + size
            cuts[("in", td)] = cuts.get(("in", td), 0) + size
    return cuts


def gather_cuts(topology: Any, ranks: list[str], size: int, reduce: bool) -> dict[tuple[str, str], int]:
    """Minimum bytes per cut of an allgather (``reduce`` False) or reduce-scatter of ``size``
    bytes (module docstring)."""
    n = len(ranks)
    shard = size / n
    per_tor: dict[str, int] = {}
    for r in ranks:
        per_tor[topology.tor_of(r)] = per_tor.get(topology.tor_of(r), 0) + 1
    big, small = ("out", "in") if reduce else ("in", "out")
    cuts = {}
    for r in ranks:
        cuts[(big, r)] = round((n - 1) * shard)
        cuts[(small, r)] = round(shard)
    if len(per_tor) > 1:
        for tor, k in per_tor.items():
            cuts[(big, tor)] = round((n - k) * shard)
            cuts[(small, tor)] = round(k * shard)
    return cuts


class Collective:
    """Rounds of one collective over ``ranks`` (see module docstring).

    Params (``workload.params``): ranks (list of host names; default every host not named
    ``bg*``, in topology order; 2..1024 of them), size_bytes (allreduce: the vector on each rank;
    allgather: the gathered output; reduce-scatter: the input; 1..2^34; default 4 MiB),
    algorithm (ring | tree; alltoall: direct), iterations (rounds, 1..1000, default 3),
    compute_us (before each round, (0, 10^6], default 50), alltoall only: tokens_per_rank
    (1..65536, default 128), hidden_size (64..65536, default 7168), top_k (1..64, default 8),
    dispatch_bytes_per_elem (1 or 2, default 1), combine_bytes_per_elem (1, 2 or 4, default 2),
    expert_us ((0, 10^6], default 50), skew (Zipf exponent in [0, 4], default 0).

    Raises:
        InvalidInput: a bad parameter or a rank missing from the topology (naming the field).
    """

    COMMON = {"ranks", "iterations", "compute_us", "algorithm"}
    KNOWN = {
        "alltoall": COMMON | {"tokens_per_rank", "hidden_size", "top_k", "dispatch_bytes_per_elem",
                              "combine_bytes_per_elem", "expert_us", "skew"},
        "allreduce": COMMON | {"size_bytes"}, "allgather": COMMON | {"size_bytes"},
        "reduce-scatter": COMMON | {"size_bytes"},
    }

    def __init__(self, kind: str, params: dict[str, Any], topology: Any, seed: int = 1) -> None:
        if kind not in COLLECTIVES:
            raise InvalidInput("workload.kind", f"must be one of {', '.join(COLLECTIVES)}, got {kind!r}")
        check_known(params, self.KNOWN[kind])
        if topology is None:
            raise InvalidInput("topology", "a collective workload needs a topology")
        self.kind = kind
        self.topology = topology
        self.seed = seed
        ranks = params.get("ranks", [h for h in topology.hosts() if not h.startswith("bg")])
        if (not isinstance(ranks, list) or not all(isinstance(r, str) for r in ranks) or not 2 <= len(ranks) <= 1024
                or len(set(ranks)) != len(ranks)):
            raise InvalidInput("workload.params.ranks", f"must be a list of 2..1024 distinct host names, got {ranks!r}")
        for r in ranks:
            if not topology.is_host(r):
                raise InvalidInput("workload.params.ranks", f"topology {topology.name!r} has no host {r!r}")
        self.ranks = list(ranks)
        algorithm = params.get("algorithm", ALGORITHMS[kind][0])
        if not isinstance(algorithm, str) or algorithm not in ALGORITHMS[kind]:
            raise InvalidInput("workload.params.algorithm",
                               f"{kind} supports {', '.join(ALGORITHMS[kind])}, got {algorithm!r}")
        self.algorithm = algorithm
        self.iterations = int_param(params, "iterations", 3, 1, 1000)
        self.compute_ns = round(float_param(params, "compute_us", 50.0, 0.0, 1e6) * 1000)
        self.phases: list[list[Transfer]] = []
        self.phase_gap_ns: list[int] = []  # compute between phases (all-to-all: the experts)
        cuts: list[dict[tuple[str, str], int]] = []
        n = len(self.ranks)
        if kind == "alltoall":
            tokens = int_param(params, "tokens_per_rank", DEEPEP_DECODE_TOKENS, 1, 65536)
            hidden = int_param(params, "hidden_size", DEEPSEEK_V3_HIDDEN, 64, 65536)
            top_k = int_param(params, "top_k", DEEPSEEK_V3_TOP_K, 1, 64)
            d_elem = params.get("dispatch_bytes_per_elem", 1)
            c_elem = params.get("combine_bytes_per_elem", 2)
            if type(d_elem) is not int or d_elem not in (1, 2):
                raise InvalidInput("workload.params.dispatch_bytes_per_elem", f"must be 1 or 2, got {d_elem!r}")
            if type(c_elem) is not int or c_elem not in (1, 2, 4):
                raise InvalidInput("workload.params.combine_bytes_per_elem", f"must be 1, 2 or 4, got {c_elem!r}")
            skew = params.get("skew", 0.0)
            if isinstance(skew, bool) or not isinstance(skew, (int, float)) or not 0 <= skew <= 4:
                raise InvalidInput("workload.params.skew", f"must be a number in [0, 4], got {skew!r}")
            expert_ns = round(float_param(params, "expert_us", 50.0, 0.0, 1e6) * 1000)
            share = tokens * top_k * hidden * d_elem / n
            dispatch = alltoall_matrix(self.ranks, share, float(skew), seed)
            combine = {(d, s): b * c_elem // d_elem for (s, d), b in dispatch.items()}
            for matrix in (dispatch, combine):
                self.phases.append([Transfer(s, d, b, 1, ()) for (s, d), b in matrix.items()])
                cuts.append(_cuts(topology, matrix))
            self.phase_gap_ns = [expert_ns]
        else:
            size = int_param(params, "size_bytes", 4 << 20, 1, 1 << 34)
            chunk = max(1, size // n)
            steps = {"allgather": [False], "reduce-scatter": [True], "allreduce": [True, False]}[kind]
            for reduce in steps:
                if algorithm == "ring":
                    self.phases.append(ring_phase(self.ranks, chunk, n - 1))
                else:
                    self.phases.append(tree_phase(self.ranks, topology.tor_of, chunk, reduce))
                cuts.append(gather_cuts(topology, self.ranks, size, reduce))
            if kind == "allreduce":  # one collective: RS then AG, no compute between
                rs, ag = self.phases
                top = max(t.level for t in rs)
                self.phases = [rs + [Transfer(t.src, t.dst, t.size, t.level + top,
                                              tuple(i + len(rs) for i in t.after), t.root) for t in ag]]
                self._chain_allreduce()
        self.fractions = [level_fractions(phase) for phase in self.phases]
        self.bounds_ns = [bandwidth_bound_ns(topology, c) for c in cuts]
        if kind == "allreduce":  # reduce-scatter's bound plus allgather's: 2(n-1)S/(nB) per access link
            self.bounds_ns = [sum(self.bounds_ns)]
        self.round_times_ns: list[int] = []
        self._api: WorkloadAPI | None = None

    def _chain_allreduce(self) -> None:
        """In an allreduce the allgather part of rank r starts only once r holds its reduced
        shard. Ring: the first allgather step of rank i waits for the last reduce-scatter
        transfer into i. Tree: root r's broadcast waits for every reduction into r of r's tree."""
        fixed = list(self.phases[0])
        half = len(fixed) // 2
        n = len(self.ranks)
        if self.algorithm == "ring":
            for i in range(n):
                t = fixed[half + i]
                fixed[half + i] = Transfer(t.src, t.dst, t.size, t.level, ((n - 2) * n + (i - 1) % n,))
        else:
            into_root: dict[str, list[int]] = {}
            for i, t in enumerate(fixed[:half]):
                if t.dst == t.root:
                    into_root.setdefault(t.root, []).append(i)
            for j in range(half, len(fixed)):
                t = fixed[j]
                if not t.after:  # the root's own sends
                    fixed[j] = Transfer(t.src, t.dst, t.size, t.level, tuple(into_root[t.root]), t.root)
        self.phases[0] = fixed

    # -- closed loop -----------------------------------------------------------------------
    def receivers(self) -> list[str]:
        """Every rank receives."""
        return list(self.ranks)

    def start(self, api: WorkloadAPI) -> None:
        self._api = api
        self._round = 0
        api.call_at(api.now() + self.compute_ns, self._start_round)

    def _start_round(self) -> None:
        self._net_ns = 0  # network time of the round's finished phases
        self._phase = 0
        self._start_phase()

    def _start_phase(self) -> None:
        api = self._api
        transfers = self.phases[self._phase]
        self._phase_start = api.now()
        self._waiting = [len(t.after) for t in transfers]
        self._dependents: dict[int, list[int]] = {}
        for i, t in enumerate(transfers):
            for a in t.after:
                self._dependents.setdefault(a, []).append(i)
        self._left = len(transfers)
        for i, t in enumerate(transfers):
            if not t.after:
                self._send(i)

    def _send(self, i: int) -> None:
        api = self._api
        t = self.phases[self._phase][i]
        now = api.now()
        due = self._phase_start + round(self.bounds_ns[self._phase] * self.fractions[self._phase][t.level])
        deadline = max(due, now + self.topology.min_transfer_ns(t.src, t.dst, t.size))
        spec = FlowSpec(t.src, t.dst, t.size, deadline,
                        f"{self.kind} r{self._round} p{self._phase} l{t.level} {t.src}->{t.dst}", "pipeline")
        api.start_flow(spec, lambda _t, i=i: self._arrived(i))

    def _arrived(self, i: int) -> None:
        self._left -= 1
        for j in self._dependents.get(i, []):
            self._waiting[j] -= 1
            if self._waiting[j] == 0:
                self._send(j)
        if self._left:
            return
        api = self._api
        if self._phase + 1 < len(self.phases):
            self._net_ns += api.now() - self._phase_start
            gap = self.phase_gap_ns[self._phase]
            self._phase += 1
            api.call_at(api.now() + gap, self._start_phase)
            return
        self.round_times_ns.append(self._net_ns + api.now() - self._phase_start)
        self._round += 1
        if self._round < self.iterations:
            api.call_at(api.now() + self.compute_ns, self._start_round)

    def done(self) -> bool:
        return len(self.round_times_ns) >= self.iterations

    def dependencies(self) -> list[DependencySpec]:
        """Every (src, dst) pair the collective uses, known at launch."""
        pairs = sorted({(t.src, t.dst) for phase in self.phases for t in phase})
        return [DependencySpec.of(s, d) for s, d in pairs]

    def warmup_end_ns(self) -> int | None:
        return None

    def samples(self) -> dict[str, list[float]]:
        """``collective_time_ms``: each round's network time (ms)."""
        return {"collective_time_ms": [v / 1e6 for v in self.round_times_ns]}

    def metrics(self) -> dict[str, float]:
        n = len(self.round_times_ns)
        mean = sum(self.round_times_ns) / n if n else float("nan")
        bound = sum(self.bounds_ns)
        return {
            "collective_time_ms": mean / 1e6,
            "collective_bound_ms": bound / 1e6,
            "collective_ratio": mean / bound if n and bound else float("nan"),
            "collective_rounds": float(n),
        }

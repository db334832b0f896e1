"""Per-seed compute-time jitter: the evaluation's source of run-to-run randomness.

Without it the only thing a seed changes is the switches' boot offsets, so repeated runs of
the AFD and ZeroBubble workloads are nearly identical and confidence intervals over seeds
are degenerate. With workload parameter ``compute_jitter: j`` (default 0 = off, and then
nothing here is called) every op's duration is its nominal duration times ``1 + u``, with
``u`` uniform in ``[-j, +j]``.

``u`` is drawn from a stream keyed by (seed, instance, op key), not from one shared stream,
so an op gets the same duration under every policy and on the ideal network (common random
numbers: policies are compared on the same draws, and the order in which the network makes
ops start does not change them). The uniform shape and its width are our assumption of
kernel-time variation between iterations, not a measured distribution (docs/evaluation.md).
"""

from __future__ import annotations

import random
from collections.abc import Hashable

from safs.core.errors import InvalidInput

MAX_JITTER = 0.5


def jittered_ns(nominal_ns: int, jitter: float, seed: int, instance: str, key: Hashable) -> int:
    """``nominal_ns * (1 + u)``, ``u ~ U[-jitter, jitter]`` keyed by (seed, instance, key); >= 1 ns.

    Args:
        nominal_ns: the op's nominal duration (ns).
        jitter: half-width of the relative variation, in [0, MAX_JITTER] (checked by the caller's
            parameter parsing); 0 returns ``nominal_ns`` unchanged.
        seed: the run's seed. instance: the host running the op. key: the op's key (its
            ``repr`` is hashed, so it must be stable: tuples of ints and strings, dataclasses).
    """
    if jitter == 0:
        return nominal_ns
    # random.Random seeded with a str hashes it with SHA-512: the same across processes.
    u = random.Random(f"{seed}|{instance}|{key!r}").uniform(-jitter, jitter)
    return max(1, round(nominal_ns * (1.0 + u)))


def jitter_param(params: dict) -> float:
    """The ``compute_jitter`` workload parameter (default 0), a number in [0, MAX_JITTER].

    Raises:
        InvalidInput: field ``workload.params.compute_jitter``, not a number in range.
    """
    v = params.get("compute_jitter", 0.0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= MAX_JITTER:
        raise InvalidInput("workload.params.compute_jitter", f"must be a number in [0, {MAX_JITTER}], got {v!r}")
    return float(v)

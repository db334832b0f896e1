"""Per-run metrics from flow records (FCT, deadline misses) and summary helpers.

Percentiles use numpy's default (linear interpolation between closest ranks); every percentile
is reported together with its sample count so p99 of a handful of samples is not over-read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

NS_PER_MS = 1_000_000
# A pipeline transfer counts as a deadline miss when it finishes more than this after its
# no-bubble timestamp. A consumer that is already idle gets a timestamp equal to the
# transfer's uncontended arrival (Topology.min_transfer_ns), which a paced sender holding
# back the allocation headroom (5%, the first default) missed by about 1 us on a 26 us transfer; 2 us, three
# 9000-byte frame times at 100 Gbit/s, is the packet-level model's timing resolution.
MISS_TOLERANCE_NS = 2_000


@dataclass(frozen=True)
class FlowRecord:
    """One flow's outcome: times in ns (fabric time, not wrapped), ``finish_ns`` None if unfinished."""

    flow_id: int
    label: str
    flow_class: str  # "pipeline" | "background"
    sender: str
    receiver: str
    size_bytes: int
    start_ns: int
    finish_ns: int | None
    no_bubble_ts_ns: int | None

    @property
    def missed(self) -> bool:
        """True for a flow with a no-bubble timestamp that finished more than
        :data:`MISS_TOLERANCE_NS` after it, or not at all."""
        return self.missed_by(MISS_TOLERANCE_NS)

    def missed_by(self, tolerance_ns: int) -> bool:
        """True for a flow with a no-bubble timestamp that finished more than ``tolerance_ns``
        after it, or not at all."""
        if self.no_bubble_ts_ns is None:
            return False
        return self.finish_ns is None or self.finish_ns > self.no_bubble_ts_ns + tolerance_ns

    @property
    def fct_ns(self) -> int | None:
        return None if self.finish_ns is None else self.finish_ns - self.start_ns


def percentile_ms(values_ns: Sequence[int], q: float) -> float:
    """The q-th percentile (0..100) of ns values, in ms; NaN when there are none."""
    if len(values_ns) == 0:
        return float("nan")
    return float(np.percentile(np.asarray(values_ns, dtype=np.float64), q)) / NS_PER_MS


# Short flows: under 100 KB, the "small flows" of pFabric (Alizadeh et al., SIGCOMM 2013,
# section 5: (0, 100KB]) and Homa's evaluation; the allocation issue's background target uses it.
SHORT_FLOW_BYTES = 100_000


def mean_ms(values_ns: Sequence[int]) -> float:
    """Mean of ns values in ms; NaN when there are none."""
    return float(np.mean(values_ns)) / NS_PER_MS if len(values_ns) else float("nan")


def flow_metrics(records: Iterable[FlowRecord], miss_tolerance_ns: int = MISS_TOLERANCE_NS) -> dict[str, float]:
    """Deadline misses and FCT statistics of pipeline and background flows.

    A miss is a pipeline flow later than ``miss_tolerance_ns`` past its no-bubble timestamp
    (default :data:`MISS_TOLERANCE_NS`; a scenario's ``miss_tolerance_us`` sets it per run).

    Returns keys: ``pipeline_flows``, ``pipeline_deadline_misses``, ``pipeline_unfinished``,
    ``pipeline_late_p99_ms`` (p99 over finished pipeline flows of how late they were, 0 for
    those on time: how much the misses cost, not only how many), ``pipeline_late_max_ms`` (the
    largest of those),
    ``pipeline_fct_mean_ms``, ``pipeline_fct_p50_ms``, ``pipeline_fct_p99_ms``, ``background_flows_finished``,
    ``background_fct_mean_ms``, ``background_fct_p99_ms``, and the same two of background flows
    under :data:`SHORT_FLOW_BYTES` (``background_short_fct_mean_ms``,
    ``background_short_fct_p99_ms``). Background FCTs count finished flows only (persistent
    bulk flows never finish by design).
    """
    pipeline = [r for r in records if r.flow_class == "pipeline"]
    background = [r for r in records if r.flow_class != "pipeline"]
    p_fct = [r.fct_ns for r in pipeline if r.fct_ns is not None]
    p_late = [max(0, r.finish_ns - r.no_bubble_ts_ns) for r in pipeline
              if r.finish_ns is not None and r.no_bubble_ts_ns is not None]
    b_fct = [r.fct_ns for r in background if r.fct_ns is not None]
    b_short = [r.fct_ns for r in background if r.fct_ns is not None and r.size_bytes < SHORT_FLOW_BYTES]
    return {
        "pipeline_flows": len(pipeline),
        "pipeline_deadline_misses": sum(r.missed_by(miss_tolerance_ns) for r in pipeline),
        "pipeline_unfinished": sum(r.finish_ns is None for r in pipeline),
        "pipeline_late_p99_ms": percentile_ms(p_late, 99),
        "pipeline_late_max_ms": max(p_late) / NS_PER_MS if p_late else float("nan"),
        "pipeline_fct_mean_ms": mean_ms(p_fct),
        "pipeline_fct_p50_ms": percentile_ms(p_fct, 50),
        "pipeline_fct_p99_ms": percentile_ms(p_fct, 99),
        "background_flows_finished": len(b_fct),
        "background_fct_mean_ms": mean_ms(b_fct),
        "background_fct_p99_ms": percentile_ms(b_fct, 99),
        "background_short_fct_mean_ms": mean_ms(b_short),
        "background_short_fct_p99_ms": percentile_ms(b_short, 99),
    }

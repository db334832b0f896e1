"""Flow metrics: deadline misses and FCT statistics."""

from __future__ import annotations

import math

from safs.experiments.metrics import MISS_TOLERANCE_NS, SHORT_FLOW_BYTES, FlowRecord, flow_metrics


def _rec(fid: int, cls: str, start: int, finish: int | None, deadline: int | None) -> FlowRecord:
    return FlowRecord(fid, "l", cls, "a", "b", 1000, start, finish, deadline)


def test_misses_count_late_and_unfinished_pipeline_flows_only() -> None:
    records = [
        _rec(1, "pipeline", 0, 100 + MISS_TOLERANCE_NS, 100),  # on time within the tolerance
        _rec(2, "pipeline", 0, 101 + MISS_TOLERANCE_NS, 100),  # late
        _rec(3, "pipeline", 0, None, 100),  # unfinished
        _rec(4, "background", 0, 5_000_000, None),
        _rec(5, "background", 0, None, None),  # persistent bulk flow
    ]
    m = flow_metrics(records)
    assert m["pipeline_flows"] == 3
    assert m["pipeline_deadline_misses"] == 2
    assert m["pipeline_unfinished"] == 1
    assert math.isclose(m["pipeline_fct_mean_ms"], (100.5 + MISS_TOLERANCE_NS) * 1e-6)
    assert (100 + MISS_TOLERANCE_NS) * 1e-6 <= m["pipeline_fct_p50_ms"] <= (101 + MISS_TOLERANCE_NS) * 1e-6
    assert 0 < m["pipeline_late_p99_ms"] <= (1 + MISS_TOLERANCE_NS) / 1e6  # at most flow 2's lateness
    assert m["pipeline_late_p99_ms"] <= m["pipeline_late_max_ms"] == (1 + MISS_TOLERANCE_NS) / 1e6
    assert m["background_flows_finished"] == 1
    assert math.isclose(m["background_fct_mean_ms"], 5.0)


def test_no_samples_gives_nan_not_zero() -> None:
    m = flow_metrics([])
    assert m["pipeline_flows"] == 0
    assert math.isnan(m["pipeline_fct_p99_ms"])


def test_miss_tolerance_is_a_parameter() -> None:
    """A scenario's miss_tolerance_us widens what counts as on time (emulated fabrics)."""
    late_by_1ms = [_rec(1, "pipeline", 0, 1_000_100, 100)]
    assert flow_metrics(late_by_1ms)["pipeline_deadline_misses"] == 1
    assert flow_metrics(late_by_1ms, miss_tolerance_ns=1_000_000)["pipeline_deadline_misses"] == 0
    assert flow_metrics(late_by_1ms, miss_tolerance_ns=999_999)["pipeline_deadline_misses"] == 1


def test_short_background_fcts_count_finished_background_flows_under_100_kb_only() -> None:
    def bg(fid: int, size: int, finish: int | None) -> FlowRecord:
        return FlowRecord(fid, "l", "background", "a", "b", size, 0, finish, None)

    records = [bg(1, SHORT_FLOW_BYTES - 1, 1_000_000), bg(2, SHORT_FLOW_BYTES - 1, 3_000_000),
               bg(3, SHORT_FLOW_BYTES, 9_000_000), bg(4, 10, None),
               FlowRecord(5, "l", "pipeline", "a", "b", 10, 0, 50_000_000, 60_000_000)]
    m = flow_metrics(records)
    assert math.isclose(m["background_short_fct_mean_ms"], 2.0)  # flows 1 and 2 only
    assert 1.0 <= m["background_short_fct_p99_ms"] <= 3.0
    assert math.isclose(m["background_fct_mean_ms"], 13 / 3)
    assert math.isnan(flow_metrics(records[2:])["background_short_fct_mean_ms"])

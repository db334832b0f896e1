"""D2TCP own-paper check (safs.experiments.eval.checks.d2tcp): a tiny run of the check's machinery, the
report's fields, and bad setups."""

from __future__ import annotations

import dataclasses

import pytest

from safs.core.errors import InvalidInput
from safs.experiments.eval.checks import d2tcp as check

# Two 1 MB responses per round, no background flows, deadlines U[0.6, 2.0] x the round's
# line-rate time: a tight response (< 1x) cannot make it at DCTCP's fair share (both finish
# near 1x) but can if the lax one yields, which is exactly what D2TCP's gamma correction does.
TWO_DEADLINES = check.FanInSetup(fan_in=2, trees=2, bulk_flows=0, size_range=(1_000_000, 1_000_000),
                                 deadline_factors=(0.6, 2.0), rounds=6, seed=1)


@pytest.fixture(scope="module")
def report() -> dict:
    return check.run_check(setup=TWO_DEADLINES)


def test_report_has_the_check_fields(report: dict) -> None:
    for key in ("baseline", "metric", "paper_value", "measured", "deviation", "setup", "source",
                "missed_fraction_dctcp", "missed_fraction_d2tcp", "missed_fraction_floor", "reduction_per_seed",
                "deadline_flows", "wall_s"):
        assert key in report, key
    assert report["baseline"] == "d2tcp"
    assert report["paper_value"] == check.PAPER_VALUE
    assert report["deadline_flows"] == TWO_DEADLINES.fan_in * TWO_DEADLINES.rounds
    assert report["reduction_per_seed"] and len(report["reduction_per_seed"]) == 1
    assert report["deviation"] == pytest.approx(report["measured"] / check.PAPER_VALUE - 1.0)
    assert "fan-in 2" in report["setup"] and "seed 1" in report["setup"]


def test_fractions_are_fractions_and_deadline_awareness_helps(report: dict) -> None:
    dctcp, d2tcp = report["missed_fraction_dctcp"], report["missed_fraction_d2tcp"]
    assert 0.0 <= d2tcp <= 1.0 and 0.0 < dctcp <= 1.0  # the case has tight deadlines DCTCP misses
    assert d2tcp <= dctcp
    assert report["measured"] == pytest.approx(1.0 - d2tcp / dctcp)
    assert report["measured"] <= 1.0


def test_one_shared_deadline_per_tree() -> None:
    setup = dataclasses.replace(TWO_DEADLINES, fan_in=4, trees=2, rounds=1)
    starts: list = []

    class Api:
        def now(self) -> int:
            return 0

        def start_flow(self, spec, on_done) -> int:
            starts.append(spec)
            return len(starts)

    check.FanInRounds(setup).start(Api())
    assert len(starts) == 4
    assert (
        starts[0].no_bubble_ts_ns == starts[2].no_bubble_ts_ns
        and starts[1].no_bubble_ts_ns == starts[3].no_bubble_ts_ns
    )
    assert all(s.no_bubble_ts_ns > 0 for s in starts)


@pytest.mark.parametrize(
    "field, value",
    [
        ("fan_in", 0),
        ("trees", 0),
        ("trees", 11),
        ("bulk_flows", -1),
        ("size_range", (0, 10)),
        ("size_range", (10, 5)),
        ("deadline_factors", (0.0, 1.0)),
        ("deadline_factors", (2.0, 1.0)),
        ("rounds", 0),
        ("initial_alpha", 1.5),
        ("round_gap_ns", -1),
    ],
)
def test_bad_setup_names_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidInput) as err:
        dataclasses.replace(check.CHECK_SETUP, **{field: value})
    assert err.value.field == field

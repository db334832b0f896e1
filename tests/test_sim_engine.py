"""Engine: time order, FIFO tie-break, determinism, horizon and stop, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safs.core.errors import InvalidInput
from safs.experiments.sim.engine import Engine


def test_events_run_in_time_order_with_fifo_ties() -> None:
    eng = Engine()
    seen: list[tuple[int, str]] = []
    for t, tag in [(30, "c"), (10, "a"), (30, "d"), (20, "b"), (10, "a2")]:
        eng.at(t, lambda arg: seen.append((eng.now, arg)), tag)
    eng.run(100)
    assert seen == [(10, "a"), (10, "a2"), (20, "b"), (30, "c"), (30, "d")]
    assert eng.events == 5


def test_after_is_relative_and_callbacks_can_schedule() -> None:
    eng = Engine()
    times: list[int] = []

    def hop(n: int) -> None:
        times.append(eng.now)
        if n:
            eng.after(7, hop, n - 1)

    eng.at(5, hop, 3)
    eng.run(1000)
    assert times == [5, 12, 19, 26]


def test_run_stops_at_horizon_and_resumes() -> None:
    eng = Engine()
    seen: list[int] = []
    for t in (10, 20, 30):
        eng.at(t, seen.append, t)
    assert eng.run(20) == 20
    assert seen == [10, 20] and eng.pending() == 1
    eng.run(25)
    assert eng.now == 25 and seen == [10, 20]
    eng.run(30)
    assert seen == [10, 20, 30] and eng.events == 3


def test_stop_returns_after_current_event() -> None:
    eng = Engine()
    seen: list[int] = []

    def cb(t: int) -> None:
        seen.append(t)
        if t == 2:
            eng.stop()

    for t in (1, 2, 3):
        eng.at(t, cb, t)
    assert eng.run(10) == 2
    assert seen == [1, 2] and eng.pending() == 1


def test_past_and_negative_times_are_refused() -> None:
    eng = Engine()
    eng.at(10, lambda _: None)
    eng.run(10)
    with pytest.raises(InvalidInput) as err:
        eng.at(5, lambda _: None)
    assert err.value.field == "t_ns"
    with pytest.raises(InvalidInput) as err:
        eng.after(-1, lambda _: None)
    assert err.value.field == "dt_ns"
    assert eng.pending() == 0  # nothing half-scheduled


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=40), st.integers(0, 2**31))
def test_same_seed_same_trace(times: list[int], seed: int) -> None:
    def trace() -> list[tuple[int, int, float]]:
        eng = Engine(seed)
        out: list[tuple[int, int, float]] = []
        for i, t in enumerate(times):
            eng.at(t, lambda i: out.append((eng.now, i, eng.rng.random())), i)
        eng.run(100)
        return out

    a, b = trace(), trace()
    assert a == b
    assert [t for t, _, _ in a] == sorted(times)
    # FIFO among equal times: indices at one time appear in insertion order.
    for t in set(times):
        idx = [i for tt, i, _ in a if tt == t]
        assert idx == sorted(idx)

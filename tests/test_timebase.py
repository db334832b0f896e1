"""48-bit fabric time: wraparound properties of safs.core.timebase."""

from hypothesis import given, settings
from hypothesis import strategies as st

from safs.core.timebase import HALF, TIME_MOD, before, diff, key_to_slack, slack_key, slack_to_key, wrap

t48 = st.integers(0, TIME_MOD - 1)
anyint = st.integers(-(1 << 70), 1 << 70)
# Distances that compare unambiguously: |d| < 2^47.
dist = st.integers(-HALF + 1, HALF - 1)
SETTINGS = settings(max_examples=200, deadline=None)


@SETTINGS
@given(anyint)
def test_wrap_is_mod_2_48(t):
    assert 0 <= wrap(t) < TIME_MOD
    assert wrap(t) == t % TIME_MOD
    assert wrap(wrap(t)) == wrap(t)


@SETTINGS
@given(t48, dist)
def test_diff_recovers_distance_across_wrap(a, d):
    b = wrap(a + d)  # may cross 2^48 either way
    assert diff(b, a) == d
    assert before(a, b) == (d > 0)


@SETTINGS
@given(t48, t48)
def test_diff_antisymmetric(a, b):
    d = diff(a, b)
    assert -HALF <= d < HALF
    if d != -HALF:  # -2^47 has no positive counterpart in 48 bits
        assert diff(b, a) == -d
        # exactly one of two distinct times is earlier
        assert before(a, b) != before(b, a) if a != b else not before(a, b)
    assert wrap(b + d) == a


def test_wrap_crossing_2_48_examples():
    just_before, just_after = TIME_MOD - 5, 7  # 12 ns apart across the wrap
    assert diff(just_after, just_before) == 12
    assert before(just_before, just_after)
    assert not before(just_after, just_before)


@SETTINGS
@given(t48, dist, dist)
def test_slack_key_monotonic_in_signed_slack(now, s1, s2):
    k1 = slack_key(wrap(now + s1), now)
    k2 = slack_key(wrap(now + s2), now)
    assert 0 <= k1 < TIME_MOD
    assert (k1 < k2) == (s1 < s2)
    assert key_to_slack(k1) == s1


@SETTINGS
@given(st.integers(-(1 << 60), 1 << 60))
def test_slack_to_key_clamps_and_inverts(s):
    k = slack_to_key(s)
    assert 0 <= k < TIME_MOD
    assert key_to_slack(k) == max(-HALF, min(HALF - 1, s))


def test_negative_slack_sorts_most_urgent():
    now = TIME_MOD - 100  # near the wrap on purpose
    late = slack_key(wrap(now - 1), now)
    on_time = slack_key(now, now)
    early = slack_key(wrap(now + 10**9), now)
    assert late < on_time < early

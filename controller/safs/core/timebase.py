"""48-bit nanosecond fabric time.

Protocol timestamps are nanoseconds of the fabric clock modulo 2^48 (about 3.26 days) and are
compared by signed difference (RFC 1982-style serial arithmetic): ``a`` is before ``b`` when
``diff(a, b) < 0``. Source: ../shared/BRIEF.md, "Design decisions / Time".
"""

from __future__ import annotations

import time

TIME_BITS = 48
TIME_MOD = 1 << TIME_BITS  # 2^48 ns
TIME_MASK = TIME_MOD - 1
HALF = 1 << (TIME_BITS - 1)  # 2^47 ns: the largest distance that compares unambiguously


def fabric_clock() -> int:
    """Fabric time now on a host or controller: the wall clock in ns, modulo 2^48
    (``time.time_ns()``; hosts of one fabric keep their wall clocks in sync, e.g. with PTP)."""
    return time.time_ns() & TIME_MASK


def wrap(t_ns: int) -> int:
    """Reduce a time in ns (any integer, e.g. a host clock) to 48 bits: ``t mod 2^48``."""
    return t_ns & TIME_MASK


def diff(a_ns: int, b_ns: int) -> int:
    """Signed difference ``a - b`` of two 48-bit times, in ns, in ``[-2^47, 2^47)``."""
    d = (a_ns - b_ns) & TIME_MASK
    return d - TIME_MOD if d >= HALF else d


def before(a_ns: int, b_ns: int) -> bool:
    """True when 48-bit time ``a`` is strictly earlier than ``b`` (wraparound-safe)."""
    return diff(a_ns, b_ns) < 0


def slack_key(latest_start_ns: int, now_ns: int) -> int:
    """Range-match key for slack, as the switch computes it (one subtraction, one XOR).

    slack = latest_start - now (mod 2^48); flipping bit 47 maps signed slack onto unsigned
    order, so negative (late) slack sorts lowest = most urgent. Returns a 48-bit unsigned key.
    """
    return ((latest_start_ns - now_ns) & TIME_MASK) ^ HALF


def slack_to_key(slack_ns: int) -> int:
    """Key for a signed slack in ns, clamped to ``[-2^47, 2^47-1]``; inverse of :func:`key_to_slack`."""
    s = max(-HALF, min(HALF - 1, slack_ns))
    return (s & TIME_MASK) ^ HALF


def key_to_slack(key: int) -> int:
    """Signed slack in ns for a 48-bit range-match key."""
    return diff(key ^ HALF, 0)

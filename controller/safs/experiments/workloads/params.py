"""Checked workload parameters: one error format for every workload.

Errors are :class:`safs.core.errors.InvalidInput` on field ``workload.params.<key>`` with the allowed
range; the runner adds the scenario file.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from safs.core.errors import InvalidInput


def check_known(params: dict[str, Any], known: Iterable[str]) -> None:
    """Raise InvalidInput for the first key of ``params`` not in ``known`` (listing them)."""
    allowed = sorted(known)
    for key in params:
        if key not in allowed:
            raise InvalidInput(f"workload.params.{key}", f"unknown parameter; allowed: {', '.join(allowed)}")


def int_param(params: dict[str, Any], key: str, default: int, lo: int, hi: int) -> int:
    """``params[key]`` (or ``default``) as an integer in ``lo..hi`` inclusive."""
    v = params.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InvalidInput(f"workload.params.{key}", f"must be an integer in {lo}..{hi}, got {v!r}")
    return v


def float_param(params: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    """``params[key]`` (or ``default``) as a number in ``(lo, hi]``."""
    v = params.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo < v <= hi:
        raise InvalidInput(f"workload.params.{key}", f"must be a number in ({lo}, {hi}], got {v!r}")
    return float(v)

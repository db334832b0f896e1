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


def bool_param(params: dict[str, Any], key: str, default: bool) -> bool:
    """``params[key]`` (or ``default``) as true or false (nothing else: 0, 1 and "yes" are refused)."""
    v = params.get(key, default)
    if type(v) is not bool:
        raise InvalidInput(f"workload.params.{key}", f"must be true or false, got {v!r}")
    return v


def hosts_param(params: dict[str, Any], key: str, default: list[str], topology: Any, count_key: str,
                lo: int, hi: int) -> list[str]:
    """``params[key]`` (or ``default``): a list of ``lo..hi`` distinct host names of ``topology``
    (when given). ``count_key``, the workload's count parameter, must then be absent or equal
    the list's length (one of the two says how many)."""
    if key not in params:
        return default
    v = params[key]
    if (not isinstance(v, list) or not lo <= len(v) <= hi or len(set(v)) != len(v)
            or not all(isinstance(h, str) and h for h in v)):
        raise InvalidInput(f"workload.params.{key}", f"must be a list of {lo}..{hi} distinct host names, got {v!r}")
    if count_key in params and params[count_key] != len(v):
        raise InvalidInput(f"workload.params.{count_key}",
                           f"is {params[count_key]!r} but {key} lists {len(v)} hosts; give one of the two")
    if topology is not None:
        missing = next((h for h in v if not topology.is_host(h)), None)
        if missing is not None:
            raise InvalidInput(f"workload.params.{key}", f"topology {topology.name!r} has no host {missing!r}")
    return v

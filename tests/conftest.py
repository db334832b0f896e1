"""Test tiers: the default run needs only Python. Tests marked ``p4c``, ``bmv2``, ``mininet`` or
``root`` are skipped, with the missing piece named, where that piece is absent."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest


def _missing(marker: str) -> str | None:
    if marker == "p4c" and not shutil.which("p4c-bm2-ss"):
        return "needs the P4 compiler: p4c-bm2-ss is not on PATH"
    if marker == "bmv2" and not shutil.which("simple_switch_grpc"):
        return "needs BMv2: simple_switch_grpc is not on PATH"
    if marker == "root" and os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs)"
    if marker == "mininet":
        if os.geteuid() != 0:
            return "needs root for Mininet"
        if not shutil.which("mn"):
            return "needs Mininet: mn is not on PATH (apt-get install mininet)"
        if not shutil.which("ethtool"):  # the emulator turns veth offloads off with it
            return "needs ethtool for Mininet's veths: not on PATH (apt-get install ethtool)"
        spec = importlib.util.find_spec("mininet")  # a namespace package (this repo's mininet/) does not count
        if spec is None or not (spec.origin or "").endswith("__init__.py"):
            return ("needs Mininet's Python package in this environment: link Debian's into the venv "
                    "(README, 'Mininet')")
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in ("p4c", "bmv2", "root", "mininet"):
            if item.get_closest_marker(marker):
                reason = _missing(marker)
                if reason:
                    item.add_marker(pytest.mark.skip(reason=reason))

"""Test tiers: the default run needs only Python. Tests marked ``p4c``, ``bmv2``, ``mininet`` or
``root`` are skipped, with the missing piece named, where that piece is absent."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
from two_tors import TOPO_YAML

from safs.testing.fake_p4rt import FakeP4RuntimeServer


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


# ---------------------------------------------------------------------------- shared fixtures
# of the controller tests (test_controller_app, test_controller_state, test_tls)


@pytest.fixture
def topo_file(tmp_path: Path) -> Path:
    """The two-ToR test topology (tests/two_tors.py) written to a file."""
    path = tmp_path / "topo.yaml"
    path.write_text(TOPO_YAML)
    return path


@pytest.fixture
def servers():
    """Two in-process fake P4Runtime switches, tor0 (device 0) and tor1 (device 3), started."""
    fakes = {"tor0": FakeP4RuntimeServer(), "tor1": FakeP4RuntimeServer(device_id=3)}
    for fake in fakes.values():
        fake.start()
    yield fakes
    for fake in fakes.values():
        fake.stop()

"""BMv2 tier: run the PTF suite (ptf_tests/) against simple_switch_grpc through its runner.

Skipped, naming what is missing, without simple_switch_grpc or root (tests/conftest.py).
The runner creates veth pairs, starts the switch with 8 priority queues, waits for its gRPC port,
runs PTF and always cleans up; its log directory is printed in the output on failure.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUNNER = REPO / "ptf_tests" / "run.py"
PTF_TESTS = 25  # test classes in ptf_tests/ (docs/dataplane.md, "PTF suite"): none may go missing


@pytest.mark.bmv2
@pytest.mark.root
def test_ptf_suite_passes_on_bmv2() -> None:
    if importlib.util.find_spec("ptf") is None:
        pytest.skip("needs PTF: pip install ptf (0.12.0)")
    # Expected packets get 10 s each (busy CI cores); the whole run takes about 45 s on the shared
    # 2-core machine, 60-90 s with two more CPU-bound processes; the bound only stops a hung run.
    proc = subprocess.run([sys.executable, str(RUNNER), "--test-timeout", "10"],
                          capture_output=True, text=True, timeout=600, cwd=str(REPO),
                          env={**os.environ, "PYTHONPATH": ""})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    ran = re.search(r"Ran (\d+) tests?", out)
    assert ran and int(ran.group(1)) >= PTF_TESTS and "\nOK" in out, out[-3000:]

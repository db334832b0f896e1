"""The `safs` command line: a small end-to-end run, and one clear line for each user error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from safs.cli import main

ROOT = Path(__file__).resolve().parents[1]
TOPO = ROOT / "topologies" / "zerobubble-pp.yaml"


def _scenario(tmp_path: Path, workload: str = "{kind: zerobubble, params: {stages: 2, microbatches: 2, iterations: 1}}",
              extra: str = "") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: tiny\ntopology: {TOPO}\nworkload: {workload}\n"
                    f"background: {{bulk_flows: [0, 1]}}\n{extra}")
    return path


def test_run_prints_a_table_and_writes_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["run", "--quiet", "--out", str(out), str(_scenario(tmp_path))]) == 0
    text = capsys.readouterr().out
    assert "tiny" in text and "safs" in text and "dctcp" in text
    records = json.loads((out / "results.json").read_text())
    assert len(records) == 2 * 2  # bulk flows x policies
    for r in records:
        assert r["target"] == "sim" and r["iterations_done"] == 1
        assert r["iteration_time_ms"] >= r["iteration_time_ideal_ms"] * 0.99
    assert (out / "results.csv").read_text().startswith("scenario,target,policy")


@pytest.mark.parametrize("args, needle", [
    (["--policies", "safs,nope"], "--policies: unknown policy 'nope'"),
    (["--out", "/proc/no/such/dir"], "--out: cannot write results"),
])
def test_bad_options_fail_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         args: list[str], needle: str) -> None:
    assert main(["run", "--quiet", *args, str(_scenario(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("workload, extra, needle", [
    ("{kind: zerobubble, params: {stages: 1}}", "", "workload.params.stages"),
    ("{kind: zerobubble, params: {bogus: 1}}", "", "workload.params.bogus"),
    ("{kind: zerobubble}", "policies: [safs, foo]\n", "unknown policy 'foo'"),
    ("{kind: zerobubble}", "sim: {mtu_bytes: 10}\n", "sim.mtu_bytes"),
    ("{kind: zerobubble}", "max_time_ms: '100'\n", "max_time_ms"),
])
def test_bad_scenario_names_file_and_key_and_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          workload: str, extra: str, needle: str) -> None:
    good = tmp_path / "good"
    good.mkdir()
    out = tmp_path / "out"
    bad = _scenario(tmp_path, workload, extra)
    # The good scenario comes first: the bad one must still fail before anything runs.
    assert main(["run", "--quiet", "--out", str(out), str(_scenario(good)), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and needle in err and "Traceback" not in err
    assert not (out / "results.json").exists()


def test_binary_trace_file_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"\x00\x01\xff\xfe")
    assert main(["run", "--quiet", str(_scenario(tmp_path, f"{{kind: trace, params: {{path: {trace}}}}}"))]) == 2
    err = capsys.readouterr().err
    assert "not UTF-8" in err and str(trace) in err

"""Sweeps in a process pool or on Ray give the same records and samples as the serial run
(apart from wall time), in the same order; errors in workers come back as InvalidInput."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from safs.core.errors import InvalidInput
from safs.experiments.eval.experiments import EXPERIMENTS, run_check
from safs.experiments.parallel import check_jobs, default_jobs, map_ordered
from safs.experiments.runner import run_scenario_outputs

VOLATILE = {"wall_time_s"}  # the only fields allowed to differ between executors


def _scenario(seeds: list[int], bulk: list[int]):
    # ZeroBubble at smoke size with per-seed compute jitter, so seeds really differ.
    return EXPERIMENTS["zerobubble"].load(quick=True, overrides={
        "policies": ["safs", "dctcp"], "seeds": seeds, "background": {"bulk_flows": bulk}})


def _stable(outputs) -> list[str]:
    # JSON text, so NaN (no samples) compares equal to NaN
    return [json.dumps([{k: v for k, v in o.record.items() if k not in VOLATILE}, o.samples], sort_keys=True)
            for o in outputs]


def test_pool_matches_serial_in_order() -> None:
    scenario = _scenario([1, 2], [0, 2])
    serial = run_scenario_outputs(scenario, jobs=1)
    seen: list[int] = []
    pooled = run_scenario_outputs(scenario, jobs=2, progress=lambda spec: seen.append(spec.seed))
    assert len(serial) == 8 and len(seen) == 8
    assert _stable(pooled) == _stable(serial)
    # The seeds matter (compute jitter): otherwise this test could not tell runs apart.
    by_seed = {o.record["seed"]: o.record["iteration_time_ms"] for o in serial
               if o.record["policy"] == "safs" and o.record["background_flows"] == 0}
    assert by_seed[1] != by_seed[2]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray (pip install 'safs[ray]')")
def test_ray_matches_serial() -> None:
    scenario = _scenario([1, 2], [2])
    serial = run_scenario_outputs(scenario, jobs=1)
    try:
        on_ray = run_scenario_outputs(scenario, ray_address="local")  # a private local Ray, shut down after
    except InvalidInput as err:
        # Ray gives its raylet a fixed 30 s to register; once, in a full CI run on 2 cores, it
        # did not (no raylet log at all). That is Ray's start-up, not what this test checks:
        # start it once more, and fail if it fails again.
        if "timed out during startup" not in err.message:
            raise
        import ray  # noqa: PLC0415 (optional; the skipif above checked it is there)
        ray.shutdown()  # what the failed start left running
        on_ray = run_scenario_outputs(scenario, ray_address="local")
    assert _stable(on_ray) == _stable(serial)


def test_worker_invalid_input_is_reraised() -> None:
    with pytest.raises(InvalidInput) as err:
        map_ordered(run_check, [("no_such_baseline", True), ("another_missing", True)], jobs=2)
    assert err.value.field == "baseline-checks"
    assert "safs.experiments.eval.checks." in err.value.message


@pytest.mark.parametrize("jobs", [0, -3, True, 1.5])
def test_bad_jobs_named(jobs) -> None:
    with pytest.raises(InvalidInput) as err:
        check_jobs(jobs)
    assert err.value.field == "--jobs"


def test_default_jobs_is_cpu_count() -> None:
    assert check_jobs(None) == default_jobs() >= 1


def test_run_refuses_bad_jobs_before_any_run(tmp_path, capsys) -> None:
    from safs.apps.cli import main

    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "zerobubble.yaml"
    assert main(["run", str(scenario), "--jobs", "0", "--out", str(tmp_path / "out")]) == 2
    assert "--jobs: must be an integer >= 1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

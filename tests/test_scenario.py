"""Scenario files: shipped ones load; bad ones give one error naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from safs.core.errors import InvalidInput
from safs.experiments.runner import run_scenario
from safs.experiments.runs import build_run, expand
from safs.experiments.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "topo.yaml").write_text("name: t\n")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


GOOD = """
name: demo
topology: topo.yaml
workload: {kind: zerobubble, params: {stages: 4}}
background: {bulk_flows: [0, 2], load: 0.0}
policies: [safs, dctcp]
seeds: [1, 2]
"""


def test_good_scenario_expands_to_every_combination(tmp_path: Path) -> None:
    scenario = load_scenario(_write(tmp_path, GOOD))
    runs = list(expand(scenario))
    assert len(runs) == 2 * 2 * 2
    assert {(r.background_flows, r.policy, r.seed) for r in runs} == {
        (b, p, s) for b in (0, 2) for p in ("safs", "dctcp") for s in (1, 2)}
    assert scenario.topology_path() == (tmp_path / "topo.yaml").resolve()


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_load(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.policies and scenario.seeds


@pytest.mark.parametrize("mutation, key", [
    ("seeds: [1, 2]", "seeds"),
    ("workload: {kind: nope}", "workload.kind"),
    ("background: {bulk_flows: [-1]}", "background.bulk_flows"),
    ("background: {load: 1.5}", "background.load"),
    ("repetitions: 0", "repetitions"),
    ("colour: blue", "colour"),
    ("topology: missing.yaml", "topology"),
    ("miss_tolerance_us: -1", "miss_tolerance_us"),
])
def test_bad_values_name_the_file_and_key(tmp_path: Path, mutation: str, key: str) -> None:
    text = GOOD
    field = mutation.split(":")[0]
    lines = [ln for ln in text.splitlines() if not ln.startswith(field + ":")]
    if mutation.startswith("seeds"):
        lines.append("seeds: []")
    else:
        lines.append(mutation)
    path = _write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(InvalidInput) as info:
        load_scenario(path)
    assert str(path) in str(info.value)
    assert info.value.field.startswith(key)


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="not valid YAML"):
        load_scenario(_write(tmp_path, "name: [unclosed\n"))
    with pytest.raises(InvalidInput, match="mapping"):
        load_scenario(_write(tmp_path, "- a\n- b\n"))
    with pytest.raises(InvalidInput, match="cannot read"):
        load_scenario(tmp_path / "absent.yaml")


@pytest.mark.parametrize("line, field, needle", [
    ("seeds: [-1]", "seeds", "must be integers >= 0, got -1"),
    ("seeds: [1, 2, 1]", "seeds", "duplicate seed 1"),
    ("policies: [safs, dctcp, safs]", "policies", "duplicate policy 'safs'"),
])
def test_negative_or_repeated_seeds_and_repeated_policies_refused(tmp_path: Path, line: str, field: str,
                                                                  needle: str) -> None:
    # A repeated seed would count the same runs twice and narrow the confidence intervals.
    key = line.split(":")[0]
    text = "\n".join(ln for ln in GOOD.splitlines() if not ln.startswith(key + ":")) + f"\n{line}\n"
    with pytest.raises(InvalidInput) as info:
        load_scenario(_write(tmp_path, text))
    assert info.value.field == field and needle in info.value.message


def _trace_scenario(tmp_path: Path, max_time_ms: float, start_ns: int) -> Path:
    """A trace scenario on the shipped leaf-spine with one 1 MB flow starting at ``start_ns``."""
    trace = tmp_path / "t.csv"
    trace.write_text("start_ns,sender,receiver,bytes,no_bubble_ts_ns,label\n"
                     f"{start_ns},h1,h0,1000000,{start_ns + 50_000},x\n")
    path = tmp_path / "trace.yaml"
    path.write_text(f"name: tr\ntopology: {ROOT / 'topologies' / 'leaf-spine.yaml'}\n"
                    f"workload: {{kind: trace, params: {{path: t.csv}}}}\npolicies: [dctcp]\n"
                    f"max_time_ms: {max_time_ms}\n")
    return path


def test_a_trace_flow_after_max_time_is_refused_naming_the_trace(tmp_path: Path) -> None:
    scenario = load_scenario(_trace_scenario(tmp_path, 1, 2_000_000))
    with pytest.raises(InvalidInput, match="max_time_ms") as err:
        build_run(scenario, next(expand(scenario)))
    assert err.value.source == str(tmp_path / "t.csv") and err.value.field == "line 2, column start_ns"


def test_a_run_ending_before_its_workload_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    scenario = load_scenario(_trace_scenario(tmp_path, 0.05, 0))  # 50 us: the 1 MB flow is not done
    (record,) = run_scenario(scenario)
    assert record["workload_done"] is False and record["pipeline_unfinished"] == 1
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert str(tmp_path / "trace.yaml") in warning.getMessage() and "max_time_ms 0.05" in warning.getMessage()
    caplog.clear()
    (record,) = run_scenario(load_scenario(_trace_scenario(tmp_path, 5, 0)))
    assert record["workload_done"] is True and not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_key_given_twice_is_refused_naming_its_line(tmp_path: Path) -> None:
    """PyYAML keeps the last of two equal keys; a scenario (or topology, or --scheduler-config)
    with one would silently run with the second value."""
    path = tmp_path / "dup.yaml"
    path.write_text("name: dup\nworkload:\n  kind: afd\n  kind: zerobubble\n")
    with pytest.raises(InvalidInput, match=r"line 4, column 3: not valid YAML: key 'kind' given twice") as err:
        load_scenario(path)
    assert err.value.source == str(path)

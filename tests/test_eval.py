"""safs eval: experiment registry, statistics, output files, per-seed jitter, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from safs.apps.cli import main
from safs.core.errors import InvalidInput
from safs.experiments.eval.experiments import (
    CHECK_MODULES,
    EXPERIMENTS,
    _verdict_collective,
    check_missing,
    experiment,
    summarize,
    t_interval,
    tasks,
)
from safs.experiments.runner import run_one_output
from safs.experiments.runs import expand
from safs.experiments.workloads.jitter import jittered_ns


# ---- statistics --------------------------------------------------------------------------------
def test_t_interval_is_the_student_t_interval() -> None:
    values = [8.1, 8.4, 9.0, 8.2]
    mean, half = t_interval(values)
    lo, hi = stats.t.interval(0.95, len(values) - 1, loc=stats.tmean(values), scale=stats.sem(values))
    assert mean == pytest.approx((lo + hi) / 2)
    assert half == pytest.approx((hi - lo) / 2)


def test_t_interval_degenerate_cases() -> None:
    assert math.isnan(t_interval([5.0])[1])  # one seed: no interval
    assert t_interval([5.0, 5.0, 5.0]) == (5.0, 0.0)
    assert all(math.isnan(x) for x in t_interval([float("nan")]))


def test_summarize_groups_by_policy_and_level() -> None:
    recs = [{"policy": p, "background_flows": b, "load": 0.0, "seed": s, "m": float(s + b)}
            for p in ("safs", "dctcp") for b in (0, 2) for s in (1, 2, 3)]
    rows = summarize(recs, ("m",))
    assert [(r["policy"], r["background_flows"], r["runs"]) for r in rows] == \
        [("safs", 0, 3), ("safs", 2, 3), ("dctcp", 0, 3), ("dctcp", 2, 3)]
    assert rows[1]["m_mean"] == pytest.approx(4.0)
    assert rows[1]["m_ci95"] == pytest.approx(t_interval([3.0, 4.0, 5.0])[1])


def test_summarize_keeps_swept_values_apart() -> None:
    recs = [{"policy": "safs", "size_bytes": z, "background_flows": 0, "load": 0.0, "m": float(z)}
            for z in (1, 2) for _ in range(2)]
    rows = summarize(recs, ("m",), ("size_bytes",))
    assert [(r["size_bytes"], r["runs"], r["m_mean"]) for r in rows] == [(1, 2, 1.0), (2, 2, 2.0)]


def test_collective_verdict_checks_the_bound_and_the_baselines_at_the_largest_size() -> None:
    def row(policy: str, size: int, bg: int, t: float, ratio: float) -> dict:
        return {"policy": policy, "size_bytes": size, "algorithm": "ring", "background_flows": bg, "load": 0.0,
                "runs": 1, "collective_time_ms_mean": t, "collective_ratio_mean": ratio}
    rows = [row("safs", 1, 2, 9.0, 9.0), row("safs", 8, 2, 1.04, 1.04), row("homa", 8, 2, 1.0, 1.0),
            row("dctcp", 8, 2, 2.0, 2.0), row("safs", 8, 0, 1.2, 1.2)]
    verdict = {v["check"]: v["pass"] for v in _verdict_collective(rows)}
    assert verdict == {
        "size_bytes=8, algorithm=ring, bg=2: SAFS collective time / bandwidth bound": True,
        "size_bytes=8, algorithm=ring, bg=2: SAFS collective time below homa": False,
        "size_bytes=8, algorithm=ring, bg=2: SAFS collective time below dctcp": True,
        "size_bytes=8, algorithm=ring, bg=0: SAFS collective time / bandwidth bound": False,
    }


# ---- registry and bad names ------------------------------------------------------------------
def test_experiments_list_every_policy_and_three_seeds() -> None:
    assert set(EXPERIMENTS) == {"zerobubble", "afd-16a2f", "urgent", "collective-allreduce", "collective-alltoall",
                                "fabric", "ablation", "afd-llama3-70b-8a1f", "afd-qwen3-235b", "afd-16a2f-full"}
    for exp in EXPERIMENTS.values():
        scenario = exp.load()
        if exp.name == "afd-16a2f-full":  # the AFD targets without the 61/2 TPOT scaling
            assert len(scenario.seeds) == 5 and scenario.background.bulk_flows == [0, 2, 4]
            assert set(scenario.policies) == {"safs", "homa", "edf-oracle"}
            assert scenario.workload.params["layers_simulated"] == 61
            assert exp.load(quick=True).workload.params["layers_simulated"] == 61
            continue
        if exp.name == "fabric":  # the allocation issue's grid: 5 seeds, the fabric-scale baselines
            assert len(scenario.seeds) == 5
            assert {"safs", "dctcp", "homa", "pfabric", "edf-oracle"} <= set(scenario.policies)
            continue
        if exp.name == "ablation":  # SAFS against each mechanism removed, at one link
            assert len(scenario.seeds) == 3 and scenario.background.bulk_flows == [0]
            assert {"safs", "safs-no-grants", "safs-no-classes", "dctcp", "edf-oracle"} <= set(scenario.policies)
            continue
        assert len(scenario.seeds) == 3
        assert {"safs", "dctcp", "d2tcp", "homa", "pfabric", "edf-oracle", "safs-no-grants",
                "safs-no-classes"} <= set(scenario.policies)


def test_unknown_experiment_lists_valid_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InvalidInput) as err:
        experiment("zerobubbles")
    assert err.value.field == "experiment"
    for name in (*EXPERIMENTS, "baseline-checks", "all"):
        assert name in err.value.message
    assert main(["eval", "zerobubbles"]) == 2
    assert ("valid: zerobubble, afd-16a2f, afd-llama3-70b-8a1f, afd-qwen3-235b, afd-16a2f-full, urgent, "
            "collective-allreduce, collective-alltoall") in capsys.readouterr().err


def test_list_names_every_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--list"]) == 0
    out = capsys.readouterr().out
    for name in (*EXPERIMENTS, "baseline-checks"):
        assert name in out


@pytest.mark.parametrize("argv, field", [
    (["eval", "zerobubble", "--policies", "safs,tcp-reno"], "--policies"),
    (["eval", "zerobubble", "--jobs", "0"], "--jobs"),
    (["eval"], "NAME"),
])
def test_bad_options_name_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                     field: str) -> None:
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{field}:" in err
    assert not (tmp_path / "out").exists()  # refused before any run


@pytest.mark.parametrize("name, workload, field", [
    ("zerobubble", {"kind": "zerobubble", "params": {"compute_jitter": 0.9}}, "workload.params.compute_jitter"),
    ("zerobubble", {"kind": "zerobubble", "params": {"compute_jitter": -0.1}}, "workload.params.compute_jitter"),
    ("afd-16a2f", {"kind": "afd", "params": {"bytes_scale": -1.0}}, "workload.params.bytes_scale"),
    ("afd-16a2f", {"kind": "afd", "params": {"decode_steps": -4}}, "workload.params.decode_steps"),
    ("urgent", {"kind": "urgent", "params": {"urgent_min_bytes": -5}}, "workload.params.urgent_min_bytes"),
])
def test_impossible_parameters_refused_with_their_name(name: str, workload: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        tasks(experiment(name).load(overrides={"workload": workload, "policies": ["safs"]}))
    assert err.value.field == field


@pytest.mark.parametrize("background, field", [
    ({"load": 1.5}, "background.load"),
    ({"bulk_flows": [-2]}, "background.bulk_flows"),
])
def test_impossible_background_refused(background: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        experiment("zerobubble").load(overrides={"background": background})
    assert err.value.field.startswith(field)


def test_missing_baseline_check_is_named() -> None:
    from safs.experiments.eval.experiments import run_check

    with pytest.raises(InvalidInput) as err:
        run_check("no_such_baseline", True)
    assert "safs.experiments.eval.checks.no_such_baseline is missing" in err.value.message
    assert set(check_missing()) <= set(CHECK_MODULES)


# ---- per-seed randomness ---------------------------------------------------------------------
def test_jitter_off_is_identity_and_on_is_seeded_and_bounded() -> None:
    assert jittered_ns(273_000, 0.0, 7, "a0", (1, 2)) == 273_000
    draws = {seed: jittered_ns(273_000, 0.05, seed, "a0", (1, 2)) for seed in range(1, 30)}
    assert len(set(draws.values())) > 20  # seeds differ
    assert all(273_000 * 0.95 - 1 <= v <= 273_000 * 1.05 + 1 for v in draws.values())
    # Keyed, not a shared stream: the same op gets the same draw whatever was drawn before.
    jittered_ns(273_000, 0.05, 3, "f0", (0, 0))
    assert jittered_ns(273_000, 0.05, 3, "a0", (1, 2)) == draws[3]


def test_afd_run_writes_tpot_samples_matching_the_record() -> None:
    scenario = experiment("afd-16a2f").load(quick=True, overrides={"policies": ["safs"], "seeds": [4],
                                                                   "background": {"bulk_flows": [0]}})
    out = run_one_output(scenario, next(expand(scenario)))
    tpot = out.samples["tpot_ms"]
    assert len(tpot) == out.record["tpot_samples"] == 3
    assert out.record["tpot_p99_ms"] == pytest.approx(float(stats.scoreatpercentile(tpot, 99)))
    # Jitter on: the ideal TPOT is the same seed's draws on the contention-free network, and
    # the packet-level TPOT cannot beat it.
    assert min(tpot) >= out.record["tpot_ideal_ms"] * 0.97


# ---- end to end --------------------------------------------------------------------------------
def test_eval_writes_results_samples_summary_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ev"
    assert main(["eval", "zerobubble", "--quick", "--policies", "safs,dctcp", "--jobs", "1", "--quiet",
                 "--out", str(out)]) == 0
    d = out / "zerobubble"
    records = json.loads((d / "results.json").read_text())
    assert len(records) == 2 * 2 * 2  # policies x seeds x background levels (quick)
    lines = [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]
    assert [(x["policy"], x["seed"], x["background_flows"]) for x in lines] == \
        [(r["policy"], r["seed"], r["background_flows"]) for r in records]
    for x, r in zip(lines, records):
        assert sum(x["iteration_time_ms"]) / len(x["iteration_time_ms"]) == pytest.approx(r["iteration_time_ms"])
    summary = json.loads((d / "summary.json").read_text())
    assert {(r["policy"], r["background_flows"]) for r in summary["rows"]} == \
        {("safs", 0), ("safs", 2), ("dctcp", 0), ("dctcp", 2)}
    assert all(r["runs"] == 2 for r in summary["rows"])
    assert summary["paper"] and all("pass" in v for v in summary["paper"])
    for metric in EXPERIMENTS["zerobubble"].metrics:
        for ext in ("png", "pdf"):
            assert (d / "plots" / f"{metric}.{ext}").stat().st_size > 1000
    assert (d / "summary.csv").read_text().startswith("policy,background_flows,load,runs,")
    assert "95% t-interval" in capsys.readouterr().out
    first = (d / "plots" / "iteration_time_ms.png").read_bytes()
    assert main(["eval", "zerobubble", "--quick", "--policies", "safs", "--seeds", "1", "--jobs", "1", "--quiet",
                 "--out", str(out)]) == 0
    (kept,) = [p for p in d.iterdir() if p.is_dir() and p.name.startswith("plots.")]  # moved aside, not overwritten
    assert (kept / "iteration_time_ms.png").read_bytes() == first and (d / "plots" / "iteration_time_ms.png").exists()


def test_ablation_shares_of_the_gain() -> None:
    from safs.experiments.eval.experiments import ablation

    def row(policy: str, bulk: int, value: float) -> dict:
        return {"policy": policy, "background_flows": bulk, "m_mean": value}

    rows = [row("dctcp", 2, 100.0), row("safs", 2, 50.0), row("safs-no-grants", 2, 90.0),
            row("safs-no-classes", 2, 50.0), row("dctcp", 0, 50.0), row("safs", 0, 50.2)]
    (only,) = ablation(rows, "m")  # bg=0: SAFS gains nothing there, so no row
    assert only["background_flows"] == 2 and only["gain"] == pytest.approx(50.0)
    assert only["kept_without_grants"] == pytest.approx(0.2)  # grants carried 80% of the gain
    assert only["kept_without_classes"] == pytest.approx(1.0)


def test_baseline_checks_report_a_missing_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import safs.experiments.eval.experiments as ex

    monkeypatch.setattr(ex, "CHECK_MODULES", ("no_such_baseline",))
    assert main(["eval", "baseline-checks", "--jobs", "1", "--out", str(tmp_path)]) == 1
    assert "safs.experiments.eval.checks.no_such_baseline is missing" in capsys.readouterr().out
    rows = json.loads((tmp_path / "baseline-checks" / "checks.json").read_text())
    assert rows == [
        {
            "baseline": "no_such_baseline",
            "error": "safs.experiments.eval.checks.no_such_baseline is missing (docs/baselines.md)",
        }
    ]


def test_urgent_pass_criterion() -> None:
    exp = EXPERIMENTS["urgent"]

    def row(policy: str, misses: float, fct: float) -> dict:
        return {
            "policy": policy,
            "background_flows": 2,
            "load": 0.2,
            "urgent_deadline_misses_mean": misses,
            "urgent_fct_mean_ms_mean": fct,
        }

    good = exp.verdict([row("safs", 0, 1.0), row("dctcp", 5, 2.0), row("pfabric", 0, 1.5)])
    assert [v["pass"] for v in good] == [True, True]
    bad = exp.verdict([row("safs", 0, 1.8), row("pfabric", 0, 0.9)])  # zero misses, not the lowest FCT
    assert [v["pass"] for v in bad] == [True, False]
    assert exp.verdict([row("safs", 1, 0.5)])[0]["pass"] is False


def test_afd_allocation_verdict_compares_with_homa_the_oracle_and_no_contention() -> None:
    exp = EXPERIMENTS["afd-qwen3-235b"]

    def row(policy: str, bulk: int, p99: float, ideal: float = 50.0) -> dict:
        return {"policy": policy, "background_flows": bulk, "load": 0.0, "tpot_p99_ms_mean": p99,
                "tpot_ideal_p99_ms_mean": ideal}

    rows = [row("safs", 0, 50.2), row("homa", 0, 50.2), row("edf-oracle", 0, 49.3),
            row("safs", 2, 51.0), row("homa", 2, 50.9), row("edf-oracle", 2, 50.05)]
    assert [(v["check"], v["pass"]) for v in exp.verdict(rows)] == [
        ("bg=0: SAFS p99 TPOT <= Homa's", True),
        ("bg=0: SAFS p99 TPOT within 2% of the EDF oracle's", True),  # +1.8%
        ("bg=0: SAFS p99 TPOT within 0.5% of no contention", True),  # +0.4%
        ("bg=2: SAFS p99 TPOT <= Homa's", False),
        ("bg=2: SAFS p99 TPOT within 2% of the EDF oracle's", True)]  # +1.9%
    assert not exp.verdict([row("safs", 0, 50.3, ideal=50.0)])[0]["pass"]  # +0.6% of no contention
    # afd-16a2f's verdict has the paper's comparisons and then these
    assert [v["check"] for v in EXPERIMENTS["afd-16a2f"].verdict(rows)][-2:] == [
        "bg=2: SAFS p99 TPOT <= Homa's", "bg=2: SAFS p99 TPOT within 2% of the EDF oracle's"]


def test_ablation_verdict_passes_only_when_safs_misses_no_more_than_each_ablation() -> None:
    exp = EXPERIMENTS["ablation"]

    def row(policy: str, misses: float) -> dict:
        return {"policy": policy, "background_flows": 0, "load": 0.0, "pipeline_deadline_misses_mean": misses}

    verdict = exp.verdict([row("safs", 0), row("safs-no-classes", 26), row("safs-no-grants", 0), row("dctcp", 12)])
    assert [(v["check"], v["pass"]) for v in verdict] == [
        ("bg=0: SAFS pipeline misses <= safs-no-classes's", True),
        ("bg=0: SAFS pipeline misses <= safs-no-grants's", True)]
    assert [v["pass"] for v in exp.verdict([row("safs", 3), row("safs-no-grants", 1)])] == [False]


def test_fabric_verdict_judges_safs_then_its_variants_against_homa_per_grid_point() -> None:
    exp = EXPERIMENTS["fabric"]

    def row(policy: str, load: float, misses: float) -> dict:
        return {"policy": policy, "offered_load": load, "deadline_factor": 2.0, "pipeline_deadline_misses_mean": misses}

    rows = [row("safs", 0.3, 80), row("safs-late-last", 0.3, 40), row("homa", 0.3, 42),
            row("safs", 0.9, 10), row("homa", 0.9, 10), row("safs-late-last", 0.6, 1),  # no homa at 0.6
            row("safs-overcommit", 0.9, 11), row("safs-admission", 0.9, 9)]
    assert [(v["check"], v["pass"]) for v in exp.verdict(rows)] == [
        ("load 0.3, deadline x2.0: SAFS misses <= Homa's", False),
        ("load 0.9, deadline x2.0: SAFS misses <= Homa's", True),
        ("load 0.3, deadline x2.0: safs-late-last misses <= Homa's", True),
        ("load 0.9, deadline x2.0: safs-overcommit misses <= Homa's", False),
        ("load 0.9, deadline x2.0: safs-admission misses <= Homa's", True)]
    # With 95% intervals in the summary rows, "ours" shows them beside the means.
    rows = [row("safs-admission", 0.9, 35.8) | {"pipeline_deadline_misses_ci95": 19.4},
            row("homa", 0.9, 35.0) | {"pipeline_deadline_misses_ci95": 12.6}]
    assert [(v["ours"], v["pass"]) for v in exp.verdict(rows)] == [("35.8 ± 19.4 vs 35.0 ± 12.6 per run", False)]


# ---- options that do not apply, re-runs and --replot -------------------------------------------
@pytest.mark.parametrize(
    "argv, needle",
    [
        (["eval", "--list", "zerobubble"], "--list: lists every experiment and takes no NAME"),
        (["eval", "baseline-checks", "--seeds", "1,2"], "--seeds: does not apply to baseline-checks"),
        (["eval", "all", "--policies", "safs"], "--policies: does not apply to baseline-checks"),
        (["eval", "zerobubbles"], "NAME: unknown experiment 'zerobubbles'"),
        (["eval", "zerobubble", "--ray", "auto", "--jobs", "1"], "--ray: cannot be combined with --jobs"),
    ],
)
def test_options_that_would_be_ignored_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_rerun_keeps_earlier_files_merges_timing_and_replot_reports_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ev"
    out.mkdir()
    (out / "timing.json").write_text(json.dumps({"urgent": {"runs": 7}}))  # an earlier sweep's entry
    argv = [
        "eval",
        "zerobubble",
        "--quick",
        "--policies",
        "dctcp",
        "--seeds",
        "1",
        "--jobs",
        "1",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert "no safs in --policies: the comparison with the paper is skipped" in capsys.readouterr().out
    d = out / "zerobubble"
    first = (d / "results.json").read_text()
    assert main(argv) == 0
    text = capsys.readouterr().out
    (kept,) = d.glob("results.2*.json")
    assert kept.read_text() == first and f"moved to {kept.name}" in text
    for name in ("results.csv", "samples.jsonl", "summary.json", "summary.csv"):
        stem, ext = name.split(".")
        assert len(list(d.glob(f"{stem}.2*.{ext}"))) == 1, name
    timing = json.loads((out / "timing.json").read_text())
    assert timing["urgent"] == {"runs": 7}  # other experiments' timings stay
    assert timing["zerobubble"]["runs"] == 2 and timing["zerobubble"]["sweep"] == ["zerobubble"]
    assert timing["zerobubble"]["sweep_simulation_wall_s"] > 0
    # Replot everything with only zerobubble present: one line per missing experiment, the rest redone.
    assert main(["eval", "all", "--replot", "--out", str(out)]) == 1
    text = capsys.readouterr().out
    missing = [ln for ln in text.splitlines() if "no earlier results to replot" in ln]
    assert len(missing) == 2 and "afd-16a2f" in missing[0] and "urgent" in missing[1]  # all: the paper's three
    assert "zerobubble: mean ± 95% t-interval" in text


def test_baseline_checks_table_shows_deviation_in_percent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import safs.experiments.eval.experiments as ex

    monkeypatch.setattr(ex, "CHECK_MODULES", ("fake",))
    monkeypatch.setattr(ex, "check_missing", lambda: [])
    monkeypatch.setattr(
        ex,
        "run_check",
        lambda module, quick: {
            "metric": "p99 slowdown",
            "paper_value": 2.33,
            "measured": 1.7709,
            "deviation": 1.7709 / 2.33 - 1,
        },
    )
    assert main(["eval", "baseline-checks", "--jobs", "1", "--out", str(tmp_path)]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if "p99 slowdown" in ln)
    assert "-24%" in row and "1.77" in row and "-0.24" not in row

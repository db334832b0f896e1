"""The `safs` command line: a small end-to-end run, and one clear line for each user error."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import grpc
import pytest
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from safs.apps.cli import main
from safs.apps.fake_switch_command import start_fake_switches
from safs.core.errors import InvalidInput
from safs.core.topology import load_topology

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


def _tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(
        f"name: tiny\ntopology: {TOPO}\nworkload: {{kind: zerobubble, params: {{stages: 2, microbatches: 2, "
        f"iterations: 1}}}}\npolicies: [safs]\n"
    )
    return path


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_rerun_into_the_same_out_keeps_the_earlier_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    scenario = _tiny(tmp_path)
    assert main(["run", "--quiet", "--jobs", "1", "--out", str(out), str(scenario)]) == 0
    first_json = (out / "results.json").read_text()
    first_csv = (out / "results.csv").read_text()
    capsys.readouterr()
    assert main(["run", "--quiet", "--jobs", "1", "--seeds", "2", "--out", str(out), str(scenario)]) == 0
    text = capsys.readouterr().out
    (old_json,) = out.glob("results.2*.json")
    (old_csv,) = out.glob("results.2*.csv")
    assert old_json.read_text() == first_json and old_csv.read_text() == first_csv
    assert f"moved to {old_json}" in text
    assert json.loads((out / "results.json").read_text())[0]["seed"] == 2
    # A third run in the same second gets its own name: still nothing lost.
    assert main(["run", "--quiet", "--jobs", "1", "--out", str(out), str(scenario)]) == 0
    assert len(list(out.glob("results.2*.json"))) == 2


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--seeds", "1,1"], "argument --seeds: duplicate 1 in '1,1'"),
        (["--policies", "safs,dctcp,safs"], "argument --policies: duplicate safs"),
        (["--seeds", "-1"], "argument --seeds: expected comma-separated integers >= 0"),
        (["--jobs", "x"], "argument --jobs: invalid int value"),
    ],
)
def test_argparse_errors_are_one_line_with_the_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", *args, "--out", str(tmp_path / "out"), str(_tiny(tmp_path))])
    assert exit_.value.code == 2
    err = _one_line_error(capsys)
    assert err.startswith("safs run: error: ") and needle in err and err.strip().endswith("(see safs run --help)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, prog",
    [
        ([], "safs"),
        (["run"], "safs run"),
        (["eval", "--seeds", "x"], "safs eval"),
        (["controller"], "safs controller"),
    ],
)
def test_every_subcommand_has_one_line_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], prog: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = _one_line_error(capsys)
    assert err.startswith(f"{prog}: error: ") and err.strip().endswith(f"(see {prog} --help)")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--ray", "bogus://x"], "--ray: expected auto, local, ray://HOST:PORT or HOST:PORT"),
        (["--ray", "host:0"], "--ray: expected auto, local"),
        (["--ray", "auto", "--jobs", "2"], "--ray: cannot be combined with --jobs"),
        (["--ray", "127.0.0.1:1"], "--ray: cannot connect to Ray at '127.0.0.1:1'"),
        (["--target", "mininet", "--jobs", "2"], "--target mininet: runs one run at a time in real time; drop --jobs"),
        (["--target", "mininet", "--ray", "auto"], "--target mininet: runs one run at a time in real time; drop --ray"),
    ],
)
def test_bad_ray_and_jobs_fail_before_any_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    out = tmp_path / "deep" / "out"
    assert main(["run", "--quiet", *args, "--out", str(out), str(_tiny(tmp_path))]) == 2
    assert needle in _one_line_error(capsys)
    assert not (tmp_path / "deep").exists()


def test_out_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("keep me\n")
    assert main(["run", "--quiet", "--out", str(readme), str(_tiny(tmp_path))]) == 2
    assert f"--out {readme}: is a file, not a directory" in _one_line_error(capsys)
    assert readme.read_text() == "keep me\n"


def test_mininet_target_names_what_is_missing_before_any_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A non-root user on a machine without BMv2 on PATH: both named in one line, nothing created.
    monkeypatch.setattr("safs.experiments.runner.os.geteuid", lambda: 1000)
    monkeypatch.setenv("PATH", str(tmp_path))
    out = tmp_path / "out"
    assert (
        main(["run", "--quiet", "--target", "mininet", "--out", str(out), str(ROOT / "scenarios" / "mininet-afd.yaml")])
        == 2
    )
    err = _one_line_error(capsys)
    assert "--target mininet: needs root (run as root, e.g. sudo .venv/bin/safs" in err
    assert "simple_switch_grpc" in err
    assert not out.exists()


def test_tables_use_one_number_format() -> None:
    from safs.apps.eval_command import _fmt as eval_fmt
    from safs.apps.run_command import _fmt
    from safs.core.numfmt import percent

    assert [_fmt(x) for x in (5432.1, 12698.0, 12807.0, 29.46, 0.1234)] == ["5430", "12700", "12800", "29.5", "0.123"]
    assert eval_fmt(29.5, 110.3) == "29.5 ± 110" and eval_fmt(5432.1, 1.06) == "5430 ± 1.1"
    assert percent(-0.2412) == "-24%" and percent(0.05) == "+5%"
    assert _fmt(float("nan")) == "-" and _fmt(0.0) == "0"


# ---- safs controller: every bad option one line, naming the option -------------------------------
P4INFO = ROOT / "p4src" / "build" / "safs.p4info.txtpb"
BMV2_JSON = ROOT / "p4src" / "build" / "safs.json"
needs_build = pytest.mark.skipif(
    not (P4INFO.is_file() and BMV2_JSON.is_file()), reason="p4src/build not built (make -C p4src)"
)


def test_controller_checks_topology_before_switches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["controller", "--topology", str(tmp_path / "absent.yaml")]) == 2
    err = _one_line_error(capsys)
    assert "absent.yaml" in err and "--switch" not in err


@needs_build
@pytest.mark.parametrize(
    "option, content, needle",
    [
        ("--bmv2-json", "{not json", "--bmv2-json: "),
        ("--p4info", "this is not a p4info {", "--p4info: "),
    ],
)
def test_controller_refuses_bad_compiled_files_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, content: str, needle: str
) -> None:
    bad = tmp_path / "bad"
    bad.write_text(content)
    assert main(["controller", "--topology", str(TOPO), "--switch", "leaf0=127.0.0.1:1", option, str(bad)]) == 2
    err = _one_line_error(capsys)
    assert needle in err and str(bad) in err and "p4info_path" not in err


@needs_build
def test_controller_unreachable_switch_names_the_switch_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the default --p4info/--bmv2-json come from the safs checkout, not the cwd
    assert (
        main(
            [
                "controller",
                "--topology",
                str(TOPO),
                "--switch",
                "leaf0=127.0.0.1:1",
                "--log-level",
                "ERROR",
                "--duration-s",
                "1",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("safs: error: --switch leaf0=127.0.0.1:1: ") and "UNAVAILABLE" in last


def test_run_takes_shipped_scenario_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`safs run NAME` finds a scenario the package ships, from any directory; an unknown name
    is one line listing the shipped ones, and nothing is created."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", "no-such-scenario", "--out", "out"]) == 2
    err = _one_line_error(capsys)
    assert "no-such-scenario" in err and "zerobubble" in err and "afd-16a2f" in err
    assert not (tmp_path / "out").exists()
    assert main(["run", "zerobubble", "--policies", "safs", "--seeds", "1", "--quiet", "--out", "out"]) == 0
    records = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {r["scenario"] for r in records} == {"zerobubble"} and all(r["policy"] == "safs" for r in records)


def test_fake_switch_prints_each_switch_and_the_controller_command(capsys: pytest.CaptureFixture[str]) -> None:
    topo = str(ROOT / "topologies" / "leaf-spine.yaml")
    base = free_port_run(6)
    assert main(["fake-switch", "--topology", topo, "--base-port", str(base), "--duration-s", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("6 fake P4Runtime switch(es) of leaf-spine")
    assert lines[1].split() == ["spine0", f"127.0.0.1:{base}"]
    assert lines[-1] == (f"try: safs controller --topology {topo} "
                         + " ".join(f"--switch {sw}=127.0.0.1:{base + i}" for i, sw in enumerate(
                             ["spine0", "spine1", "leaf0", "leaf1", "leaf2", "leaf3"])))


def test_fake_switches_answer_p4runtime_and_a_port_in_use_is_one_clear_error() -> None:
    topo = load_topology(ROOT / "topologies" / "leaf-spine.yaml")
    base = free_port_run(6)
    servers = start_fake_switches(topo, base)
    try:
        with grpc.insecure_channel(servers[1][1].address) as ch:
            caps = p4runtime_pb2_grpc.P4RuntimeStub(ch).Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=10)
        assert caps.p4runtime_api_version
        with pytest.raises(InvalidInput) as exc:
            start_fake_switches(topo, base - 2)  # the third switch's port is the first one's above
        assert exc.value.field == "--base-port" and f"switch leaf0: cannot serve P4Runtime on 127.0.0.1:{base}" \
            in exc.value.message
    finally:
        for _, server in servers:
            server.stop()
    with socket.socket() as s:  # the failed attempt stopped the two servers it had started
        s.bind(("127.0.0.1", base - 2))


def free_port_run(n: int) -> int:
    """The first of ``n`` consecutive free TCP ports on 127.0.0.1 above 20000 (two below it free too)."""
    for base in range(20_002, 60_000, 97):
        try:
            socks = []
            for port in range(base - 2, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no free port run")

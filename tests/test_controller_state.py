"""Restart without loss (docs/operations.md): the durable state store (SQLite, WAL, group
commit), the controller's start against switches that kept their pipeline (cookie; read back,
reconciled, nothing pushed again), periodic reconciliation, and ``safs controller`` killed with
SIGKILL at each failpoint between database commit, switch write and acknowledgement, then
restarted: nothing acknowledged is lost. Against in-process fake P4Runtime switches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_controller_app import BMV2_JSON, P4INFO, Running, config, share_grants, wait_for

from safs.apps.cli import main
from safs.control.controller import ControllerApp, ControllerConfig, SwitchSpec, _period
from safs.control.failpoints import ENV as FAILPOINT_ENV
from safs.control.hintapi.client import HintClient, HintServiceError
from safs.control.state import IDLE_COMMIT_S, StateStore
from safs.core import p4names as n
from safs.core.errors import InvalidInput
from safs.core.hints import DependencyHint, FlowClass
from safs.core.target import TableEntry
from safs.core.topology import load_topology
from safs.targets.p4rt.codec import encode_table_entry
from safs.targets.p4rt.p4info import P4InfoIndex
from safs.targets.p4rt.target import P4RuntimeTarget
from safs.targets.pipeline_model import PipelineModel
from safs.testing.fake_p4rt import FakeP4RuntimeServer

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- the store


def test_store_keeps_what_it_committed_and_group_commits_concurrent_writers(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "st", "two-tors")
    store.put_dependency(DependencyHint(1, "a", "d", "A2F", FlowClass.PIPELINE), "tor1", 5)
    store.put_dependency(DependencyHint(2, "b", "d"), None, None)
    store.end_dependency("b", 2)

    def writer(k: int) -> None:
        for i in range(50):
            store.put_dependency(DependencyHint(100 + i, f"h{k}", "d"), "tor1", i + 1)
            store.wait_durable()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.pending == 0
    # 400 waits shared commits: fewer transactions than changes
    assert store.stats.records == 403 and store.stats.commits < 400
    store.close()
    again = StateStore(tmp_path / "st", "two-tors")
    loaded = again.load()
    assert len(loaded.dependencies) == 401
    first = loaded.dependencies[0]
    assert (first.dep, first.tor, first.slot) == (DependencyHint(1, "a", "d", "A2F"), "tor1", 5)
    again.close()


def test_store_commits_a_change_nobody_waits_for_within_the_idle_period(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "st", "two-tors")
    for i in range(1, 101):  # queued without waiting (as a digest admission is): no commit per change
        store.put_dependency(DependencyHint(i, "a", "d"), "tor1", i)
    wait_for(lambda: store.pending == 0, timeout_s=100 * IDLE_COMMIT_S, what="the idle commit")
    assert store.stats.records == 100 and store.stats.commits <= 2
    store.close()


def test_store_refuses_another_topologys_state_and_an_unusable_directory(tmp_path: Path) -> None:
    StateStore(tmp_path / "st", "two-tors").close()
    with pytest.raises(InvalidInput, match=r"--state.*holds the state of topology 'two-tors', not 'other'"):
        StateStore(tmp_path / "st", "other")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInput, match="--state: .*file is not a directory"):
        StateStore(tmp_path / "file", "two-tors")
    with pytest.raises(InvalidInput, match="--state: cannot open"):
        StateStore("/proc/safs-state", "two-tors")


@pytest.mark.parametrize("argv, message", [
    (["--state", ""], "--state: must name a directory"),
    (["--reconcile-s", "0.0001"], "--reconcile-s: must be 0 (off) or 0.1..86400 seconds"),
    (["--reconcile-s", "nan"], "--reconcile-s: must be 0 (off)"),
    (["--reconcile-s", "abc"], "--reconcile-s: must be 0 (off)"),
    (["--telemetry-s", "0.01"], "--telemetry-s: must be 0 (off) or 0.1..86400 seconds"),
    (["--telemetry-s", "-1"], "--telemetry-s: must be 0 (off)"),
    (["--model", "--switch", "tor0=127.0.0.1:9559"], "--model: runs every topology switch in-process"),
])
def test_bad_state_and_reconcile_options_are_one_line(topo_file: Path, argv: list[str], message: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    base = ["controller", "--topology", str(topo_file), "--p4info", str(P4INFO), "--bmv2-json", str(BMV2_JSON)]
    if "--model" not in argv:
        base += ["--switch", "tor0=127.0.0.1:9559"]
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("safs: error: ") and message in err[-1], err


def test_a_zero_reconcile_period_is_off(topo_file: Path) -> None:
    assert _period("--reconcile-s", "0") == _period("--reconcile-s", "0e0") == _period("--reconcile-s", "+0.00") == 0.0
    assert _period("--telemetry-s", "10") == 10.0


# ---------------------------------------------------------------------------- restart in-process


def test_restored_dependencies_with_a_taken_slot_get_a_new_one_and_it_is_stored(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer], tmp_path: Path) -> None:
    store = StateStore(tmp_path / "st", "two-tors")
    for dep_id in (1, 2):  # both claim slot 5 (a hand-edited or corrupt store)
        store.put_dependency(DependencyHint(dep_id, "a", "d"), "tor1", 5)
    store.put_dependency(DependencyHint(3, "h99", "d"), "tor1", 6)
    store.wait_durable()
    store.close()
    refused = (r"--state: .*a stored hint is refused: dependency.sender: dependency 3 of 'h99' -> 'd': unknown host"
               r".*give another --state directory, or delete that row")
    with pytest.raises(InvalidInput, match=refused):
        ControllerApp(config(topo_file, servers, state_dir=tmp_path / "st")).start()
    store = StateStore(tmp_path / "st", "two-tors")
    store.end_dependency("h99", 3)
    store.wait_durable()
    store.close()
    run = Running(config(topo_file, servers, state_dir=tmp_path / "st"))
    run.stop()
    slots = {d.dep.dep_id: d.slot for d in StateStore(tmp_path / "st", "two-tors").load().dependencies}
    assert slots[1] == 5 and slots[2] not in (None, 5)


def rogue_entry(ip: int, dep_id: int):
    """A dep_grant entry nobody announced (written behind the controller's back)."""
    index = P4InfoIndex.from_file(P4INFO)
    return encode_table_entry(index, TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: ip, n.F_DEP_ID: dep_id},
                                                n.ACT_SET_SHARE_GRANT, {"meter_slot": 99}))


def test_restart_keeps_the_pipeline_restores_state_and_repairs_what_changed(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer], tmp_path: Path) -> None:
    topo = load_topology(topo_file)
    ip = topo.host_ip
    state = tmp_path / "state"
    run = Running(config(topo_file, servers, state_dir=state))
    with HintClient(run.app.hint_address) as hints:
        assert hints.announce_dependencies([DependencyHint(1, "a", "d", "A2F a->d"),
                                            DependencyHint(2, "b", "d", "A2F b->d"),
                                            DependencyHint(7, "d", "c", "F2A d->c")]) == 3
    before = {sw: share_grants(fake) for sw, fake in servers.items()}
    assert before["tor1"] == {(ip("a"), 1): 1, (ip("b"), 2): 2} and before["tor0"] == {(ip("d"), 7): 1}
    routes = len(servers["tor0"].table_entries(n.IPV4_LPM))
    run.stop()
    pushes = {sw: fake.pipeline_pushes for sw, fake in servers.items()}

    # a clean restart: nothing pushed, nothing to repair, the same grants
    run = Running(config(topo_file, servers, state_dir=state))
    assert {sw: fake.pipeline_pushes for sw, fake in servers.items()} == pushes
    assert run.app.stats.pipelines_kept == 2
    s = run.app.stats
    assert (s.repairs_missing, s.repairs_changed, s.repairs_extra) == (0, 0, 0)
    assert {sw: share_grants(fake) for sw, fake in servers.items()} == before
    with HintClient(run.app.hint_address) as hints:  # the restored dependencies are known
        assert hints.announce_dependencies([DependencyHint(1, "a", "d", "A2F a->d")]) == 0
    run.stop()

    # while no controller runs: a grant and a route lost, a foreign grant written
    assert servers["tor1"].drop_entries(n.DEP_GRANT, 1) == 1
    assert servers["tor0"].drop_entries(n.IPV4_LPM, 1) == 1
    servers["tor1"].insert_entry(rogue_entry(ip("c"), 9))
    run = Running(config(topo_file, servers, state_dir=state))
    s = run.app.stats
    assert (s.repairs_missing, s.repairs_extra) == (2, 1)
    assert {sw: share_grants(fake) for sw, fake in servers.items()} == before
    assert len(servers["tor0"].table_entries(n.IPV4_LPM)) == routes
    run.stop()


def test_periodic_reconciliation_repairs_a_switch_behind_the_controllers_back(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer]) -> None:
    ip = load_topology(topo_file).host_ip
    run = Running(config(topo_file, servers, reconcile_period_s=0.2))
    try:
        with HintClient(run.app.hint_address) as hints:
            hints.announce_dependencies([DependencyHint(1, "a", "d")])
        servers["tor1"].drop_entries(n.DEP_GRANT)
        servers["tor1"].insert_entry(rogue_entry(ip("b"), 3))
        wait_for(lambda: share_grants(servers["tor1"]) == {(ip("a"), 1): 1}, what="periodic repair")
        wait_for(lambda: run.app.stats.repairs_extra >= 1 and run.app.stats.repairs_missing >= 1,
                 what="repairs counted")
    finally:
        run.stop()


def test_without_a_state_directory_a_restart_forgets_and_removes_the_grants(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer]) -> None:
    run = Running(config(topo_file, servers))
    with HintClient(run.app.hint_address) as hints:
        hints.announce_dependencies([DependencyHint(1, "a", "d")])
    run.stop()
    run = Running(config(topo_file, servers))
    try:
        assert share_grants(servers["tor1"]) == {}  # stale: nothing acknowledged them to this controller
        assert run.app.stats.repairs_extra >= 1
    finally:
        run.stop()


# ---------------------------------------------------------------------------- SIGKILL at each point


class ControllerProcess:
    """``safs controller`` as a child process (the hint API on a Unix socket)."""

    def __init__(self, topo_file: Path, servers: dict[str, FakeP4RuntimeServer], state: Path, sock: Path,
                 failpoint: str | None = None, extra: tuple[str, ...] = (), serving: bool = True) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "controller"))
        env.pop(FAILPOINT_ENV, None)
        if failpoint is not None:
            env[FAILPOINT_ENV] = failpoint
        sock.unlink(missing_ok=True)
        self.address = f"unix:{sock}"
        self.log = state.parent / f"controller-{failpoint or 'plain'}-{time.monotonic_ns()}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "safs.apps.cli", "controller", "--topology", str(topo_file),
             "--switch", f"tor0={servers['tor0'].address}", "--switch", f"tor1={servers['tor1'].address}:3",
             "--p4info", str(P4INFO), "--bmv2-json", str(BMV2_JSON), "--hint-addr", self.address,
             "--state", str(state), "--reconcile-s", "0", *extra],
            env=env, stdout=subprocess.DEVNULL, stderr=self.log.open("w"))
        if not serving:
            return
        with HintClient(self.address) as hints:
            if not hints.wait_ready(60):
                self.proc.kill()
                pytest.fail(f"controller did not serve the hint API within 60 s: {self.log.read_text()[-2000:]}")

    def wait_killed(self) -> None:
        assert self.proc.wait(timeout=30) == -signal.SIGKILL, self.log.read_text()[-2000:]


def test_sigkill_at_every_point_loses_nothing_acknowledged(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer], tmp_path: Path) -> None:
    ip = load_topology(topo_file).host_ip
    state, sock = tmp_path / "state", tmp_path / "hints.sock"
    acked: set[tuple[str, int]] = set()
    # dep_id k is announced while the controller dies at point k (a -> d, ToR tor1)
    points = ["store.before-commit", "store.after-commit", "hint.after-switch-write"]
    for k, point in enumerate(points, start=1):
        ctl = ControllerProcess(topo_file, servers, state, sock, point)
        with HintClient(ctl.address) as hints, pytest.raises(HintServiceError, match="UNAVAILABLE"):
            hints.announce_dependencies([DependencyHint(k, "a", "d", f"dies at {point}")])
        ctl.wait_killed()
    # killed after the acknowledgement
    ctl = ControllerProcess(topo_file, servers, state, sock)
    with HintClient(ctl.address) as hints:
        assert hints.announce_dependencies([DependencyHint(9, "a", "d", "acked")]) == 1
    acked.add(("a", 9))
    ctl.proc.send_signal(signal.SIGKILL)
    ctl.wait_killed()

    ctl = ControllerProcess(topo_file, servers, state, sock)
    try:
        installed = {dep for (_, dep) in share_grants(servers["tor1"])}
        assert {dep for _, dep in acked} <= installed  # nothing acknowledged is lost
        # committed but unacknowledged (after-commit, after-switch-write) is kept too; never committed is gone
        assert installed == {2, 3, 9}
        with HintClient(ctl.address) as hints:  # the application retries what was not acknowledged
            assert hints.announce_dependencies([DependencyHint(k, "a", "d", "retry") for k in (1, 2, 3)]) == 1
        assert {dep for (_, dep) in share_grants(servers["tor1"])} == {1, 2, 3, 9}
        assert all(src == ip("a") for (src, _) in share_grants(servers["tor1"]))
    finally:
        ctl.proc.terminate()
        ctl.proc.wait(timeout=30)


def test_a_controller_app_refuses_a_state_directory_of_another_topology(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer], tmp_path: Path) -> None:
    StateStore(tmp_path / "st", "another-fabric").close()
    app = ControllerApp(config(topo_file, servers, state_dir=tmp_path / "st"))
    with pytest.raises(InvalidInput, match="another-fabric"):
        app.start()


def test_model_mode_serves_hints_into_in_process_pipeline_models(topo_file: Path, tmp_path: Path) -> None:
    """``safs controller --model``: every switch an in-process pipeline model; hints, state and
    reconciliation as against real switches."""
    specs = tuple(SwitchSpec(sw, "in-process:0") for sw in ("tor0", "tor1"))
    cfg = ControllerConfig(topology_path=topo_file, switches=specs, p4info_path=P4INFO, bmv2_json_path=BMV2_JSON,
                           hint_addr="127.0.0.1:0", model=True, state_dir=tmp_path / "st")
    for expected_new in (1, 0):  # the second controller restores the dependency from the store
        run = Running(cfg)
        try:
            with HintClient(run.app.hint_address) as hints:
                assert hints.announce_dependencies([DependencyHint(1, "a", "d")]) == expected_new
            model = run.app.links["tor1"].target
            assert isinstance(model, PipelineModel)
            assert [e.match[n.F_DEP_ID] for e in model.entries(n.DEP_GRANT)] == [1]
            assert model.entries(n.IPV4_LPM) and run.app.stats.pipelines_kept == 0
        finally:
            run.stop()


# ---------------------------------------------------------------------------- primary and backup


@pytest.mark.parametrize("auto_promote", [True, False], ids=["switch-promotes (PI)", "no-primary (spec)"])
def test_backup_takes_over_when_the_primary_is_killed_and_the_old_one_stands_by(
        topo_file: Path, tmp_path: Path, auto_promote: bool) -> None:
    ip = load_topology(topo_file).host_ip
    fakes = {"tor0": FakeP4RuntimeServer(auto_promote=auto_promote),
             "tor1": FakeP4RuntimeServer(device_id=3, auto_promote=auto_promote)}
    for fake in fakes.values():
        fake.start()
    state, sock = tmp_path / "state", tmp_path / "hints.sock"
    backup = None
    try:
        primary = ControllerProcess(topo_file, fakes, state, sock, extra=("--election-id", "5"))
        with HintClient(primary.address) as hints:
            hints.announce_dependencies([DependencyHint(1, "a", "d", "A2F"), DependencyHint(2, "b", "d", "A2F")])
        backup = Running(config(topo_file, fakes, state_dir=state, election_id=(0, 1),
                                hint_addr=f"unix:{tmp_path / 'backup.sock'}"))
        assert backup.app.role == "backup" and backup.app.hint_server is None
        writes = {sw: len(f.writes) for sw, f in fakes.items()}
        t_kill = time.monotonic()
        primary.proc.send_signal(signal.SIGKILL)
        primary.wait_killed()
        wait_for(lambda: backup.app.role == "primary", what="the backup's takeover")
        first_write = time.monotonic()
        new_id = backup.app.election_id
        assert new_id > (0, 5)  # above every id seen, so the old primary cannot come back as primary
        assert all(fakes[sw].primary_election_id == new_id for sw in fakes)
        print(f"takeover: backup writing {first_write - t_kill:.2f} s after the primary's SIGKILL "
              f"({'switch promotes' if auto_promote else 'no primary until a backup arbitrates higher'})")
        assert all(len(f.writes) > writes[sw] for sw, f in fakes.items())  # it wrote (the digest config at least)
        assert share_grants(fakes["tor1"]) == {(ip("a"), 1): 1, (ip("b"), 2): 2}
        with HintClient(backup.app.hint_address) as hints:  # the new primary knows them
            assert hints.announce_dependencies([DependencyHint(1, "a", "d", "A2F")]) == 0
            assert hints.announce_dependencies([DependencyHint(3, "c", "d")]) == 1
        # the old primary comes back with its old id: it stands by, it does not take over
        old = ControllerProcess(topo_file, fakes, state, sock, extra=("--election-id", "5"), serving=False)
        try:
            wait_for(lambda: "standing by as backup" in old.log.read_text(), timeout_s=60,
                     what="the old primary standing by")
            assert backup.app.role == "primary" and all(f.primary_election_id == new_id for f in fakes.values())
        finally:
            old.proc.terminate()
            old.proc.wait(timeout=30)
    finally:
        if backup is not None:
            backup.stop()
        for fake in fakes.values():
            fake.stop()


def test_a_primary_steps_back_from_all_switches_when_another_takes_one_then_takes_all_back(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer]) -> None:
    run = Running(config(topo_file, servers, election_id=(0, 2)))
    other = P4RuntimeTarget("tor1", servers["tor1"].address, 3, P4INFO, BMV2_JSON, election_id=(0, 9))
    try:
        assert other.is_primary  # a higher id at one switch only
        wait_for(lambda: run.app.stats.step_downs == 1, what="the primary stepping back from all")
        # then, still promoted at tor0 (no other controller there), it takes over both again
        # with an id above 9: one primary for the two switches, never one each
        wait_for(lambda: run.app.stats.takeovers == 1 and run.app.role == "primary", what="the takeover")
        assert run.app.election_id > (0, 9) and not other.is_primary
        assert all(f.primary_election_id == run.app.election_id for f in servers.values())
    finally:
        other.close()
        run.stop()


def test_a_controller_primary_at_some_switches_only_refuses_to_start(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer]) -> None:
    other = P4RuntimeTarget("tor1", servers["tor1"].address, 3, P4INFO, BMV2_JSON, election_id=(0, 9))
    try:
        app = ControllerApp(config(topo_file, servers, election_id=(0, 2)))
        with pytest.raises(InvalidInput, match=r"--election-id: 2 is primary at tor0 but not at tor1"):
            app.start()
    finally:
        other.close()


def test_a_takeover_that_cannot_serve_stops_the_backup_instead_of_rearbitrating(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer]) -> None:
    """The backup's --hint-addr is taken while it stands by: at the takeover it raises one
    InvalidInput naming --hint-addr (the command exits with it) after one arbitration, instead
    of taking over again every role check with a higher election id."""
    import socket

    primary = ControllerApp(config(topo_file, servers, election_id=(0, 5)))
    primary.start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backup = ControllerApp(config(topo_file, servers, election_id=(0, 1), hint_addr=f"127.0.0.1:{port}"))
    backup.start()
    try:
        assert backup.role == "backup"
        with socket.socket() as squatter:  # someone takes the backup's port while it stands by
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            primary.stop()
            deadline = time.monotonic() + 30
            with pytest.raises(InvalidInput) as err:
                while time.monotonic() < deadline:
                    backup.check_role()
                    time.sleep(0.02)
            assert err.value.field == "--hint-addr" and "Address already in use" in err.value.message
            assert backup.election_id == (0, 6)  # one takeover attempt, above the primary's 5
    finally:
        backup.stop()


def test_two_primaries_cannot_share_a_state_directory(topo_file: Path, tmp_path: Path) -> None:
    """Two --model controllers (both primary: no arbitration) on one --state: the second is
    refused naming --state and the first one's PID; once the first stops, it can start."""
    specs = tuple(SwitchSpec(sw, "in-process:0") for sw in ("tor0", "tor1"))
    cfg = ControllerConfig(topology_path=topo_file, switches=specs, p4info_path=P4INFO, bmv2_json_path=BMV2_JSON,
                           hint_addr="127.0.0.1:0", model=True, state_dir=tmp_path / "st")
    first = ControllerApp(cfg)
    first.start()
    second = ControllerApp(cfg)
    try:
        in_use = rf"--state: .* is in use by another primary controller \(PID {os.getpid()}"
        with pytest.raises(InvalidInput, match=in_use):
            second.start()
    finally:
        first.stop()
    second.start()  # the lock went with the first one
    second.stop()


def test_a_new_state_directory_over_switches_holding_grants_is_refused_not_wiped(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer], tmp_path: Path) -> None:
    """A mistyped --state (a directory that does not hold a store yet) while the switches keep
    the pipeline and another controller's grants: refused in one line, the grants stay, and the
    new directory is not left behind (the next start would take it for a real, empty store)."""
    ip = load_topology(topo_file).host_ip
    run = Running(config(topo_file, servers, state_dir=tmp_path / "right"))
    try:
        with HintClient(run.app.hint_address) as hints:
            hints.announce_dependencies([DependencyHint(1, "a", "d")])
    finally:
        run.stop()
    typo = tmp_path / "rihgt"
    with pytest.raises(InvalidInput, match=r"--state: .*rihgt is a new state directory, but tor1 holds 1 grants"):
        ControllerApp(config(topo_file, servers, state_dir=typo)).start()
    assert not typo.exists()
    assert share_grants(servers["tor1"]) == {(ip("a"), 1): 1}
    run = Running(config(topo_file, servers, state_dir=tmp_path / "right"))  # the right one keeps it
    try:
        assert share_grants(servers["tor1"]) == {(ip("a"), 1): 1}
    finally:
        run.stop()

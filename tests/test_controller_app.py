"""`safs controller` without BMv2: ControllerApp in a thread against two in-process fake
P4Runtime servers (real gRPC), driven through the hint API and injected digests, with dependency
grants (the default) and per-transfer grants; and the command line's argument errors (one
line, exit 2)."""

from __future__ import annotations

import logging
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from synth_p4info import current_p4info
from two_tors import MS  # the shared two-ToR test topology

from safs.apps.cli import main
from safs.control.controller import (
    ControllerApp,
    ControllerConfig,
    StartInterrupted,
    SwitchSpec,
    load_scheduler_config,
    parse_clock_offset,
    parse_switch_spec,
)
from safs.control.hintapi.client import HintClient
from safs.control.metrics import parse_metrics_addr, serve_metrics
from safs.core import p4names as n
from safs.core.errors import InvalidInput, TargetConnectionError
from safs.core.hints import DependencyHint, FlowHint
from safs.core.protocol import Forged, Malformed
from safs.core.protocol import transfer_dep_id as T
from safs.core.scheduler import SchedulerConfig
from safs.core.topology import load_topology
from safs.targets.p4rt.codec import decode_table_entry
from safs.targets.p4rt.p4info import P4InfoIndex
from safs.testing.fake_p4rt import FakeP4RuntimeServer

ROOT = Path(__file__).resolve().parents[1]
_P4INFO_DIR = tempfile.TemporaryDirectory(prefix="safs-p4info-")  # removed when the run ends
P4INFO = current_p4info(Path(_P4INFO_DIR.name))  # the committed one once it is v2 (tests/synth_p4info.py)
BMV2_JSON = ROOT / "p4src" / "build" / "safs.json"  # the fake servers do not read it
PER_TRANSFER = SchedulerConfig(grant_mode="per-transfer")


def wait_for(cond: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> object:
    """Poll ``cond`` until truthy; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def grants(server: FakeP4RuntimeServer) -> dict[int, dict[str, int]]:
    """dep_id -> action params of the fake switch's fixed (per-transfer) dep_grant entries:
    flow f's is ``T(f)``."""
    index = P4InfoIndex.from_file(P4INFO)
    out = {}
    for te in server.table_entries(n.DEP_GRANT):
        entry = decode_table_entry(index, te)
        if entry.action == n.ACT_SET_FIXED_GRANT:
            out[entry.match[n.F_DEP_ID]] = dict(entry.params)
    return out


def share_grants(server: FakeP4RuntimeServer) -> dict[tuple[int, int], int]:
    """(sender address, dep_id) -> meter slot of the fake switch's share dep_grant entries."""
    index = P4InfoIndex.from_file(P4INFO)
    entries = (decode_table_entry(index, te) for te in server.table_entries(n.DEP_GRANT))
    return {(e.match[n.F_SRC_ADDR], e.match[n.F_DEP_ID]): e.params["meter_slot"]
            for e in entries if e.action == n.ACT_SET_SHARE_GRANT}


class Running:
    """A ControllerApp started and run in a thread."""

    def __init__(self, config: ControllerConfig) -> None:
        self.app = ControllerApp(config)
        self.app.start()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.app.run, args=(self.stop_event,), daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "run() did not return after stop_event"
        self.app.stop()


def config(topo_file: Path, servers: dict[str, FakeP4RuntimeServer], **kwargs) -> ControllerConfig:
    specs = (SwitchSpec("tor0", servers["tor0"].address, 0), SwitchSpec("tor1", servers["tor1"].address, 3))
    base = dict(topology_path=topo_file, switches=specs, p4info_path=P4INFO, bmv2_json_path=BMV2_JSON,
                hint_addr="127.0.0.1:0", reconnect_min_s=0.02, reconnect_max_s=0.2)
    return ControllerConfig(**(base | kwargs))


def test_a_stop_request_during_start_stops_it_after_the_step_under_way(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer], monkeypatch: pytest.MonkeyPatch) -> None:
    """start(stop) with the stop event set while the first switch connects (a SIGTERM): the
    second switch is never connected, no pipeline is pushed, the first connection is closed (it
    holds no primary any more) and StartInterrupted is raised; stopping again does nothing."""
    stop = threading.Event()
    app = ControllerApp(config(topo_file, servers))
    connect = app._connect

    def connect_then_stop(spec: SwitchSpec):
        target = connect(spec)
        stop.set()
        return target

    monkeypatch.setattr(app, "_connect", connect_then_stop)
    with pytest.raises(StartInterrupted):
        app.start(stop)
    assert [fake.pipeline_pushes for fake in servers.values()] == [0, 0]
    assert servers["tor0"].primary_election_id is None and servers["tor1"].primary_election_id is None
    assert app.hint_server is None
    app.stop()


def test_controller_installs_serves_hints_digests_completes_and_survives_a_restart(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer]) -> None:
    topo = load_topology(topo_file)
    run = Running(config(topo_file, servers, clock_offsets_ns={"tor0": 12_345}, scheduler=PER_TRANSFER))
    try:
        app, tor0, tor1 = run.app, servers["tor0"], servers["tor1"]
        # start(): pipeline pushed, digests enabled, static state installed on both switches
        for sw, fake in servers.items():
            assert fake.pipeline_pushes == 1 and fake.digest_configured(n.REQUEST_DIGEST)
            assert len(fake.table_entries(n.IPV4_LPM)) == len(topo.routes(sw)) > 0
            assert len(fake.table_entries(n.SLACK_CLASS)) == 5
            assert fake.default_entry(n.DEFAULT_GRANT) is not None
        offset0 = tor0.default_entry(n.CLOCK_OFFSET).action.action.params[0].value
        assert int.from_bytes(offset0, "big") == 12_345  # the --clock-offset override
        # the estimate: fabric time just before the push, so close to the app's clock now
        assert 0 <= app.clock() - app.clock_offsets_ns["tor1"] < 60 * 1_000 * MS

        with HintClient(app.hint_address) as hints:
            # announced with a start time that has come: allocated and installed at d's ToR
            now = app.clock()
            result = hints.announce(FlowHint(7, "a", "d", 4 << 20, now + 50 * MS, "job/7"), start_time_ns=now)
            assert result.activated
            got = wait_for(lambda: grants(tor1).get(T(7)), what="flow 7's grant at tor1")
            assert got["rate_kbps"] > 0 and got["meter_slot"] >= 1
            assert T(7) not in grants(tor0)  # the grant lives at the receiver's ToR only
            assert hints.grant(7) is not None

            # a REQUEST digest for a flow nobody announced (b -> d) gets a grant too
            ips = [topo.host_ip("b"), topo.host_ip("d")]
            tor1.inject_digest(n.REQUEST_DIGEST, [[9, *ips, T(9), 1 << 20, (app.clock() + 80 * MS) & ((1 << 48) - 1)]])
            wait_for(lambda: T(9) in grants(tor1), what="flow 9's grant from its digest")
            assert tor1.wait_acks(1)
            # the run loop counts a switch's digests after merging them (the grant is written
            # first): wait for the count instead of racing it
            wait_for(lambda: app.stats.digests == 1, what="the digest counted")
            assert app.stats.digests == 1 and app.stats.digests_rejected == 0

            # completion deletes the entry
            hints.complete(7)
            wait_for(lambda: T(7) not in grants(tor1), what="flow 7's grant deleted")
            assert T(9) in grants(tor1)

            # switch restart: state and pipeline gone; the controller reconnects, pushes the
            # pipeline and re-installs routes and the live grant
            routes_before = len(tor1.table_entries(n.IPV4_LPM))
            tor1.restart()
            wait_for(lambda: tor1.pipeline_pushes == 2, what="pipeline pushed again")
            wait_for(lambda: app.stats.reconnects == 1, what="re-install")
            assert len(tor1.table_entries(n.IPV4_LPM)) == routes_before
            assert set(grants(tor1)) == {T(9)}
            assert tor1.digest_configured(n.REQUEST_DIGEST)
            assert tor0.pipeline_pushes == 1  # the other switch was left alone
            # and it keeps working after the restart
            hints.complete(9)
            wait_for(lambda: not grants(tor1), what="flow 9's grant deleted after the restart")
        assert app.stats.ticks > 0
    finally:
        run.stop()
    # stopped cleanly: the hint API no longer answers
    with HintClient(run.app.hint_address, timeout_s=0.5) as hints, pytest.raises(Exception):  # noqa: B017 (whatever the client raises: nothing answers)
        hints.grant(1)


def test_controller_installs_dependencies_once_and_the_switch_grants_their_transfers(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer]) -> None:
    topo = load_topology(topo_file)
    ip = topo.host_ip
    run = Running(config(topo_file, servers))  # the default: dependency grants
    try:
        app, tor0, tor1 = run.app, servers["tor0"], servers["tor1"]
        # setup: a port_share entry per load and mode for every host port, and the share lease
        for sw, fake in servers.items():
            host_ports = [p for p, nb in topo.ports(sw).items() if topo.is_host(nb)]
            assert len(fake.table_entries(n.PORT_SHARE)) == n.MAX_LOAD * len(n.SHARE_MODES) * len(host_ports)
            assert fake.default_entry(n.SHARE_LEASE) is not None
        with HintClient(app.hint_address) as hints:
            assert hints.announce_dependencies([DependencyHint(1, "a", "d", "A2F a->d"),
                                                DependencyHint(1, "b", "d", "A2F b->d")]) == 2
            assert share_grants(tor1) == {(ip("a"), 1): 1, (ip("b"), 1): 2} and share_grants(tor0) == {}
            writes = len(tor1.writes)
            assert hints.announce_dependencies([DependencyHint(1, "a", "d", "A2F a->d")]) == 0
            # a REQUEST of a dependency nobody announced (c -> d, id 4): installed from its digest
            tor1.inject_digest(n.REQUEST_DIGEST, [[77, ip("c"), ip("d"), 4, 1 << 20, 0]])
            wait_for(lambda: (ip("c"), 4) in share_grants(tor1), what="dependency (c, 4) from its digest")
            wait_for(lambda: app.stats.digests == 1, what="the digest counted")
            assert len(tor1.writes) == writes + 1  # that one write request only: meter and entry
            assert grants(tor1) == {}  # no per-transfer grant anywhere
            hints.end_dependency("b", 1)
            wait_for(lambda: (ip("b"), 1) not in share_grants(tor1), what="dependency (b, 1) ended")
            # switch restart: the dependencies and the shares are written again
            tor1.restart()
            wait_for(lambda: app.stats.reconnects == 1, what="re-install")
            assert share_grants(tor1) == {(ip("a"), 1): 1, (ip("c"), 4): 3}
            assert len(tor1.table_entries(n.PORT_SHARE)) == n.MAX_LOAD * len(n.SHARE_MODES)
    finally:
        run.stop()


def test_admit_at_announce_from_scheduler_config_and_unmanaged_switch_warned(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer], tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    yaml_path = tmp_path / "sched.yaml"
    yaml_path.write_text("grant_mode: per-transfer\nadmit_on_request: false\nallocator: {urgency_quantum_ns: 1000}\n")
    sched_cfg = load_scheduler_config(yaml_path)
    assert sched_cfg == SchedulerConfig(grant_mode="per-transfer", admit_on_request=False,
                                        allocator=sched_cfg.allocator)
    assert sched_cfg.allocator.urgency_quantum_ns == 1000
    cfg = config(
        topo_file,
        servers,
        scheduler=sched_cfg,
        switches=(SwitchSpec("tor1", servers["tor1"].address, 3),),
        duration_s=30.0,
    )
    with caplog.at_level(logging.INFO, logger="safs.control.controller"):
        run = Running(cfg)
    try:
        assert any("no --switch for tor0" in r.getMessage() for r in caplog.records)
        assert any("hint API listening" in r.getMessage() for r in caplog.records)
        assert servers["tor0"].pipeline_pushes == 0
        with HintClient(run.app.hint_address) as hints:
            result = hints.announce(FlowHint(3, "c", "d", 1 << 20, run.app.clock() + 20 * MS, "x"))
            assert not result.activated and not result.activation_scheduled
            wait_for(lambda: T(3) in grants(servers["tor1"]), what="grant at announce")
    finally:
        run.stop()


def test_run_returns_after_duration(topo_file: Path, servers: dict[str, FakeP4RuntimeServer]) -> None:
    app = ControllerApp(config(topo_file, servers, duration_s=0.2, tick_ns=2 * MS))
    with app:
        app.start()
        t0 = time.monotonic()
        app.run(threading.Event())
        assert 0.15 < time.monotonic() - t0 < 5
        assert app.stats.ticks >= 10


def test_start_fails_cleanly_when_a_switch_is_unreachable(
    topo_file: Path, servers: dict[str, FakeP4RuntimeServer]
) -> None:
    servers["tor1"].stop()
    app = ControllerApp(config(topo_file, servers, rpc_timeout_s=2.0))
    with pytest.raises(TargetConnectionError):
        app.start()
    assert app.hint_server is None
    assert app.links["tor0"].target._client is None  # the connection made before was closed


# ---------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    "text, want",
    [
        ("tor0=127.0.0.1:9559", SwitchSpec("tor0", "127.0.0.1:9559", 0)),
        ("s-1=switch.local:50001:7", SwitchSpec("s-1", "switch.local:50001", 7)),
    ],
)
def test_switch_spec_parses(text: str, want: SwitchSpec) -> None:
    assert parse_switch_spec(text) == want


@pytest.mark.parametrize(
    "text",
    [
        "tor0",
        "=1.2.3.4:1",
        "tor0=1.2.3.4",
        "tor0=1.2.3.4:0",
        "tor0=1.2.3.4:x",
        "tor0=1.2.3.4:1:-1",
        "tor0=1.2.3.4:1:2:3",
        f"tor0=h:1:{1 << 64}",
    ],
)
def test_switch_spec_errors_name_the_option(text: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_switch_spec(text)
    assert err.value.field == "--switch"


def test_clock_offset_and_config_errors(topo_file: Path, tmp_path: Path) -> None:
    assert parse_clock_offset("tor0=-5") == ("tor0", -5)
    with pytest.raises(InvalidInput, match="--clock-offset"):
        parse_clock_offset("tor0=abc")
    spec = (SwitchSpec("tor0", "127.0.0.1:1"),)
    base = dict(topology_path=topo_file, p4info_path=P4INFO, bmv2_json_path=BMV2_JSON)
    for kwargs, option in [
        ({"switches": ()}, "--switch"),
        ({"switches": spec * 2}, "--switch"),
        ({"switches": spec, "clock_offsets_ns": {"tor1": 0}}, "--clock-offset"),
        ({"switches": spec, "tick_ns": 10}, "--tick-ms"),
        ({"switches": spec, "duration_s": 0}, "--duration-s"),
        ({"switches": spec, "hint_addr": "nohost"}, "--hint-addr"),
        ({"switches": spec, "p4info_path": tmp_path / "none"}, "--p4info"),
    ]:
        with pytest.raises(InvalidInput) as err:
            ControllerConfig(**(base | kwargs))
        assert err.value.field == option
    bad = tmp_path / "bad.yaml"
    for text, key in [
        ("bogus: 1\n", "scheduler.bogus"),
        ("allocator: {nope: 1}\n", "scheduler.allocator.nope"),
        ("default_lease_ns: 5\n", "scheduler.default_lease_ns"),
        ("allocator: {headroom: 2}\n", "scheduler.allocator.headroom"),
    ]:
        bad.write_text(text)
        with pytest.raises(InvalidInput) as err:
            load_scheduler_config(bad)
        assert err.value.field == key and err.value.source == str(bad)


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--switch", "tor0"], "--switch: expected NAME=HOST:PORT"),
        (
            ["--switch", "tor9=127.0.0.1:9559"],
            "--switch: unknown switch 'tor9'; topology 'two-tors' has switches: tor0, tor1",
        ),
        (["--switch", "tor0=127.0.0.1:9559", "--switch", "tor1=127.0.0.1:9559"],
         "--switch: tor0 and tor1 both at 127.0.0.1:9559 device 0"),
        (["--switch", "tor0=127.0.0.1:9559", "--tick-ms", "zero"], "--tick-ms: must be a number"),
        (["--switch", "tor0=127.0.0.1:9559", "--clock-offset", "tor1=5"], "--clock-offset: 'tor1' is not a --switch"),
    ],
)
def test_cli_argument_errors_exit_2_with_one_line(
    topo_file: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    argv = ["controller", "--topology", str(topo_file), "--p4info", str(P4INFO), "--bmv2-json", str(BMV2_JSON), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_runs_for_a_duration_against_fake_switches(
    topo_file: Path, servers: dict[str, FakeP4RuntimeServer]
) -> None:
    argv = [
        "controller",
        "--topology",
        str(topo_file),
        "--p4info",
        str(P4INFO),
        "--bmv2-json",
        str(BMV2_JSON),
        "--switch",
        f"tor0={servers['tor0'].address}",
        "--switch",
        f"tor1={servers['tor1'].address}:3",
        "--hint-addr",
        "127.0.0.1:0",
        "--duration-s",
        "0.3",
        "--tick-ms",
        "5",
    ]
    assert main(argv) == 0
    assert all(len(f.table_entries(n.IPV4_LPM)) > 0 for f in servers.values())


def test_cli_refuses_a_switch_whose_queues_do_not_all_forward(
    topo_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The start-up self-check (docs/operations.md): tor1 with one priority queue (BMv2 started
    without --priority-queues 8) is refused in one line naming it as given, exit 2."""
    servers = {"tor0": FakeP4RuntimeServer(), "tor1": FakeP4RuntimeServer(device_id=3, priority_queues=1)}
    for fake in servers.values():
        fake.start()
    try:
        argv = ["controller", "--topology", str(topo_file), "--p4info", str(P4INFO), "--bmv2-json", str(BMV2_JSON),
                "--switch", f"tor0={servers['tor0'].address}", "--switch", f"tor1={servers['tor1'].address}:3",
                "--hint-addr", "127.0.0.1:0", "--duration-s", "5"]
        assert main(argv) == 2
    finally:
        for fake in servers.values():
            fake.stop()
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("safs: error:")]
    assert errors == [f"safs: error: --switch tor1={servers['tor1'].address}: self-check failed: queues 1..7 do "
                      "not forward (answered: 0): started without -- --priority-queues 8?"]
    assert "Traceback" not in err


def test_start_refuses_a_switch_that_answers_no_probe_before_serving(topo_file: Path) -> None:
    """tor0 loops nothing back (BMv2 without --cpu-port 255): start() refuses it naming the
    CPU port, serves nothing and closes what it opened."""
    servers = {"tor0": FakeP4RuntimeServer(cpu_port=None), "tor1": FakeP4RuntimeServer(device_id=3)}
    for fake in servers.values():
        fake.start()
    try:
        app = ControllerApp(config(topo_file, servers))
        with pytest.raises(InvalidInput) as err:
            app.start()
        assert err.value.field == f"--switch tor0={servers['tor0'].address}"
        assert "--cpu-port 255" in err.value.message
        assert app.hint_server is None and app.scheduler is None
        assert servers["tor0"].packet_outs_dropped == 8 and servers["tor1"].packet_outs_dropped == 0
    finally:
        for fake in servers.values():
            fake.stop()


# ---------------------------------------------------------------------------- derived settings


@pytest.mark.parametrize(
    "topology, frame_line, sim_mtu",
    [
        ("afd-16a2f.yaml", "", 1500),  # 100 Gbit/s hosts, 1 MiB buffers: K capped by the buffer
        ("mininet-afd.yaml", "", 1500),  # 10 Mbit/s hosts, 64 KiB buffers
        ("afd-16a2f.yaml", "max_frame_bytes: 9014\n", 9000),  # jumbo frames: the simulator's default MTU
    ],
)
def test_safs_controller_derives_line_rate_and_ecn_k_from_the_topology(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, topology: str, frame_line: str, sim_mtu: int
) -> None:
    """`safs controller` gets the topology's line rate and DCTCP K, as the simulator (and so the
    Mininet backend) derives them; the --scheduler-config file's other keys still apply."""
    import safs.apps.controller_command as cli_module
    from safs.core.errors import SafsError
    from safs.experiments.sim.config import SimConfig

    seen: list[ControllerConfig] = []

    class Captured(SafsError):
        pass

    class CaptureApp:  # stands in for ControllerApp: keep the config, connect to nothing
        def __init__(self, config: ControllerConfig) -> None:
            seen.append(config)
            raise Captured("config captured")

    monkeypatch.setattr(cli_module, "ControllerApp", CaptureApp)
    sched_yaml = tmp_path / "sched.yaml"
    sched_yaml.write_text(frame_line + "admit_on_request: false\n")
    topo_path = ROOT / "topologies" / topology
    argv = [
        "controller",
        "--topology",
        str(topo_path),
        "--p4info",
        str(P4INFO),
        "--bmv2-json",
        str(BMV2_JSON),
        "--switch",
        "leaf0=127.0.0.1:9559",
        "--scheduler-config",
        str(sched_yaml),
    ]
    assert main(argv) == 2 and len(seen) == 1
    got = seen[0].scheduler
    topo = load_topology(topo_path)
    want = SimConfig(mtu_bytes=sim_mtu).scheduler_config(topo)
    line_rate = max(topo.host_link_bps(h) for h in topo.hosts())
    assert got.allocator.line_rate_bps == want.allocator.line_rate_bps == line_rate
    assert got.ecn_threshold_pkts == want.ecn_threshold_pkts != SchedulerConfig().ecn_threshold_pkts
    assert got.max_frame_bytes == want.max_frame_bytes == sim_mtu + 14
    assert got.admit_on_request is False  # the file's keys still apply
    assert got.replace(admit_on_request=True) == want


def test_scheduler_config_file_keys_override_the_derived_ones(tmp_path: Path) -> None:
    topo = load_topology(ROOT / "topologies" / "mininet-afd.yaml")
    path = tmp_path / "sched.yaml"
    path.write_text("ecn_threshold_pkts: 7\nallocator: {line_rate_bps: 5000000, slack_thresholds_ns: [0, 1, 2, 3]}\n")
    cfg = load_scheduler_config(path, topo)
    assert (cfg.ecn_threshold_pkts, cfg.allocator.line_rate_bps, cfg.allocator.slack_thresholds_ns) == (
        7,
        5_000_000,
        (0, 1, 2, 3),
    )
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_scheduler_config(None, topo) == load_scheduler_config(empty, topo) != load_scheduler_config(empty)
    path.write_text("max_frame_bytes: '9014'\n")
    with pytest.raises(InvalidInput) as err:
        load_scheduler_config(path, topo)
    assert err.value.field == "scheduler.max_frame_bytes" and "64..65535 bytes" in err.value.message


def test_prometheus_metrics_expose_controller_scheduler_and_port_counters(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer], tmp_path: Path) -> None:
    run = Running(config(topo_file, servers, state_dir=tmp_path / "state"))
    try:
        with HintClient(run.app.hint_address) as hints:
            hints.announce_dependencies([DependencyHint(1, "a", "d")])
        servers["tor1"].set_counter(n.PORT_TX_BYTES, 1, 123_456, 100)
        servers["tor1"].set_counter(n.ECN_MARKED, 1, 0, 7)
        servers["tor0"].set_counter(n.FORGED, Forged.UNCLAIMED_DATA, 0, 5)
        servers["tor0"].set_counter(n.MALFORMED, Malformed.BAD_VERSION, 0, 2)
        server = serve_metrics(run.app, "127.0.0.1", 0)
        try:
            host, port = server.server_address[:2]
            url = f"http://{host}:{port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as resp:
                text = resp.read().decode()
        finally:
            server.shutdown()
        assert 'safs_port_tx_bytes_total{port="1",switch="tor1"} 123456.0' in text
        assert 'safs_port_tx_packets_total{port="1",switch="tor1"} 100.0' in text
        assert 'safs_port_ecn_marked_packets_total{port="1",switch="tor1"} 7.0' in text
        assert 'safs_switch_up{switch="tor0"} 1.0' in text
        assert 'safs_switch_forged_packets_total{reason="unclaimed_data",switch="tor0"} 5.0' in text
        assert 'safs_switch_forged_packets_total{reason="spoofed_source",switch="tor0"} 0.0' in text
        assert 'safs_switch_malformed_packets_total{reason="bad_version",switch="tor0"} 2.0' in text
        updates = run.app.scheduler.stats.table_updates
        assert updates > 0 and f"safs_scheduler_table_updates_total {float(updates)}" in text
        assert "safs_controller_digests_total 0.0" in text
        assert "safs_controller_reconciliations_total 2.0" in text  # one per switch at start
        assert "safs_state_records_total 1.0" in text and "safs_state_pending 0.0" in text
        assert "safs_controller_primary 1.0" in text and "safs_dependencies_active 1.0" in text
        assert 'safs_hint_calls_total{code="OK",method="AnnounceDependencies"} 1.0' in text
        assert 'safs_switch_writes_total{switch="tor1"}' in text
        writes = run.app.links["tor1"].writes
        assert f'safs_switch_write_latency_seconds_count{{switch="tor1"}} {float(writes)}' in text
        assert f'safs_switch_write_latency_seconds_bucket{{le="+Inf",switch="tor1"}} {float(writes)}' in text
        assert 'safs_switch_write_latency_seconds_bucket{le="5.0",switch="tor1"}' in text
        assert 'safs_port_enqueued_packets_total{depth_bucket="0",port="1",switch="tor1"} 0.0' in text
    finally:
        run.stop()


@pytest.mark.parametrize("addr", ["9100", "localhost:", ":9100", "localhost:70000", "localhost:x"])
def test_bad_metrics_address_is_refused_naming_the_option(addr: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_metrics_addr(addr)
    assert exc.value.field == "--metrics-addr" and "HOST:PORT" in exc.value.message


def test_a_switch_restarted_without_its_queues_stays_down_until_fixed(
        topo_file: Path, servers: dict[str, FakeP4RuntimeServer]) -> None:
    """A reconnection to a switch that lost its pipeline runs the start-up self-check again:
    restarted with one priority queue it is not re-installed (logged, retried); once it has
    its eight queues again the next attempt re-installs it."""
    run = Running(config(topo_file, servers, reconnect_min_s=0.05, reconnect_max_s=0.2))
    try:
        app, tor1 = run.app, servers["tor1"]
        tor1.priority_queues = 1
        tor1.restart()
        # each attempt pushes the pipeline and waits 2 s for the probes
        wait_for(lambda: app.stats.reconnect_failures >= 1 and tor1.pipeline_pushes >= 2, timeout_s=60,
                 what="the self-check refusing the reconnection")
        assert app.stats.reconnects == 0 and app.links["tor1"].is_down
        assert not tor1.table_entries(n.IPV4_LPM)  # nothing written to the refused switch
        tor1.priority_queues = 8
        wait_for(lambda: app.stats.reconnects == 1, timeout_s=60, what="re-install once the queues are back")
        assert tor1.table_entries(n.IPV4_LPM) and not app.links["tor1"].is_down
    finally:
        run.stop()

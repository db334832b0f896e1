"""TLS and application identities (docs/operations.md, "TLS and identities"): the hint API with
a server certificate and mutual TLS, refusals (plaintext client, wrong CA, client certificate of
another CA, expired certificate, a host the application does not own, a quota exceeded), the
certificate reloaded without a restart; the controller's P4Runtime channel over TLS to a fake
switch and, where installed, BMv2; and the command line's checks."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_controller_app import BMV2_JSON, P4INFO, config
from test_p4rt_target import free_port
from tls_certs import Ca
from two_tors import two_tors

from safs.control.controller import ControllerApp, ControllerConfig, SwitchSpec
from safs.control.hintapi import server as hint_server
from safs.control.hintapi.client import HintClient, HintServiceError
from safs.control.tls import TlsFiles, load_identities
from safs.core.errors import InvalidInput, TargetConnectionError
from safs.core.hints import DependencyHint
from safs.core.scheduler import Scheduler, SchedulerConfig
from safs.targets.bmv2 import target_options
from safs.targets.p4rt.target import P4RuntimeTarget
from safs.targets.pipeline_model import PipelineModel
from safs.testing.fake_p4rt import FakeP4RuntimeServer


@pytest.fixture
def pki(tmp_path: Path) -> dict:
    ca, other = Ca(tmp_path, "ca"), Ca(tmp_path, "other-ca")
    return {
        "dir": tmp_path, "ca": ca, "other": other,
        "server": ca.issue("hints", server=True, stem="server"),
        "app1": ca.issue("app1"), "app2": ca.issue("app2"),
        "expired": ca.issue("app1", expired=True, stem="expired"),
        "foreign": other.issue("app1", stem="foreign"),
    }


@pytest.fixture
def served(pki: dict, tmp_path: Path):
    """A hint API with mutual TLS and identities: app1 owns a and b (2 dependencies at most),
    app2 owns c."""
    ids_file = tmp_path / "ids.yaml"
    ids_file.write_text("applications:\n  app1: {hosts: [a, b], max_dependencies: 2}\n  app2: {hosts: [c]}\n")
    topo = two_tors()
    sched = Scheduler(topo, {sw: PipelineModel(sw, lambda: 0) for sw in topo.switches()}, SchedulerConfig())
    sched.setup(0)
    cert, key = pki["server"]
    tls = TlsFiles(cert, key, pki["ca"].pem)
    running = hint_server.start(sched, "127.0.0.1:0", lambda: 0, tls=tls,
                                identities=load_identities(ids_file, topo.hosts()))
    yield running, pki
    running.stop()


def client(running, pki: dict, who: str | None, ca: str = "ca") -> HintClient:
    cert, key = pki[who] if who else (None, None)
    return HintClient(f"localhost:{running.port}", timeout_s=5, tls=TlsFiles(cert, key, pki[ca].pem))


def test_mutual_tls_admits_a_known_application_for_its_own_hosts(served) -> None:
    running, pki = served
    with client(running, pki, "app1") as app1:
        assert app1.announce_dependencies([DependencyHint(1, "a", "d"), DependencyHint(1, "b", "d")]) == 2
        with pytest.raises(HintServiceError) as err:  # a host it does not own
            app1.announce_dependencies([DependencyHint(2, "c", "d")])
        assert err.value.code == "PERMISSION_DENIED" and "'c'" in err.value.details
        with pytest.raises(HintServiceError) as err:  # a third dependency: over its quota of 2
            app1.announce_dependencies([DependencyHint(3, "a", "d")])
        assert err.value.code == "RESOURCE_EXHAUSTED" and "max_dependencies=2" in err.value.details
        app1.end_dependency("a", 1)
        assert app1.announce_dependencies([DependencyHint(3, "a", "d")]) == 1
    with client(running, pki, "app2") as app2:
        with pytest.raises(HintServiceError) as err:  # may not end another application's dependency
            app2.end_dependency("a", 3)
        assert err.value.code == "PERMISSION_DENIED"
        assert app2.announce_dependencies([DependencyHint(1, "c", "d")]) == 1


@pytest.mark.parametrize("who, ca", [("expired", "ca"), ("foreign", "ca"), ("app1", "other"), (None, "ca")],
                         ids=["expired-client-cert", "client-cert-of-another-ca", "client-trusts-another-ca",
                              "no-client-cert"])
def test_bad_certificates_are_refused(served, who: str | None, ca: str) -> None:
    running, pki = served
    with client(running, pki, who, ca) as bad:
        with pytest.raises(HintServiceError) as err:
            bad.announce_dependencies([DependencyHint(1, "a", "d")])
        assert err.value.code == "UNAVAILABLE"  # the handshake failed: no call reached the service


def test_a_plaintext_client_is_refused(served) -> None:
    running, _ = served
    with HintClient(f"127.0.0.1:{running.port}", timeout_s=5) as plain:
        with pytest.raises(HintServiceError) as err:
            plain.announce_dependencies([DependencyHint(1, "a", "d")])
        assert err.value.code == "UNAVAILABLE"


def test_a_certificate_unknown_to_the_identities_file_is_unauthenticated(served) -> None:
    running, pki = served
    pki["app3"] = pki["ca"].issue("app3")
    with client(running, pki, "app3") as app3:
        with pytest.raises(HintServiceError) as err:
            app3.announce_dependencies([DependencyHint(1, "a", "d")])
        assert err.value.code == "UNAUTHENTICATED"


def test_the_server_certificate_is_reloaded_without_a_restart(served) -> None:
    running, pki = served
    new_ca = pki["new-ca"] = Ca(pki["dir"], "new-ca")
    with client(running, pki, "app1", ca="new-ca") as early:  # the server's cert is not new-ca's yet
        with pytest.raises(HintServiceError):
            early.announce_dependencies([DependencyHint(1, "a", "d")])
    cert, key = new_ca.issue("hints", server=True, stem="renewed")
    time.sleep(0.01)  # a later modification time
    shutil.copy(cert, pki["server"][0])
    shutil.copy(key, pki["server"][1])
    with client(running, pki, "app1", ca="new-ca") as later:  # a new connection: the renewed cert
        assert later.announce_dependencies([DependencyHint(1, "a", "d")]) == 1


def test_identities_file_errors_name_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "ids.yaml"
    bad.write_text("applications:\n  app1: {hosts: [zz]}\n")
    with pytest.raises(InvalidInput, match="applications.app1.hosts.*unknown host 'zz'"):
        load_identities(bad, two_tors().hosts())
    bad.write_text("applications:\n  app1: {hosts: [a], max_dependencies: -1}\n")
    with pytest.raises(InvalidInput, match="max_dependencies"):
        load_identities(bad, two_tors().hosts())


# ---------------------------------------------------------------------------- controller options


def test_plaintext_hint_api_only_on_loopback_unless_insecure(topo_file: Path, pki: dict) -> None:
    with pytest.raises(InvalidInput, match="--hint-addr: 0.0.0.0:50051 is not a loopback"):
        _cfg(topo_file, hint_addr="0.0.0.0:50051")
    assert _cfg(topo_file, hint_addr="0.0.0.0:50051", insecure=True).insecure
    cert, key = pki["server"]
    assert _cfg(topo_file, hint_addr="0.0.0.0:50051", tls=TlsFiles(cert, key)).tls is not None
    with pytest.raises(InvalidInput, match="--tls-identities: needs mutual TLS"):
        _cfg(topo_file, tls=TlsFiles(cert, key), identities_path=topo_file)
    with pytest.raises(InvalidInput, match="--tls-cert"):
        TlsFiles(cert, None)
    with pytest.raises(InvalidInput, match="--tls-client-ca: not a file"):
        TlsFiles(cert, key, Path("/nonexistent.pem"))


def _cfg(topo_file: Path, **kwargs) -> ControllerConfig:
    base = dict(topology_path=topo_file, switches=(SwitchSpec("tor0", "127.0.0.1:1"),), p4info_path=P4INFO,
                bmv2_json_path=BMV2_JSON)
    return ControllerConfig(**(base | kwargs))


# ---------------------------------------------------------------------------- P4Runtime over TLS


def test_p4runtime_channel_over_mutual_tls_to_a_fake_switch(pki: dict, topo_file: Path) -> None:
    cert, key = pki["server"]
    ccert, ckey = pki["app1"]
    fake = FakeP4RuntimeServer()
    fake.start(tls=(cert.read_bytes(), key.read_bytes(), pki["ca"].pem.read_bytes()))
    try:
        t = P4RuntimeTarget("tor0", f"localhost:{fake.address.rsplit(':', 1)[1]}", 0, P4INFO, BMV2_JSON,
                            timeout_s=5, tls=(pki["ca"].pem, ccert, ckey))
        try:
            t.push_pipeline()
            assert t.runs_pipeline()
        finally:
            t.close()
        with pytest.raises(TargetConnectionError):  # no client certificate: refused
            P4RuntimeTarget("tor0", f"localhost:{fake.address.rsplit(':', 1)[1]}", 0, P4INFO, BMV2_JSON,
                            timeout_s=2, tls=(pki["ca"].pem, None, None)).close()
        with pytest.raises(TargetConnectionError):  # plaintext to a TLS switch
            P4RuntimeTarget("tor0", fake.address, 0, P4INFO, BMV2_JSON, timeout_s=2).close()
    finally:
        fake.stop()


@pytest.mark.bmv2
def test_p4runtime_channel_over_mutual_tls_to_bmv2(pki: dict, tmp_path: Path) -> None:
    cert, key = pki["server"]
    ccert, ckey = pki["app1"]
    port = free_port()
    log = (tmp_path / "bmv2.log").open("w")
    proc = subprocess.Popen(
        [shutil.which("simple_switch_grpc"), "--no-p4", "--device-id", "0", "--thrift-port", str(free_port()),
         "--", "--grpc-server-addr", f"127.0.0.1:{port}", *target_options(), "--grpc-server-ssl",
         "--grpc-server-cacert", str(pki["ca"].pem), "--grpc-server-cert", str(cert), "--grpc-server-key", str(key),
         "--grpc-server-with-client-auth"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                t = P4RuntimeTarget("tor0", f"localhost:{port}", 0, P4INFO, BMV2_JSON, timeout_s=5,
                                    tls=(pki["ca"].pem, ccert, ckey))
                break
            except TargetConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        try:
            t.push_pipeline()
            assert t.runs_pipeline()
        finally:
            t.close()
        with pytest.raises(TargetConnectionError):
            P4RuntimeTarget("tor0", f"127.0.0.1:{port}", 0, P4INFO, BMV2_JSON, timeout_s=2).close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_controller_app_over_tls_end_to_end(pki: dict, topo_file: Path, tmp_path: Path) -> None:
    """``safs controller`` with mutual TLS on both sides: P4Runtime to two fake switches and the
    hint API to an application with a certificate."""
    cert, key = pki["server"]
    fakes = {"tor0": FakeP4RuntimeServer(), "tor1": FakeP4RuntimeServer(device_id=3)}
    for f in fakes.values():
        f.start(tls=(cert.read_bytes(), key.read_bytes(), pki["ca"].pem.read_bytes()))
    ids = tmp_path / "ids.yaml"
    ids.write_text("applications:\n  app1: {hosts: [a, b, c, d]}\n")
    ccert, ckey = pki["app2"]
    cfg = config(topo_file, fakes, hint_addr="127.0.0.1:0", tls=TlsFiles(cert, key, pki["ca"].pem),
                 identities_path=ids, p4rt_tls=TlsFiles(ccert, ckey, pki["ca"].pem, option="--p4rt"))
    cfg = type(cfg)(**(cfg.__dict__ | {"switches": tuple(
        type(s)(s.name, f"localhost:{s.grpc_addr.rsplit(':', 1)[1]}", s.device_id) for s in cfg.switches)}))
    app = ControllerApp(cfg)
    try:
        app.start()
        port = app.hint_address.rsplit(":", 1)[1]
        with HintClient(f"localhost:{port}", tls=TlsFiles(*pki["app1"], pki["ca"].pem)) as hints:
            assert hints.announce_dependencies([DependencyHint(1, "a", "d")]) == 1
        assert fakes["tor1"].table_entries("SafsIngress.dep_grant")
    finally:
        app.stop()
        for f in fakes.values():
            f.stop()


def test_unusable_tls_files_and_addresses_are_refused_before_any_switch_is_touched(
        topo_file: Path, pki: dict, tmp_path: Path) -> None:
    cert, key = pki["server"]
    _, other_key = pki["app1"]
    fakes = {"tor0": FakeP4RuntimeServer(), "tor1": FakeP4RuntimeServer()}
    for fake in fakes.values():
        fake.start()
    try:
        for tls, addr, field in ((TlsFiles(cert, other_key), "127.0.0.1:0", "--tls-cert"),  # key of another cert
                                 (TlsFiles(cert, key), f"unix:{tmp_path}/no/such/dir/h.sock", "--hint-addr")):
            cfg = config(topo_file, fakes, hint_addr=addr, tls=tls)
            app = ControllerApp(cfg)
            with pytest.raises(InvalidInput) as err:
                app.start()
            assert err.value.field == field
        for fake in fakes.values():
            assert fake.pipeline_pushes == 0 and not fake.writes  # nothing reached the switches
    finally:
        for fake in fakes.values():
            fake.stop()


def test_identities_files_with_no_application_shared_or_repeated_hosts_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "ids.yaml"
    for text, needle in (("applications: {}\n", "names no application"),
                         ("applications:\n  a: {hosts: [a, a]}\n", "applications.a.hosts: must be a non-empty list"),
                         ("applications:\n  a: {hosts: [a]}\n  b: {hosts: [a]}\n", "belongs to both 'a' and 'b'"),
                         ("applications:\n  a: {hosts: [a], max_deps: 3}\n", "valid: hosts, max_dependencies"),
                         ("applications:\n  a: {hosts: [a], max_dependencies: 0}\n", "in 1..1048576")):
        bad.write_text(text)
        with pytest.raises(InvalidInput, match=needle):
            load_identities(bad, two_tors().hosts())

"""The P4Runtime client (safs.targets.p4rt.client) and the typed switch errors, over real gRPC
against the in-process fake P4Runtime server on an ephemeral port (default tier, no BMv2).

Checks what docs/p4runtime.md ("Errors", "The client") promises: a batch's failures arrive as
``UpdateFailure`` objects at their indexes; connect, arbitration, pipeline push, reads and the
stream raise ``TargetConnectionError`` naming the address, never a ``TargetError`` with a made-up
"update 0"; ``EncodeError`` is a ``SafsError``; the p4runtime-shell behaviours the client works
around (sys.exit and a print in the handshake, a clean stream end going unnoticed, an unbounded
tear-down) do not leak; and the PTF tests' client shares only the session, not the encoder.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import socket
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from synth_p4info import current_p4info

from safs.core import p4names as n
from safs.core.errors import InvalidInput, SafsError, TargetConnectionError, TargetError, UpdateFailure
from safs.core.target import CounterValue, Op, TableEntry, Update
from safs.targets.p4rt.client import SwitchClient
from safs.targets.p4rt.codec import EncodeError, encode_update
from safs.targets.p4rt.p4info import P4InfoIndex
from safs.targets.p4rt.target import P4RuntimeTarget
from safs.testing.fake_p4rt import FakeP4RuntimeServer

ROOT = Path(__file__).resolve().parents[1]
_P4INFO_DIR = tempfile.TemporaryDirectory(prefix="safs-p4info-")  # removed when the run ends
P4INFO = current_p4info(Path(_P4INFO_DIR.name))  # the committed one once it is v2 (tests/synth_p4info.py)
BMV2_JSON = ROOT / "p4src" / "build" / "safs.json"  # the fake server does not read it
SRC = 0x0A000001  # the sender address of the test's dep_grant entries
PTF_DIR = ROOT / "ptf_tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def grant(dep_id: int, rate: int = 1000) -> TableEntry:
    return TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: SRC, n.F_DEP_ID: dep_id}, n.ACT_SET_FIXED_GRANT,
                      {"rate_kbps": rate, "epoch": 1, "lease_us": 5000, "meter_slot": 1})


def dep_ids(server: FakeP4RuntimeServer) -> set[int]:
    """The dep_id of every dep_grant entry the fake switch holds."""
    fid = next(f.id for f in P4InfoIndex.from_file(P4INFO).table(n.DEP_GRANT).match_fields if f.name == n.F_DEP_ID)
    return {int.from_bytes(m.exact.value, "big") for e in server.table_entries(n.DEP_GRANT) for m in e.match
            if m.field_id == fid}


def p4info() -> p4info_pb2.P4Info:
    info = p4info_pb2.P4Info()
    text_format.Merge(P4INFO.read_text(), info)
    return info


def non_daemon_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()}


@pytest.fixture
def server():
    """A fake switch that already runs the SAFS pipeline (as if pushed earlier)."""
    with FakeP4RuntimeServer(p4info=p4info()) as fake:
        yield fake


# ---------------------------------------------------------------------------- error types

def test_update_failure_is_a_frozen_value_and_target_error_takes_only_those() -> None:
    f = UpdateFailure(2, "NOT_FOUND", "Cannot find match entry")
    assert (f.index, f.code, f.message) == (2, "NOT_FOUND", "Cannot find match entry")
    same = UpdateFailure(2, "NOT_FOUND", "Cannot find match entry")
    assert f == same and hash(f) == hash(same)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.code = "OK"  # type: ignore[misc]
    err = TargetError([UpdateFailure(0, "ALREADY_EXISTS", "a"), f])
    assert err.failures == (UpdateFailure(0, "ALREADY_EXISTS", "a"), f)
    assert str(err) == "2 update(s) failed: update 0: ALREADY_EXISTS: a; update 2: NOT_FOUND: Cannot find match entry"
    assert isinstance(err, SafsError)
    with pytest.raises(TypeError, match="UpdateFailure"):
        TargetError([(0, "UNAVAILABLE", "down")])  # the old string tuples are refused


def test_connection_error_names_address_operation_and_code() -> None:
    err = TargetConnectionError("127.0.0.1:9559", "read", "FAILED_PRECONDITION", "no pipeline", switch="tor0")
    assert (err.address, err.operation, err.code, err.message, err.switch) == \
        ("127.0.0.1:9559", "read", "FAILED_PRECONDITION", "no pipeline", "tor0")
    assert str(err) == "tor0 at 127.0.0.1:9559: read failed: FAILED_PRECONDITION: no pipeline"
    assert isinstance(err, SafsError) and not isinstance(err, TargetError)
    assert not hasattr(err, "failures")


def test_encode_error_is_a_safs_error_raised_before_sending() -> None:
    assert issubclass(EncodeError, InvalidInput) and issubclass(EncodeError, SafsError)
    index = P4InfoIndex.from_file(P4INFO)
    with pytest.raises(SafsError) as e:
        encode_update(index, Update(Op.INSERT, TableEntry("SafsIngress.nope", {}, n.ACT_DROP)))
    assert isinstance(e.value, EncodeError)
    assert (e.value.code, e.value.field) == ("INVALID_ARGUMENT", "table")
    with pytest.raises(EncodeError) as e:
        encode_update(index, Update(Op.INSERT, grant(-1)))
    assert (e.value.code, e.value.field) == ("INVALID_ARGUMENT", f"{n.DEP_GRANT}.{n.F_DEP_ID}")


# ---------------------------------------------------------------------------- writes

def test_two_bad_updates_in_one_batch_raise_two_update_failures(server) -> None:
    index = P4InfoIndex.from_file(P4INFO)
    batch = [Update(Op.INSERT, grant(1)), Update(Op.INSERT, grant(1, rate=2)),  # 1: ALREADY_EXISTS
             Update(Op.MODIFY, grant(2)), Update(Op.INSERT, grant(3))]          # 2: NOT_FOUND
    updates = [encode_update(index, u) for u in batch]
    with SwitchClient(server.address, 0, (0, 1), timeout_s=5.0, name="tor0") as client:
        assert client.is_primary
        with pytest.raises(TargetError) as e:
            client.write(updates)
        assert e.value.failures == (
            UpdateFailure(1, "ALREADY_EXISTS", "Match entry exists, use MODIFY if you wish to change action"),
            UpdateFailure(2, "NOT_FOUND", "Cannot find match entry"))
        # the exact request: one WriteRequest, every update as given, CONTINUE_ON_ERROR
        want = p4runtime_pb2.WriteRequest(device_id=0, election_id=p4runtime_pb2.Uint128(high=0, low=1),
                                          atomicity=p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR)
        want.updates.extend(updates)
        assert server.writes == [want]
        assert dep_ids(server) == {1, 3}
        client.write([])  # nothing to send: no request
        assert len(server.writes) == 1

    # the same batch through the target: same indexes and codes, messages name the switch
    with P4RuntimeTarget("tor0", server.address, 0, P4INFO, election_id=(0, 2)) as target:
        target.write([Update(Op.DELETE, grant(1)), Update(Op.DELETE, grant(3))])
        with pytest.raises(TargetError) as e:
            target.write(batch)
        assert [(f.index, f.code) for f in e.value.failures] == [(1, "ALREADY_EXISTS"), (2, "NOT_FOUND")]
        assert all(isinstance(f, UpdateFailure) and f.message.startswith("tor0: ") for f in e.value.failures)


def test_encode_failures_keep_their_index_among_the_switchs_failures(server) -> None:
    with P4RuntimeTarget("tor0", server.address, 0, P4INFO) as target:
        before = len(server.writes)
        with pytest.raises(TargetError) as e:
            target.write([Update(Op.INSERT, grant(5)),
                          Update(Op.INSERT, TableEntry("SafsIngress.nope", {}, n.ACT_DROP)),  # not sent
                          Update(Op.MODIFY, grant(6)),                                        # NOT_FOUND
                          Update(Op.INSERT, grant(-1))])                                      # not sent
        assert [(f.index, f.code) for f in e.value.failures] == \
            [(1, "INVALID_ARGUMENT"), (2, "NOT_FOUND"), (3, "INVALID_ARGUMENT")]
        assert "unknown table 'SafsIngress.nope'" in e.value.failures[0].message
        assert len(server.writes) == before + 1 and len(server.writes[-1].updates) == 2


def test_backup_connects_quietly_and_every_write_is_permission_denied(server, capsys) -> None:
    with SwitchClient(server.address, 0, (0, 9)) as primary, SwitchClient(server.address, 0, (0, 3)) as backup:
        assert primary.is_primary and not backup.is_primary
        index = P4InfoIndex.from_file(P4INFO)
        with pytest.raises(TargetError) as e:
            backup.write([encode_update(index, Update(Op.INSERT, grant(i))) for i in (1, 2)])
        assert [(f.index, f.code) for f in e.value.failures] == [(0, "PERMISSION_DENIED"), (1, "PERMISSION_DENIED")]
        with pytest.raises(TargetConnectionError) as c:
            backup.push_pipeline(P4INFO, BMV2_JSON)
        assert (c.value.operation, c.value.code) == ("pipeline push", "PERMISSION_DENIED")
    # p4runtime-shell's own handshake prints "You are not the primary client..." to stdout
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------------------- not a batch

def test_connect_to_a_dead_address_raises_the_connection_error_naming_it() -> None:
    address = f"127.0.0.1:{free_port()}"
    threads = non_daemon_threads()
    started = time.monotonic()
    with pytest.raises(TargetConnectionError) as e:
        SwitchClient(address, 0, (0, 1), timeout_s=2.0, name="tor0")
    assert not isinstance(e.value, TargetError)
    assert (e.value.address, e.value.operation, e.value.code) == (address, "connect", "UNAVAILABLE")
    assert address in str(e.value) and "update 0" not in str(e.value)
    with pytest.raises(TargetConnectionError) as e:  # the target too (no SystemExit, no TargetError)
        P4RuntimeTarget("tor0", address, 0, P4INFO, timeout_s=2.0)
    assert (e.value.address, e.value.switch, e.value.code) == (address, "tor0", "UNAVAILABLE")
    assert time.monotonic() - started < 5
    assert non_daemon_threads() <= threads  # p4runtime-shell's stream thread was ended


def test_arbitration_refused_for_a_wrong_device_id() -> None:
    # How the client reports an arbitration the switch refuses, with the fake's refusal of a
    # wrong device id (BMv2 1.15.5 started with --no-p4 accepts any device id at arbitration).
    with FakeP4RuntimeServer(device_id=3, p4info=p4info()) as fake:
        with pytest.raises(TargetConnectionError) as e:
            SwitchClient(fake.address, 0, (0, 1), timeout_s=2.0)
    assert (e.value.operation, e.value.code, e.value.address) == ("arbitration", "NOT_FOUND", fake.address)
    assert "Invalid device id 0" in e.value.message


class _SilentSwitch(p4runtime_pb2_grpc.P4RuntimeServicer):
    """Accepts the StreamChannel and never answers or ends it until released."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def StreamChannel(self, request_iterator, context):
        self.release.wait(30)
        return iter(())


def test_no_arbitration_answer_is_bounded_and_leaves_no_thread() -> None:
    silent = _SilentSwitch()
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(silent, grpc_server)
    address = f"127.0.0.1:{grpc_server.add_insecure_port('127.0.0.1:0')}"
    grpc_server.start()
    threads = non_daemon_threads()
    try:
        started = time.monotonic()
        with pytest.raises(TargetConnectionError) as e:
            SwitchClient(address, 0, (0, 1), timeout_s=0.5)
        # waited timeout_s for the answer (not p4runtime-shell's fixed 2 s, no sys.exit), then
        # timeout_s for the switch to end the stream before cancelling it
        assert time.monotonic() - started < 3
        assert (e.value.operation, e.value.code) == ("arbitration", "UNAVAILABLE")
        assert "no arbitration answer within 0.5 s" in e.value.message
        assert non_daemon_threads() <= threads
    finally:
        silent.release.set()
        grpc_server.stop(grace=None).wait()


def test_reads_and_pipeline_push_fail_with_the_connection_error() -> None:
    with FakeP4RuntimeServer() as fake:  # a --no-p4 switch: no pipeline yet
        with P4RuntimeTarget("tor0", fake.address, 0, P4INFO, BMV2_JSON) as target:
            for read in (lambda: target.read_counter(n.DEP_BYTES, 1),
                         lambda: target.read_counter_cells(n.DEP_BYTES, [1, 2]),
                         lambda: target.read_table(n.DEP_GRANT)):
                with pytest.raises(TargetConnectionError) as e:
                    read()
                assert (e.value.operation, e.value.code, e.value.address, e.value.switch) == \
                    ("read", "FAILED_PRECONDITION", fake.address, "tor0")
            target.push_pipeline()
            assert target.read_counter(n.DEP_BYTES, 1) == CounterValue(0, 0)
        with pytest.raises(TargetConnectionError) as e:  # closed: no I/O
            target.read_counter(n.DEP_BYTES, 1)
        assert (e.value.operation, e.value.code) == ("read", "UNAVAILABLE")
        with pytest.raises(TargetError) as w:  # a write to a closed target: every update listed
            target.write([Update(Op.INSERT, grant(1)), Update(Op.INSERT, grant(2))])
        assert [(f.index, f.code) for f in w.value.failures] == [(0, "UNAVAILABLE"), (1, "UNAVAILABLE")]


def test_a_stream_the_switch_ends_cleanly_is_noticed(server) -> None:
    client = SwitchClient(server.address, 0, (0, 1), timeout_s=2.0)
    try:
        assert client.is_primary and client.digest_lists() == []
        server.restart()  # ends every stream with status OK (p4runtime-shell marks only errors)
        deadline = time.monotonic() + 5
        with pytest.raises(TargetConnectionError) as e:
            while time.monotonic() < deadline:
                client.digest_lists(timeout_s=0.1)
        assert (e.value.operation, e.value.code) == ("stream", "UNAVAILABLE")
        assert "ended by the switch" in e.value.message
        assert not client.is_primary
    finally:
        client.close()
    client.close()  # idempotent


# ---------------------------------------------------------------------------- the PTF tests' client

def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_ptf_tests_share_the_session_but_not_the_encoder() -> None:
    # differential.py drives the controller's own P4RuntimeTarget on purpose (model vs BMv2 with
    # the same typed updates); every other PTF module encodes with ptf_tests/p4rt_client.py and
    # opens no gRPC session of its own (run.py only polls the port with Capabilities until the
    # switch answers).
    for path in sorted(PTF_DIR.glob("*.py")):
        if path.name == "differential.py":
            continue
        p4rt = {m for m in _imports(path) if m.startswith("safs.targets.p4rt")}
        assert p4rt <= {"safs.targets.p4rt.client"}, (path.name, p4rt)
        if path.name != "run.py":
            assert not {m for m in _imports(path) if m.split(".")[0] in ("grpc", "p4runtime_sh")}, path.name
    assert "safs.targets.p4rt.client" in _imports(PTF_DIR / "p4rt_client.py")


def _ptf_client_module():
    spec = importlib.util.spec_from_file_location("ptf_p4rt_client", PTF_DIR / "p4rt_client.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ptf_client_encodes_on_its_own_over_the_shared_session() -> None:
    ptf = _ptf_client_module()
    with FakeP4RuntimeServer() as fake:
        client = ptf.P4RtClient(fake.address, 0, timeout_s=5.0)
        try:
            index = client.push_pipeline(str(P4INFO), str(BMV2_JSON), cookie=0x5AF5)
            te = client.table_entry(n.DEP_GRANT, {n.F_SRC_ADDR: SRC, n.F_DEP_ID: 7}, n.ACT_SET_FIXED_GRANT,
                                    {"rate_kbps": 5, "epoch": 1, "lease_us": 5000, "meter_slot": 2})
            client.write([ptf.update("INSERT", table_entry=te)])
            assert fake.table_entries(n.DEP_GRANT) == [te]  # its own canonical bytes, as stored
            with pytest.raises(TargetError) as e:
                client.write([ptf.update("INSERT", table_entry=te)])
            assert [(f.index, f.code) for f in e.value.failures] == [(0, "ALREADY_EXISTS")]
            de = p4runtime_pb2.DigestEntry(digest_id=index.digest_id(n.REQUEST_DIGEST))
            client.write([ptf.update("INSERT", digest_entry=de)])
            list_id = fake.inject_digest(n.REQUEST_DIGEST, [[7, 1, 2, 3, 4, 5]])
            got = client.next_digest(5.0)
            assert (got.list_id, [ptf.decode(m.bitstring) for m in got.data[0].struct.members]) == \
                (list_id, [7, 1, 2, 3, 4, 5])
            client.ack_digest(got)
            assert fake.wait_acks(1) and fake.acks == [(de.digest_id, list_id)]
            with pytest.raises(TimeoutError):
                client.next_digest(0.05)
            assert client.read_counter(n.DEP_BYTES, 2) == (0, 0)
        finally:
            client.close()
        holder = ptf.P4RtClient(fake.address, 0, election_id=(0, 5), timeout_s=5.0)
        try:
            with pytest.raises(TargetConnectionError) as c:  # the PTF tests must be primary
                ptf.P4RtClient(fake.address, 0, election_id=(0, 2), timeout_s=5.0)
            assert c.value.code == "PERMISSION_DENIED"
        finally:
            holder.close()

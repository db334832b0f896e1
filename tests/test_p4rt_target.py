"""The P4Runtime target over real gRPC: against the in-process fake server (default tier) and,
where ``simple_switch_grpc`` and the compiled artifacts exist, against BMv2 (``bmv2`` tier).

The P4Info is the committed p4src/build/safs.p4info.txtpb when it has the current (v2) tables;
otherwise one is synthesised from the pipeline model's schema (same names, widths, sizes;
tests/synth_p4info.py), and a test checks the two agree once the committed file is current.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from p4.v1 import p4runtime_pb2
from synth_p4info import (
    COMMITTED_P4INFO,
    DIGEST_MEMBERS,
    NEEDS_V2,
    committed_is_current,
    current_p4info,
    synthesized_p4info,
)
from two_tors import MS, two_tors  # the shared two-ToR test topology

from safs.core import p4names as n
from safs.core.errors import InvalidInput, TargetConnectionError, TargetError
from safs.core.hints import DependencyHint, FlowHint
from safs.core.scheduler import Repairs, Scheduler, SchedulerConfig
from safs.core.target import (
    ActionProfileGroup,
    ActionProfileMember,
    CloneSession,
    CounterValue,
    Lpm,
    MeterConfig,
    Op,
    Range,
    RequestDigest,
    TableEntry,
    Update,
)
from safs.core.timebase import TIME_MASK
from safs.core.topology import load_topology
from safs.targets import pipeline_model as pm
from safs.targets.bmv2 import target_options
from safs.targets.p4rt.client import parse_write_error
from safs.targets.p4rt.codec import encode_update
from safs.targets.p4rt.p4info import P4InfoIndex, bytes_to_int, canonical_bytes, padded_bytes
from safs.targets.p4rt.target import DigestSettings, P4RuntimeTarget
from safs.targets.pipeline_model import PipelineModel
from safs.testing.fake_p4rt import FakeP4RuntimeServer

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "p4src" / "build"
COMMITTED_JSON = BUILD / "safs.json"
SRC = 0x0A000001  # the sender address of the test's dep_grant entries

# ---------------------------------------------------------------------------- P4Info

@pytest.fixture(scope="module")
def p4info_path(tmp_path_factory) -> Path:
    return current_p4info(tmp_path_factory.mktemp("p4info"))


@pytest.fixture(scope="module")
def bmv2_json(tmp_path_factory) -> Path:
    if COMMITTED_JSON.exists():
        return COMMITTED_JSON
    path = tmp_path_factory.mktemp("json") / "safs.json"
    path.write_text("{}")  # the fake server does not look at the device config
    return path


def test_synthesized_p4info_matches_the_committed_one() -> None:
    if not COMMITTED_P4INFO.exists():
        pytest.skip(f"no committed P4Info at {COMMITTED_P4INFO} yet")
    if not committed_is_current():
        pytest.skip(NEEDS_V2)
    real = P4InfoIndex.from_file(COMMITTED_P4INFO)
    ours = P4InfoIndex(synthesized_p4info())
    for name, t in ours.tables.items():
        rt = real.table(name)
        assert [(f.name, f.kind, f.bitwidth) for f in rt.match_fields] == \
            [(f.name, f.kind, f.bitwidth) for f in t.match_fields], name
        if t.match_fields:  # a keyless table has no entries, whatever its action scopes say
            assert {real.actions_by_id[a].name for a in rt.entry_actions} == \
                {ours.actions_by_id[a].name for a in t.entry_actions}, name
        assert bool(rt.const_default_action_id) == bool(t.const_default_action_id), name
    for name, a in ours.actions.items():
        if name == "NoAction":  # our placeholder for const defaults p4names does not name
            continue
        assert [(p.name, p.bitwidth) for p in real.action(name).params] == \
            [(p.name, p.bitwidth) for p in a.params], name
    for name, c in ours.counters.items():
        assert real.counter(name).size == c.size, name
    assert real.meter(n.DEP_METER).size == n.DEP_SLOTS
    assert real.meter(n.AGGREGATE_METER).size == n.AGGREGATE_METERS
    assert real.table(n.TRAFFIC_CLASS).size == n.TRAFFIC_CLASS_SIZE
    assert real.digest(n.REQUEST_DIGEST).members == DIGEST_MEMBERS


# ---------------------------------------------------------------------------- switches

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bmv2:
    """simple_switch_grpc started with --no-p4, no interfaces and ``options`` after ``--``
    (default :func:`safs.targets.bmv2.target_options`: 8 priority queues, CPU port 255);
    stopped by PID."""

    def __init__(self, log_dir: Path, options: list[str] | None = None) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        self.log = open(log_dir / "bmv2.log", "w")
        self.proc = subprocess.Popen(
            # Own Thrift port too: BMv2's default 9090 may be taken by another switch.
            [shutil.which("simple_switch_grpc"), "--no-p4", "--device-id", "0", "--log-level", "error",
             "--thrift-port", str(free_port()),
             "--", "--grpc-server-addr", self.address, *(target_options() if options is None else options)],
            stdout=self.log, stderr=subprocess.STDOUT)
        channel = grpc.insecure_channel(self.address)
        try:  # poll until the gRPC port answers (no fixed sleep)
            grpc.channel_ready_future(channel).result(timeout=20)
        except grpc.FutureTimeoutError:
            self.stop()
            raise RuntimeError(f"simple_switch_grpc did not answer on {self.address}") from None
        finally:
            channel.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(params=["fake", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def switch(request, p4info_path, bmv2_json, tmp_path):
    """(kind, address, fake server or None) of a fresh switch with no pipeline."""
    if request.param == "fake":
        with FakeP4RuntimeServer() as server:
            yield "fake", server.address, server
        return
    if not COMMITTED_JSON.exists() or not COMMITTED_P4INFO.exists():
        pytest.skip("needs the compiled P4Info and BMv2 JSON in p4src/build/")
    if not committed_is_current():
        pytest.skip(NEEDS_V2)
    sw = Bmv2(tmp_path)
    try:
        yield "bmv2", sw.address, None
    finally:
        sw.stop()


@pytest.fixture
def target(switch, p4info_path, bmv2_json):
    _, address, _ = switch
    t = P4RuntimeTarget("tor0", address, 0, p4info_path, bmv2_json, timeout_s=5.0)
    t.push_pipeline()
    yield t
    t.close()


@pytest.fixture
def fake(p4info_path, bmv2_json):
    """A fake server with a target connected and the pipeline pushed."""
    with FakeP4RuntimeServer() as server:
        t = P4RuntimeTarget("tor0", server.address, 0, p4info_path, bmv2_json, timeout_s=5.0)
        t.push_pipeline()
        try:
            yield server, t
        finally:
            t.close()


def grant(dep_id: int, rate: int = 1000, epoch: int = 1, slot: int = 1, src: int = SRC) -> TableEntry:
    """A fixed (per-transfer) dep_grant entry of dependency ``dep_id`` of ``src``."""
    return TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: src, n.F_DEP_ID: dep_id}, n.ACT_SET_FIXED_GRANT,
                      {"rate_kbps": rate, "epoch": epoch, "lease_us": 5000, "meter_slot": slot})


def share(dep_id: int, slot: int, src: int = SRC) -> TableEntry:
    """A share dep_grant entry."""
    return TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: src, n.F_DEP_ID: dep_id}, n.ACT_SET_SHARE_GRANT,
                      {"meter_slot": slot})


def route(prefix: int, plen: int, port: int) -> TableEntry:
    return TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(prefix, plen)}, n.ACT_SET_EGRESS,
                      {"port": port, "dst_mac": 0x0A0000000001})


def slack(low: int, high: int, qclass: int, prio: int) -> TableEntry:
    return TableEntry(n.SLACK_CLASS, {n.F_SLACK_KEY: Range(low, high)}, n.ACT_SET_SLACK_CLASS,
                      {"qclass": qclass}, priority=prio)


def meter(index: int, cir: int) -> MeterConfig:
    return MeterConfig(n.DEP_METER, index, cir, 64_000, 2 * cir, 64_000)


def codes(err: TargetError) -> list[tuple[int, str]]:
    return [(f.index, f.code) for f in err.failures]


def key(e: TableEntry) -> str:
    return repr((e.table, sorted(e.match.items(), key=repr), e.priority))


# ---------------------------------------------------------------------------- codec

def test_byte_strings_canonical_and_padded() -> None:
    assert canonical_bytes(0) == b"\x00"
    assert canonical_bytes(1) == b"\x01"
    assert canonical_bytes(0x1FF) == b"\x01\xff"
    assert padded_bytes(5, 48) == b"\x00" * 5 + b"\x05"
    assert padded_bytes(1 << 9, 9) == b"\x02\x00"  # too wide: left for the server to reject
    assert bytes_to_int(b"\x00\x00\x01\x00") == 256
    with pytest.raises(InvalidInput) as e:
        canonical_bytes(-1)
    assert e.value.field == "value"


@given(st.integers(min_value=0, max_value=(1 << 48) - 1))
@settings(max_examples=200, deadline=None)
def test_canonical_bytes_are_minimal_and_round_trip(v: int) -> None:
    raw = canonical_bytes(v)
    assert bytes_to_int(raw) == v
    assert len(raw) == 1 or raw[0] != 0
    assert bytes_to_int(padded_bytes(v, 48)) == v and len(padded_bytes(v, 48)) == 6


def test_dont_care_matches_are_omitted(p4info_path) -> None:
    index = P4InfoIndex.from_file(p4info_path)
    lpm = encode_update(index, Update(Op.INSERT, route(0, 0, 1))).entity.table_entry
    assert list(lpm.match) == []
    full = encode_update(index, Update(Op.INSERT, slack(0, TIME_MASK, 3, 1))).entity.table_entry
    assert list(full.match) == []
    part = encode_update(index, Update(Op.INSERT, slack(5, 9, 3, 1))).entity.table_entry
    assert (part.match[0].range.low, part.match[0].range.high) == (b"\x05", b"\x09")


# ---------------------------------------------------------------------------- writes and reads

def test_every_write_path_in_one_batch_and_read_back(switch, target) -> None:
    kind, _, server = switch
    before = len(server.writes) if server else 0
    entries = [route(0x0A000000, 8, 1), route(0x0A000100, 24, 2),
               TableEntry(n.RECEIVER_PORT, {n.F_EGRESS_PORT: 3}, n.ACT_MARK_RECEIVER),
               slack(0, 1000, 6, 2), slack(1001, 1 << 40, 2, 1),
               grant(7, rate=123_456, epoch=3, slot=9), grant(8)]
    defaults = [TableEntry(n.DEFAULT_GRANT, {}, n.ACT_SET_DEFAULT_GRANT,
                           {"rate_kbps": 1000, "lease_us": 700, "meter_slot": 0}, is_default=True),
                TableEntry(n.ECN_THRESHOLD, {}, n.ACT_SET_ECN_THRESHOLD, {"qdepth_pkts": 40}, is_default=True)]
    meters = [meter(9, 1_000_000), meter(0, 500_000)]
    target.write([Update(Op.INSERT, e) for e in entries] + [Update(Op.MODIFY, d) for d in defaults]
                 + [Update(Op.MODIFY, m) for m in meters])
    if server is not None:
        assert len(server.writes) == before + 1  # ONE WriteRequest
        assert len(server.writes[-1].updates) == len(entries) + len(defaults) + len(meters)
    for table in (n.IPV4_LPM, n.RECEIVER_PORT, n.SLACK_CLASS, n.DEP_GRANT):
        want = sorted((e for e in entries if e.table == table), key=key)
        assert sorted(target.read_table(table), key=key) == want
    for d in defaults:
        assert target.read_default(d.table) == d
    for m in meters:
        assert target.read_meter(n.DEP_METER, m.index) == m
    # MODIFY and DELETE in a second batch
    target.write([Update(Op.MODIFY, grant(7, rate=9, epoch=4, slot=9)), Update(Op.DELETE, grant(8))])
    assert target.read_table(n.DEP_GRANT) == [grant(7, rate=9, epoch=4, slot=9)]


def test_traffic_class_entries_and_aggregate_meters_round_trip(switch, target) -> None:
    # Ternary and range fields with don't-cares omitted on the wire, read back as written (the
    # scheduler's form: Ternary(0, 0) and the full Range for "any").
    cfg = SchedulerConfig.model_validate({"traffic_classes": [
        {"name": "nccl", "protocol": 17, "dst_ports": [4791, 4791], "roce_qp": 0x100, "roce_qp_mask": 0xF00,
         "queue": 4},
        {"name": "bulk", "src": "10.0.1.0/24", "protocol": 17, "dst_ports": [4791, 4791], "queue": 1,
         "rate_bps": 8_000_000_000}]})
    sched = Scheduler(two_tors(), {"tor0": PipelineModel("tor0", lambda: 0), "tor1": PipelineModel("tor1", lambda: 0)},
                      cfg)
    entries, meters = sched.traffic_class_entries(), sched.traffic_class_meters()
    target.write([Update(Op.INSERT, e) for e in entries] + [Update(Op.MODIFY, m) for m in meters])
    assert sorted(target.read_table(n.TRAFFIC_CLASS), key=key) == sorted(entries, key=key)
    assert target.read_meter(n.AGGREGATE_METER, 2) == meters[0]


def exact_value(index: P4InfoIndex, te: p4runtime_pb2.TableEntry, field: str) -> bytes:
    """The bytes of exact match field ``field`` of an encoded dep_grant entry."""
    fid = next(f.id for f in index.table(n.DEP_GRANT).match_fields if f.name == field)
    return next(m.exact.value for m in te.match if m.field_id == fid)


def test_writes_are_canonical_bytes_and_padded_is_accepted(fake, p4info_path, bmv2_json) -> None:
    server, target = fake
    index = P4InfoIndex.from_file(p4info_path)
    target.write([Update(Op.INSERT, grant(1, rate=5, slot=2))])
    sent = server.writes[-1].updates[0].entity.table_entry
    assert exact_value(index, sent, n.F_DEP_ID) == b"\x01"
    assert exact_value(index, sent, n.F_SRC_ADDR) == b"\x0a\x00\x00\x01"
    assert [p.value for p in sent.action.action.params] == [b"\x05", b"\x01", b"\x13\x88", b"\x02"]
    padded = P4RuntimeTarget("tor0b", server.address, 0, p4info_path, bmv2_json, election_id=(0, 2),
                             padded_bytes=True)
    try:
        padded.write([Update(Op.INSERT, grant(2, rate=5, slot=3, src=2))])
        sent = server.writes[-1].updates[0].entity.table_entry
        assert exact_value(index, sent, n.F_DEP_ID) == b"\x00\x02"  # 16 bits
        assert exact_value(index, sent, n.F_SRC_ADDR) == b"\x00\x00\x00\x02"
        assert [len(p.value) for p in sent.action.action.params] == [4, 4, 4, 2]
        stored = {bytes_to_int(exact_value(index, e, n.F_DEP_ID)): e for e in server.table_entries(n.DEP_GRANT)}
        assert exact_value(index, stored[2], n.F_DEP_ID) == b"\x02"  # answered canonical
        assert exact_value(index, stored[2], n.F_SRC_ADDR) == b"\x02"
        assert [p.value for p in stored[2].action.action.params] == [b"\x05", b"\x01", b"\x13\x88", b"\x03"]
        assert sorted(padded.read_table(n.DEP_GRANT), key=key) == [grant(1, rate=5, slot=2),
                                                                   grant(2, rate=5, slot=3, src=2)]
    finally:
        padded.close()


PI_ERROR_CASES = [
    ("duplicate INSERT", [Update(Op.INSERT, grant(1)), Update(Op.INSERT, grant(1, rate=2))],
     [(1, "ALREADY_EXISTS")]),
    ("MODIFY missing", [Update(Op.MODIFY, grant(2))], [(0, "NOT_FOUND")]),
    ("DELETE missing", [Update(Op.INSERT, grant(3)), Update(Op.DELETE, grant(4))], [(1, "NOT_FOUND")]),
    ("meter INSERT", [Update(Op.INSERT, meter(1, 1000))], [(0, "INVALID_ARGUMENT")]),
    ("meter DELETE", [Update(Op.MODIFY, meter(1, 1000)), Update(Op.DELETE, meter(1, 1000))],
     [(1, "INVALID_ARGUMENT")]),
    ("over-wide exact key", [Update(Op.INSERT, grant(1 << 16))], [(0, "INVALID_ARGUMENT")]),
    ("over-wide address", [Update(Op.INSERT, grant(1, src=1 << 32))], [(0, "INVALID_ARGUMENT")]),
    ("over-wide param", [Update(Op.INSERT, slack(1, 2, 8, 1))], [(0, "INVALID_ARGUMENT")]),
    ("over-wide 9-bit port", [Update(Op.INSERT, route(0x0B000000, 8, 512))], [(0, "INVALID_ARGUMENT")]),
    ("LPM bits beyond prefix", [Update(Op.INSERT, route(0x0B000001, 8, 1))], [(0, "INVALID_ARGUMENT")]),
    ("range low > high", [Update(Op.INSERT, slack(9, 5, 3, 1))], [(0, "INVALID_ARGUMENT")]),
    ("range without priority", [Update(Op.INSERT, slack(1, 5, 3, 0))], [(0, "INVALID_ARGUMENT")]),
    ("priority on exact table", [Update(Op.INSERT, TableEntry(
        n.RECEIVER_PORT, {n.F_EGRESS_PORT: 1}, n.ACT_MARK_RECEIVER, priority=3))], [(0, "INVALID_ARGUMENT")]),
    ("INSERT of a default entry", [Update(Op.INSERT, TableEntry(
        n.CLOCK_OFFSET, {}, n.ACT_SET_CLOCK_OFFSET, {"offset_ns": 1}, is_default=True))], [(0, "INVALID_ARGUMENT")]),
    ("missing param", [Update(Op.INSERT, TableEntry(
        n.DEP_GRANT, {n.F_SRC_ADDR: SRC, n.F_DEP_ID: 5}, n.ACT_SET_FIXED_GRANT, {"rate_kbps": 1}))],
     [(0, "INVALID_ARGUMENT")]),
    ("fixed grant's param on a share grant", [Update(Op.INSERT, TableEntry(
        n.DEP_GRANT, {n.F_SRC_ADDR: SRC, n.F_DEP_ID: 5}, n.ACT_SET_SHARE_GRANT, {"meter_slot": 1, "epoch": 1}))],
     [(0, "INVALID_ARGUMENT")]),
    ("share and fixed grants side by side", [Update(Op.INSERT, share(1, 2)), Update(Op.INSERT, grant(1, src=2)),
                                             Update(Op.INSERT, share(1, 3))], [(2, "ALREADY_EXISTS")]),
    ("unknown table (not sent)", [Update(Op.INSERT, grant(6)), Update(Op.INSERT, TableEntry(
        "SafsIngress.nope", {}, n.ACT_DROP)), Update(Op.INSERT, grant(7))], [(1, "INVALID_ARGUMENT")]),
]


@pytest.mark.parametrize("case", PI_ERROR_CASES, ids=[c[0] for c in PI_ERROR_CASES])
def test_pi_error_codes_arrive_per_update(switch, target, case) -> None:
    _, updates, want = case
    with pytest.raises(TargetError) as e:
        target.write(updates)
    assert codes(e.value) == want
    assert all(f.message for f in e.value.failures)
    # what did not fail stays applied (CONTINUE_ON_ERROR)
    failed = {i for i, _ in want}
    ok_grants = {u.entity.match[n.F_DEP_ID] for i, u in enumerate(updates)
                 if i not in failed and isinstance(u.entity, TableEntry) and u.entity.table == n.DEP_GRANT
                 and u.op is Op.INSERT}
    deleted = {u.entity.match[n.F_DEP_ID] for i, u in enumerate(updates)
               if i not in failed and u.op is Op.DELETE and isinstance(u.entity, TableEntry)}
    assert {e.match[n.F_DEP_ID] for e in target.read_table(n.DEP_GRANT)} == ok_grants - deleted


def test_registers_are_unimplemented(switch, target) -> None:
    upd = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    upd.entity.register_entry.register_id = 0x10000001
    upd.entity.register_entry.index.index = 0
    req = p4runtime_pb2.WriteRequest(device_id=0, election_id=target.client.election())
    req.updates.append(upd)
    with pytest.raises(grpc.RpcError) as e:
        target.client.stub.Write(req, timeout=5)
    assert [(f.index, f.code) for f in parse_write_error(e.value, 1)] == [(0, "UNIMPLEMENTED")]
    read = p4runtime_pb2.ReadRequest(device_id=0)
    read.entities.add().register_entry.register_id = 0x10000001
    with pytest.raises(grpc.RpcError) as e:
        list(target.client.stub.Read(read, timeout=5))
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_counters_read_by_index_and_wildcard(fake) -> None:
    server, target = fake
    server.set_counter(n.DEP_BYTES, 5, 1500, 3)
    server.set_counter(n.DEP_BYTES, 0, 78, 1)
    assert target.read_counter(n.DEP_BYTES, 5) == CounterValue(1500, 3)
    assert target.read_counter(n.DEP_BYTES, 6) == CounterValue(0, 0)
    cells = target.read_counters(n.DEP_BYTES)
    assert len(cells) == n.DEP_SLOTS
    assert (cells[0], cells[5]) == (CounterValue(78, 1), CounterValue(1500, 3))
    assert sum(c.packet_count for c in cells) == 4
    with pytest.raises(InvalidInput) as e:
        target.read_counter(n.DEP_BYTES, n.DEP_SLOTS)
    assert e.value.field == "index"
    with pytest.raises(InvalidInput) as e:
        target.read_counter("SafsIngress.nope", 0)
    assert e.value.field == "counter"
    # several cells in one ReadRequest, in the order asked (the scheduler's tick)
    assert target.read_counter_cells(n.DEP_BYTES, [5, 6, 0]) == [CounterValue(1500, 3), CounterValue(0, 0),
                                                                   CounterValue(78, 1)]
    assert target.read_counter_cells(n.DEP_BYTES, []) == []
    with pytest.raises(InvalidInput) as e:
        target.read_counter_cells(n.DEP_BYTES, [5, n.DEP_SLOTS])
    assert e.value.field == "index"


def test_counters_read_zero_on_a_fresh_switch(switch, target) -> None:
    assert target.read_counter(n.PORT_TX_BYTES, 3) == CounterValue(0, 0)
    assert target.read_counter_cells(n.DEP_BYTES, [1, 2, 3]) == [CounterValue(0, 0)] * 3
    assert target.read_counter(n.MALFORMED, 0).packet_count == 0


def test_clock_offset_is_the_default_action_mod_2_48(switch, target) -> None:
    target.set_clock_offset(-5)
    got = target.read_default(n.CLOCK_OFFSET)
    assert got.action == n.ACT_SET_CLOCK_OFFSET and got.params == {"offset_ns": TIME_MASK - 4}
    target.set_clock_offset(123_456_789)
    assert target.read_default(n.CLOCK_OFFSET).params == {"offset_ns": 123_456_789}


# ---------------------------------------------------------------------------- differential with the model

FLOW_IDS = st.integers(min_value=1, max_value=6)
OPS = st.sampled_from([Op.INSERT, Op.MODIFY, Op.DELETE])


@given(st.lists(st.lists(st.tuples(OPS, FLOW_IDS, st.integers(1, 3)), min_size=1, max_size=6),
                min_size=1, max_size=4))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_same_failures_and_state_as_the_pipeline_model(fake, batches) -> None:
    server, target = fake
    target.write([Update(Op.DELETE, e) for e in target.read_table(n.DEP_GRANT)])
    model = PipelineModel("tor0", lambda: 0)
    for batch in batches:
        updates = [Update(op, grant(fid, rate=r)) for op, fid, r in batch]
        outcome = []
        for t in (model, target):
            try:
                t.write(updates)
                outcome.append([])
            except TargetError as err:
                outcome.append(codes(err))
        assert outcome[0] == outcome[1]
        assert sorted(model.entries(n.DEP_GRANT), key=key) == sorted(target.read_table(n.DEP_GRANT), key=key)


# ---------------------------------------------------------------------------- clone sessions

def test_clone_sessions_round_trip_with_pi_codes_like_the_pipeline_model(switch, target) -> None:
    kind, _, server = switch
    model = PipelineModel("tor0", lambda: 0)
    sid = CloneSession.for_port(3).session_id
    batches = [
        [Update(Op.INSERT, CloneSession.for_port(p)) for p in (1, 2, 3)]
        + [Update(Op.INSERT, grant(7))],                          # sessions and a table entry in one batch
        [Update(Op.INSERT, CloneSession.for_port(2)),              # 0 ALREADY_EXISTS
         Update(Op.MODIFY, CloneSession(40, 39)),                  # 1 NOT_FOUND
         Update(Op.DELETE, CloneSession(41, 0)),                   # 2 NOT_FOUND
         Update(Op.INSERT, CloneSession(0, 1)),                    # 3 INVALID_ARGUMENT: session 0
         Update(Op.INSERT, CloneSession(pm.CLONE_SESSION_ID_MAX + 1, 1)),  # 4 INVALID_ARGUMENT
         Update(Op.MODIFY, CloneSession(sid, 5)),                  # 5 ok: replica moved
         Update(Op.DELETE, CloneSession.for_port(1)),              # 6 ok
         Update(Op.INSERT, CloneSession(pm.CLONE_SESSION_ID_MAX, 511))],  # 7 ok: largest id
    ]
    for batch in batches:
        outcome = []
        for t in (model, target):
            try:
                t.write(batch)
                outcome.append([])
            except TargetError as err:
                outcome.append(codes(err))
        assert outcome[0] == outcome[1], kind
    assert outcome[0] == [(0, "ALREADY_EXISTS"), (1, "NOT_FOUND"), (2, "NOT_FOUND"),
                          (3, "INVALID_ARGUMENT"), (4, "INVALID_ARGUMENT")]
    want = [CloneSession.for_port(2), CloneSession(sid, 5), CloneSession(pm.CLONE_SESSION_ID_MAX, 511)]
    assert target.read_clone_sessions() == model.clone_sessions() == want
    assert target.read_table(n.DEP_GRANT) == [grant(7)]
    if server is not None:  # what went on the wire: one replica, instance 0; DELETE by id only
        sent = server.writes[-1].updates
        cs = sent[5].entity.packet_replication_engine_entry.clone_session_entry
        assert (cs.session_id, [(r.egress_port, r.instance) for r in cs.replicas]) == (sid, [(5, 0)])
        assert not sent[6].entity.packet_replication_engine_entry.clone_session_entry.replicas
        assert set(server.clone_sessions()) == {c.session_id for c in want}


def test_clone_session_values_that_cannot_be_encoded_are_not_sent(fake) -> None:
    server, target = fake
    before = len(server.writes)
    with pytest.raises(TargetError) as err:
        target.write([Update(Op.INSERT, CloneSession(-1, 1)), Update(Op.INSERT, CloneSession(2, 1 << 32))])
    assert codes(err.value) == [(0, "INVALID_ARGUMENT"), (1, "INVALID_ARGUMENT")]
    assert len(server.writes) == before and target.read_clone_sessions() == []


# ---------------------------------------------------------------------------- digests

def test_digest_stream_decoded_in_order_and_acked(fake, p4info_path) -> None:
    server, target = fake
    assert server.digest_configured(n.REQUEST_DIGEST)
    first = server.inject_digest(n.REQUEST_DIGEST, [[7, 0x0A000001, 0x0A000102, 65535, 1 << 40, TIME_MASK]])
    second = server.inject_digest(n.REQUEST_DIGEST, [[8, 1, 2, 3, 4, 5], [9, 5, 6, 7, 8, 9]])
    got: list[RequestDigest] = []
    deadline = time.monotonic() + 5
    while len(got) < 3 and time.monotonic() < deadline:
        got += target.poll_digests(timeout_s=0.5)
    # members in request_digest_t order: flow_id, src, dst, dep_id, remaining bytes, latest start
    assert got == [RequestDigest(7, 0x0A000001, 0x0A000102, 65535, 1 << 40, TIME_MASK),
                   RequestDigest(8, 1, 2, 3, 4, 5), RequestDigest(9, 5, 6, 7, 8, 9)]
    assert server.wait_acks(2)
    digest_id = P4InfoIndex.from_file(p4info_path).digest(n.REQUEST_DIGEST).id
    assert server.acks == [(digest_id, first), (digest_id, second)]
    assert target.poll_digests() == []


def test_a_doorbell_rings_when_digests_arrive_also_after_a_reconnection(p4info_path, bmv2_json) -> None:
    """A target given a doorbell sets it when a digest list arrives (so the controller's run
    loop can sleep on it), on its first connection and on the next; it stays clear until then."""
    doorbell = threading.Event()
    with FakeP4RuntimeServer() as server:
        t = P4RuntimeTarget("tor0", server.address, 0, p4info_path, bmv2_json, timeout_s=5.0, doorbell=doorbell)
        try:
            t.push_pipeline()
            for flow in (1, 2):
                doorbell.clear()
                assert not doorbell.wait(0.2)
                server.inject_digest(n.REQUEST_DIGEST, [[flow, 1, 2, 3, 4, 5]])
                assert doorbell.wait(5)
                assert t.poll_digests() == [RequestDigest(flow, 1, 2, 3, 4, 5)]
                assert t.reconnect()
        finally:
            t.close()


def test_digest_settings_are_written(fake, p4info_path) -> None:
    server, target = fake
    read = p4runtime_pb2.ReadRequest(device_id=0)
    read.entities.add().digest_entry.digest_id = 0
    [rep] = list(target.client.stub.Read(read, timeout=5))
    cfg = rep.entities[0].digest_entry.config
    s = DigestSettings()
    assert (cfg.max_timeout_ns, cfg.max_list_size, cfg.ack_timeout_ns) == \
        (s.max_timeout_ns, s.max_list_size, s.ack_timeout_ns)


# ---------------------------------------------------------------------------- arbitration, reconnect

def wait_for(cond, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_arbitration_highest_election_id_writes(switch, p4info_path, bmv2_json) -> None:
    _, address, _ = switch
    low = P4RuntimeTarget("tor0", address, 0, p4info_path, bmv2_json, election_id=(0, 5))
    try:
        assert low.is_primary
        low.push_pipeline()
        high = P4RuntimeTarget("tor0", address, 0, p4info_path, bmv2_json, election_id=(1, 0))
        try:
            assert high.is_primary
            assert wait_for(lambda: not low.is_primary)
            with pytest.raises(TargetError) as e:
                low.write([Update(Op.INSERT, grant(1)), Update(Op.INSERT, grant(2))])
            assert codes(e.value) == [(0, "PERMISSION_DENIED"), (1, "PERMISSION_DENIED")]
            high.write([Update(Op.INSERT, grant(1))])
        finally:
            high.close()
        assert wait_for(lambda: low.is_primary)  # the backup takes over
        low.write([Update(Op.INSERT, grant(2))])
        assert {e.match[n.F_DEP_ID] for e in low.read_table(n.DEP_GRANT)} == {1, 2}
    finally:
        low.close()


def test_session_failures_are_connection_errors_not_update_0(switch, p4info_path, bmv2_json) -> None:
    """Reads before a pipeline push and a backup's pipeline push: the same codes from the fake
    and BMv2, as TargetConnectionError naming the switch (never a TargetError)."""
    _, address, _ = switch
    with P4RuntimeTarget("tor0", address, 0, p4info_path, bmv2_json, election_id=(0, 5), timeout_s=5.0) as primary, \
            P4RuntimeTarget("tor0b", address, 0, p4info_path, bmv2_json, election_id=(0, 2), timeout_s=5.0) as backup:
        assert primary.is_primary and not backup.is_primary
        with pytest.raises(TargetConnectionError) as e:
            primary.read_counter_cells(n.DEP_BYTES, [1, 2])
        assert (e.value.operation, e.value.code, e.value.address, e.value.switch) == \
            ("read", "FAILED_PRECONDITION", address, "tor0")
        with pytest.raises(TargetConnectionError) as e:
            backup.push_pipeline()
        assert (e.value.operation, e.value.code, e.value.switch) == ("pipeline push", "PERMISSION_DENIED", "tor0b")
        primary.push_pipeline()
        assert primary.read_counter_cells(n.DEP_BYTES, [1, 2]) == [CounterValue(0, 0)] * 2


def test_bad_arguments_and_unreachable_switch(p4info_path, tmp_path) -> None:
    for kwargs, field in [({"grpc_addr": "nohost"}, "grpc_addr"), ({"device_id": -1}, "device_id"),
                          ({"election_id": (0, -1)}, "election_id"), ({"timeout_s": 0}, "timeout_s"),
                          ({"p4info_path": tmp_path / "missing.txtpb"}, "p4info_path")]:
        args = {"name": "s", "grpc_addr": "127.0.0.1:1", "device_id": 0, "p4info_path": p4info_path} | kwargs
        with pytest.raises(InvalidInput) as e:
            P4RuntimeTarget(**args)
        assert e.value.field == field
    started = time.monotonic()
    with pytest.raises(TargetConnectionError) as e:
        P4RuntimeTarget("s", f"127.0.0.1:{free_port()}", 0, p4info_path, timeout_s=1.0)
    assert e.value.code == "UNAVAILABLE"
    assert time.monotonic() - started < 5
    with FakeP4RuntimeServer() as server:
        t = P4RuntimeTarget("s", server.address, 0, p4info_path)
        try:
            with pytest.raises(InvalidInput) as e:
                t.push_pipeline()
            assert e.value.field == "bmv2_json_path"
        finally:
            t.close()


WRITABLE_DEFAULTS = (n.CLOCK_OFFSET, n.DEFAULT_GRANT, n.ECN_THRESHOLD)


def installed_state(target) -> dict:
    """Decoded tables, written defaults and meters of one switch (model or P4Runtime)."""
    if isinstance(target, PipelineModel):
        tables = {t: sorted(target.entries(t), key=key) for t in pm._SCHEMAS if t not in WRITABLE_DEFAULTS}
        defaults = {t: target.default_action(t) for t in WRITABLE_DEFAULTS}
        meters = {i: target.meter_config(i) for i in range(16) if target.meter_config(i) is not None}
    else:
        tables = {t: sorted(target.read_table(t), key=key) for t in pm._SCHEMAS if t not in WRITABLE_DEFAULTS}
        defaults = {t: target.read_default(t) for t in WRITABLE_DEFAULTS}
        meters = {i: target.read_meter(n.DEP_METER, i) for i in range(16)}
        meters = {i: m for i, m in meters.items() if (m.cir, m.pir, m.cburst, m.pburst) != (0, 0, 0, 0)}
    clones = target.clone_sessions() if isinstance(target, PipelineModel) else target.read_clone_sessions()
    return {"tables": tables, "defaults": defaults, "meters": meters, "clones": clones}


def run_scheduler(targets: dict, topo, mode: str) -> Scheduler:
    """Per-transfer mode: four flows announced, one completed; share mode: four dependencies
    announced, one ended (the same pairs)."""
    sched = Scheduler(topo, targets, SchedulerConfig(admit_on_request=False, grant_mode=mode))
    sched.setup(0, {"tor1": -3 * MS})
    pairs = [("a", "d", 2_000_000, 5 * MS), ("d", "a", 500_000, 2 * MS), ("d", "b", 9_000_000, 3 * MS),
             ("c", "b", 100_000, 1 * MS)]
    for fid, (src, dst, size, deadline) in enumerate(pairs, start=1):
        if mode == "share":
            sched.announce_dependency(DependencyHint(fid, src, dst, f"t/{fid}"), now_ns=fid * 1000)
        else:
            sched.announce(FlowHint(fid, src, dst, size, deadline, f"t/{fid}"), now_ns=fid * 1000)
    if mode == "share":
        sched.end_dependency("d", 2, now_ns=10_000)
    else:
        sched.complete(2, now_ns=10_000)
    return sched


@pytest.mark.parametrize("mode", ["share", "per-transfer"])
def test_scheduler_installs_the_same_entries_as_in_the_pipeline_model(p4info_path, bmv2_json, mode: str) -> None:
    topo = two_tors()
    models = {sw: PipelineModel(sw, lambda: 0) for sw in topo.switches()}
    sched_model = run_scheduler(models, topo, mode)
    servers = {sw: FakeP4RuntimeServer().__enter__() for sw in topo.switches()}
    targets = {}
    try:
        for sw, server in servers.items():
            targets[sw] = P4RuntimeTarget(sw, server.address, 0, p4info_path, bmv2_json)
            targets[sw].push_pipeline()
        sched_p4rt = run_scheduler(targets, topo, mode)
        for sw in topo.switches():
            want, got = installed_state(models[sw]), installed_state(targets[sw])
            assert got == want, sw
            assert want["tables"][n.DEP_GRANT], "the scenario must install grants"
            action = n.ACT_SET_SHARE_GRANT if mode == "share" else n.ACT_SET_FIXED_GRANT
            assert {e.action for e in want["tables"][n.DEP_GRANT]} == {action}
            assert bool(want["tables"][n.PORT_SHARE]) == (mode == "share")
            assert want["clones"] == [CloneSession.for_port(p) for p in sorted(topo.ports(sw))]
        assert (sched_p4rt.stats.table_updates, sched_p4rt.stats.meter_updates) == \
            (sched_model.stats.table_updates, sched_model.stats.meter_updates)
        # one WriteRequest per batch the scheduler counts (clock offset writes included), plus
        # the DigestEntry each pipeline push writes; nothing else
        writes = sum(len(s.writes) for s in servers.values())
        assert writes == sched_p4rt.stats.batches + len(servers)

        # switch restart: state gone; reconnect + reinstall restores the same state
        servers["tor0"].restart()
        with pytest.raises(TargetConnectionError) as e:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                targets["tor0"].poll_digests(timeout_s=0.2)
        assert e.value.code == "UNAVAILABLE"
        assert targets["tor0"].reconnect(push_pipeline=True)
        assert targets["tor0"].read_table(n.DEP_GRANT) == []
        sched_p4rt.reinstall("tor0", 20_000, 0, targets["tor0"])
        got, want = installed_state(targets["tor0"]), installed_state(models["tor0"])
        assert (got["tables"], got["defaults"], got["clones"]) == (want["tables"], want["defaults"], want["clones"])
        # meters cannot be deleted: the model keeps the config of the completed flow's freed
        # slot, the restarted switch gets only the slots in use
        assert got["meters"] and all(want["meters"][i] == m for i, m in got["meters"].items())
        assert len(got["meters"]) == len(want["meters"]) - 1
    finally:
        for t in targets.values():
            t.close()
        for s in servers.values():
            s.stop()


def test_ecmp_members_groups_and_indirect_entries_round_trip(switch, target) -> None:
    kind, _, server = switch
    members = [ActionProfileMember(n.ECMP_SELECTOR, p, n.ACT_SET_EGRESS, {"port": p, "dst_mac": 0x0200_0000_0000 + p})
               for p in (3, 4, 5)]
    group = ActionProfileGroup(n.ECMP_SELECTOR, 1, (3, 5), max_size=3)
    ecmp_entry = TableEntry(n.ECMP, {n.F_ECMP_GROUP: 1}, "", group_id=1)
    lpm = TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(0x0A000100, 24)}, n.ACT_SET_ECMP_GROUP, {"group": 1})
    target.write([Update(Op.INSERT, m) for m in members] + [Update(Op.INSERT, group)])
    target.write([Update(Op.INSERT, ecmp_entry), Update(Op.INSERT, lpm)])
    assert target.read_table(n.ECMP) == [ecmp_entry]
    assert target.read_table(n.IPV4_LPM) == [lpm]
    if server is not None:
        assert server.action_profile_groups(n.ECMP_SELECTOR) == {1: [3, 5]}
        assert sorted(server.action_profile_members(n.ECMP_SELECTOR)) == [3, 4, 5]
    # A member in a group cannot go; a group an entry uses cannot go (PI: FAILED_PRECONDITION
    # on BMv2 as in the fake server and the pipeline model).
    for upd in (Update(Op.DELETE, members[0]), Update(Op.DELETE, group)):
        with pytest.raises(TargetError) as err:
            target.write([upd])
        assert codes(err.value)[0][1] != "OK"
    target.write([Update(Op.DELETE, lpm), Update(Op.DELETE, ecmp_entry)])
    target.write([Update(Op.DELETE, group)])
    target.write([Update(Op.DELETE, m) for m in members])
    assert target.read_table(n.ECMP) == []


def test_scheduler_writes_the_same_ecmp_state_over_p4runtime_as_into_the_model(p4info_path, bmv2_json) -> None:
    topo = load_topology(ROOT / "topologies" / "leaf-spine.yaml")
    model = PipelineModel("leaf0", lambda: 0)
    Scheduler(topo, {"leaf0": model}, SchedulerConfig()).setup(0)
    with FakeP4RuntimeServer() as server:
        t = P4RuntimeTarget("leaf0", server.address, 0, p4info_path, bmv2_json)
        try:
            t.push_pipeline()
            Scheduler(topo, {"leaf0": t}, SchedulerConfig()).setup(0)
            assert installed_state(t) == installed_state(model)
            assert model.entries(n.ECMP), "leaf0 must have an ECMP route"
            assert server.action_profile_groups(n.ECMP_SELECTOR) == {g.group_id: list(g.members)
                                                                     for g in model.profile_groups()}
            assert sorted(server.action_profile_members(n.ECMP_SELECTOR)) == [m.member_id
                                                                              for m in model.profile_members()]
        finally:
            t.close()


def test_reconnect_without_restart_keeps_state_and_digests(fake) -> None:
    server, target = fake
    target.write([Update(Op.INSERT, grant(4))])
    assert target.reconnect()  # DigestEntry exists already: MODIFY path
    assert target.read_table(n.DEP_GRANT) == [grant(4)]
    server.inject_digest(n.REQUEST_DIGEST, [[4, 1, 2, 3, 4, 5]])
    assert target.poll_digests(timeout_s=5) == [RequestDigest(4, 1, 2, 3, 4, 5)]


def test_state_read_back_reconciles_with_no_writes_and_repairs_what_was_changed(switch, p4info_path,
                                                                                  bmv2_json) -> None:
    """What a restarted controller does: the pipeline is recognised by its cookie, the state
    read back (tables, defaults, used meter cells, clone sessions, ECMP members and groups) is
    what a scheduler restored from its store expects (no write at all), and a lost grant, a lost
    route and a foreign entry are repaired. On the fake server and, where present, BMv2."""
    topo = load_topology(ROOT / "topologies" / "leaf-spine.yaml")
    dep = DependencyHint(1, "h4", "h0", "F2A")
    t = P4RuntimeTarget("leaf0", switch[1], 0, p4info_path, bmv2_json, timeout_s=5.0)
    try:
        assert not t.runs_pipeline()
        t.push_pipeline()
        assert t.runs_pipeline()
        first = Scheduler(topo, {"leaf0": t}, SchedulerConfig())
        first.setup(0)
        first.announce_dependency(dep, 0)
        want = installed_state(t)
        assert want["tables"][n.DEP_GRANT] and want["tables"][n.ECMP]
        second = Scheduler(topo, {"leaf0": t}, SchedulerConfig())
        second.restore([(dep, first._dep_slots[("h4", 1)][1])], [], 0)
        assert second.reconcile("leaf0", t.read_state(second.meter_cells("leaf0"))) == Repairs()
        assert second.stats.batches == 0
        route_entry = next(e for e in want["tables"][n.IPV4_LPM] if e.action == n.ACT_SET_EGRESS)
        t.write([Update(Op.DELETE, want["tables"][n.DEP_GRANT][0]), Update(Op.DELETE, route_entry),
                 Update(Op.INSERT, share(9, 7, src=topo.host_ip("h8")))])
        assert second.reconcile("leaf0", t.read_state(second.meter_cells("leaf0"))) == Repairs(2, 0, 1)
        assert installed_state(t) == want
    finally:
        t.close()

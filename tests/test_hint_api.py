"""Hint API over real gRPC: an in-process server on an ephemeral port, a Scheduler on an
inline topology with PipelineModel targets, and the typed client (plus the raw stub where the
wire-level status matters). Flow hints run the per-transfer path (``grant_mode="per-transfer"``);
AnnounceDependencies / EndDependency the default, dependency grants."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import grpc
import pytest
from two_tors import MS, two_tors  # the shared two-ToR test topology

from safs.control.hintapi import HintClient, HintServiceError, UnknownFlow
from safs.control.hintapi import hints_pb2 as pb
from safs.control.hintapi import hints_pb2_grpc as pb_grpc
from safs.control.hintapi.convert import FIELD_METADATA_KEY
from safs.control.hintapi.server import HintServicer, RunningHintServer, start
from safs.core import p4names as n
from safs.core.errors import InvalidInput, TargetError, UpdateFailure
from safs.core.hints import DIGEST_LABEL, LABEL_MAX_LEN, DependencyHint, FlowClass, FlowHint
from safs.core.protocol import lease_ns_to_us, rate_bps_to_kbps, transfer_dep_id
from safs.core.scheduler import Scheduler, SchedulerConfig, wire_epoch
from safs.core.target import RequestDigest, Update
from safs.core.timebase import wrap
from safs.targets.pipeline_model import PipelineModel

AT_ANNOUNCE = SchedulerConfig(grant_mode="per-transfer", admit_on_request=False)
ON_REQUEST = SchedulerConfig(grant_mode="per-transfer")  # allocate at the first REQUEST (or activate)
SHARE = SchedulerConfig()  # the default: dependency grants


class Clock:
    """Fabric clock the test moves by hand (ns)."""

    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        return self.t


class FlakyTarget(PipelineModel):
    """A PipelineModel whose writes can be made to fail (a switch refusing updates)."""

    fail = False

    def write(self, updates: Sequence[Update]) -> None:
        if self.fail:
            raise TargetError([UpdateFailure(i, "UNAVAILABLE", "switch down") for i in range(len(updates))])
        super().write(updates)


@dataclass
class Env:
    clock: Clock
    targets: dict[str, FlakyTarget]
    sched: Scheduler
    running: RunningHintServer
    client: HintClient

    @property
    def servicer(self) -> HintServicer:
        return self.running.servicer

    def table_grant(self, flow_id: int) -> dict | None:
        """The fixed dep_grant entry params of transfer ``flow_id`` at d's ToR (tor1), or None."""
        for e in self.targets["tor1"].entries(n.DEP_GRANT):
            if e.action == n.ACT_SET_FIXED_GRANT and e.match[n.F_DEP_ID] == transfer_dep_id(flow_id):
                return dict(e.params)
        return None

    def share_grants(self, switch: str = "tor1") -> dict[tuple[int, int], int]:
        """The share dep_grant entries at ``switch``: (sender address, dep_id) -> meter slot."""
        return {(e.match[n.F_SRC_ADDR], e.match[n.F_DEP_ID]): e.params["meter_slot"]
                for e in self.targets[switch].entries(n.DEP_GRANT) if e.action == n.ACT_SET_SHARE_GRANT}


def _make_env(config: SchedulerConfig, activation_lead_ns: int = 0) -> Iterator[Env]:
    topo = two_tors()
    clock = Clock()
    targets = {sw: FlakyTarget(sw, clock) for sw in topo.switches()}
    sched = Scheduler(topo, targets, config)
    sched.setup(0)
    running = start(sched, "127.0.0.1:0", clock, activation_lead_ns=activation_lead_ns)
    client = HintClient(running.target, timeout_s=10.0)
    try:
        yield Env(clock, targets, sched, running, client)
    finally:
        client.close()
        running.stop()


@pytest.fixture
def env() -> Iterator[Env]:
    yield from _make_env(AT_ANNOUNCE)


@pytest.fixture
def env_req() -> Iterator[Env]:
    yield from _make_env(ON_REQUEST)


def hint(fid: int, sender: str = "a", receiver: str = "d", size: int = 1_000_000,
         deadline_ns: int = 2 * MS, flow_class: FlowClass = FlowClass.PIPELINE, label: str | None = None) -> FlowHint:
    return FlowHint(fid, sender, receiver, size, deadline_ns, label if label is not None else f"test/{fid}", flow_class)


def assert_grant_matches_table(env: Env, flow_id: int) -> None:
    """GetGrant (over gRPC) == allocator grant, and its wire form == the dep_grant entry."""
    grant = env.client.grant(flow_id)
    assert grant is not None
    assert grant == env.sched.allocator.grants()[flow_id]
    entry = env.table_grant(flow_id)
    assert entry is not None
    assert entry["rate_kbps"] == rate_bps_to_kbps(grant.rate_bps)
    assert entry["epoch"] == wire_epoch(grant.epoch)
    assert entry["lease_us"] == lease_ns_to_us(grant.lease_ns)
    assert entry["meter_slot"] == env.sched.slot_of(flow_id)


# ---------------------------------------------------------------------------- every RPC

def test_announce_get_grant_equals_installed_dep_grant_entry(env: Env) -> None:
    result = env.client.announce(hint(5))
    assert not result.activation_scheduled
    assert_grant_matches_table(env, 5)
    assert env.client.grant(5).rate_bps > 0
    # a second flow into the same receiver: both grants stay consistent with the table
    env.client.announce(hint(6, sender="b", deadline_ns=MS, flow_class=FlowClass.BACKGROUND))
    assert env.sched.registry.get(6).flow_class is FlowClass.BACKGROUND
    for fid in (5, 6):
        assert_grant_matches_table(env, fid)


def test_update_remaining_and_no_bubble_timestamp(env: Env) -> None:
    # a background flow takes the leftover, so flow 5's rate follows its no-bubble demand
    env.client.announce(hint(6, sender="b", size=50_000_000, deadline_ns=MS, flow_class=FlowClass.BACKGROUND))
    env.client.announce(hint(5, size=4_000_000, deadline_ns=100 * MS))
    epoch0 = env.client.grant(5).epoch
    env.clock.t = MS
    env.client.update(5, 2_000_000)
    assert env.sched.registry.get(5).remaining_bytes == 2_000_000
    assert env.sched.allocator.flows()[5].remaining_bytes == 2_000_000
    assert_grant_matches_table(env, 5)
    # a much earlier no-bubble timestamp raises the demand: the grant must change
    rate_before = env.client.grant(5).rate_bps
    env.client.update(5, 2_000_000, no_bubble_ts_ns=2 * MS)
    assert env.sched.registry.get(5).no_bubble_ts_ns == 2 * MS
    assert env.sched.allocator.flows()[5].deadline_ns == 2 * MS
    grant = env.client.grant(5)
    assert grant.rate_bps > rate_before and grant.epoch > epoch0
    for fid in (5, 6):
        assert_grant_matches_table(env, fid)


def test_complete_removes_grant_entry_and_flow(env: Env) -> None:
    env.client.announce(hint(5))
    env.client.announce(hint(6, sender="b"))
    env.client.complete(5)
    assert 5 not in env.sched.registry and env.table_grant(5) is None
    assert 5 not in env.sched.allocator.grants()
    assert_grant_matches_table(env, 6)  # the other flow is untouched and consistent
    with pytest.raises(UnknownFlow) as info:
        env.client.grant(5)
    assert info.value.field == "flow_id"


def test_get_grant_none_yet_until_first_request_mode_activation(env_req: Env) -> None:
    env = env_req
    result = env.client.announce(hint(5))
    assert (result.activated, result.activation_scheduled) == (False, False)
    assert 5 in env.sched.registry
    assert env.client.grant(5) is None and env.table_grant(5) is None


# ---------------------------------------------------------------------------- start time

def test_start_time_not_in_future_activates_at_once(env_req: Env) -> None:
    env = env_req
    env.clock.t = 3 * MS
    result = env.client.announce(hint(5, deadline_ns=5 * MS), start_time_ns=3 * MS)
    assert result.activated and not result.activation_scheduled
    assert env.servicer.stats.activations == 1
    assert_grant_matches_table(env, 5)


def test_start_time_in_future_activates_when_due(env_req: Env) -> None:
    env = env_req
    result = env.client.announce(hint(5, deadline_ns=5 * MS), start_time_ns=2 * MS)
    assert result.activation_scheduled and not result.activated
    assert env.servicer.pending_activations() == {5: 2 * MS}
    assert env.servicer.run_due(2 * MS - 1) == []
    assert env.client.grant(5) is None
    env.clock.t = 2 * MS
    assert env.servicer.run_due() == [5]
    assert env.servicer.pending_activations() == {}
    assert_grant_matches_table(env, 5)


def test_activation_thread_follows_the_clock(env_req: Env) -> None:
    env = env_req
    env.client.announce(hint(5, deadline_ns=5 * MS), start_time_ns=wrap(2 * MS))
    env.clock.t = 2 * MS  # the thread wakes within max_wait_s and sees the clock moved
    deadline = time.monotonic() + 10
    while env.client.grant(5) is None:
        assert time.monotonic() < deadline, "activation thread did not run the due activation"
        time.sleep(0.01)
    assert_grant_matches_table(env, 5)


def test_activation_lead() -> None:
    for env in _make_env(ON_REQUEST, activation_lead_ns=10_000):
        env.client.announce(hint(5), start_time_ns=MS)
        assert env.servicer.pending_activations() == {5: MS - 10_000}
        # a start time closer than the lead activates at once
        env.clock.t = 100
        assert env.client.announce(hint(6, sender="b"), start_time_ns=5_000).activated


def test_complete_cancels_pending_activation(env_req: Env) -> None:
    env = env_req
    env.client.announce(hint(5), start_time_ns=MS)
    env.client.complete(5)
    assert env.servicer.pending_activations() == {}
    env.clock.t = MS
    assert env.servicer.run_due() == []
    assert env.table_grant(5) is None and env.servicer.stats.activation_failures == 0


def test_activation_without_free_slot_is_counted_and_flow_kept() -> None:
    for env in _make_env(ON_REQUEST.replace(meter_slots=2)):  # one flow slot per ToR
        assert env.client.announce(hint(5), start_time_ns=0).activated
        result = env.client.announce(hint(6, sender="b"), start_time_ns=0)
        assert not result.activated
        assert env.servicer.stats.activation_failures == 1
        assert 6 in env.sched.registry and env.client.grant(6) is None
        assert_grant_matches_table(env, 5)


# ---------------------------------------------------------------------------- errors

BAD_HINTS = [
    (hint(9, sender="nope"), "hint.sender"),
    (hint(9, receiver="a"), "hint.receiver"),  # receiver == sender
    (hint(9, size=0), "hint.remaining_bytes"),
    (hint(9, size=1 << 48), "hint.remaining_bytes"),
    (hint(0), "hint.flow_id"),
    (hint(9, label="x" * (LABEL_MAX_LEN + 1)), "hint.label"),
    (hint(5, label="other"), "hint.label"),  # flow 5 exists with another label
    (hint(5, receiver="b"), "hint.receiver"),
    (hint(5, size=2_000_000), "hint.remaining_bytes"),  # re-announce may not grow
]


@pytest.mark.parametrize("bad,field", BAD_HINTS)
def test_invalid_announce_names_field_and_keeps_admitted_flow(env: Env, bad: FlowHint, field: str) -> None:
    env.client.announce(hint(5))
    grant_before, entry_before = env.client.grant(5), env.table_grant(5)
    hints_before = list(env.sched.registry)
    with pytest.raises(InvalidInput) as info:
        env.client.announce(bad)
    assert info.value.field == field
    assert info.value.message  # the server's explanation travels too
    assert list(env.sched.registry) == hints_before
    assert env.client.grant(5) == grant_before and env.table_grant(5) == entry_before
    assert 9 not in env.sched.registry and 0 not in env.sched.registry


def test_invalid_argument_on_the_wire_has_details_and_field_metadata(env: Env) -> None:
    env.client.announce(hint(5))
    with grpc.insecure_channel(env.running.target) as channel:
        stub = pb_grpc.HintServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Announce(pb.AnnounceRequest(flow_id=9, sender="a", receiver="d", remaining_bytes=0,
                                             no_bubble_ts_ns=MS, label="x"), timeout=10)
        err = info.value
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.details().startswith("hint.remaining_bytes: ")
        assert dict(err.trailing_metadata())[FIELD_METADATA_KEY] == "hint.remaining_bytes"
        # an enum value the proto does not define
        with pytest.raises(grpc.RpcError) as info:
            stub.Announce(pb.AnnounceRequest(flow_id=9, sender="a", receiver="d", remaining_bytes=10,
                                             no_bubble_ts_ns=MS, flow_class=7), timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(info.value.trailing_metadata())[FIELD_METADATA_KEY] == "hint.flow_class"
        # UNSPECIFIED is the pipeline class
        stub.Announce(pb.AnnounceRequest(flow_id=10, sender="b", receiver="d", remaining_bytes=10,
                                         no_bubble_ts_ns=MS), timeout=10)
        assert env.sched.registry.get(10).flow_class is FlowClass.PIPELINE
        for call, req in ((stub.Update, pb.UpdateRequest(flow_id=77, remaining_bytes=1)),
                          (stub.Complete, pb.CompleteRequest(flow_id=77)),
                          (stub.GetGrant, pb.GetGrantRequest(flow_id=77))):
            with pytest.raises(grpc.RpcError) as info:
                call(req, timeout=10)
            assert info.value.code() == grpc.StatusCode.NOT_FOUND
            assert "77" in info.value.details()
    assert 5 in env.sched.registry


def test_unknown_flow_is_not_found_for_update_complete_grant(env: Env) -> None:
    env.client.announce(hint(5))
    for call in (lambda: env.client.update(77, 10), lambda: env.client.complete(77),
                 lambda: env.client.grant(77)):
        with pytest.raises(UnknownFlow) as info:
            call()
        assert info.value.field == "flow_id" and "77" in info.value.message
    env.client.complete(5)
    with pytest.raises(UnknownFlow):
        env.client.complete(5)  # completed flows are unknown
    assert env.sched.registry.get  # server still serving
    env.client.announce(hint(6))


def test_invalid_update_changes_nothing(env: Env) -> None:
    env.client.announce(hint(5, size=1_000_000))
    grant_before = env.client.grant(5)
    for args, kwargs, field in (((5, 2_000_000), {}, "hint.remaining_bytes"),
                                ((5, 0), {}, "hint.remaining_bytes"),
                                ((5, 1 << 48), {"no_bubble_ts_ns": MS}, "hint.remaining_bytes")):
        with pytest.raises(InvalidInput) as info:
            env.client.update(*args, **kwargs)
        assert info.value.field == field
    assert env.sched.registry.get(5).remaining_bytes == 1_000_000
    assert env.sched.registry.get(5).no_bubble_ts_ns == 2 * MS
    assert env.client.grant(5) == grant_before


def test_client_rejects_values_protobuf_cannot_carry(env: Env) -> None:
    cases = [(lambda: env.client.announce(hint(1 << 32)), "hint.flow_id"),
             (lambda: env.client.announce(hint(5, size=-1)), "hint.remaining_bytes"),
             (lambda: env.client.announce(hint(5, deadline_ns=-1)), "hint.no_bubble_ts_ns"),
             (lambda: env.client.announce(hint(5, flow_class="bulk")), "hint.flow_class"),
             (lambda: env.client.announce(hint(5), start_time_ns=-5), "start_time_ns"),
             (lambda: env.client.update(-1, 5), "flow_id"),
             (lambda: env.client.update(5, 5, no_bubble_ts_ns=1.5), "hint.no_bubble_ts_ns"),
             (lambda: env.client.grant("5"), "flow_id")]
    for call, field in cases:
        with pytest.raises(InvalidInput) as info:
            call()
        assert info.value.field == field
    assert len(env.sched.registry) == 0


def test_switch_write_failure_is_unavailable_and_hint_kept(env: Env) -> None:
    env.targets["tor1"].fail = True
    with pytest.raises(HintServiceError) as info:
        env.client.announce(hint(5))
    assert info.value.code == "UNAVAILABLE" and "retries" in info.value.details
    assert 5 in env.sched.registry and env.servicer.stats.write_failures == 1
    env.targets["tor1"].fail = False
    env.client.announce(hint(5))  # identical re-announce: safe
    with env.servicer.lock:
        env.sched.tick(env.clock())  # the scheduler's retry installs the grant
    assert_grant_matches_table(env, 5)


def test_server_down_is_hint_service_error() -> None:
    for env in _make_env(AT_ANNOUNCE):
        target = env.running.target
    with HintClient(target, timeout_s=2.0) as client:
        with pytest.raises(HintServiceError) as info:
            client.grant(1)
    assert info.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def test_bad_server_and_client_arguments() -> None:
    topo = two_tors()
    clock = Clock()
    sched = Scheduler(topo, {sw: PipelineModel(sw, clock) for sw in topo.switches()}, AT_ANNOUNCE)
    with pytest.raises(InvalidInput) as info:
        HintServicer(sched, clock, activation_lead_ns=-1)
    assert info.value.field == "activation_lead_ns"
    with pytest.raises(InvalidInput) as info:
        start(sched, "no-port", clock)
    assert info.value.field == "address"
    with pytest.raises(InvalidInput) as info:
        start(sched, "203.0.113.1:0", clock)  # not a local address
    assert info.value.field == "address"
    with pytest.raises(InvalidInput) as info:
        HintClient("127.0.0.1:1", timeout_s=0)
    assert info.value.field == "timeout_s"


def test_concurrent_clients_are_serialised(env: Env) -> None:
    errors: list[BaseException] = []

    def announce_range(sender: str, first: int) -> None:
        try:
            with HintClient(env.running.target, timeout_s=10.0) as client:
                for fid in range(first, first + 10):
                    client.announce(hint(fid, sender=sender, size=100_000 + fid))
        except BaseException as err:  # noqa: BLE001 (reported by the main thread)
            errors.append(err)

    threads = [threading.Thread(target=announce_range, args=(s, 100 * (i + 1)))
               for i, s in enumerate(("a", "b", "c"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    fids = [fid for i in range(3) for fid in range(100 * (i + 1), 100 * (i + 1) + 10)]
    assert sorted(h.flow_id for h in env.sched.registry) == fids
    assert len({env.sched.slot_of(fid) for fid in fids}) == len(fids)
    for fid in fids:
        assert_grant_matches_table(env, fid)


# ---------------------------------------------------------------------------- dependencies

@pytest.fixture
def env_dep() -> Iterator[Env]:
    yield from _make_env(SHARE)


def dep(dep_id: int, sender: str = "a", receiver: str = "d", label: str = "",
        flow_class: FlowClass = FlowClass.PIPELINE) -> DependencyHint:
    return DependencyHint(dep_id, sender, receiver, label or f"{sender}->{receiver}", flow_class)


def test_announce_dependencies_installs_share_grants_once(env_dep: Env) -> None:
    env = env_dep
    ip = two_tors().host_ip
    assert env.client.announce_dependencies([dep(1), dep(1, sender="b"), dep(2, sender="d", receiver="a")]) == 3
    assert env.share_grants("tor1") == {(ip("a"), 1): 1, (ip("b"), 1): 2}
    assert env.share_grants("tor0") == {(ip("d"), 2): 1}
    assert env.sched.dependencies.get(("b", 1)).label == "b->d"
    writes = env.sched.stats.table_updates, env.sched.stats.meter_updates
    assert env.client.announce_dependencies([dep(1), dep(1, sender="b")]) == 0  # the same content again
    assert (env.sched.stats.table_updates, env.sched.stats.meter_updates) == writes
    assert env.client.announce_dependencies([]) == 0
    bg = dep(3, sender="c", flow_class=FlowClass.BACKGROUND)
    assert env.client.announce_dependencies([bg]) == 1
    assert env.sched.dependencies.get(("c", 3)).flow_class is FlowClass.BACKGROUND


def test_the_client_refuses_a_dependency_id_outside_1_to_65535_before_sending(env_dep: Env) -> None:
    env = env_dep
    for bad in (0, 1 << 16):
        with pytest.raises(InvalidInput, match=rf"must be an integer in 1\.\.65535, got {bad}") as info:
            env.client.announce_dependencies([dep(7, sender="b"), dep(bad)])
        assert info.value.field == "dependencies[1].dep_id"
    assert len(env.sched.dependencies) == 0  # nothing was sent
    with grpc.insecure_channel(env.running.target) as channel:  # the server checks it too
        request = pb.AnnounceDependenciesRequest(dependencies=[pb.Dependency(dep_id=0, sender="a", receiver="d")])
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.HintServiceStub(channel).AnnounceDependencies(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "1..65535" in err.value.details()


@pytest.mark.parametrize("bad,field", [
    (dep(5, receiver="zz"), "dependencies[1].receiver"),
    (dep(5, sender="zz"), "dependencies[1].sender"),
    (dep(5, receiver="a"), "dependencies[1].receiver"),  # receiver == sender
    (dep(5, label="x" * (LABEL_MAX_LEN + 1)), "dependencies[1].label"),
    (dep(1, receiver="b"), "dependencies[1].dep_id"),  # (a, 1) is in use for d: end it first
])
def test_bad_dependency_names_its_index_and_field_and_stops_there(env_dep: Env, bad: DependencyHint,
                                                                  field: str) -> None:
    env = env_dep
    env.client.announce_dependencies([dep(1)])
    with pytest.raises(InvalidInput) as info:
        env.client.announce_dependencies([dep(7, sender="b"), bad, dep(8, sender="c")])
    assert info.value.field == field and info.value.message
    assert ("b", 7) in env.sched.dependencies  # the ones before it stay announced ...
    assert ("c", 8) not in env.sched.dependencies  # ... the ones after it are not
    assert env.sched.dependencies.get(("a", 1)).receiver == "d"
    assert len(env.share_grants()) == 2


def test_bad_dependency_on_the_wire_and_limits(env_dep: Env) -> None:
    env = env_dep
    with grpc.insecure_channel(env.running.target) as channel:
        stub = pb_grpc.HintServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.AnnounceDependencies(pb.AnnounceDependenciesRequest(dependencies=[
                pb.Dependency(dep_id=1, sender="a", receiver="d"),
                pb.Dependency(dep_id=2, sender="a", receiver="d", flow_class=7)]), timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert dict(info.value.trailing_metadata())[FIELD_METADATA_KEY] == "dependencies[1].flow_class"
        assert info.value.details().startswith("dependencies[1].flow_class: ")
        assert env.sched.dependencies.get(("a", 1)).flow_class is FlowClass.PIPELINE  # UNSPECIFIED = pipeline
        with pytest.raises(grpc.RpcError) as info:
            stub.AnnounceDependencies(pb.AnnounceDependenciesRequest(dependencies=[
                pb.Dependency(dep_id=9, sender="b", receiver="d")] * 4097), timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "4096" in info.value.details()
        assert ("b", 9) not in env.sched.dependencies  # refused as a whole
    # values protobuf cannot carry are refused by the client, named the same way
    for bad, field in ((dep(1 << 16), "dependencies[0].dep_id"), (dep(-1), "dependencies[0].dep_id"),
                       (dep(4, flow_class="bulk"), "dependencies[0].flow_class")):
        with pytest.raises(InvalidInput) as err:
            env.client.announce_dependencies([bad])
        assert err.value.field == field


def test_malformed_oversized_and_beyond_32_bit_requests_on_the_wire(env_dep: Env) -> None:
    """Raw bytes (safs.control.hintapi.batch_wire): unparsable -> INVALID_ARGUMENT naming the
    message, for every method; 2,000,000 items refused without reading them; a dep_id beyond
    32 bits refused by name (protobuf would have read another dependency); EndDependencies'
    errors carry the field metadata; the server keeps serving."""
    env = env_dep
    env.client.announce_dependencies([dep(7)])
    with grpc.insecure_channel(env.running.target) as channel:
        def raw(method: str, data: bytes) -> grpc.RpcError:
            call = channel.unary_unary(f"/safs.v1.HintService/{method}", request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
            with pytest.raises(grpc.RpcError) as info:
                call(data, timeout=30)
            return info.value

        for method, message in (("AnnounceDependencies", "AnnounceDependenciesRequest"),
                                ("EndDependencies", "EndDependenciesRequest"), ("Announce", "AnnounceRequest")):
            err = raw(method, b"\x0a\x05ab")  # a length that overruns the input
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.details().startswith(f"request: not a valid safs.v1.{message}: "), err.details()
        err = raw("EndDependencies", bytes([1 << 3 | 2, 0]) * 2_000_000)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.details() == "dependencies: at most 4096 per call, got more than 4096"
        assert dict(err.trailing_metadata())[FIELD_METADATA_KEY] == "dependencies"
        inner = pb.EndDependencyRequest(sender="a").SerializeToString() + bytes([2 << 3, 0x87, 0x80, 0x80, 0x80, 0x10])
        err = raw("EndDependencies", bytes([1 << 3 | 2, len(inner)]) + inner)  # dep_id 2^32 + 7
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "4294967303" in err.details()
        assert dict(err.trailing_metadata())[FIELD_METADATA_KEY] == "dependencies[0].dep_id"
    assert ("a", 7) in env.sched.dependencies  # not ended by an alias
    env.client.end_dependencies([("a", 7)])  # and the server still serves
    assert ("a", 7) not in env.sched.dependencies


def test_no_free_slot_names_the_dependency_receiver() -> None:
    for env in _make_env(SHARE.replace(meter_slots=2)):  # one slot per ToR
        with pytest.raises(InvalidInput) as info:
            env.client.announce_dependencies([dep(1), dep(2, sender="b")])
        assert info.value.field == "dependencies[1].receiver" and "free meter slot" in info.value.message
        assert ("a", 1) in env.sched.dependencies and ("b", 2) not in env.sched.dependencies
        env.client.end_dependency("a", 1)  # frees the slot
        assert env.client.announce_dependencies([dep(2, sender="b")]) == 1


def test_end_dependency_deletes_its_grant_and_unknown_is_not_found(env_dep: Env) -> None:
    env = env_dep
    ip = two_tors().host_ip
    env.client.announce_dependencies([dep(1), dep(2, sender="b")])
    free = env.sched.free_slots("tor1")
    env.client.end_dependency("a", 1)
    assert env.share_grants() == {(ip("b"), 2): 2} and env.sched.free_slots("tor1") == free + 1
    assert ("a", 1) not in env.sched.dependencies
    for sender, dep_id, field in (("a", 1, "dep_id"), ("zz", 3, "sender")):  # unknown; not a host
        with pytest.raises(InvalidInput) as info:
            env.client.end_dependency(sender, dep_id)
        assert info.value.field == field
    with grpc.insecure_channel(env.running.target) as channel:
        stub = pb_grpc.HintServiceStub(channel)
        for sender, dep_id, code in (("a", 1, grpc.StatusCode.NOT_FOUND),  # a dependency that is not there
                                     ("a", 70_000, grpc.StatusCode.INVALID_ARGUMENT),  # none could be
                                     ("zz", 1, grpc.StatusCode.INVALID_ARGUMENT)):
            with pytest.raises(grpc.RpcError) as err:
                stub.EndDependency(pb.EndDependencyRequest(sender=sender, dep_id=dep_id), timeout=10)
            assert err.value.code() == code
    with pytest.raises(InvalidInput) as info:
        env.client.end_dependency("a", 1 << 16)
    assert info.value.field == "dep_id"
    assert env.client.announce_dependencies([dep(1, receiver="b")]) == 1  # the id is free for reuse


def test_end_dependencies_ends_in_order_and_stops_at_an_unknown_one(env_dep: Env) -> None:
    env = env_dep
    ip = two_tors().host_ip
    env.client.announce_dependencies([dep(1), dep(2, sender="b"), dep(3, sender="c")])
    with pytest.raises(InvalidInput) as info:
        env.client.end_dependencies([("a", 1), ("zz", 9), ("b", 2)])
    assert info.value.field == "dependencies[1].sender"  # not a host
    assert env.share_grants() == {(ip("b"), 2): 2, (ip("c"), 3): 3}  # a's ended, b's kept
    env.client.end_dependencies([("b", 2), ("c", 3)])
    assert env.share_grants() == {} and len(env.sched.dependencies) == 0


def test_announce_fills_in_a_dependency_a_digest_made(env_dep: Env) -> None:
    env = env_dep
    ip = two_tors().host_ip
    with env.servicer.lock:
        assert env.sched.on_digest("tor1", RequestDigest(40, ip("a"), ip("d"), 6, 1000, 0), 0)
    assert env.sched.dependencies.get(("a", 6)).label == DIGEST_LABEL
    before = env.sched.stats.table_updates
    assert env.client.announce_dependencies([dep(6, label="A2F a->d")]) == 0  # known: not new
    assert env.sched.dependencies.get(("a", 6)).label == "A2F a->d"
    assert env.sched.stats.table_updates == before


def test_dependency_write_failure_is_unavailable_and_repaired_by_setup(env_dep: Env) -> None:
    env = env_dep
    env.targets["tor1"].fail = True
    with pytest.raises(HintServiceError) as info:
        env.client.announce_dependencies([dep(1)])
    assert info.value.code == "UNAVAILABLE"
    assert ("a", 1) in env.sched.dependencies and env.servicer.stats.write_failures == 1
    assert env.share_grants() == {}
    env.targets["tor1"].fail = False
    with env.servicer.lock:
        env.sched.setup(env.clock())  # re-plans every dependency against the switch
    assert env.share_grants() == {(two_tors().host_ip("a"), 1): 1}

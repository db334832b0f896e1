"""safs.core.hints: validation, idempotence, late hints, digest merge; a rejected call changes nothing.
Flow hints (per-transfer mode) and dependencies (DependencyRegistry, the default mode)."""

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safs.core.errors import InvalidInput
from safs.core.hints import (
    DIGEST_LABEL,
    LABEL_MAX_LEN,
    DependencyHint,
    DependencyRegistry,
    FlowClass,
    FlowHint,
    HintRegistry,
)
from safs.core.protocol import REMAINING_BYTES_MAX
from safs.core.timebase import TIME_MOD

HOSTS = {f"h{i}": 0x0A000000 + i for i in range(1, 9)}
IP = HOSTS  # name -> address, for readability in digest calls


def hint(**kw) -> FlowHint:
    base = dict(flow_id=1, sender="h1", receiver="h2", remaining_bytes=10_000,
                no_bubble_ts_ns=5_000_000, label="job1/stage0/mb0")
    return FlowHint(**(base | kw))


def state(reg: HintRegistry):
    return copy.deepcopy((reg._hints, reg._provisional, reg._recently_completed))


@pytest.fixture
def reg() -> HintRegistry:
    return HintRegistry(HOSTS)


def test_announce_new_then_identical_is_idempotent(reg):
    assert reg.announce(hint(), now_ns=0) is True
    assert reg.announce(hint(), now_ns=10) is False
    assert len(reg) == 1 and reg.get(1) == hint()
    assert [h.flow_id for h in reg] == [1]


def test_announce_smaller_remaining_updates(reg):
    reg.announce(hint(), 0)
    assert reg.announce(hint(remaining_bytes=4000), 0) is True
    assert reg.get(1).remaining_bytes == 4000


def test_timestamp_reduced_mod_2_48(reg):
    reg.announce(hint(no_bubble_ts_ns=3 * TIME_MOD + 17), 0)
    assert reg.get(1).no_bubble_ts_ns == 17
    # the same host-clock time announced again is identical content
    assert reg.announce(hint(no_bubble_ts_ns=3 * TIME_MOD + 17), 0) is False


def test_flow_class_string_accepted(reg):
    reg.announce(hint(flow_class="background"), 0)
    assert reg.get(1).flow_class is FlowClass.BACKGROUND


def test_late_hint_accepted(reg):
    assert reg.announce(hint(no_bubble_ts_ns=1000), now_ns=2000) is True
    assert reg.is_late(1, 2000)
    assert not reg.is_late(1, 999)
    # across the 2^48 wrap: timestamp just after the wrap, now just before it -> not late
    reg.announce(hint(flow_id=2, no_bubble_ts_ns=TIME_MOD + 5), now_ns=0)
    assert not reg.is_late(2, TIME_MOD - 5)
    assert reg.is_late(2, TIME_MOD + 6)


@pytest.mark.parametrize("kw,field,needle", [
    (dict(flow_id=0), "hint.flow_id", "1..2^32-1"),
    (dict(flow_id=1 << 32), "hint.flow_id", "1..2^32-1"),
    (dict(flow_id=True), "hint.flow_id", "integer"),
    (dict(remaining_bytes=0), "hint.remaining_bytes", "1..2^48-1"),
    (dict(remaining_bytes=REMAINING_BYTES_MAX + 1), "hint.remaining_bytes", "1..2^48-1"),
    (dict(sender="nope"), "hint.sender", "h1, h2"),
    (dict(receiver="h99"), "hint.receiver", "valid hosts"),
    (dict(receiver="h1"), "hint.receiver", "differ"),
    (dict(label="x" * (LABEL_MAX_LEN + 1)), "hint.label", str(LABEL_MAX_LEN)),
    (dict(no_bubble_ts_ns=-1), "hint.no_bubble_ts_ns", ">= 0"),
    (dict(flow_class="urgent"), "hint.flow_class", "pipeline"),
])
def test_invalid_hint_rejected_and_registry_unchanged(reg, kw, field, needle):
    reg.announce(hint(flow_id=7), 0)
    before = state(reg)
    with pytest.raises(InvalidInput) as e:
        reg.announce(hint(**kw), 0)
    assert e.value.field == field
    assert needle in e.value.message
    assert state(reg) == before


def test_label_at_limit_accepted(reg):
    assert reg.announce(hint(label="x" * LABEL_MAX_LEN), 0)


@pytest.mark.parametrize("kw,field", [
    (dict(sender="h3"), "hint.sender"), (dict(receiver="h3"), "hint.receiver"),
    (dict(flow_class=FlowClass.BACKGROUND), "hint.flow_class"), (dict(label="other"), "hint.label"),
    (dict(no_bubble_ts_ns=1), "hint.no_bubble_ts_ns"), (dict(remaining_bytes=10_001), "hint.remaining_bytes"),
])
def test_reused_id_with_other_content_rejected(reg, kw, field):
    reg.announce(hint(), 0)
    before = state(reg)
    with pytest.raises(InvalidInput) as e:
        reg.announce(hint(**kw), 0)
    assert e.value.field == field
    assert state(reg) == before


def test_update_shrinks_and_moves_timestamp(reg):
    reg.announce(hint(), 0)
    assert reg.update(1, 8000, now_ns=1) is True
    assert reg.update(1, 8000, now_ns=2) is False
    assert reg.update(1, 8000, now_ns=3, no_bubble_ts_ns=TIME_MOD + 9) is True
    assert reg.get(1) == hint(remaining_bytes=8000, no_bubble_ts_ns=9)


def test_update_growth_rejected(reg):
    reg.announce(hint(), 0)
    before = state(reg)
    with pytest.raises(InvalidInput) as e:
        reg.update(1, 10_001, now_ns=1)
    assert str(e.value) == "hint.remaining_bytes: may only decrease, was 10000, got 10001"
    assert state(reg) == before


@pytest.mark.parametrize("call", [
    lambda r: r.get(42), lambda r: r.update(42, 1, 0), lambda r: r.complete(42),
    lambda r: r.is_late(42, 0), lambda r: r.is_provisional(42),
])
def test_unknown_flow_id(reg, call):
    with pytest.raises(InvalidInput) as e:
        call(reg)
    assert e.value.field == "flow_id"


def test_complete_removes(reg):
    reg.announce(hint(), 0)
    assert reg.complete(1) == hint()
    assert 1 not in reg and len(reg) == 0


# Digests ----------------------------------------------------------------------------------
def test_digest_creates_provisional_hint_then_announce_completes_it(reg):
    assert reg.merge_digest(3, IP["h4"], IP["h5"], 9000, 777, now_ns=0) is True
    h = reg.get(3)
    assert (h.sender, h.receiver, h.remaining_bytes, h.label) == ("h4", "h5", 9000, DIGEST_LABEL)
    assert reg.is_provisional(3)
    # the application's announce (more bytes: it was sent before the REQUEST) fills in content
    assert reg.announce(hint(flow_id=3, sender="h4", receiver="h5", remaining_bytes=12_000), 1)
    h = reg.get(3)
    assert (h.label, h.no_bubble_ts_ns, h.remaining_bytes) == ("job1/stage0/mb0", 5_000_000, 9000)
    assert not reg.is_provisional(3)


def test_announce_over_digest_with_other_hosts_rejected(reg):
    reg.merge_digest(3, IP["h4"], IP["h5"], 9000, 777, now_ns=0)
    before = state(reg)
    with pytest.raises(InvalidInput) as e:
        reg.announce(hint(flow_id=3, sender="h1", receiver="h5"), 0)
    assert e.value.field == "hint.sender"
    assert state(reg) == before


def test_digest_for_known_flow_only_lowers_remaining(reg):
    reg.announce(hint(), 0)
    assert reg.merge_digest(1, IP["h1"], IP["h2"], 20_000, 5_000_000, 0) is False  # more: ignored
    assert reg.merge_digest(1, IP["h7"], IP["h8"], 10_000, 1, 0) is False  # conflicts ignored
    assert reg.get(1) == hint()
    assert reg.merge_digest(1, IP["h1"], IP["h2"], 6000, 42, 0) is True
    assert reg.get(1) == hint(remaining_bytes=6000)


def test_digest_for_completed_flow_ignored(reg):
    reg.announce(hint(), 0)
    reg.complete(1)
    assert reg.merge_digest(1, IP["h1"], IP["h2"], 100, 0, 0) is False
    assert 1 not in reg
    assert reg.announce(hint(), 0) is True  # an announce may reuse the id


@pytest.mark.parametrize("args,field", [
    ((5, 0x0B000001, IP["h2"], 100, 0), "digest.src_ip"),
    ((5, IP["h1"], 0x0B000001, 100, 0), "digest.dst_ip"),
    ((5, IP["h1"], IP["h1"], 100, 0), "digest.dst_ip"),
    ((0, IP["h1"], IP["h2"], 100, 0), "digest.flow_id"),
    ((5, IP["h1"], IP["h2"], 0, 0), "digest.remaining_bytes"),
    ((5, IP["h1"], IP["h2"], 100, TIME_MOD), "digest.no_bubble_ts_ns"),
])
def test_bad_digest_rejected(reg, args, field):
    reg.announce(hint(), 0)
    before = state(reg)
    with pytest.raises(InvalidInput) as e:
        reg.merge_digest(*args, now_ns=0)
    assert e.value.field == field
    assert state(reg) == before


def test_hosts_validated():
    with pytest.raises(InvalidInput) as e:
        HintRegistry({"a": 1, "b": 1})
    assert e.value.field == "hosts['b']"
    with pytest.raises(InvalidInput):
        HintRegistry({"a": 1 << 32})


# Properties -------------------------------------------------------------------------------
names = st.sampled_from(sorted(HOSTS) + ["ghost"])
flow_ids = st.integers(0, 6)  # 0 is invalid on purpose; small range forces reuse
rem = st.integers(-1, 50_000)
ts = st.integers(-5, 3 * TIME_MOD)
ops = st.one_of(
    st.tuples(st.just("announce"), st.builds(
        FlowHint, flow_id=flow_ids, sender=names, receiver=names, remaining_bytes=rem,
        no_bubble_ts_ns=ts, label=st.sampled_from(["a", "b", "x" * 200]),
        flow_class=st.sampled_from(list(FlowClass)))),
    st.tuples(st.just("update"), flow_ids, rem, st.one_of(st.none(), ts)),
    st.tuples(st.just("digest"), flow_ids, st.sampled_from(list(HOSTS.values()) + [1]),
              st.sampled_from(list(HOSTS.values())), rem, st.integers(0, TIME_MOD)),
    st.tuples(st.just("complete"), flow_ids),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(ops, max_size=40))
def test_registry_never_loses_flows_and_bytes_never_grow(seq):
    reg = HintRegistry(HOSTS)
    accepted: dict[int, int] = {}  # flow id -> remaining bytes last seen
    for now, op in enumerate(seq):
        try:
            if op[0] == "announce":
                reg.announce(op[1], now)
            elif op[0] == "update":
                reg.update(op[1], op[2], now, op[3])
            elif op[0] == "digest":
                reg.merge_digest(*op[1:], now_ns=now)
            else:
                reg.complete(op[1])
                accepted.pop(op[1])
        except InvalidInput:
            pass
        for fid, last in list(accepted.items()):
            assert fid in reg, f"accepted flow {fid} lost after {op[0]}"
            assert reg.get(fid).remaining_bytes <= last
        accepted = {h.flow_id: h.remaining_bytes for h in reg}
        for h in reg:
            assert 1 <= h.remaining_bytes <= REMAINING_BYTES_MAX
            assert 0 <= h.no_bubble_ts_ns < TIME_MOD
            assert h.sender != h.receiver


# Dependencies -----------------------------------------------------------------------------
def dep(**kw) -> DependencyHint:
    base = dict(dep_id=3, sender="h1", receiver="h2", label="A2F h1->h2")
    return DependencyHint(**(base | kw))


@pytest.fixture
def deps() -> DependencyRegistry:
    return DependencyRegistry(HOSTS)


def test_dependency_announce_new_then_identical_is_a_no_op(deps):
    assert deps.announce(dep()) is True
    assert deps.announce(dep()) is False
    assert len(deps) == 1 and ("h1", 3) in deps
    assert deps.get(("h1", 3)) == dep(flow_class=FlowClass.PIPELINE)
    assert list(deps) == [dep()]


def test_dependency_class_string_is_normalised(deps):
    deps.announce(dep(flow_class="background"))
    assert deps.get(("h1", 3)).flow_class is FlowClass.BACKGROUND
    assert deps.announce(dep(flow_class=FlowClass.BACKGROUND)) is False  # the same content


def test_dependency_ids_are_per_sender(deps):
    assert deps.announce(dep()) and deps.announce(dep(sender="h3"))
    assert len(deps) == 2 and deps.get(("h3", 3)).sender == "h3"


@pytest.mark.parametrize("kw,field", [
    (dict(dep_id=0), "dependency.dep_id"), (dict(dep_id=65536), "dependency.dep_id"),
    (dict(dep_id=True), "dependency.dep_id"), (dict(sender="ghost"), "dependency.sender"),
    (dict(receiver="h99"), "dependency.receiver"), (dict(receiver="h1"), "dependency.receiver"),
    (dict(label="x" * (LABEL_MAX_LEN + 1)), "dependency.label"), (dict(flow_class="urgent"), "dependency.flow_class"),
])
def test_bad_dependency_names_its_field_and_changes_nothing(deps, kw, field):
    deps.announce(dep(dep_id=9))
    before = copy.deepcopy(deps._deps)
    with pytest.raises(InvalidInput) as e:
        deps.announce(dep(**kw))
    assert e.value.field == field
    assert deps._deps == before


@pytest.mark.parametrize("kw", [dict(receiver="h3"), dict(flow_class=FlowClass.BACKGROUND)])
def test_conflicting_reuse_of_a_dependency_id_is_refused_in_one_line(deps, kw):
    deps.announce(dep())
    with pytest.raises(InvalidInput) as e:
        deps.announce(dep(**kw))
    assert e.value.field == "dependency.dep_id"
    assert "\n" not in str(e.value) and "end it first" in e.value.message
    assert deps.get(("h1", 3)) == dep()  # the first one stands


def test_a_new_label_replaces_the_old_one_and_is_not_new(deps):
    deps.announce(dep())
    assert deps.announce(dep(label="renamed")) is False
    assert deps.get(("h1", 3)).label == "renamed"


def test_digest_of_an_unknown_dependency_makes_a_placeholder_the_announce_fills_in(deps):
    got = deps.from_digest(IP["h1"], IP["h2"], 3)
    assert got == DependencyHint(3, "h1", "h2", DIGEST_LABEL, FlowClass.PIPELINE)
    assert deps.from_digest(IP["h1"], IP["h2"], 3) == got and len(deps) == 1  # the same one again
    assert deps.announce(dep()) is False  # the application's announce: known, label filled in
    assert deps.get(("h1", 3)).label == "A2F h1->h2"


def test_digest_never_changes_a_known_dependency(deps):
    deps.announce(dep())
    assert deps.from_digest(IP["h1"], IP["h4"], 3) == dep()  # another receiver: the known one wins
    assert len(deps) == 1


@pytest.mark.parametrize("args,field", [((1, IP["h2"], 3), "digest.src_addr"), ((IP["h1"], 1, 3), "digest.dst_addr"),
                                        ((IP["h1"], IP["h1"], 3), "dependency.receiver")])
def test_bad_dependency_digest_names_its_field_and_changes_nothing(deps, args, field):
    with pytest.raises(InvalidInput) as e:
        deps.from_digest(*args)
    assert e.value.field == field
    assert len(deps) == 0


def test_digest_dep_id_out_of_range_is_refused(deps):
    with pytest.raises(InvalidInput) as e:
        deps.from_digest(IP["h1"], IP["h2"], 0)
    assert "dep_id" in e.value.field
    assert len(deps) == 0


def test_end_forgets_the_dependency_so_its_id_may_be_reused(deps):
    deps.announce(dep())
    assert deps.end(("h1", 3)) == dep()
    assert ("h1", 3) not in deps and len(deps) == 0
    assert deps.announce(dep(receiver="h3")) is True  # ended: the id is free for another receiver
    with pytest.raises(InvalidInput) as e:
        deps.end(("h1", 4))
    assert e.value.field == "dep_id"
    with pytest.raises(InvalidInput) as e:
        deps.get(("h2", 3))
    assert e.value.field == "dep_id"

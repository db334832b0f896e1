"""Allocator invariants (../shared/BRIEF.md, "Invariants"), API contract and bad input.

Fluid-schedule properties use tests/fluid.py (a fluid simulator and an independent EDF test).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest
from fluid import FluidFlow, edf_max_lateness, run_fluid
from hypothesis import given, settings
from hypothesis import strategies as st

from safs.core import protocol
from safs.core.allocator import (
    Allocator,
    AllocatorConfig,
    AllocFlow,
    Grant,
    key_ranges,
    slack_class_table,
)
from safs.core.errors import InvalidInput
from safs.core.scheduler import SchedulerConfig
from safs.core.timebase import TIME_MASK, diff, slack_key, slack_to_key, wrap

G = 1_000_000_000
CAPS = [1 * G, 10 * G, 25 * G, 40 * G, 100 * G]
PROPERTY = settings(max_examples=150, deadline=None)


# --------------------------------------------------------------------------- strategies


@st.composite
def fabrics(draw: st.DrawFn, max_flows: int = 8) -> tuple[Allocator, list[AllocFlow], int]:
    """A small fabric (1-3 receivers, 1-3 senders), flows on it and a 48-bit `now`."""
    receivers = {f"r{i}": draw(st.sampled_from(CAPS)) for i in range(draw(st.integers(1, 3)))}
    senders = {f"s{i}": draw(st.sampled_from(CAPS)) for i in range(draw(st.integers(1, 3)))}
    config = AllocatorConfig(
        headroom=draw(st.sampled_from([0.0, 0.05, 0.2])),
        safety_margin=draw(st.sampled_from([0.0, 0.1, 0.5])),
        resend_fraction=draw(st.sampled_from([0.0, 0.1, 0.3])),
    )
    now = draw(st.integers(0, TIME_MASK))
    n = draw(st.integers(0, max_flows))
    flows = [
        AllocFlow(
            flow_id=draw(st.integers(1, 50)) * 100 + i,  # distinct, not in insertion order
            sender=draw(st.sampled_from(sorted(senders))),
            receiver=draw(st.sampled_from(sorted(receivers))),
            remaining_bytes=draw(st.integers(1, 50_000_000)),
            deadline_ns=wrap(now + draw(st.integers(-2_000_000, 20_000_000))),
            background=draw(st.booleans()),
        )
        for i in range(n)
    ]
    return Allocator(config, receivers, senders), flows, now


def assert_within_capacity(alloc: Allocator, rates: dict[int, int]) -> None:
    """No receiver link nor sender uplink carries more than its usable capacity."""
    per_r: dict[str, int] = {}
    per_s: dict[str, int] = {}
    for fid, flow in alloc.flows().items():
        assert rates[fid] >= 0
        per_r[flow.receiver] = per_r.get(flow.receiver, 0) + rates[fid]
        per_s[flow.sender] = per_s.get(flow.sender, 0) + rates[fid]
    for name, total in per_r.items():
        assert total <= alloc.receiver_usable_bps(name), f"receiver {name} over capacity"
    for name, total in per_s.items():
        assert total <= alloc.sender_usable_bps(name), f"sender {name} over capacity"


def assert_work_conserving(alloc: Allocator) -> None:
    """Each receiver link is full unless every flow on it is stopped by its full sender uplink."""
    rates = alloc.computed_rates()
    flows = alloc.flows()
    per_r: dict[str, int] = {}
    per_s: dict[str, int] = {}
    for fid, flow in flows.items():
        per_r[flow.receiver] = per_r.get(flow.receiver, 0) + rates[fid]
        per_s[flow.sender] = per_s.get(flow.sender, 0) + rates[fid]
    for name, total in per_r.items():
        if total < alloc.receiver_usable_bps(name):
            for flow in flows.values():
                if flow.receiver == name:
                    assert per_s[flow.sender] == alloc.sender_usable_bps(flow.sender), (
                        f"receiver {name} has {total} bit/s unused while sender {flow.sender} can send more"
                    )


def simple(headroom: float = 0.0, **kw: object) -> Allocator:
    """One 10 Gbit/s receiver r, senders a, b, c with 100 Gbit/s uplinks."""
    return Allocator(
        AllocatorConfig(headroom=headroom, **kw), {"r": 10 * G}, {"a": 100 * G, "b": 100 * G, "c": 100 * G}
    )


# --------------------------------------------------------------------------- properties


@PROPERTY
@given(fabrics(), st.data())
def test_capacity_invariant_installed_and_computed(fab: tuple, data: st.DataObject) -> None:
    """Computed rates and installed grants never exceed usable capacity, through any history."""
    alloc, flows, now = fab
    for flow in flows:
        alloc.upsert(flow, now)
        assert_within_capacity(alloc, alloc.computed_rates())
        assert_within_capacity(alloc, {f: g.rate_bps for f, g in alloc.grants().items()})
    # time passes, flows shrink, some leave: still within capacity
    for _ in range(data.draw(st.integers(0, 6))):
        now = wrap(now + data.draw(st.integers(0, 3_000_000)))
        live = sorted(alloc.flows())
        if live and data.draw(st.booleans()):
            fid = data.draw(st.sampled_from(live))
            old = alloc.flows()[fid]
            if data.draw(st.booleans()):
                alloc.remove(fid, now)
            else:
                alloc.upsert(dataclasses.replace(old, remaining_bytes=max(1, old.remaining_bytes // 3)), now)
        else:
            alloc.recompute(now)
        assert_within_capacity(alloc, alloc.computed_rates())
        assert_within_capacity(alloc, {f: g.rate_bps for f, g in alloc.grants().items()})
        assert set(alloc.grants()) == set(alloc.flows())


@PROPERTY
@given(fabrics())
def test_work_conserving(fab: tuple) -> None:
    """While flows have bytes left, usable receiver capacity is handed out within sender limits."""
    alloc, flows, now = fab
    alloc.upsert_many(flows, now)
    assert_work_conserving(alloc)


@PROPERTY
@given(fabrics(), st.data())
def test_resend_rule(fab: tuple, data: st.DataObject) -> None:
    """A grant changes only by the BRIEF's re-send rule, and always takes the computed rate then."""
    alloc, flows, now = fab
    frac = Fraction(alloc.config.resend_fraction)
    for flow in flows:
        before = alloc.grants()
        now = wrap(now + data.draw(st.integers(0, 500_000)))
        changed = alloc.upsert(flow, now)
        rates, demand, after = alloc.computed_rates(), alloc.demands(), alloc.grants()
        for fid, grant in after.items():
            if fid in changed:
                assert changed[fid] == grant
                old = before.get(fid)
                assert grant.epoch == (1 if old is None else old.epoch + 1)
                assert grant.rate_bps == rates[fid]  # a change always installs the computed rate
            else:
                assert grant == before[fid]
                inst = grant.rate_bps
                assert abs(rates[fid] - inst) <= frac * inst, "rate moved past resend_fraction"
                # (c): the installed rate must still cover the no-bubble rate (demand / (1 + margin)).
                margin = 1 + Fraction(alloc.config.safety_margin)
                assert not (rates[fid] > inst and inst * margin < demand[fid]), "needed increase not sent"


@PROPERTY
@given(fabrics())
def test_grants_are_reusable(fab: tuple) -> None:
    """Nothing changed -> no grant changes (no control message), epochs stay."""
    alloc, flows, now = fab
    alloc.upsert_many(flows, now)
    snapshot = alloc.grants()
    assert alloc.recompute(now) == {}
    for flow in flows:
        assert alloc.upsert(flow, now) == {}
    assert alloc.grants() == snapshot


@PROPERTY
@given(fabrics(max_flows=10), st.data())
def test_incremental_equals_full_recompute(fab: tuple, data: st.DataObject) -> None:
    """upsert/remove recompute only the touched component, yet give a from-scratch allocation."""
    alloc, flows, now = fab
    ops: list[AllocFlow | int] = []
    for flow in flows:
        ops.append(flow)
        if data.draw(st.integers(0, 3)) == 0:
            ops.append(flow.flow_id)  # remove it again
    for i, op in enumerate(ops):
        t = wrap(now + 1000 * i)  # time passes between operations
        if isinstance(op, int):
            alloc.remove(op, t)
        else:
            alloc.upsert(op, t)
        # The touched component, found here independently of the allocator's own search.
        flow_set = alloc.flows()
        seed_hosts = {("r", op.receiver), ("s", op.sender)} if not isinstance(op, int) else set()
        if isinstance(op, int):
            gone = next(f for f in flows if f.flow_id == op)
            seed_hosts = {("r", gone.receiver), ("s", gone.sender)}
        hosts, grew = set(seed_hosts), True
        while grew:
            grew = False
            for f in flow_set.values():
                ends = {("r", f.receiver), ("s", f.sender)}
                if ends & hosts and not ends <= hosts:
                    hosts |= ends
                    grew = True
        touched = [fid for fid, f in flow_set.items() if ("r", f.receiver) in hosts]
        fresh = Allocator(alloc.config, _caps(alloc, "r", flows), _caps(alloc, "s", flows))
        fresh.upsert_many(list(flow_set.values()), t)
        assert {f: alloc.computed_rates()[f] for f in touched} == {f: fresh.computed_rates()[f] for f in touched}
    # Same time for everything: incremental and full agree on all flows, and a full recompute
    # with the same history changes no grant (nothing stale was left behind).
    t = wrap(now + 1000 * len(ops))
    alloc.recompute(t)
    fresh = Allocator(alloc.config, _caps(alloc, "r", flows), _caps(alloc, "s", flows))
    fresh.upsert_many(list(alloc.flows().values()), t)
    assert alloc.computed_rates() == fresh.computed_rates()
    for flow in list(alloc.flows().values()):
        assert alloc.upsert(flow, t) == {}
    assert alloc.recompute(t) == {}
    assert {f: (g.rate_bps, g.lease_ns) for f, g in fresh.grants().items()} == {
        f: (r, alloc.config.lease_ns) for f, r in alloc.computed_rates().items()
    }


def _caps(alloc: Allocator, kind: str, flows: list[AllocFlow]) -> dict[str, int]:
    """The capacities `alloc` was built with, to build an identical fresh allocator."""
    return alloc.receiver_capacity_bps() if kind == "r" else alloc.sender_uplink_bps()


@PROPERTY
@given(fabrics())
def test_deterministic_regardless_of_insertion_order(fab: tuple) -> None:
    """Same flows, same time -> same rates and grants, whatever order they were admitted in."""
    alloc, flows, now = fab
    other = Allocator(alloc.config, _caps(alloc, "r", flows), _caps(alloc, "s", flows))
    for flow in flows:
        alloc.upsert(flow, now)
    other.upsert_many(list(reversed(flows)), now)
    assert alloc.computed_rates() == other.computed_rates()
    assert list(alloc.grants()) == sorted(alloc.grants())
    assert {f: g.rate_bps for f, g in other.grants().items()} == other.computed_rates()


@st.composite
def bottleneck_flows(draw: st.DrawFn) -> tuple[list[FluidFlow], int, AllocatorConfig]:
    """Up to 6 pipeline flows into one receiver; sender uplinks never bind."""
    n = draw(st.integers(1, 6))
    cap = draw(st.sampled_from([10 * G, 40 * G, 100 * G]))
    config = AllocatorConfig(
        line_rate_bps=draw(st.sampled_from([cap, 4 * cap])),
        safety_margin=draw(st.sampled_from([0.0, 0.1])),
        urgency_quantum_ns=draw(st.sampled_from([1, 10_000])),
    )
    flows = [
        FluidFlow(i + 1, f"s{i}", "r", draw(st.integers(1_000, 3_000_000)), draw(st.integers(0, 500_000)))
        for i in range(n)
    ]
    return flows, cap, config


# Tolerance: finish times are rounded up to whole ns and remaining bytes up to whole bytes at
# each recompute, so a schedule can lose a few ns per step; 1 µs is far above that.
TOL_NS = 1_000


@PROPERTY
@given(bottleneck_flows(), st.sampled_from([None, 20_000]))
def test_single_bottleneck_meets_edf(case: tuple, step: int | None) -> None:
    """One shared link: EDF-feasible -> nobody late; otherwise max lateness <= EDF's (+1 µs).

    Exact at urgency quantum 1 ns; at quantum q, flows whose deadlines are within q share
    capacity, so the bound is EDF's + q (AllocatorConfig.urgency_quantum_ns)."""
    flows, cap, config = case
    tol = TOL_NS + (config.urgency_quantum_ns if config.urgency_quantum_ns > 1 else 0)
    alloc = Allocator(config, {"r": cap}, {f.sender: 10 * cap for f in flows})
    usable = alloc.receiver_usable_bps("r")
    checks = []

    def check(now: int, remaining: dict[int, int]) -> None:
        assert_work_conserving(alloc)
        assert sum(alloc.computed_rates().values()) == usable  # one link, senders never bind
        checks.append(now)

    result = run_fluid(alloc, flows, max_step_ns=step, on_step=check)
    edf = edf_max_lateness(flows, usable)
    ours = result.max_lateness_ns(flows)
    if edf <= 0:
        assert ours <= tol, f"EDF-feasible but a flow is {ours} ns late"
    else:
        assert ours <= edf + tol
    assert len(checks) == result.steps


@PROPERTY
@given(fabrics(max_flows=6))
def test_installed_grants_in_fluid_run_stay_within_capacity(fab: tuple) -> None:
    """Integrating installed grants (with hysteresis) keeps every link within capacity."""
    alloc, flows, _ = fab
    fluid = [
        FluidFlow(f.flow_id, f.sender, f.receiver, f.remaining_bytes // 50 + 1, 1_000_000, f.background) for f in flows
    ]

    def check(now: int, remaining: dict[int, int]) -> None:
        assert_within_capacity(alloc, {f: g.rate_bps for f, g in alloc.grants().items()})

    if fluid:
        result = run_fluid(alloc, fluid, max_step_ns=50_000, use_installed=True, on_step=check)
        assert set(result.finish_ns) == {f.flow_id for f in fluid}


def test_latest_start_order_can_lose_to_edf() -> None:
    """Why the default urgency is deadline order, not latest start time (least laxity first).

    On a 10 Gbit/s link, A (2.375 MB, due 1.8 ms: already 0.1 ms behind at line rate) and B
    (0.625 MB, due 1.2 ms). EDF sends B then A: A is 0.6 ms late. Latest-start order sends A
    first (smaller latest start), so B finishes at 2.4 ms, 1.2 ms late.
    """
    flows = [FluidFlow(1, "a", "r", 2_375_000, 1_800_000), FluidFlow(2, "b", "r", 625_000, 1_200_000)]
    edf = edf_max_lateness(flows, 10 * G)
    assert edf == 600_000
    ours = run_fluid(simple(line_rate_bps=10 * G), flows).max_lateness_ns(flows)
    llf = run_fluid(simple(line_rate_bps=10 * G, urgency="latest_start"), flows).max_lateness_ns(flows)
    assert ours <= edf + TOL_NS
    assert llf >= edf + 500_000


# --------------------------------------------------------------------------- unit behaviour


def test_demand_formula_and_usable() -> None:
    """demand = ceil(bytes*8e9*(1+margin)/time left); usable = floor(cap*(1-headroom))."""
    alloc = Allocator(AllocatorConfig(headroom=0.05, safety_margin=0.1), {"r": 10 * G + 7}, {"a": 100 * G})
    assert alloc.receiver_usable_bps("r") == (10 * G + 7) * 95 // 100
    now = TIME_MASK - 500  # the deadline wraps past 2^48
    deadline = wrap(now + 3_333_333)
    alloc.upsert(AllocFlow(1, "a", "r", 1_000_001, deadline), now)
    want = Fraction(1_000_001 * 8 * 10**9) * Fraction(11, 10) / 3_333_333
    assert alloc.demands()[1] == -(-want.numerator // want.denominator)
    assert alloc.computed_rates()[1] == alloc.receiver_usable_bps("r")  # leftover goes to it too


def test_background_only_gets_what_pipeline_does_not_need() -> None:
    alloc = simple()
    alloc.upsert(AllocFlow(1, "a", "r", 1_000_000, 10_000_000), 0)  # needs 0.88 Gbit/s
    alloc.upsert(AllocFlow(2, "b", "r", 10**9, 10_000_000, background=True), 0)
    rates, demand = alloc.computed_rates(), alloc.demands()
    assert rates[1] == demand[1]
    assert rates[2] == 10 * G - demand[1]
    # a second pipeline flow whose demand fills the link squeezes background to zero
    alloc.upsert(AllocFlow(3, "c", "r", 25_000_000, 20_000_000), 0)  # needs 11 Gbit/s
    rates = alloc.computed_rates()
    assert rates[2] == 0 and rates[1] + rates[3] == 10 * G


def test_equally_urgent_flows_share_in_proportion_to_remaining_bytes() -> None:
    """Deadlines within one urgency quantum: shares by remaining bytes, so they finish together."""
    alloc = simple(safety_margin=0.0)
    now = 1_000_000
    alloc.upsert_many(
        [
            AllocFlow(1, "a", "r", 3_000_000, now - 5),
            AllocFlow(2, "b", "r", 1_000_000, now - 2),
            AllocFlow(3, "c", "r", 1_000, now + 50_000_000),
        ],
        now,
    )
    rates = alloc.computed_rates()
    assert rates[1] + rates[2] == 10 * G and rates[3] == 0
    assert abs(rates[1] - 3 * rates[2]) <= 3  # 3:1 by remaining bytes, up to rounding
    strict = simple(safety_margin=0.0, urgency_quantum_ns=1)
    strict.upsert_many([AllocFlow(1, "a", "r", 3_000_000, now - 5), AllocFlow(2, "b", "r", 1_000_000, now - 2)], now)
    assert strict.computed_rates() == {1: 10 * G, 2: 0}  # EDF order at 1 ns resolution


def test_leftover_goes_to_most_urgent_pipeline_flow() -> None:
    alloc = simple()
    alloc.upsert_many([AllocFlow(1, "a", "r", 1000, 9_000_000), AllocFlow(2, "b", "r", 1000, 5_000_000)], 0)
    rates, demand = alloc.computed_rates(), alloc.demands()
    assert rates[1] == demand[1]
    assert rates[2] == 10 * G - demand[1]


def test_late_hint_is_most_urgent_and_demands_the_path() -> None:
    alloc = simple(urgency_quantum_ns=1)
    now = 5_000_000
    alloc.upsert(AllocFlow(1, "a", "r", 100_000_000, now + 1_000_000), now)
    alloc.upsert(AllocFlow(2, "b", "r", 10, now - 1), now)  # late, and tiny
    assert alloc.demands()[2] == 10 * G
    assert alloc.computed_rates() == {1: 0, 2: 10 * G}
    # the most late is the most urgent
    alloc.upsert(AllocFlow(3, "c", "r", 10, wrap(now - 2)), now)
    assert alloc.computed_rates()[3] == 10 * G


def test_sender_uplink_shared_most_urgent_first_and_spare_receiver_capacity_reused() -> None:
    """Sender a (10G) feeds r1 and r2; r1's share a cannot send goes to sender b."""
    alloc = Allocator(AllocatorConfig(headroom=0.0), {"r1": 10 * G, "r2": 10 * G}, {"a": 10 * G, "b": 10 * G})
    alloc.upsert_many(
        [
            AllocFlow(1, "a", "r2", 1_000_000, 1_000_000),  # most urgent: 8.8 Gbit/s
            AllocFlow(2, "a", "r1", 1_000_000, 2_000_000),  # wants 4.4, a has only 1.2 left
            AllocFlow(3, "b", "r1", 1_000_000, 3_000_000),
        ],
        0,
    )
    rates = alloc.computed_rates()
    assert rates[1] + rates[2] == 10 * G
    assert rates[1] >= alloc.demands()[1]
    assert rates[2] + rates[3] == 10 * G
    assert_work_conserving(alloc)


def test_control_messages_grow_with_rate_changes_only() -> None:
    """Re-hinting on schedule produces no grant changes; a real change produces one."""
    alloc = simple(resend_fraction=0.1)
    size = 10_000_000
    alloc.upsert(AllocFlow(1, "a", "r", size, 100_000_000), 0)
    alloc.upsert(AllocFlow(2, "b", "r", 10**9, 100_000_000, background=True), 0)
    epoch = alloc.grants()[1].epoch
    sent = 0
    for t in range(1, 20):  # flow 1 progresses exactly at its demanded pace
        now = t * 1_000_000
        left = size - size * now // 100_000_000
        sent += len(alloc.upsert(AllocFlow(1, "a", "r", left, 100_000_000), now))
    assert sent == 0
    changed = alloc.upsert(AllocFlow(1, "a", "r", size, 21_000_000), 20_000_000)  # new deadline
    assert set(changed) == {1, 2}
    assert changed[1].epoch == epoch + 1 and changed[1].rate_bps == alloc.computed_rates()[1]


def test_results_ordered_by_flow_id() -> None:
    alloc = simple()
    alloc.upsert_many([AllocFlow(fid, "a", "r", 1000, 1_000_000) for fid in (9, 3, 7)], 0)
    assert list(alloc.grants()) == [3, 7, 9]
    assert list(alloc.computed_rates()) == [3, 7, 9]
    assert all(isinstance(g, Grant) and g.lease_ns == 10_000_000 for g in alloc.grants().values())


# --------------------------------------------------------------------------- slack classes


def test_slack_class_table_covers_signed_48_bit_range() -> None:
    table = slack_class_table((0, 100_000, 1_000_000, 10_000_000))
    assert [r.qclass for r in table] == list(protocol.SLACK_QUEUES)
    assert table[0].low_slack_ns == -(1 << 47) and table[-1].high_slack_ns == (1 << 47) - 1
    for a, b in zip(table, table[1:]):
        assert b.low_slack_ns == a.high_slack_ns + 1
    assert table[0].high_slack_ns == -1  # class 6 = late
    keys = key_ranges(table)
    assert keys[0].low_key == 0 and keys[-1].high_key == TIME_MASK
    for a, b in zip(keys, keys[1:]):
        assert b.low_key == a.high_key + 1


def test_late_transfers_last_puts_the_late_range_in_the_least_urgent_class() -> None:
    first = slack_class_table((0, 100_000, 1_000_000, 10_000_000))
    last = slack_class_table((0, 100_000, 1_000_000, 10_000_000), "last")
    assert [(r.low_slack_ns, r.high_slack_ns) for r in last] == [(r.low_slack_ns, r.high_slack_ns) for r in first]
    assert [r.qclass for r in last] == [2, 6, 5, 4, 3]  # late last, the on-time classes one up
    key_ranges(last)  # still a partition of the key space


def test_late_transfers_last_is_rejected_with_per_transfer_grants() -> None:
    SchedulerConfig(allocator=AllocatorConfig(late_transfers="last"))  # share grants: fine
    with pytest.raises(InvalidInput, match="allocator.late_transfers.*per-transfer"):
        SchedulerConfig(grant_mode="per-transfer", allocator=AllocatorConfig(late_transfers="last"))
    with pytest.raises(InvalidInput, match="late_transfers"):
        AllocatorConfig(late_transfers="never")


@settings(max_examples=200, deadline=None)
@given(st.integers(-(1 << 47), (1 << 47) - 1), st.integers(0, TIME_MASK))
def test_key_ranges_classify_like_slack(slack: int, now: int) -> None:
    """The switch's key (one subtraction, sign flip) lands in the range of the slack's class."""
    alloc = simple()
    by_slack = next(r.qclass for r in alloc.slack_class_table() if r.low_slack_ns <= slack <= r.high_slack_ns)
    key = slack_key(wrap(now + slack), now)
    assert key == slack_to_key(slack)
    by_key = next(r.qclass for r in alloc.key_ranges() if r.low_key <= key <= r.high_key)
    assert by_key == by_slack
    assert (by_slack == 6) == (slack < 0)
    assert diff(wrap(now + slack), now) == slack


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"headroom": 1.0}, "config.headroom"),
        ({"headroom": -0.1}, "config.headroom"),
        ({"headroom": "5%"}, "config.headroom"),
        ({"safety_margin": -0.01}, "config.safety_margin"),
        ({"lease_ns": 0}, "config.lease_ns"),
        ({"lease_ns": 1.5e6}, "config.lease_ns"),
        ({"resend_fraction": 1.5}, "config.resend_fraction"),
        ({"line_rate_bps": 0}, "config.line_rate_bps"),
        ({"slack_thresholds_ns": (0, 10, 5, 100)}, "config.slack_thresholds_ns"),
        ({"slack_thresholds_ns": (0, 10, 100)}, "config.slack_thresholds_ns"),
        ({"slack_thresholds_ns": [0, 1, 2, 3]}, "config.slack_thresholds_ns"),
        ({"urgency": "fifo"}, "config.urgency"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        AllocatorConfig(**kwargs)
    assert err.value.field == field


def test_bad_capacities_name_the_field() -> None:
    with pytest.raises(InvalidInput) as err:
        Allocator(AllocatorConfig(), {"r": 0}, {"a": G})
    assert err.value.field == "receiver_capacity_bps[r]"
    with pytest.raises(InvalidInput) as err:
        Allocator(AllocatorConfig(), {"r": G}, {"": G})
    assert err.value.field == "sender_uplink_bps"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"flow_id": 0}, "flow.flow_id"),
        ({"flow_id": 1 << 32}, "flow.flow_id"),
        ({"sender": "nobody"}, "flow.sender"),
        ({"receiver": "a"}, "flow.receiver"),  # a sender name is not a receiver
        ({"remaining_bytes": 0}, "flow.remaining_bytes"),
        ({"deadline_ns": 1 << 48}, "flow.deadline_ns"),
        ({"deadline_ns": -1}, "flow.deadline_ns"),
        ({"background": 1}, "flow.background"),
    ],
)
def test_bad_flow_is_rejected_and_nothing_admitted_is_lost(change: dict, field: str) -> None:
    alloc = simple()
    alloc.upsert(AllocFlow(5, "a", "r", 1000, 1_000_000), 0)
    before = (alloc.flows(), alloc.grants(), alloc.computed_rates())
    bad = dataclasses.replace(AllocFlow(5, "b", "r", 2000, 2_000_000), **change)
    with pytest.raises(InvalidInput) as err:
        alloc.upsert(bad, 10)
    assert err.value.field == field
    with pytest.raises(InvalidInput):  # a batch is all or nothing
        alloc.upsert_many([AllocFlow(6, "b", "r", 1, 1), bad], 10)
    assert (alloc.flows(), alloc.grants(), alloc.computed_rates()) == before


def test_unknown_flow_and_bad_time() -> None:
    alloc = simple()
    alloc.upsert(AllocFlow(5, "a", "r", 1000, 1_000_000), 0)
    with pytest.raises(InvalidInput) as err:
        alloc.remove(6, 0)
    assert err.value.field == "flow_id"
    for call in (
        lambda: alloc.recompute(-1),
        lambda: alloc.remove(5, 1 << 48),
        lambda: alloc.upsert(AllocFlow(7, "a", "r", 1, 1), TIME_MASK + 1),
    ):
        with pytest.raises(InvalidInput) as err:
            call()
        assert err.value.field == "now_ns"
    with pytest.raises(InvalidInput) as err:
        alloc.upsert_many([AllocFlow(7, "a", "r", 1, 1), AllocFlow(7, "b", "r", 1, 1)], 0)
    assert err.value.field == "flows[1].flow_id"
    with pytest.raises(InvalidInput) as err:
        alloc.receiver_usable_bps("nobody")
    assert err.value.field == "receiver"
    assert list(alloc.flows()) == [5]

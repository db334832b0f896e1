"""Golden results of the packet simulator: speed work must not change what it computes.

Each case runs a small but representative simulation (AFD decode incast and ZeroBubble
pipeline training, with persistent bulk DCTCP flows or Poisson background, under both
policies; together they exercise drops, retransmissions, timeouts, ECN marks, grants, meters
and digests) and compares a sha256 of a canonical JSON of everything the run reports: every
FlowRecord, the workload metrics, the transport and scheduler counters, drops per
(switch, port, class), ECN marks, events and simulated time.

The digests below pin the behaviour of the simulator as of the commit that added this file
(recorded from the code before the simulator speed-ups). They must be re-recorded, with the
reason in the commit message, only when behaviour changes on purpose; an optimisation that
changes them is a bug. Re-record with::

    PYTHONPATH=controller .venv/bin/python tests/test_sim_golden.py
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from safs.core.topology import load_topology
from safs.experiments.sim.config import SimConfig
from safs.experiments.sim.simulation import Simulation
from safs.experiments.workloads import build_workload

ROOT = Path(__file__).resolve().parent.parent

# name -> (workload kind, params, topology file, bulk flows, Poisson load)
CASES: dict[str, tuple[str, dict[str, int], str, int, float]] = {
    "afd-bulk": ("afd", {"layers_simulated": 1, "decode_steps": 3}, "afd-16a2f.yaml", 2, 0.0),
    "zerobubble-bulk": ("zerobubble", {"stages": 4, "microbatches": 4, "iterations": 1},
                        "zerobubble-pp.yaml", 2, 0.0),
    "afd-poisson": ("afd", {"layers_simulated": 1, "decode_steps": 2}, "afd-16a2f.yaml", 0, 0.3),
}
POLICIES = ("safs", "dctcp")

# Pinned today's behaviour (see the module docstring before changing any of these).
GOLDEN: dict[tuple[str, str], str] = {
    ('afd-bulk', 'safs'):
        'f06c1424fc3be4bc1386ded9a75ba8cffcc29ad03e4d720f967003c7ff3a5c48',  # events=86280, drops=315, data_bytes=123150066, control_bytes=236574, sim_time_ns=3028021, ecn_marked_packets=1146, flows=578
    ('afd-bulk', 'dctcp'):
        '5497cf2223fd3286d491e26e58647c6541a33c73d3e8dbb3e53736e1f39c0839',  # events=106703, drops=951, data_bytes=173411346, control_bytes=0, sim_time_ns=6154366, ecn_marked_packets=2824, flows=578
    ('afd-poisson', 'safs'):
        '4e02103cfa4a5c73a6a6e294446bde288089fe17a828d264c606999d069cd08c',  # events=43008, drops=76, data_bytes=62383525, control_bytes=145314, sim_time_ns=2208339, ecn_marked_packets=367, flows=395
    ('afd-poisson', 'dctcp'):
        '692df9e05463a708cf2ab8a8c776af13ff9c32c87f99403e1259509e311318c3',  # events=50447, drops=664, data_bytes=80554755, control_bytes=0, sim_time_ns=3736265, ecn_marked_packets=1798, flows=399
    ('zerobubble-bulk', 'safs'):
        'bdf189968c5d94d8079ac4a791ddc69417a419ea4a54909a1bb1a460e1c28e7e',  # events=108441, drops=75, data_bytes=128264254, control_bytes=6084, sim_time_ns=4831860, ecn_marked_packets=5019, flows=26
    ('zerobubble-bulk', 'dctcp'):
        '61664b1e830c23793054b7dba04599fbc4a358d335add0037afcad9d2536e835',  # events=230951, drops=71, data_bytes=262469692, control_bytes=0, sim_time_ns=10262051, ecn_marked_packets=11897, flows=26
}


def run_case(name: str, policy: str) -> dict[str, Any]:
    """Simulate one case (seed 1) and return everything it reports, JSON-ready."""
    kind, params, topo_file, bulk, load = CASES[name]
    topology = load_topology(ROOT / "topologies" / topo_file)
    workload = build_workload(kind, dict(params), topology, seed=1, background_flows=bulk, load=load)
    sim = Simulation(topology, policy, 1, SimConfig.from_mapping({}))
    res = sim.run(workload)
    return {
        "flows": [[f.flow_id, f.label, f.flow_class, f.sender, f.receiver, f.size_bytes, f.start_ns,
                   f.finish_ns, f.no_bubble_ts_ns] for f in res.flows],
        "workload_metrics": res.workload_metrics,
        "workload_done": res.workload_done,
        "control_bytes": res.control_bytes,
        "control_packets": res.control_packets,
        "scheduler_control_messages": res.scheduler_control_messages,
        "scheduler_control_bytes": res.scheduler_control_bytes,
        "scheduler_stats": dataclasses.asdict(sim.scheduler.stats),
        "scheduler_rejects": sim.scheduler_rejects,
        "data_bytes": res.data_bytes,
        "retransmitted_bytes": res.retransmitted_bytes,
        "drops": res.drops,
        "drops_by_port_class": sorted([*k, v] for k, v in res.drops_by_port_class.items()),
        "ecn_marked_packets": res.ecn_marked_packets,
        "events": res.events,
        "sim_time_ns": res.sim_time_ns,
        "transport": dataclasses.asdict(res.transport),
        "control": dataclasses.asdict(res.control),
        "control_profile": res.control_profile,
    }


def digest(report: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a :func:`run_case` report."""
    return hashlib.sha256(json.dumps(report, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _summary(report: dict[str, Any]) -> str:
    keys = ("events", "drops", "data_bytes", "control_bytes", "sim_time_ns", "ecn_marked_packets")
    return ", ".join(f"{k}={report[k]}" for k in keys) + f", flows={len(report['flows'])}"


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("policy", POLICIES)
def test_simulation_matches_golden_digest(name: str, policy: str) -> None:
    report = run_case(name, policy)
    assert report["workload_done"], "the case must finish within the horizon to be comparable"
    got = digest(report)
    assert got == GOLDEN[(name, policy)], (
        f"{name}/{policy}: simulation results changed ({_summary(report)}); digest {got}")


def test_digest_sees_a_single_changed_flow_time() -> None:
    # The comparison is only as good as the digest: one ns on one flow must change it.
    report = run_case("afd-poisson", "dctcp")
    before = digest(report)
    report["flows"][-1][7] += 1
    assert digest(report) != before


def test_fast_grant_keys_equal_table_entry_keys() -> None:
    from safs.core import p4names as n
    from safs.core.scheduler import Scheduler
    from safs.core.target import Lpm, TableEntry

    for src, dep_id in ((1, 1), (0x0A000001, 77), (2**32 - 1, 2**16 - 1)):
        for action in (n.ACT_SET_SHARE_GRANT, n.ACT_SET_FIXED_GRANT):
            entry = TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: src, n.F_DEP_ID: dep_id}, action)
            assert Scheduler._dep_key(src, dep_id) == entry.key()
            assert entry.key() is entry.key()  # memoized
            # the match written in the other order is the same entry
            swapped = TableEntry(n.DEP_GRANT, {n.F_DEP_ID: dep_id, n.F_SRC_ADDR: src}, action)
            assert swapped.key() == Scheduler._dep_key(src, dep_id)
        claim = TableEntry(n.DEP_CLAIM, {n.F_SRC_ADDR: src, n.F_DEP_ID: dep_id}, n.ACT_CLAIM)
        assert Scheduler._dep_key(src, dep_id, n.DEP_CLAIM) == claim.key()
    lpm = TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(0x0A000000, 8)}, n.ACT_DROP)
    assert lpm.key() == (n.IPV4_LPM, False, ((n.F_DST_ADDR, Lpm(0x0A000000, 8)),), 0)
    # the memo is not part of the entry's value
    assert lpm == TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(0x0A000000, 8)}, n.ACT_DROP)


def test_trusted_write_keeps_op_checks_and_public_write_still_validates() -> None:
    from safs.core import p4names as n
    from safs.core.errors import TargetError, UpdateFailure
    from safs.core.target import MeterConfig, Op, TableEntry, Update
    from safs.targets.pipeline_model import PipelineModel

    src = 0x0A000001

    def grant(dep_id: int, kbps: int) -> TableEntry:
        return TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: src, n.F_DEP_ID: dep_id}, n.ACT_SET_FIXED_GRANT,
                          {"rate_kbps": kbps, "epoch": 1, "lease_us": 10, "meter_slot": 3})

    share = TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: src, n.F_DEP_ID: 9}, n.ACT_SET_SHARE_GRANT, {"meter_slot": 4})
    meter = MeterConfig(n.DEP_METER, 3, cir=1000, cburst=3000, pir=1100, pburst=3000)
    checked, trusted = PipelineModel("a", lambda: 0), PipelineModel("b", lambda: 0)
    batch = [Update(Op.MODIFY, meter), Update(Op.INSERT, grant(5, 100)), Update(Op.MODIFY, grant(5, 200)),
             Update(Op.INSERT, share)]
    checked.write(batch)
    trusted.write_trusted(batch)
    assert checked.entries(n.DEP_GRANT) == trusted.entries(n.DEP_GRANT) == [grant(5, 200), share]
    assert checked.meter_config(3) == trusted.meter_config(3) == meter
    assert trusted._grants == checked._grants == {(src, 5): (False, 200, 1, 10, 3), (src, 9): (True, 0, 0, 0, 4)}
    with pytest.raises(TargetError) as err:  # op semantics still apply on the trusted path
        trusted.write_trusted([Update(Op.INSERT, grant(5, 1)), Update(Op.DELETE, grant(6, 1))])
    assert [f.code for f in err.value.failures] == ["ALREADY_EXISTS", "NOT_FOUND"]
    with pytest.raises(TargetError) as err:  # the public path still checks widths
        checked.write([Update(Op.MODIFY, grant(5, 1 << 32))])
    assert err.value.failures[0].code == "INVALID_ARGUMENT"
    trusted.write_trusted([Update(Op.DELETE, grant(5, 200)), Update(Op.DELETE, share)])
    assert trusted.entries(n.DEP_GRANT) == [] and trusted._grants == {}

    class Refusing(PipelineModel):  # a subclass's own write wins over the trusted path
        def write(self, updates) -> None:
            raise TargetError([UpdateFailure(0, "UNAVAILABLE", "down")])

    with pytest.raises(TargetError):
        Refusing("c", lambda: 0).write_trusted(batch)


if __name__ == "__main__":  # print the table to paste into GOLDEN
    for case in sorted(CASES):
        for pol in POLICIES:
            rep = run_case(case, pol)
            print(f"    ({case!r}, {pol!r}):\n        {digest(rep)!r},  # {_summary(rep)}")

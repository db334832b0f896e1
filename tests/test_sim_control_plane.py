"""The simulated control plane (safs.experiments.sim.control_plane): every switch write, counter
read, digest and hint costs what its control profile says; writes take effect when the switch
applied them, one writer per switch; the figures the runner records (control_metrics)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from safs.core import p4names as n
from safs.core.errors import InvalidInput
from safs.core.packet import PROTO_UDP, Packet
from safs.core.protocol import SAFS_UDP_PORT, SAFS_VERSION, MsgType
from safs.core.scheduler import BATCH_OVERHEAD_BYTES, METER_UPDATE_BYTES, TABLE_UPDATE_BYTES
from safs.core.target import Lpm, MeterConfig, Op, TableEntry, Update
from safs.experiments.control_profiles import PROFILES, ControlProfile, control_profile
from safs.experiments.runner import control_metrics, run_one_sim
from safs.experiments.runs import expand
from safs.experiments.scenario import load_scenario
from safs.experiments.sim.config import SimConfig
from safs.experiments.sim.control_plane import WINDOW_NS, ControlStats, SimControlPlane
from safs.experiments.sim.engine import Engine
from safs.targets.pipeline_model import PipelineModel

MS = 1_000_000
ROOT = Path(__file__).resolve().parents[1]
SENDER, RECEIVER = 0x0A000001, 0x0A000102

# A profile with distinct round numbers, so each charge can be told apart.
PROFILE = ControlProfile(name="test", hint_rpc_ns=400, hint_cpu_ns=600, digest_latency_ns=1_500, digest_cpu_ns=300,
                         write_request_cpu_ns=100, write_update_cpu_ns=20, rpc_ns=50, switch_request_ns=1_000,
                         switch_update_ns=10, read_request_ns=700, read_cell_ns=7)


def route(i: int) -> TableEntry:
    return TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(0x0B000000 + (i << 8), 24)}, n.ACT_SET_EGRESS,
                      {"port": 1, "dst_mac": 2})


def make(profile: ControlProfile = PROFILE, switches: tuple[str, ...] = ("tor0",)):
    """An engine, a plane past setup, and a costed target per switch over a PipelineModel."""
    engine = Engine(1)
    plane = SimControlPlane(engine, profile)
    pipes = {sw: PipelineModel(sw, lambda: engine.now) for sw in switches}
    targets = {sw: plane.target(sw, pipe) for sw, pipe in pipes.items()}
    plane.setup_done = True
    return engine, plane, pipes, targets


def run_to(engine: Engine, t: int) -> None:
    """Advance the engine's clock to exactly ``t`` (an event there, so ``now`` reaches it)."""
    engine.at(t, lambda _: None)
    engine.run(t)


# ---------------------------------------------------------------------------- writes

def test_a_write_takes_effect_after_encoding_rpc_and_the_switchs_time() -> None:
    engine, plane, pipes, targets = make()
    run_to(engine, 5_000)
    targets["tor0"].write([Update(Op.INSERT, route(i)) for i in range(3)])
    encoded = 5_000 + 100 + 3 * 20  # the controller encodes it first
    done = encoded + 50 + 1_000 + 3 * 10  # then the RPC and the switch's request and updates
    run_to(engine, done - 1)
    assert pipes["tor0"].entries(n.IPV4_LPM) == []  # not yet
    run_to(engine, done)
    assert pipes["tor0"].entries(n.IPV4_LPM) == [route(i) for i in range(3)]  # all three, in order
    stats = plane.stats
    assert (stats.requested_updates, stats.updates, stats.write_requests) == (3, 3, 1)
    assert stats.applied_ns["tor0"] == [done] * 3 and stats.delays_ns == [done - 5_000] * 3
    assert stats.write_bytes == BATCH_OVERHEAD_BYTES + 3 * TABLE_UPDATE_BYTES
    assert stats.cpu_busy_ns == 100 + 3 * 20


def test_writes_to_one_switch_queue_behind_each_other_and_share_the_controller() -> None:
    engine, plane, pipes, targets = make(switches=("tor0", "tor1"))
    meter = MeterConfig(n.DEP_METER, 1, 1000, 3000, 1100, 3000)
    targets["tor0"].write([Update(Op.INSERT, route(1))])
    targets["tor0"].write([Update(Op.MODIFY, meter), Update(Op.INSERT, route(2))])
    targets["tor1"].write([Update(Op.INSERT, route(3))])
    enc1 = 100 + 20
    done1 = enc1 + 50 + 1_000 + 10
    enc2 = enc1 + 100 + 2 * 20  # the controller is busy with the first one until enc1
    done2 = max(enc2 + 50, done1) + 1_000 + 2 * 10  # the switch until done1
    enc3 = enc2 + 100 + 20
    done3 = enc3 + 50 + 1_000 + 10  # another switch: its own writer, the same controller
    engine.run(10 * MS)
    assert plane.stats.applied_ns == {"tor0": [done1, done2, done2], "tor1": [done3]}
    assert done2 == done1 + 1_020 and done3 < done2
    assert plane.stats.write_bytes == 3 * BATCH_OVERHEAD_BYTES + 3 * TABLE_UPDATE_BYTES + METER_UPDATE_BYTES
    assert pipes["tor0"].meter_config(1) == meter and pipes["tor1"].entries(n.IPV4_LPM) == [route(3)]


def test_the_ideal_profile_applies_at_once_and_setup_is_not_charged() -> None:
    engine, plane, pipes, targets = make(PROFILES["ideal"])
    run_to(engine, 777)
    targets["tor0"].write([Update(Op.INSERT, route(1))])
    assert pipes["tor0"].entries(n.IPV4_LPM) == [route(1)]  # no event needed
    assert plane.stats.applied_ns["tor0"] == [777] and plane.stats.delays_ns == [0]
    assert PROFILES["ideal"].ablation and not PROFILES["bmv2"].ablation and not PROFILES["tofino"].ablation
    # before setup_done: applied at once under any profile, counted apart
    engine2 = Engine(1)
    plane2 = SimControlPlane(engine2, PROFILES["bmv2"])
    pipe = PipelineModel("s", lambda: engine2.now)
    plane2.target("s", pipe).write([Update(Op.INSERT, route(i)) for i in range(4)])
    assert len(pipe.entries(n.IPV4_LPM)) == 4
    assert (plane2.stats.setup_updates, plane2.stats.requested_updates, plane2.stats.cpu_busy_ns) == (4, 0, 0)


def test_updates_refused_when_they_land_are_counted() -> None:
    engine, plane, pipes, targets = make()
    targets["tor0"].write([Update(Op.INSERT, route(1)), Update(Op.INSERT, route(1)), Update(Op.DELETE, route(9))])
    engine.run(10 * MS)
    stats = plane.stats
    assert (stats.requested_updates, stats.updates, stats.failed_updates) == (3, 1, 2)
    assert len(stats.applied_ns["tor0"]) == 1 and len(stats.delays_ns) == 3


# ---------------------------------------------------------------------------- digests, reads, hints

def request(dep_id: int) -> Packet:
    p = Packet(SENDER, RECEIVER, PROTO_UDP, 40000, SAFS_UDP_PORT, 78)
    p.safs_version, p.safs_type, p.flow_id, p.dep_id = SAFS_VERSION, int(MsgType.REQUEST), 5, dep_id
    return p


def test_digests_reach_the_controller_after_the_digest_latency() -> None:
    engine, plane, pipes, targets = make()
    pipe = pipes["tor0"]
    pipe.write([Update(Op.INSERT, TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(0x0A000000, 8)}, n.ACT_SET_EGRESS,
                                             {"port": 1, "dst_mac": 2})),
                Update(Op.INSERT, TableEntry(n.RECEIVER_PORT, {n.F_EGRESS_PORT: 1}, n.ACT_MARK_RECEIVER)),
                Update(Op.INSERT, TableEntry(n.GRANT_ROUTE, {n.F_SRC_ADDR: Lpm(0x0A000000, 8)},
                                             n.ACT_SET_GRANT_ROUTE, {"port": 2, "dst_mac": 3}))])
    run_to(engine, 1_000)
    pipe.ingress(request(7), 2)  # an unknown dependency: the switch digests it now
    assert targets["tor0"].poll_digests() == []  # generated, not delivered yet
    run_to(engine, 1_000 + 1_499)
    assert targets["tor0"].poll_digests() == []
    run_to(engine, 1_000 + 1_500)
    (digest,) = targets["tor0"].poll_digests()
    assert (digest.dep_id, digest.src_addr) == (7, SENDER)
    assert targets["tor0"].poll_digests() == []  # delivered once
    assert plane.stats.digests == 1 and plane.stats.cpu_busy_ns == 300


def test_reads_and_hints_cost_controller_time() -> None:
    engine, plane, pipes, targets = make()
    run_to(engine, 10_000)
    cells = targets["tor0"].read_counter_cells(n.DEP_BYTES, [1, 2, 3])
    assert cells == [pipes["tor0"].read_counter(n.DEP_BYTES, 1)] * 3  # the values at the call
    read_done = 10_000 + 700 + 3 * 7
    assert plane.cpu_free_ns == read_done and plane.stats.reads == 1
    handled: list[tuple[str, int]] = []

    def handler(arg: str) -> None:
        handled.append((arg, engine.now))

    plane.hint(handler, "first")  # arrives at 10_400, waits for the read to end, then 600 ns
    plane.hint(handler, "second")  # queues behind it
    assert handled == [] and plane.cpu_free_ns == read_done  # in flight: the controller is not held
    run_to(engine, 15_000)
    assert handled == [("first", read_done + 600), ("second", read_done + 1_200)]
    run_to(engine, 20_000)
    plane.hint(handler, "idle")
    run_to(engine, 30_000)
    assert handled[-1] == ("idle", 20_000 + 400 + 600)  # an idle controller: RPC latency, then its time
    assert plane.stats.hints == 3


# ---------------------------------------------------------------------------- figures

def test_updates_per_s_is_the_busiest_switchs_average_rate() -> None:
    stats = ControlStats(applied_ns={"tor0": [0, 100, 200, 300], "tor1": [50, 5 * MS, 9 * MS]})
    assert stats.updates_per_s(0, 10 * MS) == 4 / 0.01
    assert stats.updates_per_s(1 * MS, 10 * MS) == 2 / 0.009  # tor1 after the first millisecond
    assert stats.updates_per_s(0, 150) == 2 * 1e9 / 150  # [start, end): 0 and 100 of tor0, 50 of tor1
    assert math.isnan(stats.updates_per_s(5, 5))
    assert ControlStats(applied_ns={"tor0": []}).updates_per_s(0, 10) == 0


def test_updates_per_s_peak_is_the_busiest_window() -> None:
    ms = [0, 1, 2, 3, 20, 21, 22, 23, 24, 25, 26]  # 4 early, then 7 in 6 ms
    stats = ControlStats(applied_ns={"tor0": [t * MS for t in ms], "tor1": [t * MS for t in range(0, 100, 10)]})
    assert stats.updates_per_s_peak() == 7 / (WINDOW_NS / 1e9)
    assert stats.updates_per_s_peak(window_ns=2 * MS) == 2 / 0.002
    # a window is half open: updates exactly one window apart are not in the same window
    assert ControlStats(applied_ns={"s": [0, WINDOW_NS]}).updates_per_s_peak() == 1 / (WINDOW_NS / 1e9)
    assert ControlStats().updates_per_s_peak() == 0


def test_write_delay_p99() -> None:
    assert math.isnan(ControlStats().write_delay_p99_ns())
    assert ControlStats(delays_ns=[5]).write_delay_p99_ns() == 5
    delays = list(range(1, 201))  # 1..200 ns
    assert ControlStats(delays_ns=list(reversed(delays))).write_delay_p99_ns() == 199  # sorted, index 198
    assert ControlStats(delays_ns=[1] * 99 + [1000]).write_delay_p99_ns() == 1000


def test_control_profiles_are_named_and_checked() -> None:
    assert set(PROFILES) == {"bmv2", "tofino", "ideal"}
    assert control_profile("bmv2") is PROFILES["bmv2"]
    with pytest.raises(InvalidInput) as err:
        control_profile("tofino2")
    assert err.value.field == "sim.control_profile" and "bmv2" in err.value.message
    with pytest.raises(InvalidInput) as err:
        SimConfig(control_profile="free")
    assert err.value.field == "sim.control_profile"
    assert SimConfig().profile() == PROFILES["tofino"]
    assert SimConfig(control_profile="bmv2", hint_latency_ns=7).profile() == PROFILES["bmv2"].replace(hint_rpc_ns=7)
    for real in ("bmv2", "tofino"):  # a real target's writes cost time at the switch and the controller
        p = PROFILES[real]
        assert min(p.switch_request_ns, p.switch_update_ns, p.write_update_cpu_ns, p.digest_latency_ns) > 0


# ---------------------------------------------------------------------------- runner records

CONTROL_KEYS = ("control_profile", "control_updates_requested", "control_updates", "control_updates_per_s",
                "control_updates_per_s_peak", "control_write_delay_p99_ms", "control_packets", "control_packet_bytes",
                "control_write_bytes", "control_bytes_per_data_byte")
SMALL_URGENT = {"incast_degree": 4, "urgent_min_bytes": 200_000, "urgent_max_bytes": 600_000, "loose_flows": 1,
                "rounds": 2}


def small_run(policy: str, profile: str) -> dict:
    scenario = load_scenario(ROOT / "scenarios" / "urgent.yaml", {
        "workload": {"kind": "urgent", "params": SMALL_URGENT}, "background": {"bulk_flows": [0], "load": [0.0]},
        "policies": [policy], "seeds": [1], "max_time_ms": 50, "sim": {"control_profile": profile}})
    return run_one_sim(scenario, next(expand(scenario)))


@pytest.mark.parametrize("policy, profile", [("safs", "bmv2"), ("safs-per-transfer", "ideal"), ("dctcp", "tofino")])
def test_records_carry_the_control_figures(policy: str, profile: str) -> None:
    record = small_run(policy, profile)
    assert set(CONTROL_KEYS) <= set(record) and "control_bytes" not in record
    assert record["control_profile"] == profile
    assert record["control_updates"] <= record["control_updates_requested"]
    if policy == "dctcp":  # no SAFS data: no ratio; no writes after setup
        assert math.isnan(record["control_bytes_per_data_byte"]) and record["control_updates_requested"] == 0
        return
    assert record["control_packets"] > 0 and record["control_packet_bytes"] >= 78 * record["control_packets"]
    if policy == "safs":  # dependencies declared at launch: nothing written on the run's clock
        assert (record["control_updates"], record["control_write_bytes"]) == (0, 0)
        assert record["control_updates_per_s"] == 0 and math.isnan(record["control_write_delay_p99_ms"])
    else:  # per-transfer: a grant write per transfer and change, applied at once (ideal)
        assert record["control_updates"] > 0 and record["control_write_bytes"] > 0
        # ideal: no write cost, and a hint in flight does not hold the controller
        assert record["control_write_delay_p99_ms"] == 0


def test_control_metrics_divides_control_by_safs_data_bytes() -> None:
    class Result:  # the fields control_metrics reads
        control = ControlStats(requested_updates=5, updates=4, write_bytes=300, applied_ns={"s": [MS, 2 * MS]},
                               delays_ns=[1000, 3000])
        control_profile = "bmv2"
        control_bytes, control_packets, sim_time_ns = 700, 9, 10 * MS

        class transport:  # noqa: N801 - stands in for TransportStats
            safs_data_bytes = 100_000

    got = control_metrics(Result(), warmup_end_ns=MS + 1)
    assert got == {"control_profile": "bmv2", "control_updates_requested": 5, "control_updates": 4,
                   "control_updates_per_s": 1 * 1e9 / (10 * MS - (MS + 1)),  # after the warm-up: the 2 ms one
                   "control_updates_per_s_peak": 2 / (WINDOW_NS / 1e9), "control_write_delay_p99_ms": 0.003,
                   "control_packets": 9, "control_packet_bytes": 700, "control_write_bytes": 300,
                   "control_bytes_per_data_byte": (700 + 300) / 100_000}
    assert control_metrics(Result(), None)["control_updates_per_s"] == 2 * 1e9 / (10 * MS)  # no warm-up: all


def test_a_hint_in_flight_does_not_hold_up_the_controller() -> None:
    engine, plane, pipes, targets = make(PROFILES["ideal"])
    plane.hint(lambda _: None, None)  # a hint on its way: it reaches the controller hint_rpc_ns from now
    targets["tor0"].write([Update(Op.INSERT, route(1))])  # a write decided now (say, from a digest)
    assert pipes["tor0"].entries(n.IPV4_LPM) == [route(1)] and plane.stats.delays_ns == [0]

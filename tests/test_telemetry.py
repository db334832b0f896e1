"""Telemetry-driven background share (safs.core.telemetry): the scheduler's per-port share, the
adapter's rule on counters it reads, and the simulator and controller running it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from two_tors import two_tors

from safs.core import p4names as n
from safs.core.errors import InvalidInput
from safs.core.hints import DependencyHint
from safs.core.protocol import rate_bps_to_kbps
from safs.core.scheduler import Scheduler, SchedulerConfig
from safs.core.target import CounterValue
from safs.core.telemetry import BackgroundShareAdapter
from safs.targets.pipeline_model import PipelineModel

ROOT = Path(__file__).resolve().parents[1]
S = 1_000_000_000
ADAPTIVE = SchedulerConfig(background_share=0.05, background_share_max=0.3, background_share_step=0.1)


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class CountedModel(PipelineModel):
    """A pipeline model whose counters the test sets: ``counts[(counter, index)]``."""

    def __init__(self, name: str, clock: Clock) -> None:
        super().__init__(name, clock)
        self.counts: dict[tuple[str, int], CounterValue] = {}

    def read_counter_cells(self, counter: str, indices: Sequence[int]) -> list[CounterValue]:
        return [self.counts.get((counter, i), CounterValue(0, 0)) for i in indices]


def make(config: SchedulerConfig = ADAPTIVE):
    topo = two_tors()
    clock = Clock()
    targets = {sw: CountedModel(sw, clock) for sw in topo.switches()}
    sched = Scheduler(topo, targets, config)
    sched.setup(0)
    return topo, targets, sched


def alone_rate_kbps(target: PipelineModel, port: int) -> int:
    """The port_share rate of one dependency alone in the top class (load 1)."""
    return next(e.params["rate_kbps"] for e in target.entries(n.PORT_SHARE)
                if e.match[n.F_EGRESS_PORT] == port and e.match[n.F_LOAD] == 1 and e.match[n.F_MODE] == n.SHARE_ALONE)


def test_set_background_share_rewrites_the_ports_share_entries_only() -> None:
    topo, targets, sched = make()
    port, other = topo.port_of("tor0", "a"), topo.port_of("tor0", "c")
    usable = sched.allocator.config.usable_bps(topo.host_link_bps("a"))
    assert alone_rate_kbps(targets["tor0"], port) == rate_bps_to_kbps(usable - int(usable * 0.05))  # the floor
    before_other = alone_rate_kbps(targets["tor0"], other)
    assert sched.set_background_share("tor0", port, 0.25) == 3 * n.MAX_LOAD
    assert alone_rate_kbps(targets["tor0"], port) == rate_bps_to_kbps(usable - int(usable * 0.25))
    assert alone_rate_kbps(targets["tor0"], other) == before_other
    assert sched.background_share("tor0", port) == 0.25 and sched.background_share("tor0", other) == 0.05
    assert sched.set_background_share("tor0", port, 0.25) == 0  # unchanged: nothing written
    # a reconciliation keeps the adapted share (the planned static state includes it)
    repairs = sched.diff("tor0", targets["tor0"].read_state())
    assert (repairs.missing, repairs.changed, repairs.extra) == (0, 0, 0)
    with pytest.raises(InvalidInput) as err:
        sched.set_background_share("tor0", topo.port_of("tor0", "tor1"), 0.1)
    assert err.value.field == "port"
    with pytest.raises(InvalidInput) as err:
        sched.set_background_share("tor0", port, 0.95)
    assert err.value.field == "share"


def test_config_refuses_a_ceiling_below_the_floor() -> None:
    with pytest.raises(InvalidInput) as err:
        SchedulerConfig(background_share=0.2, background_share_max=0.1)
    assert err.value.field == "config.background_share_max"
    assert "must be >= background_share (0.2)" in err.value.message
    with pytest.raises(InvalidInput) as err:
        BackgroundShareAdapter(make(SchedulerConfig())[2])
    assert err.value.field == "background_share_max"


def test_share_rises_with_background_and_marks_and_falls_back_when_it_leaves() -> None:
    topo, targets, sched = make()
    tor = targets["tor0"]
    port = topo.port_of("tor0", "a")
    sched.announce_dependency(DependencyHint(1, "d", "a", "job"), 0)
    slot = sched.granted_slots("tor0")[port][0]
    adapter = BackgroundShareAdapter(sched)
    link_bytes_per_s = topo.host_link_bps("a") // 8
    sent = granted = marks = 0

    def period(t: int, background: float, pipeline: float, new_marks: int) -> dict:
        nonlocal sent, granted, marks
        granted += int(pipeline * link_bytes_per_s)
        sent += int((background + pipeline) * link_bytes_per_s)
        marks += new_marks
        tor.counts[(n.PORT_TX_BYTES, port)] = CounterValue(sent, 0)
        tor.counts[(n.DEP_BYTES, slot)] = CounterValue(granted, 0)
        tor.counts[(n.ECN_MARKED, port)] = CounterValue(0, marks)
        return adapter.step_all(t * S)

    assert period(0, 0, 0, 0) == {}  # the first read is the baseline
    # the pipeline alone, marking (its own incasts): no background, the share stays at the floor
    assert period(1, 0.0, 0.9, 50) == {}
    # background at 40% with marks: one step (0.1) per period up to the ceiling 0.3
    shares = [period(t, 0.4, 0.5, 10).get(("tor0", port)) for t in range(2, 6)]
    assert shares == [pytest.approx(0.15), pytest.approx(0.25), pytest.approx(0.3), None]
    assert sched.background_share("tor0", port) == pytest.approx(0.3)
    usable = sched.allocator.config.usable_bps(topo.host_link_bps("a"))
    assert alone_rate_kbps(tor, port) == rate_bps_to_kbps(usable - int(usable * 0.3))
    # background using its reserve without marks: kept
    assert period(6, 0.3, 0.6, 0) == {}
    # background gone: one step down per period, to the floor 0.05
    shares = [period(t, 0.0, 0.9, 0).get(("tor0", port)) for t in range(7, 11)]
    assert shares == [pytest.approx(0.2), pytest.approx(0.1), pytest.approx(0.05), None]
    assert adapter.changes == 6 and adapter.updates == 6 * 3 * n.MAX_LOAD
    other = topo.port_of("tor0", "c")
    assert sched.background_share("tor0", other) == 0.05  # never saw background


def test_simulator_adapts_the_share_of_ports_with_background(tmp_path: Path) -> None:
    """In a short AFD run with Poisson background at the FFN links the adapter raises their
    shares and the writes land (ideal control profile, telemetry every 1 ms: an ablation of
    the time scale; under the tofino profile a change takes about 0.1 s to land)."""
    from safs.experiments.runner import run_scenario
    from safs.experiments.scenario import load_scenario

    text = (ROOT / "scenarios" / "background-protection.yaml").read_text()
    text = text.replace("../topologies/", f"{ROOT / 'topologies'}/").replace("decode_steps: 6", "decode_steps: 10")
    text = text.replace("policies: [safs, dctcp]", "policies: [safs]")
    path = tmp_path / "adaptive.yaml"
    path.write_text(text + "scheduler: {background_share_max: 0.3}\n"
                    "sim: {telemetry_ns: 1000000, control_profile: ideal}\n")
    (record,) = run_scenario(load_scenario(path))
    assert record["control_updates"] >= 3 * n.MAX_LOAD  # at least one share change landed
    path.write_text(text + "sim: {telemetry_ns: 1000000, control_profile: ideal}\n")
    (record,) = run_scenario(load_scenario(path))
    assert record["control_updates"] == 0  # no ceiling: nothing adapted


def test_controller_adapts_model_switches_and_exports_the_shares(topo_file: Path) -> None:
    """``safs controller --model`` with ``background_share_max``: the adapter exists, a period
    with no traffic changes nothing, and the metrics show every receiver port's share."""
    from prometheus_client import CollectorRegistry, generate_latest

    from safs.control.controller import ControllerApp, ControllerConfig, SwitchSpec
    from safs.control.metrics import ControllerCollector

    specs = tuple(SwitchSpec(sw, "in-process:0") for sw in ("tor0", "tor1"))
    cfg = ControllerConfig(topology_path=topo_file, switches=specs, p4info_path=ROOT / "p4src/build/safs.p4info.txtpb",
                           bmv2_json_path=ROOT / "p4src/build/safs.json", hint_addr="127.0.0.1:0", model=True,
                           scheduler=ADAPTIVE, telemetry_period_s=0.5)
    app = ControllerApp(cfg)
    app.start()
    try:
        assert app.adapter is not None
        assert app.adapt_background() == {} and app.adapt_background() == {}
        assert app.scheduler is not None
        app.scheduler.set_background_share("tor1", 1, 0.2)
        registry = CollectorRegistry()
        registry.register(ControllerCollector(app))
        text = generate_latest(registry).decode()
        assert 'safs_port_background_share{port="1",switch="tor1"} 0.2' in text
        assert 'safs_port_background_share{port="1",switch="tor0"} 0.05' in text
    finally:
        app.stop()

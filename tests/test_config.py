"""The one config style (safs.core.config): strict frozen models, unknown keys refused, one
translation of pydantic errors to InvalidInput naming the key path and the allowed range."""

from __future__ import annotations

from pathlib import Path

import pytest
from star import star

from safs.core.allocator import AllocatorConfig
from safs.core.errors import InvalidInput
from safs.core.scheduler import SchedulerConfig, dctcp_k_packets, scheduler_config_for
from safs.core.topology import load_topology
from safs.experiments.runner import check
from safs.experiments.scenario import load_scenario
from safs.experiments.sim.config import SimConfig
from safs.hosts import dctcp
from safs.hosts.homa import HomaConfig
from safs.hosts.pfabric import check_pfabric_overrides
from safs.hosts.safs import SafsConfig

ROOT = Path(__file__).resolve().parents[1]


def _err(fn, *args, **kwargs) -> InvalidInput:
    with pytest.raises(InvalidInput) as err:
        fn(*args, **kwargs)
    return err.value


@pytest.mark.parametrize(
    "make, field, message",
    [
        (lambda: SimConfig(mtu_bytes=100), "sim.mtu_bytes", "must be an integer in 576..65535 bytes, got 100"),
        (lambda: SimConfig(digest_poll_ns=0), "sim.digest_poll_ns", "must be an integer >= 1 ns, got 0"),
        (lambda: SimConfig(tick_ns=0), "sim.tick_ns", "must be an integer >= 1 ns or null, got 0"),
        (lambda: SimConfig(buffer_dt_alpha=65), "sim.buffer_dt_alpha", "must be a number in [0, 64], got 65"),
        (lambda: SimConfig(mtu_bytes="9000"), "sim.mtu_bytes", "must be an integer in 576..65535 bytes, got '9000'"),
        (lambda: SimConfig(mtu_bytes=True), "sim.mtu_bytes", "must be an integer in 576..65535 bytes, got True"),
        (lambda: AllocatorConfig(headroom=1.0), "config.headroom", "must be a number in [0, 1), got 1.0"),
        (
            lambda: AllocatorConfig(urgency="fifo"),
            "config.urgency",
            "must be one of 'deadline', 'latest_start', got 'fifo'",
        ),
        (lambda: SchedulerConfig(rate_grants=1), "config.rate_grants", "must be true or false, got 1"),
        (lambda: SafsConfig(default_rate_bps=0), "default_rate_bps", "must be an integer > 0 bit/s, got 0"),
        (lambda: SafsConfig(rto_ns=10, rto_max_ns=5), "rto_max_ns", "must be an integer >= rto_ns (10), got 5"),
        (lambda: dctcp.DctcpConfig(g=0.0), "g", "must be a number in (0, 1], got 0.0"),
        (lambda: HomaConfig(sched_priorities=8), "homa.sched_priorities", "must be an integer in 1..7 or null, got 8"),
    ],
)
def test_messages_give_the_range_and_unit_from_the_constraints(make, field: str, message: str) -> None:
    err = _err(make)
    assert (err.field, err.message) == (field, message)


def test_unknown_keys_are_refused_listing_the_valid_ones() -> None:
    err = _err(SimConfig.from_mapping, {"dctcp": {"gain": 0.1}}, source="s.yaml")
    assert err.field == "sim.dctcp.gain" and err.source == "s.yaml"
    assert err.message == (
        "unknown key; valid: dupack_threshold, g, initial_cwnd_segments, initial_rto_ns, max_rto_ns, min_rto_ns, wire"
    )  # mtu_bytes is the simulator's, not the user's
    err = _err(SimConfig.from_mapping, {"dctcp": {"mtu_bytes": 1500}})
    assert err.field == "sim.dctcp.mtu_bytes" and "unknown key" in err.message
    err = _err(SimConfig.from_mapping, {"scheduler": {}})  # its own section of a scenario
    assert err.field == "sim.scheduler" and "scheduler" not in err.message.split("valid: ")[1].split(", ")
    assert _err(AllocatorConfig, quantum=1).field == "config.quantum"
    assert _err(SafsConfig().replace, mtu=1500).field == "mtu"


def test_nested_errors_keep_the_key_path() -> None:
    err = _err(scheduler_config_for, None, 9000, {"allocator": {"headroom": 2}}, source="f.yaml")
    assert (err.field, err.source) == ("scheduler.allocator.headroom", "f.yaml")
    assert _err(scheduler_config_for, None, 9000, {"allocator": {"nope": 1}}).field == "scheduler.allocator.nope"
    err = _err(SchedulerConfig, allocator={"slack_thresholds_ns": (0, 1, 2, 2)})
    assert err.field == "config.allocator.slack_thresholds_ns" and "strictly increasing" in err.message
    err = _err(SimConfig, homa={"sched_priorities": 4, "unsched_cutoffs_bytes": [100]})
    assert err.field == "sim.homa.unsched_cutoffs_bytes" and "needs 3 cutoffs" in err.message


def test_lists_are_tuples_from_a_mapping_but_not_as_keywords() -> None:
    cfg = SchedulerConfig.from_mapping({"allocator": {"slack_thresholds_ns": [0, 5, 50, 500]}})
    assert cfg.allocator.slack_thresholds_ns == (0, 5, 50, 500)
    err = _err(AllocatorConfig, slack_thresholds_ns=[0, 5, 50, 500])
    assert err.field == "config.slack_thresholds_ns" and "a tuple of 4 integers in" in err.message
    err = _err(AllocatorConfig, slack_thresholds_ns=(0, 5, 50, 1 << 60))
    assert err.field == "config.slack_thresholds_ns" and "(item 3)" in err.message
    assert HomaConfig(unsched_cutoffs_bytes=[10, 20]).unsched_cutoffs_bytes == (10, 20)  # as before


def test_frozen_replace_validates_and_properties_are_computed_once() -> None:
    cfg = SafsConfig()
    with pytest.raises(ValueError, match="frozen"):
        cfg.mtu_bytes = 1500  # type: ignore[misc]
    smaller = cfg.replace(mtu_bytes=1500)
    assert smaller.segment_bytes == cfg.segment_bytes - 7500
    assert smaller == SafsConfig(mtu_bytes=1500) and smaller != cfg
    assert "segment_bytes" in vars(smaller)  # cached: a plain attribute read after the first
    assert _err(cfg.replace, rto_ns=0).field == "rto_ns"


def test_partial_overrides_are_checked_without_the_derived_fields() -> None:
    check_pfabric_overrides({"rto_ns": 5})
    err = _err(check_pfabric_overrides, {"rto_ns": 1.5}, prefix="sim.pfabric.")
    assert (err.field, err.message) == ("sim.pfabric.rto_ns", "must be an integer >= 1 ns, got 1.5")
    assert _err(check_pfabric_overrides, {"mtu_bytes": 1500}).field == "pfabric.mtu_bytes"
    assert _err(check_pfabric_overrides, [1]).field == "pfabric"


def test_one_derivation_of_the_scheduler_settings() -> None:
    assert dctcp.dctcp_k_packets is dctcp_k_packets  # hosts.dctcp re-exports the core function
    topo = load_topology(ROOT / "topologies" / "mininet-afd.yaml")
    cfg = scheduler_config_for(topo, 1500)
    assert cfg == SimConfig(mtu_bytes=1500).scheduler_config(topo)
    assert (cfg.max_frame_bytes, cfg.allocator.line_rate_bps, cfg.default_rate_bps) == (1514, 10_000_000, 100_000)
    assert cfg.ecn_threshold_pkts == max(1, min(dctcp_k_packets(10_000_000, 1500), 65536 // (4 * 1514)))
    over = scheduler_config_for(topo, 1500, {"ecn_threshold_pkts": 9, "allocator": {"line_rate_bps": 7}})
    assert (over.ecn_threshold_pkts, over.allocator.line_rate_bps) == (9, 7)
    assert scheduler_config_for(None, 9000) == SchedulerConfig(max_frame_bytes=9014)
    slow = star(2, rate="25Gbps")
    assert scheduler_config_for(slow, 9000).allocator.line_rate_bps == 25_000_000_000
    assert scheduler_config_for(slow, 9000).default_rate_bps == 250_000_000
    assert scheduler_config_for(slow, 9000, {"default_rate_bps": 5}).default_rate_bps == 5
    assert scheduler_config_for(star(2), 9000).default_rate_bps == SchedulerConfig().default_rate_bps  # 100 Gbit/s


def test_receiver_admission_is_checked_under_each_safs_policy_before_any_run(tmp_path: Path) -> None:
    """``sim.safs_receiver_admission`` needs late transfers last: refused (naming the file, the
    field and the policy) under ``safs``, which sends them first; accepted under
    ``safs-late-last``, which sets it, and under DCTCP, whose hosts are not SAFS."""
    topology = Path(__file__).resolve().parents[1] / "topologies" / "leaf-spine-64.yaml"

    def scenario(policy: str) -> Path:
        path = tmp_path / f"{policy}.yaml"
        path.write_text(f"name: adm\ntopology: {topology}\nworkload: {{kind: fabric, params: {{transfers: 10}}}}\n"
                        f"policies: [{policy}]\nsim: {{safs_receiver_admission: moore-hodgson}}\n")
        return path

    with pytest.raises(InvalidInput) as err:
        check(load_scenario(scenario("safs")))
    assert str(scenario("safs")) in str(err.value) and "sim.safs_receiver_admission" in str(err.value)
    assert "late_transfers" in str(err.value) and "'safs'" in str(err.value)
    check(load_scenario(scenario("safs-late-last")))
    check(load_scenario(scenario("dctcp")))
    # the default, "firm" (only transfers with a firm deadline may be rejected), needs no late rule
    assert SimConfig().safs_config().receiver_admission == "firm"
    # an unquoted YAML off arrives as false: it means "off", not a type error
    assert SimConfig.from_mapping({"safs_receiver_admission": False}).safs_receiver_admission == "off"
    with pytest.raises(InvalidInput, match="admission_rate_fraction"):
        SafsConfig(late_transfers="last", receiver_admission="moore-hodgson", admission_rate_fraction=1.5)

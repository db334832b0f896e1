"""The Mininet network of a topology (safs.experiments.mininet.net) and the mininet target
(safs.experiments.mininet.backend).

Tiers: the traffic-control commands and argument checks run everywhere; building a network
needs root and Mininet (marker ``mininet``), with a switch class that forwards nothing, so it
runs without BMv2; the urgent-class bottleneck test and the end-to-end run need BMv2 as well.
Every test that builds asserts that nothing is left afterwards (interfaces, host shells,
switch processes), also after an exception and after SIGTERM or SIGKILL midway.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from safs.core.errors import InvalidInput
from safs.core.topology import load_topology
from safs.experiments.mininet import net as emunet

ROOT = Path(__file__).resolve().parents[1]
AFD = ROOT / "topologies" / "mininet-afd.yaml"


def test_bottleneck_commands_strict_priority_layout():
    cmds = [" ".join(c) for c in emunet.bottleneck_commands("s1-eth1", 10_000_000, 65536, 1500)]
    assert cmds[0] == "tc qdisc add dev s1-eth1 root handle 1: htb default 10"
    assert "classid 1:1 htb rate 10000000bit ceil 10000000bit" in cmds[1]
    # control class first, then slack classes 6..2 in priority order, everything else last
    prios = {
        c.split("classid ")[1].split()[0]: int(c.split(" prio ")[1].split()[0])
        for c in cmds
        if " class add " in c and "1:1 " not in c.split("classid")[1][:5]
    }
    assert prios == {"1:17": 0, "1:16": 1, "1:15": 2, "1:14": 3, "1:13": 4, "1:12": 5, "1:10": 7}
    filters = [c for c in cmds if " filter " in c]
    assert len(filters) == 6 and all("match ip dport 23285 0xffff" in f and "at 30" in f for f in filters)
    assert all("bfifo limit 65536" in c for c in cmds if "qdisc add" in c and "parent 1:1" in c)
    red = [" ".join(c) for c in emunet.bottleneck_commands("x", 10_000_000, 65536, 1500, 15140)]
    assert sum("red limit 65536 min 15140 max 16654" in c and c.endswith("ecn") for c in red) == 7


def test_bottleneck_bad_input():
    with pytest.raises(InvalidInput, match="rate_bps"):
        emunet.bottleneck_commands("x", 1000, 65536, 1500)
    with pytest.raises(InvalidInput, match="buffer_bytes"):
        emunet.bottleneck_commands("x", 10_000_000, 1000, 1500)
    with pytest.raises(InvalidInput, match="ecn_threshold_bytes"):
        emunet.bottleneck_commands("x", 10_000_000, 65536, 1500, 65000)


def test_offload_switch_off_failure_is_one_line_naming_the_interface():
    """The switch-side veths' checksum offload must go off (else TCP and UDP through BMv2 fail
    their checksums): a failing ethtool is an EmuError naming the interface and its error."""
    seen = []

    def failing(args):
        seen.append(args)
        raise emunet.EmuError(f"{' '.join(args)}: Cannot get device udp-fragmentation-offload settings:\n"
                              "Operation not supported")

    with pytest.raises(emunet.EmuError) as err:
        emunet._offloads_off(failing, "s1-eth2")
    assert seen[0][:3] == ["ethtool", "--offload", "s1-eth2"] and "rx" in seen[0] and "tx" in seen[0]
    message = str(err.value)
    assert message.startswith("s1-eth2: cannot turn checksum offload off: ethtool --offload s1-eth2")
    assert "Operation not supported" in message and "\n" not in message

    def no_ethtool(args):
        raise FileNotFoundError(2, "No such file or directory", "ethtool")

    with pytest.raises(emunet.EmuError, match="s1-eth2: cannot turn checksum offload off: .*ethtool"):
        emunet._offloads_off(no_ethtool, "s1-eth2")
    emunet._offloads_off(lambda args: None, "s1-eth2")  # success: nothing raised


def test_qdisc_drops_sums_leaves_not_root():
    text = textwrap.dedent("""\
        qdisc htb 1: root refcnt 2 r2q 10 default 0x10
         Sent 100 bytes 2 pkt (dropped 7, overlimits 0 requeues 0)
        qdisc bfifo 10: parent 1:10 limit 64Kb
         Sent 50 bytes 1 pkt (dropped 5, overlimits 0 requeues 0)
        qdisc bfifo 16: parent 1:16 limit 64Kb
         Sent 50 bytes 1 pkt (dropped 2, overlimits 0 requeues 0)
        """)
    assert emunet.qdisc_drops("x", runner=lambda args: text) == 7


def test_mininet_target_refuses_simulator_only_policies():
    from safs.experiments.runner import check
    from safs.experiments.scenario import load_scenario

    scenario = load_scenario(ROOT / "scenarios" / "mininet-afd.yaml", {"policies": ["safs", "d2tcp"]})
    with pytest.raises(InvalidInput, match="d2tcp.*does not run on target mininet"):
        check(scenario, "mininet")
    check(load_scenario(ROOT / "scenarios" / "mininet-afd.yaml"), "mininet")


def test_mininet_runs_take_each_policys_settings_as_the_simulator_does():
    """The Mininet target configures the controller and the agents from ``Policy.configs``, the
    simulator's merge: a policy's scheduler overrides reach the controller (safs-per-transfer's
    per-transfer grants, safs-admission's late transfers last and top-class overcommit) and its
    host settings the agents (receiver admission, pacer burst)."""
    from safs.experiments.policies import get_policy, mininet_policies
    from safs.experiments.runs import build_run, expand
    from safs.experiments.scenario import load_scenario

    assert {"safs", "safs-per-transfer", "safs-late-last", "safs-overcommit", "safs-admission"} <= set(
        mininet_policies())
    scenario = load_scenario(ROOT / "scenarios" / "mininet-afd.yaml")
    topology, _, sim_config = build_run(scenario, next(iter(expand(scenario))))
    assert sim_config.scheduler_config(topology).grant_mode == "share"
    _, sched = get_policy("safs-per-transfer").configs(sim_config, topology)
    assert sched.grant_mode == "per-transfer"
    config, sched = get_policy("safs-admission").configs(sim_config, topology)
    assert sched.allocator.late_transfers == "last" and sched.top_overcommit == 2
    assert config.safs_receiver_admission == "moore-hodgson" and config.safs_burst_bytes == 18_000
    assert config.safs_config().receiver_admission == "moore-hodgson"
    config, sched = get_policy("safs").configs(sim_config, topology)
    assert config == sim_config and sched == sim_config.scheduler_config(topology)


# ---------------------------------------------------------------------------- root + Mininet

_BUILD = textwrap.dedent("""\
    import os, signal, sys, time, pathlib
    from mininet.node import Switch
    from safs.experiments.mininet import net as emunet
    from safs.core.topology import load_topology

    class NoSwitch(Switch):
        def start(self, controllers):
            pass

    emu = emunet.build(load_topology(sys.argv[1]), pathlib.Path(sys.argv[2]), switch_cls=NoSwitch)
    try:
        # a child of this run in a host namespace, as the agents are started
        emu.host("a0").popen(["sleep", "600"], preexec_fn=emunet._die_with_parent)
        print("BUILT", flush=True)
        if sys.argv[3] == "raise":
            raise RuntimeError("boom")
        time.sleep(600)
    finally:
        emu.stop()
    """)


def _start_build(tmp_path: Path, mode: str) -> subprocess.Popen:
    script = tmp_path / "build.py"
    script.write_text(_BUILD)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(AFD), str(tmp_path / "run"), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if "BUILT" not in line:
        proc.kill()
        pytest.fail(f"build failed: {line}{proc.stderr.read()[-2000:]}")
    return proc


def _assert_clean(topo, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while emunet.leftovers(topo) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert emunet.leftovers(topo) == []
    assert not [pid for pid, cmd in emunet._processes(__import__("re").compile(r"^sleep 600$"))]


@pytest.mark.mininet
def test_build_hosts_addresses_neighbours_and_bottleneck(tmp_path):
    from mininet.node import Switch

    class NoSwitch(Switch):
        def start(self, controllers):
            pass

    topo = load_topology(AFD)
    emu = emunet.build(topo, tmp_path, switch_cls=NoSwitch)
    try:
        f0 = emu.host("f0")
        addr = f0.cmd("ip -o -4 addr show dev f0-eth0")
        assert "10.0.1.1" in addr
        assert "02:00:0a:00:01:01" in f0.cmd("ip -o link show dev f0-eth0")
        neigh = f0.cmd("ip neigh show dev f0-eth0")
        assert "10.0.0.1 lladdr 02:00:0a:00:00:01 PERMANENT" in neigh
        assert "htb" in f0.cmd("tc qdisc show dev f0-eth0")
        # switch ports numbered as the topology numbers them; f0 is tor0's port 5
        assert topo.port_of("tor0", "f0") == 5
        qd = emunet.run_cmd(["tc", "qdisc", "show", "dev", "tor0-eth5"]).stdout
        assert qd.count("bfifo") == 7 and "htb 1: root" in qd
        assert len(emu.bottlenecks) == len(topo.hosts())
        assert all(b.rate_bps == 10_000_000 for b in emu.bottlenecks)
    finally:
        emu.stop()
    _assert_clean(topo)


@pytest.mark.mininet
@pytest.mark.parametrize("how", ["raise", "sigterm", "sigkill"])
def test_nothing_left_after_failure_or_kill(tmp_path, how):
    topo = load_topology(AFD)
    proc = _start_build(tmp_path, "raise" if how == "raise" else "wait")
    assert emunet.leftovers(topo), "the network exists while the run is alive"
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)  # default action; the test below uses the runner's handler
    elif how == "sigkill":
        proc.kill()
    proc.wait(timeout=60)
    if how == "sigkill":
        # host shells and children die with the process; root-namespace switch links remain
        # until the next build removes them (remove_leftovers)
        emunet.remove_leftovers(topo)
    _assert_clean(topo)


# ---------------------------------------------------------------------------- + BMv2


@pytest.mark.mininet
@pytest.mark.bmv2
def test_urgent_class_wins_at_the_bottleneck(tmp_path):
    """Two SAFS flows into f0 through BMv2 and the bottleneck: a lax one started first and a
    late (urgent) one; the urgent one finishes first although it started second and is as big."""
    import yaml

    from safs.experiments.mininet.backend import run_mininet
    from safs.experiments.runs import expand
    from safs.experiments.scenario import load_scenario

    trace = tmp_path / "two.csv"
    trace.write_text(
        "start_ns,sender,receiver,bytes,no_bubble_ts_ns,label,class\n"
        "0,a0,f0,150000,5000000000,lax,pipeline\n"
        "50000000,a1,f0,150000,60000000,urgent,pipeline\n"
    )
    raw = yaml.safe_load((ROOT / "scenarios" / "mininet-afd.yaml").read_text())
    # Both senders at line rate (no grant needed for the whole flow): 20 Mbit/s offered to f0's
    # 10 Mbit/s link, so the bottleneck's order alone decides who finishes first.
    raw["scheduler"]["unscheduled_bytes"] = 200_000
    scenario = load_scenario(
        ROOT / "scenarios" / "mininet-afd.yaml",
        {
            "workload": {"kind": "trace", "params": {"path": str(trace)}},
            "background": {"bulk_flows": [0]},
            "policies": ["safs"],
            "repetitions": 1,
            "max_time_ms": 10000,
            "scheduler": raw["scheduler"],
        },
    )
    ((record, _),) = run_mininet(scenario, list(expand(scenario)), keep_dir=tmp_path / "run")
    (flows_file,) = (tmp_path / "run").glob("flows-*.json")
    flows = {r["label"]: r for r in json.loads(flows_file.read_text())}
    assert flows["urgent"]["finish_ns"] < flows["lax"]["finish_ns"], flows
    # FIFO would have shared the link: the urgent flow, 50 ms later, would finish last
    assert flows["urgent"]["finish_ns"] - flows["urgent"]["start_ns"] < 0.8 * (
        flows["lax"]["finish_ns"] - flows["lax"]["start_ns"]
    )
    _assert_clean(load_topology(AFD))


def test_run_lock_serialises_networks(tmp_path):
    """A second network waits for the first (same interface names); a holder is named."""
    path = tmp_path / "emu.lock"
    first = emunet.acquire_run_lock(path)
    try:
        with pytest.raises(emunet.EmuError, match=f"pid {os.getpid()}"):
            emunet.acquire_run_lock(path, timeout_s=0.2)
    finally:
        first.close()
    emunet.acquire_run_lock(path, timeout_s=0.2).close()  # free again


@pytest.mark.mininet
@pytest.mark.bmv2
def test_end_to_end_cli_run_and_clean(tmp_path):
    """`safs run --target mininet` on a tiny AFD scenario (2 decode steps, both policies, one
    background level): records like the simulator's, every pipeline flow finished, every SAFS
    flow announced over the hint API, nothing left afterwards."""
    import yaml

    raw = yaml.safe_load((ROOT / "scenarios" / "mininet-afd.yaml").read_text())
    raw["topology"] = str(AFD)
    raw["workload"]["params"].update(decode_steps=2, layers_simulated=1)
    raw.update(repetitions=1, background={"bulk_flows": [1]})
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(raw))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "safs.apps.cli",
            "run",
            str(scenario),
            "--target",
            "mininet",
            "--out",
            str(tmp_path / "out"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    records = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {(r["target"], r["policy"]) for r in records} == {("mininet", "safs"), ("mininet", "dctcp")}
    for r in records:
        assert r["pipeline_flows"] > 0 and r["pipeline_unfinished"] == 0, r
        assert r["agent_errors"] == 0 and r["tpot_samples"] >= 1, r
        assert r["tcp_dctcp"] in (0, 1) and r["clock_offset_correction_max_ms"] >= 0
    safs = next(r for r in records if r["policy"] == "safs")
    # dependency grants: the dependencies are announced once at launch, no transfer is hinted
    assert safs["dependencies_announced"] > 0 and safs["hints_announced"] == 0 and safs["hints_errors"] == 0, safs
    assert next(r for r in records if r["policy"] == "dctcp")["dependencies_announced"] == 0
    assert safs["control_bytes"] > 0
    _assert_clean(load_topology(AFD))
    assert os.path.exists(tmp_path / "out" / "results.csv")


@pytest.mark.mininet
def test_agents_start_in_every_host_and_stop(tmp_path):
    """run.start_agents/stop_agents on a network without switches: every host's agent answers
    over its control socket from its namespace, and nothing is left after stop."""
    from mininet.node import Switch

    from safs.core.scheduler import SchedulerConfig
    from safs.experiments.mininet.backend import start_agents, stop_agents
    from safs.experiments.sim.config import SimConfig

    class NoSwitch(Switch):
        def start(self, controllers):
            pass

    topo = load_topology(AFD)
    emu = emunet.build(topo, tmp_path, switch_cls=NoSwitch)
    try:
        agents, procs = start_agents(
            emu,
            tmp_path,
            "t",
            f"unix:{tmp_path / 'no-hints.sock'}",
            SchedulerConfig(default_rate_bps=2_500_000),
            SimConfig(mtu_bytes=1500, safs_reorder_window_ns=7_000_000),
        )
        try:
            stats = {h: a.request({"op": "stats"}) for h, a in agents.items()}
            assert set(stats) == set(topo.hosts())
            assert stats["f0"]["ip"] == "10.0.1.1" and stats["f0"]["config"]["line_rate_bps"] == 10_000_000
            assert stats["f0"]["config"]["reorder_window_ns"] == 7_000_000  # the scenario's timers
        finally:
            stop_agents(agents, procs)
        assert all(p.poll() is not None for p in procs)
    finally:
        emu.stop()
    _assert_clean(topo)

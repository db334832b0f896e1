"""The ``mininet`` target of ``safs run`` (docs/mininet.md): a scenario on BMv2 switches in Mininet.

Per scenario the network is built once (:func:`safs.experiments.mininet.net.build`: BMv2 switches, hosts,
bottleneck traffic control). Per run (policy, background flows, seed, repetition):

1. the SAFS controller (:class:`safs.control.controller.ControllerApp`, exactly as ``safs
   controller`` runs it) connects to every switch over P4Runtime, pushes the committed pipeline
   (clean tables), installs routes and settings, and serves the hint API on a Unix socket in the
   run directory (host namespaces share the filesystem); its run loop (digests, ticks) runs in a
   thread of this process;
2. switch clocks are calibrated: a host sends a SAFS REQUEST of an unknown flow to a host on each
   ToR and reads the switch time from the GRANT (:func:`safs.experiments.mininet.net.probe_switch_time`); the
   offset is corrected by (midpoint of send and receive) - (GRANT time). Switches without hosts
   get the first ToR's offset moved by the difference of their process start times;
3. one agent per host (``python -m safs.apps.agent``, started in the host's namespace) and the
   driver (:class:`safs.experiments.mininet.driver.RealtimeNetwork`) run the workload in wall-clock time;
4. agents, controller thread and hint socket are stopped; the record is built like the
   simulator's (same keys, ``target: mininet``) plus the emulation's own (below).

Deadline misses: a flow later than the scenario's ``miss_tolerance_us`` past its no-bubble
timestamp (default 2 µs, the simulator's timing resolution). Timers, agents and BMv2 add about a
millisecond of jitter here, so scenarios/mininet-*.yaml set 1000 µs, for both targets.

Interrupts: SIGTERM during a run raises KeyboardInterrupt in the main thread, so the same
cleanup runs as for an error; children die with this process even on SIGKILL (PDEATHSIG).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from safs.control.controller import ControllerApp, ControllerConfig, SwitchSpec
from safs.control.hintapi.client import HintClient
from safs.core.errors import InvalidInput
from safs.core.files import BMV2_JSON_PATH, P4INFO_PATH
from safs.core.hints import LABEL_MAX_LEN, DependencyHint, FlowClass
from safs.core.protocol import WIRE_OVERHEAD_BYTES
from safs.core.timebase import diff, wrap
from safs.core.topology import load_topology
from safs.experiments.metrics import FlowRecord, flow_metrics
from safs.experiments.mininet import net as emunet
from safs.experiments.mininet.agent_control import AgentClient, AgentError
from safs.experiments.mininet.driver import RealtimeNetwork
from safs.experiments.mininet.net import PROBE_DEP_ID, PROBE_FLOW_ID, EmuError, die_with_parent, stop_process
from safs.experiments.policies import get_policy, mininet_policies
from safs.experiments.runs import build_run, miss_tolerance_ns
from safs.hosts.safs import SafsConfig

log = logging.getLogger(__name__)

AGENT_START_TIMEOUT_S = 30.0
# Each scheduler tick reads counters over P4Runtime; faster than 1 ms only burns the CPU the
# switches and agents need (the simulator's 100 µs default is for 100 Gbit/s links).
MIN_TICK_NS = 1_000_000
# Scheduling priority (nice) of the run: this process (driver, controller thread) and, by
# inheritance, the switches, host shells and agents it starts. The emulated fabric is a
# real-time system on shared cores: at nice 0, other load on the machine stalls a switch or an
# agent for 100 ms at a time (measured: driver timers 100-300 ms late on 2 cores with a run
# queue of 10), which shows as pipeline deadline misses of neither policy's making.
RUN_NICE = -10
GIL_SWITCH_INTERVAL_S = 0.0005


def check_policies(policies: Iterable[str], source: str | None = None) -> None:
    """Raise InvalidInput naming ``policies`` unless every policy runs on this target."""
    for policy in policies:
        if policy not in mininet_policies():
            raise InvalidInput("policies", f"policy {policy!r} does not run on target mininet; valid there: "
                               f"{', '.join(mininet_policies())} (TCP is the kernel's)", source=source)


def _ip(value: int) -> str:
    return ".".join(str((value >> s) & 0xFF) for s in (24, 16, 8, 0))


def run_mininet(scenario: Any, specs: list[Any], progress: Callable[[Any], None] | None = None,
                keep_dir: Path | None = None) -> list[tuple[dict[str, Any], dict[str, list[float]]]]:
    """Run every spec of ``scenario`` on one Mininet network; returns ``(record, samples)`` per
    spec (samples: ``Workload.samples()``).

    Args:
        scenario: a checked :class:`safs.experiments.scenario.Scenario`.
        specs: :class:`safs.experiments.runs.RunSpec` list (``runs.expand``).
        progress: called after each run.
        keep_dir: keep logs (switches, agents) here instead of a removed temporary directory.

    Raises:
        InvalidInput: a policy this target does not run.
        safs.experiments.mininet.net.EmuError: the network could not be built (not root, no Mininet/BMv2).
    """
    check_policies(scenario.policies, scenario.source)
    topology = load_topology(scenario.topology_path())
    _, _, sim_config = build_run(scenario, specs[0])
    mtu = sim_config.mtu_bytes
    sched = sim_config.scheduler_config(topology)
    run_dir = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="safs-mn-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    previous = _sigterm_raises()
    nice_before = _raise_priority()
    # The driver shares this process with the controller thread (P4Runtime, hint API): hand
    # the GIL over every 0.5 ms instead of 5 ms, so the driver's 1 ms timers and polls are not
    # held up behind a scheduler call.
    switch_before = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    records = []
    try:
        emu = emunet.build(topology, run_dir, mtu_bytes=mtu, ecn_threshold_pkts=sched.ecn_threshold_pkts)
        try:
            for spec in specs:
                samples: dict[str, list[float]] = {}
                records.append((run_one(emu, scenario, spec, run_dir, samples), samples))
                if progress:
                    progress(spec)
        finally:
            emu.stop()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if nice_before is not None:
            os.setpriority(os.PRIO_PROCESS, 0, nice_before)
        sys.setswitchinterval(switch_before)
        if not keep_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
    return records


def _raise_priority() -> int | None:
    """Set this thread's nice value to :data:`RUN_NICE` (children inherit it); returns the
    previous value, or None when it could not be changed (not root: the run goes on at the
    normal priority)."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, min(before, RUN_NICE))
    except OSError as exc:
        log.warning("cannot raise the run's priority to nice %d (%s): other load may stall it", RUN_NICE, exc)
        return None
    return before


def _sigterm_raises() -> Any:
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt("SIGTERM")

    return signal.signal(signal.SIGTERM, handler)


def run_one(emu: Any, scenario: Any, spec: Any, run_dir: Path,
            samples: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """One run on a built network (module docstring, steps 1-4); returns its record and fills
    ``samples`` (if given) with ``Workload.samples()``."""
    topology, workload, sim_config = build_run(scenario, spec)
    # The policy's settings over the scenario's, as on the simulator (its scheduler overrides
    # configure the controller; its SAFS host settings, the agents).
    sim_config, sched = get_policy(spec.policy).configs(sim_config, topology)
    tag = f"{spec.policy}-bg{spec.background_flows}-s{spec.seed}-r{spec.repetition}"
    hint_sock = run_dir / f"hints-{tag}.sock"
    config = ControllerConfig(
        topology_path=scenario.topology_path(),
        switches=tuple(
            SwitchSpec(sw, emu.switch(sw).grpc_addr, emu.switch(sw).device_id) for sw in topology.switches()
        ),
        p4info_path=P4INFO_PATH,
        bmv2_json_path=BMV2_JSON_PATH,
        hint_addr=f"unix:{hint_sock}",
        tick_ns=max(MIN_TICK_NS, sim_config.tick_ns or sched.tick_ns),
        scheduler=sched,
        activation_lead_ns=sim_config.activation_lead_ns,
    )  # the scenario's, as on the simulator
    app = ControllerApp(config)
    stop = threading.Event()
    agents: dict[str, Any] = {}
    procs: list[subprocess.Popen] = []
    thread = None
    started = time.perf_counter()
    try:
        app.start()
        thread = threading.Thread(target=app.run, args=(stop,), name="safs-controller", daemon=True)
        thread.start()
        offsets = calibrate_clocks(emu, app)
        agents, procs = start_agents(emu, run_dir, tag, f"unix:{hint_sock}", sched, sim_config)
        hint_channels_ready(agents)
        ips = {h: _ip(topology.host_ip(h)) for h in topology.hosts()}
        driver = RealtimeNetwork(agents, ips, spec.policy)
        dependencies = declare_dependencies(driver, workload, f"unix:{hint_sock}", spec.policy)
        drops_before = emu.drops()
        driver.run(workload, int(scenario.max_time_ms * 1_000_000))
        driver.drain()
        flows = driver.records()
        agent_stats = hint_calls_settled(agents)
        drops = emu.drops() - drops_before
    finally:
        stop_agents(agents, procs)
        stop.set()
        if thread is not None:
            thread.join(timeout=10)
        app.stop()
        hint_sock.unlink(missing_ok=True)
    wall = time.perf_counter() - started
    (run_dir / f"flows-{tag}.json").write_text(
        json.dumps(
            [{**dataclasses.asdict(f), "sender_event": driver.sender_events.get(f.flow_id)} for f in flows], indent=0
        )
    )
    record = spec.record_head(scenario, "mininet")
    record.update(workload.metrics())
    record.update(flow_metrics(flows, miss_tolerance_ns(scenario)))
    record["miss_tolerance_ms"] = scenario.miss_tolerance_us / 1000
    control, data = _control_data_bytes(agent_stats, flows)
    record["control_bytes_per_data_byte"] = control / data if data and control is not None else float("nan")
    record["control_bytes"] = control if control is not None else float("nan")
    record["data_bytes"] = data
    record["drops"] = drops
    record["agent_errors"] = len(driver.errors)
    record["dependencies_announced"] = dependencies  # at launch (dependency grants); 0 otherwise
    for key in ("announced", "completed", "errors", "pending"):  # hint API calls of the agents
        record[f"hints_{key}"] = sum(int(s.get("hints", {}).get(key, 0)) for s in agent_stats.values())
    record["timer_late_max_ms"] = driver.stats.timer_late_max_ns / 1e6
    record["clock_offset_correction_max_ms"] = max((abs(c) for c in offsets.values()), default=0) / 1e6
    record["tcp_dctcp"] = int(bool(emu.features and emu.features.dctcp))  # 0: the kernel's default (cubic)
    record["bottleneck_ecn"] = int(any(b.ecn_threshold_bytes for b in emu.bottlenecks))  # 0: drop-tail
    record["run_time_ms"] = driver.stats.run_time_ns / 1e6
    record["wall_time_s"] = wall
    if samples is not None:
        samples.update(workload.samples())
    return record


def declare_dependencies(driver: RealtimeNetwork, workload: Any, hint_addr: str, policy: str) -> int:
    """Announce the workload's dependencies (known at launch) through the hint API, as a job's
    launcher does, with the ids the driver will give their transfers; returns how many. Nothing
    for policies without dependency grants."""
    pol = get_policy(policy)
    if not pol.hinted or pol.per_transfer:
        return 0
    deps = [DependencyHint(driver.declare(d.sender, d.name), d.sender, d.receiver, d.name[:LABEL_MAX_LEN],
                           FlowClass(d.flow_class)) for d in workload.dependencies()]
    if deps:
        with HintClient(hint_addr, timeout_s=30.0) as hints:
            hints.announce_dependencies(deps)
    return len(deps)


def hint_channels_ready(agents: dict[str, Any], timeout_s: float = 10.0) -> None:
    """Wait until every agent's hint API channel is connected (stats ``hints.ready``), so the
    run's first flows do not pay for the connection; after ``timeout_s`` the run goes on (a
    warning names the agents; their calls connect when made)."""
    deadline = time.monotonic() + timeout_s
    waiting = sorted(agents)
    while waiting and time.monotonic() < deadline:
        waiting = [h for h in waiting if not agents[h].request({"op": "stats"})["hints"].get("ready")]
        if waiting:
            time.sleep(0.01)
    if waiting:
        log.warning("hint API channel of %s not connected after %.0f s", ", ".join(waiting), timeout_s)


def hint_calls_settled(agents: dict[str, Any], timeout_s: float = 5.0) -> dict[str, dict]:
    """Every agent's ``stats`` once its hint API calls (Announce, Complete; sent by a worker
    thread of the agent) are done, or after ``timeout_s`` (then ``hints.pending`` > 0 says how
    many were still queued)."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = {h: a.request({"op": "stats"}) for h, a in agents.items()}
        if time.monotonic() >= deadline or not any(s.get("hints", {}).get("pending", 0) for s in stats.values()):
            return stats
        time.sleep(0.02)


def _control_data_bytes(stats: dict[str, dict], flows: list[FlowRecord]) -> tuple[int | None, int]:
    """Control bytes on the wire (every REQUEST and DONE the agents sent and every GRANT they
    received, :data:`safs.core.protocol.WIRE_OVERHEAD_BYTES` each) and data bytes (sizes of the
    flows that finished). Control is None when no agent reports SAFS counters."""
    data = sum(f.size_bytes for f in flows if f.finish_ns is not None)
    messages = None
    for s in stats.values():
        safs = s.get("safs") if isinstance(s, dict) else None
        if isinstance(safs, dict):
            messages = (messages or 0) + sum(
                int(safs.get(k, 0)) for k in ("requests_sent", "dones_sent", "grants_received")
            )
    return (None if messages is None else messages * WIRE_OVERHEAD_BYTES), data


def calibrate_clocks(emu: Any, app: Any) -> dict[str, int]:
    """Correct every switch's clock offset from a probe GRANT (module docstring, step 2).

    Returns:
        switch -> correction applied, ns (new offset - old offset).

    Raises:
        safs.experiments.mininet.net.EmuError: a probe got no GRANT.
    """
    topo = emu.topology
    corrections: dict[str, int] = {}
    probed: list[str] = []
    for i, sw in enumerate(topo.switches()):
        attached = [h for h in topo.hosts() if topo.tor_of(h) == sw]
        if not attached:
            continue
        receiver = attached[0]
        sender = next((h for h in attached[1:]), None) or next(h for h in topo.hosts() if h != receiver)
        flow_id = PROBE_FLOW_ID + i
        proc = emu.host(sender).popen(
            die_with_parent(
                [
                    sys.executable,
                    "-m",
                    "safs.experiments.mininet.net",
                    "probe",
                    _ip(topo.host_ip(receiver)),
                    str(flow_id),
                ]
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = proc.communicate(timeout=60)
        if proc.returncode != 0:
            raise EmuError(f"clock probe {sender} -> {receiver} ({sw}) failed: {err.strip()[-500:]}")
        sent, received, grant = (int(x) for x in out.split())
        mid = wrap(sent + diff(received, sent) // 2)
        correction = diff(mid, grant)
        _set_offset(app, sw, wrap(app.clock_offsets_ns[sw] + correction))
        corrections[sw] = correction
        probed.append(sw)
        _forget_probe(app, flow_id, sender)
    if not probed:
        raise EmuError("no switch has hosts: nothing to calibrate against")
    ref = probed[0]
    for sw in topo.switches():
        if sw in corrections:
            continue
        start_gap = emu.switch(sw).started_ns - emu.switch(ref).started_ns
        new = wrap(app.clock_offsets_ns[ref] + start_gap)
        corrections[sw] = diff(new, app.clock_offsets_ns[sw])
        _set_offset(app, sw, new)
    log.info("clock offset corrections (ms): %s", ", ".join(f"{sw} {c / 1e6:+.3f}" for sw, c in corrections.items()))
    return corrections


def _set_offset(app: Any, switch: str, offset: int) -> None:
    with app.lock:
        app.links[switch].set_clock_offset(offset)
        app.clock_offsets_ns[switch] = offset


def _forget_probe(app: Any, flow_id: int, sender: str, timeout_s: float = 2.0) -> None:
    """The probe's REQUEST makes the switch digest it and the controller admit a 1-byte flow
    (per-transfer grants) or learn dependency ``PROBE_DEP_ID`` of ``sender`` (dependency
    grants): complete or end it so it holds no grant or meter slot."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with app.lock:
            if flow_id in app.scheduler.registry:
                app.scheduler.complete(flow_id, app.clock())
                return
            if (sender, PROBE_DEP_ID) in app.scheduler.dependencies:
                app.scheduler.end_dependency(sender, PROBE_DEP_ID, app.clock())
                return
        time.sleep(0.01)


def start_agents(
    emu: Any, run_dir: Path, tag: str, hint_addr: str, sched: Any, sim_config: Any
) -> tuple[dict[str, Any], list[subprocess.Popen]]:
    """Start ``python -m safs.apps.agent`` in every host's namespace and connect to each, with
    the scheduler's default rate and unscheduled bytes and the run's SAFS host settings: timers,
    MTU, late transfers, receiver admission and pacer burst (``sim_config``:
    :class:`safs.experiments.sim.simulation.SimConfig` with the policy's settings, as the
    simulator uses them).

    Raises:
        safs.experiments.mininet.agent_control.AgentError: an agent did not listen within the timeout (its log is in
            the run directory).
    """
    topo = emu.topology
    # Polls as in the simulator (safs.experiments.sim.bindings): dependency senders back off,
    # the per-transfer design polls at a fixed period.
    grant_poll_backoff = 1 if sched.grant_mode == "per-transfer" else SafsConfig().grant_poll_backoff
    procs, agents = [], {}
    try:
        for h in topo.hosts():
            control = run_dir / f"agent-{h}-{tag}.sock"
            logf = run_dir / f"agent-{h}-{tag}.log"
            cmd = [
                sys.executable,
                "-m",
                "safs.apps.agent",
                "--host",
                h,
                "--ip",
                _ip(topo.host_ip(h)),
                "--control",
                str(control),
                "--hint-addr",
                hint_addr,
                "--default-rate-bps",
                str(sched.default_rate_bps),
                "--line-rate-bps",
                str(topo.host_link_bps(h)),
                "--mtu-bytes",
                str(sim_config.mtu_bytes),
                "--unscheduled-bytes",
                str(sched.unscheduled_bytes),
                "--grant-poll-ns",
                str(sim_config.safs_grant_poll_ns),
                "--grant-poll-backoff",
                str(grant_poll_backoff),
                "--reorder-window-ns",
                str(sim_config.safs_reorder_window_ns),
                "--rto-ns",
                str(sim_config.safs_rto_ns),
                "--urgency-quantum-ns",
                str(sim_config.safs_urgency_quantum_ns),
                # one argument: a first threshold below 0 would read as an option
                "--slack-thresholds-ns=" + (",".join(str(t) for t in sched.allocator.slack_thresholds_ns)
                                            if sched.slack_classes and sched.grant_mode == "share" else ""),
                "--late-transfers",
                sched.allocator.late_transfers,
                "--receiver-admission",
                sim_config.safs_receiver_admission,
                "--admission-rate-fraction",
                str(sim_config.safs_admission_rate_fraction),
                "--nic-yield-fraction",
                str(sim_config.safs_nic_yield_fraction),
                *(["--pace-burst-bytes", str(sim_config.safs_burst_bytes)] if sim_config.safs_burst_bytes else []),
                "--log",
                str(logf),
            ]
            with open(logf, "ab") as err:
                procs.append(emu.host(h).popen(die_with_parent(cmd), stdout=subprocess.DEVNULL, stderr=err))
        for h, proc in zip(topo.hosts(), procs):
            control = run_dir / f"agent-{h}-{tag}.sock"
            try:
                agents[h] = AgentClient.connect(control, timeout_s=AGENT_START_TIMEOUT_S)
            except AgentError:
                raise AgentError(
                    f"agent of {h} did not start (exit {proc.poll()}); log {run_dir / f'agent-{h}-{tag}.log'}"
                ) from None
    except BaseException:
        stop_agents(agents, procs)
        raise
    return agents, procs


def stop_agents(agents: dict[str, Any], procs: list[subprocess.Popen]) -> None:
    """Ask every agent to shut down, then SIGTERM (SIGKILL after 5 s) whatever still runs."""
    for agent in agents.values():
        try:
            agent.request({"op": "shutdown"})
        except Exception:  # noqa: BLE001 - it may be gone already
            pass
        try:
            agent.close()
        except Exception:  # noqa: BLE001
            pass
    for proc in procs:
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            stop_process(proc, timeout_s=5)

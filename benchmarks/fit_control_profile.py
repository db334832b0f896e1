"""Fit the "bmv2" control profile: the control-plane costs the simulator charges, measured on BMv2.

The simulator's model (one controller process, one writer per switch): the controller spends
CPU to encode a write; the switch then takes ``switch_request_ns + n * switch_update_ns`` for a
write request of n updates; a counter read of n cells takes ``read_request_ns + n *
read_cell_ns``; a digest reaches the controller ``digest_latency_ns`` after the switch made it;
a hint API call costs an RPC round trip plus controller CPU. This benchmark measures each on
this machine with the committed P4 program (p4src/build/safs.json + safs.p4info.txtpb, pushed
through ``safs.targets.p4rt.P4RuntimeTarget``), fits them, prints one table and, with
``--out FILE``, writes them as JSON.

Setup (as ptf_tests/run.py does): two veth pairs ``<prefix>S<i>`` (BMv2 port i) <->
``<prefix>P<i>`` (this benchmark's side), IPv6 off; ``simple_switch_grpc --no-p4 -i 1@.. -i
2@.. -- --priority-queues 8 --cpu-port 255`` on free gRPC and Thrift ports, polled until its gRPC port answers
(no fixed sleep), stopped by its PID; the veths are deleted on exit, also on errors and SIGTERM.
Without root the digest phase is skipped and BMv2 runs without interfaces.

Phases (timings are ``time.perf_counter``; CPU times ``time.thread_time`` / per-thread CPU
clocks; every figure is a median, the machine being shared):

1. **Encode** (controller CPU, no I/O): for n updates, the thread CPU time of
   ``codec.encode_update`` of each, of building the WriteRequest as ``SwitchClient.write``
   does (device id, election id, CONTINUE_ON_ERROR, ``updates.extend``) and of its
   ``SerializeToString`` (gRPC serialises the request inside the write the same way, so
   serialisation is charged to the controller, not to the switch). flow_grant MODIFYs
   (entries as ``Scheduler._grant_entry`` builds them) and flow_meter MeterConfig MODIFYs
   (``SchedulerConfig.meter_for``).
2. **Writes**: ``P4RuntimeTarget.write`` of the same n flow_grant MODIFYs (of entries inserted
   once) and, separately, n MeterConfig MODIFYs; n in 1..256, ``--rounds`` rounds of every n
   in shuffled order, each write right after its encode sample (same machine load). Lines
   a + b*n are fitted by least squares (numpy) through the per-n medians, residuals weighted
   by 1 / median write time (relative errors: the spread grows with n; plain fits are in the
   JSON). The switch part is the fit of (median write wall time - median encode CPU) per n:
   what remains after the controller encoded and serialised the request (gRPC transport,
   PI and BMv2, the reply, and any wait for a CPU). Cross-check: write wall time minus the
   client thread's CPU inside ``write()``.
3. **Counter reads**: ``P4RuntimeTarget.read_counter_cells`` of n flow_bytes cells, n in 1, 8,
   64, 256 (includes building the request and decoding the answer); fitted a + b*n, with the
   client thread's CPU and the switch's CPU split out.

Around every write and read the switch process's CPU time is read too (the sum over its
threads of ``/proc/PID/task/*/schedstat``): what BMv2 itself spends, free of the waits a
loaded machine adds to wall times.
4. **Digests**: receiver_port(2), ipv4_lpm 10.0.2.0/24 -> port 2, grant_route 10.0.1.0/24 ->
   port 1 and the default grant installed; a SAFS REQUEST (UDP 23285, type 2, built with
   ``safs.core.scapy_layer``; the header version is probed: the one the pushed program answers
   with a GRANT) for a flow without a flow_grant entry goes into port 1 through an AF_PACKET
   socket bound once (what scapy's ``sendp`` does per call). Latency = the
   ``P4RuntimeTarget.poll_digests`` call that returns the flow's digest returned - just before
   the send. The GRANT the switch turns the REQUEST into is timestamped on port 1 by a
   listener thread (the dataplane's own turnaround). Per ``DigestSettings`` (max_timeout_ns,
   max_list_size, ack_timeout_ns): random gaps of 0..100 ms between samples (arrivals at a
   random phase of PI's sweep timer), one row with back-to-back samples; a sample is lost
   without a digest within 2 s (after two losses in a row the rest are sent 10 ms apart and
   awaited together for 2 s).
5. **Hint API**: ``ControllerApp`` (two-ToR topology, this switch as tor1) in a thread;
   ``HintClient.announce`` round trips with the default admit_on_request (recorded only) and
   with admit_on_request=False (the announce writes a meter and a grant), each flow completed
   after its announce (not timed). Controller CPU per announce = process CPU during the call
   minus this benchmark's (client) thread and the controller's run-loop thread; the hint
   handler threads' own CPU is given too.

Run (about 70 s on 2 loaded cores; root for the veths)::

    cd /work/main && PYTHONPATH=controller .venv/bin/python benchmarks/fit_control_profile.py [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np

# The switch, artifacts and two-ToR topology of the P4Runtime benchmark (run from benchmarks/).
from bench_p4rt import BMV2_JSON, MS, P4INFO, TOPOLOGY_YAML, free_port  # the same artifacts, topology and port picker
from google.protobuf.internal import api_implementation
from p4.v1 import p4runtime_pb2

from safs.control.controller import ControllerApp, ControllerConfig, SwitchSpec
from safs.control.hintapi.client import HintClient
from safs.core import p4names as n
from safs.core.hints import FlowHint
from safs.core.protocol import SAFS_UDP_PORT, SAFS_VERSION, MsgType, lease_ns_to_us, rate_bps_to_kbps
from safs.core.scapy_layer import SAFS, pkt_add_safs
from safs.core.scheduler import SchedulerConfig
from safs.core.target import Lpm, Op, TableEntry, Update
from safs.targets.bmv2 import target_options
from safs.targets.p4rt.codec import encode_update
from safs.targets.p4rt.p4info import P4InfoIndex
from safs.targets.p4rt.target import DigestSettings, P4RuntimeTarget

WRITE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
READ_SIZES = (1, 8, 64, 256)
DIGEST_LOST_S = 2.0
# Digest-phase dataplane (BMv2 port = veth pair index), as ptf_tests/base_test.py sets it up.
PORT_SENDER, PORT_RECEIVER = 1, 2
SENDER_IP, RECEIVER_IP = "10.0.1.1", "10.0.2.1"
SENDER_MAC, RECEIVER_MAC, SWITCH_MAC = "00:00:00:00:01:01", "00:00:00:00:02:01", "00:00:00:00:aa:aa"
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # sockaddr_ll.sll_pkttype of a frame this host sent


@dataclass(frozen=True)
class DigestCase:
    """One digest configuration measured: its settings, a label and how samples are spaced."""

    label: str
    settings: DigestSettings
    back_to_back: bool = False  # next REQUEST right after the previous digest (no random gap)
    asked: bool = True  # one of the brief's configurations (False: an extra that explains one)


DIGEST_CASES = (
    DigestCase("1 ms, 128, 50 ms (controller default)", DigestSettings(1 * MS, 128, 50 * MS, bmv2_checks=False)),
    DigestCase("1 ms, 128, 50 ms, back-to-back", DigestSettings(1 * MS, 128, 50 * MS, bmv2_checks=False),
               back_to_back=True, asked=False),
    DigestCase("1 ms, 1, 50 ms", DigestSettings(1 * MS, 1, 50 * MS, bmv2_checks=False)),
    DigestCase("2 ms, 1, 50 ms", DigestSettings(2 * MS, 1, 50 * MS, bmv2_checks=False)),
    DigestCase("5 ms, 128, 50 ms", DigestSettings(5 * MS, 128, 50 * MS, bmv2_checks=False)),
    DigestCase("0.5 ms, 1, 50 ms", DigestSettings(MS // 2, 1, 50 * MS, bmv2_checks=False)),
    DigestCase("1 ms, 1, 0 (no ack timeout)", DigestSettings(1 * MS, 1, 0, bmv2_checks=False), asked=False),
    DigestCase("0 (none), 1, 50 ms (PTF tests)", DigestSettings(0, 1, 50 * MS, bmv2_checks=False), asked=False),
    DigestCase("0.5 ms, 128, 50 ms", DigestSettings(MS // 2, 128, 50 * MS, bmv2_checks=False), asked=False),
)


# ---------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class LineFit:
    """Least-squares line ``y = a + b * n`` (ns) and its coefficient of determination."""

    a: float
    b: float
    r2: float


def fit_line(sizes: Sequence[int], values: Sequence[float], weights: Sequence[float] | None = None) -> LineFit:
    """Least squares (numpy.linalg.lstsq) of ``values`` on ``sizes``, each residual multiplied
    by its weight (None: all 1); R² is the plain one of the fitted line on the points."""
    x = np.asarray(sizes, dtype=float)
    y = np.asarray(values, dtype=float)
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=float)
    design = np.column_stack([np.ones_like(x), x])
    (a, b), *_ = np.linalg.lstsq(design * w[:, None], y * w, rcond=None)
    residual = float(np.sum((y - (a + b * x)) ** 2))
    total = float(np.sum((y - y.mean()) ** 2))
    return LineFit(float(a), float(b), 1.0 - residual / total if total > 0 else 1.0)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def thread_cpu_s(ident: int) -> float:
    """CPU seconds used so far by the thread whose ``threading`` ident is ``ident``."""
    return time.clock_gettime(time.pthread_getcpuclockid(ident))


def process_cpu_s(pid: int) -> float:
    """CPU seconds used so far by every live thread of process ``pid`` (the first field of
    ``/proc/PID/task/*/schedstat``, ns)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


# ---------------------------------------------------------------------------- switch and veths


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def veth_pairs(count: int, prefix: str) -> Iterator[list[tuple[str, str]]]:
    """``count`` veth pairs ``(prefix S i, prefix P i)``, up, IPv6 off; deleted on exit."""
    pairs: list[tuple[str, str]] = []
    try:
        for i in range(1, count + 1):
            sw, peer = f"{prefix}S{i}", f"{prefix}P{i}"
            _ip("link", "del", sw, check=False)  # leftover of a killed run
            _ip("link", "add", sw, "type", "veth", "peer", "name", peer)
            pairs.append((sw, peer))
            for dev in (sw, peer):
                subprocess.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1"],
                               check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                _ip("link", "set", dev, "up")
        yield pairs
    finally:
        for sw, _ in pairs:
            _ip("link", "del", sw, check=False)


@dataclass(frozen=True)
class RunningSwitch:
    """A started ``simple_switch_grpc``: its gRPC ``host:port`` and PID."""

    address: str
    pid: int


@contextlib.contextmanager
def bmv2_switch(binary: str, interfaces: Sequence[str], log_path: Path) -> Iterator[RunningSwitch]:
    """``simple_switch_grpc --no-p4`` with ``interfaces`` as ports 1.. and 8 priority queues,
    warnings logged to ``log_path``. Polls its gRPC port until it answers (up to 30 s);
    terminates the process by its PID on exit (kill after 10 s); if it died before, prints
    its exit status and last log lines.

    Raises:
        RuntimeError: the switch exited or did not answer.
    """
    address = f"127.0.0.1:{free_port()}"
    cmd = [binary, "--no-p4", "--device-id", "0", "--log-console", "--log-level", "warn",
           "--thrift-port", str(free_port())]
    for port, iface in enumerate(interfaces, start=1):
        cmd += ["-i", f"{port}@{iface}"]
    cmd += ["--", "--grpc-server-addr", address, *target_options()]
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            channel = grpc.insecure_channel(address)
            try:
                grpc.channel_ready_future(channel).result(timeout=30)
            except grpc.FutureTimeoutError:
                raise RuntimeError(f"simple_switch_grpc did not answer on {address} "
                                   f"(exit status {proc.poll()}); log: {log_path}") from None
            finally:
                channel.close()
            yield RunningSwitch(address, proc.pid)
        finally:
            if proc.poll() is not None:  # it died under us: say how
                tail = log_path.read_text(errors="replace").splitlines()[-15:]
                print(f"simple_switch_grpc exited with status {proc.returncode}; last log lines:\n  "
                      + "\n  ".join(tail), file=sys.stderr)
            else:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


# ---------------------------------------------------------------------------- updates


def grant_entry(flow_id: int, rate_bps: int, epoch: int, slot: int) -> TableEntry:
    """A flow_grant entry as ``Scheduler._grant_entry`` builds it (10 ms lease)."""
    return TableEntry(n.FLOW_GRANT, {n.F_FLOW_ID: flow_id}, n.ACT_SET_GRANT, {
        "rate_kbps": rate_bps_to_kbps(rate_bps), "epoch": epoch, "lease_us": lease_ns_to_us(10 * MS),
        "meter_slot": slot})


def grant_updates(count: int, op: Op, version: int) -> list[Update]:
    """``op`` of the grants of flows 1..count (slot = flow id); ``version`` changes the rate."""
    return [Update(op, grant_entry(f, 1_000_000_000 + 1_000 * (version % 997) + f, 1 + version, f))
            for f in range(1, count + 1)]


def meter_updates(cfg: SchedulerConfig, count: int, version: int) -> list[Update]:
    """MeterConfig MODIFYs of flow_meter slots 1..count (``SchedulerConfig.meter_for``)."""
    return [Update(Op.MODIFY, cfg.meter_for(slot, 1_000_000_000 + 8_000 * (version % 997) + slot))
            for slot in range(1, count + 1)]


def encode_request(index: P4InfoIndex, updates: Sequence[Update]) -> dict[str, float]:
    """Thread CPU seconds to encode each update (``encode``), build the WriteRequest as
    ``SwitchClient.write`` does (``build``) and serialise it (``serialize``); their sum
    (``total``), its wall time (``total_wall``) and the request's size in bytes (``bytes``)."""
    w0, c0 = time.perf_counter(), time.thread_time()
    encoded = [encode_update(index, u) for u in updates]
    c1 = time.thread_time()
    req = p4runtime_pb2.WriteRequest(device_id=0, election_id=p4runtime_pb2.Uint128(high=0, low=1),
                                     atomicity=p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR)
    req.updates.extend(encoded)
    c2 = time.thread_time()
    wire = req.SerializeToString()
    c3, w3 = time.thread_time(), time.perf_counter()
    return {"encode": c1 - c0, "build": c2 - c1, "serialize": c3 - c2, "total": c3 - c0, "total_wall": w3 - w0,
            "bytes": float(len(wire))}


@dataclass
class SizeSeries:
    """Samples (seconds) per batch size."""

    samples: dict[int, list[float]] = field(default_factory=dict)

    def add(self, size: int, value: float) -> None:
        self.samples.setdefault(size, []).append(value)

    def medians(self, scale: float = 1.0) -> dict[int, float]:
        return {size: statistics.median(v) * scale for size, v in sorted(self.samples.items())}

    def medians_ns(self) -> dict[int, float]:
        return self.medians(1e9)


def bench_writes(target: P4RuntimeTarget, switch_pid: int, cfg: SchedulerConfig, rounds: int, rng: random.Random
                 ) -> tuple[dict[str, dict[str, SizeSeries]], dict[str, dict[str, SizeSeries]]]:
    """(encode, write) samples per kind (grant, meter) and size, in ``rounds`` rounds of every
    size in shuffled order. Each sample encodes the updates (:func:`encode_request`, no I/O)
    and then writes them (``P4RuntimeTarget.write``: wall time, client-thread CPU and the
    switch process's CPU), so the two see the same machine load. Inserts the grants of flows
    1..max once first."""
    target.write(grant_updates(max(WRITE_SIZES), Op.INSERT, 0))
    parts = ("encode", "build", "serialize", "total", "total_wall", "bytes")
    enc = {kind: {part: SizeSeries() for part in parts} for kind in ("grant", "meter")}
    out = {kind: {"wall": SizeSeries(), "cpu": SizeSeries(), "switch_cpu": SizeSeries()} for kind in ("grant", "meter")}
    for r in range(1, rounds + 1):
        sizes = list(WRITE_SIZES)
        rng.shuffle(sizes)
        for size in sizes:
            for kind, updates in (("grant", grant_updates(size, Op.MODIFY, r)), ("meter", meter_updates(cfg, size, r))):
                for part, value in encode_request(target.index, updates).items():
                    enc[kind][part].add(size, value)
                s0 = process_cpu_s(switch_pid)
                c0, t0 = time.thread_time(), time.perf_counter()
                target.write(updates)
                t1, c1 = time.perf_counter(), time.thread_time()
                s1 = process_cpu_s(switch_pid)
                out[kind]["wall"].add(size, t1 - t0)
                out[kind]["cpu"].add(size, c1 - c0)
                out[kind]["switch_cpu"].add(size, s1 - s0)
    return enc, out


def bench_reads(target: P4RuntimeTarget, switch_pid: int, rounds: int, rng: random.Random
                ) -> tuple[SizeSeries, SizeSeries, SizeSeries]:
    """(wall, client-thread CPU, switch process CPU) seconds of ``read_counter_cells(flow_bytes,
    0..n-1)`` per n."""
    out, client_cpu, switch_cpu = SizeSeries(), SizeSeries(), SizeSeries()
    for _ in range(rounds):
        sizes = list(READ_SIZES)
        rng.shuffle(sizes)
        for size in sizes:
            s0 = process_cpu_s(switch_pid)
            c0, t0 = time.thread_time(), time.perf_counter()
            cells = target.read_counter_cells(n.FLOW_BYTES, range(size))
            t1, c1 = time.perf_counter(), time.thread_time()
            out.add(size, t1 - t0)
            client_cpu.add(size, c1 - c0)
            switch_cpu.add(size, process_cpu_s(switch_pid) - s0)
            if len(cells) != size:
                raise RuntimeError(f"read_counter_cells answered {len(cells)} cells for {size}")
    return out, client_cpu, switch_cpu


# ---------------------------------------------------------------------------- digests


class GrantListener:
    """Timestamps (perf_counter) the first GRANT of each flow received on ``iface``."""

    def __init__(self, iface: str) -> None:
        self.first: dict[int, float] = {}
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self._sock.bind((iface, 0))
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="grant-listener")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                frame, addr = self._sock.recvfrom(2048)
            except TimeoutError:
                continue
            except OSError:
                return
            now = time.perf_counter()
            if addr[2] == PACKET_OUTGOING or len(frame) < 78 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
                continue
            udp = 14 + (frame[14] & 0x0F) * 4
            safs = udp + 8
            if len(frame) < safs + 8 or int.from_bytes(frame[udp + 2:udp + 4], "big") != SAFS_UDP_PORT:
                continue
            if frame[safs] & 0x0F == MsgType.GRANT.value:
                self.first.setdefault(int.from_bytes(frame[safs + 4:safs + 8], "big"), now)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()


def request_frame(flow_id: int, version: int) -> bytes:
    """A SAFS REQUEST from the sender to the receiver, header version ``version``."""
    hdr = SAFS(version=version, type=MsgType.REQUEST.value, flow_id=flow_id, remaining_bytes=1 << 20,
               timestamp_ns=123_456_789)
    return bytes(pkt_add_safs(SENDER_IP, RECEIVER_IP, hdr, src_mac=SENDER_MAC, dst_mac=SWITCH_MAC))


def ip_int(ip: str) -> int:
    a, b, c, d = (int(x) for x in ip.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def install_digest_path(target: P4RuntimeTarget) -> None:
    """Routes, grant route, receiver port and default grant, as ptf_tests/grants.py sets them."""
    target.write([
        Update(Op.INSERT, TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(ip_int("10.0.1.0"), 24)}, n.ACT_SET_EGRESS,
                                     {"port": PORT_SENDER, "dst_mac": mac_int(SENDER_MAC)})),
        Update(Op.INSERT, TableEntry(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(ip_int("10.0.2.0"), 24)}, n.ACT_SET_EGRESS,
                                     {"port": PORT_RECEIVER, "dst_mac": mac_int(RECEIVER_MAC)})),
        Update(Op.INSERT, TableEntry(n.GRANT_ROUTE, {n.F_SRC_ADDR: Lpm(ip_int("10.0.1.0"), 24)},
                                     n.ACT_SET_GRANT_ROUTE, {"port": PORT_SENDER, "dst_mac": mac_int(SENDER_MAC)})),
        Update(Op.INSERT, TableEntry(n.RECEIVER_PORT, {n.F_EGRESS_PORT: PORT_RECEIVER}, n.ACT_MARK_RECEIVER)),
        Update(Op.MODIFY, TableEntry(n.DEFAULT_GRANT, {}, n.ACT_SET_DEFAULT_GRANT,
                                     {"rate_kbps": 10_000, "lease_us": 500, "meter_slot": 0}, is_default=True)),
    ])


def probe_version(sock: socket.socket, listener: GrantListener, first_flow: int) -> int:
    """The SAFS header version the pushed program answers: a REQUEST of each candidate
    (``SAFS_VERSION`` first) until a GRANT comes back within 0.5 s.

    Raises:
        RuntimeError: no candidate got a GRANT.
    """
    candidates = [SAFS_VERSION] + [v for v in range(1, 16) if v != SAFS_VERSION]
    for i, version in enumerate(candidates):
        flow = first_flow + i
        sock.send(request_frame(flow, version))
        deadline = time.perf_counter() + 0.5
        while time.perf_counter() < deadline:
            if flow in listener.first:
                return version
            time.sleep(0.002)
    raise RuntimeError("no GRANT for a SAFS REQUEST of any header version: the switch does not answer")


@dataclass
class DigestResult:
    """Latencies (ms) of one digest case."""

    label: str
    max_timeout_ns: int
    max_list_size: int
    ack_timeout_ns: int
    back_to_back: bool
    asked: bool
    digest_ms: list[float] = field(default_factory=list)
    grant_ms: list[float] = field(default_factory=list)
    after_grant_ms: list[float] = field(default_factory=list)  # digest arrival - GRANT arrival, same flow
    lost: int = 0
    sent: int = 0


def wait_digests(target: P4RuntimeTarget, pending: dict[int, float], until: float, got: dict[int, float],
                 want_one: int | None = None) -> None:
    """Poll digests into ``got`` (flow -> arrival perf_counter) for flows in ``pending`` until
    ``until`` or (with ``want_one``) that flow arrived. Other flows' digests are dropped."""
    while True:
        left = until - time.perf_counter()
        if left <= 0:
            return
        digests = target.poll_digests(timeout_s=min(left, 0.5))
        now = time.perf_counter()
        for d in digests:
            if d.flow_id in pending and d.flow_id not in got:
                got[d.flow_id] = now
        if want_one is not None and want_one in got:
            return
        if want_one is None and all(f in got for f in pending):
            return


def bench_digest_case(target: P4RuntimeTarget, sock: socket.socket, listener: GrantListener, case: DigestCase,
                      version: int, first_flow: int, samples: int, rng: random.Random) -> DigestResult:
    """Configure ``case``'s DigestEntry and measure ``samples`` REQUEST -> digest latencies."""
    s = case.settings
    target.digest_settings = s
    target.configure_digests()
    target.poll_digests(0.0)  # drop what earlier cases left
    res = DigestResult(case.label, s.max_timeout_ns, s.max_list_size, s.ack_timeout_ns, case.back_to_back, case.asked)
    sent: dict[int, float] = {}
    got: dict[int, float] = {}
    lost_in_row = 0
    flows = list(range(first_flow, first_flow + samples))
    i = 0
    while i < len(flows):
        if lost_in_row >= 2:  # the rest 10 ms apart, awaited together
            for flow in flows[i:]:
                frame = request_frame(flow, version)
                sent[flow] = time.perf_counter()
                sock.send(frame)
                time.sleep(0.01)
            wait_digests(target, {f: sent[f] for f in flows[i:]}, time.perf_counter() + DIGEST_LOST_S, got)
            break
        if not case.back_to_back:
            time.sleep(rng.uniform(0.0, 0.1))
        flow = flows[i]
        frame = request_frame(flow, version)
        sent[flow] = time.perf_counter()
        sock.send(frame)
        wait_digests(target, {flow: sent[flow]}, sent[flow] + DIGEST_LOST_S, got, want_one=flow)
        lost_in_row = 0 if flow in got else lost_in_row + 1
        i += 1
    res.sent = len(sent)
    for flow, t0 in sent.items():
        if flow in got:
            res.digest_ms.append((got[flow] - t0) * 1e3)
        else:
            res.lost += 1
        if flow in listener.first:
            res.grant_ms.append((listener.first[flow] - t0) * 1e3)
            if flow in got:
                res.after_grant_ms.append((got[flow] - listener.first[flow]) * 1e3)
    return res


# ---------------------------------------------------------------------------- hint API


@dataclass
class HintResult:
    """Announce round trips and controller CPU per announce (seconds)."""

    admit_on_request: bool
    rpc_s: list[float] = field(default_factory=list)
    controller_cpu_s: list[float] = field(default_factory=list)
    handler_cpu_s: list[float] = field(default_factory=list)
    client_cpu_s: list[float] = field(default_factory=list)
    run_loop_cpu_per_s: float = 0.0
    table_updates: int = 0
    meter_updates: int = 0


def bench_hints(address: str, work_dir: Path, admit_on_request: bool, count: int, warmup: int = 10) -> HintResult:
    """``count`` announces (after ``warmup``) to a ControllerApp driving the switch as tor1."""
    topo = work_dir / "topology.yaml"
    topo.write_text(TOPOLOGY_YAML)
    config = ControllerConfig(topology_path=topo, switches=(SwitchSpec("tor1", address, 0),),
                              p4info_path=P4INFO, bmv2_json_path=BMV2_JSON, hint_addr="127.0.0.1:0",
                              scheduler=SchedulerConfig(admit_on_request=admit_on_request), election_id=(0, 10))
    app = ControllerApp(config)
    app.start()
    stop = threading.Event()
    runner = threading.Thread(target=app.run, args=(stop,), daemon=True, name="controller")
    runner.start()
    out = HintResult(admit_on_request)
    assert runner.ident is not None and app.scheduler is not None
    loop_id = runner.ident

    def handler_cpu() -> float:
        return sum(thread_cpu_s(t.ident) for t in threading.enumerate()
                   if t.name.startswith("safs-hint-rpc") and t.ident is not None)

    try:
        with HintClient(app.hint_address) as hints:
            if not hints.wait_ready(10):
                raise RuntimeError("the hint API did not answer")
            stats0 = None
            loop0 = wall0 = 0.0
            for i in range(warmup + count):
                if i == warmup:
                    s = app.scheduler.stats
                    stats0 = (s.table_updates, s.meter_updates)
                    loop0, wall0 = thread_cpu_s(loop_id), time.perf_counter()
                flow_id = 1 + i
                hint = FlowHint(flow_id, "a", "d", 1 << 20, app.clock() + 50 * MS, f"fit/{flow_id}")
                p0, m0, l0, h0 = time.process_time(), time.thread_time(), thread_cpu_s(loop_id), handler_cpu()
                t0 = time.perf_counter()
                hints.announce(hint)
                t1 = time.perf_counter()
                h1, l1, m1, p1 = handler_cpu(), thread_cpu_s(loop_id), time.thread_time(), time.process_time()
                if i >= warmup:
                    out.rpc_s.append(t1 - t0)
                    out.controller_cpu_s.append((p1 - p0) - (m1 - m0) - (l1 - l0))
                    out.handler_cpu_s.append(h1 - h0)
                    out.client_cpu_s.append(m1 - m0)
                hints.complete(flow_id)
            out.run_loop_cpu_per_s = (thread_cpu_s(loop_id) - loop0) / (time.perf_counter() - wall0)
            s = app.scheduler.stats
            assert stats0 is not None
            out.table_updates, out.meter_updates = s.table_updates - stats0[0], s.meter_updates - stats0[1]
    finally:
        stop.set()
        runner.join(timeout=10)
        app.stop()
    return out


# ---------------------------------------------------------------------------- report


@dataclass
class Row:
    """One line of the table."""

    figure: str
    value: str
    units: str
    how: str


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    loadavg: list[tuple[str, float, tuple[float, float, float]]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def row(self, figure: str, value: float | str, units: str, how: str, key: str | None = None) -> None:
        text = value if isinstance(value, str) else f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
        self.rows.append(Row(figure, text, units, how))
        if key is not None:
            self.figures[key] = value

    def load(self, phase: str) -> None:
        """Record the load average at the end of ``phase`` (and the seconds since the start)."""
        self.loadavg.append((phase, time.perf_counter() - self.started, os.getloadavg()))


def _us(fit: LineFit) -> str:
    return f"{fit.a / 1e3:.1f} + {fit.b / 1e3:.1f}*n"


def report_fits(rep: Report, encode: dict[str, dict[str, SizeSeries]], writes: dict[str, dict[str, SizeSeries]],
                reads: tuple[SizeSeries, SizeSeries, SizeSeries]) -> None:
    """Rows and figures of the encode, write and read phases. Lines are fitted through the
    per-n medians with residuals weighted by 1 / (median write time): relative least squares,
    since the spread grows with n and a plain fit lets n=256 decide the intercept (the plain
    fits are in the JSON details)."""
    sizes = list(WRITE_SIZES)
    for kind, what in (("grant", "flow_grant MODIFY"), ("meter", "flow_meter MeterConfig MODIFY")):
        enc = encode[kind]["total"].medians_ns()
        wall = writes[kind]["wall"].medians_ns()
        cpu = writes[kind]["cpu"].medians_ns()
        sw_cpu = writes[kind]["switch_cpu"].medians_ns()
        weights = [1.0 / wall[s] for s in sizes]
        enc_fit = fit_line(sizes, [enc[s] for s in sizes], weights)
        upd_fit = fit_line(sizes, [encode[kind]["encode"].medians_ns()[s] for s in sizes], weights)
        ser_fit = fit_line(sizes, [encode[kind]["serialize"].medians_ns()[s] for s in sizes], weights)
        size_fit = fit_line(sizes, [encode[kind]["bytes"].medians()[s] for s in sizes])
        wall_fit = fit_line(sizes, [wall[s] for s in sizes], weights)
        sw_fit = fit_line(sizes, [wall[s] - enc[s] for s in sizes], weights)
        wait_fit = fit_line(sizes, [wall[s] - cpu[s] for s in sizes], weights)
        cpu_fit = fit_line(sizes, [cpu[s] for s in sizes], weights)
        sw_cpu_fit = fit_line(sizes, [sw_cpu[s] for s in sizes], weights)
        sfx = "" if kind == "grant" else "_meter"
        rep.row(f"controller encode, {kind} ({what})", _us(enc_fit), "µs",
                f"thread CPU of encode_update + WriteRequest + SerializeToString, n=1..256 (R² {enc_fit.r2:.3f}); "
                f"encode_update {upd_fit.b / 1e3:.1f}/upd, serialize {ser_fit.b / 1e3:.1f}/upd; "
                f"{size_fit.b:.0f} B/upd + {size_fit.a:.0f} B")
        rep.figures[f"controller_encode_request_ns{sfx}"] = enc_fit.a
        rep.figures[f"controller_encode_update_ns{sfx}"] = enc_fit.b
        rep.row(f"write() wall, {kind}", _us(wall_fit), "µs",
                f"P4RuntimeTarget.write of n updates, per-n medians (R² {wall_fit.r2:.4f})")
        rep.row(f"switch_request_ns + n*switch_update_ns, {kind}", _us(sw_fit), "µs",
                f"fit of write wall - encode CPU per n (R² {sw_fit.r2:.3f}); "
                f"cross-check wall - client CPU in write: {_us(wait_fit)}")
        rep.row(f"BMv2 process CPU per write, {kind}", _us(sw_cpu_fit), "µs",
                f"/proc/PID/task/*/schedstat of simple_switch_grpc around each write (R² {sw_cpu_fit.r2:.3f})")
        rep.figures[f"switch_request_ns{sfx}"] = sw_fit.a
        rep.figures[f"switch_update_ns{sfx}"] = sw_fit.b
        # The alternative split: all client-thread CPU of write() (encode + gRPC's own work) is
        # the controller's; the switch part is the rest of the wall time.
        rep.figures[f"controller_write_cpu_request_ns{sfx}"] = cpu_fit.a
        rep.figures[f"controller_write_cpu_update_ns{sfx}"] = cpu_fit.b
        rep.figures[f"switch_wait_request_ns{sfx}"] = wait_fit.a
        rep.figures[f"switch_wait_update_ns{sfx}"] = wait_fit.b
        rep.row(f"single-update request, {kind}", f"{wall[1] / 1e3:.0f} ({(wall[1] - enc[1]) / 1e3:.0f})", "µs",
                "median write() of n=1 (after encode)")
        rep.figures[f"single_update_request_ns{sfx}"] = wall[1]
        switch_part = {s: wall[s] - enc[s] for s in sizes}
        plain = {name: asdict(fit_line(sizes, [series[s] for s in sizes]))
                 for name, series in (("write", wall), ("encode", enc), ("switch", switch_part))}
        rep.details[f"write_{kind}"] = {
            "sizes": sizes, "samples_per_size": len(writes[kind]["wall"].samples[1]),
            "encode_samples_per_size": len(encode[kind]["total"].samples[1]),
            "write_median_ns": wall, "encode_cpu_median_ns": enc, "client_cpu_in_write_median_ns": cpu,
            "encode_wall_median_ns": encode[kind]["total_wall"].medians_ns(),
            "request_bytes_median": encode[kind]["bytes"].medians(),
            "fit_write": asdict(wall_fit), "fit_encode": asdict(enc_fit), "fit_switch": asdict(sw_fit),
            "fit_wall_minus_client_cpu": asdict(wait_fit), "fit_client_cpu_in_write": asdict(cpu_fit),
            "switch_cpu_median_ns": sw_cpu, "fit_switch_cpu": asdict(sw_cpu_fit),
            "fit_unweighted": plain,
            "encode_parts_cpu_median_ns": {part: encode[kind][part].medians_ns()
                                           for part in ("encode", "build", "serialize")}}
    rsizes = list(READ_SIZES)
    reads_wall, reads_client_cpu, reads_switch_cpu = reads
    rmed = reads_wall.medians_ns()
    rfit = fit_line(rsizes, [rmed[s] for s in rsizes], [1.0 / rmed[s] for s in rsizes])
    rep.row("read_request_ns + n*read_cell_ns", _us(rfit), "µs",
            f"read_counter_cells(flow_bytes, n), n=1,8,64,256, per-n medians (R² {rfit.r2:.4f}); "
            f"n=1 median {rmed[1] / 1e3:.0f}")
    rep.figures["read_request_ns"] = rfit.a
    rep.figures["read_cell_ns"] = rfit.b
    rcpu = reads_switch_cpu.medians_ns()
    rcpu_fit = fit_line(rsizes, [rcpu[s] for s in rsizes], [1.0 / rmed[s] for s in rsizes])
    ccpu = reads_client_cpu.medians_ns()
    ccpu_fit = fit_line(rsizes, [ccpu[s] for s in rsizes], [1.0 / rmed[s] for s in rsizes])
    rep.row("counter read: client CPU | BMv2 CPU", f"{_us(ccpu_fit)} | {_us(rcpu_fit)}", "µs",
            f"thread_time in read_counter_cells (R² {ccpu_fit.r2:.3f}) | schedstat (R² {rcpu_fit.r2:.3f})")
    rep.details["read_counter_cells"] = {"sizes": rsizes, "median_ns": rmed, "fit": asdict(rfit),
                                         "switch_cpu_median_ns": rcpu, "fit_switch_cpu": asdict(rcpu_fit),
                                         "client_cpu_median_ns": ccpu, "fit_client_cpu": asdict(ccpu_fit),
                                         "fit_unweighted": asdict(fit_line(rsizes, [rmed[s] for s in rsizes])),
                                         "samples_per_size": len(reads_wall.samples[1])}


def report_digests(rep: Report, results: list[DigestResult], version: int) -> None:
    rep.details["digest_header_version"] = version
    rep.details["digests"] = []
    for r in results:
        med = statistics.median(r.digest_ms) if r.digest_ms else float("nan")
        p99 = percentile(r.digest_ms, 99) if r.digest_ms else float("nan")
        grant = statistics.median(r.grant_ms) if r.grant_ms else float("nan")
        after = statistics.median(r.after_grant_ms) if r.after_grant_ms else float("nan")
        tag = "" if r.asked else " [extra]"
        rep.row(f"digest ({r.label}){tag}",
                f"{med:.2f} / {p99:.2f}" if r.digest_ms else "-", "ms",
                f"p50 / p99 send->poll_digests, {len(r.digest_ms)}/{r.sent} arrived, {r.lost} lost (>2 s); "
                f"GRANT back p50 {grant:.2f} ms, digest - GRANT p50 {after:.2f} ms")
        rep.details["digests"].append({**asdict(r), "median_ms": med, "p99_ms": p99, "grant_median_ms": grant,
                                       "after_grant_median_ms": after})
    by_label = {r.label: r for r in results}
    default = by_label.get(DIGEST_CASES[0].label)
    fast = by_label.get(DIGEST_CASES[2].label)
    if default and default.digest_ms:
        rep.figures["digest_latency_ns"] = statistics.median(default.digest_ms) * 1e6
        rep.figures["digest_latency_p99_ns"] = percentile(default.digest_ms, 99) * 1e6
    if fast and fast.digest_ms:
        rep.figures["digest_latency_ns_list_size_1"] = statistics.median(fast.digest_ms) * 1e6
        rep.figures["digest_latency_p99_ns_list_size_1"] = percentile(fast.digest_ms, 99) * 1e6


def report_hints(rep: Report, results: list[HintResult]) -> None:
    for r in results:
        mode = "record only (admit_on_request)" if r.admit_on_request else "admit_on_request=False (writes grant)"
        key = "" if r.admit_on_request else "_admit"
        rpc_us = [v * 1e6 for v in r.rpc_s]
        cpu_us = [v * 1e6 for v in r.controller_cpu_s]
        rep.row(f"hint announce RPC, {mode}", f"{statistics.median(rpc_us):,.0f} / {percentile(rpc_us, 99):,.0f}",
                "µs", f"p50 / p99 HintClient.announce round trip, {len(rpc_us)} flows "
                f"({r.table_updates} table + {r.meter_updates} meter updates written)")
        rep.row(f"controller CPU per announce, {mode}", statistics.median(cpu_us), "µs",
                f"process CPU - client thread - run loop during the call (handler threads alone "
                f"{statistics.median(r.handler_cpu_s) * 1e6:,.0f} µs; run loop {r.run_loop_cpu_per_s * 100:.1f}% "
                f"of a core)")
        rep.figures[f"hint_rpc_ns{key}"] = statistics.median(rpc_us) * 1e3
        rep.figures[f"hint_rpc_p99_ns{key}"] = percentile(rpc_us, 99) * 1e3
        rep.figures[f"hint_controller_cpu_ns{key}"] = statistics.median(cpu_us) * 1e3
        rep.details[f"hint{key or '_record'}"] = {
            "announces": len(rpc_us), "rpc_median_us": statistics.median(rpc_us),
            "rpc_p99_us": percentile(rpc_us, 99), "controller_cpu_median_us": statistics.median(cpu_us),
            "handler_cpu_median_us": statistics.median(r.handler_cpu_s) * 1e6,
            "client_cpu_median_us": statistics.median(r.client_cpu_s) * 1e6,
            "run_loop_cpu_fraction": r.run_loop_cpu_per_s, "table_updates": r.table_updates,
            "meter_updates": r.meter_updates}


def print_report(rep: Report, elapsed_s: float) -> None:
    print(f"bmv2 control profile (simple_switch_grpc, {os.cpu_count()} CPUs), {elapsed_s:.0f} s")
    w_fig = max(len(r.figure) for r in rep.rows)
    w_val = max(len(r.value) for r in rep.rows)
    w_unit = max(len(r.units) for r in rep.rows)
    for r in rep.rows:
        print(f"  {r.figure:<{w_fig}}  {r.value:>{w_val}} {r.units:<{w_unit}}  {r.how}")
    loads = "; ".join(f"{phase}@{t:.0f}s {a:.2f}/{b:.2f}/{c:.2f}" for phase, t, (a, b, c) in rep.loadavg)
    print(f"  load average (1/5/15 min) at the end of each phase: {loads}")


# ---------------------------------------------------------------------------- main


def _sigterm(_signum: int, _frame: object) -> None:
    raise SystemExit(143)  # unwinds through the finally blocks: switch stopped, veths deleted


def run(args: argparse.Namespace, binary: str, rep: Report) -> None:
    rng = random.Random(args.seed)
    cfg = SchedulerConfig()
    rep.load("start")
    backend = api_implementation.Type()
    rep.details["protobuf_backend"] = backend
    rep.row("protobuf backend", backend, "", "google.protobuf api_implementation.Type() of this Python: "
            "encode and serialize costs depend on it")
    root = os.geteuid() == 0
    if not root:
        print("fit_control_profile: not root: no veths, the digest phase is skipped", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="fit_control_profile_") as tmp:
        work_dir = Path(tmp)
        prefix = f"fcp{os.getpid() % 100000}"
        with veth_pairs(2 if root else 0, prefix) as pairs, \
                bmv2_switch(binary, [sw for sw, _ in pairs], work_dir / "bmv2.log") as switch:
            with P4RuntimeTarget("tor1", switch.address, 0, P4INFO, BMV2_JSON, election_id=(0, 1)) as target:
                target.push_pipeline()
                encode, writes = bench_writes(target, switch.pid, cfg, args.rounds, rng)
                rep.load("writes")
                reads = bench_reads(target, switch.pid, args.rounds, rng)
                rep.load("reads")
                report_fits(rep, encode, writes, reads)
                if root:
                    digests, version = bench_digests(target, pairs[0][1], args.digest_samples, rng)
                    rep.load("digests")
                    report_digests(rep, digests, version)
            hints = [bench_hints(switch.address, work_dir, admit, args.announces) for admit in (True, False)]
            rep.load("hints")
            report_hints(rep, hints)


def bench_digests(target: P4RuntimeTarget, peer: str, samples: int, rng: random.Random
                  ) -> tuple[list[DigestResult], int]:
    """Every :data:`DIGEST_CASES` case through port 1 (its peer veth ``peer``)."""
    install_digest_path(target)
    listener = GrantListener(peer)
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        sock.bind((peer, 0))
        target.digest_settings = DigestSettings(1 * MS, 1, 50 * MS, bmv2_checks=False)
        target.configure_digests()
        version = probe_version(sock, listener, 9_000_000)
        results = [bench_digest_case(target, sock, listener, case, version, 100_000 * (k + 1), samples, rng)
                   for k, case in enumerate(DIGEST_CASES)]
        # List size 1 again: BMv2 hands over what a case left buffered (LearnList::set_max_samples).
        target.digest_settings = DigestSettings(1 * MS, 1, 50 * MS, bmv2_checks=False)
        target.configure_digests()
        target.poll_digests(0.2)
    finally:
        sock.close()
        listener.close()
    return results, version


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--rounds", type=int, default=40, help="encode, write and read samples per batch size")
    parser.add_argument("--digest-samples", type=int, default=25, help="REQUESTs per digest setting (>= 20)")
    parser.add_argument("--announces", type=int, default=250, help="announces per admit mode")
    parser.add_argument("--seed", type=int, default=1, help="seed of the shuffles and gaps")
    args = parser.parse_args()
    for name in ("rounds", "digest_samples", "announces"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    binary = shutil.which("simple_switch_grpc")
    if binary is None:
        print("fit_control_profile: simple_switch_grpc is not on PATH", file=sys.stderr)
        return 2
    for path in (P4INFO, BMV2_JSON):
        if not path.is_file():
            print(f"fit_control_profile: missing compiled artifact {path}", file=sys.stderr)
            return 2
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("safs.control.controller").setLevel(logging.ERROR)  # unmanaged tor0: noise
    signal.signal(signal.SIGTERM, _sigterm)
    rep = Report()
    start = time.perf_counter()
    run(args, binary, rep)
    elapsed = time.perf_counter() - start
    print_report(rep, elapsed)
    if args.out is not None:
        doc = {"profile": "bmv2", "units": "ns unless the key says otherwise", "figures": rep.figures,
               "details": rep.details, "loadavg": [{"phase": p, "at_s": t, "1m": a, "5m": b, "15m": c}
                                                    for p, t, (a, b, c) in rep.loadavg],
               "elapsed_s": elapsed, "seed": args.seed, "args": {k: str(v) for k, v in vars(args).items()},
               "bmv2": subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()}
        args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        print(f"  figures written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

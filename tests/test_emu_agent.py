"""The host agent (safs.apps.agent) as real processes on real sockets, without Mininet or BMv2.

Two agents run on two loopback addresses of this namespace. A small GRANT responder in the test
stands where the receiver's ToR would be: senders address DATA and REQUEST to it; it answers
REQUESTs with GRANTs built with safs.core.protocol (and pushes the installed grant to DATA by the
v2 rule of the P4 program: the held rate is off, the epoch is 0 or RENEW is set, never for LAST),
forwards DATA to the receiving agent, and records arrival times, so the achieved rate is measured
on the wire. Tolerances are generous: the machine has two busy cores and the agent is Python.
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from two_tors import two_tors  # the shared two-ToR test topology

from safs.control.hintapi.server import start
from safs.core.errors import InvalidInput
from safs.core.protocol import (
    EPOCH_NONE,
    FLAG_LAST,
    FLAG_RENEW,
    FLAG_SOLE,
    HEADER_LEN,
    SAFS_UDP_PORT,
    MsgType,
    lease_ns_to_us,
    pack_header,
    rate_bps_to_kbps,
    unpack_header,
)
from safs.core.scapy_layer import parse_safs
from safs.core.scheduler import Scheduler, SchedulerConfig
from safs.core.timebase import fabric_clock
from safs.experiments.mininet.agent_control import AgentClient
from safs.experiments.mininet.driver import RealtimeNetwork
from safs.experiments.workloads.api import FlowSpec
from safs.targets.pipeline_model import PipelineModel

ETH_IP_UDP = 14 + 20 + 8  # wire bytes around the UDP payload (protocol.WIRE_OVERHEAD_BYTES - 36)
MBIT = 1_000_000


def _subnet() -> str:
    """A random 127.x.y. prefix, so concurrent runs do not share addresses."""
    return f"127.{random.randint(1, 254)}.{random.randint(1, 254)}."


def push_wanted(held_kbps: int, grant_kbps: int, epoch: int, flags: int) -> bool:
    """The receiver ToR's in-band push rule (docs/protocol.md, "What switches do")."""
    if flags & FLAG_LAST:
        return False
    # held more than 1/32 of the grant below it, or more than 1/256 above it
    off = held_kbps < grant_kbps - (grant_kbps >> 5) or held_kbps - grant_kbps > (grant_kbps >> 8)
    return off or epoch == EPOCH_NONE or bool(flags & FLAG_RENEW)


class GrantResponder:
    """Stands in for the receiver's ToR: answers REQUEST with the installed grant, pushes it to
    DATA by :func:`push_wanted`, forwards DATA to ``receiver_ip``. GRANTs echo the flow id, flags
    and dep_id of the packet that triggered them, but not FLAG_SOLE: on a GRANT it says "wait for
    the port's holder", and this stand-in has no holder (the P4 program clears it likewise).

    ``answering`` False: no GRANTs at all (a dead controller/switch path); DATA still flows.
    ``drop_every`` N > 0: drop every Nth DATA packet (never forwarded).
    """

    def __init__(self, ip: str, receiver_ip: str, rate_bps: int, epoch: int = 1, lease_ns: int = 50_000_000,
                 drop_every: int = 0) -> None:
        self.receiver_ip = receiver_ip
        self.rate_bps, self.epoch, self.lease_ns = rate_bps, epoch, lease_ns
        self.answering = True
        self.drop_every = drop_every
        self.requests: list[float] = []
        self.data: list[tuple[float, int, int]] = []  # (monotonic s, wire bytes, epoch)
        self.flags: list[tuple[int, int, int]] = []  # (flow_id, flags, dep_id) of every DATA
        self.pushes = 0
        self.renewals = 0  # DATA with RENEW, answered
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((ip, SAFS_UDP_PORT))
        self.sock.settimeout(0.05)
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def install(self, rate_bps: int, epoch: int, lease_ns: int | None = None) -> None:
        self.rate_bps, self.epoch = rate_bps, epoch
        if lease_ns is not None:
            self.lease_ns = lease_ns

    def close(self) -> None:
        self.running = False
        self.thread.join(2)
        self.sock.close()

    def _grant(self, addr: tuple[str, int], flow_id: int, remaining: int, flags: int, dep_id: int) -> None:
        lease = lease_ns_to_us(self.lease_ns) if self.epoch != EPOCH_NONE else 0  # the default grant: no lease
        self.sock.sendto(pack_header(MsgType.GRANT, flow_id, remaining, fabric_clock(),
                                     rate_bps_to_kbps(self.rate_bps), self.epoch, lease, flags & ~FLAG_SOLE,
                                     dep_id), addr)

    def _run(self) -> None:
        n_data = 0
        while self.running:
            try:
                raw, addr = self.sock.recvfrom(65536)
            except TimeoutError:
                continue
            now = time.monotonic()
            msg, flags, _, _, flow_id, remaining, _, held_kbps, epoch, _, _, dep_id = unpack_header(raw)
            if msg == MsgType.REQUEST:
                self.requests.append(now)
                if self.answering:
                    self._grant(addr, flow_id, remaining, flags, dep_id)
            elif msg == MsgType.DATA:
                n_data += 1
                self.data.append((now, len(raw) + ETH_IP_UDP, epoch))
                self.flags.append((flow_id, flags, dep_id))
                if self.answering and push_wanted(held_kbps, rate_bps_to_kbps(self.rate_bps), epoch, flags):
                    self.pushes += 1
                    self.renewals += bool(flags & FLAG_RENEW)
                    self._grant(addr, flow_id, remaining, flags, dep_id)
                if not (self.drop_every and n_data % self.drop_every == 0):
                    self.sock.sendto(raw, (self.receiver_ip, SAFS_UDP_PORT))

    def rate_bps_between(self, t0: float, t1: float) -> float:
        """Wire rate of the DATA that arrived in [t0, t1) (monotonic s), bit/s."""
        got = sum(size for t, size, _ in self.data if t0 <= t < t1)
        return got * 8 / (t1 - t0)


class Agents:
    """Agent processes of one test; each is stopped with SIGTERM at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(self, name: str, ip: str, *extra: str, prefix: tuple[str, ...] = ()) -> AgentClient:
        path = self.tmp / f"{name}.sock"
        cmd = [*prefix, sys.executable, "-m", "safs.apps.agent", "--host", name, "--ip", ip,
               "--control", str(path), *extra]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append((proc, path))
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("READY "), (line, proc.stderr.read() if proc.poll() is not None else "")  # type: ignore[union-attr]
        return AgentClient.connect(path, timeout_s=10)

    def stop_all(self) -> list[int]:
        codes = []
        for proc, path in self.procs:
            if proc.poll() is None:
                proc.terminate()
            try:
                codes.append(proc.wait(10))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
            assert not path.exists(), f"{path} left behind"
        return codes


@pytest.fixture
def agents(tmp_path: Path):
    group = Agents(tmp_path)
    try:
        yield group
    finally:
        codes = group.stop_all()
    assert all(code == 0 for code in codes), codes


def wait_events(clients: list[AgentClient], want: int, timeout_s: float = 10.0) -> list[dict]:
    """Poll every agent's events until ``want`` arrived (polling, no fixed sleep)."""
    got: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for c in clients:
            got += c.events()
        time.sleep(0.005)
    return got


def _by_role(events: list[dict]) -> dict[str, dict]:
    return {e["role"]: e for e in events if e["event"] == "done"}


# ---- wire helpers ----------------------------------------------------------------------------
def test_pack_header_matches_scapy_parser() -> None:
    raw = pack_header(MsgType.GRANT, 0xDEADBEEF, (1 << 48) - 3, (1 << 47) + 5, 123456, 7, 9999, flags=1,
                      dep_id=0xBEEF)
    h = parse_safs(raw)
    assert len(raw) == HEADER_LEN
    assert (h.type, h.flow_id, h.remaining_bytes, h.timestamp_ns, h.rate_kbps, h.epoch, h.lease_us, h.flags,
            h.dep_id, h.version) == (MsgType.GRANT, 0xDEADBEEF, (1 << 48) - 3, (1 << 47) + 5, 123456, 7, 9999, 1,
                                     0xBEEF, 2)
    fields = unpack_header(h.to_bytes())
    assert fields[:2] == (int(MsgType.GRANT), 1) and fields[4:10] == (0xDEADBEEF, (1 << 48) - 3, (1 << 47) + 5,
    123456, 7, 9999) and fields[11] == 0xBEEF


# ---- SAFS sender against the in-test responder -----------------------------------------------
def test_paces_at_grant_renews_its_lease_in_band_and_takes_inband_push(agents: Agents) -> None:
    net = _subnet()
    a_ip, b_ip, sw_ip = net + "1", net + "2", net + "3"
    default, granted, pushed = 5 * MBIT, 20 * MBIT, 40 * MBIT
    lease_ns = 100_000_000  # renewal due at 75 ms: 25 ms for the GRANT on two busy cores (40 ms was flaky)
    sw = GrantResponder(sw_ip, b_ip, granted, epoch=1, lease_ns=lease_ns)
    try:
        common = ("--default-rate-bps", str(default), "--line-rate-bps", str(100 * MBIT))
        a = agents.start("a", a_ip, *common)
        b = agents.start("b", b_ip, *common)
        size = 2_400_000  # ~0.5 s at 20 Mbit/s, then ~0.25 s at 40 Mbit/s
        b.expect(11, a_ip, size, "safs")
        t_start = time.monotonic()
        a.send(11, sw_ip, size, "safs", no_bubble_ts_ns=fabric_clock() + 10**9, label="t/pace", dep_id=3)
        time.sleep(0.45)
        sw.install(pushed, epoch=2)  # a changed grant: reaches the sender in-band via DATA's epoch
        t_push = time.monotonic()
        events = wait_events([a, b], 2)
        done = _by_role(events)
        assert set(done) == {"sender", "receiver"}, events
        assert done["receiver"]["bytes"] == size
        t_end = sw.data[-1][0]
        rate1 = sw.rate_bps_between(t_start + 0.1, t_push)
        rate2 = sw.rate_bps_between(t_push + 0.03, t_end - 0.01)
        print(
            f"granted {granted / MBIT} Mbit/s: achieved {rate1 / MBIT:.2f}; "
            f"pushed {pushed / MBIT}: achieved {rate2 / MBIT:.2f}"
        )
        assert 0.8 * granted <= rate1 <= 1.1 * granted, rate1
        assert 0.75 * pushed <= rate2 <= 1.1 * pushed, rate2
        assert sw.pushes >= 1 and any(ep == 2 for _, _, ep in sw.data), sw.pushes
        # Grant reuse: REQUESTs only before the first GRANT (one, or on a loaded machine an
        # urgency signal too while the GRANT is late), none once DATA flows; the lease is renewed
        # in-band (RENEW on DATA, answered with a GRANT), so renewals grow with the lease, not
        # with DATA packets.
        duration = t_end - t_start
        renewals_max = duration / (0.75 * lease_ns / 1e9) + 3
        sender = done["sender"]
        assert sender["requests"] == len(sw.requests) and all(t < sw.data[0][0] for t in sw.requests), \
            (sw.requests, sw.data[0][0])
        renew = [bool(f & FLAG_RENEW) for _, f, _ in sw.flags]
        renewals = sum(1 for before, now in zip([False, *renew], renew) if now and not before)  # RENEW until a GRANT
        assert int(duration / (lease_ns / 1e9)) <= renewals <= renewals_max, (renewals, duration)
        assert sender["data_packets"] >= 20 * (1 + renewals), sender
        assert sender["fallbacks"] == 0, sender
        # every DATA names the dependency; only the last one says it goes idle
        assert {dep for _, _, dep in sw.flags} == {3}
        assert [bool(f & FLAG_LAST) for _, f, _ in sw.flags].count(True) == 1 and sw.flags[-1][1] & FLAG_LAST
        # FCT from the receiver's finish (fabric time) is consistent with the two rates.
        fct_s = (done["receiver"]["finish_ns"] - sender["start_ns"]) / 1e9
        assert 0.5 < fct_s < 1.2, fct_s
        stats = a.stats()["safs"]
        assert stats["lease_fallbacks"] == 0 and stats["grants_received"] >= sender["requests"], stats
    finally:
        sw.close()


def test_a_second_transfer_of_a_dependency_reuses_its_grant_without_a_request(agents: Agents) -> None:
    net = _subnet()
    a_ip, b_ip, sw_ip = net + "1", net + "2", net + "3"
    sw = GrantResponder(sw_ip, b_ip, 20 * MBIT, epoch=1, lease_ns=5 * 10**9)  # a lease that outlives the test
    try:
        common = ("--default-rate-bps", str(5 * MBIT), "--line-rate-bps", str(100 * MBIT))
        a = agents.start("a", a_ip, *common)
        b = agents.start("b", b_ip, *common)
        second_start = 0.0
        for fid in (13, 14):
            second_start = time.monotonic()
            b.expect(fid, a_ip, 100_000, "safs")
            a.send(fid, sw_ip, 100_000, "safs", dep_id=7)
            done = _by_role(wait_events([a, b], 2))
            assert done["receiver"]["bytes"] == 100_000, done
        # the first transfer asked (on a busy machine an urgency signal may follow while the
        # GRANT is late); the second used the held grant: no REQUEST after it started
        assert sw.requests and all(t < second_start for t in sw.requests), (sw.requests, second_start)
        epochs = [ep for (_, _, ep), (fid, _, _) in zip(sw.data, sw.flags) if fid == 14]
        assert epochs and all(ep == 1 for ep in epochs)  # from its first DATA
        assert done["sender"]["requests"] == len(sw.requests)  # the dependency's count, shared by its transfers
    finally:
        sw.close()


def test_without_polling_a_fallback_sends_one_request(agents: Agents) -> None:
    """--grant-poll-ns 0 (dependency grants): when the grants stop, the lease runs out, the
    sender falls back to the default rate and asks once, then waits without polling."""
    net = _subnet()
    a_ip, b_ip, sw_ip = net + "1", net + "2", net + "3"
    default, granted = 5 * MBIT, 20 * MBIT
    # A 100 ms lease: a renewal GRANT that a busy machine delivers tens of ms late is not a
    # lease expiry (with 30 ms this failed about half the runs beside a compiler build).
    sw = GrantResponder(sw_ip, b_ip, granted, epoch=1, lease_ns=100_000_000)
    try:
        common = ("--default-rate-bps", str(default), "--line-rate-bps", str(100 * MBIT))
        a = agents.start("a", a_ip, *common, "--grant-poll-ns", "0")
        b = agents.start("b", b_ip, *common)
        size = 900_000
        b.expect(22, a_ip, size, "safs")
        a.send(22, sw_ip, size, "safs", dep_id=2)
        time.sleep(0.15)
        assert len(sw.requests) == 1
        sw.answering = False  # the 100 ms lease runs out
        t_stop = time.monotonic()
        time.sleep(0.4)
        rate_after = sw.rate_bps_between(t_stop + 0.16, t_stop + 0.4)
        assert 0.7 * default <= rate_after <= 1.2 * default, rate_after
        assert len(sw.requests) == 2  # the fallback's one REQUEST, no polls
        assert a.stats()["safs"]["lease_fallbacks"] == 1
        sw.answering = True  # the epoch-0 DATA of the fallback get the grant pushed again
        done = _by_role(wait_events([a, b], 2))
        assert done["receiver"]["bytes"] == size and done["sender"]["fallbacks"] == 1
        assert len(sw.requests) == 2
    finally:
        sw.close()


def test_falls_back_to_default_rate_when_grants_stop(agents: Agents) -> None:
    net = _subnet()
    a_ip, b_ip, sw_ip = net + "1", net + "2", net + "3"
    default, granted = 5 * MBIT, 20 * MBIT
    sw = GrantResponder(sw_ip, b_ip, granted, epoch=1, lease_ns=30_000_000)
    try:
        common = ("--default-rate-bps", str(default), "--line-rate-bps", str(100 * MBIT))
        a = agents.start("a", a_ip, *common)
        b = agents.start("b", b_ip, *common)
        size = 900_000
        b.expect(21, a_ip, size, "safs")
        a.send(21, sw_ip, size, "safs")
        time.sleep(0.2)
        sw.answering = False  # grants stop: the 30 ms lease runs out
        t_stop = time.monotonic()
        time.sleep(0.45)
        rate_after = sw.rate_bps_between(t_stop + 0.08, t_stop + 0.45)
        polls = [t for t in sw.requests if t > t_stop + 0.08]
        print(f"after the lease: {rate_after / MBIT:.2f} Mbit/s (default {default / MBIT}), {len(polls)} REQUEST polls")
        assert 0.7 * default <= rate_after <= 1.2 * default
        assert len(polls) >= 20  # epoch 0: REQUEST every grant_poll_ns (2 ms)
        assert a.stats()["safs"]["lease_fallbacks"] >= 1
        sw.answering = True  # the grant comes back on the next poll
        done = _by_role(wait_events([a, b], 2))
        assert done["receiver"]["bytes"] == size and done["sender"]["fallbacks"] >= 1
    finally:
        sw.close()


def test_default_grant_pushed_in_band_applies_at_once(agents: Agents) -> None:
    """docs/protocol.md rule 2: an epoch-0 GRANT (the switch grants the default rate, e.g. the
    port's load is above MAX_LOAD) applies at once, even while the sender holds epoch 1 with lease
    left; it reaches the sender in-band (its held rate is off) and is not a lease fallback."""
    net = _subnet()
    a_ip, b_ip, sw_ip = net + "1", net + "2", net + "3"
    default, granted = 5 * MBIT, 25 * MBIT
    sw = GrantResponder(sw_ip, b_ip, granted, epoch=1, lease_ns=100_000_000)
    try:
        a = agents.start("a", a_ip, "--default-rate-bps", str(default))
        b = agents.start("b", b_ip)
        size = 1_000_000
        b.expect(25, a_ip, size, "safs")
        a.send(25, sw_ip, size, "safs", dep_id=4)
        time.sleep(0.15)
        sw.install(default, epoch=0)  # the next DATA holds 25 Mbit/s: the default grant is pushed
        t_removed = time.monotonic()
        time.sleep(0.4)
        rate = sw.rate_bps_between(t_removed + 0.05, t_removed + 0.4)  # well before the 75 ms renewal
        print(f"after the default grant: {rate / MBIT:.2f} Mbit/s (default {default / MBIT})")
        assert 0.7 * default <= rate <= 1.3 * default, rate
        done = _by_role(wait_events([a, b], 2))
        assert done["receiver"]["bytes"] == size and done["sender"]["fallbacks"] == 0, done
    finally:
        sw.close()


def test_zero_rate_grant_stalls_and_polls_until_a_rate_comes(agents: Agents) -> None:
    """Rate 0 = pause: only the unscheduled bytes leave, REQUESTs poll every grant_poll_ns
    (2 ms), and the next grant with a rate (epoch 2, answered to a poll) resumes the flow."""
    net = _subnet()
    a_ip, b_ip, sw_ip = net + "1", net + "2", net + "3"
    sw = GrantResponder(sw_ip, b_ip, 0, epoch=1, lease_ns=1_000_000_000)
    try:
        a = agents.start("a", a_ip, "--default-rate-bps", str(5 * MBIT), "--line-rate-bps", str(100 * MBIT))
        b = agents.start("b", b_ip)
        size = 300_000
        b.expect(27, a_ip, size, "safs")
        a.send(27, sw_ip, size, "safs")
        time.sleep(0.25)
        sent = sum(size_ - ETH_IP_UDP - HEADER_LEN for _, size_, _ in sw.data)
        polls = len(sw.requests)
        print(f"paused: {sent} payload bytes sent, {polls} REQUESTs in 0.25 s")
        assert sent <= 32_768 + 2 * 1436  # the unscheduled bytes (the grant may land mid-burst)
        assert 40 <= polls <= 200
        sw.install(20 * MBIT, epoch=2)
        done = _by_role(wait_events([a, b], 2))
        assert done["receiver"]["bytes"] == size and done["sender"]["fallbacks"] == 0
    finally:
        sw.close()


def test_lost_data_is_recovered(agents: Agents) -> None:
    net = _subnet()
    a_ip, b_ip, sw_ip = net + "1", net + "2", net + "3"
    sw = GrantResponder(sw_ip, b_ip, 40 * MBIT, drop_every=25)
    try:
        a = agents.start("a", a_ip, "--default-rate-bps", str(10 * MBIT))
        b = agents.start("b", b_ip)
        size = 300_000
        b.expect(31, a_ip, size, "safs")
        a.send(31, sw_ip, size, "safs")
        done = _by_role(wait_events([a, b], 2))
        assert done["receiver"]["bytes"] == size
        assert done["sender"]["retransmitted_bytes"] > 0
        assert b.stats()["safs"]["nacks_sent"] >= 1
    finally:
        sw.close()


# ---- TCP baseline and background -------------------------------------------------------------
def test_tcp_baseline_and_states_congestion_control(agents: Agents) -> None:
    net = _subnet()
    a = agents.start("a", net + "1")
    b = agents.start("b", net + "2")
    reply = b.expect(41, net + "1", 3_000_000, "tcp")
    a.send(41, net + "2", 3_000_000, "tcp", port=reply["port"], flow_class="background")
    done = _by_role(wait_events([a, b], 2))
    assert done["receiver"]["bytes"] == 3_000_000 and done["sender"]["transport"] == "tcp"
    tcp = a.stats()["tcp"]
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    assert tcp["tcp_congestion_control"] in available
    assert tcp["tcp_congestion_control"] == ("dctcp" if "dctcp" in available else "cubic")
    assert tcp["tcp_ecn"] in (0, 1, 2) and tcp["bytes_sent"] == 3_000_000


def test_background_generator_draws_flows_from_a_shipped_distribution(agents: Agents) -> None:
    net = _subnet()
    a = agents.start("a", net + "1")
    b = agents.start("b", net + "2")
    reply = a.background(
        dst_ips=[net + "2"],
        distribution="homa_DCTCP_MsgSizeDist.txt",
        load=0.5,
        link_rate_bps=50 * MBIT,
        duration_ns=300_000_000,
        flow_id_base=1000,
        max_size_bytes=200_000,
        seed=3,
    )
    assert reply["mean_gap_ns"] > 0
    time.sleep(0.35)
    started = a.stats()["background"][0]["started"]
    assert started >= 1
    received = [e for e in wait_events([b], started) if e["role"] == "receiver"]
    assert len(received) == started
    assert all(1000 <= e["flow_id"] < 1000 + started and 1 <= e["bytes"] <= 200_000 for e in received)


# ---- control protocol ------------------------------------------------------------------------
BAD_REQUESTS = [
    ({"op": "fly"}, "op"),
    ({"op": "send", "flow_id": 0, "dst_ip": "10.0.0.2", "size_bytes": 1, "transport": "safs"}, "flow_id"),
    ({"op": "send", "flow_id": 1, "dst_ip": "10.0.0.300", "size_bytes": 1, "transport": "safs"}, "dst_ip"),
    ({"op": "send", "flow_id": 1, "dst_ip": "10.0.0.2", "size_bytes": 0, "transport": "safs"}, "size_bytes"),
    ({"op": "send", "flow_id": 1, "dst_ip": "10.0.0.2", "size_bytes": 1, "transport": "quic"}, "transport"),
    (
        {
            "op": "send",
            "flow_id": 1,
            "dst_ip": "10.0.0.2",
            "size_bytes": 1,
            "transport": "safs",
            "flow_class": "urgent",
        },
        "flow_class",
    ),
    (
        {"op": "send", "flow_id": 1, "dst_ip": "10.0.0.2", "size_bytes": 1, "transport": "safs", "no_bubble_ts_ns": -5},
        "no_bubble_ts_ns",
    ),
    (
        {"op": "send", "flow_id": 1, "dst_ip": "10.0.0.2", "size_bytes": 1, "transport": "safs", "label": "x" * 129},
        "label",
    ),
    ({"op": "send", "flow_id": 1, "dst_ip": "10.0.0.2", "size_bytes": 1, "transport": "safs", "dep_id": 65536},
     "dep_id"),
    ({"op": "send", "flow_id": 1, "dst_ip": "10.0.0.2", "size_bytes": 1, "transport": "safs", "dep_id": -1}, "dep_id"),
    ({"op": "send", "flow_id": 1, "dst_ip": "10.0.0.2", "size_bytes": 1, "transport": "safs", "firm": 1}, "firm"),
    ({"op": "expect", "flow_id": 1, "src_ip": "10.0.0.1", "size_bytes": 1, "transport": "safs", "firm": "no"}, "firm"),
    ({"op": "expect", "flow_id": 1, "src_ip": "10.0.0.1", "size_bytes": 1 << 48, "transport": "safs"}, "size_bytes"),
    (
        {
            "op": "background",
            "dst_ips": ["10.0.0.2"],
            "distribution": "nope.txt",
            "load": 0.5,
            "link_rate_bps": 1,
            "duration_ns": 1,
            "flow_id_base": 1,
        },
        "distribution",
    ),
    (
        {
            "op": "background",
            "dst_ips": ["10.0.0.2"],
            "distribution": "homa_DCTCP_MsgSizeDist.txt",
            "load": 1.5,
            "link_rate_bps": 1,
            "duration_ns": 1,
            "flow_id_base": 1,
        },
        "load",
    ),
    (
        {
            "op": "background",
            "dst_ips": ["10.0.0.2", "ten"],
            "distribution": "homa_DCTCP_MsgSizeDist.txt",
            "load": 0.5,
            "link_rate_bps": 1,
            "duration_ns": 1,
            "flow_id_base": 1,
        },
        "dst_ips",
    ),
]


def test_bad_requests_name_the_field_and_agent_keeps_running(agents: Agents) -> None:
    net = _subnet()
    a = agents.start("a", net + "1")
    for request_, field in BAD_REQUESTS:
        with pytest.raises(InvalidInput) as err:
            a.request(request_)
        assert err.value.field == field and err.value.message, request_
        assert a.stats()["ok"] is True  # still serving, nothing changed
        assert a.stats()["active"] == {"safs_senders": 0, "tcp_senders": 0, "safs_receivers_incomplete": 0}
        assert a.stats()["background"] == []


def test_raw_protocol_errors_and_duplicate_flow(agents: Agents, tmp_path: Path) -> None:
    net = _subnet()
    a = agents.start("a", net + "1", "--default-rate-bps", str(MBIT))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.connect(str(tmp_path / "a.sock"))
        f = raw.makefile("rwb")
        for line in (b"not json\n", b"[1, 2]\n"):
            f.write(line)
            f.flush()
            reply = json.loads(f.readline())
            assert reply["ok"] is False and reply["error"].startswith("request: ")
    a.send(5, net + "9", 10_000_000, "safs")  # nobody listens: it keeps sending at 1 Mbit/s
    with pytest.raises(InvalidInput) as err:
        a.send(5, net + "9", 10_000, "safs")
    assert err.value.field == "flow_id"
    with pytest.raises(InvalidInput) as err:
        a.send(6, net + "1", 10_000, "safs")
    assert err.value.field == "dst_ip"
    assert a.stats()["active"]["safs_senders"] == 1


def test_setup_errors_exit_2_with_a_message(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "safs.apps.agent", "--host", "a", "--control", str(tmp_path / "a.sock")]
    for extra, text in (
        (["--ip", "192.0.2.1"], "Cannot assign requested address"),  # not on this host
        (["--ip", "10.0.0.256"], "--ip: must be an IPv4 address"),
        (["--ip", "127.0.0.1", "--default-rate-bps", "0"], "--default-rate-bps: must be an integer > 0"),
    ):
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and text in proc.stderr, (extra, proc.stderr)
        assert not (tmp_path / "a.sock").exists()


def test_dst_host_required_with_hint_address(agents: Agents, tmp_path: Path) -> None:
    net = _subnet()
    a = agents.start("a", net + "1", "--hint-addr", f"unix:{tmp_path}/nobody.sock")
    with pytest.raises(InvalidInput) as err:
        a.send(7, net + "2", 1000, "safs")
    assert err.value.field == "dst_host"
    a.send(7, net + "2", 1000, "tcp")  # TCP flows are not hinted
    a.shutdown()


def test_announces_and_completes_over_the_hint_api_on_a_unix_socket(agents: Agents, tmp_path: Path) -> None:
    """A real hint server (gRPC on unix:PATH, a Scheduler over PipelineModel targets of the
    shared two-ToR topology) sees the agent's Announce (names, class, label, timestamp) and
    its Complete after the receiver's DONE."""
    topo = two_tors()
    targets = {sw: PipelineModel(sw, fabric_clock) for sw in topo.switches()}
    sched = Scheduler(topo, targets, SchedulerConfig(grant_mode="per-transfer"))
    sched.setup(fabric_clock())
    server = start(sched, f"unix:{tmp_path}/hints.sock", fabric_clock)
    net = _subnet()
    try:
        a = agents.start(
            "a", net + "1", "--hint-addr", f"unix:{tmp_path}/hints.sock", "--default-rate-bps", str(20 * MBIT)
        )
        b = agents.start("d", net + "2")
        deadline = fabric_clock() + 2 * 10**9
        b.expect(71, net + "1", 200_000, "safs")
        a.send(
            71,
            net + "2",
            200_000,
            "safs",
            dst_host="d",
            no_bubble_ts_ns=deadline,
            label="job/s1/mb0",
            send_at_ns=fabric_clock() + 200_000_000,
        )  # announced at once, data 200 ms later
        t_end = time.monotonic() + 5
        while 71 not in sched.registry and time.monotonic() < t_end:
            time.sleep(0.005)
        with server.servicer.lock:
            hint = sched.registry.get(71)
        assert (hint.sender, hint.receiver, hint.label, hint.flow_class.value, hint.no_bubble_ts_ns) == (
            "a",
            "d",
            "job/s1/mb0",
            "pipeline",
            deadline % (1 << 48),
        )
        done = _by_role(wait_events([a, b], 2))
        assert done["receiver"]["bytes"] == 200_000
        assert done["sender"]["start_ns"] - deadline + 2 * 10**9 >= 150_000_000  # waited for send_at
        while a.stats()["hints"]["completed"] < 1 and time.monotonic() < t_end:
            time.sleep(0.005)
        hints = a.stats()["hints"]
        assert (hints["announced"], hints["completed"], hints["errors"]) == (1, 1, 0), hints
        assert 71 not in sched.registry
        # a transfer of a dependency (Send.dep_id) is not announced: the dependency was, at launch
        b.expect(72, net + "1", 50_000, "safs")
        a.send(72, net + "2", 50_000, "safs", dst_host="d", no_bubble_ts_ns=fabric_clock() + 10**9, dep_id=5)
        assert _by_role(wait_events([a, b], 2))["receiver"]["bytes"] == 50_000
        hints = a.stats()["hints"]
        assert (hints["announced"], hints["completed"], hints["errors"]) == (1, 1, 0), hints
        assert 72 not in sched.registry
    finally:
        server.stop()


def test_watch_stream_pushes_events_and_events_then_keeps_none(agents: Agents) -> None:
    """After ``watch`` the agent pushes each done event on that connection as it happens (no
    polling) and ``events`` on the request connection returns none of them."""
    net = _subnet()
    a = agents.start("a", net + "1", "--default-rate-bps", str(20 * MBIT))
    b = agents.start("b", net + "2")
    stream = b.watch()
    try:
        b.expect(5, net + "1", 30_000, "safs")
        a.send(5, net + "2", 30_000, "safs")
        got: list[dict] = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            if select.select([stream], [], [], 0.5)[0]:
                got = stream.read()
        assert [(e["event"], e["role"], e["flow_id"], e["bytes"]) for e in got] == [("done", "receiver", 5, 30_000)]
        assert b.events() == []
    finally:
        stream.close()
    with pytest.raises(InvalidInput, match="op"):
        b.request({"op": "watchh"})


class _ThreeFlows:
    """A workload: two pipeline flows into c (one starting 50 ms later) and one background."""

    def __init__(self) -> None:
        self.finished: dict[str, int] = {}

    def start(self, api) -> None:  # noqa: ANN001 - safs.experiments.workloads.api.WorkloadAPI
        for spec, at in (
            (FlowSpec("a", "c", 150_000, 400_000_000, "p/a->c"), 0),
            (FlowSpec("b", "c", 150_000, 400_000_000, "p/b->c"), 50_000_000),
            (FlowSpec("a", "b", 500_000, None, "bg/a->b", "background"), 0),
        ):
            api.start_flow(spec, lambda t, label=spec.label: self.finished.__setitem__(label, t), send_at_ns=at)

    def done(self) -> bool:
        return len(self.finished) == 3


@pytest.mark.parametrize("policy, agent_args", [
    ("safs", ()), ("dctcp", ()),
    # what the Mininet target passes for safs-admission (the expects carry no-bubble timestamps)
    ("safs-admission", ("--late-transfers", "last", "--receiver-admission", "moore-hodgson",
                        "--pace-burst-bytes", "18000")),
])
def test_driver_runs_a_workload_over_real_agents(agents: Agents, policy: str, agent_args: tuple[str, ...]) -> None:
    """emu-net's RealtimeNetwork driving three real agents (no switch: SAFS flows keep the
    default grant): every flow finishes, no FCT is shorter than its bytes at the rate."""
    net = _subnet()
    ips = {"a": net + "1", "b": net + "2", "c": net + "3"}
    rate = 20 * MBIT
    clients = {
        h: agents.start(h, ip, "--default-rate-bps", str(rate), "--line-rate-bps", str(rate), *agent_args)
        for h, ip in ips.items()
    }
    run = RealtimeNetwork(clients, ips, policy)
    workload = _ThreeFlows()
    run.run(workload, max_time_ns=10 * 10**9)
    records = {r.label: r for r in run.records()}
    assert workload.done() and all(r.finish_ns is not None for r in records.values()), records
    assert run.stats.polls == 0  # every agent pushed its events on a watch stream
    run.drain()
    assert set(run.sender_events) == {r.flow_id for r in records.values()}  # sender side too
    for r in records.values():
        if r.flow_class == "pipeline" and policy != "dctcp":
            assert r.finish_ns - r.start_ns >= (r.size_bytes - 32_768) * 8 * 10**9 // rate
    assert records["p/b->c"].start_ns >= 50_000_000


# ---- two network namespaces and a veth pair (root) -------------------------------------------
def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


# Prints the UDP checksum of the first SAFS frame seen on the namespace's interfaces.
CAPTURE_UDP_CHECKSUM = """
import socket, struct
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
s.settimeout(10)
print("listening", flush=True)
while True:
    f = s.recv(2048)
    ihl = (f[14] & 0x0F) * 4
    if f[23] == 17 and struct.unpack_from("!H", f, 14 + ihl + 2)[0] == 23285:
        print("udp checksum", struct.unpack_from("!H", f, 14 + ihl + 6)[0])
        break
"""


@pytest.mark.root
def test_two_namespaces_over_veth(agents: Agents) -> None:
    if not shutil.which("ip"):
        pytest.skip("needs iproute2: ip is not on PATH")
    tag = f"{os.getpid() % 10000}{random.randint(0, 99)}"
    ns1, ns2 = f"safsA{tag}", f"safsB{tag}"
    created: list[str] = []
    try:
        for ns in (ns1, ns2):
            _ip("netns", "add", ns)
            created.append(ns)
        _ip("link", "add", f"va{tag}", "netns", ns1, "type", "veth", "peer", "name", f"vb{tag}", "netns", ns2)
        for ns, dev, addr in ((ns1, f"va{tag}", "10.77.0.1/24"), (ns2, f"vb{tag}", "10.77.0.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        a = agents.start(
            "a", "10.77.0.1", "--set-tcp-ecn", "--default-rate-bps", str(20 * MBIT), prefix=("ip", "netns", "exec", ns1)
        )
        b = agents.start("b", "10.77.0.2", "--set-tcp-ecn", prefix=("ip", "netns", "exec", ns2))
        capture = subprocess.Popen(
            ["ip", "netns", "exec", ns2, sys.executable, "-c", CAPTURE_UDP_CHECKSUM], stdout=subprocess.PIPE, text=True
        )
        assert capture.stdout.readline().strip() == "listening"  # type: ignore[union-attr]
        b.expect(51, "10.77.0.1", 400_000, "safs")
        b.expect(52, "10.77.0.1", 2_000_000, "tcp")
        a.send(51, "10.77.0.2", 400_000, "safs")  # no switch: default grant rate, REQUESTs ignored
        a.send(52, "10.77.0.2", 2_000_000, "tcp")
        done = [e for e in wait_events([a, b], 4) if e["event"] == "done"]
        assert {(e["flow_id"], e["role"]) for e in done} == {
            (51, "sender"),
            (51, "receiver"),
            (52, "sender"),
            (52, "receiver"),
        }
        assert a.stats()["tcp"]["tcp_ecn"] == 1 and b.stats()["tcp"]["tcp_ecn"] == 1
        assert b.stats()["safs"]["data_packets_received"] >= 400_000 // 1436
        out, _ = capture.communicate(timeout=10)
        assert out.strip() == "udp checksum 0"  # docs/protocol.md: SAFS packets carry checksum 0
    finally:
        codes = agents.stop_all()
        agents.procs.clear()
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    assert all(code == 0 for code in codes), codes


def test_sender_reports_sent_one_complete_lead_before_its_last_byte() -> None:
    """``on_sender_sent`` fires once the new bytes left take at most the endpoint's
    ``complete_lead_ns`` at the held rate (wire bytes: payload + 78-byte headers), at the last
    byte without a lead, and never while the rate is 0."""
    from safs.apps.agent.loop import Loop
    from safs.apps.agent.safs_socket import SafsEndpoint, emu_config

    loop = Loop()
    ep = SafsEndpoint(
        loop,
        "127.0.0.1",
        emu_config(10 * MBIT, unscheduled_bytes=3000),
        10 * MBIT,
        lambda *a: None,
        lambda *a: None,
        port=0,
    )
    try:
        sender = ep.start_sender(9, "127.0.0.2", 100 * ep.cfg.segment_bytes, None, False, loop.now())
        sender.dep.rate_bps = 10 * MBIT  # the grant is its dependency's
        wire = ep.cfg.segment_bytes + 78  # one full segment on the wire
        sender.next_offset = 90 * ep.cfg.segment_bytes  # 10 segments left
        assert not sender._sent_soon()  # no lead: only at the last byte
        ep.complete_lead_ns = 10 * wire * 8 * 1000 // 10  # exactly 10 segments at 10 Mbit/s, ns
        assert sender._sent_soon()
        ep.complete_lead_ns -= 1
        assert not sender._sent_soon()
        sender.dep.rate_bps = 0
        ep.complete_lead_ns = 10**9
        assert not sender._sent_soon()
        sender.next_offset = sender.size
        assert sender._sent_soon()
    finally:
        ep.close()
        loop.close()


def test_a_client_that_does_not_read_is_dropped_not_waited_for(agents: Agents, tmp_path: Path) -> None:
    """Replies (and pushed events) to a client that stops reading fill its socket; the agent
    drops that client after WRITE_TIMEOUT_S instead of blocking, and keeps serving the others."""
    a = agents.start("a", _subnet() + "1")
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.connect(str(tmp_path / "a.sock"))
    stuck.sendall(b'{"op": "stats"}\n' * 3000)  # ~4 MB of replies, never read
    began = time.monotonic()
    assert a.stats()["host"] == "a"
    assert time.monotonic() - began < 5
    stuck.close()


def test_agent_send_scheduler_takes_the_scenarios_quantum_and_the_pacing_burst() -> None:
    """The Mininet target passes the scenario's send-scheduler quantum (--urgency-quantum-ns), slack
    thresholds (--slack-thresholds-ns) and late_transfers (--late-transfers); the host's send
    scheduler uses the quantum, puts late transfers last from the first threshold on, and lets
    the pacing burst lead the line rate."""
    from safs.apps.agent.loop import Loop
    from safs.apps.agent.main import parse_args
    from safs.apps.agent.safs_socket import SafsEndpoint, emu_config

    args = parse_args(["--host", "h", "--ip", "127.0.0.1", "--control", "/tmp/x.sock", "--urgency-quantum-ns", "5000",
                       "--slack-thresholds-ns=-500,1000,10000,100000", "--late-transfers", "last"])
    cfg = emu_config(10 * MBIT, unscheduled_bytes=3000, urgency_quantum_ns=args.urgency_quantum_ns,
                     slack_thresholds_ns=tuple(args.slack_thresholds_ns), late_transfers=args.late_transfers)
    assert cfg.slack_thresholds_ns == (-500, 1000, 10000, 100000)
    ep = SafsEndpoint(Loop(), "127.0.0.1", cfg, 10 * MBIT, lambda *a: None, lambda *a: None, port=0)
    try:
        assert ep.scheduler is not None and ep.scheduler.quantum == 5000 and ep.scheduler.late_below == -500
        assert ep.scheduler.ahead_ns == cfg.burst_bytes * 8 * 10**9 // (10 * MBIT) > 0
    finally:
        ep.close()


def test_polls_back_off_with_grant_poll_backoff(agents: Agents) -> None:
    """--grant-poll-backoff 16 (what the Mininet target gives dependency senders): under a rate-0
    grant that never changes, the REQUEST polls start at --grant-poll-ns (2 ms) and double up
    to 32 ms apart: about 10 in 0.25 s, where the fixed period sends over 40."""
    net = _subnet()
    a_ip, b_ip, sw_ip = net + "1", net + "2", net + "3"
    sw = GrantResponder(sw_ip, b_ip, 0, epoch=1, lease_ns=1_000_000_000)
    try:
        a = agents.start("a", a_ip, "--default-rate-bps", str(5 * MBIT), "--line-rate-bps", str(100 * MBIT),
                         "--grant-poll-backoff", "16")
        b = agents.start("b", b_ip)
        b.expect(28, a_ip, 300_000, "safs")
        a.send(28, sw_ip, 300_000, "safs")
        time.sleep(0.25)
        polls = sorted(sw.requests)
        print(f"{len(polls)} REQUESTs in 0.25 s")
        assert 4 <= len(polls) <= 20
        gaps = [b_ - a_ for a_, b_ in zip(polls[1:], polls[2:])]
        assert gaps and max(gaps) >= 0.016  # backed off (fixed: 2 ms apart)
        sw.install(20 * MBIT, epoch=2)  # answered to the next poll: the flow resumes
        assert _by_role(wait_events([a, b], 2))["receiver"]["bytes"] == 300_000
    finally:
        sw.close()


def test_host_logic_reads_fabric_time_so_slack_and_admission_are_right() -> None:
    """The agent's SAFS host logic compares fabric times (a hint's no-bubble timestamp, 48-bit
    wall-clock ns) with its clock, so that clock reads fabric time, not the loop's monotonic
    ns: a transfer due 1 s from now has about 1 s of slack (not late, no urgency signal due
    yet), and a receiver's admission (--receiver-admission) with the expected no-bubble
    timestamp rejects the transfer that cannot be on time and keeps the one that can."""
    from safs.apps.agent.loop import Loop
    from safs.apps.agent.main import parse_args
    from safs.apps.agent.safs_socket import SafsEndpoint, emu_config
    from safs.core.timebase import wrap

    args = parse_args(["--host", "h", "--ip", "127.0.0.1", "--control", "/tmp/x.sock", "--late-transfers", "last",
                       "--receiver-admission", "moore-hodgson", "--admission-rate-fraction", "0.5",
                       "--nic-yield-fraction", "0"])
    assert args.nic_yield_fraction == 0.0
    assert parse_args(["--host", "h", "--ip", "127.0.0.1", "--control", "/tmp/x.sock"]).nic_yield_fraction == 0.25
    assert emu_config(10 * MBIT, nic_yield_fraction=args.nic_yield_fraction).nic_yield_fraction == 0.0
    for bad in ("0.6", "-0.1", "half"):
        with pytest.raises(SystemExit):
            parse_args(["--host", "h", "--ip", "127.0.0.1", "--control", "/tmp/x.sock", "--nic-yield-fraction", bad])
    cfg = emu_config(10 * MBIT, unscheduled_bytes=3000, slack_thresholds_ns=(0, 10**6, 10**7, 10**8),
                     late_transfers=args.late_transfers, receiver_admission=args.receiver_admission,
                     admission_rate_fraction=args.admission_rate_fraction)
    loop = Loop()
    ep = SafsEndpoint(loop, "127.0.0.1", cfg, 10 * MBIT, lambda *a: None, lambda *a: None, port=0)
    try:
        assert abs(ep.clock.now - time.time_ns()) < 50_000_000
        sender = ep.start_sender(9, "127.0.0.2", 3000, wrap(time.time_ns() + 10**9), False, loop.now() + 10**10)
        slack = sender.latest_start_key() - ep.clock.now
        assert 0.9e9 < slack <= 1e9
        assert not sender.late(ep.clock.now, cfg.late_below_ns)
        # 5 Mbit/s planned: 125 kB take 200 ms. Due in 300 ms: fits; the second, due in 250 ms,
        # does not fit after it, and is the longer: rejected.
        assert ep.admission is not None and ep.admission.rate == 5 * MBIT
        now = time.time_ns()
        fits = ep.expect(1, "127.0.0.2", 125_000, wrap(now + 300_000_000))
        late = ep.expect(2, "127.0.0.2", 200_000, wrap(now + 250_000_000))
        for rx in (fits, late):
            assert 0 < rx.no_bubble - ep.clock.now < 400_000_000
            ep.admission.arrived(rx)
        assert late.rejected and not fits.rejected
    finally:
        ep.close()
        loop.close()

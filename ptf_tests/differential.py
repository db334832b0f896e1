"""Differential test: the same writes and packets through safs.targets.pipeline_model and through BMv2.

Both targets get the SAME typed updates: a :class:`safs.core.scheduler.Scheduler`
(``admit_on_request=False``) on a one-switch topology matching the PTF ports (sender host on
port 1, receiver on 2, a third host on 3) writes through a fan-out target to the in-process
:class:`~safs.targets.pipeline_model.PipelineModel` and to BMv2 via :class:`safs.targets.p4rt.P4RuntimeTarget`
(election id (0, 2), so it is primary over the base test's connection, which only pushes the
pipeline). Both get the same clock offset (just below 2^48, so fabric time wraps), and the
same clone sessions (``Scheduler.setup`` writes session port + 1 -> port for the three ports;
BMv2 needs them for a stale-epoch GRANT, the model emits that GRANT only through them). Every
write is undone at the end through the same P4Runtime connection (entries and clone sessions
deleted, defaults and the clock offset restored to what was read before, meters reset to
unconfigured).

Packets (safs.core.scapy_layer builders) go into BMv2 through PTF and, converted to
:class:`safs.core.packet.Packet`, into the model; the outputs are paired by
(port, type, flow id, remaining bytes) and compared: which packets come out on which port,
IPs, UDP ports, type, flags, qclass, flow id, remaining bytes, rate, epoch, lease, the DATA
timestamp (unchanged) and the frame size; a switch-generated GRANT's timestamp (switch time)
must lie in the window the test measured around the send. Not compared: ``qdepth`` (BMv2's
real queue vs the model's egress argument). Colour is compared in clear cases only (below).

Time: the switch clock is learned from a GRANT (as ptf_tests/slack.py): a REQUEST of a flow
without an entry is sent at t0, its GRANT (timestamp T) received at t1. A packet sent at t2
and received at t3 was processed at a switch time in [T + (t2 - t1), T + (t3 - t0)]; the
model's clock is set to the middle of that window. A DATA packet is compared only when its
whole slack window lies inside one class of the scheduler's slack table and at least 1 ms away
from the class edges; otherwise (a stall on a busy machine) it is re-sent with a new probe, up
to ``ATTEMPTS`` times. The scheduler's classes 5 (slack 0..100 µs) and 4 (100 µs..1 ms) are
narrower than 2 ms, so only classes 6 (late), 3 (1 ms..1 s with this test's thresholds) and 2
(>= 1 s) are exercised.

Meters: the topology's links are 8 kbit/s, so grants and meters are tiny (cir ~1000 bytes/s,
committed and peak bursts 2 x 1514 bytes = the scheduler's floor with ``unscheduled_bytes=0``).
Per meter slot the test counts the bytes sent; a packet is clearly green when the bytes
through its slot up to and including it fit the committed burst (buckets start full), clearly
red when they exceed the peak burst plus what the peak rate can refill between the slot's
first packet and this packet's receive time (plus 1 s); otherwise its colour is not compared.
A burst within the committed burst (flow 20) must be green on both, one far above the rate
(flow 21) red on both beyond the peak burst.
"""

from __future__ import annotations

import time

import ptf.testutils as tu
from base_test import (
    OTHER_IP,
    PORT_OTHER,
    PORT_RECEIVER,
    PORT_SENDER,
    RECEIVER_IP,
    SENDER_IP,
    SENDER_MAC,
    SWITCH_MAC,
    SafsTest,
    ip_int,
)
from p4.v1 import p4runtime_pb2
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from safs.core import p4names as n
from safs.core.allocator import AllocatorConfig
from safs.core.hints import FlowHint
from safs.core.packet import PROTO_UDP, Packet
from safs.core.protocol import NS_PER_S, Color, MsgType
from safs.core.scapy_layer import SAFS, safs_data, safs_done, safs_request
from safs.core.scheduler import Scheduler, SchedulerConfig
from safs.core.target import CounterValue, Op, RequestDigest, Update
from safs.core.timebase import TIME_MASK, TIME_MOD
from safs.core.topology import build_topology
from safs.targets.p4rt.target import P4RuntimeTarget
from safs.targets.pipeline_model import PipelineModel

SWITCH = "s1"
LINK_RATE = "8kbps"  # tiny rates: meter refill during a test is a few hundred bytes
DEFAULT_RATE_BPS = 8_000
OFFSET_NS = TIME_MOD - 30 * NS_PER_S  # fabric time wraps 30 s after the switch started
MS = 1_000_000
EDGE_MARGIN_NS = 1 * MS  # a DATA slack window must stay this far from class edges
ATTEMPTS = 25
# Class 3 spans 1 ms..1 s here (default 1..10 ms), so a DATA packet at 500 ms of slack stays clear
# of the class edges even when a loaded 2-core machine stalls the exchange for tens of ms.
SLACK_THRESHOLDS_NS = (0, 100_000, 1_000_000, 1_000_000_000)
PROBE_FLOW = 9999  # flow without an entry: its GRANT carries the switch time
FLOW_A, FLOW_B, FLOW_C, FLOW_UNKNOWN = 20, 21, 22, 30  # C: the slack retries (own meter slot)
BIG_PAYLOAD = 1000  # burst packets, bytes of payload
REFILL_SLACK_S = 1.0

TOPOLOGY = {
    "name": "ptf-one-switch",
    "defaults": {"rate": LINK_RATE},
    "switches": [SWITCH],
    "hosts": {  # ports in this order: 1, 2, 3 (= the PTF ports of base_test)
        "snd": {"ip": SENDER_IP, "switch": SWITCH},
        "rcv": {"ip": RECEIVER_IP, "switch": SWITCH},
        "oth": {"ip": OTHER_IP, "switch": SWITCH},
    },
}
SETTINGS_TABLES = (n.CLOCK_OFFSET, n.DEFAULT_GRANT, n.ECN_THRESHOLD, n.SLACK_CLASS)


class FanOut:
    """A Target that writes every update to the model and to BMv2 (reads from the model)."""

    def __init__(self, model: PipelineModel, bmv2: P4RuntimeTarget) -> None:
        self.name = SWITCH
        self.model, self.bmv2 = model, bmv2

    def write(self, updates) -> None:
        self.model.write(updates)
        self.bmv2.write(updates)

    def set_clock_offset(self, offset_ns: int) -> None:
        self.model.set_clock_offset(offset_ns)
        self.bmv2.set_clock_offset(offset_ns)

    def read_counter(self, counter: str, index: int) -> CounterValue:
        return self.model.read_counter(counter, index)

    def read_counter_cells(self, counter: str, indices: list[int]) -> list[CounterValue]:
        return self.model.read_counter_cells(counter, indices)

    def poll_digests(self) -> list[RequestDigest]:
        return []


def to_sim(pkt: Ether) -> Packet:
    """The scapy packet as the simulator's Packet (size = frame bytes, as the model counts)."""
    ip, udp, hdr = pkt[IP], pkt[UDP], pkt[SAFS]
    p = Packet(ip_int(ip.src), ip_int(ip.dst), PROTO_UDP, udp.sport, udp.dport, len(bytes(pkt)),
               payload=len(hdr[Raw].load) if Raw in hdr else 0, ecn=ip.tos & 3)
    p.safs_version, p.safs_type, p.flags = hdr.version, hdr.type, hdr.flags
    p.qclass, p.color, p.flow_id = hdr.qclass, hdr.color, hdr.flow_id
    p.remaining, p.ts = hdr.remaining_bytes, hdr.timestamp_ns
    p.rate_kbps, p.epoch, p.lease_us, p.qdepth = hdr.rate_kbps, hdr.epoch, hdr.lease_us, hdr.qdepth
    return p


def _ip_str(addr: int) -> str:
    return ".".join(str((addr >> s) & 0xFF) for s in (24, 16, 8, 0))


def model_fields(port: int, p: Packet) -> dict:
    return {"port": port, "src": _ip_str(p.src), "dst": _ip_str(p.dst), "sport": p.sport,
            "dport": p.dport, "type": p.safs_type, "flags": p.flags, "qclass": p.qclass,
            "flow_id": p.flow_id, "remaining": p.remaining, "rate_kbps": p.rate_kbps,
            "epoch": p.epoch, "lease_us": p.lease_us, "size": p.size}


def bmv2_fields(port: int, pkt: Ether) -> dict:
    h = pkt[SAFS]
    return {"port": port, "src": pkt[IP].src, "dst": pkt[IP].dst, "sport": pkt[UDP].sport,
            "dport": pkt[UDP].dport, "type": h.type, "flags": h.flags, "qclass": h.qclass,
            "flow_id": h.flow_id, "remaining": h.remaining_bytes, "rate_kbps": h.rate_kbps,
            "epoch": h.epoch, "lease_us": h.lease_us, "size": len(bytes(pkt))}


def _pair_key(f: dict) -> tuple:
    return (f["port"], f["type"], f["flow_id"], f["remaining"])


class DifferentialTest(SafsTest):
    def runTest(self) -> None:
        p = tu.test_params_get()
        self.model_local_ns = 0
        self.model = PipelineModel(SWITCH, lambda: self.model_local_ns)
        self.bmv2 = P4RuntimeTarget(SWITCH, p["grpc_addr"], int(p.get("device_id", 0)), p["p4info"],
                                    election_id=(0, 2), timeout_s=self.timeout)
        self.addCleanup(self.bmv2.close)  # even if the reads below fail (its stream thread is not a daemon)
        self.sched: Scheduler | None = None
        saved = {t: self.bmv2.read_default(t) for t in SETTINGS_TABLES}
        try:
            self.poll_until(lambda: self.bmv2.is_primary, "primary arbitration of (0, 2)")
            cfg = SchedulerConfig(admit_on_request=False, default_rate_bps=DEFAULT_RATE_BPS,
                                  unscheduled_bytes=0,
                                  allocator=AllocatorConfig(slack_thresholds_ns=SLACK_THRESHOLDS_NS))
            self.sched = Scheduler(build_topology(TOPOLOGY, "differential"), {SWITCH: FanOut(self.model, self.bmv2)},
                                   cfg)
            self.sched.setup(0, {SWITCH: OFFSET_NS})  # clone sessions included
            self.assertEqual(sorted(self.sched.installed_clone_sessions(SWITCH)),
                             [port + n.CLONE_SESSION_BASE for port in (PORT_SENDER, PORT_RECEIVER, PORT_OTHER)])
            self.probe()
            now = self.fabric_estimate(time.monotonic())
            far = (now + 3600 * NS_PER_S) & TIME_MASK
            self.sched.announce(FlowHint(FLOW_A, "snd", "rcv", 10**6, far, "diff/a"), now)
            self.sched.announce(FlowHint(FLOW_B, "snd", "rcv", 10**6, far, "diff/b"), now)
            self.sched.announce(FlowHint(FLOW_C, "snd", "rcv", 10**6, far, "diff/c"), now)
            self.slot_bytes: dict[int, int] = {}
            self.slot_first: dict[int, float] = {}
            self.meter = self.sched.installed_meters(SWITCH)
            self.grants = {e.match[n.F_FLOW_ID]: e.params for e in self.sched.installed(SWITCH)
                           if e.table == n.FLOW_GRANT}
            self.assertGreater(self.grants[FLOW_A]["rate_kbps"], 0, "grants must carry a rate")
            self.run_sequences()
            self.expect_nothing()
        finally:
            self.undo(saved)
            self.bmv2.close()

    # ------------------------------------------------------------------ time

    def probe(self) -> None:
        """Learn the switch's fabric time (see module docstring); not fed to the model."""
        t0 = time.monotonic()
        self.send(PORT_SENDER, safs_request(SENDER_IP, RECEIVER_IP, PROBE_FLOW, 1, 0,
                                            src_mac=SENDER_MAC, dst_mac=SWITCH_MAC))
        got = self.receive(PORT_SENDER)
        t1 = time.monotonic()
        self.assertEqual((got[SAFS].type, got[SAFS].flow_id), (int(MsgType.GRANT), PROBE_FLOW))
        self.probe_t = (t0, t1, got[SAFS].timestamp_ns)

    def window(self, t_send: float, t_recv: float) -> tuple[int, int]:
        """Fabric time range (ns, not reduced mod 2^48) in which the switch handled a packet."""
        t0, t1, ts = self.probe_t
        return ts + int((t_send - t1) * NS_PER_S), ts + int((t_recv - t0) * NS_PER_S)

    def fabric_estimate(self, t: float) -> int:
        t0, t1, ts = self.probe_t
        return (ts + int((t - (t0 + t1) / 2) * NS_PER_S)) & TIME_MASK

    # ------------------------------------------------------------------ one step

    def exchange(self, pkts: list[Ether]) -> list[tuple[dict, dict, int]]:
        """Send ``pkts`` back to back into BMv2 and, one by one, into the model; receive as
        many packets (any port) as the model emits and pair them by :func:`_pair_key`.

        Returns ``(model fields, BMv2 fields, index of the sent packet)`` per output; the field
        dicts also hold ``color`` and ``ts``. Fails when BMv2 emits fewer or other packets.
        Sets ``last_window`` (switch-time window of the step) and ``last_t`` (send, receive)."""
        t_send = time.monotonic()
        for pkt in pkts:
            self.send(PORT_SENDER, pkt)
        expected = []
        for i, pkt in enumerate(pkts):
            sim = to_sim(pkt)
            lo, _ = self.window(t_send, t_send)  # the earliest time the switch can see it
            self.model_local_ns = (lo - OFFSET_NS) & TIME_MASK
            for port, out in self.model.ingress(sim, PORT_SENDER):
                self.model.egress(out, port, 0)
                f = model_fields(port, out)
                f["color"], f["ts"], f["sent"] = out.color, out.ts, i
                expected.append(f)
        got = []
        for _ in expected:
            res = tu.dp_poll(self, device_number=0, port_number=None, timeout=self.timeout)
            if not isinstance(res, self.dataplane.PollSuccess):
                self.fail(f"BMv2 emitted {len(got)} packets, the model {len(expected)}: "
                          f"model {[_pair_key(f) for f in expected]}")
            pkt = Ether(bytes(res.packet))
            f = bmv2_fields(res.port, pkt)
            f["color"], f["ts"] = pkt[SAFS].color, pkt[SAFS].timestamp_ns
            got.append(f)
        t_recv = time.monotonic()
        self.last_window = self.window(t_send, t_recv)
        self.last_t = (t_send, t_recv)
        by_key = {_pair_key(f): f for f in got}
        self.assertEqual(sorted(by_key), sorted(_pair_key(f) for f in expected),
                         "model and BMv2 emit different packets (port, type, flow, remaining)")
        return [(m, by_key[_pair_key(m)], m["sent"]) for m in expected]

    def compare(self, m: dict, b: dict, what: str) -> None:
        keys = ("port", "src", "dst", "sport", "dport", "type", "flags", "qclass", "flow_id",
                "remaining", "rate_kbps", "epoch", "lease_us", "size")
        self.assertEqual({k: b[k] for k in keys}, {k: m[k] for k in keys}, f"{what}: BMv2 vs model")
        if m["type"] == int(MsgType.GRANT):  # switch time: inside the measured window
            lo, hi = self.last_window
            self.assertLessEqual((b["ts"] - lo) & TIME_MASK, hi - lo,
                                 f"{what}: GRANT time {b['ts']} outside [{lo & TIME_MASK}, {hi & TIME_MASK}]")

    def check_color(self, m: dict, b: dict, pkt_size: int, slot: int, what: str) -> str:
        """Count ``pkt_size`` on ``slot``; compare colours if clear. Returns green/red/unclear."""
        self.slot_first.setdefault(slot, self.last_t[0])
        total = self.slot_bytes.get(slot, 0) + pkt_size
        self.slot_bytes[slot] = total
        cfg = self.meter[slot]
        refill = cfg.pir * (self.last_t[1] - self.slot_first[slot] + REFILL_SLACK_S)
        if total <= cfg.cburst:
            want = int(Color.GREEN)
        elif total > cfg.pburst + refill:
            want = int(Color.RED)
        else:
            return "unclear"
        self.assertEqual((m["color"], b["color"]), (want, want), f"{what}: colour (model, BMv2), "
                         f"{total} bytes through slot {slot}")
        return "green" if want == int(Color.GREEN) else "red"

    # ------------------------------------------------------------------ sequences

    def run_sequences(self) -> None:
        kw = {"src_mac": SENDER_MAC, "dst_mac": SWITCH_MAC}
        ga = self.grants[FLOW_A]
        slot_a, slot_b = ga["meter_slot"], self.grants[FLOW_B]["meter_slot"]
        now = self.fabric_estimate(time.monotonic())

        # REQUEST of an installed flow / of an unknown flow: GRANT generated in the switch.
        for flow, what in ((FLOW_A, "REQUEST installed"), (FLOW_UNKNOWN, "REQUEST unknown")):
            self.probe()
            (m, b, _), = self.exchange([safs_request(SENDER_IP, RECEIVER_IP, flow, 5000, now, **kw)])
            self.compare(m, b, what)
            self.assertEqual((b["type"], b["port"]), (int(MsgType.GRANT), PORT_SENDER), what)
            want = ga if flow == FLOW_A else None
            if want is not None:
                self.assertEqual((b["rate_kbps"], b["epoch"], b["lease_us"]),
                                 (want["rate_kbps"], want["epoch"], want["lease_us"]), what)

        # Control in transit (to a port): class 7 both.
        self.probe()
        (m, b, _), = self.exchange([safs_done(SENDER_IP, OTHER_IP, FLOW_A, now, **kw)])
        self.compare(m, b, "DONE")

        # DATA at slacks well inside classes 6, 3, 2 (small packets: clearly green), on flow C,
        # whose meter slot is not used below: retries on a busy machine cannot use up flow A's.
        gc, slot_c = self.grants[FLOW_C], self.grants[FLOW_C]["meter_slot"]
        seq = 1000
        for slack, qclass in ((-10 * NS_PER_S, 6), (500 * MS, 3), (10 * NS_PER_S, 2)):
            for _attempt in range(ATTEMPTS):
                seq += 1
                self.probe()
                latest = (self.fabric_estimate(time.monotonic()) + slack) & TIME_MASK
                pkt = safs_data(SENDER_IP, RECEIVER_IP, FLOW_C, seq, latest, gc["epoch"], 64, **kw)
                (m, b, _), = self.exchange([pkt])
                lo, hi = self.last_window
                s_hi, s_lo = latest - (lo & TIME_MASK), latest - (hi & TIME_MASK)
                self.check_color(m, b, len(bytes(pkt)), slot_c, f"DATA slack {slack}")
                if self.slack_clear(s_lo, s_hi, qclass):
                    self.compare(m, b, f"DATA slack {slack} ns")
                    self.assertEqual(b["qclass"], qclass)
                    self.assertEqual(b["ts"], latest, "latest start rewritten")
                    break
            else:
                self.fail(f"slack {slack}: timing never clear in {ATTEMPTS} attempts (busy machine?)")

        # DATA with a stale epoch: forwarded, plus a fresh GRANT to the sender.
        self.probe()
        seq += 1
        pkt = safs_data(SENDER_IP, RECEIVER_IP, FLOW_A, seq, (now + 100 * NS_PER_S) & TIME_MASK,
                        ga["epoch"] - 1, 64, **kw)
        pairs = self.exchange([pkt])
        self.assertEqual(sorted((b["port"], b["type"]) for _, b, _ in pairs),
                         [(PORT_SENDER, int(MsgType.GRANT)), (PORT_RECEIVER, int(MsgType.DATA))])
        for m, b, _ in pairs:
            self.compare(m, b, "stale epoch")
            if b["type"] == int(MsgType.DATA):
                self.check_color(m, b, len(bytes(pkt)), slot_a, "stale epoch DATA")
            else:
                self.assertEqual(b["epoch"], ga["epoch"])

        # DATA of a flow without a grant to the third port (default slot 0).
        self.probe()
        pkt = safs_data(SENDER_IP, OTHER_IP, FLOW_UNKNOWN, 7, (now + 100 * NS_PER_S) & TIME_MASK, 0, 64, **kw)
        (m, b, _), = self.exchange([pkt])
        self.compare(m, b, "DATA without grant")
        self.assertEqual(b["port"], PORT_OTHER)
        self.check_color(m, b, len(bytes(pkt)), 0, "DATA without grant")

        # A burst within the committed burst (flow A's slot has room left): all green.
        latest = (now + 100 * NS_PER_S) & TIME_MASK
        size = len(bytes(safs_data(SENDER_IP, RECEIVER_IP, 1, 1, 0, 0, BIG_PAYLOAD)))
        room = self.meter[slot_a].cburst - self.slot_bytes[slot_a]
        within = room // size
        self.assertGreaterEqual(within, 2, "test setup: committed burst too small")
        self.probe()
        burst = [safs_data(SENDER_IP, RECEIVER_IP, FLOW_A, 2000 + i, latest, ga["epoch"], BIG_PAYLOAD, **kw)
                 for i in range(within)]
        for m, b, _ in sorted(self.exchange(burst), key=lambda x: x[2]):
            self.compare(m, b, "burst within cburst")
            self.assertEqual(self.check_color(m, b, size, slot_a, "burst within cburst"), "green")

        # A burst far above the rate (flow B): green up to the committed burst, then red.
        count = 2 * self.meter[slot_b].pburst // size + 2
        self.probe()
        burst = [safs_data(SENDER_IP, RECEIVER_IP, FLOW_B, 3000 + i, latest, self.grants[FLOW_B]["epoch"],
                           BIG_PAYLOAD, **kw) for i in range(count)]
        seen = []
        for m, b, _ in sorted(self.exchange(burst), key=lambda x: x[2]):
            self.compare(m, b, "burst far above rate")
            seen.append(self.check_color(m, b, size, slot_b, "burst far above rate"))
        self.assertIn("green", seen)
        self.assertEqual(seen[-1], "red", f"colours by packet: {seen}")

    def slack_clear(self, s_lo: int, s_hi: int, qclass: int) -> bool:
        """True when every slack in [s_lo, s_hi] is in ``qclass`` >= EDGE_MARGIN_NS from its edges."""
        for r in self.sched.allocator.slack_class_table():
            if r.qclass == qclass:
                return r.low_slack_ns + EDGE_MARGIN_NS <= s_lo and s_hi <= r.high_slack_ns - EDGE_MARGIN_NS
        return False

    # ------------------------------------------------------------------ undo

    def raw_write(self, updates: list[p4runtime_pb2.Update]) -> None:
        """Write protobuf updates the typed Target interface has no form for (meter reset),
        over the BMv2 target's primary connection (its SwitchClient; TargetError on failure)."""
        self.bmv2.client.write(updates)

    def undo(self, saved: dict) -> None:
        """Delete what the scheduler installed (entries, clone sessions), restore settings,
        reset meters (via BMv2 target)."""
        if self.sched is None:
            return
        installed = self.sched.installed(SWITCH)
        deletes = [Update(Op.DELETE, e) for e in installed if not e.is_default]
        deletes += [Update(Op.DELETE, cs) for cs in self.sched.installed_clone_sessions(SWITCH).values()]
        restores = [Update(Op.MODIFY, e) for t, e in saved.items() if e is not None]
        self.bmv2.write(deletes + restores)
        meter_id = self.bmv2.index.meter(n.FLOW_METER).id
        resets = []
        for slot in self.sched.installed_meters(SWITCH):  # MODIFY without config: unconfigured
            upd = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
            upd.entity.meter_entry.meter_id = meter_id
            upd.entity.meter_entry.index.index = slot
            resets.append(upd)
        self.raw_write(resets)

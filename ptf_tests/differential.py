"""Differential tests: the same writes and packets through safs.targets.pipeline_model and through BMv2.

Both targets get the SAME typed updates: a :class:`safs.core.scheduler.Scheduler` on a
one-switch topology matching the PTF ports (sender host on port 1, receiver on 2, a third host
on 3) writes through a fan-out target to the in-process
:class:`~safs.targets.pipeline_model.PipelineModel` and to BMv2 via
:class:`safs.targets.p4rt.P4RuntimeTarget` (election id (0, 2), so it is primary over the base
test's connection, which only pushes the pipeline, once more at the start so BMv2's registers
are zero as the model's are). Both get the same clock offset (just below 2^48, so fabric time
wraps), and the same clone sessions (``Scheduler.setup`` writes session port + 1 -> port for the
three ports; BMv2 needs them for a pushed GRANT, the model emits that GRANT only through them).
A few entries the scheduler would not write go through the fan-out too. Every write is undone at
the end through the same P4Runtime connection (entries and clone sessions deleted, defaults and
the clock offset restored to what was read before, meters reset to unconfigured).

Packets (safs.core.scapy_layer builders) go into BMv2 through PTF and, converted to
:class:`safs.core.packet.Packet`, into the model; the outputs are paired by
(port, type, flow id, remaining bytes) and compared: which packets come out on which port,
IPs, UDP ports, type, flags, qclass, flow id, dep_id, remaining bytes, rate, epoch, lease, the
DATA timestamp (unchanged) and the frame size; a switch-generated GRANT's timestamp (switch
time) must lie in the window the test measured around the send. Not compared: ``qdepth``
(BMv2's real queue vs the model's egress argument). Colour is compared in clear cases only.

:class:`DifferentialTest`: fixed grants (``grant_mode="per-transfer"``: every announced flow is
its own dependency, ``dep_id = flow_id mod 65535 + 1``), slack classes, the push rule, meters.
:class:`ShareDifferentialTest`: share grants (``grant_mode="share"``): four dependencies (two
dep_ids of the sender, the same dep_id from the third host, a background one) activating and
going idle on the receiver port in several urgency classes (ALONE, TOP and WAITING shares,
the scheduler's 1/32 reserve pushed to a lone top dependency, a slack shrinking into the top
class, LAST of the top class), with the push rule's boundaries, a load above the last
``port_share`` entry, a switch restart (registers lost; the scheduler re-installs), a slack
class entry giving queue 7, a dependency's DATA to another receiver port and the port holder
(two sole dependencies taking, waiting for, preempting and releasing the port): every GRANT's rate
and epoch compared, and each rate checked against the scheduler's entry for the expected
(mode, load). With ``top_overcommit`` 2 the scheduler's ``top_boost`` entries are on both
targets; steps are far apart, so every window is silent and no entry applies.

Time: the switch clock is learned from a GRANT (as ptf_tests/slack.py): a REQUEST of a
dependency without an entry is sent at t0, its GRANT (timestamp T) received at t1. A packet
sent at t2 and received at t3 was processed at a switch time in [T + (t2 - t1), T + (t3 - t0)];
the model's clock is set to the start of that window. A DATA packet of the fixed-grant test is
compared only when its whole slack window lies inside one class of the scheduler's slack table
and at least 1 ms away from the class edges; otherwise (a stall on a busy machine) it is re-sent
with a new probe, up to ``ATTEMPTS`` times. The scheduler's classes 5 (slack 0..100 µs) and 4
(100 µs..1 ms) are narrower than 2 ms, so only classes 6 (late), 3 (1 ms..1 s with these
thresholds) and 2 (>= 1 s) are exercised. The share test changes register state with every
packet, so it cannot re-send: it uses its own slack thresholds (0, 1000, 2000, 3000 s) and only
slacks 500 s away from any class edge (classes 6, 5, 3 and 2).

Meters (fixed-grant test): the topology's links are 8 kbit/s, so grants and meters are tiny
(cir ~1000 bytes/s, committed and peak bursts 2 x 1514 bytes = the scheduler's floor with
``unscheduled_bytes=0``). Per meter slot the test counts the bytes sent; a packet is clearly
green when the bytes through its slot up to and including it fit the committed burst (buckets
start full), clearly red when they exceed the peak burst plus what the peak rate can refill
between the slot's first packet and this packet's receive time (plus 1 s); otherwise its colour
is not compared. A burst within the committed burst (flow 20) must be green on both, one far
above the rate (flow 21) red on both beyond the peak burst.
"""

from __future__ import annotations

import time
from pathlib import Path

import ptf.testutils as tu
from base_test import (
    OTHER_IP,
    PORT_OTHER,
    PORT_RECEIVER,
    PORT_SENDER,
    PROBE_DEP,
    PROBE_FLOW,
    RECEIVER_IP,
    SENDER_IP,
    TO_SWITCH,
    SafsTest,
    ip_int,
)
from p4.v1 import p4runtime_pb2
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from safs.core import p4names as n
from safs.core.allocator import AllocatorConfig
from safs.core.hints import DependencyHint, FlowClass, FlowHint
from safs.core.packet import PROTO_UDP, Packet
from safs.core.protocol import (
    FLAG_BACKGROUND,
    FLAG_CAPPED,
    FLAG_LAST,
    FLAG_RENEW,
    FLAG_SOLE,
    NS_PER_S,
    RATE_KBPS_MAX,
    Color,
    MsgType,
    epoch_newer,
    transfer_dep_id,
)
from safs.core.scapy_layer import SAFS, safs_data, safs_done, safs_grant, safs_request
from safs.core.scheduler import Scheduler, SchedulerConfig
from safs.core.target import CounterValue, Op, RequestDigest, TableEntry, Update
from safs.core.timebase import TIME_MASK, TIME_MOD
from safs.core.topology import build_topology
from safs.targets.p4rt.target import P4RuntimeTarget
from safs.targets.pipeline_model import PipelineModel

SWITCH = "s1"
OFFSET_NS = TIME_MOD - 30 * NS_PER_S  # fabric time wraps 30 s after the switch started
MS = 1_000_000
EDGE_MARGIN_NS = 1 * MS  # a DATA slack window must stay this far from class edges
ATTEMPTS = 25
# Class 3 spans 1 ms..1 s here (default 1..10 ms), so a DATA packet at 500 ms of slack stays clear
# of the class edges even when a loaded 2-core machine stalls the exchange for tens of ms.
SLACK_THRESHOLDS_NS = (0, 100_000, 1_000_000, 1_000_000_000)
FLOW_A, FLOW_B, FLOW_C, FLOW_UNKNOWN = 20, 21, 22, 30  # C: the slack retries (own meter slot)
DEP_A, DEP_B, DEP_C, DEP_UNKNOWN = (transfer_dep_id(f) for f in (FLOW_A, FLOW_B, FLOW_C, FLOW_UNKNOWN))
BIG_PAYLOAD = 1000  # burst packets, bytes of payload
REFILL_SLACK_S = 1.0
# Fixed grants written directly (through the fan-out): the push rule's boundaries at a rate
# with exact 1/32 and 1/256, and at the largest rate (32-bit overflow). Slot 4000: never
# configured, so always green.
PUSH_DEP, MAX_DEP, RAW_SLOT = 999, 1000, 4000
PUSH_RATE, MAX_RATE = 3_200_000, RATE_KBPS_MAX


def topology(rate: str) -> dict:
    return {
        "name": "ptf-one-switch",
        "defaults": {"rate": rate},
        "switches": [SWITCH],
        "hosts": {  # ports in this order: 1, 2, 3 (= the PTF ports of base_test)
            "snd": {"ip": SENDER_IP, "switch": SWITCH},
            "rcv": {"ip": RECEIVER_IP, "switch": SWITCH},
            "oth": {"ip": OTHER_IP, "switch": SWITCH},
        },
    }


SETTINGS_TABLES = (n.CLOCK_OFFSET, n.DEFAULT_GRANT, n.ECN_THRESHOLD, n.SLACK_CLASS, n.SHARE_LEASE)


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
    p.qclass, p.color, p.flow_id, p.dep_id = hdr.qclass, hdr.color, hdr.flow_id, hdr.dep_id
    p.remaining, p.ts = hdr.remaining_bytes, hdr.timestamp_ns
    p.rate_kbps, p.epoch, p.lease_us, p.qdepth = hdr.rate_kbps, hdr.epoch, hdr.lease_us, hdr.qdepth
    return p


def _ip_str(addr: int) -> str:
    return ".".join(str((addr >> s) & 0xFF) for s in (24, 16, 8, 0))


def model_fields(port: int, p: Packet) -> dict:
    return {"port": port, "src": _ip_str(p.src), "dst": _ip_str(p.dst), "sport": p.sport,
            "dport": p.dport, "type": p.safs_type, "flags": p.flags, "qclass": p.qclass,
            "flow_id": p.flow_id, "dep_id": p.dep_id, "remaining": p.remaining, "rate_kbps": p.rate_kbps,
            "epoch": p.epoch, "lease_us": p.lease_us, "size": p.size}


def bmv2_fields(port: int, pkt: Ether) -> dict:
    h = pkt[SAFS]
    return {"port": port, "src": pkt[IP].src, "dst": pkt[IP].dst, "sport": pkt[UDP].sport,
            "dport": pkt[UDP].dport, "type": h.type, "flags": h.flags, "qclass": h.qclass,
            "flow_id": h.flow_id, "dep_id": h.dep_id, "remaining": h.remaining_bytes, "rate_kbps": h.rate_kbps,
            "epoch": h.epoch, "lease_us": h.lease_us, "size": len(bytes(pkt))}


def _pair_key(f: dict) -> tuple:
    return (f["port"], f["type"], f["flow_id"], f["remaining"])


COMPARED = ("port", "src", "dst", "sport", "dport", "type", "flags", "qclass", "flow_id", "dep_id",
            "remaining", "rate_kbps", "epoch", "lease_us", "size")


class DiffTestBase(SafsTest):
    """The two targets, the clock probe, one exchange step, comparison and undo."""

    def start(self, cfg: SchedulerConfig, rate: str) -> None:
        self.push_pipeline_again()  # BMv2's registers zero, as a new model's
        p = tu.test_params_get()
        self.model_local_ns = 0
        self.model = PipelineModel(SWITCH, lambda: self.model_local_ns)
        self.bmv2 = P4RuntimeTarget(SWITCH, p["grpc_addr"], int(p.get("device_id", 0)), p["p4info"],
                                    election_id=(0, 2), timeout_s=self.timeout)
        self.addCleanup(self.bmv2.close)  # even if the reads below fail (its stream thread is not a daemon)
        self.sched: Scheduler | None = None
        self.extra: list[TableEntry] = []  # written directly through the fan-out (deleted at the end)
        self.gone: set = set()  # keys of scheduler entries deleted directly (not deleted again)
        self.slot_bytes: dict[int, int] = {}
        self.slot_first: dict[int, float] = {}
        self.saved = {t: self.bmv2.read_default(t) for t in SETTINGS_TABLES}
        self.poll_until(lambda: self.bmv2.is_primary, "primary arbitration of (0, 2)")
        self.fanout = FanOut(self.model, self.bmv2)
        self.sched = Scheduler(build_topology(topology(rate), "differential"), {SWITCH: self.fanout}, cfg)
        self.sched.setup(0, {SWITCH: OFFSET_NS})  # clone sessions included
        self.assertEqual(sorted(self.sched.installed_clone_sessions(SWITCH)),
                         [port + n.CLONE_SESSION_BASE for port in (PORT_SENDER, PORT_RECEIVER, PORT_OTHER)])

    @property
    def meter(self) -> dict:
        """The meter configs the scheduler installed, by slot."""
        return self.sched.installed_meters(SWITCH)

    def finish(self) -> None:
        try:
            self.undo(self.saved)
        finally:
            self.bmv2.close()

    def write_extra(self, entry: TableEntry, op: Op = Op.INSERT) -> None:
        """Write ``entry`` to both targets outside the scheduler; deleted at the end."""
        self.fanout.write([Update(op, entry)])
        if op is Op.INSERT:
            self.extra.append(entry)

    # ------------------------------------------------------------------ time

    def probe(self) -> None:
        """Learn the switch's fabric time (see module docstring); not fed to the model (a
        REQUEST of a dependency without an entry changes no state but the digest queue)."""
        t0 = time.monotonic()
        self.send(PORT_SENDER, safs_request(SENDER_IP, RECEIVER_IP, PROBE_FLOW, 1, 0, dep_id=PROBE_DEP, **TO_SWITCH))
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

    def exchange(self, pkts: list[Ether], in_port: int = PORT_SENDER) -> list[tuple[dict, dict, int]]:
        """Send ``pkts`` back to back into BMv2 on ``in_port`` and, one by one, into the model;
        receive as many packets (any port) as the model emits and pair them by :func:`_pair_key`.

        Returns ``(model fields, BMv2 fields, index of the sent packet)`` per output; the field
        dicts also hold ``color`` and ``ts``. Fails when BMv2 emits fewer or other packets.
        Sets ``last_window`` (switch-time window of the step) and ``last_t`` (send, receive)."""
        t_send = time.monotonic()
        for pkt in pkts:
            self.send(in_port, pkt)
        expected = []
        for i, pkt in enumerate(pkts):
            sim = to_sim(pkt)
            lo, _ = self.window(t_send, t_send)  # the earliest time the switch can see it
            self.model_local_ns = (lo - OFFSET_NS) & TIME_MASK
            for port, out in self.model.ingress(sim, in_port):
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
        self.assertEqual({k: b[k] for k in COMPARED}, {k: m[k] for k in COMPARED}, f"{what}: BMv2 vs model")
        if m["type"] == int(MsgType.GRANT):  # switch time: inside the measured window
            lo, hi = self.last_window
            self.assertLessEqual((b["ts"] - lo) & TIME_MASK, hi - lo,
                                 f"{what}: GRANT time {b['ts']} outside [{lo & TIME_MASK}, {hi & TIME_MASK}]")

    def check_color(self, m: dict, b: dict, pkt_size: int, slot: int, what: str) -> str:
        """Count ``pkt_size`` on ``slot``; compare colours if clear. Returns green/red/unclear.
        A slot the scheduler never configured is always green."""
        if slot not in self.meter:
            self.assertEqual((m["color"], b["color"]), (int(Color.GREEN),) * 2, f"{what}: unconfigured slot")
            return "green"
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
        """Delete what the scheduler and the test installed (entries, clone sessions), restore
        settings, reset meters (via BMv2 target)."""
        if self.sched is None:
            return
        installed = [e for e in self.sched.installed(SWITCH) if not e.is_default and e.key() not in self.gone]
        deletes = [Update(Op.DELETE, e) for e in installed + self.extra]
        deletes += [Update(Op.DELETE, cs) for cs in self.sched.installed_clone_sessions(SWITCH).values()]
        restores = [Update(Op.MODIFY, e) for t, e in saved.items() if e is not None]
        self.bmv2.write(deletes + restores)
        meter_id = self.bmv2.index.meter(n.DEP_METER).id
        resets = []
        for slot in self.sched.installed_meters(SWITCH):  # MODIFY without config: unconfigured
            upd = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
            upd.entity.meter_entry.meter_id = meter_id
            upd.entity.meter_entry.index.index = slot
            resets.append(upd)
        self.raw_write(resets)


class DifferentialTest(DiffTestBase):
    """Fixed grants (per-transfer mode); see the module docstring."""

    def runTest(self) -> None:
        cfg = SchedulerConfig(grant_mode="per-transfer", admit_on_request=False, default_rate_bps=8_000,
                              unscheduled_bytes=0, allocator=AllocatorConfig(slack_thresholds_ns=SLACK_THRESHOLDS_NS))
        try:
            self.start(cfg, "8kbps")  # tiny rates: meter refill during a test is a few hundred bytes
            self.probe()
            now = self.fabric_estimate(time.monotonic())
            far = (now + 3600 * NS_PER_S) & TIME_MASK
            for flow in (FLOW_A, FLOW_B, FLOW_C):
                self.sched.announce(FlowHint(flow, "snd", "rcv", 10**6, far, f"diff/{flow}"), now)
            self.grants = {e.match[n.F_DEP_ID]: e.params for e in self.sched.installed(SWITCH)
                           if e.table == n.DEP_GRANT}
            self.assertEqual(sorted(self.grants), sorted((DEP_A, DEP_B, DEP_C)))
            self.assertGreater(self.grants[DEP_A]["rate_kbps"], 0, "grants must carry a rate")
            src = ip_int(SENDER_IP)
            for dep, rate, epoch in ((PUSH_DEP, PUSH_RATE, 5), (MAX_DEP, MAX_RATE, 9)):
                self.write_extra(TableEntry(n.DEP_GRANT, {n.F_SRC_ADDR: src, n.F_DEP_ID: dep}, n.ACT_SET_FIXED_GRANT,
                                            {"rate_kbps": rate, "epoch": epoch, "lease_us": 700,
                                             "meter_slot": RAW_SLOT}))
            self.run_sequences()
            self.expect_nothing()
        finally:
            self.finish()

    def data(self, flow: int, dep: int, remaining: int, latest: int, held: tuple[int, int], flags: int = 0,
             payload: int = 64, dst: str = RECEIVER_IP) -> Ether:
        return safs_data(SENDER_IP, dst, flow, remaining, latest, held[1], payload, flags=flags, dep_id=dep,
                         rate_kbps=held[0], **TO_SWITCH)

    def run_sequences(self) -> None:
        ga = self.grants[DEP_A]
        hold_a = (ga["rate_kbps"], ga["epoch"])
        slot_a, slot_b = ga["meter_slot"], self.grants[DEP_B]["meter_slot"]
        now = self.fabric_estimate(time.monotonic())

        # REQUEST of an installed dependency / of an unknown one: GRANT generated in the switch.
        for flow, dep, what in ((FLOW_A, DEP_A, "REQUEST installed"), (FLOW_UNKNOWN, DEP_UNKNOWN, "REQUEST unknown")):
            self.probe()
            (m, b, _), = self.exchange([safs_request(SENDER_IP, RECEIVER_IP, flow, 5000, now, dep_id=dep,
                                                     **TO_SWITCH)])
            self.compare(m, b, what)
            self.assertEqual((b["type"], b["port"]), (int(MsgType.GRANT), PORT_SENDER), what)
            if flow == FLOW_A:
                self.assertEqual((b["rate_kbps"], b["epoch"], b["lease_us"]),
                                 (ga["rate_kbps"], ga["epoch"], ga["lease_us"]), what)
            else:
                self.assertEqual(b["epoch"], 0, what)

        # Control in transit (to a port): class 7 both.
        self.probe()
        (m, b, _), = self.exchange([safs_done(SENDER_IP, OTHER_IP, FLOW_A, now, **TO_SWITCH)])
        self.compare(m, b, "DONE")

        # DATA at slacks well inside classes 6, 3, 2 (small packets: clearly green), on flow C,
        # whose meter slot is not used below: retries on a busy machine cannot use up flow A's.
        gc, slot_c = self.grants[DEP_C], self.grants[DEP_C]["meter_slot"]
        seq = 1000
        for slack, qclass in ((-10 * NS_PER_S, 6), (500 * MS, 3), (10 * NS_PER_S, 2)):
            for _attempt in range(ATTEMPTS):
                seq += 1
                self.probe()
                latest = (self.fabric_estimate(time.monotonic()) + slack) & TIME_MASK
                pkt = self.data(FLOW_C, DEP_C, seq, latest, (gc["rate_kbps"], gc["epoch"]))
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

        # The push rule on flow A's grant (tiny: every rate off pushes) and on the directly
        # written grants at its boundaries (3 200 000 kbit/s: 1/32 = 100 000, 1/256 = 12 500)
        # and at the largest rate. Each: DATA forwarded, plus a GRANT when the rule says so.
        lax = (now + 100 * NS_PER_S) & TIME_MASK
        r, mx = PUSH_RATE, MAX_RATE
        variants = [  # (dep, slot, held (rate, epoch), flags, GRANT expected)
            (DEP_A, slot_a, hold_a, 0, False),
            (DEP_A, slot_a, (hold_a[0], hold_a[1] - 1), 0, False),  # an older epoch alone: nothing
            (DEP_A, slot_a, (hold_a[0] + 1, hold_a[1]), 0, True),
            (DEP_A, slot_a, (hold_a[0], 0), 0, True),
            (DEP_A, slot_a, hold_a, FLAG_RENEW, True),
            (DEP_A, slot_a, (0, 0), FLAG_LAST | FLAG_RENEW, False),
            (PUSH_DEP, RAW_SLOT, (r - r // 32, 5), 0, False), (PUSH_DEP, RAW_SLOT, (r - r // 32 - 1, 5), 0, True),
            (PUSH_DEP, RAW_SLOT, (r - 3 * r // 64, 5), 0, True), (PUSH_DEP, RAW_SLOT, (r + 3 * r // 64, 5), 0, True),
            (PUSH_DEP, RAW_SLOT, (r + r // 256, 5), 0, False), (PUSH_DEP, RAW_SLOT, (r + r // 256 + 1, 5), 0, True),
            (MAX_DEP, RAW_SLOT, (mx, 9), 0, False), (MAX_DEP, RAW_SLOT, (mx - (mx >> 5) - 1, 9), 0, True),
        ]
        for dep, slot, held, flags, want in variants:
            what = f"push rule: dep {dep} holding {held}, flags {flags:#x}"
            seq += 1
            self.probe()
            pkt = self.data(FLOW_A if dep == DEP_A else dep, dep, seq, lax, held, flags)
            pairs = self.exchange([pkt])
            kinds = [(PORT_RECEIVER, int(MsgType.DATA))] + ([(PORT_SENDER, int(MsgType.GRANT))] if want else [])
            self.assertEqual(sorted((b["port"], b["type"]) for _, b, _ in pairs), sorted(kinds), what)
            for m, b, _ in pairs:
                self.compare(m, b, what)
                if b["type"] == int(MsgType.DATA):
                    self.check_color(m, b, len(bytes(pkt)), slot, what)

        # DATA of a dependency without a grant to the third port (default slot 0).
        self.probe()
        pkt = self.data(FLOW_UNKNOWN, DEP_UNKNOWN, 7, lax, (0, 0), dst=OTHER_IP)
        (m, b, _), = self.exchange([pkt])
        self.compare(m, b, "DATA without grant")
        self.assertEqual(b["port"], PORT_OTHER)
        self.check_color(m, b, len(bytes(pkt)), 0, "DATA without grant")

        # A burst within the committed burst (flow A's slot has room left): all green.
        size = len(bytes(safs_data(SENDER_IP, RECEIVER_IP, 1, 1, 0, 0, BIG_PAYLOAD)))
        room = self.meter[slot_a].cburst - self.slot_bytes[slot_a]
        within = room // size
        self.assertGreaterEqual(within, 2, "test setup: committed burst too small")
        self.probe()
        burst = [self.data(FLOW_A, DEP_A, 2000 + i, lax, hold_a, payload=BIG_PAYLOAD) for i in range(within)]
        for m, b, _ in sorted(self.exchange(burst), key=lambda x: x[2]):
            self.compare(m, b, "burst within cburst")
            self.assertEqual(self.check_color(m, b, size, slot_a, "burst within cburst"), "green")

        # A burst far above the rate (flow B): green up to the committed burst, then red.
        gb = self.grants[DEP_B]
        count = 2 * self.meter[slot_b].pburst // size + 2
        self.probe()
        burst = [self.data(FLOW_B, DEP_B, 3000 + i, lax, (gb["rate_kbps"], gb["epoch"]), payload=BIG_PAYLOAD)
                 for i in range(count)]
        seen = []
        for m, b, _ in sorted(self.exchange(burst), key=lambda x: x[2]):
            self.compare(m, b, "burst far above rate")
            seen.append(self.check_color(m, b, size, slot_b, "burst far above rate"))
        self.assertIn("green", seen)
        self.assertEqual(seen[-1], "red", f"colours by packet: {seen}")


# Share test: (host, address, PTF port) of the two senders; slack classes 1000 s wide (class 6
# late, 5 0..1000 s, 4 1000..2000 s, 3 2000..3000 s, 2 above), slacks 500 s inside them.
SENDERS = {"snd": (SENDER_IP, PORT_SENDER), "oth": (OTHER_IP, PORT_OTHER)}
SHARE_THRESHOLDS_NS = (0, 1000 * NS_PER_S, 2000 * NS_PER_S, 3000 * NS_PER_S)
LATE, SOON, MID, LAX, FAR = (s * NS_PER_S for s in (-500, 500, 1500, 2500, 5000))  # urgency 0, 1, 2, 3, 4
DEFAULT_KBPS = 1_000_000  # the share test's default grant (SchedulerConfig default 1 Gbit/s)
HOLD_RELEASE = 5_000  # holder_release_bytes: below the steps' 10,000 + seq remaining bytes
HOLD_PREEMPT_NS = 2**32 - 1  # holder_preempt_ns, its largest (4.3 s): finishes 1 s apart preempt only by
# the slack rule (a shorter claimant whose time fits in the holder's slack)
ALONE, TOP, WAITING = n.SHARE_ALONE, n.SHARE_TOP, n.SHARE_WAITING


class ShareDifferentialTest(DiffTestBase):
    """Share grants (the default mode); see the module docstring. The test's senders keep the
    grant of each GRANT that reaches them (sender rule 2) and send it in their DATA."""

    def runTest(self) -> None:
        # top_overcommit: the scheduler's top_boost entries go to both targets too; every window
        # here is silent (0 top-class bytes), which no entry covers, so no share is raised.
        cfg = SchedulerConfig(default_rate_bps=10**9, unscheduled_bytes=0, holder_release_bytes=HOLD_RELEASE,
                              holder_preempt_ns=HOLD_PREEMPT_NS,
                              allocator=AllocatorConfig(slack_thresholds_ns=SHARE_THRESHOLDS_NS), top_overcommit=2.0)
        try:
            self.start(cfg, "10Gbps")
            # name -> (host, dep_id, slack of its packets unless a step says otherwise, flags)
            self.deps = {"A": ("snd", 1, LATE, 0), "B": ("snd", 2, LAX, 0), "C": ("oth", 1, LATE, 0),
                         "D": ("snd", 3, LATE, FLAG_BACKGROUND)}
            for name, (host, dep_id, _, flags) in self.deps.items():
                cls = FlowClass.BACKGROUND if flags else FlowClass.PIPELINE
                self.assertTrue(self.sched.announce_dependency(DependencyHint(dep_id, host, "rcv", f"diff/{name}", cls),
                                                               0))
            self.shares = {(e.match[n.F_MODE], e.match[n.F_LOAD]): e.params["rate_kbps"]
                           for e in self.sched.installed(SWITCH)
                           if e.table == n.PORT_SHARE and e.match[n.F_EGRESS_PORT] == PORT_RECEIVER}
            self.assertEqual(sorted(self.shares), [(mode, load) for mode in (ALONE, TOP, WAITING)
                                                   for load in range(1, n.MAX_LOAD + 1)])
            self.spare_levels = self.drop_spare_levels()
            self.held: dict[str, tuple[int, int]] = {}
            self.seq = 0
            self.run_share_sequence()
            self.expect_nothing()
        finally:
            self.finish()

    def step(self, name: str, kind: MsgType, flags: int = 0, held: tuple[int, int] | None = None,
             slack: int | None = None, dst: str = RECEIVER_IP, remaining: int | None = None) -> dict | None:
        """One packet of dependency ``name`` (REQUEST or DATA holding its sender's grant, or
        ``held``, from then on its sender's; ``remaining`` bytes, default 10,000 + the step's
        number) through both targets; returns the BMv2 GRANT's fields (compared), if any."""
        host, dep_id, cls_slack, dep_flags = self.deps[name]
        src, port = SENDERS[host]
        flags |= dep_flags
        self.seq += 1
        self.probe()
        latest = (self.fabric_estimate(time.monotonic()) + (cls_slack if slack is None else slack)) & TIME_MASK
        rem = 10_000 + self.seq if remaining is None else remaining
        if kind is MsgType.REQUEST:
            pkt = safs_request(src, dst, 100 + self.seq, rem, latest, flags=flags,
                               dep_id=dep_id, **TO_SWITCH)
        else:
            if held is not None:
                self.held[name] = held
            rate, epoch = self.held.get(name, (0, 0))
            pkt = safs_data(src, dst, 100 + self.seq, rem, latest, epoch, 64, flags=flags,
                            dep_id=dep_id, rate_kbps=rate, **TO_SWITCH)
        what = f"step {self.seq}: {name} {kind.name} flags {flags:#x}"
        grant = None
        for m, b, _ in self.exchange([pkt], in_port=port):
            self.compare(m, b, what)
            if b["type"] == int(MsgType.GRANT):
                self.assertEqual((b["port"], b["dst"]), (port, src), what)
                grant = b
                epoch, had = b["epoch"], self.held.get(name)
                if had is None or epoch == 0 or not epoch_newer(had[1], epoch):  # sender rule 2
                    self.held[name] = (b["rate_kbps"], epoch)
            else:
                self.check_color(m, b, len(bytes(pkt)), self.slot(name), what)
        return grant

    def slot(self, name: str) -> int:
        host, dep_id, _, _ = self.deps[name]
        return next(e.params["meter_slot"] for e in self.sched.installed(SWITCH)
                    if e.table == n.DEP_GRANT and e.match == {n.F_SRC_ADDR: ip_int(SENDERS[host][0]),
                                                              n.F_DEP_ID: dep_id})

    def expect_grant(self, name: str, kind: MsgType, share: tuple[int, int] | None, level: int = 1, **kw) -> dict:
        """A step that must produce a GRANT with the scheduler's ``port_share`` rate of ``share``
        = (mode, load) (times the spare ``level``), the default grant (epoch 0) when ``share`` is
        None."""
        g = self.step(name, kind, **kw)
        self.assertIsNotNone(g, f"{name} {kind.name}: a GRANT expected")
        if share is None:
            self.assertEqual((g["rate_kbps"], g["epoch"]), (DEFAULT_KBPS, 0), f"{name}: the default grant")
        else:
            self.assertEqual(g["rate_kbps"], self.shares[share] * level, f"{name}: GRANT rate of (mode, load) {share}")
            self.assertNotEqual(g["epoch"], 0, name)
        return g

    def expect_none(self, name: str, kind: MsgType = MsgType.DATA, **kw) -> None:
        self.assertIsNone(self.step(name, kind, **kw), f"{name}: no GRANT expected")

    def run_share_sequence(self) -> None:
        req, data = MsgType.REQUEST, MsgType.DATA
        alone, top = self.shares[(ALONE, 1)], self.shares[(TOP, 1)]
        # A alone (late), then B (2500 s) waits behind it. With the scheduler's reserve (1/32 of
        # the usable rate) ALONE -> TOP is beyond the push rule's 1/256 (higher): A's next DATA
        # is pushed TOP, so the rates senders hold stay within the usable rate.
        g1 = self.expect_grant("A", req, (ALONE, 1))
        self.expect_none("A")
        self.expect_grant("B", req, (WAITING, 1))
        self.assertGreater(alone - top, top >> 8)
        g2 = self.expect_grant("A", data, (TOP, 1))
        self.assertTrue(epoch_newer(g2["epoch"], g1["epoch"]))
        self.expect_none("A")
        # C (the third host, A's dep_id) late: shares the top class; D (background, late packets:
        # urgency 4) waits with B.
        self.expect_grant("C", req, (TOP, 2))
        self.expect_grant("A", data, (TOP, 2))
        self.expect_none("B")
        self.expect_grant("D", req, (WAITING, 2))
        self.expect_grant("B", data, (WAITING, 2))
        self.expect_none("A")
        # The push rule against A's share (held rate off by 1/40 and 1/20 below, 1/400 and 1/100
        # above, RENEW, epoch 0, LAST with RENEW).
        rate, epoch = self.held["A"]
        for held, flags, want in (((rate - rate // 40, epoch), 0, False), ((rate - rate // 20, epoch), 0, True),
                                  ((rate + rate // 400, epoch), 0, False), ((rate + rate // 100, epoch), 0, True),
                                  ((rate, epoch), FLAG_RENEW, True), ((rate, 0), 0, True)):
            if want:
                self.expect_grant("A", data, (TOP, 2), flags=flags, held=held)
            else:
                self.expect_none("A", flags=flags, held=held)
        # B's slack shrinks into the top class (a late DATA): TOP at load 3 for A, B, C; D waits
        # alone. B's next transfer (REQUEST at 2500 s) moves it back behind them.
        self.expect_grant("B", data, (TOP, 3), slack=LATE)
        for name in ("A", "C"):
            self.expect_grant(name, data, (TOP, 3))
        self.expect_grant("D", data, (WAITING, 1))
        self.expect_grant("B", req, (WAITING, 2))
        self.expect_grant("A", data, (TOP, 2))
        # LAST of the top class (A, then C, with RENEW): B, now the most urgent, TOP at load 1;
        # D's share is WAITING at load 1 again, which it holds: nothing.
        self.expect_none("A", flags=FLAG_LAST)
        self.expect_none("C", flags=FLAG_LAST | FLAG_RENEW)
        self.expect_grant("B", data, (TOP, 1))
        self.expect_none("D")
        # A load above the last port_share entry: (TOP, 2) deleted directly. A's REQUEST at
        # 2500 s (B's class) brings it there: the default grant, and B's next DATA too (every
        # dependency of the class), each DATA holding epoch 0 again; D (WAITING at load 1) is
        # not affected. After A's LAST, B is pushed TOP at load 1 again.
        entry = TableEntry(n.PORT_SHARE, {n.F_EGRESS_PORT: PORT_RECEIVER, n.F_LOAD: 2, n.F_MODE: TOP},
                           n.ACT_SET_SHARE, {"rate_kbps": self.shares[(TOP, 2)]})
        self.fanout.write([Update(Op.DELETE, entry)])
        self.gone.add(entry.key())
        self.expect_grant("A", req, None, slack=LAX)
        self.expect_grant("B", data, None)
        self.expect_grant("B", data, None)
        self.expect_none("D")
        self.expect_none("A", flags=FLAG_LAST, slack=LAX)
        self.expect_grant("B", data, (TOP, 1))
        # Restart: registers lost on both. A stale LAST of C subtracts nothing; D's next DATA
        # counts it alone (ALONE at load 1, epoch 1: the generation restarted), which its
        # sender ignores (it holds a newer epoch: rule 2); B's next DATA is more urgent than D
        # and already holds TOP at load 1: nothing. A's REQUEST (late) is the new top: B and D
        # are pushed WAITING at load 2.
        self.restart()
        self.expect_none("C", flags=FLAG_LAST)
        held_d = self.held["D"]
        g = self.expect_grant("D", data, (ALONE, 1))
        self.assertEqual(g["epoch"], 1, "the port generation restarted")
        self.assertTrue(epoch_newer(held_d[1], g["epoch"]), "the sender keeps its newer-epoch grant")
        self.assertEqual(self.held["D"], held_d)
        self.expect_none("B")
        self.expect_grant("A", req, (TOP, 1))
        for name in ("B", "D"):
            self.expect_grant(name, data, (WAITING, 2))
        for name in ("A", "B", "D"):
            self.expect_none(name, flags=FLAG_LAST)
        self.expect_grant("C", req, (ALONE, 1))  # the port is idle again: C alone
        self.expect_none("C", flags=FLAG_LAST)
        # Bad input, a defined behaviour on both. (1) A slack class outside 2..6 (the
        # scheduler's class-5 entry MODIFIED to queue 7): its urgency, 6 - 7, counts as 4 (the
        # least urgent), not as idle: C's REQUEST at 500 s gets ALONE at load 1 and B's at
        # 5000 s (class 2, urgency 4) shares C's class; A's late REQUEST is more urgent.
        self.set_class_queue(5, 7)
        self.expect_grant("C", req, (ALONE, 1), slack=SOON)
        self.expect_grant("B", req, (ALONE, 2), slack=FAR)
        self.expect_grant("C", data, (ALONE, 2), slack=SOON)
        self.expect_grant("A", req, (TOP, 1))
        self.set_class_queue(5, 5)
        self.expect_grant("C", data, (WAITING, 2), slack=SOON)
        # (2) A DATA of A (counted at port 2) to the third host, another receiver port (a
        # sender using one dep_id for two receivers): no dependency is counted at port 3, so
        # its load is 0, which has no port_share entry: the default grant. A's next DATA to its
        # receiver, holding epoch 0, is pushed its share again.
        self.expect_grant("A", data, None, dst=OTHER_IP)
        self.expect_grant("A", data, (TOP, 1))
        for name, slack in (("A", LATE), ("B", FAR), ("C", SOON)):
            self.expect_none(name, flags=FLAG_LAST, slack=slack)
        # The spare level: the scheduler's spare_level entries back on both. Steps are far more
        # than 2 x TOP_WINDOW_NS apart, so every window is silent (0 top-class bytes): B waiting
        # behind A gets its WAITING share times the level of 0 bytes; A's share is unchanged.
        self.fanout.write([Update(Op.INSERT, e) for e in self.spare_levels])
        self.gone.difference_update(e.key() for e in self.spare_levels)
        idle = next(e.params["level"] for e in self.spare_levels
                    if e.match[n.F_EGRESS_PORT] == PORT_RECEIVER and e.match[n.F_TOP_BYTES].low == 0)
        self.assertGreater(idle, 1)
        self.expect_grant("A", req, (ALONE, 1))
        self.expect_grant("B", req, (WAITING, 1), level=idle)
        self.expect_grant("A", data, (TOP, 1))
        for name in ("A", "B"):
            self.expect_none(name, flags=FLAG_LAST)
        self.run_holder_sequence(idle)
        self.run_out_link_sequence()

    def run_holder_sequence(self, idle: int) -> None:
        """The port holder (scheduler defaults but ``holder_release_bytes``): A and C late and
        sole. Steps are milliseconds apart, far beyond ``holder_idle_ns`` (10 µs), so every
        holder is silent by the next step: a DATA takes its port, a REQUEST does not."""
        req, data, sole = MsgType.REQUEST, MsgType.DATA, FLAG_SOLE
        self.expect_grant("A", req, (ALONE, 1), flags=sole)  # one sole dependency: no holder
        # C joins: two sole ones count as one (load 1) with one waiting; C takes the free port.
        self.expect_grant("C", req, (TOP, 1), flags=sole)
        # A's REQUEST does not take it from a silent holder: it waits, without the spare level
        # (level 1 although the window is silent: the idle level is ``idle``).
        self.assertGreater(idle, 1)
        self.expect_grant("A", req, (WAITING, 1), flags=sole)
        self.expect_grant("A", data, (TOP, 1), flags=sole)  # its DATA does: C is silent
        self.expect_grant("C", req, (WAITING, 1), flags=sole)
        # C finishing 200 s before A (a slack 200 s earlier, the same class) preempts it.
        self.expect_grant("C", req, (TOP, 1), flags=sole, slack=LATE - 200 * NS_PER_S)
        # C with at most holder_release_bytes left frees the port and keeps its share; A's
        # REQUEST takes the free port.
        self.expect_grant("C", req, (TOP, 1), flags=sole, remaining=HOLD_RELEASE)
        self.expect_grant("A", req, (TOP, 1), flags=sole)
        # A no longer sole: one sole dependency left, no holder; both share the class.
        self.expect_grant("A", data, (ALONE, 2))
        for name in ("A", "C"):
            self.expect_none(name, flags=FLAG_LAST)
        self.run_holder_slack_sequence()

    def run_holder_slack_sequence(self) -> None:
        """The holder's slack rule: a sole claimant finishing before the holder by less than
        ``holder_preempt_ns`` takes the port iff it is shorter and its time at 100 Gbit/s
        (remaining / 12.8 ns per byte) fits in the holder's slack. All in class SOON (0..1000 s);
        finishes 1 s apart, far beyond the ms between steps."""
        req, sole, s = MsgType.REQUEST, FLAG_SOLE, NS_PER_S
        big, small = 10_000_000, 20_000  # 781 us and 1.6 us at 100 Gbit/s
        self.expect_grant("A", req, (ALONE, 1), flags=sole, slack=SOON, remaining=small)  # one sole: no holder
        self.expect_grant("C", req, (TOP, 1), flags=sole, slack=SOON, remaining=big)  # takes the free port
        # A finishes 1 s before C, is shorter and fits in C's 500 s of slack: it takes the port.
        self.expect_grant("A", req, (TOP, 1), flags=sole, slack=SOON - s, remaining=small)
        # C, finishing after A, waits.
        self.expect_grant("C", req, (WAITING, 1), flags=sole, slack=SOON, remaining=big)
        # A with 400 s of slack holds 10 TB (781 s at 100 Gbit/s): C, 6.4 TB (500 s) finishing 1 s
        # earlier and shorter, does not fit in A's slack and waits.
        at_100g = n.holder_time_ns
        a_rem, c_rem = 10 * 10**12, 64 * 10**11
        self.expect_grant("A", req, (TOP, 1), flags=sole, slack=400 * s, remaining=a_rem)
        self.expect_grant("C", req, (WAITING, 1), flags=sole, slack=400 * s + at_100g(a_rem) - at_100g(c_rem) - s,
                          remaining=c_rem)
        for name in ("A", "C"):
            self.expect_none(name, flags=FLAG_LAST)

    def out_exchange(self, pkt: Ether, in_port: int, what: str) -> dict:
        """One packet through both targets, one packet out: its BMv2 fields, compared with the
        model's (a forwarded GRANT keeps the timestamp it was sent with)."""
        (m, b, _), = self.exchange([pkt], in_port=in_port)
        self.assertEqual({k: b[k] for k in COMPARED}, {k: m[k] for k in COMPARED}, f"{what}: BMv2 vs model")
        return b

    def run_out_link_sequence(self) -> None:
        """Out-links at the sender's ToR: port 3 becomes a fabric port (its receiver_port and
        host_port entries deleted on both targets) with out_share entries at the receiver
        port's rates, so the third host's address lies beyond a contended out-link. A and B
        (the sender's, claimed with out slots) send there; GRANTs for A come back on port 3."""
        out_port = [e for e in self.sched.installed(SWITCH)
                    if (e.table == n.RECEIVER_PORT and e.match[n.F_EGRESS_PORT] == PORT_OTHER)
                    or (e.table == n.HOST_PORT and e.match[n.F_INGRESS_PORT] == PORT_OTHER)]
        self.assertEqual(len(out_port), 2)
        self.fanout.write([Update(Op.DELETE, e) for e in out_port])
        self.gone.update(e.key() for e in out_port)
        for (mode, load), rate in self.shares.items():
            self.write_extra(TableEntry(n.OUT_SHARE, {n.F_EGRESS_PORT: PORT_OTHER, n.F_LOAD: load, n.F_MODE: mode},
                                        n.ACT_SET_OUT_SHARE, {"rate_kbps": rate}))
        claims = {e.match[n.F_DEP_ID]: e.params["out_slot"] for e in self.sched.installed(SWITCH)
                  if e.table == n.DEP_CLAIM and e.match[n.F_SRC_ADDR] == ip_int(SENDER_IP)}
        self.assertEqual(claims[1], self.slot("A"), "a dependency's out slot is its meter slot")

        def data(name: str, held: int, flags: int = 0, slack: int | None = None, remaining: int = 10_000) -> dict:
            _, dep_id, cls_slack, _ = self.deps[name]
            self.seq += 1
            self.probe()
            latest = (self.fabric_estimate(time.monotonic()) + (cls_slack if slack is None else slack)) & TIME_MASK
            pkt = safs_data(SENDER_IP, OTHER_IP, 100 + self.seq, remaining, latest, 7, 64, flags=flags,
                            dep_id=dep_id, rate_kbps=held, **TO_SWITCH)
            b = self.out_exchange(pkt, PORT_SENDER, f"step {self.seq}: {name} DATA holding {held}, flags {flags:#x}, "
                                                    f"{remaining} bytes left")
            self.assertEqual(b["port"], PORT_OTHER)
            return b

        def grant(rate: int, dep_id: int = 1) -> int:
            self.seq += 1
            pkt = safs_grant(OTHER_IP, SENDER_IP, 100 + self.seq, rate, 7, 500, 0, dep_id=dep_id, **TO_SWITCH)
            b = self.out_exchange(pkt, PORT_OTHER, f"step {self.seq}: GRANT of dep {dep_id} at {rate}")
            self.assertEqual((b["port"], b["type"]), (PORT_SENDER, int(MsgType.GRANT)))
            return b["rate_kbps"]

        alone, top, waiting = self.shares[(ALONE, 1)], self.shares[(TOP, 1)], self.shares[(WAITING, 1)]
        # A alone at port 3: its cap is the ALONE share. Held above it (by more than 1/256): the
        # DATA leaves holding 0 (the receiver's ToR will push); at it (within 1/32): CAPPED; well
        # below: unchanged; a host's own CAPPED is cleared.
        self.assertEqual(data("A", 2 * alone)["rate_kbps"], 0)
        b = data("A", alone - alone // 40)
        self.assertEqual((b["rate_kbps"], b["flags"] & FLAG_CAPPED), (alone - alone // 40, FLAG_CAPPED))
        b = data("A", alone // 2, flags=FLAG_CAPPED)
        self.assertEqual((b["rate_kbps"], b["flags"] & FLAG_CAPPED), (alone // 2, 0))
        # A GRANT for A from the fabric: capped to A's share; one below it, or of an unclaimed
        # dependency, passes unchanged.
        self.assertEqual(grant(2 * alone), alone)
        self.assertEqual(grant(alone // 3), alone // 3)
        self.assertEqual(grant(2 * alone, dep_id=77), 2 * alone)
        # B (less urgent) joins at port 3: it waits (WAITING share, no out_spare_level entries:
        # level 1); A's next DATA holds the TOP share, which its GRANTs get.
        self.assertEqual(data("B", 2 * waiting)["rate_kbps"], 0)
        self.assertEqual(data("A", top)["flags"] & FLAG_CAPPED, FLAG_CAPPED)
        self.assertEqual(grant(2 * alone), top)
        # A's LAST: not counted, no cap; B alone again at its next DATA.
        data("A", top, flags=FLAG_LAST)
        self.assertEqual(grant(2 * alone), 2 * alone)
        self.assertEqual(data("B", alone)["flags"] & FLAG_CAPPED, FLAG_CAPPED)
        data("B", alone, flags=FLAG_LAST)
        # Weighted (unit U = 2^WEIGHT_BASE_BITS bytes): A (64 U left: weight 128) and B (10,000
        # bytes: weight 1) both late at port 3, ALONE there; each one's key is ceil(W / w): B's
        # 129 clamped to MAX_LOAD (128), A's 2. A at 1.5 U (weight 2): A's key 2, B's 3.
        unit, share = 1 << n.WEIGHT_BASE_BITS, self.shares
        big = 64 * unit
        self.assertEqual(data("A", 2 * alone, remaining=big)["rate_kbps"], 0)
        self.assertEqual(grant(2 * alone), alone)
        self.assertEqual(data("B", 2 * alone, slack=LATE)["rate_kbps"], 0)
        self.assertEqual(grant(2 * alone, dep_id=2), share[(ALONE, n.MAX_LOAD)])
        b = data("A", share[(ALONE, 2)], remaining=big)
        self.assertEqual((b["rate_kbps"], b["flags"] & FLAG_CAPPED), (share[(ALONE, 2)], FLAG_CAPPED))
        self.assertEqual(grant(2 * alone), share[(ALONE, 2)])
        data("A", share[(ALONE, 2)], remaining=unit * 3 // 2)
        self.assertEqual(grant(2 * alone), share[(ALONE, 2)])
        data("B", share[(ALONE, 2)], slack=LATE)
        self.assertEqual(grant(2 * alone, dep_id=2), share[(ALONE, 3)])
        data("A", alone, flags=FLAG_LAST)
        data("B", alone, flags=FLAG_LAST, slack=LATE)

    def drop_spare_levels(self) -> list[TableEntry]:
        """Delete the scheduler's spare_level entries on both targets (the share sequence
        checks port_share rates; the spare level has its own steps at its end); returns them."""
        entries = [e for e in self.sched.installed(SWITCH) if e.table == n.SPARE_LEVEL]
        self.fanout.write([Update(Op.DELETE, e) for e in entries])
        self.gone.update(e.key() for e in entries)
        return entries

    def set_class_queue(self, qclass: int, queue: int) -> None:
        """MODIFY the scheduler's slack_class entry of ``qclass`` to give ``queue`` instead (both
        targets; ``queue == qclass`` restores it)."""
        entry = next(e for e in self.sched.installed(SWITCH) if e.table == n.SLACK_CLASS
                     and e.params["qclass"] == qclass)
        self.fanout.write([Update(Op.MODIFY, TableEntry(n.SLACK_CLASS, dict(entry.match), n.ACT_SET_SLACK_CLASS,
                                                        {"qclass": queue}, priority=entry.priority))])

    def restart(self) -> None:
        """Both targets lose everything (the model restarts, BMv2's pipeline is pushed again,
        its clone sessions deleted first: docs/dataplane.md); the scheduler re-installs."""
        self.bmv2.write([Update(Op.DELETE, cs) for cs in self.sched.installed_clone_sessions(SWITCH).values()])
        p = tu.test_params_get()
        self.bmv2.client.push_pipeline(Path(p["p4info"]), Path(p["bmv2_json"]))
        self.model.restart()
        self.gone.clear()
        self.slot_bytes, self.slot_first = {}, {}  # meters configured anew: buckets full
        self.sched.reinstall(SWITCH, 0, OFFSET_NS)
        self.drop_spare_levels()

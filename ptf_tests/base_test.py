"""Base class of the SAFS PTF tests (modelled on fabric-tna's ptf/tests/common/base_test.py).

:class:`SafsTest` owns the P4Runtime connection to the switch under test (a
:class:`p4rt_client.P4RtClient`: the PTF tests' own encoder over the controller's session code,
docs/p4runtime.md "The PTF tests' client"): it arbitrates
(election id (0, 1)), pushes the pipeline (P4Info + BMv2 JSON from p4src/build/) when the switch
does not run it yet, looks names up in the P4Info (names from ``safs.core.p4names``), and records an
inverse for every write so ``tearDown`` undoes them in reverse order (INSERT -> DELETE; a default
action MODIFY -> MODIFY back to the default read before; meter MODIFY -> MODIFY without config,
i.e. back to unconfigured = always green; clone session / digest INSERT -> DELETE; BMv2 queue
rate/depth set over Thrift -> set back to the defaults). :meth:`SafsTest.push_pipeline_again`
undoes the test's P4Runtime writes and pushes the pipeline once more, which gives BMv2 a fresh
pipeline: no table entry, meter config, clone session or digest entry, and the registers
(``dep_class``, ``class_load_0`` .. ``class_load_4``, ``port_gen``) zero, as after a switch
restart (Thrift queue settings and tc qdiscs are not part of the pipeline and keep their undo
records).
Tests that need known register state (share grants, the differential test) start with it.

Test parameters (``--test-params``, set by ptf_tests/run.py): grpc_addr, device_id, thrift_port,
p4info, bmv2_json.

Topology used by the tests (BMv2 port = PTF port):

    port 1: the sender side, hosts 10.0.1.0/24 (next hop MAC 00:00:00:00:01:01): senders
            10.0.1.1 and 10.0.1.2 (a second sender address for the same dep_id)
    port 2: receiver host 10.0.2.1/24, marked in receiver_port (this switch is its ToR)
    port 3: 10.0.3.0/24, also 10.0.0.0/16 (to check longest prefix wins)
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import ptf
import ptf.testutils as tu
from p4.v1 import p4runtime_pb2
from p4rt_client import Lpm, P4InfoIndex, P4RtClient, Range, load_p4info, update  # noqa: F401 (Range re-exported)
from ptf.base_tests import BaseTest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from safs.core import p4names as n
from safs.core.protocol import QUEUE_CONTROL, SAFS_UDP_PORT, SAFS_VERSION, WIRE_OVERHEAD_BYTES, Color, MsgType
from safs.core.scapy_layer import SAFS, safs_request
from safs.core.timebase import slack_to_key

PORT_SENDER = 1
PORT_RECEIVER = 2
PORT_OTHER = 3

SWITCH_MAC = "00:00:00:00:aa:aa"
SENDER_IP = "10.0.1.1"
SENDER2_IP = "10.0.1.2"  # another sender behind port 1: same dep_id, another grant key
SENDER_MAC = "00:00:00:00:01:01"
RECEIVER_IP = "10.0.2.1"
RECEIVER_MAC = "00:00:00:00:02:01"
OTHER_IP = "10.0.3.1"
OTHER_MAC = "00:00:00:00:03:01"

# Addressing of every packet the tests send into port 1 (the switch routes on IPv4 only).
TO_SWITCH = {"src_mac": SENDER_MAC, "dst_mac": SWITCH_MAC}

PIPELINE_COOKIE = 0x5AF5
PROBE_FLOW = 9999  # switch_now(): a REQUEST of a dependency no test installs
PROBE_DEP = 0xFFF0
CLONE_SESSION_BASE = 1  # p4src/include/defines.p4: clone session id = egress port + 1
BMV2_QUEUE_RATE_DEFAULT_PPS = 0  # 0 = not rate limited (BMv2 default)
BMV2_QUEUE_DEPTH_DEFAULT = 64  # BMv2's default queue capacity, packets


def mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def ip_int(ip: str) -> int:
    a, b, c, d = (int(x) for x in ip.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


class SafsTest(BaseTest):
    """Connection, pipeline, name lookup and undo of every write; see the module docstring."""

    def setUp(self) -> None:
        super().setUp()
        self.dataplane = ptf.dataplane_instance
        self.dataplane.flush()
        self.timeout = float(ptf.config.get("default_timeout", 10))
        p = tu.test_params_get()
        self.thrift_port = int(p["thrift_port"])
        self.client = P4RtClient(p["grpc_addr"], int(p.get("device_id", 0)))
        # Closed after tearDown, and also when setUp fails (then unittest skips tearDown): the
        # session's stream thread (p4runtime-shell's) is not a daemon.
        self.addCleanup(self.client.close)
        # (made over P4Runtime?, inverse), run in reverse order by tearDown
        self._undo: list[tuple[bool, Callable[[], object]]] = []
        if not self._pipeline_installed():
            self.client.push_pipeline(p["p4info"], p["bmv2_json"], PIPELINE_COOKIE)
        else:  # later tests reuse it (each undid its writes)
            self.client.index = P4InfoIndex(load_p4info(p["p4info"]))

    def tearDown(self) -> None:
        try:
            for _, fn in reversed(self._undo):
                fn()
        finally:
            self._undo = []
            super().tearDown()

    def add_undo(self, fn: Callable[[], object], p4rt: bool = False) -> None:
        """Run ``fn`` in tearDown (``p4rt``: it undoes a P4Runtime write, which
        :meth:`push_pipeline_again` undoes as well)."""
        self._undo.append((p4rt, fn))

    # --------------------------------------------------------------- pipeline

    def _pipeline_installed(self) -> bool:
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.client.device_id,
            response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.COOKIE_ONLY)
        try:
            resp = self.client.stub.GetForwardingPipelineConfig(req, timeout=self.timeout)
        except Exception:  # no pipeline yet: FAILED_PRECONDITION
            return False
        return resp.config.cookie.cookie == PIPELINE_COOKIE

    def push_pipeline_again(self) -> None:
        """SetForwardingPipelineConfig once more (module docstring): BMv2's state as after a
        restart (no entries, meters unconfigured, no clone sessions or digest entry, registers
        zero). This test's P4Runtime writes are undone first: BMv2 keeps the replication
        engine's nodes behind a clone session across a push, so a session re-created after it
        would send two copies (docs/dataplane.md, "BMv2 quirks found"). Thrift and tc undo
        records are kept."""
        for p4rt, fn in reversed(self._undo):
            if p4rt:
                fn()
        self._undo = [(p4rt, fn) for p4rt, fn in self._undo if not p4rt]
        p = tu.test_params_get()
        self.client.push_pipeline(p["p4info"], p["bmv2_json"], PIPELINE_COOKIE)

    # --------------------------------------------------------------- writes with undo

    def insert(self, table: str, match: dict, action: str, params: dict | None = None,
               priority: int = 0) -> None:
        """INSERT a table entry; tearDown deletes it."""
        te = self.client.table_entry(table, match, action, params, priority)
        self.client.write([update("INSERT", table_entry=te)])
        key = self.client.table_entry(table, match, priority=priority)
        self.add_undo(lambda: self.client.write([update("DELETE", table_entry=key)]), p4rt=True)

    def modify(self, table: str, match: dict, action: str, params: dict | None = None,
               priority: int = 0) -> None:
        """MODIFY an entry this test inserted (its INSERT's undo deletes it)."""
        te = self.client.table_entry(table, match, action, params, priority)
        self.client.write([update("MODIFY", table_entry=te)])

    def set_default(self, table: str, action: str, params: dict | None = None) -> None:
        """MODIFY the default action (single-entry settings tables); tearDown restores it."""
        before = self.client.read_default(table)
        te = self.client.table_entry(table, {}, action, params, is_default=True)
        self.client.write([update("MODIFY", table_entry=te)])
        self.add_undo(lambda: self.client.write([update("MODIFY", table_entry=before)]), p4rt=True)

    def set_meter(self, meter: str, index: int, cir: int, cburst: int, pir: int, pburst: int) -> None:
        """MODIFY ``meter[index]`` (bytes/s and bytes for a bytes meter); tearDown resets it
        to unconfigured (MODIFY without config: every packet green)."""
        me = p4runtime_pb2.MeterEntry(meter_id=self.client.index.meter_id(meter))
        me.index.index = index
        self.add_undo(lambda: self.client.write([update("MODIFY", meter_entry=me)]), p4rt=True)
        cfg = p4runtime_pb2.MeterEntry()
        cfg.CopyFrom(me)
        cfg.config.cir, cfg.config.cburst, cfg.config.pir, cfg.config.pburst = cir, cburst, pir, pburst
        self.client.write([update("MODIFY", meter_entry=cfg)])

    def add_clone_session(self, session_id: int, port: int) -> None:
        """INSERT clone session ``session_id`` -> ``port`` (PacketReplicationEngineEntry)."""
        pre = p4runtime_pb2.PacketReplicationEngineEntry()
        pre.clone_session_entry.session_id = session_id
        pre.clone_session_entry.replicas.add(egress_port=port, instance=1)
        self.client.write([update("INSERT", packet_replication_engine_entry=pre)])
        key = p4runtime_pb2.PacketReplicationEngineEntry()
        key.clone_session_entry.session_id = session_id
        self.add_undo(lambda: self.client.write([update("DELETE", packet_replication_engine_entry=key)]),
                      p4rt=True)

    def enable_digest(self, name: str) -> int:
        """INSERT the DigestEntry of ``name`` (one digest per list, sent at once); returns its id."""
        de = p4runtime_pb2.DigestEntry(digest_id=self.client.index.digest_id(name))
        de.config.max_timeout_ns = 0
        de.config.max_list_size = 1
        de.config.ack_timeout_ns = 1_000_000
        self.client.write([update("INSERT", digest_entry=de)])
        key = p4runtime_pb2.DigestEntry(digest_id=de.digest_id)
        self.add_undo(lambda: self.client.write([update("DELETE", digest_entry=key)]), p4rt=True)
        return de.digest_id

    def bmv2_cli(self, command: str) -> str:
        """Run one simple_switch_CLI command over Thrift; returns its output.

        Raises:
            AssertionError: the CLI failed or printed an error.
        """
        out = subprocess.run(["simple_switch_CLI", "--thrift-port", str(self.thrift_port)],
                             input=command + "\n", capture_output=True, text=True, timeout=60)
        text = out.stdout + out.stderr
        self.assertEqual(out.returncode, 0, text)
        self.assertNotIn("Error", text, text)
        return text

    def set_queue_limits(self, port: int, priority: int, rate_pps: int, depth: int) -> None:
        """BMv2 rate limit (packets/s) and capacity of one priority queue; tearDown resets them."""
        self.bmv2_cli(f"set_queue_rate {rate_pps} {port} {priority}")
        self.bmv2_cli(f"set_queue_depth {depth} {port} {priority}")
        self.add_undo(lambda: (
            self.bmv2_cli(f"set_queue_depth {BMV2_QUEUE_DEPTH_DEFAULT} {port} {priority}"),
            self.bmv2_cli(f"set_queue_rate {BMV2_QUEUE_RATE_DEFAULT_PPS} {port} {priority}")))

    # --------------------------------------------------------------- common setup

    def setup_routes(self) -> None:
        """ipv4_lpm routes to the three ports, grant_route back to the sender side, port 2 a
        receiver port (this switch is the receiver's ToR)."""
        self.insert(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(ip_int("10.0.1.0"), 24)}, n.ACT_SET_EGRESS,
                    {"port": PORT_SENDER, "dst_mac": mac_int(SENDER_MAC)})
        self.insert(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(ip_int("10.0.2.0"), 24)}, n.ACT_SET_EGRESS,
                    {"port": PORT_RECEIVER, "dst_mac": mac_int(RECEIVER_MAC)})
        self.insert(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(ip_int("10.0.3.0"), 24)}, n.ACT_SET_EGRESS,
                    {"port": PORT_OTHER, "dst_mac": mac_int(OTHER_MAC)})
        self.insert(n.GRANT_ROUTE, {n.F_SRC_ADDR: Lpm(ip_int("10.0.1.0"), 24)}, n.ACT_SET_GRANT_ROUTE,
                    {"port": PORT_SENDER, "dst_mac": mac_int(SENDER_MAC)})
        self.insert(n.RECEIVER_PORT, {n.F_EGRESS_PORT: PORT_RECEIVER}, n.ACT_MARK_RECEIVER)

    def install_slack_classes(self, edges) -> None:
        """slack_class ranges from ``edges``: ``(lo_ns or None, hi_ns, qclass)`` = slack in
        [lo, hi) -> qclass (urgency ``6 - qclass`` at the receiver's ToR; None: every late slack
        down to -2^47); priority = list position."""
        for prio, (lo, hi, qclass) in enumerate(edges, start=1):
            low = 0 if lo is None else slack_to_key(lo)
            self.insert(n.SLACK_CLASS, {n.F_SLACK_KEY: Range(low, slack_to_key(hi) - 1)}, n.ACT_SET_SLACK_CLASS,
                        {"qclass": qclass}, priority=prio)

    def switch_now(self) -> int:
        """The switch's fabric time (ns) read from a GRANT it generates for a REQUEST of a
        dependency without an entry (needs setup_routes; changes no register)."""
        self.send(PORT_SENDER, safs_request(SENDER_IP, RECEIVER_IP, PROBE_FLOW, 1, 0, dep_id=PROBE_DEP,
                                            **TO_SWITCH))
        return self.receive(PORT_SENDER)[SAFS].timestamp_ns

    # --------------------------------------------------------------- packets

    def send(self, port: int, pkt) -> None:
        tu.send_packet(self, port, pkt)

    def receive(self, port: int, timeout: float | None = None) -> Ether:
        """The next packet on ``port`` (dissected with the SAFS layer bound), or fail."""
        res = tu.dp_poll(self, device_number=0, port_number=port,
                         timeout=self.timeout if timeout is None else timeout)
        if not isinstance(res, self.dataplane.PollSuccess):
            self.fail(f"no packet on port {port} within {self.timeout if timeout is None else timeout} s")
        return Ether(bytes(res.packet))

    def expect_nothing(self, ports=(PORT_SENDER, PORT_RECEIVER, PORT_OTHER)) -> None:
        """Fail if any packet shows up on ``ports`` within the negative timeout."""
        tu.verify_no_other_packets(self)

    def check_grant(self, got: Ether, *, flow_id: int, dep_id: int, remaining: int, rate: int, epoch: int,
                    lease: int, flags: int = 0, sender_ip: str = SENDER_IP, what: str = "") -> None:
        """``got`` is a 78-byte GRANT from the receiver to ``sender_ip`` with these fields (flags,
        flow id, dependency and remaining bytes echoed from the packet that triggered it)."""
        self.assertEqual(len(bytes(got)), WIRE_OVERHEAD_BYTES, what)
        self.assertEqual(got[Ether].dst, SENDER_MAC, what)
        self.assertEqual((got[IP].src, got[IP].dst), (RECEIVER_IP, sender_ip), what)
        self.assertEqual(got[UDP].dport, SAFS_UDP_PORT, what)
        self.assertEqual(got[UDP].chksum, 0, what)
        fresh = IP(bytes(got[IP]))
        del fresh.chksum
        self.assertEqual(got[IP].chksum, IP(bytes(fresh)).chksum, f"{what}: IPv4 checksum recomputed")
        h = got[SAFS]
        self.assertEqual((h.version, h.type), (SAFS_VERSION, int(MsgType.GRANT)), what)
        self.assertEqual((h.flow_id, h.dep_id, h.remaining_bytes, h.flags), (flow_id, dep_id, remaining, flags),
                         f"{what}: (flow, dep, remaining, flags) echoed")
        self.assertEqual((h.rate_kbps, h.epoch, h.lease_us), (rate, epoch, lease), f"{what}: (rate, epoch, lease)")
        self.assertEqual((h.qclass, h.color), (QUEUE_CONTROL, int(Color.UNMETERED)), what)

    def poll_until(self, fn, what: str, timeout: float | None = None):
        """Call ``fn`` until it returns a truthy value (every 20 ms); fail naming ``what``."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            got = fn()
            if got:
                return got
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}")
            time.sleep(0.02)


__all__ = ["SafsTest", "Lpm", "Range", "SAFS_UDP_PORT", "TO_SWITCH", "mac_int", "ip_int"]

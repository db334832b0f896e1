"""Grants at the receiver's ToR (docs/protocol.md "What switches do"):

- a REQUEST is turned around into a GRANT to the sender carrying the installed grant, or the
  default grant (epoch 0) when the flow has no flow_grant entry;
- a REQUEST of a flow without an entry also sends a ``request_digest_t`` digest, read here from
  the P4Runtime stream and acked;
- a DATA packet carrying an older epoch than the installed grant is forwarded AND a fresh GRANT
  goes to the sender. The GRANT is an ingress-to-egress clone: the controller must have created
  clone session ``port + 1`` toward each port a sender can be reached on
  (PacketReplicationEngineEntry; docs/dataplane.md).
"""

from __future__ import annotations

from base_test import (
    CLONE_SESSION_BASE,
    PORT_RECEIVER,
    PORT_SENDER,
    RECEIVER_IP,
    RECEIVER_MAC,
    SENDER_IP,
    SENDER_MAC,
    SWITCH_MAC,
    SafsTest,
    ip_int,
)
from p4rt_client import decode
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from safs.core import p4names as n
from safs.core.protocol import QUEUE_CONTROL, SAFS_UDP_PORT, WIRE_OVERHEAD_BYTES, Color, MsgType
from safs.core.scapy_layer import SAFS, safs_data, safs_request

DEFAULT_RATE_KBPS = 10_000
DEFAULT_LEASE_US = 500


class GrantTestBase(SafsTest):
    def setup_grants(self) -> None:
        self.setup_routes()
        self.set_default(n.DEFAULT_GRANT, n.ACT_SET_DEFAULT_GRANT,
                         {"rate_kbps": DEFAULT_RATE_KBPS, "lease_us": DEFAULT_LEASE_US, "meter_slot": 0})

    def check_grant(self, got: Ether, flow_id: int, remaining: int, rate: int, epoch: int,
                    lease: int, wire_len: int = WIRE_OVERHEAD_BYTES) -> None:
        """``got`` is a GRANT from the receiver to the sender with these grant fields."""
        self.assertEqual(len(bytes(got)), wire_len)
        self.assertEqual(got[Ether].dst, SENDER_MAC)
        self.assertEqual((got[IP].src, got[IP].dst), (RECEIVER_IP, SENDER_IP))
        self.assertEqual(got[UDP].dport, SAFS_UDP_PORT)
        self.assertEqual(got[UDP].chksum, 0)
        fresh = IP(bytes(got[IP]))
        del fresh.chksum
        self.assertEqual(got[IP].chksum, IP(bytes(fresh)).chksum, "IPv4 checksum recomputed")
        h = got[SAFS]
        self.assertEqual((h.version, h.type), (1, int(MsgType.GRANT)))
        self.assertEqual((h.flow_id, h.remaining_bytes), (flow_id, remaining))
        self.assertEqual((h.rate_kbps, h.epoch, h.lease_us), (rate, epoch, lease))
        self.assertEqual((h.qclass, h.color), (QUEUE_CONTROL, int(Color.UNMETERED)))


class RequestGrantTest(GrantTestBase):
    """Variants: flow with an installed grant -> that grant; flow without -> the default grant
    (epoch 0). The GRANT carries switch time: it must move with the clock offset."""

    def runTest(self) -> None:
        self.setup_grants()
        self.insert(n.FLOW_GRANT, {n.F_FLOW_ID: 42}, n.ACT_SET_GRANT,
                    {"rate_kbps": 2_500_000, "epoch": 7, "lease_us": 800, "meter_slot": 4})
        offset = 5_000_000_000_000  # 5000 s
        self.set_default(n.CLOCK_OFFSET, n.ACT_SET_CLOCK_OFFSET, {"offset_ns": offset})
        variants = [(42, (2_500_000, 7, 800)), (43, (DEFAULT_RATE_KBPS, 0, DEFAULT_LEASE_US))]
        for flow_id, (rate, epoch, lease) in variants:
            with self.subTest(flow_id=flow_id):
                self.send(PORT_SENDER, safs_request(SENDER_IP, RECEIVER_IP, flow_id, 123_456, 987_654,
                                                    src_mac=SENDER_MAC, dst_mac=SWITCH_MAC))
                got = self.receive(PORT_SENDER)
                self.check_grant(got, flow_id, 123_456, rate, epoch, lease)
                # BMv2 quirk-free but worth knowing: the GRANT's source MAC is the REQUEST's
                # destination MAC after routing rewrote it, i.e. the receiver's.
                self.assertEqual(got[Ether].src, RECEIVER_MAC)
                # now = BMv2 microseconds * 1000 + offset: at or after the offset, < 1 h later.
                ts = got[SAFS].timestamp_ns
                self.assertGreaterEqual(ts, offset)
                self.assertLess(ts - offset, 3600 * 10**9)
                self.assertEqual(ts % 1000, offset % 1000, "BMv2 time has microsecond resolution")
        self.expect_nothing()


class RequestDigestTest(GrantTestBase):
    """A REQUEST for a flow without a flow_grant entry sends one digest with flow id, sender,
    receiver, remaining bytes and no-bubble timestamp; a flow with an entry sends none.

    Digests arrive in order on the stream, so "none for flow 50" is checked by seeing the
    digest of the REQUEST sent after it. Digests of flows this test did not send (BMv2 may
    deliver ones an earlier test's REQUESTs made) are acked and skipped."""

    def next_digest(self, sent: set[int]) -> list[int]:
        while True:
            dl = self.client.next_digest(self.timeout)
            self.client.ack_digest(dl)
            self.assertEqual(dl.digest_id, self.digest_id)
            self.assertEqual(len(dl.data), 1)
            members = [decode(m.bitstring) for m in dl.data[0].struct.members]
            if members[0] in sent:
                return members

    def runTest(self) -> None:
        self.setup_grants()
        self.digest_id = self.enable_digest(n.REQUEST_DIGEST)
        self.insert(n.FLOW_GRANT, {n.F_FLOW_ID: 50}, n.ACT_SET_GRANT,
                    {"rate_kbps": 1, "epoch": 1, "lease_us": 1, "meter_slot": 1})
        # (flow, remaining, no-bubble ts): flow 50 has a grant entry, so no digest.
        sends = [(51, 77_777, 2**47 + 5), (50, 1, 1), (52, 2**48 - 1, 2**48 - 1)]
        for flow_id, remaining, nbts in sends:
            self.send(PORT_SENDER, safs_request(SENDER_IP, RECEIVER_IP, flow_id, remaining, nbts,
                                                src_mac=SENDER_MAC, dst_mac=SWITCH_MAC))
            self.receive(PORT_SENDER)  # the GRANT, checked in RequestGrantTest
        sent = {f for f, _, _ in sends}
        for flow_id, remaining, nbts in (sends[0], sends[2]):
            self.assertEqual(self.next_digest(sent),
                             [flow_id, ip_int(SENDER_IP), ip_int(RECEIVER_IP), remaining, nbts])


class StaleEpochGrantTest(GrantTestBase):
    """DATA with an epoch older than the installed one (RFC 1982 serial compare) is forwarded
    and triggers a 78-byte GRANT to the sender; same or newer epochs trigger nothing."""

    def runTest(self) -> None:
        self.setup_grants()
        self.add_clone_session(PORT_SENDER + CLONE_SESSION_BASE, PORT_SENDER)
        variants = [  # (installed epoch, DATA epoch, GRANT expected)
            (5, 3, True), (5, 0, True), (5, 5, False), (5, 6, False),
            (2, 0xFFFFFFFF, True),  # wraparound: 2^32-1 is older than 2
        ]
        for i, (installed, sent, want) in enumerate(variants):
            flow_id = 100 + i
            with self.subTest(installed=installed, sent=sent):
                self.insert(n.FLOW_GRANT, {n.F_FLOW_ID: flow_id}, n.ACT_SET_GRANT,
                            {"rate_kbps": 3_000 + i, "epoch": installed, "lease_us": 900, "meter_slot": 0})
                pkt = safs_data(SENDER_IP, RECEIVER_IP, flow_id, 5_000, 2**47, sent, 200,
                                src_mac=SENDER_MAC, dst_mac=SWITCH_MAC)
                self.send(PORT_SENDER, pkt)
                data = self.receive(PORT_RECEIVER)
                self.assertEqual(data[SAFS].type, int(MsgType.DATA))
                self.assertEqual(data[SAFS].epoch, sent)
                self.assertEqual(len(bytes(data)), len(bytes(pkt)))
                self.assertEqual(data[Ether].dst, RECEIVER_MAC)
                if want:
                    got = self.receive(PORT_SENDER)
                    self.check_grant(got, flow_id, 5_000, 3_000 + i, installed, 900)
                self.expect_nothing()

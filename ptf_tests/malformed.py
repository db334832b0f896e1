"""Malformed SAFS input (docs/protocol.md "Malformed input"): a UDP packet to port 23285 that is
truncated (UDP length below 8 + 36), has a version other than 2 (version 1, the per-transfer
protocol before dependency grants, included), or an unknown type is forwarded as non-SAFS: by
ordinary routing, queue 0, no field rewritten (its UDP checksum included), no meter, grant or
digest, and counted in ``malformed[reason]``."""

from __future__ import annotations

from base_test import (
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
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from safs.core import p4names as n
from safs.core.protocol import SAFS_UDP_PORT, Malformed, MsgType
from safs.core.scapy_layer import SAFS


def _udp(payload: bytes, udp_len: int | None = None) -> Ether:
    udp = UDP(sport=SAFS_UDP_PORT, dport=SAFS_UDP_PORT, chksum=0x1234)
    if udp_len is not None:
        udp.len = udp_len
    return (Ether(src=SENDER_MAC, dst=SWITCH_MAC) / IP(src=SENDER_IP, dst=RECEIVER_IP, ttl=64)
            / udp / Raw(payload))


def _header(**fields) -> bytes:
    return bytes(SAFS(flow_id=7, dep_id=7, remaining_bytes=1000, **fields))


class MalformedTest(SafsTest):
    """Each variant: (name, packet, malformed counter index). The receiver port is marked and
    dependency 7 of the sender has a grant, so a packet wrongly taken as SAFS would be metered or
    answered."""

    def runTest(self) -> None:
        self.setup_routes()
        self.insert(n.DEP_GRANT, {n.F_SRC_ADDR: ip_int(SENDER_IP), n.F_DEP_ID: 7}, n.ACT_SET_FIXED_GRANT,
                    {"rate_kbps": 1000, "epoch": 9, "lease_us": 100, "meter_slot": 3})
        variants = [
            ("truncated: 20-byte payload", _udp(b"\x11" * 20), Malformed.TRUNCATED),
            ("truncated: empty payload", _udp(b""), Malformed.TRUNCATED),
            ("truncated: UDP length 8+30 before a full header", _udp(_header(), udp_len=8 + 30),
             Malformed.TRUNCATED),
            ("bad version 0", _udp(_header(version=0)), Malformed.BAD_VERSION),
            ("bad version 1 (the per-transfer protocol)", _udp(_header(version=1)), Malformed.BAD_VERSION),
            ("bad version 3", _udp(_header(version=3)), Malformed.BAD_VERSION),
            ("bad version 15 with a REQUEST type", _udp(_header(version=15, type=MsgType.REQUEST)),
             Malformed.BAD_VERSION),
            ("unknown type 0", _udp(_header(type=0)), Malformed.BAD_TYPE),
            ("unknown type 5", _udp(_header(type=5)), Malformed.BAD_TYPE),
            ("unknown type 15", _udp(_header(type=15)), Malformed.BAD_TYPE),
        ]
        for name, pkt, reason in variants:
            with self.subTest(name):
                before = [self.client.read_counter(n.MALFORMED, i)[1] for i in range(len(Malformed))]
                slot_before = self.client.read_counter(n.DEP_BYTES, 3)
                self.send(PORT_SENDER, pkt)
                exp = pkt.copy()
                exp[Ether].dst = RECEIVER_MAC
                exp[IP].ttl = 63
                del exp[IP].chksum
                got = self.receive(PORT_RECEIVER)
                # Forwarded unchanged apart from routing (MAC, TTL, IPv4 checksum): qclass,
                # colour, qdepth and the UDP checksum are untouched, i.e. not treated as SAFS.
                self.assertEqual(bytes(got), bytes(Ether(bytes(exp))), name)
                want = list(before)
                want[reason] += 1
                after = self.poll_until(
                    lambda: (lambda a: a if a == want else None)(  # noqa: B023 (polled in this iteration)
                        [self.client.read_counter(n.MALFORMED, i)[1] for i in range(len(Malformed))]),
                    f"malformed counters {want} (before {before})")
                self.assertEqual(after, want, name)
                self.assertEqual(self.client.read_counter(n.DEP_BYTES, 3), slot_before,
                                 "a malformed packet must not be metered or counted as the dependency's")
        self.expect_nothing()

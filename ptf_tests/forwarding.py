"""IPv4 longest-prefix-match forwarding: the longest prefix wins, TTL is decremented, the next
hop MAC is written; a destination no route covers is dropped (ipv4_lpm default drop)."""

from __future__ import annotations

from base_test import (
    OTHER_MAC,
    PORT_OTHER,
    PORT_RECEIVER,
    PORT_SENDER,
    RECEIVER_MAC,
    SENDER_IP,
    SWITCH_MAC,
    Lpm,
    SafsTest,
    ip_int,
    mac_int,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from safs.core import p4names as n


class Ipv4LpmTest(SafsTest):
    """Each variant: (destination, expected egress port, expected next-hop MAC)."""

    def runTest(self) -> None:
        self.setup_routes()
        # A shorter prefix covering 10.0.2.0/24 too: /24 must still win for 10.0.2.x.
        self.insert(n.IPV4_LPM, {n.F_DST_ADDR: Lpm(ip_int("10.0.0.0"), 16)}, n.ACT_SET_EGRESS,
                    {"port": PORT_OTHER, "dst_mac": mac_int(OTHER_MAC)})
        variants = [
            ("10.0.2.1", PORT_RECEIVER, RECEIVER_MAC),   # /24 beats /16
            ("10.0.3.7", PORT_OTHER, OTHER_MAC),         # its own /24
            ("10.0.77.1", PORT_OTHER, OTHER_MAC),        # only the /16
        ]
        for dst, port, mac in variants:
            with self.subTest(dst=dst):
                pkt = (Ether(src="00:00:00:00:01:01", dst=SWITCH_MAC)
                       / IP(src=SENDER_IP, dst=dst, ttl=64) / UDP(sport=1000, dport=2000) / (b"x" * 20))
                exp = pkt.copy()
                exp[Ether].dst = mac
                exp[IP].ttl = 63
                del exp[IP].chksum
                self.send(PORT_SENDER, pkt)
                got = self.receive(port)
                self.assertEqual(bytes(got), bytes(Ether(bytes(exp))), f"{dst} -> port {port}")
        self.expect_nothing()


class Ipv4MissDropTest(SafsTest):
    """Destinations no prefix covers are dropped (default action drop)."""

    def runTest(self) -> None:
        self.setup_routes()
        for dst in ("10.1.0.1", "192.168.0.1"):
            pkt = (Ether(src="00:00:00:00:01:01", dst=SWITCH_MAC)
                   / IP(src=SENDER_IP, dst=dst) / UDP(sport=1000, dport=2000) / (b"x" * 20))
            self.send(PORT_SENDER, pkt)
        self.expect_nothing()

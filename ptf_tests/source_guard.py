"""Source guard on BMv2 (p4src/include/source_guard.p4; the same corpus runs on the pipeline
model in tests/test_source_guard.py): with a ``host_port`` entry binding port 1 to the sender's
address, every forged packet from port 1 is dropped and counted in ``forged[reason]``: a
spoofed source (a DATA, a REQUEST that would reflect a GRANT at a victim, plain UDP), a GRANT,
a DONE or REQUEST of 1,400 bytes (the PTF veths carry 1,500), DONEs beyond the port's
control_meter; DATA of a dependency without a ``dep_claim`` entry beyond the port's
unclaimed_meter is demoted (queue 1, FLAG_DEMOTED) and counted, a claimed one keeps its class.
Honest control packets and DATA still pass, and port 3 (no entry: a fabric link) is not
checked."""

from __future__ import annotations

from base_test import (
    OTHER_IP,
    PORT_OTHER,
    PORT_RECEIVER,
    PORT_SENDER,
    RECEIVER_IP,
    SENDER_IP,
    TO_SWITCH,
    SafsTest,
    ip_int,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from safs.core import p4names as n
from safs.core.protocol import FLAG_DEMOTED, QUEUE_OVER_RATE, QUEUE_SLACK_LEAST_URGENT, Forged
from safs.core.scapy_layer import SAFS, safs_data, safs_done, safs_grant, safs_request


class SourceGuardTest(SafsTest):
    def forged(self) -> list[int]:
        return [self.client.read_counter(n.FORGED, i)[1] for i in range(len(Forged))]

    def runTest(self) -> None:
        self.setup_routes()
        self.insert(n.HOST_PORT, {n.F_INGRESS_PORT: PORT_SENDER}, n.ACT_SET_HOST_SOURCE,
                    {"src_addr": ip_int(SENDER_IP)})
        corpus = [
            ("spoofed DATA", safs_data(OTHER_IP, RECEIVER_IP, 7, 5000, 0, 0, 1000, **TO_SWITCH),
             Forged.SPOOFED_SOURCE),
            ("spoofed REQUEST (GRANT reflection)", safs_request(OTHER_IP, RECEIVER_IP, 7, 5000, 0, **TO_SWITCH),
             Forged.SPOOFED_SOURCE),
            ("spoofed plain UDP", Ether(src=TO_SWITCH["src_mac"], dst=TO_SWITCH["dst_mac"])
             / IP(src=OTHER_IP, dst=RECEIVER_IP) / UDP(sport=1, dport=2) / Raw(b"x" * 100), Forged.SPOOFED_SOURCE),
            ("GRANT from a host", safs_grant(SENDER_IP, RECEIVER_IP, 7, 10**6, 5, 1000, 0, **TO_SWITCH),
             Forged.GRANT_FROM_HOST),
            ("1400-byte DONE", safs_done(SENDER_IP, RECEIVER_IP, 7, **TO_SWITCH) / Raw(bytes(1400)),
             Forged.OVERSIZED_CONTROL),
            ("1400-byte REQUEST", safs_request(SENDER_IP, RECEIVER_IP, 7, 5000, 0, **TO_SWITCH) / Raw(bytes(1400)),
             Forged.OVERSIZED_CONTROL),
        ]
        for name, pkt, reason in corpus:
            with self.subTest(name):
                want = self.forged()
                want[reason] += 1
                self.send(PORT_SENDER, pkt)
                self.poll_until(lambda w=want: self.forged() == w, f"{name}: forged counters {want}")
                self.expect_nothing()
        # honest packets from the host port pass; a fabric port is not checked
        self.send(PORT_SENDER, safs_done(SENDER_IP, RECEIVER_IP, 7, **TO_SWITCH))
        self.receive(PORT_RECEIVER)
        self.send(PORT_SENDER, safs_data(SENDER_IP, OTHER_IP, 8, 5000, 0, 0, 1000, **TO_SWITCH))
        self.receive(PORT_OTHER)
        self.send(PORT_OTHER, safs_data(RECEIVER_IP, "10.0.1.9", 9, 5000, 0, 0, 1000, **TO_SWITCH))
        self.receive(PORT_SENDER)
        self.expect_nothing()
        # a flood of small control packets: the port's control_meter (a 160-byte burst here)
        # lets two 78-byte DONEs through, drops the rest and counts them
        self.set_meter(n.CONTROL_METER, PORT_SENDER, cir=1000, cburst=160, pir=1000, pburst=160)
        want = self.forged()
        want[Forged.CONTROL_RATE] += 3
        for _ in range(5):
            self.send(PORT_SENDER, safs_done(SENDER_IP, RECEIVER_IP, 7, **TO_SWITCH))
        self.receive(PORT_RECEIVER)
        self.receive(PORT_RECEIVER)
        self.poll_until(lambda: self.forged() == want, f"control-rate drops counted: {want}")
        self.expect_nothing()
        # DATA nobody admitted for the sender (dependency 6) beyond the port's unclaimed_meter
        # (a 1,200-byte burst: one 1,078-byte DATA) leaves in queue 1 with FLAG_DEMOTED; the
        # claimed dependency 5 keeps its class (the least urgent: no slack_class entries)
        self.set_meter(n.UNCLAIMED_METER, PORT_SENDER, cir=1000, cburst=1200, pir=1000, pburst=1200)
        self.insert(n.DEP_CLAIM, {n.F_SRC_ADDR: ip_int(SENDER_IP), n.F_DEP_ID: 5}, n.ACT_CLAIM, {"out_slot": 0})
        want = self.forged()
        want[Forged.UNCLAIMED_DATA] += 2
        for dep_id, expected in ((6, [(QUEUE_SLACK_LEAST_URGENT, 0)] + [(QUEUE_OVER_RATE, FLAG_DEMOTED)] * 2),
                                 (5, [(QUEUE_SLACK_LEAST_URGENT, 0)] * 3)):
            got = []
            for _ in range(3):
                self.send(PORT_SENDER, safs_data(SENDER_IP, RECEIVER_IP, 10, 5000, 0, 0, 1000, dep_id=dep_id,
                                                 **TO_SWITCH))
                hdr = self.receive(PORT_RECEIVER)[SAFS]
                got.append((hdr.qclass, hdr.flags & FLAG_DEMOTED))
            self.assertEqual(got, expected, f"dependency {dep_id}")
        self.poll_until(lambda: self.forged() == want, f"demoted DATA counted: {want}")
        self.expect_nothing()

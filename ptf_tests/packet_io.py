"""Packet I/O through the CPU port (p4src/include/headers.p4: packet_out, packet_in; CPU port
255, ``simple_switch_grpc ... -- --cpu-port 255``), the path of the controller's start-up
self-check (docs/operations.md, "Start-up self-check").

- A PacketOut to the CPU port itself at priority queue q (0..7) comes back as a PacketIn with
  ingress_port 255, queue q and the payload unchanged: the controller's probe of queue q.
- A PacketOut to a data port leaves that port unchanged (no packet_in header), at the queue
  it names.
"""

from __future__ import annotations

import ptf.testutils as tu
from base_test import OTHER_IP, OTHER_MAC, PORT_OTHER, SENDER_IP, SWITCH_MAC, SafsTest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from safs.core import p4names as n
from safs.core.protocol import NUM_QUEUES, pack_probe, unpack_probe


class ProbeLoopbackTest(SafsTest):
    """PacketOut to the CPU port at each queue -> PacketIn through that queue."""

    def runTest(self) -> None:
        nonce = 0x5AF5_0000_0000_0001
        for q in range(NUM_QUEUES):
            frame = pack_probe(nonce, q)
            self.client.packet_out(frame, **{n.M_EGRESS_PORT: n.CPU_PORT, n.M_QUEUE: q})
            metadata, payload = self.client.next_packet_in(self.timeout)
            self.assertEqual(payload, frame, f"queue {q}: payload unchanged")
            self.assertEqual(unpack_probe(payload), (nonce, q))
            self.assertEqual(metadata, {n.M_INGRESS_PORT: n.CPU_PORT, n.M_QUEUE: q, n.M_PAD: 0}, f"queue {q}")
        self.expect_nothing()  # nothing leaked to a data port


class PacketOutToDataPortTest(SafsTest):
    """PacketOut to port 3: the frame leaves port 3 as sent (no table applied, no packet_in)."""

    def runTest(self) -> None:
        pkt = Ether(src=SWITCH_MAC, dst=OTHER_MAC) / IP(src=SENDER_IP, dst=OTHER_IP, ttl=64) / UDP(
            sport=1234, dport=4321) / (b"x" * 32)
        pkt = Ether(bytes(pkt))  # checksums filled in, as the switch recomputes the IPv4 one
        self.client.packet_out(bytes(pkt), **{n.M_EGRESS_PORT: PORT_OTHER, n.M_QUEUE: 3})
        tu.verify_packet(self, pkt, PORT_OTHER)
        tu.verify_no_other_packets(self)
        with self.assertRaises(TimeoutError):
            self.client.next_packet_in(0.5)

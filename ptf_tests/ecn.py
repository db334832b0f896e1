"""ECN marking in egress (telemetry.p4): an ECN-capable packet (ECT0/ECT1), SAFS or not, enqueued
behind more than ``ecn_threshold`` packets is marked CE and counted in ecn_marked[port];
not-ECT packets are never marked.

BMv2's queues drain as fast as the CPU allows, so the test fills one: the receiver port's queue 0
(non-SAFS traffic) is rate limited to a few packets/s over Thrift (``set_queue_rate``, packets/s)
and a burst is sent; packet i of the burst sees about i packets ahead of it."""

from __future__ import annotations

from base_test import OTHER_IP, PORT_OTHER, PORT_SENDER, SENDER_IP, SENDER_MAC, SWITCH_MAC, SafsTest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from safs.core import p4names as n
from safs.core.protocol import ECN_CE, ECN_ECT0, ECN_ECT1, ECN_NOT_ECT, QUEUE_BEST_EFFORT

THRESHOLD = 2
BURST = 10


class EcnThresholdTest(SafsTest):
    def runTest(self) -> None:
        self.setup_routes()
        self.set_default(n.ECN_THRESHOLD, n.ACT_SET_ECN_THRESHOLD, {"qdepth_pkts": THRESHOLD})
        self.set_queue_limits(PORT_OTHER, QUEUE_BEST_EFFORT, rate_pps=10, depth=64)
        for ecn in (ECN_ECT0, ECN_ECT1, ECN_NOT_ECT, ECN_CE):
            with self.subTest(ecn=ecn):
                marked0 = self.client.read_counter(n.ECN_MARKED, PORT_OTHER)[1]
                for i in range(BURST):
                    self.send(PORT_SENDER, Ether(src=SENDER_MAC, dst=SWITCH_MAC)
                              / IP(src=SENDER_IP, dst=OTHER_IP, tos=ecn, id=i) / UDP(dport=9) / bytes(40))
                got = [self.receive(PORT_OTHER) for _ in range(BURST)]
                ids = [p[IP].id for p in got]
                self.assertEqual(ids, list(range(BURST)), "one queue keeps its order")
                marks = [p[IP].tos & 3 for p in got]
                if ecn in (ECN_NOT_ECT, ECN_CE):
                    self.assertEqual(marks, [ecn] * BURST, "not-ECT never marked, CE stays CE")
                    new = 0
                else:
                    # The first packets meet a short queue; the tail of the burst is above the
                    # threshold (the limiter may have sent one or two meanwhile).
                    self.assertEqual(marks[:THRESHOLD + 1], [ecn] * (THRESHOLD + 1), f"marks {marks}")
                    self.assertEqual(marks[-3:], [ECN_CE] * 3, f"marks {marks}")
                    self.assertEqual(set(marks), {ecn, ECN_CE})
                    first = marks.index(ECN_CE)
                    self.assertEqual(marks[first:], [ECN_CE] * (BURST - first), "marked from then on")
                    new = BURST - first
                self.poll_until(lambda: self.client.read_counter(n.ECN_MARKED, PORT_OTHER)[1] - marked0 == new,  # noqa: B023 (polled in this iteration)
                                f"ecn_marked[{PORT_OTHER}] to grow by {new}")
        self.expect_nothing()

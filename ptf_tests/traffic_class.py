"""Traffic classes of non-SAFS traffic (traffic_class.p4; docs/dataplane.md, "Traffic classes").

Queue: a packet's queue is not visible in its bytes, so the receiving port's queue 0 is rate
limited to a few packets/s over Thrift (as ecn.py does); a burst whose aggregate maps to
another queue is not held back by it. RoCEv2 packets are built with scapy's BTH layer
(``scapy.contrib.roce``, UDP 4791): those whose destination QP matches the aggregate's value
and mask go to its queue and overtake the unmatched ones (other QPs) still waiting in queue 0;
a TCP aggregate is matched on its destination port range the same way.

Meter: a metered aggregate's over-rate (RED) packets are ECN-marked CE when ECN-capable and
dropped when not, and stay in the aggregate's queue.
"""

from __future__ import annotations

from base_test import OTHER_IP, PORT_OTHER, PORT_SENDER, SENDER_IP, SENDER_MAC, SWITCH_MAC, SafsTest
from p4rt_client import Range
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from safs.core import p4names as n
from safs.core.protocol import ECN_CE, ECN_ECT0, ECN_NOT_ECT, QUEUE_BEST_EFFORT
from safs.core.target import Ternary

BURST = 8
ANY = {n.F_SRC_ADDR: Ternary(0, 0), n.F_DST_ADDR: Ternary(0, 0), n.F_PROTOCOL: Ternary(0, 0),
       n.F_L4_SRC_PORT: Range(0, 65535), n.F_L4_DST_PORT: Range(0, 65535), n.F_ROCE_QP: Ternary(0, 0)}
ROCE = {**ANY, n.F_PROTOCOL: Ternary(17, 0xFF), n.F_L4_DST_PORT: Range(n.ROCE_V2_UDP_PORT, n.ROCE_V2_UDP_PORT)}


def roce(qp: int, ident: int, ecn: int = ECN_ECT0) -> Ether:
    """A RoCEv2 RDMA WRITE-only packet to queue pair ``qp`` (IP id ``ident``)."""
    return (Ether(src=SENDER_MAC, dst=SWITCH_MAC) / IP(src=SENDER_IP, dst=OTHER_IP, tos=ecn, id=ident)
            / UDP(sport=49152 + ident, dport=n.ROCE_V2_UDP_PORT) / BTH(opcode=0x0A, dqpn=qp, psn=ident)
            / bytes(64))


class TrafficClassQueueTest(SafsTest):
    def runTest(self) -> None:
        self.setup_routes()
        self.insert(n.TRAFFIC_CLASS, {**ROCE, n.F_ROCE_QP: Ternary(0x100, 0xF00)}, n.ACT_SET_TRAFFIC_CLASS,
                    {"qclass": 4}, priority=2)
        self.insert(n.TRAFFIC_CLASS, {**ANY, n.F_PROTOCOL: Ternary(6, 0xFF), n.F_L4_DST_PORT: Range(5000, 5999)},
                    n.ACT_SET_TRAFFIC_CLASS, {"qclass": 3}, priority=1)
        self.set_queue_limits(PORT_OTHER, QUEUE_BEST_EFFORT, rate_pps=4, depth=64)
        lax = [roce(0x2AB, i) for i in range(BURST)]  # another QP: no aggregate, queue 0
        urgent = [roce(0x1AB, 100 + i) for i in range(BURST)]  # QP 0x1xx: queue 4
        tcp = [Ether(src=SENDER_MAC, dst=SWITCH_MAC) / IP(src=SENDER_IP, dst=OTHER_IP, id=200 + i)
               / TCP(sport=40000, dport=5001) / bytes(64) for i in range(BURST)]  # queue 3
        for p in lax + urgent + tcp:
            self.send(PORT_SENDER, p)
        got = [self.receive(PORT_OTHER) for _ in range(3 * BURST)]
        ids = [p[IP].id for p in got]
        self.assertEqual(sorted(ids), sorted(p[IP].id for p in lax + urgent + tcp), "every packet forwarded")
        last_classified = max(i for i, v in enumerate(ids) if v >= 100)
        lax_after = sum(1 for v in ids[last_classified + 1:] if v < 100)
        # At 4 packets/s the lax burst takes 2 s; the classified packets overtake most of it.
        self.assertGreaterEqual(lax_after, BURST // 2, f"arrival order of IP ids: {ids}")
        self.assertEqual([v for v in ids if 100 <= v < 200], sorted(v for v in ids if 100 <= v < 200),
                         "one aggregate keeps its order (one queue)")
        bth = got[ids.index(100)][BTH]
        self.assertEqual((bth.dqpn, bth.psn), (0x1AB, 100), "the BTH is forwarded unchanged")
        self.expect_nothing()


class TrafficClassMeterTest(SafsTest):
    def runTest(self) -> None:
        self.setup_routes()
        self.insert(n.TRAFFIC_CLASS, ROCE, n.ACT_SET_METERED_TRAFFIC_CLASS, {"qclass": 2, "meter_index": 1},
                    priority=1)
        frame = len(roce(7, 0))
        # A bucket of two frames refilled at 1 byte/s: the third packet on is RED.
        self.set_meter(n.AGGREGATE_METER, 1, cir=1, cburst=2 * frame, pir=1, pburst=2 * frame)
        for i in range(5):
            self.send(PORT_SENDER, roce(7, i))
        got = [self.receive(PORT_OTHER) for _ in range(5)]
        self.assertEqual([p[IP].id for p in got], list(range(5)), "RED stays in its queue and order")
        self.assertEqual([p[IP].tos & 3 for p in got], [ECN_ECT0] * 2 + [ECN_CE] * 3, "over the rate: CE")
        for i in range(3):
            self.send(PORT_SENDER, roce(7, 10 + i, ecn=ECN_NOT_ECT))
        self.expect_nothing()  # over the rate and not ECN-capable: dropped (policed)

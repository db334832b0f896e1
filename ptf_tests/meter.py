"""Grant enforcement by per-flow indirect meters at the receiver's ToR (grant_enforcer.p4).

A burst beyond the committed burst: the first packets are green and keep their slack class;
the rest are coloured yellow/red and put in queue 1 (over rate); none is dropped. Variants: a
flow with an installed grant (its own meter slot) and a flow without one (the default grant's
slot: flows without a grant are metered too). The rates are tiny (bytes/s) so refill during
the burst cannot turn a packet green on a slow machine.

Queue 1 itself is not visible in the packet: ``qclass`` keeps the slack class the classifier
chose (as in safs.targets.pipeline_model), so the demotion is shown by ordering: queue 1 of the
receiver port is rate limited (BMv2 Thrift ``set_queue_rate``), and a green packet of another
flow sent after the burst overtakes most of the demoted packets.
"""

from __future__ import annotations

from base_test import PORT_RECEIVER, PORT_SENDER, RECEIVER_IP, SENDER_IP, SENDER_MAC, SWITCH_MAC, SafsTest

from safs.core import p4names as n
from safs.core.protocol import QUEUE_OVER_RATE, QUEUE_SLACK_LEAST_URGENT, Color
from safs.core.scapy_layer import SAFS, safs_data

PAYLOAD = 100
BURST = 8
GREEN_PACKETS = 2


class MeterBurstTest(SafsTest):
    def runTest(self) -> None:
        self.setup_routes()
        size = len(bytes(safs_data(SENDER_IP, RECEIVER_IP, 1, 1, 0, 0, PAYLOAD)))
        cburst = GREEN_PACKETS * size + size // 2  # room for exactly GREEN_PACKETS packets
        pburst = (GREEN_PACKETS + 2) * size + size // 2  # then 2 yellow, the rest red
        # Demoted packets wait in queue 1, drained at 10 packets/s (still < 1 s per burst).
        self.set_queue_limits(PORT_RECEIVER, QUEUE_OVER_RATE, rate_pps=10, depth=64)
        self.insert(n.FLOW_GRANT, {n.F_FLOW_ID: 20}, n.ACT_SET_GRANT,
                    {"rate_kbps": 1, "epoch": 1, "lease_us": 1000, "meter_slot": 17})
        self.set_default(n.DEFAULT_GRANT, n.ACT_SET_DEFAULT_GRANT,
                         {"rate_kbps": 1, "lease_us": 1000, "meter_slot": 0})
        for flow_id, slot in ((20, 17), (21, 0)):
            with self.subTest(flow_id=flow_id, slot=slot):
                self.set_meter(n.FLOW_METER, slot, cir=8, cburst=cburst, pir=16, pburst=pburst)
                # Marker: a flow whose meter slot (99) was never configured is always green.
                self.insert(n.FLOW_GRANT, {n.F_FLOW_ID: 1000 + flow_id}, n.ACT_SET_GRANT,
                            {"rate_kbps": 1, "epoch": 1, "lease_us": 1, "meter_slot": 99})
                for i in range(BURST):
                    self.send(PORT_SENDER, safs_data(SENDER_IP, RECEIVER_IP, flow_id, 10**6 - i, 2**47,
                                                     1, PAYLOAD, src_mac=SENDER_MAC, dst_mac=SWITCH_MAC))
                self.send(PORT_SENDER, safs_data(SENDER_IP, RECEIVER_IP, 1000 + flow_id, 1, 2**47, 1,
                                                 PAYLOAD, src_mac=SENDER_MAC, dst_mac=SWITCH_MAC))
                got = [self.receive(PORT_RECEIVER) for _ in range(BURST + 1)]
                order = [p[SAFS].flow_id for p in got]
                colors = {p[SAFS].remaining_bytes: p[SAFS].color for p in got if p[SAFS].flow_id == flow_id}
                self.assertEqual(len(colors), BURST, f"every burst packet forwarded, got {order}")
                by_seq = [colors[10**6 - i] for i in range(BURST)]
                want = ([int(Color.GREEN)] * GREEN_PACKETS + [int(Color.YELLOW)] * 2
                        + [int(Color.RED)] * (BURST - GREEN_PACKETS - 2))
                self.assertEqual(by_seq, want)
                for p in got:
                    self.assertEqual(p[SAFS].qclass, QUEUE_SLACK_LEAST_URGENT)
                # Green packets leave first, in order; the marker (slack class 2) overtakes the
                # demoted packets waiting in the rate-limited queue 1 (the limiter lets the first
                # one pass at once, so "most of them", not all).
                self.assertEqual(order[:GREEN_PACKETS], [flow_id] * GREEN_PACKETS, f"order {order}")
                after_marker = len(order) - 1 - order.index(1000 + flow_id)
                self.assertGreaterEqual(after_marker, BURST - GREEN_PACKETS - 2,
                                        f"demoted packets must wait in queue 1: {order}")
        self.expect_nothing()

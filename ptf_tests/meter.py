"""Grant enforcement by per-dependency indirect meters at the receiver's ToR (grant_enforcer.p4).

A burst beyond the committed burst: the first packets are green and keep their slack class;
the rest are coloured yellow/red and put in queue 1 (over rate); none is dropped. Variants: a
dependency with an installed fixed grant (``dep_grant`` -> its own ``dep_meter`` slot), one with
a share grant (its slot too) and one without an entry (the default grant's slot: dependencies
without a grant are metered too). The rates are tiny (bytes/s) so refill during the burst cannot
turn a packet green on a slow machine. Every DATA carries the rate and epoch its grant would
give, so no GRANT is pushed (no clone session exists either).

Queue 1 itself is not visible in the packet: ``qclass`` keeps the slack class the classifier
chose (as in safs.targets.pipeline_model), so the demotion is shown by ordering: queue 1 of the
receiver port is rate limited (BMv2 Thrift ``set_queue_rate``), and a green packet of another
flow sent after the burst overtakes most of the demoted packets.
"""

from __future__ import annotations

from base_test import PORT_RECEIVER, PORT_SENDER, RECEIVER_IP, SENDER_IP, TO_SWITCH, SafsTest, ip_int

from safs.core import p4names as n
from safs.core.protocol import QUEUE_OVER_RATE, QUEUE_SLACK_LEAST_URGENT, Color
from safs.core.scapy_layer import SAFS, safs_data

PAYLOAD = 100
BURST = 8
GREEN_PACKETS = 2
QUEUE1_PPS = 2  # rate limit of queue 1 (packets/s) while the demoted packets wait


class MeterBurstTest(SafsTest):
    def runTest(self) -> None:
        self.setup_routes()
        size = len(bytes(safs_data(SENDER_IP, RECEIVER_IP, 1, 1, 0, 0, PAYLOAD)))
        cburst = GREEN_PACKETS * size + size // 2  # room for exactly GREEN_PACKETS packets
        pburst = (GREEN_PACKETS + 2) * size + size // 2  # then 2 yellow, the rest red
        # Demoted packets wait in queue 1, drained at QUEUE1_PPS: the marker, sent right after
        # the burst, must be through before the third demoted packet leaves (2 / QUEUE1_PPS s
        # after the burst), which 10 packets/s (0.2 s) did not leave room for on a busy 2-core
        # machine (the marker came after 5 of 6 once); 2 packets/s gives 1 s, 3 s per burst.
        self.set_queue_limits(PORT_RECEIVER, QUEUE_OVER_RATE, rate_pps=QUEUE1_PPS, depth=64)
        src = ip_int(SENDER_IP)
        self.insert(n.DEP_GRANT, {n.F_SRC_ADDR: src, n.F_DEP_ID: 20}, n.ACT_SET_FIXED_GRANT,
                    {"rate_kbps": 1, "epoch": 1, "lease_us": 1000, "meter_slot": 17})
        self.insert(n.DEP_GRANT, {n.F_SRC_ADDR: src, n.F_DEP_ID: 22}, n.ACT_SET_SHARE_GRANT, {"meter_slot": 18})
        self.set_default(n.DEFAULT_GRANT, n.ACT_SET_DEFAULT_GRANT,
                         {"rate_kbps": 1, "lease_us": 1000, "meter_slot": 0})
        # The marker's dependency: a fixed grant on a slot (99) never configured, always green.
        self.insert(n.DEP_GRANT, {n.F_SRC_ADDR: src, n.F_DEP_ID: 1000}, n.ACT_SET_FIXED_GRANT,
                    {"rate_kbps": 1, "epoch": 1, "lease_us": 1, "meter_slot": 99})
        # (dependency, meter slot, (rate, epoch) the DATA holds). The share grant's rate is the
        # default one here (no port_share entries: epoch 0); the class it leaves in the
        # registers does not matter (tests that need register state push the pipeline again).
        for dep, slot, (rate, epoch) in ((20, 17, (1, 1)), (22, 18, (1, 0)), (21, 0, (1, 0))):
            with self.subTest(dep=dep, slot=slot):
                self.set_meter(n.DEP_METER, slot, cir=8, cburst=cburst, pir=16, pburst=pburst)
                for i in range(BURST):
                    self.send(PORT_SENDER, safs_data(SENDER_IP, RECEIVER_IP, dep, 10**6 - i, 2**47, epoch, PAYLOAD,
                                                     dep_id=dep, rate_kbps=rate, **TO_SWITCH))
                self.send(PORT_SENDER, safs_data(SENDER_IP, RECEIVER_IP, 1000 + dep, 1, 2**47, 1, PAYLOAD,
                                                 dep_id=1000, rate_kbps=1, **TO_SWITCH))
                got = [self.receive(PORT_RECEIVER) for _ in range(BURST + 1)]
                order = [p[SAFS].flow_id for p in got]
                colors = {p[SAFS].remaining_bytes: p[SAFS].color for p in got if p[SAFS].flow_id == dep}
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
                self.assertEqual(order[:GREEN_PACKETS], [dep] * GREEN_PACKETS, f"order {order}")
                after_marker = len(order) - 1 - order.index(1000 + dep)
                self.assertGreaterEqual(after_marker, BURST - GREEN_PACKETS - 2,
                                        f"demoted packets must wait in queue 1: {order}")
        self.expect_nothing()

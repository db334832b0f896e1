"""Slack classification of SAFS DATA into queues 6..2 (slack_classifier.p4):

    now = BMv2 microseconds * 1000 + clock_offset;  slack = latest_start - now (mod 2^48)
    slack_key = slack XOR 2^47;  slack_class range table -> qclass; miss -> 2

The switch's clock is not known to the test, so it is read first from a GRANT (which carries
switch time). The class ranges are 10 s wide so the seconds between probe and send on a busy
machine cannot move a packet across a boundary. The clock offset is set just below 2^48 so
``now`` and the latest start times wrap around modulo 2^48. The chosen class is read from the
``qclass`` field of the output packet; REQUEST/GRANT/DONE go to 7, as does the probe."""

from __future__ import annotations

from base_test import (
    OTHER_IP,
    PORT_OTHER,
    PORT_RECEIVER,
    PORT_SENDER,
    RECEIVER_IP,
    SENDER_IP,
    SENDER_MAC,
    SWITCH_MAC,
    SafsTest,
)

from safs.core import p4names as n
from safs.core.protocol import QUEUE_CONTROL, Color
from safs.core.scapy_layer import SAFS, safs_data, safs_done, safs_request
from safs.core.timebase import TIME_MASK, TIME_MOD

S = 1_000_000_000  # ns
CLASS_EDGES = [(None, 0, 6), (0, 10 * S, 5), (10 * S, 20 * S, 4), (20 * S, 30 * S, 3)]  # slack [lo, hi) -> class


class SlackClassTest(SafsTest):
    def runTest(self) -> None:
        self.setup_routes()
        self.install_slack_classes(CLASS_EDGES)
        offset = TIME_MOD - 30 * S
        self.set_default(n.CLOCK_OFFSET, n.ACT_SET_CLOCK_OFFSET, {"offset_ns": offset})
        now = self.switch_now()
        variants = [  # (slack ns at probe time, expected class)
            (-5 * S, 6), (-(2**46), 6), (5 * S, 5), (15 * S, 4), (25 * S, 3), (100 * S, 2),
            (2**46, 2),
        ]
        # Two destinations: a transit port (colour 3, unmetered) and the receiver port (metered
        # by the unconfigured default meter slot 0: green keeps the slack class).
        for dst, port, color in ((OTHER_IP, PORT_OTHER, Color.UNMETERED),
                                 (RECEIVER_IP, PORT_RECEIVER, Color.GREEN)):
            for slack, qclass in variants:
                with self.subTest(dst=dst, slack=slack):
                    latest = (now + slack) & TIME_MASK
                    self.send(PORT_SENDER, safs_data(SENDER_IP, dst, 1, 10_000, latest, 0, 64,
                                                     src_mac=SENDER_MAC, dst_mac=SWITCH_MAC))
                    got = self.receive(port)
                    self.assertEqual(got[SAFS].qclass, qclass, f"slack {slack / S:+.1f} s")
                    self.assertEqual(got[SAFS].color, int(color))
                    self.assertEqual(got[SAFS].timestamp_ns, latest, "latest start not rewritten")
        # Control messages in transit: class 7 whatever their timestamp.
        for pkt in (safs_request(SENDER_IP, OTHER_IP, 5, 10, now),
                    safs_done(SENDER_IP, OTHER_IP, 5, now + 100 * S)):
            self.send(PORT_SENDER, pkt)
            got = self.receive(PORT_OTHER)
            self.assertEqual((got[SAFS].qclass, got[SAFS].color), (QUEUE_CONTROL, int(Color.UNMETERED)))
        self.expect_nothing()


class ClockOffsetTest(SafsTest):
    """Changing the offset by D moves the switch's fabric time by D (plus the elapsed time)."""

    def runTest(self) -> None:
        self.setup_routes()
        self.set_default(n.CLOCK_OFFSET, n.ACT_SET_CLOCK_OFFSET, {"offset_ns": 0})
        t0 = self.switch_now()
        self.assertLess(t0, 24 * 3600 * S, "offset 0: BMv2 time since switch start")
        delta = 123_456_789_000_000
        self.set_default(n.CLOCK_OFFSET, n.ACT_SET_CLOCK_OFFSET, {"offset_ns": delta})
        t1 = self.switch_now()
        self.assertGreaterEqual(t1 - t0, delta)
        self.assertLess(t1 - t0, delta + 60 * S)

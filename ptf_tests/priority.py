"""Strict priority at an explicit bottleneck: the more urgent slack class wins.

BMv2's queue rate limit applies to each priority queue separately (BRIEF "Design decisions"), so
it cannot make a port a shared bottleneck. The bottleneck here is Linux traffic control on the
switch's egress veth of port 3 (the side BMv2 writes to):

    htb root class 1:1, rate = ceil = 60 kbit/s (about 14 packets/s of 550 bytes): the bottleneck
      1:10 prio 0  <- u32 filter: SAFS qclass byte (IPv4 header + 20 + 8 + 2) == 6
      1:20 prio 7  <- everything else (default), here qclass 2
    both leaves guaranteed 1 kbit/s and allowed to borrow up to 60 kbit/s; HTB lends spare
    rate by prio, so 1:20 is served only when 1:10 has nothing to send (strict priority).

The rate is low so that the urgent burst reaches the shaper while at least half the lax burst
still waits there even when the machine is busy: at 400 kbit/s (the first form of this test) the
lax burst drained in 0.2 s and on the shared 2-core machine 14 of 20 lax packets once left
before the first urgent one arrived; at 60 kbit/s the urgent burst has 0.7 s (the test takes
about 3 s).

(This kernel has no prio/ets qdisc; HTB's prio gives the same strict order.)

A burst of lax DATA (slack 100 s -> class 2) is sent first, then a burst of urgent DATA (late ->
class 6). In FIFO order every lax packet would leave first; with the classes the program writes
deciding the band, the urgent packets overtake the lax ones still waiting.
"""

from __future__ import annotations

import subprocess

import ptf.testutils as tu
from base_test import OTHER_IP, PORT_OTHER, PORT_SENDER, SENDER_IP, SENDER_MAC, SWITCH_MAC, SafsTest
from slack import CLASS_EDGES, S

from safs.core.scapy_layer import SAFS, safs_data
from safs.core.timebase import TIME_MASK

BURST = 20
PAYLOAD = 472  # 550-byte frames


class StrictPriorityBottleneckTest(SafsTest):
    def tc(self, *args: str) -> None:
        out = subprocess.run(["tc", *args], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, f"tc {' '.join(args)}: {out.stderr}")

    def runTest(self) -> None:
        self.setup_routes()
        self.install_slack_classes(CLASS_EDGES)
        now = self.switch_now()
        dev = tu.test_param_get("switch_ifaces").split(",")[PORT_OTHER - 1]
        rate = "60kbit"
        self.tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "20")
        self.add_undo(lambda: subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"],
                                             capture_output=True, timeout=30))
        self.tc("class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate,
                "ceil", rate, "burst", "1600", "cburst", "1600")
        # Both bands guaranteed almost nothing, both may borrow the whole link: HTB lends spare
        # rate strictly by prio (0 first), so the urgent band is served while it has packets.
        for classid, prio in (("1:10", "0"), ("1:20", "7")):
            self.tc("class", "add", "dev", dev, "parent", "1:1", "classid", classid, "htb", "rate",
                    "1kbit", "ceil", rate, "prio", prio, "quantum", "1600")
        qclass_offset = 20 + 8 + 2  # SAFS qclass byte, from the IPv4 header start (no options)
        self.tc("filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                "match", "u8", "6", "0xff", "at", str(qclass_offset), "flowid", "1:10")
        lax = [safs_data(SENDER_IP, OTHER_IP, 1, 10**6 - i, (now + 100 * S) & TIME_MASK, 0, PAYLOAD,
                         src_mac=SENDER_MAC, dst_mac=SWITCH_MAC) for i in range(BURST)]
        urgent = [safs_data(SENDER_IP, OTHER_IP, 2, 10**6 - i, (now - 5 * S) & TIME_MASK, 0, PAYLOAD,
                            src_mac=SENDER_MAC, dst_mac=SWITCH_MAC) for i in range(BURST)]
        for p in lax + urgent:
            self.send(PORT_SENDER, p)
        got = [self.receive(PORT_OTHER) for _ in range(2 * BURST)]
        classes = [p[SAFS].qclass for p in got]
        self.assertEqual(sorted(classes), [2] * BURST + [6] * BURST, "every packet classified and delivered")
        # The urgent packets all leave before the lax ones still queued when they arrived: at
        # least half the lax burst comes after the last urgent packet.
        last_urgent = max(i for i, c in enumerate(classes) if c == 6)
        lax_after = sum(1 for c in classes[last_urgent + 1:] if c == 2)
        self.assertGreaterEqual(lax_after, BURST // 2, f"order of classes: {classes}")
        self.expect_nothing()

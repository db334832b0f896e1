"""Counters read over P4Runtime: dep_bytes[meter slot] (receiver's ToR, DATA), port_tx_bytes[port]
and qdepth_hist[port * 8 + bucket] (egress, every packet). The malformed counter is checked per
case in malformed.py. Byte counts are whole frames as BMv2 sees them (no FCS)."""

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
    ip_int,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from safs.core import p4names as n
from safs.core.scapy_layer import safs_data


class CountersTest(SafsTest):
    def read(self, counter: str, index: int) -> tuple[int, int]:
        return self.client.read_counter(counter, index)

    def wait_delta(self, counter: str, index: int, before: tuple[int, int], want: tuple[int, int],
                   packets_only: bool = False) -> None:
        """Poll ``counter[index]`` until (bytes, packets) - before == want (only packets when
        ``packets_only``: BMv2 counts bytes in packet counters too, see docs/dataplane.md)."""
        def ok():
            b, p = self.read(counter, index)
            if packets_only:
                return p - before[1] == want[1]
            return (b - before[0], p - before[1]) == want
        try:
            self.poll_until(ok, f"{counter}[{index}] to grow by {want}", timeout=2)
        except AssertionError:
            b, p = self.read(counter, index)
            self.fail(f"{counter}[{index}] grew by {(b - before[0], p - before[1])}, want {want}; "
                      f"{[self.read(counter, index + k) for k in range(8)]}")

    def runTest(self) -> None:
        self.setup_routes()
        slot, dep = 33, 77
        self.insert(n.DEP_GRANT, {n.F_SRC_ADDR: ip_int(SENDER_IP), n.F_DEP_ID: dep}, n.ACT_SET_FIXED_GRANT,
                    {"rate_kbps": 10**6, "epoch": 1, "lease_us": 1000, "meter_slot": slot})
        # Variants: (packets, egress port, counts in dep_bytes[slot]?). The DATA holds the
        # installed grant (rate and epoch), so no GRANT is pushed (none could be: no clone session).
        data = [safs_data(SENDER_IP, RECEIVER_IP, 500 + i, 3000 - 100 * i, 2**47, 1, 100 * (i + 1), dep_id=dep,
                          rate_kbps=10**6, src_mac=SENDER_MAC, dst_mac=SWITCH_MAC) for i in range(3)]
        plain = [Ether(src=SENDER_MAC, dst=SWITCH_MAC) / IP(src=SENDER_IP, dst=dst) / UDP(dport=9)
                 / bytes(n_bytes) for dst, n_bytes in ((RECEIVER_IP, 10), (OTHER_IP, 300))]
        transit = [safs_data(SENDER_IP, OTHER_IP, 500, 10, 2**47, 1, 50, dep_id=dep, rate_kbps=10**6,
                             src_mac=SENDER_MAC, dst_mac=SWITCH_MAC)]
        for name, pkts, port, in_flow in (("DATA at the receiver's ToR", data, PORT_RECEIVER, True),
                                          ("non-SAFS", plain[:1], PORT_RECEIVER, False),
                                          ("non-SAFS, other port", plain[1:], PORT_OTHER, False),
                                          ("DATA in transit (not metered)", transit, PORT_OTHER, False)):
            with self.subTest(name):
                flow0 = self.read(n.DEP_BYTES, slot)
                tx0 = self.read(n.PORT_TX_BYTES, port)
                hist0 = [self.read(n.QDEPTH_HIST, port * n.QDEPTH_BUCKETS + b)[1]
                         for b in range(n.QDEPTH_BUCKETS)]
                for p in pkts:
                    self.send(PORT_SENDER, p)
                for _ in pkts:
                    self.receive(port)
                size = sum(len(bytes(p)) for p in pkts)
                self.wait_delta(n.PORT_TX_BYTES, port, tx0, (size, len(pkts)))
                # Every packet lands in one depth bucket of its port; the first meets an empty
                # queue (bucket 0). Later ones may meet 1 or 2 ahead on a busy machine.
                def hist_delta(port=port, hist0=hist0):
                    now = [self.read(n.QDEPTH_HIST, port * n.QDEPTH_BUCKETS + b)[1]
                           for b in range(n.QDEPTH_BUCKETS)]
                    return [a - b for a, b in zip(now, hist0)]
                self.poll_until(lambda: sum(hist_delta()) == len(pkts),  # noqa: B023 (polled in this iteration)
                                "qdepth_hist to count every packet")
                self.assertGreaterEqual(hist_delta()[0], 1, f"bucket 0 of port {port}: {hist_delta()}")
                want_flow = (size, len(pkts)) if in_flow else (0, 0)
                self.wait_delta(n.DEP_BYTES, slot, flow0, want_flow)
        self.expect_nothing()

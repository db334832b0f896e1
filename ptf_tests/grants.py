"""Fixed grants and the push rule at the receiver's ToR (docs/protocol.md "What switches do",
"Grants"); share grants, their registers and the REQUEST digest are in share.py.

- a REQUEST is turned around into a GRANT to the sender carrying its dependency's grant:
  ``dep_grant`` is keyed on the sender's address AND ``dep_id``, so the same ``dep_id`` from
  another sender, or another ``dep_id`` of the same sender, gets the default grant (epoch 0);
- the push rule: a DATA packet carries the rate and epoch its sender holds; it is forwarded, and
  a fresh 78-byte GRANT goes to the sender when the held rate is lower than the grant's by more
  than 1/32 or higher by more than 1/256, its epoch is 0, or it has RENEW set, and never when it
  has LAST set. The held epoch is not compared otherwise (a DATA with an older epoch and the
  right rate gets nothing). The GRANT is an ingress-to-egress clone: the controller must have
  created clone session ``port + 1`` toward each port a sender can be reached on
  (PacketReplicationEngineEntry; docs/dataplane.md).
"""

from __future__ import annotations

from base_test import (
    CLONE_SESSION_BASE,
    PORT_RECEIVER,
    PORT_SENDER,
    RECEIVER_IP,
    RECEIVER_MAC,
    SENDER2_IP,
    SENDER_IP,
    TO_SWITCH,
    SafsTest,
    ip_int,
)
from scapy.layers.l2 import Ether

from safs.core import p4names as n
from safs.core.protocol import FLAG_BACKGROUND, FLAG_LAST, FLAG_RENEW, RATE_KBPS_MAX, MsgType
from safs.core.scapy_layer import SAFS, safs_data, safs_request

DEFAULT_RATE_KBPS = 10_000
DEFAULT_LEASE_US = 500


class GrantTestBase(SafsTest):
    def setup_grants(self) -> None:
        self.setup_routes()
        self.set_default(n.DEFAULT_GRANT, n.ACT_SET_DEFAULT_GRANT,
                         {"rate_kbps": DEFAULT_RATE_KBPS, "lease_us": DEFAULT_LEASE_US, "meter_slot": 0})

    def fixed_grant(self, sender: str, dep_id: int, rate: int, epoch: int, lease: int, slot: int) -> None:
        self.insert(n.DEP_GRANT, {n.F_SRC_ADDR: ip_int(sender), n.F_DEP_ID: dep_id}, n.ACT_SET_FIXED_GRANT,
                    {"rate_kbps": rate, "epoch": epoch, "lease_us": lease, "meter_slot": slot})


class RequestGrantTest(GrantTestBase):
    """Variants (sender, dep_id): the fixed grant of that key, or the default grant (epoch 0)
    when the key has no entry. The GRANT carries switch time: it must move with the clock
    offset."""

    def runTest(self) -> None:
        self.setup_grants()
        self.fixed_grant(SENDER_IP, 42, 2_500_000, 7, 800, 4)
        self.fixed_grant(SENDER2_IP, 44, 1_200_000, 3, 600, 5)
        offset = 5_000_000_000_000  # 5000 s
        self.set_default(n.CLOCK_OFFSET, n.ACT_SET_CLOCK_OFFSET, {"offset_ns": offset})
        default = (DEFAULT_RATE_KBPS, 0, DEFAULT_LEASE_US)
        variants = [  # (sender, dep_id, flow_id, expected (rate, epoch, lease))
            (SENDER_IP, 42, 1001, (2_500_000, 7, 800)),
            (SENDER_IP, 43, 1002, default),     # another dependency of the same sender
            (SENDER2_IP, 42, 1003, default),    # the same dep_id from another sender
            (SENDER2_IP, 44, 1004, (1_200_000, 3, 600)),
        ]
        for sender, dep_id, flow_id, (rate, epoch, lease) in variants:
            with self.subTest(sender=sender, dep_id=dep_id):
                self.send(PORT_SENDER, safs_request(sender, RECEIVER_IP, flow_id, 123_456, 987_654, dep_id=dep_id,
                                                    **TO_SWITCH))
                got = self.receive(PORT_SENDER)
                self.check_grant(got, flow_id=flow_id, dep_id=dep_id, remaining=123_456, rate=rate, epoch=epoch,
                                 lease=lease, sender_ip=sender)
                # The GRANT's source MAC is the REQUEST's destination MAC after routing
                # rewrote it, i.e. the receiver's (BMv2 quirk-free but worth knowing).
                self.assertEqual(got[Ether].src, RECEIVER_MAC)
                # now = BMv2 microseconds * 1000 + offset: at or after the offset, < 1 h later.
                ts = got[SAFS].timestamp_ns
                self.assertGreaterEqual(ts, offset)
                self.assertLess(ts - offset, 3600 * 10**9)
                self.assertEqual(ts % 1000, offset % 1000, "BMv2 time has microsecond resolution")
        self.expect_nothing()


R = 3_200_000  # kbit/s, divisible by 32 and 256: the push thresholds are exact
PUSH_VARIANTS = [  # (name, held rate, held epoch, flags, GRANT expected) against (R, epoch 5)
    ("holds the grant", R, 5, 0, False),
    ("older epoch, same rate", R, 4, 0, False),
    ("newer epoch, same rate", R, 6, 0, False),
    ("1/32 lower", R - R // 32, 5, 0, False),
    ("more than 1/32 lower", R - R // 32 - 1, 5, 0, True),
    ("3/64 lower", R - 3 * R // 64, 5, 0, True),
    ("1/256 higher", R + R // 256, 5, 0, False),
    ("more than 1/256 higher", R + R // 256 + 1, 5, 0, True),
    ("3/64 higher", R + 3 * R // 64, 5, 0, True),
    ("holds rate 0", 0, 5, 0, True),
    ("epoch 0 (default grant)", R, 0, 0, True),
    ("RENEW", R, 5, FLAG_RENEW, True),
    ("BACKGROUND", R, 5, FLAG_BACKGROUND, False),
    ("BACKGROUND and RENEW", R, 5, FLAG_BACKGROUND | FLAG_RENEW, True),
    ("LAST, rate far off", R // 2, 5, FLAG_LAST, False),
    ("LAST, epoch 0", R, 0, FLAG_LAST, False),
    ("LAST and RENEW", R, 5, FLAG_LAST | FLAG_RENEW, False),
]
MAX_VARIANTS = [  # against (2^32 - 1 kbit/s, epoch 9): no 32-bit overflow in the comparison
    ("holds the largest rate", RATE_KBPS_MAX, 9, 0, False),
    ("1/32 below the largest rate", RATE_KBPS_MAX - (RATE_KBPS_MAX >> 5), 9, 0, False),
    ("more than 1/32 below the largest rate", RATE_KBPS_MAX - (RATE_KBPS_MAX >> 5) - 1, 9, 0, True),
]


class PushRuleTest(GrantTestBase):
    """Each variant: a DATA of a dependency with a fixed grant, carrying a held rate, epoch and
    flags; it is forwarded unchanged (apart from routing and the switch-filled fields), and a
    GRANT with the installed grant (flags, flow id, dep_id and remaining bytes echoed) comes
    back exactly when the push rule says so (module docstring)."""

    def runTest(self) -> None:
        self.setup_grants()
        self.add_clone_session(PORT_SENDER + CLONE_SESSION_BASE, PORT_SENDER)
        self.fixed_grant(SENDER_IP, 60, R, 5, 900, 6)
        self.fixed_grant(SENDER_IP, 61, RATE_KBPS_MAX, 9, 700, 7)
        cases = [(60, (R, 5, 900), v) for v in PUSH_VARIANTS] + [(61, (RATE_KBPS_MAX, 9, 700), v) for v in MAX_VARIANTS]
        for i, (dep, (rate, epoch, lease), (name, held, held_epoch, flags, want)) in enumerate(cases):
            with self.subTest(name):
                flow_id, remaining = 200 + i, 5_000 + i
                pkt = safs_data(SENDER_IP, RECEIVER_IP, flow_id, remaining, 2**47, held_epoch, 200, flags=flags,
                                dep_id=dep, rate_kbps=held, **TO_SWITCH)
                self.send(PORT_SENDER, pkt)
                data = self.receive(PORT_RECEIVER)
                h = data[SAFS]
                self.assertEqual((h.type, h.flow_id, h.dep_id, h.flags), (int(MsgType.DATA), flow_id, dep, flags), name)
                self.assertEqual((h.rate_kbps, h.epoch), (held, held_epoch), f"{name}: held grant not rewritten")
                self.assertEqual(len(bytes(data)), len(bytes(pkt)))
                self.assertEqual(data[Ether].dst, RECEIVER_MAC)
                if want:
                    self.check_grant(self.receive(PORT_SENDER), flow_id=flow_id, dep_id=dep, remaining=remaining,
                                     rate=rate, epoch=epoch, lease=lease, flags=flags, what=name)
                self.expect_nothing()

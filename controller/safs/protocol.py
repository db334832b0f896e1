"""SAFS wire protocol constants: the one place for port, layout, field ranges and queue map.

The header is carried in UDP to destination port :data:`SAFS_UDP_PORT`. Layout (network byte
order, 36 bytes), documented in docs/protocol.md:

====== ==== ================ ===========================================================
offset size field            meaning
====== ==== ================ ===========================================================
0      1    version(4)|type(4) version 1; type DATA=1 REQUEST=2 GRANT=3 DONE=4
1      1    flags            bit0 BACKGROUND (flow hinted as background class)
2      1    qclass           switch-filled: queue class chosen (0..7), 0 from sender
3      1    color            switch-filled: meter colour 0 green, 1 yellow, 2 red, 3 unmetered
4      4    flow_id          flow id, 1..2^32-1
8      6    remaining_bytes  bytes of the flow left including this packet's payload
14     6    timestamp_ns     DATA: latest start; REQUEST/DONE: no-bubble ts; GRANT: switch time
20     4    rate_kbps        GRANT: granted rate (kbit/s); other types: 0
24     4    epoch            GRANT: grant epoch; DATA: epoch of the grant it is sent under
28     4    lease_us         GRANT: lease (microseconds); other types: 0
32     2    qdepth           switch-filled: egress queue depth at enqueue (packets, saturating)
34     2    reserved         0
====== ==== ================ ===========================================================
"""

from __future__ import annotations

import enum

SAFS_UDP_PORT = 0x5AF5  # 23285
SAFS_VERSION = 1
HEADER_LEN = 36  # bytes

FLOW_ID_MIN, FLOW_ID_MAX = 1, (1 << 32) - 1
REMAINING_BYTES_MAX = (1 << 48) - 1
RATE_KBPS_MAX = (1 << 32) - 1
EPOCH_MAX = (1 << 32) - 1
LEASE_US_MAX = (1 << 32) - 1
QDEPTH_MAX = (1 << 16) - 1

FLAG_BACKGROUND = 0x01


class MsgType(enum.IntEnum):
    """SAFS message types (low nibble of byte 0)."""

    DATA = 1
    REQUEST = 2
    GRANT = 3
    DONE = 4


class Color(enum.IntEnum):
    """Meter colour stamped by the switch (v1model meter colours; 3 = not metered)."""

    GREEN = 0
    YELLOW = 1
    RED = 2
    UNMETERED = 3


# Queue map (BMv2 >= 1.15.1 priority queues, higher value served first).
# Source: ../shared/BRIEF.md, "Design decisions / Queues".
NUM_QUEUES = 8
QUEUE_CONTROL = 7  # REQUEST, GRANT, DONE
QUEUE_SLACK_MOST_URGENT = 6
QUEUE_SLACK_LEAST_URGENT = 2
SLACK_QUEUES = tuple(range(QUEUE_SLACK_MOST_URGENT, QUEUE_SLACK_LEAST_URGENT - 1, -1))  # 6..2
QUEUE_OVER_RATE = 1  # SAFS packets over their granted rate (meter not green)
QUEUE_BEST_EFFORT = 0  # everything else (non-SAFS, malformed SAFS)

# ECN codepoints (RFC 3168).
ECN_NOT_ECT, ECN_ECT1, ECN_ECT0, ECN_CE = 0, 1, 2, 3

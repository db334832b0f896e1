"""SAFS wire protocol constants: the one place for port, layout, field ranges and queue map.

The header is carried in UDP to destination port :data:`SAFS_UDP_PORT`. Layout (network byte
order, 36 bytes), documented in docs/protocol.md:

====== ==== ================ ===========================================================
offset size field            meaning
====== ==== ================ ===========================================================
0      1    version(4)|type(4) version 2; type DATA=1 REQUEST=2 GRANT=3 DONE=4
1      1    flags            bit0 BACKGROUND, bit1 LAST (DATA: no new data of the dependency
                             after it), bit2 RENEW (DATA: lease running out, send a GRANT)
2      1    qclass           switch-filled: queue class chosen (0..7), 0 from sender
3      1    color            switch-filled: meter colour 0 green, 1 yellow, 2 red, 3 unmetered
4      4    flow_id          transfer id, 1..2^32-1
8      6    remaining_bytes  bytes of the transfer left including this packet's payload
14     6    timestamp_ns     DATA/REQUEST: latest start; DONE: no-bubble ts; GRANT: switch time
20     4    rate_kbps        GRANT: granted rate (kbit/s); DATA: the rate the sender holds; else 0
24     4    epoch            GRANT: grant epoch; DATA: epoch of the grant it is sent under
28     4    lease_us         GRANT: lease (microseconds); other types: 0
32     2    qdepth           switch-filled: egress queue depth at enqueue (packets, saturating)
34     2    dep_id           the sender's dependency id (1..65535; 0 = none)
====== ==== ================ ===========================================================
"""

from __future__ import annotations

import enum
import struct

from safs.core.errors import InvalidInput
from safs.core.timebase import wrap

SAFS_UDP_PORT = 0x5AF5  # 23285
SAFS_VERSION = 2  # 2: dependency grants (dep_id, LAST/RENEW, held rate in DATA)
HEADER_LEN = 36  # bytes
# Bytes on the wire around a SAFS header: Ethernet 14 + IPv4 20 + UDP 8 + SAFS 36 = 78; a DATA
# packet is this plus its payload, a control message (REQUEST/GRANT/DONE) exactly this.
WIRE_OVERHEAD_BYTES = 14 + 20 + 8 + HEADER_LEN

FLOW_ID_MIN, FLOW_ID_MAX = 1, (1 << 32) - 1
REMAINING_BYTES_MAX = (1 << 48) - 1
RATE_KBPS_MAX = (1 << 32) - 1
EPOCH_MAX = (1 << 32) - 1
LEASE_US_MAX = (1 << 32) - 1
QDEPTH_MAX = (1 << 16) - 1

DEP_ID_MIN, DEP_ID_MAX = 1, (1 << 16) - 1



def transfer_dep_id(flow_id: int) -> int:
    """The dependency id of a transfer that is its own dependency (per-transfer mode, policy
    ``safs-per-transfer``): ``flow_id mod 65535 + 1`` (1..65535), the same at sender and
    controller."""
    return flow_id % DEP_ID_MAX + 1


FLAG_BACKGROUND = 0x01  # background class: hinted so, or yielding while its NIC is taken (sender rule 5b)
FLAG_LAST = 0x02  # DATA: the dependency has no new data after this packet (it goes idle)
FLAG_RENEW = 0x04  # DATA: the sender's lease is running out; the receiver's ToR sends a GRANT
# DATA: the sender's ToR demoted it (no admitted dependency, over the port's unclaimed_meter);
# every switch sends it in queue 1. Set by switches; a host setting it only demotes itself.
FLAG_DEMOTED = 0x08
# DATA: a retransmitted segment. The receiver's ToR ignores an original DATA of a transfer whose
# LAST already passed (a straggler the LAST overtook), not a retransmission (docs/protocol.md).
FLAG_RESENT = 0x10
# DATA/REQUEST: none of the sender's other dependencies has data to send, so this one can use
# whatever rate its receiver's ToR grants; the ToR serves such dependencies of the most urgent
# class one at a time (the port's holder; docs/protocol.md, "Grants").
FLAG_SOLE = 0x20
# DATA: set by the sender's ToR only (it clears the bit on DATA from its hosts): the rate the
# packet holds is the dependency's share of a contended out-link of that ToR, so the receiver's
# ToR pushes no GRANT for it being below the receiver's grant (docs/protocol.md, "Grants").
FLAG_CAPPED = 0x40
# DONE: the receiver rejected the transfer (its ReceiverAdmission: Moore and Hodgson's rule at its
# link); the sender sends the rest after its on-time transfers, in the late class. Switches
# forward it as any DONE (docs/protocol.md, "Receiver admission").
FLAG_LATE = 0x80


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


class Malformed(enum.IntEnum):
    """Why a UDP payload to :data:`SAFS_UDP_PORT` is not a SAFS header.

    The value is the index of the switch's ``malformed`` counter (:data:`safs.core.p4names.MALFORMED`).
    The switch treats such a packet as non-SAFS (class 0, no meter, no grant, no digest);
    hosts drop it. Checked in this order: length, version, type.
    """

    TRUNCATED = 0  # UDP payload shorter than HEADER_LEN
    BAD_VERSION = 1  # version != SAFS_VERSION
    BAD_TYPE = 2  # type not in MsgType


class Forged(enum.IntEnum):
    """Why a switch dropped (or, for ``UNCLAIMED_DATA``, demoted) a packet from a host-facing
    port (p4src/include/source_guard.p4).

    The value is the index of the switch's ``forged`` counter (:data:`safs.core.p4names.FORGED`).
    Checked in this order, only on ports with a ``host_port`` entry.
    """

    SPOOFED_SOURCE = 0  # IPv4 source is not the attached host's address
    GRANT_FROM_HOST = 1  # a GRANT: only a receiver's ToR originates GRANTs
    OVERSIZED_CONTROL = 2  # a REQUEST over MAX_REQUEST_FRAME_BYTES or DONE over MAX_DONE_FRAME_BYTES
    CONTROL_RATE = 3  # a REQUEST or DONE over the port's control_meter rate (RED)
    UNCLAIMED_DATA = 4  # DATA with no dep_claim entry over unclaimed_meter: demoted, not dropped


# Longest REQUEST and DONE frames a host may send: larger ones would carry data in the control
# queue (7). A REQUEST is Ethernet + IPv4 + UDP + SAFS header, 78 bytes (room for IP options); a
# DONE that is a NACK lists up to nack_max_segments 6-byte offsets after it (78 + 6 * 157 <= 1024).
MAX_REQUEST_FRAME_BYTES = 128
MAX_DONE_FRAME_BYTES = 1024
NACK_MAX_SEGMENTS_LIMIT = (MAX_DONE_FRAME_BYTES - 78) // 6  # 157


def malformed_reason(udp_payload: bytes) -> Malformed | None:
    """Check the fixed part of a SAFS header; ``None`` when it is well formed.

    Args:
        udp_payload: the UDP payload (header first; trailing application bytes are fine).
    """
    if len(udp_payload) < HEADER_LEN:
        return Malformed.TRUNCATED
    if udp_payload[0] >> 4 != SAFS_VERSION:
        return Malformed.BAD_VERSION
    if udp_payload[0] & 0x0F not in MsgType._value2member_map_:
        return Malformed.BAD_TYPE
    return None


# Grant epochs ---------------------------------------------------------------------------
# 32-bit serial-number arithmetic (RFC 1982, SERIAL_BITS = 32), with 0 reserved for
# "no grant held / default grant": 0 is older than every other epoch and next_epoch skips it.
EPOCH_NONE = 0
_EPOCH_MOD = EPOCH_MAX + 1
_EPOCH_HALF = 1 << 31


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (0..2^32-1): ``epoch + 1`` mod 2^32, skipping 0."""
    nxt = (epoch + 1) % _EPOCH_MOD
    return nxt if nxt != EPOCH_NONE else 1


def epoch_newer(a: int, b: int) -> bool:
    """True when epoch ``a`` is strictly newer than ``b`` (both 0..2^32-1).

    0 (no grant) is older than any other epoch. Otherwise RFC 1982: ``a`` is newer when
    ``(a - b) mod 2^32`` is in ``1..2^31-1``; pairs exactly 2^31 apart are unordered (False
    both ways), which cannot happen with fewer than 2^31 grant changes in flight.
    """
    if a == EPOCH_NONE:
        return False
    if b == EPOCH_NONE:
        return True
    return 0 < (a - b) % _EPOCH_MOD < _EPOCH_HALF


# Units on the wire ----------------------------------------------------------------------
NS_PER_S = 1_000_000_000


def rate_bps_to_kbps(rate_bps: int) -> int:
    """Wire rate in kbit/s for a rate in bit/s: rounded down (never grant more than allocated),
    clamped to ``0..RATE_KBPS_MAX``."""
    return max(0, min(RATE_KBPS_MAX, rate_bps // 1000))


def rate_kbps_to_bps(rate_kbps: int) -> int:
    """Rate in bit/s for a wire rate in kbit/s."""
    return rate_kbps * 1000


def lease_ns_to_us(lease_ns: int) -> int:
    """Wire lease in microseconds for a lease in ns: rounded down (a lease never outlives the
    controller's), clamped to ``0..LEASE_US_MAX``."""
    return max(0, min(LEASE_US_MAX, lease_ns // 1000))


def latest_start_ns(no_bubble_ts_ns: int, remaining_bytes: int, line_rate_bps: int) -> int:
    """Latest start time carried in DATA: ``no_bubble_ts - remaining_bytes*8/line_rate`` mod 2^48.

    The sender computes it (the switch cannot divide). The transmission time is rounded up
    to whole ns so the latest start is never later than the exact value.

    Args:
        no_bubble_ts_ns: the flow's no-bubble timestamp (any int; reduced mod 2^48).
        remaining_bytes: bytes left including this packet's payload (>= 0).
        line_rate_bps: the sender's line rate in bit/s (> 0).

    Raises:
        InvalidInput: ``line_rate_bps`` not positive or ``remaining_bytes`` negative.

    Source: ../shared/BRIEF.md, "Design decisions / Slack without division".
    """
    if line_rate_bps <= 0:
        raise InvalidInput("line_rate_bps", f"must be > 0 bit/s, got {line_rate_bps}")
    if remaining_bytes < 0:
        raise InvalidInput("remaining_bytes", f"must be >= 0, got {remaining_bytes}")
    tx_ns = -(-remaining_bytes * 8 * NS_PER_S // line_rate_bps)  # ceil
    return wrap(no_bubble_ts_ns - tx_ns)


# Packing without scapy (host data paths) ------------------------------------------------
# The layout of the table above; 48-bit fields split into a 16-bit high and 32-bit low part.
HEADER_STRUCT = struct.Struct("!BBBBIHIHIIIIHH")
assert HEADER_STRUCT.size == HEADER_LEN
_LOW32 = 0xFFFFFFFF


def pack_header_into(buf: bytearray | memoryview, msg_type: int, flow_id: int, remaining_bytes: int = 0,
                     timestamp_ns: int = 0, rate_kbps: int = 0, epoch: int = 0, lease_us: int = 0,
                     flags: int = 0, dep_id: int = 0) -> None:
    """Write a 36-byte SAFS header (:data:`SAFS_VERSION`) at the start of ``buf``; switch-filled
    fields 0.

    Arguments are the header fields (units in docs/protocol.md): ``remaining_bytes`` and
    ``timestamp_ns`` 0..2^48-1 (wider values are cut to 48 bits), the others their field width.

    Raises:
        struct.error: a value does not fit its field (e.g. negative, ``flow_id`` >= 2^32).
    """
    HEADER_STRUCT.pack_into(buf, 0, (SAFS_VERSION << 4) | msg_type, flags, 0, 0, flow_id,
                            (remaining_bytes >> 32) & 0xFFFF, remaining_bytes & _LOW32,
                            (timestamp_ns >> 32) & 0xFFFF, timestamp_ns & _LOW32,
                            rate_kbps, epoch, lease_us, 0, dep_id)


def pack_header(msg_type: int, flow_id: int, remaining_bytes: int = 0, timestamp_ns: int = 0,
                rate_kbps: int = 0, epoch: int = 0, lease_us: int = 0, flags: int = 0, dep_id: int = 0) -> bytes:
    """The 36 header bytes for these fields (see :func:`pack_header_into`)."""
    buf = bytearray(HEADER_LEN)
    pack_header_into(buf, msg_type, flow_id, remaining_bytes, timestamp_ns, rate_kbps, epoch,
                     lease_us, flags, dep_id)
    return bytes(buf)


def unpack_header(buf: bytes | bytearray | memoryview) -> tuple[int, int, int, int, int, int, int, int, int, int, int,
                                                                 int]:
    """Decode the header at the start of a well-formed UDP payload (check
    :func:`malformed_reason` first).

    Returns:
        ``(type, flags, qclass, color, flow_id, remaining_bytes, timestamp_ns, rate_kbps, epoch,
        lease_us, qdepth, dep_id)`` as ints.

    Raises:
        struct.error: fewer than 36 bytes.
    """
    (b0, flags, qclass, color, flow_id, rem_hi, rem_lo, ts_hi, ts_lo, rate, epoch, lease, qdepth,
     dep_id) = HEADER_STRUCT.unpack_from(buf)
    return (b0 & 0x0F, flags, qclass, color, flow_id, (rem_hi << 32) | rem_lo, (ts_hi << 32) | ts_lo,
            rate, epoch, lease, qdepth, dep_id)


# Start-up probe (docs/protocol.md "Start-up probe"): the frame of a PacketOut the controller
# sends to the switch's CPU port at one priority queue; the program sends it back as a PacketIn.
# Ethernet (destination and source zero, EtherType 0x88B5: IEEE 802 local experimental 1),
# then "SAFS", the controller's nonce (8 bytes) and the queue probed (1 byte): 27 bytes.
PROBE_ETHERTYPE = 0x88B5
PROBE_MAGIC = b"SAFS"
PROBE_STRUCT = struct.Struct("!6s6sH4sQB")


def pack_probe(nonce: int, queue: int) -> bytes:
    """The 27-byte probe frame for ``nonce`` (0..2^64-1) and ``queue`` (0..NUM_QUEUES-1).

    Raises:
        InvalidInput: a value out of range (field ``nonce`` or ``queue``).
    """
    if not 0 <= nonce < 1 << 64:
        raise InvalidInput("nonce", f"must be in 0..2^64-1, got {nonce}")
    if not 0 <= queue < NUM_QUEUES:
        raise InvalidInput("queue", f"must be in 0..{NUM_QUEUES - 1}, got {queue}")
    return PROBE_STRUCT.pack(bytes(6), bytes(6), PROBE_ETHERTYPE, PROBE_MAGIC, nonce, queue)


def unpack_probe(frame: bytes) -> tuple[int, int] | None:
    """``(nonce, queue)`` of a probe frame, or None when ``frame`` is not one (too short,
    another EtherType or magic)."""
    if len(frame) < PROBE_STRUCT.size:
        return None
    _, _, ethertype, magic, nonce, queue = PROBE_STRUCT.unpack_from(frame)
    if ethertype != PROBE_ETHERTYPE or magic != PROBE_MAGIC:
        return None
    return nonce, queue

"""Scapy layer for the SAFS header, packet builders and a strict header parser.

Layout, field ranges and message semantics: docs/protocol.md and :mod:`safs.core.protocol`.
The layer is bound to UDP destination port :data:`~safs.core.protocol.SAFS_UDP_PORT` only (every
SAFS message, GRANT included, goes to that port; the source port is free). A UDP payload to
that port shorter than the header dissects as ``Raw``, as the switch treats it as non-SAFS.

Builders (in the style of fabric-tna's PTF ``pkt_*`` helpers) return ready-to-send
``Ether/IP/UDP/SAFS[/Raw]`` packets. They set the UDP checksum to 0 (RFC 768 "no checksum"),
as the protocol requires, because switches rewrite ``qclass``, ``color`` and ``qdepth`` in
flight; scapy computes the lengths and the IPv4 checksum when the packet is built.

This module is for tests, PTF and Mininet hosts; the simulator uses :mod:`safs.core.packet`.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Any

from scapy.fields import BitEnumField, BitField, ByteEnumField, ByteField, IntField, ShortField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

from safs.core.errors import ProtocolError
from safs.core.protocol import (
    ECN_NOT_ECT,
    HEADER_LEN,
    SAFS_UDP_PORT,
    SAFS_VERSION,
    Color,
    Malformed,
    MsgType,
    malformed_reason,
)

DEFAULT_SRC_MAC = "00:00:00:00:00:01"
DEFAULT_DST_MAC = "00:00:00:00:00:02"

_TYPE_NAMES = {t.value: t.name for t in MsgType}
_COLOR_NAMES = {c.value: c.name.lower() for c in Color}


class _RangeChecked:
    """A bit field that refuses a value it cannot hold, as scapy's byte-aligned fields do (a
    plain ``BitField`` keeps the low bits: ``remaining_bytes=2**48 + 7`` would go out as 7)."""

    name: str
    size: int

    def addfield(self, pkt: Packet, s: Any, val: Any) -> Any:
        value = self.i2m(pkt, val)  # type: ignore[attr-defined]
        if not 0 <= value < 1 << self.size:
            raise ValueError(f"expected 0..{(1 << self.size) - 1} ({self.size} bits), got {value}")
        return super().addfield(pkt, s, val)  # type: ignore[misc]


class _BitField(_RangeChecked, BitField):
    pass


class _BitEnumField(_RangeChecked, BitEnumField):
    pass


class SAFS(Packet):
    """The 36-byte SAFS header (docs/protocol.md). Unknown versions and types still dissect
    (for debugging); :func:`parse_safs` is the strict check."""

    name = "SAFS"
    fields_desc = [
        _BitField("version", SAFS_VERSION, 4),
        _BitEnumField("type", MsgType.DATA.value, 4, _TYPE_NAMES),
        ByteField("flags", 0),
        ByteField("qclass", 0),
        ByteEnumField("color", Color.GREEN.value, _COLOR_NAMES),
        IntField("flow_id", 1),
        _BitField("remaining_bytes", 0, 48),
        _BitField("timestamp_ns", 0, 48),
        IntField("rate_kbps", 0),
        IntField("epoch", 0),
        IntField("lease_us", 0),
        ShortField("qdepth", 0),
        ShortField("dep_id", 0),
    ]

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args: Any, **kargs: Any) -> type[Packet]:
        """A payload too short for the header is not SAFS: dissect it as ``Raw``."""
        if _pkt and len(_pkt) < HEADER_LEN:
            return Raw
        return cls

    def mysummary(self) -> str:
        return self.sprintf("SAFS %type% dep=%dep_id% flow=%flow_id% rem=%remaining_bytes% epoch=%epoch%")


bind_layers(UDP, SAFS, dport=SAFS_UDP_PORT)


@dataclass(frozen=True)
class SafsHeader:
    """A decoded SAFS header (field meanings and units in docs/protocol.md).

    ``timestamp_ns`` is 48-bit fabric time; ``rate_kbps`` kbit/s; ``lease_us`` microseconds;
    ``qdepth`` packets. ``color`` is a plain int (the sender may leave any value).
    """

    type: MsgType
    flow_id: int
    remaining_bytes: int = 0
    timestamp_ns: int = 0
    rate_kbps: int = 0
    epoch: int = 0
    lease_us: int = 0
    flags: int = 0
    qclass: int = 0
    color: int = 0
    qdepth: int = 0
    dep_id: int = 0
    version: int = SAFS_VERSION

    def to_bytes(self) -> bytes:
        """The 36 header bytes in network byte order."""
        return _pack(self)


_STRUCT = struct.Struct("!BBBBI6s6sIIIHH")  # 36 bytes, see safs.core.protocol
assert _STRUCT.size == HEADER_LEN


def _pack(h: SafsHeader) -> bytes:
    return _STRUCT.pack(
        (h.version << 4) | int(h.type), h.flags, h.qclass, h.color, h.flow_id,
        h.remaining_bytes.to_bytes(6, "big"), h.timestamp_ns.to_bytes(6, "big"),
        h.rate_kbps, h.epoch, h.lease_us, h.qdepth, h.dep_id,
    )


_REASON_TEXT = {
    Malformed.TRUNCATED: "truncated: UDP payload shorter than the {n}-byte SAFS header",
    Malformed.BAD_VERSION: "bad version {v}, expected {exp}",
    Malformed.BAD_TYPE: "unknown type {t}, expected one of DATA=1 REQUEST=2 GRANT=3 DONE=4",
}


def parse_safs(raw: bytes) -> SafsHeader:
    """Decode the SAFS header at the start of a UDP payload (trailing bytes are ignored).

    Raises:
        ProtocolError: truncated (< 36 bytes), version != SAFS_VERSION, or unknown type; the message
            names the :class:`~safs.core.protocol.Malformed` reason (the switch's counter index).
    """
    raw = bytes(raw)
    reason = malformed_reason(raw)
    if reason is not None:
        text = _REASON_TEXT[reason].format(
            n=HEADER_LEN, v=raw[0] >> 4 if raw else None, exp=SAFS_VERSION,
            t=raw[0] & 0x0F if raw else None)
        raise ProtocolError(f"SAFS header {reason.name}: {text} (got {len(raw)} bytes)")
    (b0, flags, qclass, color, flow_id, rem, ts, rate, epoch, lease, qdepth,
     dep_id) = _STRUCT.unpack_from(raw)
    return SafsHeader(
        version=b0 >> 4, type=MsgType(b0 & 0x0F), flags=flags, qclass=qclass, color=color,
        flow_id=flow_id, remaining_bytes=int.from_bytes(rem, "big"),
        timestamp_ns=int.from_bytes(ts, "big"), rate_kbps=rate, epoch=epoch, lease_us=lease,
        qdepth=qdepth, dep_id=dep_id,
    )


# Builders ---------------------------------------------------------------------------------

def _ip_str(addr: str | int) -> str:
    """Dotted IPv4 for a dotted string or an int (topology addresses are ints)."""
    return str(ipaddress.IPv4Address(addr))


def pkt_add_safs(src_ip: str | int, dst_ip: str | int, header: SAFS, *, payload_len: int = 0,
                 sport: int = SAFS_UDP_PORT, ecn: int = ECN_NOT_ECT, ttl: int = 64,
                 src_mac: str = DEFAULT_SRC_MAC, dst_mac: str = DEFAULT_DST_MAC) -> Packet:
    """``Ether/IP/UDP(dport=23285, chksum=0)/header[/Raw(payload_len zero bytes)]``.

    Args:
        src_ip, dst_ip: IPv4 as dotted string or int.  payload_len: application bytes after
        the header.  sport: UDP source port (free; 23285 by default).  ecn: IP ECN bits 0..3.
    """
    pkt = (Ether(src=src_mac, dst=dst_mac)
           / IP(src=_ip_str(src_ip), dst=_ip_str(dst_ip), tos=ecn & 0x3, ttl=ttl)
           / UDP(sport=sport, dport=SAFS_UDP_PORT, chksum=0)
           / header)
    if payload_len:
        pkt = pkt / Raw(bytes(payload_len))
    return pkt


def safs_data(src_ip: str | int, dst_ip: str | int, flow_id: int, remaining_bytes: int,
              latest_start_ns: int, epoch: int, payload_len: int, *, flags: int = 0, dep_id: int = 1,
              rate_kbps: int = 0, **kw: Any) -> Packet:
    """A DATA packet of dependency ``dep_id``: ``remaining_bytes`` includes this packet's
    ``payload_len`` bytes; ``latest_start_ns`` from :func:`safs.core.protocol.latest_start_ns`;
    ``epoch`` and ``rate_kbps`` of the grant the sender holds (0 = default grant). Extra
    keywords go to :func:`pkt_add_safs`."""
    hdr = SAFS(type=MsgType.DATA, flags=flags, flow_id=flow_id, remaining_bytes=remaining_bytes,
               timestamp_ns=latest_start_ns, epoch=epoch, rate_kbps=rate_kbps, dep_id=dep_id)
    return pkt_add_safs(src_ip, dst_ip, hdr, payload_len=payload_len, **kw)


def safs_request(src_ip: str | int, dst_ip: str | int, flow_id: int, remaining_bytes: int,
                 latest_start_ns: int, *, flags: int = 0, dep_id: int = 1, **kw: Any) -> Packet:
    """A REQUEST of dependency ``dep_id`` from the sender to the receiver (consumed by the
    receiver's ToR); ``latest_start_ns`` of the transfer that sends it."""
    hdr = SAFS(type=MsgType.REQUEST, flags=flags, flow_id=flow_id, dep_id=dep_id,
               remaining_bytes=remaining_bytes, timestamp_ns=latest_start_ns)
    return pkt_add_safs(src_ip, dst_ip, hdr, **kw)


def safs_grant(src_ip: str | int, dst_ip: str | int, flow_id: int, rate_kbps: int, epoch: int,
               lease_us: int, switch_time_ns: int, *, remaining_bytes: int = 0, flags: int = 0,
               qclass: int = 0, color: int = 0, dep_id: int = 1, **kw: Any) -> Packet:
    """A GRANT as the receiver's ToR sends it: ``src_ip`` = receiver, ``dst_ip`` = sender;
    ``remaining_bytes`` and ``flags`` echo the REQUEST/DATA that triggered it."""
    hdr = SAFS(type=MsgType.GRANT, flags=flags, qclass=qclass, color=color, flow_id=flow_id, dep_id=dep_id,
               remaining_bytes=remaining_bytes, timestamp_ns=switch_time_ns,
               rate_kbps=rate_kbps, epoch=epoch, lease_us=lease_us)
    return pkt_add_safs(src_ip, dst_ip, hdr, **kw)


def safs_done(src_ip: str | int, dst_ip: str | int, flow_id: int, no_bubble_ts_ns: int = 0, *,
              missing_bytes: int = 0, flags: int = 0, **kw: Any) -> Packet:
    """A DONE from the receiver to the sender: ``missing_bytes`` 0 = every byte arrived;
    more is a NACK (docs/protocol.md, grant rule 6)."""
    hdr = SAFS(type=MsgType.DONE, flags=flags, flow_id=flow_id, remaining_bytes=missing_bytes,
               timestamp_ns=no_bubble_ts_ns)
    return pkt_add_safs(src_ip, dst_ip, hdr, **kw)

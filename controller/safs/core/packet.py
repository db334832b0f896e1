"""The simulator's packet: a plain ``__slots__`` object (scapy is far too slow per packet).

One class carries IPv4/UDP/TCP fields, the SAFS header (``safs_type != 0``) and the fields the
switch fills in. Field meanings and ranges are those of docs/protocol.md and
:mod:`safs.core.protocol`; ``size`` is the packet's length on the wire in bytes (Ethernet frame
including headers), which is what links serialise.
"""

from __future__ import annotations

PROTO_TCP = 6
PROTO_UDP = 17
PROTO_HOMA = 146  # IPPROTO_HOMA of the Linux Homa module (PlatformLab/HomaModule, homa.h)

# Header bytes counted in ``Packet.size`` (the sim counts the Ethernet header, not preamble,
# FCS or inter-frame gap; the pipeline model's GRANT size uses the same convention).
ETH_HEADER_BYTES = 14
IPV4_HEADER_BYTES = 20
UDP_HEADER_BYTES = 8
TCP_HEADER_BYTES = 20  # no options (the sim echoes send times without a timestamp option)

# TCP flag bits (RFC 793, RFC 3168).
TCP_FIN, TCP_SYN, TCP_ACK, TCP_ECE, TCP_CWR = 0x01, 0x02, 0x10, 0x40, 0x80


class Packet:
    """A packet in flight.

    Attributes (all ints unless noted):
        src, dst: IPv4 addresses as ints.  proto: 6 (TCP) or 17 (UDP).  sport, dport: ports.
        size: wire bytes.  payload: application payload bytes it carries.  ecn: 0..3 (RFC 3168).
        priority: queue 0..7 chosen by the switch (standard_metadata.priority in v1model).
        safs_version, safs_type: SAFS header version/type; safs_type 0 = not a SAFS packet.
        safs_truncated: bool, the UDP payload to the SAFS port is shorter than the header.
        flags, qclass, color, flow_id, remaining, ts, rate_kbps, epoch, lease_us, qdepth, dep_id:
            SAFS header fields (docs/protocol.md).
        seq, ack, tcp_flags: TCP fields for the DCTCP transports (seq/ack in bytes).
        roce_qp: the RoCEv2 BTH destination QP (24 bits) of a UDP packet to port 4791, else 0.
        sent_ns: when the sender handed it to its NIC (for RTT samples).
        conn: opaque reference the transports use to find their connection (not on the wire).
    """

    __slots__ = (
        "src", "dst", "proto", "sport", "dport", "size", "payload", "ecn", "priority",
        "safs_version", "safs_type", "safs_truncated", "flags", "qclass", "color", "flow_id",
        "remaining", "ts", "rate_kbps", "epoch", "lease_us", "qdepth", "dep_id",
        "seq", "ack", "tcp_flags", "sent_ns", "conn", "roce_qp",
    )

    def __init__(self, src: int, dst: int, proto: int, sport: int, dport: int, size: int,
                 payload: int = 0, ecn: int = 0) -> None:
        self.src = src
        self.dst = dst
        self.proto = proto
        self.sport = sport
        self.dport = dport
        self.size = size
        self.payload = payload
        self.ecn = ecn
        self.priority = 0
        self.safs_version = 0
        self.safs_type = 0
        self.safs_truncated = False
        self.flags = 0
        self.qclass = 0
        self.color = 0
        self.flow_id = 0
        self.remaining = 0
        self.ts = 0
        self.rate_kbps = 0
        self.epoch = 0
        self.lease_us = 0
        self.qdepth = 0
        self.dep_id = 0
        self.seq = 0
        self.ack = 0
        self.tcp_flags = 0
        self.sent_ns = 0
        self.conn = None
        self.roce_qp = 0

    def __repr__(self) -> str:  # for test failure messages
        return (f"Packet(src={self.src:#x}, dst={self.dst:#x}, proto={self.proto}, size={self.size}, "
                f"safs_type={self.safs_type}, flow_id={self.flow_id}, prio={self.priority}, ecn={self.ecn})")

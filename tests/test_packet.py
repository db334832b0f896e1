"""safs.core.scapy_layer: the scapy SAFS layer, builders and the strict parser."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import checksum, rdpcap, wrpcap

from safs.core.errors import ProtocolError
from safs.core.protocol import FLAG_LAST, FLAG_RENEW, HEADER_LEN, SAFS_UDP_PORT, Color, Malformed, MsgType
from safs.core.scapy_layer import (
    SAFS,
    SafsHeader,
    parse_safs,
    safs_data,
    safs_done,
    safs_grant,
    safs_request,
)

SETTINGS = settings(max_examples=200, deadline=None)

headers = st.builds(
    SafsHeader,
    type=st.sampled_from(list(MsgType)),
    flow_id=st.integers(0, (1 << 32) - 1),
    remaining_bytes=st.integers(0, (1 << 48) - 1),
    timestamp_ns=st.integers(0, (1 << 48) - 1),
    rate_kbps=st.integers(0, (1 << 32) - 1),
    epoch=st.integers(0, (1 << 32) - 1),
    lease_us=st.integers(0, (1 << 32) - 1),
    flags=st.integers(0, 255),
    qclass=st.integers(0, 255),
    color=st.integers(0, 255),
    qdepth=st.integers(0, 65535),
    dep_id=st.integers(0, 65535),
)


def _scapy_fields(h: SafsHeader) -> dict:
    return {"version": h.version, "type": int(h.type), "flags": h.flags, "qclass": h.qclass,
            "color": h.color, "flow_id": h.flow_id, "remaining_bytes": h.remaining_bytes,
            "timestamp_ns": h.timestamp_ns, "rate_kbps": h.rate_kbps, "epoch": h.epoch,
            "lease_us": h.lease_us, "qdepth": h.qdepth, "dep_id": h.dep_id}


@SETTINGS
@given(headers)
def test_scapy_layer_and_struct_parser_agree(h):
    wire = bytes(SAFS(**_scapy_fields(h)))
    assert len(wire) == HEADER_LEN
    assert wire == h.to_bytes()
    assert parse_safs(wire) == h
    assert {k: getattr(SAFS(wire), k) for k in _scapy_fields(h)} == _scapy_fields(h)


def test_layout_offsets_are_network_order():
    h = SafsHeader(type=MsgType.GRANT, flow_id=0x01020304, remaining_bytes=0x0A0B0C0D0E0F,
                   timestamp_ns=0x111213141516, rate_kbps=0x21222324, epoch=0x31323334,
                   lease_us=0x41424344, flags=0x51, qclass=0x61, color=0x02, qdepth=0x7172,
                   dep_id=0x8182)
    b = bytes(SAFS(**_scapy_fields(h)))
    assert b[0] == 0x23  # version 2 in the high nibble, GRANT=3 in the low nibble
    assert b[1:4] == bytes([0x51, 0x61, 0x02])
    assert struct.unpack("!I", b[4:8])[0] == 0x01020304
    assert b[8:14] == bytes.fromhex("0a0b0c0d0e0f")
    assert b[14:20] == bytes.fromhex("111213141516")
    assert struct.unpack("!IIIHH", b[20:36]) == (0x21222324, 0x31323334, 0x41424344, 0x7172, 0x8182)


def test_scapy_fills_lengths_and_checksums():
    payload = b"x" * 100
    pkt = Ether(bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=SAFS_UDP_PORT,
                dport=SAFS_UDP_PORT) / SAFS(flow_id=9) / Raw(payload)))
    assert pkt[IP].len == 20 + 8 + HEADER_LEN + len(payload)
    assert pkt[UDP].len == 8 + HEADER_LEN + len(payload)
    ip_hdr = bytes(pkt[IP])[:20]
    assert checksum(ip_hdr) == 0  # a valid IPv4 header checksums to 0
    udp = bytes(pkt[UDP])
    pseudo = bytes(pkt[IP])[12:20] + struct.pack("!BBH", 0, 17, len(udp))
    assert pkt[UDP].chksum != 0 and checksum(pseudo + udp) == 0
    assert pkt[SAFS].flow_id == 9 and pkt[Raw].load == payload


def test_builders_set_zero_udp_checksum_and_valid_ip():
    pkt = Ether(bytes(safs_data("10.0.0.1", "10.0.1.2", 5, 3000, 1234, 2, 1000)))
    assert pkt[UDP].chksum == 0  # docs/protocol.md: switches rewrite fields in flight
    assert pkt[UDP].sport == pkt[UDP].dport == SAFS_UDP_PORT
    assert pkt[UDP].len == 8 + HEADER_LEN + 1000
    assert checksum(bytes(pkt[IP])[:20]) == 0


@pytest.mark.parametrize("build,want", [
    (lambda: safs_data("10.0.0.1", 0x0A000102, 5, 3000, 1234, 2, 1000),
     dict(type=MsgType.DATA, flow_id=5, remaining_bytes=3000, timestamp_ns=1234, epoch=2, dep_id=1, rate_kbps=0)),
    (lambda: safs_data("10.0.0.1", "10.0.1.2", 5, 3000, 1234, 2, 1000, dep_id=40, rate_kbps=12_500_000,
                       flags=FLAG_LAST | FLAG_RENEW),
     dict(type=MsgType.DATA, dep_id=40, rate_kbps=12_500_000, flags=FLAG_LAST | FLAG_RENEW, epoch=2)),
    (lambda: safs_request("10.0.0.1", "10.0.1.2", 6, 10**6, 99, flags=1, dep_id=9),
     dict(type=MsgType.REQUEST, flow_id=6, remaining_bytes=10**6, timestamp_ns=99, flags=1, dep_id=9)),
    (lambda: safs_grant("10.0.1.2", "10.0.0.1", 6, 25_000_000, 3, 500, 77, remaining_bytes=10**6, dep_id=9),
     dict(type=MsgType.GRANT, flow_id=6, rate_kbps=25_000_000, epoch=3, lease_us=500,
          timestamp_ns=77, remaining_bytes=10**6, dep_id=9)),
    (lambda: safs_done("10.0.0.1", "10.0.1.2", 7, 55),
     dict(type=MsgType.DONE, flow_id=7, remaining_bytes=0, timestamp_ns=55)),
])
def test_builders_round_trip(build, want):
    pkt = Ether(bytes(build()))
    assert isinstance(pkt[UDP].payload, SAFS)
    hdr = parse_safs(bytes(pkt[UDP].payload))
    for field, value in want.items():
        assert getattr(hdr, field) == value, field
    # switch-filled fields are sent as 0
    assert (hdr.qclass, hdr.color, hdr.qdepth) == (0, Color.GREEN, 0)


@pytest.mark.parametrize("length", [1, 20, HEADER_LEN - 1])
def test_truncated_payload_dissects_as_raw(length):
    raw = bytes(Ether() / IP() / UDP(dport=SAFS_UDP_PORT) / Raw(b"\x11" * length))
    pkt = Ether(raw)  # must not raise
    assert not pkt.haslayer(SAFS)
    assert pkt[Raw].load == b"\x11" * length
    with pytest.raises(ProtocolError, match=Malformed.TRUNCATED.name):
        parse_safs(pkt[Raw].load)


def test_other_ports_are_not_safs():
    pkt = Ether(bytes(Ether() / IP() / UDP(sport=SAFS_UDP_PORT, dport=53) / Raw(bytes(40))))
    assert not pkt.haslayer(SAFS)


@pytest.mark.parametrize("byte0,reason", [(0x11, Malformed.BAD_VERSION), (0x01, Malformed.BAD_VERSION),
                                          (0xF1, Malformed.BAD_VERSION), (0x20, Malformed.BAD_TYPE),
                                          (0x25, Malformed.BAD_TYPE)])
def test_parse_rejects_bad_version_and_type(byte0, reason):
    raw = bytes([byte0]) + bytes(HEADER_LEN - 1)
    with pytest.raises(ProtocolError, match=reason.name):
        parse_safs(raw)
    # scapy still shows the header, for debugging
    assert SAFS(raw).version == byte0 >> 4


def test_parse_ignores_trailing_payload():
    h = SafsHeader(type=MsgType.DATA, flow_id=3, remaining_bytes=10)
    assert parse_safs(h.to_bytes() + b"payload") == h


def test_pcap_round_trip(tmp_path):
    pkts = [safs_request("10.0.0.1", "10.0.1.2", 6, 10**6, 99),
            safs_grant("10.0.1.2", "10.0.0.1", 6, 10**7, 1, 500, 77),
            safs_data("10.0.0.1", "10.0.1.2", 6, 10**6, 12, 1, 1400),
            safs_done("10.0.0.1", "10.0.1.2", 6)]
    path = tmp_path / "safs.pcap"
    wrpcap(str(path), pkts)
    back = rdpcap(str(path))
    assert len(back) == len(pkts)
    for sent, got in zip(pkts, back):
        assert got.haslayer(SAFS)
        assert bytes(got) == bytes(sent)
        assert parse_safs(bytes(got[UDP].payload)) == parse_safs(bytes(sent[UDP].payload))
    assert [MsgType(p[SAFS].type) for p in back] == [MsgType.REQUEST, MsgType.GRANT,
                                                     MsgType.DATA, MsgType.DONE]


@pytest.mark.parametrize("field, value, bits", [
    ("remaining_bytes", 2**48 + 7, 48), ("timestamp_ns", -1, 48), ("version", 16, 4), ("type", 17, 4),
])
def test_scapy_layer_refuses_values_its_bit_fields_cannot_hold(field: str, value: int, bits: int) -> None:
    """A 48- or 4-bit field out of range is an error naming the field, not its low bits on the
    wire (2**48 + 7 remaining bytes would otherwise go out as 7)."""
    with pytest.raises(ValueError, match=rf"'{field}'.*expected 0\.\.{2**bits - 1} \({bits} bits\), got {value}"):
        bytes(SAFS(**{field: value}))
    top = 2**bits - 1
    assert getattr(SAFS(bytes(SAFS(**{field: top}))), field) == top  # the largest value round-trips

"""The Wireshark/tshark dissector (controller/safs/data/wireshark/safs.lua) decodes every
header field as docs/protocol.md lays it out and flags malformed headers as the P4 program
counts them. Needs tshark (Debian: apt-get install tshark); skips naming it otherwise."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from safs.core.files import data_path
from safs.core.protocol import FLAG_BACKGROUND, FLAG_CAPPED, FLAG_DEMOTED, FLAG_LAST, FLAG_SOLE, SAFS_UDP_PORT
from safs.core.scapy_layer import safs_data, safs_done, safs_grant, safs_request

DISSECTOR = data_path("wireshark", "safs.lua")
FIELDS = ("safs.version", "safs.type", "safs.flags.background", "safs.flags.last", "safs.flags.demoted",
          "safs.flags.sole", "safs.flags.capped", "safs.qclass", "safs.color",
          "safs.flow_id", "safs.remaining_bytes", "safs.timestamp_ns", "safs.rate_kbps", "safs.epoch",
          "safs.lease_us", "safs.dep_id", "_ws.expert.message")


def tshark_fields(pcap: Path) -> list[list[str]]:
    exe = shutil.which("tshark")
    if exe is None:
        pytest.skip("needs tshark on PATH (Debian: apt-get install tshark)")
    args = [exe, "-X", f"lua_script:{DISSECTOR}", "-r", str(pcap), "-T", "fields"]
    for name in FIELDS:
        args += ["-e", name]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    return [line.split("\t") for line in out.stdout.splitlines()]


def test_every_field_of_every_message_type_is_decoded(tmp_path: Path) -> None:
    packets = [
        safs_data("10.0.0.1", "10.0.1.2", 7, (1 << 48) - 2, (1 << 48) - 3, 9, 100, flags=FLAG_LAST | FLAG_BACKGROUND,
                  dep_id=65535, rate_kbps=(1 << 32) - 1),
        safs_request("10.0.0.1", "10.0.1.2", 8, 4000, 77, dep_id=2, flags=FLAG_SOLE),
        safs_data("10.0.0.1", "10.0.1.2", 9, 100, 5, 0, 100, flags=FLAG_DEMOTED | FLAG_CAPPED),
        safs_grant("10.0.1.2", "10.0.0.1", 8, 1000, 3, 20000, 555, dep_id=2, qclass=7, color=3),
        safs_done("10.0.1.2", "10.0.0.1", 7, 99, missing_bytes=1500),
    ]
    wrpcap(str(tmp_path / "safs.pcap"), packets)
    rows = tshark_fields(tmp_path / "safs.pcap")
    assert rows == [
        ["2", "1", "1", "1", "0", "0", "0", "0", "0", "7", str((1 << 48) - 2), str((1 << 48) - 3),
         str((1 << 32) - 1), "9", "0", "65535", ""],
        ["2", "2", "0", "0", "0", "1", "0", "0", "0", "8", "4000", "77", "0", "0", "0", "2", ""],
        ["2", "1", "0", "0", "1", "0", "1", "0", "0", "9", "100", "5", "0", "0", "0", "1", ""],
        ["2", "3", "0", "0", "0", "0", "0", "7", "3", "8", "0", "555", "1000", "3", "20000", "2", ""],
        ["2", "4", "0", "0", "0", "0", "0", "0", "0", "7", "1500", "99", "0", "0", "0", "0", ""],
    ]


def test_malformed_headers_are_flagged(tmp_path: Path) -> None:
    base = Ether() / IP(src="10.0.0.1", dst="10.0.1.2") / UDP(sport=40000, dport=SAFS_UDP_PORT)
    reply_from_port = Ether() / IP(src="10.0.1.2", dst="10.0.0.1") / UDP(sport=SAFS_UDP_PORT, dport=50000)
    wrpcap(str(tmp_path / "bad.pcap"), [base / Raw(bytes(10)), base / Raw(bytes([0x11]) + bytes(35)),
                                        base / Raw(bytes([0x27]) + bytes(35)), reply_from_port / Raw(bytes(40))])
    rows = tshark_fields(tmp_path / "bad.pcap")
    assert [row[-1] for row in rows] == ["SAFS header truncated (36 bytes expected)", "SAFS version is not 2",
                                         "SAFS message type is not 1..4", ""]
    assert rows[3][1] == ""  # from port 23285 is not SAFS (the P4 parser reads the destination port)

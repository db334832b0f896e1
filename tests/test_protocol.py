"""safs.core.protocol: the constants agree with docs/protocol.md; helpers for malformed input,
epochs (RFC 1982), wire units and the latest start time."""

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safs.core import p4names, protocol
from safs.core.errors import InvalidInput
from safs.core.protocol import (
    EPOCH_MAX,
    EPOCH_NONE,
    HEADER_LEN,
    Malformed,
    MsgType,
    epoch_newer,
    latest_start_ns,
    lease_ns_to_us,
    malformed_reason,
    next_epoch,
    rate_bps_to_kbps,
    rate_kbps_to_bps,
)
from safs.core.timebase import TIME_MOD, diff

DOC = Path(__file__).resolve().parents[1] / "docs" / "protocol.md"
SETTINGS = settings(max_examples=200, deadline=None)


def _doc_layout() -> list[tuple[int, int, str]]:
    """(offset, size, field) rows of the layout table in docs/protocol.md."""
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*(\d+(?:\.5)?)\s*\|\s*`([a-z_]+)`", DOC.read_text(), re.M)
    return [(int(o), s, f) for o, s, f in rows]


def test_doc_layout_is_contiguous_and_36_bytes():
    rows = _doc_layout()
    fields = [f for _, _, f in rows]
    assert fields[:2] == ["version", "type"]
    assert fields[2:] == ["flags", "qclass", "color", "flow_id", "remaining_bytes", "timestamp_ns",
                          "rate_kbps", "epoch", "lease_us", "qdepth", "dep_id"]
    end = 1  # version and type share byte 0
    for off, size, _ in rows[2:]:
        assert off == end
        end = off + int(size)
    assert end == HEADER_LEN


def test_doc_names_port_and_types():
    text = DOC.read_text()
    assert str(protocol.SAFS_UDP_PORT) in text and "0x5AF5" in text
    for t in MsgType:
        assert f"{t.name} | {t.value}" in text or f"{t.name}={t.value}" in text


def test_malformed_index_matches_counter_doc():
    # p4names documents the counter indices in a comment; protocol.Malformed is the code.
    assert "index 0 truncated, 1 bad version, 2 bad type" in Path(p4names.__file__).read_text()
    assert [m.value for m in Malformed] == [0, 1, 2]
    assert [m.name for m in Malformed] == ["TRUNCATED", "BAD_VERSION", "BAD_TYPE"]


def _hdr(version: int = protocol.SAFS_VERSION, type_: int = 1, length: int = HEADER_LEN) -> bytes:
    return (bytes([(version << 4) | type_]) + bytes(HEADER_LEN - 1))[:length] + bytes(
        max(0, length - HEADER_LEN))


@pytest.mark.parametrize("length", [0, 1, 35])
def test_truncated(length):
    assert malformed_reason(_hdr(length=length)) is Malformed.TRUNCATED


def test_version_is_2():
    assert protocol.SAFS_VERSION == 2
    assert malformed_reason(_hdr(version=2)) is None


@pytest.mark.parametrize("version", [0, 1, 15])  # 1: the per-transfer protocol before dependency grants
def test_bad_version(version):
    assert malformed_reason(_hdr(version=version)) is Malformed.BAD_VERSION


@pytest.mark.parametrize("type_", [0, 5, 15])
def test_bad_type(type_):
    assert malformed_reason(_hdr(type_=type_)) is Malformed.BAD_TYPE


@pytest.mark.parametrize("t", list(MsgType))
def test_well_formed_with_trailing_payload(t):
    assert malformed_reason(_hdr(type_=t.value, length=HEADER_LEN + 100)) is None


def test_doc_names_the_flag_bits():
    text = DOC.read_text()
    for bit, name in ((protocol.FLAG_BACKGROUND, "BACKGROUND"), (protocol.FLAG_LAST, "LAST"),
                      (protocol.FLAG_RENEW, "RENEW")):
        assert f"bit {bit.bit_length() - 1} {name}" in text
    assert len({protocol.FLAG_BACKGROUND, protocol.FLAG_LAST, protocol.FLAG_RENEW}) == 3


@pytest.mark.parametrize("flow_id,dep_id", [(1, 2), (65534, 65535), (65535, 1), (65536, 2),
                                            ((1 << 32) - 1, (((1 << 32) - 1) % 65535) + 1)])
def test_transfer_dep_id_is_flow_id_mod_65535_plus_1(flow_id, dep_id):
    got = protocol.transfer_dep_id(flow_id)
    assert got == dep_id
    assert protocol.DEP_ID_MIN <= got <= protocol.DEP_ID_MAX


def test_header_round_trip_carries_dep_id_flags_and_held_rate():
    raw = protocol.pack_header(MsgType.DATA, 7, remaining_bytes=(1 << 48) - 1, timestamp_ns=(1 << 47) + 3,
                               rate_kbps=25_000_000, epoch=9, flags=protocol.FLAG_LAST | protocol.FLAG_RENEW,
                               dep_id=65535)
    assert len(raw) == HEADER_LEN and raw[0] == 0x21  # version 2, type DATA
    assert raw[34:36] == b"\xff\xff"
    assert protocol.unpack_header(raw) == (1, protocol.FLAG_LAST | protocol.FLAG_RENEW, 0, 0, 7, (1 << 48) - 1,
                                           (1 << 47) + 3, 25_000_000, 9, 0, 0, 65535)


def test_truncation_checked_before_version():
    assert malformed_reason(bytes([0x75]) + bytes(10)) is Malformed.TRUNCATED


# Epochs ---------------------------------------------------------------------------------
epochs = st.integers(1, EPOCH_MAX)


@SETTINGS
@given(st.one_of(epochs, st.integers(EPOCH_MAX - 50, EPOCH_MAX)), st.integers(1, 100))
def test_epoch_newer_across_wrap(e, steps):
    later = e
    for _ in range(steps):
        later = next_epoch(later)
    assert later != EPOCH_NONE
    assert epoch_newer(later, e) and not epoch_newer(e, later)


@SETTINGS
@given(epochs, epochs)
def test_epoch_newer_antisymmetric(a, b):
    assert not (epoch_newer(a, b) and epoch_newer(b, a))
    if a == b:
        assert not epoch_newer(a, b)
    elif (a - b) % (1 << 32) != 1 << 31:
        assert epoch_newer(a, b) != epoch_newer(b, a)


@SETTINGS
@given(epochs)
def test_epoch_zero_is_older_than_everything(e):
    assert epoch_newer(e, EPOCH_NONE)
    assert not epoch_newer(EPOCH_NONE, e)


def test_next_epoch_skips_zero():
    assert next_epoch(EPOCH_MAX) == 1
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42


# Units ----------------------------------------------------------------------------------
@SETTINGS
@given(st.integers(0, protocol.RATE_KBPS_MAX * 1000 + 999))
def test_rate_round_trip_never_exceeds(rate_bps):
    wire = rate_bps_to_kbps(rate_bps)
    assert rate_kbps_to_bps(wire) <= rate_bps < rate_kbps_to_bps(wire) + 1000


def test_rate_and_lease_clamp():
    assert rate_bps_to_kbps(-5) == 0
    assert rate_bps_to_kbps(10**20) == protocol.RATE_KBPS_MAX
    assert lease_ns_to_us(1999) == 1
    assert lease_ns_to_us(10**20) == protocol.LEASE_US_MAX


# Latest start ---------------------------------------------------------------------------
@SETTINGS
@given(st.integers(0, 1 << 60), st.integers(0, 1 << 40), st.integers(1, 10**12))
def test_latest_start_leaves_just_enough_time(nb, remaining, rate):
    ls = latest_start_ns(nb, remaining, rate)
    budget = diff(nb % TIME_MOD, ls) if remaining * 8 * 10**9 // rate < 1 << 46 else None
    if budget is not None:
        # sending at line rate from the latest start finishes at or before the timestamp,
        # and starting 1 ns later would not.
        assert budget * rate >= remaining * 8 * 10**9
        assert (budget - 1) * rate < remaining * 8 * 10**9


def test_latest_start_example_and_wrap():
    # 1250 bytes at 10 Gbit/s take 1000 ns.
    assert latest_start_ns(10**6, 1250, 10**10) == 10**6 - 1000
    assert latest_start_ns(500, 1250, 10**10) == TIME_MOD - 500


@pytest.mark.parametrize("kw,field", [({"line_rate_bps": 0}, "line_rate_bps"),
                                      ({"remaining_bytes": -1}, "remaining_bytes")])
def test_latest_start_rejects(kw, field):
    args = {"no_bubble_ts_ns": 0, "remaining_bytes": 1, "line_rate_bps": 1} | kw
    with pytest.raises(InvalidInput) as e:
        latest_start_ns(**args)
    assert e.value.field == field

"""safs.control.hintapi.batch_wire: the batch calls' fast parsers agree with protobuf's own on
every input (encoder output, unknown fields, truncated and corrupted bytes) up to their two
deliberate differences (values beyond 32 bits kept, reading stops after limit + 1 items), take
the fast path on what an encoder writes, and malformed input becomes Malformed."""

from __future__ import annotations

import random
from typing import Any

import pytest
from google.protobuf.message import DecodeError

from safs.control.hintapi import hints_pb2 as pb
from safs.control.hintapi.batch_wire import Batch, Malformed, parse_announce_dependencies, parse_end_dependencies

ANNOUNCE_FIELDS = ("dep_id", "sender", "receiver", "label", "flow_class")
END_FIELDS = ("sender", "dep_id")


def rows(message: Any, fields: tuple[str, ...]) -> list[tuple[object, ...]]:
    return [tuple(getattr(d, f) for f in fields) for d in message.dependencies]


def truncated(row: tuple[object, ...], fields: tuple[str, ...]) -> tuple[object, ...]:
    """``row`` with protobuf's 32-bit truncation applied (uint32 dep_id, int32 flow_class)."""
    out = []
    for f, v in zip(fields, row, strict=True):
        if f == "dep_id":
            v = int(v) & 0xFFFFFFFF  # type: ignore[call-overload]
        elif f == "flow_class":
            v = (int(v) + 2**31) % 2**32 - 2**31  # type: ignore[call-overload]
        out.append(v)
    return tuple(out)


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice("ab01-é→") for _ in range(rng.randrange(0, 6)))


def random_announce(rng: random.Random) -> bytes:
    return pb.AnnounceDependenciesRequest(dependencies=[
        pb.Dependency(dep_id=rng.choice([0, 1, 65535, 2**32 - 1, rng.randrange(2**32)]), sender=random_text(rng),
                      receiver=random_text(rng), label=random_text(rng), flow_class=rng.choice([0, 1, 2, 7, -1]))
        for _ in range(rng.randrange(0, 5))]).SerializeToString()


def random_end(rng: random.Random) -> bytes:
    return pb.EndDependenciesRequest(dependencies=[
        pb.EndDependencyRequest(sender=random_text(rng), dep_id=rng.randrange(2**32))
        for _ in range(rng.randrange(0, 5))]).SerializeToString()


def mutate(rng: random.Random, data: bytes) -> bytes:
    """Truncate, flip, insert or delete bytes (each a quarter of the time)."""
    buf = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(4)
        if kind == 0 and buf:
            del buf[rng.randrange(len(buf)):]
        elif kind == 1 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif kind == 2:
            buf.insert(rng.randrange(len(buf) + 1), rng.randrange(256))
        elif buf:
            del buf[rng.randrange(len(buf))]
    return bytes(buf)


CASES = [(parse_announce_dependencies, pb.AnnounceDependenciesRequest, ANNOUNCE_FIELDS, random_announce),
         (parse_end_dependencies, pb.EndDependenciesRequest, END_FIELDS, random_end)]


@pytest.mark.parametrize(("parse", "message", "fields", "make"), CASES, ids=["announce", "end"])
def test_fast_parse_agrees_with_protobuf_on_encoded_and_corrupted_input(parse, message, fields, make) -> None:  # noqa: ANN001
    rng = random.Random(7)
    fast_paths = outcomes = 0
    for i in range(4000):
        data = make(rng) if i % 2 == 0 else mutate(rng, make(rng))
        try:
            expected = rows(message.FromString(data), fields)
        except (DecodeError, UnicodeDecodeError, ValueError):
            assert isinstance(parse(data), Malformed), data.hex()
            continue
        parsed = parse(data)
        got = rows(parsed, fields)
        assert [truncated(r, fields) for r in got] == expected, data.hex()
        fast_paths += isinstance(parsed, Batch)
        outcomes += 1
    assert fast_paths > 2000  # every encoder output and the corrupted inputs that stay valid
    assert outcomes >= fast_paths


def test_encoder_output_takes_the_fast_path_and_unknown_fields_are_skipped() -> None:
    dep = pb.Dependency(dep_id=7, sender="h1", receiver="h2", label="x", flow_class=pb.FLOW_CLASS_BACKGROUND)
    data = pb.AnnounceDependenciesRequest(dependencies=[dep, dep]).SerializeToString()
    parsed = parse_announce_dependencies(data)
    assert isinstance(parsed, Batch)
    assert rows(parsed, ANNOUNCE_FIELDS) == [(7, "h1", "h2", "x", pb.FLOW_CLASS_BACKGROUND)] * 2
    # a newer client's unknown field 9 (varint) inside a dependency is skipped, as protobuf does
    inner = dep.SerializeToString() + bytes([9 << 3, 5])
    data = bytes([1 << 3 | 2, len(inner)]) + inner
    assert isinstance(parse_announce_dependencies(data), Batch)
    assert rows(parse_announce_dependencies(data), ANNOUNCE_FIELDS) == rows(
        pb.AnnounceDependenciesRequest.FromString(data), ANNOUNCE_FIELDS)
    assert parse_end_dependencies(b"").dependencies == []


def test_values_beyond_32_bits_are_kept_for_validation_to_refuse() -> None:
    # dep_id 2^32 + 7: protobuf reads 7 (another dependency); flow_class 2^31: protobuf -2^31
    inner = bytes([1 << 3]) + _varint(2**32 + 7) + bytes([5 << 3]) + _varint(2**31)
    data = bytes([1 << 3 | 2, len(inner)]) + inner
    assert rows(parse_announce_dependencies(data), ("dep_id", "flow_class")) == [(2**32 + 7, 2**31)]
    assert rows(pb.AnnounceDependenciesRequest.FromString(data), ("dep_id", "flow_class")) == [(7, -(2**31))]


def test_reading_stops_after_limit_plus_one_items() -> None:
    data = bytes([1 << 3 | 2, 0]) * 100_000  # 100,000 empty items
    parsed = parse_end_dependencies(data, limit=4096)
    assert isinstance(parsed, Batch) and parsed.more and len(parsed.dependencies) == 4097
    # the same behind an item the fast path hands to protobuf (an unknown group field)
    group = bytes([1 << 3 | 2, 2, 9 << 3 | 3, 9 << 3 | 4])
    parsed = parse_end_dependencies(group + bytes([1 << 3 | 2, 0]) * 100_000, limit=4096)
    assert isinstance(parsed, Batch) and parsed.more
    assert len(parse_end_dependencies(group * 3, limit=4096).dependencies) == 3  # protobuf skips the group
    small = parse_end_dependencies(bytes([1 << 3 | 2, 0]) * 3, limit=4096)
    assert isinstance(small, Batch) and not small.more and len(small.dependencies) == 3


def test_malformed_input_names_the_message() -> None:
    for data in (b"\x0a\x05ab", b"\xff" * 11, b"\x0a\x02\x12\x01\xff", b"\x00\x00"):
        parsed = parse_announce_dependencies(data)
        assert isinstance(parsed, Malformed) and parsed.message == "safs.v1.AnnounceDependenciesRequest", data


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)

"""Fast request parsing for the two batch calls, ``AnnounceDependencies`` and ``EndDependencies``.

p4runtime-shell 0.0.6 pins protobuf below 3.21, whose Python 3.11 wheel has only the
pure-Python implementation: parsing a 1,000-dependency ``AnnounceDependenciesRequest`` builds
1,000 message objects (about 19 us each on the project's 2-core machine), which was the largest
single cost of a hint flood. These parsers read the same wire format into plain tuples with
the same attribute names (``request.dependencies[i].dep_id`` ...), about 4x faster.

Correctness never depends on them: they handle only the shapes a protobuf encoder writes for
these messages (known fields with their declared wire types, unknown fields of varint or
length-delimited type skipped) and hand anything else, malformed input included, to the
protobuf library's own parser, which then decides (and raises, making gRPC answer the call with
an error, as without this module). Field numbers come from the generated descriptors.
tests/test_batch_wire.py checks both parsers agree on random, truncated and corrupted messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import grpc

from safs.control.hintapi import hints_pb2 as pb


class Dependency(NamedTuple):
    """One ``safs.v1.Dependency`` (the proto's field names and proto3 defaults)."""

    dep_id: int = 0
    sender: str = ""
    receiver: str = ""
    label: str = ""
    flow_class: int = 0


class EndKey(NamedTuple):
    """One ``safs.v1.EndDependencyRequest``."""

    sender: str = ""
    dep_id: int = 0


class Batch(NamedTuple):
    """A parsed batch request: ``dependencies`` as in the proto message."""

    dependencies: list[Any]


class _Fallback(Exception):
    """The input is not in the shape the fast path reads: let protobuf parse it."""


_VARINT, _LEN = 0, 2
_U32 = 1 << 32


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        byte = buf[pos]
        if byte < 0x80:
            return byte, pos + 1
        value, shift = byte & 0x7F, 7
        while True:
            pos += 1
            byte = buf[pos]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos + 1
            shift += 7
            if shift > 63:
                raise _Fallback
    except IndexError:
        raise _Fallback from None


def _tags(message: Any, kinds: dict[str, str]) -> dict[int, tuple[int, str]]:
    """Wire tag -> (position in the tuple, kind) for ``message``'s fields named in ``kinds``
    (in tuple order; kind "u32", "enum" or "str")."""
    fields = message.DESCRIPTOR.fields_by_name
    names = list(kinds)
    return {fields[name].number << 3 | (_LEN if kinds[name] == "str" else _VARINT): (names.index(name),
                                                                                        kinds[name])
            for name in names}


def _parse_items(buf: bytes, items_tag: int, tags: dict[int, tuple[int, str]], make: Callable[..., Any]
                 ) -> Batch:
    items: list[Any] = []
    numbers = {tag >> 3 for tag in tags}
    defaults = list(make())
    pos, size = 0, len(buf)
    while pos < size:
        tag, pos = _varint(buf, pos)
        if tag != items_tag:
            raise _Fallback  # an unknown top-level field: rare, let protobuf skip it
        length, pos = _varint(buf, pos)
        end = pos + length
        if end > size:
            raise _Fallback
        values = defaults.copy()
        while pos < end:
            tag, pos = _varint(buf, pos)
            known = tags.get(tag)
            if known is None and (tag >> 3 in numbers or tag >> 3 == 0 or tag & 7 not in (_VARINT, _LEN)):
                raise _Fallback  # a known field with another wire type, field 0, a fixed-width or group field
            if tag & 7 == _VARINT:
                value, pos = _varint(buf, pos)
                if known is not None:
                    if value >= (_U32 if known[1] == "u32" else 1 << 31):
                        raise _Fallback  # 32-bit truncation, negative enums: protobuf's rules
                    values[known[0]] = value
                continue
            length, pos = _varint(buf, pos)
            if pos + length > end:
                raise _Fallback
            if known is not None:
                try:
                    values[known[0]] = buf[pos:pos + length].decode("utf-8")
                except UnicodeDecodeError:
                    raise _Fallback from None
            pos += length
        if pos != end:
            raise _Fallback
        items.append(make(*values))
    return Batch(items)


_DEP_TAGS = _tags(pb.Dependency, {"dep_id": "u32", "sender": "str", "receiver": "str", "label": "str",
                                  "flow_class": "enum"})
_END_TAGS = _tags(pb.EndDependencyRequest, {"sender": "str", "dep_id": "u32"})
_ANNOUNCE_ITEMS = pb.AnnounceDependenciesRequest.DESCRIPTOR.fields_by_name["dependencies"].number << 3 | _LEN
_END_ITEMS = pb.EndDependenciesRequest.DESCRIPTOR.fields_by_name["dependencies"].number << 3 | _LEN


def parse_announce_dependencies(data: bytes) -> Batch | pb.AnnounceDependenciesRequest:
    """``AnnounceDependenciesRequest.FromString(data)``, as a :class:`Batch` of :class:`Dependency`
    where the fast path reads it. Raises what protobuf raises for malformed input."""
    try:
        return _parse_items(data, _ANNOUNCE_ITEMS, _DEP_TAGS, Dependency)
    except _Fallback:
        return pb.AnnounceDependenciesRequest.FromString(data)


def parse_end_dependencies(data: bytes) -> Batch | pb.EndDependenciesRequest:
    """``EndDependenciesRequest.FromString(data)``, as a :class:`Batch` of :class:`EndKey` where
    the fast path reads it. Raises what protobuf raises for malformed input."""
    try:
        return _parse_items(data, _END_ITEMS, _END_TAGS, EndKey)
    except _Fallback:
        return pb.EndDependenciesRequest.FromString(data)


_PARSERS = {"/safs.v1.HintService/AnnounceDependencies": parse_announce_dependencies,
            "/safs.v1.HintService/EndDependencies": parse_end_dependencies}


class BatchParsing(grpc.ServerInterceptor):
    """Server interceptor: the batch calls' requests are parsed by this module's parsers."""

    def intercept_service(self, continuation, details):  # noqa: ANN001, ANN201 (grpc's interface)
        handler = continuation(details)
        parse = _PARSERS.get(details.method)
        if handler is None or parse is None:
            return handler
        return handler._replace(request_deserializer=parse)

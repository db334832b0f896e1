"""Request parsing for the two batch calls, ``AnnounceDependencies`` and ``EndDependencies``,
and an INVALID_ARGUMENT answer for any call whose request does not parse.

p4runtime-shell 0.0.6 pins protobuf below 3.21, whose Python 3.11 wheel has only the
pure-Python implementation: parsing a 1,000-dependency ``AnnounceDependenciesRequest`` builds
1,000 message objects (about 19 us each on the project's 2-core machine), which was the largest
single cost of a hint flood. These parsers read the same wire format into plain tuples with
the same attribute names (``request.dependencies[i].dep_id`` ...), about 4x faster.

Where they differ from protobuf's parser, on purpose:

- they stop after ``limit + 1`` items (``limit``: the servicer's per-call maximum), so an
  oversized call is refused without reading all of it (a 4 MB request of 2,000,000 empty
  items took protobuf 2-8 s, during which the controller's tick starved); before handing a
  request to protobuf they count its items the same way;
- a ``dep_id`` or ``flow_class`` beyond 32 bits keeps its value (protobuf truncates it to 32
  bits: dep_id 2^32 + 7 silently named dependency 7), so validation refuses it by name.

Unknown fields (varint, fixed and length-delimited) are skipped as protobuf does; an unknown
group field, or input that does not parse, goes to protobuf's own parser, which decides.
tests/test_batch_wire.py checks both parsers agree on random, truncated and corrupted messages
(up to those two differences). Field numbers come from the generated descriptors.

:class:`BatchParsing` (a server interceptor) installs these parsers and makes every method's
unparsable request an INVALID_ARGUMENT naming the message type (instead of gRPC's INTERNAL
"Exception deserializing request!" with two tracebacks in the log per request).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import grpc
from google.protobuf.message import DecodeError

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
    """A parsed batch request: ``dependencies`` as in the proto message; ``more``: the request
    holds more items than were read (the parser's ``limit`` + 1)."""

    dependencies: list[Any]
    more: bool = False


class Malformed(NamedTuple):
    """A request that does not parse as ``message`` (``reason``: protobuf's error)."""

    message: str
    reason: str


class _Fallback(Exception):
    """The input is not in the shape the fast path reads: let protobuf parse it."""


_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_FIXED_SIZE = {_FIXED64: 8, _FIXED32: 4}
_INT64_SIGN = 1 << 63


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
                if value >> 64:
                    raise _Fallback
                return value, pos + 1
            shift += 7
            if shift > 63:
                raise _Fallback
    except IndexError:
        raise _Fallback from None


def _skip(buf: bytes, pos: int, wire: int, end: int) -> int:
    """Position after an unknown field's value of wire type ``wire`` (groups: fall back)."""
    if wire == _VARINT:
        return _varint(buf, pos)[1]
    if wire == _LEN:
        length, pos = _varint(buf, pos)
        pos += length
    elif wire in _FIXED_SIZE:
        pos += _FIXED_SIZE[wire]
    else:
        raise _Fallback
    if pos > end:
        raise _Fallback
    return pos


def _tags(message: Any, kinds: dict[str, str]) -> dict[int, tuple[int, str]]:
    """Wire tag -> (position in the tuple, kind) for ``message``'s fields named in ``kinds``
    (in tuple order; kind "u32", "enum" or "str")."""
    fields = message.DESCRIPTOR.fields_by_name
    names = list(kinds)
    return {fields[name].number << 3 | (_LEN if kinds[name] == "str" else _VARINT): (names.index(name),
                                                                                        kinds[name])
            for name in names}


def _parse_items(buf: bytes, items_tag: int, tags: dict[int, tuple[int, str]], make: Callable[..., Any],
                 limit: int) -> Batch:
    items: list[Any] = []
    numbers = {tag >> 3 for tag in tags}
    defaults = list(make())
    pos, size = 0, len(buf)
    while pos < size:
        tag, pos = _varint(buf, pos)
        if tag != items_tag:
            if tag >> 3 == 0 or tag >> 3 == items_tag >> 3:
                raise _Fallback  # field 0, or the items' field with another wire type
            pos = _skip(buf, pos, tag & 7, size)
            continue
        if len(items) > limit:
            return Batch(items, more=True)
        length, pos = _varint(buf, pos)
        end = pos + length
        if end > size:
            raise _Fallback
        values = defaults.copy()
        while pos < end:
            tag, pos = _varint(buf, pos)
            known = tags.get(tag)
            if known is None:
                if tag >> 3 in numbers or tag >> 3 == 0:
                    raise _Fallback  # a known field with another wire type, or field 0
                pos = _skip(buf, pos, tag & 7, end)
            elif known[1] == "str":
                length, pos = _varint(buf, pos)
                if pos + length > end:
                    raise _Fallback
                try:
                    values[known[0]] = buf[pos:pos + length].decode("utf-8")
                except UnicodeDecodeError:
                    raise _Fallback from None
                pos += length
            else:
                value, pos = _varint(buf, pos)
                if known[1] == "enum" and value & _INT64_SIGN:
                    value -= 1 << 64  # a negative enum value: ten bytes, two's complement
                values[known[0]] = value
        if pos != end:
            raise _Fallback
        items.append(make(*values))
    return Batch(items)


_DEP_TAGS = _tags(pb.Dependency, {"dep_id": "u32", "sender": "str", "receiver": "str", "label": "str",
                                  "flow_class": "enum"})
_END_TAGS = _tags(pb.EndDependencyRequest, {"sender": "str", "dep_id": "u32"})
_ANNOUNCE_ITEMS = pb.AnnounceDependenciesRequest.DESCRIPTOR.fields_by_name["dependencies"].number << 3 | _LEN
_END_ITEMS = pb.EndDependenciesRequest.DESCRIPTOR.fields_by_name["dependencies"].number << 3 | _LEN


def parse_announce_dependencies(data: bytes, limit: int = 4096
                                ) -> Batch | pb.AnnounceDependenciesRequest | Malformed:
    """``data`` as an ``AnnounceDependenciesRequest``: a :class:`Batch` of :class:`Dependency`
    (at most ``limit`` + 1 read), protobuf's message where the fast path falls back, or
    :class:`Malformed`."""
    return _parse(data, pb.AnnounceDependenciesRequest, _ANNOUNCE_ITEMS, _DEP_TAGS, Dependency, limit)


def parse_end_dependencies(data: bytes, limit: int = 4096) -> Batch | pb.EndDependenciesRequest | Malformed:
    """``data`` as an ``EndDependenciesRequest``: a :class:`Batch` of :class:`EndKey` (at most
    ``limit`` + 1 read), protobuf's message where the fast path falls back, or :class:`Malformed`."""
    return _parse(data, pb.EndDependenciesRequest, _END_ITEMS, _END_TAGS, EndKey, limit)


def _parse(data: bytes, message: Any, items_tag: int, tags: dict[int, tuple[int, str]], make: Callable[..., Any],
           limit: int) -> Any:
    try:
        return _parse_items(data, items_tag, tags, make, limit)
    except _Fallback:
        pass
    if _more_items_than(data, items_tag, limit):  # refused unread, as on the fast path
        return Batch([None] * (limit + 1), more=True)
    return _protobuf(message)(data)


def _more_items_than(buf: bytes, items_tag: int, limit: int) -> bool:
    """True when ``buf``'s top level holds more than ``limit`` items (fields ``items_tag``),
    reading at most ``limit`` + 1 of them; False also when it does not parse that far."""
    pos, size, count = 0, len(buf), 0
    try:
        while pos < size:
            tag, pos = _varint(buf, pos)
            count += tag == items_tag
            if count > limit:
                return True
            pos = _skip(buf, pos, tag & 7, size)
    except _Fallback:
        pass
    return False


def _protobuf(message: Any) -> Callable[[bytes], Any]:
    """``message.FromString``, answering :class:`Malformed` instead of raising."""
    name = message.DESCRIPTOR.full_name

    def parse(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except (DecodeError, UnicodeDecodeError, ValueError) as err:
            return Malformed(name, str(err) or type(err).__name__)

    return parse


_PARSERS = {"/safs.v1.HintService/AnnounceDependencies": parse_announce_dependencies,
            "/safs.v1.HintService/EndDependencies": parse_end_dependencies}
# every method's request message, for the INVALID_ARGUMENT answer to an unparsable request
_REQUESTS = {f"/{service.full_name}/{method.name}": getattr(pb, method.input_type.name)
             for service in pb.DESCRIPTOR.services_by_name.values() for method in service.methods}


class BatchParsing(grpc.ServerInterceptor):  # type: ignore[misc]
    """Server interceptor: the batch calls' requests are read by this module's parsers (at most
    ``limit`` + 1 items), every method's unparsable request answers INVALID_ARGUMENT."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def intercept_service(self, continuation, details):  # noqa: ANN001, ANN201 (grpc's interface)
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        parse = _PARSERS.get(details.method)
        if parse is not None:
            deserialize = functools.partial(parse, limit=self.limit)
        elif details.method in _REQUESTS:
            deserialize = _protobuf(_REQUESTS[details.method])
        else:
            return handler
        inner = handler.unary_unary

        def behaviour(request, context):  # noqa: ANN001, ANN202
            if isinstance(request, Malformed):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"request: not a valid {request.message}: {request.reason}")
            return inner(request, context)

        return handler._replace(request_deserializer=deserialize, unary_unary=behaviour)

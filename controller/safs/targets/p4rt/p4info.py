"""P4Info index: names to ids and widths, and the byte-string codec of P4Runtime.

One :class:`P4InfoIndex` per pipeline, built from the P4Info text file the compiler wrote
(``p4c-bm2-ss --p4runtime-files safs.p4info.txtpb``). The P4Runtime target uses it to turn
the typed entries of :mod:`safs.core.target` into protobufs, and the in-process fake server uses
it to validate what it receives, so neither hard-codes an id.

Byte strings (P4Runtime spec 1.3+, "Bytestrings"): a ``bit<W>`` value travels as unsigned
big-endian bytes. The *canonical* form is the shortest one (leading zero bytes dropped, zero is
``b"\\x00"``); the *padded* form is exactly ``ceil(W / 8)`` bytes. Servers accept both and
answer reads in canonical form.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from safs.core.errors import InvalidInput


def canonical_bytes(value: int) -> bytes:
    """``value`` (int >= 0) as the shortest big-endian byte string; 0 is ``b"\\x00"``.

    Raises:
        InvalidInput: negative value (field ``value``).
    """
    if value < 0:
        raise InvalidInput("value", f"must be >= 0 to encode as a P4Runtime bytestring, got {value}")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def padded_bytes(value: int, bitwidth: int) -> bytes:
    """``value`` as exactly ``ceil(bitwidth / 8)`` big-endian bytes; a value too wide for that
    many bytes is returned in canonical form instead (so a server, not this codec, rejects it).

    Raises:
        InvalidInput: negative value (field ``value``).
    """
    nbytes = (bitwidth + 7) // 8
    raw = canonical_bytes(value)
    return raw.rjust(nbytes, b"\x00") if len(raw) <= nbytes else raw


def bytes_to_int(raw: bytes) -> int:
    """Unsigned big-endian decode (canonical or padded); ``b""`` decodes as 0."""
    return int.from_bytes(raw, "big")


def fits(raw: bytes, bitwidth: int) -> bool:
    """True when the byte string's value fits in ``bitwidth`` bits (PI's check: padding with
    leading zero bytes is allowed at any length, set bits beyond the width are not)."""
    return bytes_to_int(raw).bit_length() <= bitwidth


@dataclass(frozen=True)
class MatchFieldInfo:
    """A table's match field: P4Info id, bit width and kind ("exact", "lpm", "range", ...)."""

    id: int
    name: str
    bitwidth: int
    kind: str


@dataclass(frozen=True)
class ParamInfo:
    """An action parameter: P4Info id and bit width."""

    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class ActionInfo:
    """An action: id, name and parameters in declaration order."""

    id: int
    name: str
    params: tuple[ParamInfo, ...]

    def param(self, name: str) -> ParamInfo | None:
        """The parameter called ``name``, or None."""
        for p in self.params:
            if p.name == name:
                return p
        return None


@dataclass(frozen=True)
class TableInfo:
    """A table: id, name, match fields in P4Info order, actions it may use.

    ``entry_actions`` are the action ids allowed on entries (scope not DEFAULT_ONLY),
    ``default_actions`` those allowed as the default (scope not TABLE_ONLY);
    ``const_default_action_id`` is non-zero when the default cannot be written;
    ``implementation_id`` the action profile of an indirect table (0: direct).
    """

    id: int
    name: str
    match_fields: tuple[MatchFieldInfo, ...]
    entry_actions: frozenset[int]
    default_actions: frozenset[int]
    const_default_action_id: int
    size: int
    implementation_id: int = 0

    def field(self, name: str) -> MatchFieldInfo | None:
        """The match field called ``name``, or None."""
        for f in self.match_fields:
            if f.name == name:
                return f
        return None

    def field_by_id(self, field_id: int) -> MatchFieldInfo | None:
        """The match field with P4Info id ``field_id``, or None."""
        for f in self.match_fields:
            if f.id == field_id:
                return f
        return None

    @property
    def needs_priority(self) -> bool:
        """True for tables with a ternary, range or optional field (P4Runtime priority rule)."""
        return any(f.kind in ("ternary", "range", "optional") for f in self.match_fields)


@dataclass(frozen=True)
class ExternArrayInfo:
    """An indirect counter, meter or register: id, name and number of cells."""

    id: int
    name: str
    size: int


@dataclass(frozen=True)
class ActionProfileInfo:
    """An action profile or selector: id, name, the tables it implements, whether it has a
    selector (groups), its member capacity and largest group (0: no limit stated)."""

    id: int
    name: str
    table_ids: frozenset[int]
    with_selector: bool
    size: int
    max_group_size: int


@dataclass(frozen=True)
class DigestInfo:
    """A digest: id, name and its struct's members ``(name, bitwidth)`` in P4Info order."""

    id: int
    name: str
    members: tuple[tuple[str, int], ...]


_MATCH_KINDS = {
    p4info_pb2.MatchField.EXACT: "exact",
    p4info_pb2.MatchField.LPM: "lpm",
    p4info_pb2.MatchField.TERNARY: "ternary",
    p4info_pb2.MatchField.RANGE: "range",
    p4info_pb2.MatchField.OPTIONAL: "optional",
}


class P4InfoIndex:
    """Lookup of a P4Info by name and by id.

    Args:
        p4info: the parsed P4Info message.

    Raises:
        InvalidInput: a digest whose type is not a struct of bit<W> members (field ``p4info``).
    """

    def __init__(self, p4info: p4info_pb2.P4Info) -> None:
        self.p4info = p4info
        self.actions: dict[str, ActionInfo] = {}
        self.actions_by_id: dict[int, ActionInfo] = {}
        for a in p4info.actions:
            info = ActionInfo(a.preamble.id, a.preamble.name,
                              tuple(ParamInfo(p.id, p.name, p.bitwidth) for p in a.params))
            self.actions[info.name] = info
            self.actions_by_id[info.id] = info
        self.tables: dict[str, TableInfo] = {}
        self.tables_by_id: dict[int, TableInfo] = {}
        for t in p4info.tables:
            fields = tuple(MatchFieldInfo(f.id, f.name, f.bitwidth, _MATCH_KINDS.get(f.match_type, "other"))
                           for f in t.match_fields)
            entry = frozenset(r.id for r in t.action_refs if r.scope != p4info_pb2.ActionRef.DEFAULT_ONLY)
            default = frozenset(r.id for r in t.action_refs if r.scope != p4info_pb2.ActionRef.TABLE_ONLY)
            table = TableInfo(t.preamble.id, t.preamble.name, fields, entry, default,
                              t.const_default_action_id, t.size, t.implementation_id)
            self.tables[table.name] = table
            self.tables_by_id[table.id] = table
        self.action_profiles: dict[str, ActionProfileInfo] = {}
        self.action_profiles_by_id: dict[int, ActionProfileInfo] = {}
        for ap in p4info.action_profiles:
            prof = ActionProfileInfo(ap.preamble.id, ap.preamble.name, frozenset(ap.table_ids), ap.with_selector,
                                     ap.size, ap.max_group_size)
            self.action_profiles[prof.name] = prof
            self.action_profiles_by_id[prof.id] = prof
        self.counters = self._arrays(p4info.counters)
        self.meters = self._arrays(p4info.meters)
        self.registers = self._arrays(p4info.registers)
        self.counters_by_id = {c.id: c for c in self.counters.values()}
        self.meters_by_id = {m.id: m for m in self.meters.values()}
        # controller_packet_metadata: header name ("packet_out", "packet_in") -> its fields in order
        self.packet_metadata: dict[str, tuple[ParamInfo, ...]] = {
            h.preamble.name: tuple(ParamInfo(m.id, m.name, m.bitwidth) for m in h.metadata)
            for h in p4info.controller_packet_metadata}
        self.digests: dict[str, DigestInfo] = {}
        self.digests_by_id: dict[int, DigestInfo] = {}
        for d in p4info.digests:
            members = self._struct_members(p4info, d)
            digest = DigestInfo(d.preamble.id, d.preamble.name, members)
            self.digests[digest.name] = digest
            self.digests_by_id[digest.id] = digest

    @staticmethod
    def _arrays(items: Iterable[p4info_pb2.Counter | p4info_pb2.Meter | p4info_pb2.Register]
                ) -> dict[str, ExternArrayInfo]:
        return {i.preamble.name: ExternArrayInfo(i.preamble.id, i.preamble.name, i.size) for i in items}

    @staticmethod
    def _struct_members(p4info: p4info_pb2.P4Info, digest: p4info_pb2.Digest) -> tuple[tuple[str, int], ...]:
        spec = digest.type_spec
        if spec.HasField("bitstring"):  # a digest of one field
            return ((digest.preamble.name, spec.bitstring.bit.bitwidth),)
        if not spec.HasField("struct"):
            raise InvalidInput("p4info", f"digest {digest.preamble.name} must be a struct or bit<W>")
        struct = p4info.type_info.structs[spec.struct.name]
        members = []
        for m in struct.members:
            if not m.type_spec.HasField("bitstring"):
                raise InvalidInput("p4info", f"digest member {m.name} must be bit<W>")
            members.append((m.name, m.type_spec.bitstring.bit.bitwidth))
        return tuple(members)

    @classmethod
    def from_file(cls, path: Path | str) -> P4InfoIndex:
        """Parse a P4Info text file (``.txtpb`` / ``.txt``).

        Raises:
            InvalidInput: the file is missing or not a P4Info in text format (field ``p4info_path``).
        """
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as err:
            raise InvalidInput("p4info_path", f"cannot read P4Info file {path}: {err.strerror}") from None
        msg = p4info_pb2.P4Info()
        try:
            text_format.Merge(text, msg, allow_unknown_field=True)
        except text_format.ParseError as err:
            raise InvalidInput("p4info_path", f"{path} is not a P4Info text file: {err}") from None
        return cls(msg)

    # Lookups that raise with the allowed names (for the target's local checks).

    def table(self, name: str) -> TableInfo:
        """The table called ``name``.

        Raises:
            InvalidInput: no such table (field ``table``).
        """
        try:
            return self.tables[name]
        except KeyError:
            raise InvalidInput("table", f"must be one of {sorted(self.tables)}, got {name!r}") from None

    def action(self, name: str) -> ActionInfo:
        """The action called ``name``.

        Raises:
            InvalidInput: no such action (field ``action``).
        """
        try:
            return self.actions[name]
        except KeyError:
            raise InvalidInput("action", f"must be one of {sorted(self.actions)}, got {name!r}") from None

    def counter(self, name: str) -> ExternArrayInfo:
        """The indirect counter called ``name``.

        Raises:
            InvalidInput: no such counter (field ``counter``).
        """
        try:
            return self.counters[name]
        except KeyError:
            raise InvalidInput("counter", f"must be one of {sorted(self.counters)}, got {name!r}") from None

    def meter(self, name: str) -> ExternArrayInfo:
        """The indirect meter called ``name``.

        Raises:
            InvalidInput: no such meter (field ``meter``).
        """
        try:
            return self.meters[name]
        except KeyError:
            raise InvalidInput("meter", f"must be one of {sorted(self.meters)}, got {name!r}") from None

    def digest(self, name: str) -> DigestInfo:
        """The digest called ``name``.

        Raises:
            InvalidInput: no such digest (field ``digest``).
        """
        try:
            return self.digests[name]
        except KeyError:
            raise InvalidInput("digest", f"must be one of {sorted(self.digests)}, got {name!r}") from None

    def packet_field(self, header: str, name: str) -> ParamInfo:
        """Field ``name`` of the controller packet header ``header`` (``packet_out`` or
        ``packet_in``): its metadata id and bit width.

        Raises:
            InvalidInput: the program has no such header or field (field ``p4info``).
        """
        for f in self.packet_metadata.get(header, ()):
            if f.name == name:
                return f
        raise InvalidInput("p4info", f"no {header} header with a field {name!r} (the program has no packet I/O?)")

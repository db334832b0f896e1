"""The PTF tests' P4Runtime client: their own encoder over the controller's session code.

Shared with the controller (docs/p4runtime.md, "The PTF tests' client"): the session --
connection, arbitration, the StreamChannel with its digest lists and acks, and the Write/Read
RPCs with their deadlines and typed errors -- is :class:`safs.targets.p4rt.client.SwitchClient`,
the one place in ``safs`` holding P4Runtime connection code.

Deliberately independent of the controller (a codec bug must not pass both): everything that
turns names and values into protobufs and back -- the P4Info lookup (:class:`P4InfoIndex`
here, not ``safs.targets.p4rt.p4info``), the byte-string encoding (:func:`encode`,
:func:`decode`), the table entry and update builders, the decoding of read answers and the
pipeline push request (with the cookie the base test checks). Nothing here imports
``safs.targets.p4rt.codec`` or ``safs.targets.p4rt.p4info``; tests/test_p4rt_client.py checks it.

Byte strings are sent in canonical form (shortest big-endian, at least one byte), as PI wants.
"""

from __future__ import annotations

import time

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from safs.core.errors import TargetConnectionError
from safs.core.target import Lpm, Range, Ternary  # the project's match values (one place for them)
from safs.targets.p4rt.client import (  # the shared session (connection, arbitration, RPCs)
    SwitchClient,
    bmv2_device_config,
)


def encode(value: int, bits: int) -> bytes:
    """Canonical P4Runtime bytes of ``value`` (shortest big-endian, >= 1 byte).

    Raises:
        ValueError: ``value`` is negative or wider than ``bits``.
    """
    if value < 0 or value >= (1 << bits):
        raise ValueError(f"value {value} does not fit in {bits} bits")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode(raw: bytes) -> int:
    """Unsigned big-endian integer of a P4Runtime byte string."""
    return int.from_bytes(raw, "big")


class P4InfoIndex:
    """Name -> id and width lookup over a P4Info message (names as in safs.core.p4names)."""

    def __init__(self, p4info: p4info_pb2.P4Info) -> None:
        self.p4info = p4info
        self.tables = {t.preamble.name: t for t in p4info.tables}
        self.actions = {a.preamble.name: a for a in p4info.actions}
        self.counters = {c.preamble.name: c for c in p4info.counters}
        self.meters = {m.preamble.name: m for m in p4info.meters}
        self.digests = {d.preamble.name: d for d in p4info.digests}
        # controller headers ("packet_out", "packet_in") -> their metadata fields by name
        self.packet = {h.preamble.name: {m.name: m for m in h.metadata} for h in p4info.controller_packet_metadata}

    def table_id(self, name: str) -> int:
        """Id of table ``name``. Raises KeyError naming it when unknown."""
        return self.tables[name].preamble.id

    def action_id(self, name: str) -> int:
        return self.actions[name].preamble.id

    def counter_id(self, name: str) -> int:
        return self.counters[name].preamble.id

    def meter_id(self, name: str) -> int:
        return self.meters[name].preamble.id

    def digest_id(self, name: str) -> int:
        return self.digests[name].preamble.id

    def match_field(self, table: str, field: str):
        for mf in self.tables[table].match_fields:
            if mf.name == field:
                return mf
        raise KeyError(f"{table} has no match field {field!r}")

    def param(self, action: str, name: str):
        for p in self.actions[action].params:
            if p.name == name:
                return p
        raise KeyError(f"{action} has no parameter {name!r}")


def load_p4info(path: str) -> p4info_pb2.P4Info:
    """Parse a P4Info text file."""
    info = p4info_pb2.P4Info()
    with open(path) as f:
        text_format.Merge(f.read(), info)
    return info


class P4RtClient:
    """One switch over P4Runtime, as primary.

    Args:
        addr: ``host:port`` of the gRPC server.  device_id: P4Runtime device id.
        election_id: (high, low); the tests use (0, 1) and are the only client.
        timeout_s: deadline of each RPC and the longest wait for the arbitration answer.

    Raises:
        TargetConnectionError: not reachable, arbitration not answered within ``timeout_s``,
            or not primary (PERMISSION_DENIED).
    """

    def __init__(self, addr: str, device_id: int = 0, election_id: tuple[int, int] = (0, 1),
                 timeout_s: float = 10.0) -> None:
        self.device_id = device_id
        self.election_id = election_id
        self.timeout_s = timeout_s
        self.session = SwitchClient(addr, device_id, election_id, timeout_s, name="ptf")
        if not self.session.is_primary:
            self.session.close()
            raise TargetConnectionError(addr, "arbitration", "PERMISSION_DENIED",
                                        f"election id {election_id} is not primary", switch="ptf")
        self._digests: list[p4runtime_pb2.DigestList] = []
        self._packets: list[p4runtime_pb2.PacketIn] = []
        self.index: P4InfoIndex | None = None

    @property
    def stub(self):
        """The session's ``p4.v1.P4Runtime`` stub (requests built here; pass ``timeout=``)."""
        return self.session.stub

    def close(self) -> None:
        """End the stream and the channel."""
        self.session.close()

    # ----------------------------------------------------------------- pipeline

    def push_pipeline(self, p4info_path: str, bmv2_json_path: str, cookie: int = 0) -> P4InfoIndex:
        """SetForwardingPipelineConfig(VERIFY_AND_COMMIT) with P4Info + BMv2 JSON and ``cookie``."""
        info = load_p4info(p4info_path)
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest()
        req.device_id = self.device_id
        req.election_id.high, req.election_id.low = self.election_id
        req.action = p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        req.config.p4info.CopyFrom(info)
        req.config.p4_device_config = bmv2_device_config(bmv2_json_path)
        req.config.cookie.cookie = cookie
        self.session.stub.SetForwardingPipelineConfig(req, timeout=self.timeout_s * 3)
        self.index = P4InfoIndex(info)
        return self.index

    # ----------------------------------------------------------------- builders

    def table_entry(self, table: str, match: dict, action: str | None = None,
                    params: dict | None = None, priority: int = 0,
                    is_default: bool = False) -> p4runtime_pb2.TableEntry:
        """A TableEntry. ``match`` values: int (exact), :class:`Lpm`, :class:`Range`,
        :class:`Ternary`; a ternary mask of 0 or the full range is a don't-care and is omitted
        (P4Runtime's rule, which PI enforces)."""
        ix = self.index
        te = p4runtime_pb2.TableEntry(table_id=ix.table_id(table), priority=priority,
                                      is_default_action=is_default)
        for name, value in match.items():
            mf = ix.match_field(table, name)
            if (isinstance(value, Ternary) and value.mask == 0) or (
                    isinstance(value, Range) and (value.low, value.high) == (0, (1 << mf.bitwidth) - 1)):
                continue
            fm = te.match.add(field_id=mf.id)
            if isinstance(value, Ternary):
                fm.ternary.value = encode(value.value, mf.bitwidth)
                fm.ternary.mask = encode(value.mask, mf.bitwidth)
            elif isinstance(value, Lpm):
                fm.lpm.value = encode(value.value, mf.bitwidth)
                fm.lpm.prefix_len = value.prefix_len
            elif isinstance(value, Range):
                fm.range.low = encode(value.low, mf.bitwidth)
                fm.range.high = encode(value.high, mf.bitwidth)
            else:
                fm.exact.value = encode(value, mf.bitwidth)
        if action is not None:
            te.action.action.action_id = ix.action_id(action)
            for pname, value in (params or {}).items():
                p = ix.param(action, pname)
                te.action.action.params.add(param_id=p.id, value=encode(value, p.bitwidth))
        return te

    # ----------------------------------------------------------------- RPCs

    def write(self, updates: list[p4runtime_pb2.Update]) -> None:
        """One WriteRequest of ``updates`` (built here) over the shared session.

        Raises:
            TargetError: one UpdateFailure (index, code, message) per failed update.
        """
        self.session.write(updates)

    def read(self, entity: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
        """All entities a Read of ``entity`` returns (decoded by the caller, here).

        Raises:
            TargetConnectionError: the read failed.
        """
        return self.session.read([entity])

    def read_counter(self, name: str, index: int) -> tuple[int, int]:
        """(bytes, packets) of indirect counter ``name[index]``."""
        ent = p4runtime_pb2.Entity()
        ent.counter_entry.counter_id = self.index.counter_id(name)
        ent.counter_entry.index.index = index
        got = self.read(ent)
        data = got[0].counter_entry.data
        return data.byte_count, data.packet_count

    def read_default(self, table: str) -> p4runtime_pb2.TableEntry:
        """The current default entry of ``table``."""
        ent = p4runtime_pb2.Entity()
        ent.table_entry.table_id = self.index.table_id(table)
        ent.table_entry.is_default_action = True
        got = self.read(ent)
        return got[0].table_entry

    def next_digest(self, timeout_s: float) -> p4runtime_pb2.DigestList:
        """The oldest DigestList received and not yet returned, waiting up to ``timeout_s``.

        Raises:
            TimeoutError: none arrived in time.
            TargetConnectionError: the stream closed.
        """
        deadline = time.monotonic() + timeout_s
        while not self._digests:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no DigestList within {timeout_s} s")
            self._digests += self.session.digest_lists(timeout_s=left)
        return self._digests.pop(0)

    def ack_digest(self, digest_list: p4runtime_pb2.DigestList) -> None:
        """Ack one DigestList on the stream."""
        self.session.ack_digest_list(digest_list)

    # ----------------------------------------------------------------- packet I/O

    def packet_out(self, payload: bytes, **fields: int) -> None:
        """Send a PacketOut of ``payload`` with every ``packet_out`` metadata field (``fields``
        by name; a field not given is 0)."""
        out = self.index.packet["packet_out"]
        unknown = set(fields) - set(out)
        if unknown:
            raise KeyError(f"packet_out has no field {sorted(unknown)}; fields: {sorted(out)}")
        self.session.packet_out(payload, [(m.id, encode(fields.get(name, 0), m.bitwidth))
                                          for name, m in out.items()])

    def next_packet_in(self, timeout_s: float) -> tuple[dict[str, int], bytes]:
        """The oldest PacketIn not yet returned, as (``packet_in`` metadata by name, payload),
        waiting up to ``timeout_s``.

        Raises:
            TimeoutError: none arrived in time.
            TargetConnectionError: the stream closed.
        """
        deadline = time.monotonic() + timeout_s
        while not self._packets:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no PacketIn within {timeout_s} s")
            self._packets += self.session.packet_ins(timeout_s=left)
        packet = self._packets.pop(0)
        names = {m.id: name for name, m in self.index.packet["packet_in"].items()}
        return {names[m.metadata_id]: decode(m.value) for m in packet.metadata}, packet.payload


def update(op: str, **entity) -> p4runtime_pb2.Update:
    """``update("INSERT", table_entry=te)`` -> an Update with that one entity field set."""
    u = p4runtime_pb2.Update(type=getattr(p4runtime_pb2.Update, op))
    (field, value), = entity.items()
    getattr(u.entity, field).CopyFrom(value)
    return u

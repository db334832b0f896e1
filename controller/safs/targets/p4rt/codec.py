"""Typed entries of :mod:`safs.core.target` <-> P4Runtime protobufs (p4.v1), through a P4Info index.

Encoding follows the P4Runtime spec and what PI (BMv2's P4Runtime server) checks:

* values are canonical byte strings (:func:`safs.targets.p4rt.p4info.canonical_bytes`), or padded to
  the field width when ``padded=True``; values wider than the field are sent as they are, so
  the server answers INVALID_ARGUMENT for them, as it would for any client;
* "don't care" matches are omitted, never sent: an :class:`~safs.core.target.Lpm` with
  ``prefix_len`` 0 and a :class:`~safs.core.target.Range` covering the whole field (PI rejects both
  when sent explicitly). Decoding restores them, so an entry round-trips unchanged;
* ``is_default`` entries become ``is_default_action`` table entries with no match;
* an entry with a ``group_id`` sends ``action_profile_group_id`` instead of an action; an
  :class:`~safs.core.target.ActionProfileMember` / :class:`~safs.core.target.ActionProfileGroup`
  becomes ``action_profile_member`` / ``action_profile_group`` (every member weight 1);
* a :class:`~safs.core.target.CloneSession` becomes ``packet_replication_engine_entry.
  clone_session_entry`` with one replica (``egress_port``, instance 0); a DELETE carries the
  session id only.

Errors found before sending (unknown table, action, field or parameter, a value of the wrong
kind, a negative value) raise :class:`EncodeError`, an :class:`~safs.core.errors.InvalidInput`
that also carries the gRPC code name the server would use, so the target reports them per
update (:class:`~safs.core.errors.UpdateFailure`) like the server's own errors.
"""

from __future__ import annotations

from collections.abc import Mapping

from p4.v1 import p4data_pb2, p4runtime_pb2

from safs.core.errors import InvalidInput
from safs.core.target import (
    ActionProfileGroup,
    ActionProfileMember,
    CloneSession,
    Lpm,
    MeterConfig,
    Op,
    Range,
    RequestDigest,
    TableEntry,
    Ternary,
    Update,
)
from safs.targets.p4rt.p4info import P4InfoIndex, bytes_to_int, canonical_bytes, padded_bytes

UPDATE_TYPES = {Op.INSERT: p4runtime_pb2.Update.INSERT,
                Op.MODIFY: p4runtime_pb2.Update.MODIFY,
                Op.DELETE: p4runtime_pb2.Update.DELETE}


class EncodeError(InvalidInput):
    """An update could not be encoded; raised before anything is sent.

    An :class:`~safs.core.errors.InvalidInput` (so a :class:`~safs.core.errors.SafsError`):
    ``field`` names what was wrong (``"table"``, ``"SafsIngress.flow_grant.flow_id"``, ...),
    ``message`` what was allowed. ``code`` is the gRPC status name a P4Runtime server would
    answer for it (``"INVALID_ARGUMENT"``, or ``"UNIMPLEMENTED"`` for a match kind the codec
    does not support), so :meth:`P4RuntimeTarget.write
    <safs.targets.p4rt.target.P4RuntimeTarget.write>` reports it as that update's
    :class:`~safs.core.errors.UpdateFailure`.
    """

    def __init__(self, code: str, field: str, message: str) -> None:
        super().__init__(field, message)
        self.code = code


def _value(value: int, bitwidth: int, padded: bool, what: str) -> bytes:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise EncodeError("INVALID_ARGUMENT", what, f"must be an int >= 0, got {value!r}")
    return padded_bytes(value, bitwidth) if padded else canonical_bytes(value)


def encode_table_entry(index: P4InfoIndex, entry: TableEntry, padded: bool = False) -> p4runtime_pb2.TableEntry:
    """Encode ``entry`` as a p4.v1.TableEntry.

    Raises:
        EncodeError: unknown table/action/field/parameter, wrong match kind, negative value.
    """
    table = index.tables.get(entry.table)
    if table is None:
        raise EncodeError("INVALID_ARGUMENT", "table", f"unknown table {entry.table!r}")
    msg = p4runtime_pb2.TableEntry(table_id=table.id, priority=entry.priority)
    if entry.is_default:
        msg.is_default_action = True
    for name, value in entry.match.items():
        field = table.field(name)
        if field is None:
            raise EncodeError("INVALID_ARGUMENT", f"{entry.table}.match", f"no match field {name!r}")
        what = f"{entry.table}.{name}"
        fm = p4runtime_pb2.FieldMatch(field_id=field.id)
        if field.kind == "exact":
            if not isinstance(value, int):
                raise EncodeError("INVALID_ARGUMENT", what, f"is exact: give an int, got {value!r}")
            fm.exact.value = _value(value, field.bitwidth, padded, what)
        elif field.kind == "lpm":
            if not isinstance(value, Lpm):
                raise EncodeError("INVALID_ARGUMENT", what, f"is lpm: give an Lpm, got {value!r}")
            if value.prefix_len == 0 and value.value == 0:
                continue  # don't care: omitted (spec; PI rejects prefix_len 0)
            fm.lpm.value = _value(value.value, field.bitwidth, padded, what)
            fm.lpm.prefix_len = value.prefix_len
        elif field.kind == "range":
            if not isinstance(value, Range):
                raise EncodeError("INVALID_ARGUMENT", what, f"is range: give a Range, got {value!r}")
            if value.low == 0 and value.high == (1 << field.bitwidth) - 1:
                continue  # don't care: omitted (spec; PI rejects the explicit full range)
            fm.range.low = _value(value.low, field.bitwidth, padded, what)
            fm.range.high = _value(value.high, field.bitwidth, padded, what)
        elif field.kind == "ternary":
            if not isinstance(value, Ternary):
                raise EncodeError("INVALID_ARGUMENT", what, f"is ternary: give a Ternary, got {value!r}")
            if value.mask == 0:
                continue  # don't care: omitted (spec; PI rejects a zero mask)
            fm.ternary.value = _value(value.value, field.bitwidth, padded, what)
            fm.ternary.mask = _value(value.mask, field.bitwidth, padded, what)
        else:
            raise EncodeError("UNIMPLEMENTED", what, f"match kind {field.kind} is not supported")
        msg.match.append(fm)
    if entry.group_id:
        msg.action.action_profile_group_id = entry.group_id
    else:
        msg.action.action.CopyFrom(_encode_action(index, entry.action, entry.params, padded))
    return msg


def _encode_action(index: P4InfoIndex, name: str, params: Mapping[str, int], padded: bool) -> p4runtime_pb2.Action:
    action = index.actions.get(name)
    if action is None:
        raise EncodeError("INVALID_ARGUMENT", "action", f"unknown action {name!r}")
    act = p4runtime_pb2.Action(action_id=action.id)
    for pname, value in params.items():
        param = action.param(pname)
        if param is None:
            raise EncodeError("INVALID_ARGUMENT", f"{name}.params", f"no parameter {pname!r}")
        act.params.append(p4runtime_pb2.Action.Param(
            param_id=param.id, value=_value(value, param.bitwidth, padded, f"{name}.{pname}")))
    return act


def _profile_id(index: P4InfoIndex, name: str) -> int:
    prof = index.action_profiles.get(name)
    if prof is None:
        raise EncodeError("INVALID_ARGUMENT", "action_profile", f"unknown action profile {name!r}")
    return prof.id


def encode_member(index: P4InfoIndex, m: ActionProfileMember,
                  padded: bool = False) -> p4runtime_pb2.ActionProfileMember:
    """Encode ``m`` as a p4.v1.ActionProfileMember. Raises EncodeError: unknown profile or action."""
    return p4runtime_pb2.ActionProfileMember(action_profile_id=_profile_id(index, m.profile), member_id=m.member_id,
                                             action=_encode_action(index, m.action, m.params, padded))


def encode_group(index: P4InfoIndex, g: ActionProfileGroup) -> p4runtime_pb2.ActionProfileGroup:
    """Encode ``g`` as a p4.v1.ActionProfileGroup (weights 1). Raises EncodeError: unknown profile."""
    msg = p4runtime_pb2.ActionProfileGroup(action_profile_id=_profile_id(index, g.profile), group_id=g.group_id,
                                           max_size=g.max_size)
    for mid in g.members:
        msg.members.add(member_id=mid, weight=1)
    return msg


def _decode_action(index: P4InfoIndex, act: p4runtime_pb2.Action, where: str) -> tuple[str, dict[str, int]]:
    """(action name, params) of a p4.v1.Action. Raises InvalidInput (field ``table_entry``)."""
    action = index.actions_by_id.get(act.action_id)
    if action is None:
        raise InvalidInput("table_entry", f"unknown action id {act.action_id} in {where}")
    by_id = {p.id: p for p in action.params}
    params = {}
    for p in act.params:
        info = by_id.get(p.param_id)
        if info is None:
            raise InvalidInput("table_entry", f"unknown param id {p.param_id} of {action.name}")
        params[info.name] = bytes_to_int(p.value)
    return action.name, params


def _profile_name(index: P4InfoIndex, profile_id: int) -> str:
    prof = index.action_profiles_by_id.get(profile_id)
    if prof is None:
        raise InvalidInput("action_profile", f"unknown action profile id {profile_id}")
    return prof.name


def decode_member(index: P4InfoIndex, msg: p4runtime_pb2.ActionProfileMember) -> ActionProfileMember:
    """Decode a p4.v1.ActionProfileMember. Raises InvalidInput: unknown profile, action or param."""
    name = _profile_name(index, msg.action_profile_id)
    action, params = _decode_action(index, msg.action, name)
    return ActionProfileMember(name, msg.member_id, action, params)


def decode_group(index: P4InfoIndex, msg: p4runtime_pb2.ActionProfileGroup) -> ActionProfileGroup:
    """Decode a p4.v1.ActionProfileGroup (member ids in the order given). Raises InvalidInput:
    unknown profile."""
    return ActionProfileGroup(_profile_name(index, msg.action_profile_id), msg.group_id,
                              tuple(m.member_id for m in msg.members), msg.max_size)


def decode_table_entry(index: P4InfoIndex, msg: p4runtime_pb2.TableEntry) -> TableEntry:
    """Decode a p4.v1.TableEntry (as a server answers reads) into a :class:`TableEntry`.

    Omitted LPM, range and ternary fields come back as ``Lpm(0, 0)``, the full ``Range`` and
    ``Ternary(0, 0)``; exact fields must be present.

    Raises:
        InvalidInput: ids not in the P4Info, or a missing exact field (field ``table_entry``).
    """
    table = index.tables_by_id.get(msg.table_id)
    if table is None:
        raise InvalidInput("table_entry", f"unknown table id {msg.table_id}")
    given = {fm.field_id: fm for fm in msg.match}
    match: dict[str, int | Lpm | Range | Ternary] = {}
    if not msg.is_default_action:
        for field in table.match_fields:
            fm = given.get(field.id)
            if field.kind == "exact":
                if fm is None:
                    raise InvalidInput("table_entry", f"{table.name}: exact field {field.name} missing")
                match[field.name] = bytes_to_int(fm.exact.value)
            elif field.kind == "lpm":
                match[field.name] = (Lpm(bytes_to_int(fm.lpm.value), fm.lpm.prefix_len)
                                     if fm is not None else Lpm(0, 0))
            elif field.kind == "range":
                match[field.name] = (Range(bytes_to_int(fm.range.low), bytes_to_int(fm.range.high))
                                     if fm is not None else Range(0, (1 << field.bitwidth) - 1))
            elif field.kind == "ternary":
                match[field.name] = (Ternary(bytes_to_int(fm.ternary.value), bytes_to_int(fm.ternary.mask))
                                     if fm is not None else Ternary(0, 0))
    if msg.action.WhichOneof("type") == "action_profile_group_id":
        return TableEntry(table=table.name, match=match, action="", priority=msg.priority,
                          is_default=msg.is_default_action, group_id=msg.action.action_profile_group_id)
    action, params = _decode_action(index, msg.action.action, table.name)
    return TableEntry(table=table.name, match=match, action=action, params=params,
                      priority=msg.priority, is_default=msg.is_default_action)


def encode_meter(index: P4InfoIndex, cfg: MeterConfig) -> p4runtime_pb2.MeterEntry:
    """Encode ``cfg`` as a p4.v1.MeterEntry (rates bytes/s, bursts bytes, as given).

    Raises:
        EncodeError: unknown meter.
    """
    meter = index.meters.get(cfg.meter)
    if meter is None:
        raise EncodeError("INVALID_ARGUMENT", "meter", f"unknown meter {cfg.meter!r}")
    msg = p4runtime_pb2.MeterEntry(meter_id=meter.id)
    msg.index.index = cfg.index
    msg.config.cir, msg.config.cburst = cfg.cir, cfg.cburst
    msg.config.pir, msg.config.pburst = cfg.pir, cfg.pburst
    return msg


def decode_meter(index: P4InfoIndex, msg: p4runtime_pb2.MeterEntry) -> MeterConfig:
    """Decode a p4.v1.MeterEntry into a :class:`MeterConfig`.

    Raises:
        InvalidInput: unknown meter id (field ``meter_entry``).
    """
    meter = index.meters_by_id.get(msg.meter_id)
    if meter is None:
        raise InvalidInput("meter_entry", f"unknown meter id {msg.meter_id}")
    c = msg.config
    return MeterConfig(meter.name, msg.index.index, c.cir, c.cburst, c.pir, c.pburst)


_U32_MAX = (1 << 32) - 1


def encode_clone_session(cs: CloneSession, with_replica: bool = True) -> p4runtime_pb2.CloneSessionEntry:
    """Encode ``cs`` as a p4.v1.CloneSessionEntry: ``session_id`` and, when ``with_replica``,
    one replica ``(egress_port, instance 0)`` (the uint32 ``egress_port`` field BMv2's PI reads).

    Raises:
        EncodeError: session id or port not an int in 0..2^32-1 (INVALID_ARGUMENT; the switch
            checks the ranges it supports, BMv2 session ids 1..32767).
    """
    values = (("session_id", cs.session_id), ("egress_port", cs.egress_port))
    for what, v in values if with_replica else values[:1]:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _U32_MAX:
            raise EncodeError("INVALID_ARGUMENT", f"clone_session.{what}", f"must be an int in 0..2^32-1, got {v!r}")
    msg = p4runtime_pb2.CloneSessionEntry(session_id=cs.session_id)
    if with_replica:
        msg.replicas.add(egress_port=cs.egress_port, instance=0)
    return msg


def decode_clone_session(msg: p4runtime_pb2.CloneSessionEntry) -> CloneSession:
    """Decode a p4.v1.CloneSessionEntry with exactly one replica into a :class:`CloneSession`.

    Raises:
        InvalidInput: not exactly one replica (field ``clone_session_entry``): the session
            was not written by this controller.
    """
    if len(msg.replicas) != 1:
        raise InvalidInput("clone_session_entry", f"session {msg.session_id} has {len(msg.replicas)} "
                           "replicas; a CloneSession has exactly one")
    return CloneSession(session_id=msg.session_id, egress_port=msg.replicas[0].egress_port)


def encode_update(index: P4InfoIndex, upd: Update, padded: bool = False) -> p4runtime_pb2.Update:
    """Encode one :class:`Update` (table entry, meter config or clone session).

    Raises:
        EncodeError: as :func:`encode_table_entry` / :func:`encode_meter` /
            :func:`encode_clone_session`, or an unknown entity.
    """
    out = p4runtime_pb2.Update(type=UPDATE_TYPES[upd.op])
    if isinstance(upd.entity, TableEntry):
        out.entity.table_entry.CopyFrom(encode_table_entry(index, upd.entity, padded))
    elif isinstance(upd.entity, MeterConfig):
        out.entity.meter_entry.CopyFrom(encode_meter(index, upd.entity))
    elif isinstance(upd.entity, CloneSession):
        out.entity.packet_replication_engine_entry.clone_session_entry.CopyFrom(
            encode_clone_session(upd.entity, with_replica=upd.op is not Op.DELETE))
    elif isinstance(upd.entity, ActionProfileMember):
        out.entity.action_profile_member.CopyFrom(encode_member(index, upd.entity, padded))
    elif isinstance(upd.entity, ActionProfileGroup):
        out.entity.action_profile_group.CopyFrom(encode_group(index, upd.entity))
    else:
        raise EncodeError("INVALID_ARGUMENT", "entity", f"unsupported entity {type(upd.entity).__name__}")
    return out


def decode_request_digest(members: list[int]) -> RequestDigest:
    """A ``request_digest_t`` struct (its member values in P4Info order: flow_id, src_addr,
    dst_addr, dep_id, remaining_bytes, latest_start) as a :class:`RequestDigest`.

    Raises:
        InvalidInput: not exactly six members (field ``digest``).
    """
    if len(members) != 6:
        raise InvalidInput("digest", f"request_digest_t has 6 members, got {len(members)}")
    flow_id, src, dst, dep_id, remaining, ts = members
    return RequestDigest(flow_id=flow_id, src_addr=src, dst_addr=dst, dep_id=dep_id,
                         remaining_bytes=remaining, latest_start_ns=ts)


def digest_members(data: p4data_pb2.P4Data) -> list[int]:
    """Member values of one P4Data digest sample: a struct's bitstrings in order, or one bitstring."""
    if data.HasField("struct"):
        return [bytes_to_int(m.bitstring) for m in data.struct.members]
    return [bytes_to_int(data.bitstring)]

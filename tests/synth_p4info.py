"""A P4Info synthesised from the pipeline model's schema (same names, widths and sizes as the P4
program), for the tests that talk to the fake P4Runtime server; and the one to use: the
committed p4src/build/safs.p4info.txtpb once it has the current (v2, dependency grant) tables,
else the synthesised one."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from safs.core import p4names as n
from safs.targets import pipeline_model as pm

ROOT = Path(__file__).resolve().parents[1]
COMMITTED_P4INFO = ROOT / "p4src" / "build" / "safs.p4info.txtpb"
NEEDS_V2 = "needs the v2 P4Info: p4src/build is recompiled by the lead"

# request_digest_t (p4src/include/headers.p4), in order
DIGEST_MEMBERS = (("flow_id", 32), ("src_addr", 32), ("dst_addr", 32), ("dep_id", 16), ("remaining_bytes", 48),
                  ("latest_start", 48))


def synthesized_p4info() -> p4info_pb2.P4Info:
    """A P4Info with the pipeline model's tables, actions, ECMP selector, counters, meters and digest."""
    info = p4info_pb2.P4Info()
    ids = iter(range(1, 1 << 20))
    kinds = {"exact": p4info_pb2.MatchField.EXACT, "lpm": p4info_pb2.MatchField.LPM,
             "range": p4info_pb2.MatchField.RANGE, "ternary": p4info_pb2.MatchField.TERNARY}
    action_ids: dict[str, int] = {}
    for schema in pm._SCHEMAS.values():
        for aname, params in schema.actions.items():
            if aname in action_ids:
                continue
            a = info.actions.add()
            a.preamble.id = action_ids[aname] = 0x01000000 + next(ids)
            a.preamble.name = aname
            for pid, (pname, bits) in enumerate(params, start=1):
                a.params.add(id=pid, name=pname, bitwidth=bits)
    for tname, schema in pm._SCHEMAS.items():
        t = info.tables.add()
        t.preamble.id = 0x02000000 + next(ids)
        t.preamble.name = tname
        t.size = 1024
        for fid, (fname, kind, bits) in enumerate(schema.keys, start=1):
            t.match_fields.add(id=fid, name=fname, bitwidth=bits, match_type=kinds[kind])
        for aname in schema.actions:
            scope = (p4info_pb2.ActionRef.TABLE_AND_DEFAULT if aname in schema.entry_actions
                     else p4info_pb2.ActionRef.DEFAULT_ONLY)
            t.action_refs.add(id=action_ids[aname], scope=scope)
        if tname in pm._CONST_DEFAULT_TABLES:
            default = next((a for a in schema.actions if a not in schema.entry_actions), "NoAction")
            if default not in action_ids:  # the const default is not named in p4names
                a = info.actions.add()
                a.preamble.id = action_ids[default] = 0x01000000 + next(ids)
                a.preamble.name = default
            if all(r.id != action_ids[default] for r in t.action_refs):
                t.action_refs.add(id=action_ids[default], scope=p4info_pb2.ActionRef.DEFAULT_ONLY)
            t.const_default_action_id = action_ids[default]
        if tname == n.ECMP:  # indirect: implemented by the selector
            ap = info.action_profiles.add(with_selector=True, size=n.ECMP_MEMBERS, table_ids=[t.preamble.id])
            ap.preamble.id = t.implementation_id = 0x11000000 + next(ids)
            ap.preamble.name = n.ECMP_SELECTOR
    for cname, size in pm._COUNTER_SIZES.items():
        c = info.counters.add(size=size)
        c.preamble.id = 0x12000000 + next(ids)
        c.preamble.name = cname
    for meter, size in pm._METER_SIZES.items():
        m = info.meters.add(size=size)
        m.preamble.id = 0x13000000 + next(ids)
        m.preamble.name = meter
    d = info.digests.add()
    d.preamble.id = 0x18000000 + next(ids)
    d.preamble.name = n.REQUEST_DIGEST
    d.type_spec.struct.name = n.REQUEST_DIGEST
    struct = info.type_info.structs[n.REQUEST_DIGEST]
    for mname, bits in DIGEST_MEMBERS:
        struct.members.add(name=mname).type_spec.bitstring.bit.bitwidth = bits
    return info


def committed_is_current() -> bool:
    """The committed P4Info exists and has the dependency-grant tables."""
    return COMMITTED_P4INFO.exists() and f'name: "{n.DEP_GRANT}"' in COMMITTED_P4INFO.read_text()


def current_p4info(directory: Path) -> Path:
    """The committed P4Info when it is current, else the synthesised one written to ``directory``."""
    if committed_is_current():
        return COMMITTED_P4INFO
    path = directory / "safs.p4info.txtpb"
    path.write_text(text_format.MessageToString(synthesized_p4info()))
    return path

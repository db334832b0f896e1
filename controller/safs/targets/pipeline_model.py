"""In-process model of the SAFS P4 pipeline (v1model program in p4src/), a :class:`safs.core.target.Target`.

The simulator calls :meth:`PipelineModel.ingress` and :meth:`PipelineModel.egress` once per
packet, so the per-packet path uses plain dicts, tuples and lists precomputed at write time and
allocates nothing except a GRANT packet when it must send one.

It mirrors p4src/ (v1model/safs.p4 and include/*.p4) control by control. Ingress::

    malformed SAFS (truncated / version / type) -> malformed[reason] counted, then as non-SAFS
    host_port(ingress port) hit: IPv4 source not the host's, a GRANT, a REQUEST/DONE frame over
        MAX_REQUEST/DONE_FRAME_BYTES or RED at control_meter -> forged[reason], dropped (source_guard.p4);
        DATA whose (src, dep_id) has no dep_claim entry, not green at unclaimed_meter[in port]
        -> FLAG_DEMOTED set, forged[UNCLAIMED_DATA] counted
    ipv4_lpm(dst) --miss--> drop
        |  set_ecmp_group(g): ecmp(g) -> the selector group's member for crc16(5-tuple)
        |  (safs.core.ecmp: member hash % size in member-id order)
        |
        +-- not SAFS / malformed SAFS -------------------------------> priority 0
        +-- REQUEST, GRANT, DONE -------------------------------------> priority 7, qclass 7
        |     at the receiver's ToR (egress port in receiver_port) with a grant_route(src):
        |     REQUEST -> GRANT back to the sender (dep_grant or default_grant),
        |                digest when the flow has no dep_grant entry
        +-- DATA: slack_class(slack_key(ts, now)) -> qclass 2..6 (FLAG_DEMOTED: 1)
              at the receiver's ToR: dep_meter[slot] colour; not green -> priority 1
              (demoted, never dropped); stale epoch -> also a fresh GRANT to the sender,
              cloned to session grant_route port + CLONE_SESSION_BASE: only when that
              clone session exists (as on BMv2, a clone to a missing session is no packet),
              and out on the session's replica port
    colour: the meter's at the receiver's ToR for DATA, UNMETERED (3) for every other SAFS packet.

Switch-generated GRANTs (REQUEST turned around, or the clone made for a stale-epoch DATA)
swap the IPv4 addresses and go out on the ``grant_route`` port; the REQUEST keeps its UDP ports
(its destination port stays the SAFS port), the clone gets source port = the DATA's destination
port and destination port = SAFS port, as in the P4 program. MAC addresses are not modelled
(``dst_mac`` parameters are validated and stored, not used).

Egress: ECN CE on ECT packets when the enqueue depth exceeds the threshold, qdepth stamp on
SAFS packets, per-port byte and queue-depth-histogram counters.

Table semantics follow P4Runtime (CONTINUE_ON_ERROR batches); see :meth:`PipelineModel.write`.
Every key field must be given (no omitted "don't care" fields); range tables need priority > 0,
other tables priority 0.

Initial defaults (as in the P4 program): ``ipv4_lpm`` drop, ``slack_class``
``set_slack_class(QUEUE_SLACK_LEAST_URGENT)``, ``clock_offset`` 0, ``default_grant`` rate 0 /
lease 0 / slot 0, ``ecn_threshold`` the 19-bit maximum (marking effectively off). The defaults
of ``receiver_port`` (not a receiver port), ``grant_route`` (no route) and ``dep_grant``
(``no_grant``) are const: writing them is INVALID_ARGUMENT.

ECMP: ``ecmp_selector`` members (:class:`safs.core.target.ActionProfileMember`, ``set_egress``)
and groups (:class:`~safs.core.target.ActionProfileGroup`, existing distinct members; at most
``ECMP_MEMBERS`` / ``ECMP_GROUPS``) with P4Runtime's op codes; deleting a member in a group or a
group an ``ecmp`` entry uses is FAILED_PRECONDITION; ``ecmp`` entries carry a ``group_id`` of an
existing group and no action.

Clone sessions (:class:`safs.core.target.CloneSession`) follow P4Runtime as BMv2's PI answers them:
INSERT of an existing session ALREADY_EXISTS, MODIFY/DELETE of a missing one NOT_FOUND, session
id outside 1..32767 INVALID_ARGUMENT; the model also refuses an egress port outside the 9-bit
port space (BMv2 accepts it).

Counters: ``flow_bytes`` and ``port_tx_bytes`` count bytes and packets; ``malformed``,
``ecn_marked`` and ``qdepth_hist`` are packet counters (byte_count stays 0), as declared in P4.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from safs.core import ecmp
from safs.core import p4names as n
from safs.core.errors import InvalidInput, TargetError, UpdateFailure
from safs.core.packet import PROTO_TCP, PROTO_UDP, Packet
from safs.core.protocol import (
    ECN_CE,
    ECN_ECT0,
    ECN_ECT1,
    EPOCH_MAX,
    FLAG_BACKGROUND,
    FLAG_CAPPED,
    FLAG_DEMOTED,
    FLAG_LAST,
    FLAG_RENEW,
    FLAG_RESENT,
    FLAG_SOLE,
    MAX_DONE_FRAME_BYTES,
    MAX_REQUEST_FRAME_BYTES,
    NS_PER_S,
    NUM_QUEUES,
    QDEPTH_MAX,
    QUEUE_BEST_EFFORT,
    QUEUE_CONTROL,
    QUEUE_OVER_RATE,
    QUEUE_SLACK_LEAST_URGENT,
    QUEUE_SLACK_MOST_URGENT,
    SAFS_UDP_PORT,
    SAFS_VERSION,
    WIRE_OVERHEAD_BYTES,
    Color,
    Forged,
    Malformed,
    MsgType,
)
from safs.core.target import (
    ActionProfileGroup,
    ActionProfileMember,
    CloneSession,
    CounterValue,
    Lpm,
    MeterConfig,
    Op,
    Range,
    RequestDigest,
    SwitchState,
    TableEntry,
    TableEntryKey,
    Ternary,
    Update,
)
from safs.core.timebase import HALF, TIME_MASK

# Wire size of a GRANT the switch generates (the P4 clone is truncated to the same length).
CONTROL_PACKET_BYTES = WIRE_OVERHEAD_BYTES

V = TypeVar("V")  # a range table's value type

ECN_THRESHOLD_BITS = 19
ECN_THRESHOLD_OFF = (1 << ECN_THRESHOLD_BITS) - 1


_DATA = int(MsgType.DATA)
_REQUEST = int(MsgType.REQUEST)
_GRANT = int(MsgType.GRANT)
_DONE = int(MsgType.DONE)
_KNOWN_TYPES = frozenset(int(t) for t in MsgType)
_GREEN = int(Color.GREEN)
_YELLOW = int(Color.YELLOW)
_RED = int(Color.RED)
_UNMETERED = int(Color.UNMETERED)
_LEAST_URGENT = n.URGENCY_CLASSES - 1
_U32_MAX = (1 << 32) - 1  # a bit<32> register cell (the weight sums saturate there)


# --------------------------------------------------------------------------------------
# Schema: key fields (name, kind, bits) and actions (name -> ((param, bits), ...)).

@dataclass(frozen=True)
class _TableSchema:
    keys: tuple[tuple[str, str, int], ...]  # (field, "exact" | "lpm" | "range" | "ternary", bits)
    actions: dict[str, tuple[tuple[str, int], ...]]
    entry_actions: frozenset[str]  # actions allowed on entries (others: default only)
    # Derived in __post_init__ (not arguments; left out of repr and ==).
    key_names: frozenset[str] = field(init=False, repr=False, compare=False)
    param_names: dict[str, frozenset[str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Name sets the validators compare against, built once instead of per update.
        object.__setattr__(self, "key_names", frozenset(f for f, _, _ in self.keys))
        object.__setattr__(self, "param_names", {a: frozenset(p for p, _ in spec)
                                                 for a, spec in self.actions.items()})


def _share_schema(port_field: str, action: str) -> _TableSchema:
    """port_share, link_share, out_share: (port, load, mode) -> set_*_share(rate_kbps)."""
    return _TableSchema(keys=((port_field, "exact", 9), (n.F_LOAD, "exact", 16), (n.F_MODE, "exact", 2)),
                        actions={action: (("rate_kbps", 32),)}, entry_actions=frozenset({action}))


def _spare_schema(port_field: str, action: str) -> _TableSchema:
    """spare_level, link_spare_level, out_spare_level: (port, top bytes range) -> set_*(level)."""
    return _TableSchema(keys=((port_field, "exact", 9), (n.F_TOP_BYTES, "range", 32)),
                        actions={action: (("level", 8),)}, entry_actions=frozenset({action}))


_SCHEMAS: dict[str, _TableSchema] = {
    n.IPV4_LPM: _TableSchema(
        keys=((n.F_DST_ADDR, "lpm", 32),),
        actions={n.ACT_SET_EGRESS: (("port", 9), ("dst_mac", 48)), n.ACT_SET_ECMP_GROUP: (("group", 16),),
                 n.ACT_DROP: ()},
        entry_actions=frozenset({n.ACT_SET_EGRESS, n.ACT_SET_ECMP_GROUP, n.ACT_DROP})),
    # Indirect: entries carry an ActionProfileGroup of ECMP_SELECTOR (group_id), no action
    # (checked in _write_entry); set_egress is the members' action, as the P4Info lists it.
    n.ECMP: _TableSchema(
        keys=((n.F_ECMP_GROUP, "exact", 16),),
        actions={n.ACT_SET_EGRESS: (("port", 9), ("dst_mac", 48))},
        entry_actions=frozenset({n.ACT_SET_EGRESS})),
    n.GRANT_ROUTE: _TableSchema(
        keys=((n.F_SRC_ADDR, "lpm", 32),),
        actions={n.ACT_SET_GRANT_ROUTE: (("port", 9), ("dst_mac", 48))},
        entry_actions=frozenset({n.ACT_SET_GRANT_ROUTE})),
    n.HOST_PORT: _TableSchema(
        keys=((n.F_INGRESS_PORT, "exact", 9),),
        actions={n.ACT_SET_HOST_SOURCE: (("src_addr", 32),)},
        entry_actions=frozenset({n.ACT_SET_HOST_SOURCE})),
    n.DEP_CLAIM: _TableSchema(
        keys=((n.F_SRC_ADDR, "exact", 32), (n.F_DEP_ID, "exact", 16)),
        actions={n.ACT_CLAIM: (("out_slot", 16),)},
        entry_actions=frozenset({n.ACT_CLAIM})),
    n.RECEIVER_PORT: _TableSchema(
        keys=((n.F_EGRESS_PORT, "exact", 9),),
        actions={n.ACT_MARK_RECEIVER: ()},
        entry_actions=frozenset({n.ACT_MARK_RECEIVER})),
    n.SLACK_CLASS: _TableSchema(
        keys=((n.F_SLACK_KEY, "range", 48),),
        actions={n.ACT_SET_SLACK_CLASS: (("qclass", 3),)},
        entry_actions=frozenset({n.ACT_SET_SLACK_CLASS})),
    n.DEP_GRANT: _TableSchema(
        keys=((n.F_SRC_ADDR, "exact", 32), (n.F_DEP_ID, "exact", 16)),
        actions={n.ACT_SET_SHARE_GRANT: (("meter_slot", 16),),
                 n.ACT_SET_FIXED_GRANT: (("rate_kbps", 32), ("epoch", 32), ("lease_us", 32),
                                         ("meter_slot", 16)),
                 n.ACT_NO_GRANT: ()},
        entry_actions=frozenset({n.ACT_SET_SHARE_GRANT, n.ACT_SET_FIXED_GRANT})),
    n.PORT_SHARE: _share_schema(n.F_EGRESS_PORT, n.ACT_SET_SHARE),
    n.SPARE_LEVEL: _spare_schema(n.F_EGRESS_PORT, n.ACT_SET_SPARE_LEVEL),
    n.TOP_BOOST: _TableSchema(keys=((n.F_EGRESS_PORT, "exact", 9), (n.F_TOP_BYTES, "range", 32)),
                              actions={n.ACT_SET_TOP_BOOST: (("boost", 16),)},
                              entry_actions=frozenset({n.ACT_SET_TOP_BOOST})),
    n.LINK_SHARE: _share_schema(n.F_INGRESS_PORT, n.ACT_SET_LINK_SHARE),
    n.LINK_SPARE_LEVEL: _spare_schema(n.F_INGRESS_PORT, n.ACT_SET_LINK_SPARE_LEVEL),
    n.OUT_SHARE: _share_schema(n.F_EGRESS_PORT, n.ACT_SET_OUT_SHARE),
    n.OUT_SPARE_LEVEL: _spare_schema(n.F_EGRESS_PORT, n.ACT_SET_OUT_SPARE_LEVEL),
    n.SHARE_LEASE: _TableSchema(
        keys=(), actions={n.ACT_SET_SHARE_LEASE: (("lease_us", 32),)},
        entry_actions=frozenset()),
    n.HOLDER: _TableSchema(
        keys=(), actions={n.ACT_SET_HOLDER: (("idle_ns", 32), ("release_bytes", 32), ("preempt_ns", 32))},
        entry_actions=frozenset()),
    n.CLOCK_OFFSET: _TableSchema(
        keys=(), actions={n.ACT_SET_CLOCK_OFFSET: (("offset_ns", 48),)},
        entry_actions=frozenset()),
    n.DEFAULT_GRANT: _TableSchema(
        keys=(), actions={n.ACT_SET_DEFAULT_GRANT: (("rate_kbps", 32), ("lease_us", 32),
                                                    ("meter_slot", 16))},
        entry_actions=frozenset()),
    n.ECN_THRESHOLD: _TableSchema(
        keys=(), actions={n.ACT_SET_ECN_THRESHOLD: (("qdepth_pkts", ECN_THRESHOLD_BITS),)},
        entry_actions=frozenset()),
    n.TRAFFIC_CLASS: _TableSchema(
        keys=((n.F_SRC_ADDR, "ternary", 32), (n.F_DST_ADDR, "ternary", 32), (n.F_PROTOCOL, "ternary", 8),
              (n.F_L4_SRC_PORT, "range", 16), (n.F_L4_DST_PORT, "range", 16), (n.F_ROCE_QP, "ternary", 24)),
        actions={n.ACT_SET_TRAFFIC_CLASS: (("qclass", 3),),
                 n.ACT_SET_METERED_TRAFFIC_CLASS: (("qclass", 3), ("meter_index", 16))},
        entry_actions=frozenset({n.ACT_SET_TRAFFIC_CLASS, n.ACT_SET_METERED_TRAFFIC_CLASS})),
}

# Writable defaults. receiver_port, grant_route and dep_grant have const defaults (a miss
# means "not a receiver port" / "no route back" / "no grant entry"); their names are not in
# p4names, so they are not listed here.
_INITIAL_DEFAULTS: dict[str, tuple[str, dict[str, int]]] = {
    n.IPV4_LPM: (n.ACT_DROP, {}),
    n.SLACK_CLASS: (n.ACT_SET_SLACK_CLASS, {"qclass": QUEUE_SLACK_LEAST_URGENT}),
    n.SHARE_LEASE: (n.ACT_SET_SHARE_LEASE, {"lease_us": 0}),
    n.HOLDER: (n.ACT_SET_HOLDER, {"idle_ns": 0, "release_bytes": 0, "preempt_ns": 0}),
    n.CLOCK_OFFSET: (n.ACT_SET_CLOCK_OFFSET, {"offset_ns": 0}),
    n.DEFAULT_GRANT: (n.ACT_SET_DEFAULT_GRANT, {"rate_kbps": 0, "lease_us": 0,
                                                "meter_slot": n.DEFAULT_METER_SLOT}),
    n.ECN_THRESHOLD: (n.ACT_SET_ECN_THRESHOLD, {"qdepth_pkts": ECN_THRESHOLD_OFF}),
}
_CONST_DEFAULT_TABLES = frozenset({n.RECEIVER_PORT, n.GRANT_ROUTE, n.DEP_GRANT, n.PORT_SHARE, n.SPARE_LEVEL,
                                   n.TOP_BOOST, n.LINK_SHARE, n.LINK_SPARE_LEVEL, n.OUT_SHARE, n.OUT_SPARE_LEVEL,
                                   n.TRAFFIC_CLASS,
                                   n.ECMP, n.HOST_PORT, n.DEP_CLAIM})
# Counters declared CounterType.packets in P4 (their byte_count reads 0).
_PACKET_ONLY_COUNTERS = frozenset({n.MALFORMED, n.ECN_MARKED, n.QDEPTH_HIST, n.FORGED})

_COUNTER_SIZES: dict[str, int] = {
    n.DEP_BYTES: n.DEP_SLOTS,
    n.PORT_TX_BYTES: n.NUM_PORTS,
    n.QDEPTH_HIST: n.NUM_PORTS * n.QDEPTH_BUCKETS,
    n.MALFORMED: len(Malformed),
    n.FORGED: len(Forged),
    n.ECN_MARKED: n.NUM_PORTS,
}

_METER_SIZES: dict[str, int] = {
    n.DEP_METER: n.DEP_SLOTS,
    n.AGGREGATE_METER: n.AGGREGATE_METERS,
    n.CONTROL_METER: n.NUM_PORTS,
    n.UNCLAIMED_METER: n.NUM_PORTS,
}

_METER_RATE_MAX = (1 << 64) - 1  # P4Runtime MeterConfig fields are int64; keep them sane
CLONE_SESSION_ID_MAX = 32767  # largest clone session id BMv2's PI accepts ("out-of-range" above)


# A traffic_class entry per packet: (value, mask) of src, dst, protocol; (low, high) of the
# source and destination ports; (value, mask) of the RoCEv2 QP; qclass; meter index or -1.
_Pair = tuple[int, int]
_Aggregate = tuple[_Pair, _Pair, _Pair, _Pair, _Pair, _Pair, int, int]


class _Reject(Exception):
    """One update failed: P4Runtime status name and message (internal to write())."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Meter:
    """RFC 2698 two-rate three-colour meter, colour-blind, in bytes.

    Token buckets are kept in byte-nanoseconds per second units (bytes * 1e9) so refill
    ``rate_Bps * dt_ns`` stays an exact integer. Both buckets start full when configured
    (as BMv2 does when rates are set).
    """

    __slots__ = ("cir", "pir", "cmax", "pmax", "tc", "tp", "last_ns")

    def __init__(self, cfg: MeterConfig, now_ns: int) -> None:
        self.cir = cfg.cir
        self.pir = cfg.pir
        self.cmax = cfg.cburst * NS_PER_S
        self.pmax = cfg.pburst * NS_PER_S
        self.tc = self.cmax
        self.tp = self.pmax
        self.last_ns = now_ns

    def color(self, size_bytes: int, now_ns: int) -> int:
        """Colour of a packet of ``size_bytes`` arriving at switch time ``now_ns``."""
        dt = now_ns - self.last_ns
        if dt > 0:
            self.last_ns = now_ns
            tc = self.tc + self.cir * dt
            self.tc = tc if tc < self.cmax else self.cmax
            tp = self.tp + self.pir * dt
            self.tp = tp if tp < self.pmax else self.pmax
        need = size_bytes * NS_PER_S
        if self.tp < need:
            return _RED
        self.tp -= need
        if self.tc < need:
            return _YELLOW
        self.tc -= need
        return _GREEN


def _move_count(loads: list[list[int]], port: int, held: int, cls: int) -> None:
    """Class counts by urgency and port (``loads[u][port]``): one dependency leaves class
    ``held`` and joins ``cls`` (1 + urgency; 0: none). A count never goes below 0: a restart
    zeroes counts, not the senders' LASTs (P4: CLASS_COUNT in grant_enforcer.p4)."""
    if held != cls:
        if held and loads[held - 1][port]:
            loads[held - 1][port] -= 1
        if cls:
            loads[cls - 1][port] += 1


def _link_weight(remaining: int) -> tuple[int, int]:
    """(w, k): a dependency's weight w = 2^k at a contended link for ``remaining`` bytes, k =
    clamp(bit length - WEIGHT_BASE_BITS, 0, WEIGHT_MAX_SHIFT) (grant_enforcer.p4,
    WEIGHT_FROM_REMAINING): 1 below 1 MiB .. 128 from 64 MiB."""
    k = min(n.WEIGHT_MAX_SHIFT, max(0, remaining.bit_length() - n.WEIGHT_BASE_BITS))
    return 1 << k, k


class _Shares:
    """Share state of one kind of link (grant_enforcer.p4): receiver ports at a receiver's ToR
    (by egress port: class_load_u, port_win_*, port_top_bytes, port_share, spare_level), its
    in-links (by ingress port: link_load_u, link_weight_u, link_win_*, link_top_bytes,
    link_share, link_spare_level) or a sender's ToR's out-links (by egress port: out_*).
    Registers are lists by port; ``shares``: (port, load, mode) -> kbps; ``spare``: port ->
    (bounds, levels) as _range_partition gives them (no range: level 1); ``boost`` (receiver
    ports only: top_boost) the same with boosts in 1/256 (no range: 256). ``weights`` (links
    only, else None): each class's weight sum by port; a top-class dependency's key is then
    ceil(sum / its weight), at most MAX_LOAD, instead of the class's count."""

    __slots__ = ("loads", "weights", "win_start", "win_bytes", "top_bytes", "shares", "spare", "boost")

    def __init__(self, weighted: bool = False) -> None:
        self.loads = [[0] * n.NUM_PORTS for _ in range(n.URGENCY_CLASSES)]
        self.weights = [[0] * n.NUM_PORTS for _ in range(n.URGENCY_CLASSES)] if weighted else None
        self.win_start = [0] * n.NUM_PORTS
        self.win_bytes = [0] * n.NUM_PORTS
        self.top_bytes = [0] * n.NUM_PORTS
        self.shares: dict[tuple[int, int, int], int] = {}
        self.spare: dict[int, tuple[list[int], list[int]]] = {}
        self.boost: dict[int, tuple[list[int], list[int]]] = {}

    def move(self, port: int, held: int, cls: int) -> None:
        """One dependency leaves class ``held`` and joins ``cls`` (1 + urgency; 0: idle) at
        ``port``."""
        _move_count(self.loads, port, held, cls)

    def weigh(self, port: int, held: int, held_w: int, cls: int, w: int) -> None:
        """The weight sums at ``port`` (CLASS_WEIGHT): ``held_w`` leaves class ``held``, ``w``
        joins ``cls`` (either 0: none), saturating at 0 and 2^32 - 1."""
        weights = self.weights
        assert weights is not None
        if held:
            weights[held - 1][port] = max(0, weights[held - 1][port] - held_w)
        if cls:
            weights[cls - 1][port] = min(_U32_MAX, weights[cls - 1][port] + w)

    def roll(self, port: int, now: int) -> None:
        """Rolls the port's top-class byte window to ``now`` (fabric ns): a window older than
        TOP_WINDOW_NS closes, its bytes becoming the last window's (0 after a silent one)."""
        age = (now - self.win_start[port]) & TIME_MASK
        if age >= n.TOP_WINDOW_NS:
            self.top_bytes[port] = self.win_bytes[port] if age < 2 * n.TOP_WINDOW_NS else 0
            self.win_start[port] = now
            self.win_bytes[port] = 0

    def level_bytes(self, port: int) -> int:
        """The top-class DATA bytes the spare level is keyed on: the last whole window's, or the
        current window's so far when more, so that a top class that starts sending takes its
        capacity back at once, not a window later (with the last window's bytes alone, waiting
        shares granted while it was silent added up to about twice the port for up to 32.8 us:
        docs/evaluation.md, "Catch-up and the spare level without a window's lag"). The top
        boost stays keyed on the last whole window's (0: a new burst is not overcommitted)."""
        return max(self.top_bytes[port], self.win_bytes[port])

    def top(self, port: int) -> tuple[int, int, int]:
        """(top, its count, the count behind it) at ``port``: top = the most urgent non-empty
        class. All counts 0 although a dependency is active means it is counted at another
        port (its sender used the dep_id toward two receivers); as in the P4, top is then 4
        with load 0, which has no share entry: the default grant."""
        counts = [load[port] for load in self.loads]
        top = next((u for u, c in enumerate(counts) if c), _LEAST_URGENT)
        return top, counts[top], sum(counts) - counts[top]

    def share(self, port: int, load: int, mode: int, top_bytes: int | None) -> int | None:
        """The share entry (port, load, mode), kbit/s (None: no entry); a waiting share is
        multiplied by the spare level of ``top_bytes`` (None: level 1)."""
        kbps = self.shares.get((port, load, mode))
        if mode == n.SHARE_WAITING and kbps is not None and top_bytes is not None:
            ranges = self.spare.get(port)
            if ranges is not None:
                kbps *= ranges[1][bisect_right(ranges[0], top_bytes)]
        return kbps

    def rate(self, port: int, urgency: int, top_data: bool, size: int, now: int,
             weight: tuple[int, int] = (1, 0)) -> int | None:
        """The share, kbit/s, of a dependency of ``urgency`` at ``port`` after its counts moved
        (None: no share entry). Rolls the port's top-class byte window (``now``: fabric ns) and
        counts ``size`` bytes in it when ``top_data`` and the dependency is in the top class.
        ``weight``: its (w, k) (_link_weight), used where the sums are kept."""
        self.roll(port, now)
        top, n_top, rest = self.top(port)
        if urgency != top:
            return self.share(port, rest, n.SHARE_WAITING, self.level_bytes(port))
        if top_data:
            self.win_bytes[port] += size
        if self.weights is not None:
            w, k = weight
            n_top = min(n.MAX_LOAD, (self.weights[top][port] + w - 1) >> k)
        return self.share(port, n_top, n.SHARE_TOP if rest else n.SHARE_ALONE, None)


class PipelineModel:
    """The SAFS v1model pipeline in Python, one instance per switch.

    Args:
        name: switch name (as in the topology).
        clock: returns the switch-local time in ns since switch start (the simulator's clock
            minus the switch's start time). Fabric time = clock() + clock_offset (mod 2^48).

    Per-packet API: :meth:`ingress`, :meth:`egress`. Control API (``Target``): :meth:`write`,
    :meth:`read_counter`, :meth:`set_clock_offset`, :meth:`poll_digests`; plus :meth:`entries`
    and :meth:`default_action` for tests and the controller's diffing.
    """

    def __init__(self, name: str, clock: Callable[[], int]) -> None:
        self.name = name
        self._clock = clock
        # Stored entries per table: entry key -> TableEntry (what read-back returns).
        self._tables: dict[str, dict[TableEntryKey, TableEntry]] = {t: {} for t in _SCHEMAS}
        self._defaults: dict[str, TableEntry] = {
            t: TableEntry(table=t, match={}, action=a, params=dict(p), is_default=True)
            for t, (a, p) in _INITIAL_DEFAULTS.items()
        }
        # Configured cells of every meter (name -> index -> config) and their token buckets
        # (name -> index -> _Meter; an unconfigured cell is green). The per-packet path uses
        # the bucket dicts through the aliases below.
        self._meter_cfgs: dict[str, dict[int, MeterConfig]] = {m: {} for m in _METER_SIZES}
        self._meter_cells: dict[str, dict[int, _Meter]] = {m: {} for m in _METER_SIZES}
        self._meters = self._meter_cells[n.DEP_METER]  # by slot
        self._agg_meters = self._meter_cells[n.AGGREGATE_METER]  # by aggregate
        self._ctl_meters = self._meter_cells[n.CONTROL_METER]  # by host ingress port
        self._claim_meters = self._meter_cells[n.UNCLAIMED_METER]  # by host ingress port
        # traffic_class entries, highest priority first: (src, dst, proto, sport, dport, qp, qclass, meter)
        self._aggregates: list[_Aggregate] = []
        self._counters: dict[str, tuple[list[int], list[int]]] = {
            c: ([0] * size, [0] * size) for c, size in _COUNTER_SIZES.items()
        }
        self._digests: list[RequestDigest] = []
        self._clone_sessions: dict[int, CloneSession] = {}  # session id -> session
        # Per-packet form: session id -> replica port (the same dict's values, kept in step).
        self._clone_port: dict[int, int] = {}
        # Per-packet lookup structures, rebuilt from the stored entries on write.
        # (mask, prefix -> port, -1 drop, or -2 - g for ECMP group g), longest first
        self._lpm_by_len: list[tuple[int, dict[int, int]]] = []
        self._lpm_default = -1  # port on LPM miss; -1 = drop
        self._lpm_cache: dict[int, int] = {}  # dst -> as _lpm_by_len's values
        # ECMP: selector members (member id -> member) and groups (group id -> group); the
        # per-packet form, ecmp group (the route's) -> member ports in member-id order.
        self._members: dict[int, ActionProfileMember] = {}
        self._groups: dict[int, ActionProfileGroup] = {}
        self._ecmp_ports: dict[int, tuple[int, ...]] = {}
        self._ecmp_cache: dict[tuple[int, int, int, int, int, int], int] = {}  # (group, 5-tuple) -> port
        self._back_by_len: list[tuple[int, dict[int, int]]] = []  # grant_route, same shape
        self._back_cache: dict[int, int] = {}  # src -> port, -1 = no route
        self._receiver_ports: frozenset[int] = frozenset()
        self._host_src: dict[int, int] = {}  # host_port: ingress port -> the host's address
        self._claims: dict[tuple[int, int], int] = {}  # dep_claim: (src, dep_id) -> out slot
        # slack_class resolved into a partition of the 48-bit key space: class of the key in
        # [_slack_bounds[i-1], _slack_bounds[i]) is _slack_classes[i] (one bisect per packet).
        self._slack_bounds: list[int] = []
        self._slack_classes: list[int] = [QUEUE_SLACK_LEAST_URGENT]  # qclass
        # dep_grant: (src, dep_id) -> (share?, kbps, epoch, lease_us, slot)
        self._grants: dict[tuple[int, int], tuple[bool, int, int, int, int]] = {}
        self._share_lease_us = 0
        # Registers (soft state: zero at start and after restart_registers()) and the share
        # tables, of the receiver ports (port_share, spare_level; by egress port) and of the
        # in-links (link_share, link_spare_level; by ingress port).
        self._ports = _Shares()
        self._links = _Shares(weighted=True)
        self._dep_class = [0] * n.DEP_SLOTS
        self._dep_link_class = [0] * n.DEP_SLOTS
        self._dep_link_port = [0] * n.DEP_SLOTS
        self._dep_link_weight = [0] * n.DEP_SLOTS
        # out-links at the sender's ToR (out_share, out_spare_level; by egress port), by out slot
        self._outs = _Shares(weighted=True)
        self._dep_out_class = [0] * n.DEP_SLOTS
        self._dep_out_port = [0] * n.DEP_SLOTS
        self._dep_out_weight = [0] * n.DEP_SLOTS
        self._dep_out_rate = [0] * n.DEP_SLOTS
        self._port_gen = [0] * n.NUM_PORTS
        self._dep_ended = [0] * n.DEP_SLOTS
        # The port's holder: sole counts (as class counts, of the dependencies whose last packet
        # said FLAG_SOLE), and per port the holder's slot (0: none), 1 + its urgency, when its
        # last packet passed and its finish estimate (fabric ns).
        self._dep_sole = [0] * n.DEP_SLOTS
        self._sole_loads = [[0] * n.NUM_PORTS for _ in range(n.URGENCY_CLASSES)]
        self._holder_slot = [0] * n.NUM_PORTS
        self._holder_class = [0] * n.NUM_PORTS
        self._holder_seen = [0] * n.NUM_PORTS
        self._holder_finish = [0] * n.NUM_PORTS
        self._holder_start = [0] * n.NUM_PORTS
        self._holder_cfg = (0, 0, 0)  # holder table: (idle_ns, release_bytes, preempt_ns); idle 0: off
        self._hold_waiting = False  # this packet's dependency waits for the holder (FLAG_SOLE on its GRANT)
        self._default_grant = (0, 0, 0, n.DEFAULT_METER_SLOT)  # (kbps, epoch 0, lease_us, slot)
        self._offset = 0
        self._ecn_threshold = ECN_THRESHOLD_OFF
        for table in _SCHEMAS:
            if table in self._defaults or table in _CONST_DEFAULT_TABLES:
                self._rebuild(table)
        self._flow_bytes = self._counters[n.DEP_BYTES]
        self._port_tx = self._counters[n.PORT_TX_BYTES]
        self._qhist = self._counters[n.QDEPTH_HIST]
        self._malformed = self._counters[n.MALFORMED]
        self._forged = self._counters[n.FORGED]
        self._ecn_marked = self._counters[n.ECN_MARKED]

    # ------------------------------------------------------------------ control plane

    def write(self, updates: Sequence[Update]) -> None:
        """Apply a batch of updates with P4Runtime CONTINUE_ON_ERROR semantics.

        Codes: INSERT of an existing key -> ALREADY_EXISTS; MODIFY/DELETE of a missing key ->
        NOT_FOUND; unknown table/action/param/field, missing or extra fields, values wider than
        the field, bad priority, LPM value with bits beyond its prefix, range low > high,
        meter config with INSERT/DELETE or pir < cir or an out-of-range index -> INVALID_ARGUMENT.
        Default actions: ``is_default=True`` with an empty match, MODIFY only. Clone sessions
        by session id, with the same op codes (module docstring for their ranges).

        Raises:
            TargetError: one :class:`~safs.core.errors.UpdateFailure` (index, code, message)
                per failed update; the others stay applied.
        """
        self._apply(updates, trusted=False)

    def write_trusted(self, updates: Sequence[Update]) -> None:
        """:meth:`write` for batches built by :class:`safs.core.scheduler.Scheduler`, which it uses
        when a target offers this method (an optional extension of ``Target``).

        ``dep_grant`` grant entries, ``dep_claim`` entries and ``dep_meter`` MODIFYs skip the schema checks
        (names, widths, meter ranges): the scheduler builds them from p4names constants with
        values in range by construction (``rate_bps_to_kbps`` and ``lease_ns_to_us`` clamp to
        32 bits, ``wire_epoch`` is 1..2^32-1, meter slots are below ``SchedulerConfig.
        meter_slots`` <= DEP_SLOTS, ``pir >= cir``). They are the bulk of the control
        traffic: every changed grant writes one of each. Op semantics (ALREADY_EXISTS,
        NOT_FOUND) are still checked, since the scheduler's shadow may be stale, and every other
        update is validated as in :meth:`write`. A subclass that overrides :meth:`write`
        (e.g. to inject failures) gets its :meth:`write` called instead.

        Raises:
            TargetError: as :meth:`write`.
        """
        if type(self).write is not PipelineModel.write:
            self.write(updates)
            return
        self._apply(updates, trusted=True)

    def _apply(self, updates: Sequence[Update], trusted: bool) -> None:
        failures: list[UpdateFailure] = []
        touched: set[str] = set()
        for i, upd in enumerate(updates):
            entity = upd.entity
            try:
                if isinstance(entity, MeterConfig):
                    if trusted and upd.op is Op.MODIFY and entity.meter == n.DEP_METER:
                        self._set_meter(entity)
                    else:
                        self._write_meter(upd.op, entity)
                elif isinstance(entity, TableEntry):
                    if trusted and (entity.table, entity.action) in _TRUSTED_ENTRIES and not entity.is_default:
                        self._write_keyed(upd.op, entity)
                    else:
                        self._write_entry(upd.op, entity)
                    if entity.table not in _PER_WRITE_INDEXED:  # those indexes are kept up to date per write
                        touched.add(entity.table)
                elif isinstance(entity, CloneSession):
                    self._write_clone_session(upd.op, entity)
                elif isinstance(entity, (ActionProfileMember, ActionProfileGroup)):
                    self._write_profile(upd.op, entity)
                    touched.add(n.ECMP)
                else:
                    raise _Reject("INVALID_ARGUMENT", f"unsupported entity {type(entity).__name__}")
            except _Reject as r:
                failures.append(UpdateFailure(i, r.code, r.message))
        for table in touched:
            self._rebuild(table)
        if failures:
            raise TargetError(failures)

    def _write_meter(self, op: Op, cfg: MeterConfig) -> None:
        if op is not Op.MODIFY:
            raise _Reject("INVALID_ARGUMENT", f"meter config accepts only MODIFY, got {op.value}")
        size = _METER_SIZES.get(cfg.meter)
        if size is None:
            raise _Reject("INVALID_ARGUMENT", f"unknown meter {cfg.meter!r}")
        if not 0 <= cfg.index < size:
            raise _Reject("INVALID_ARGUMENT", f"meter index must be in 0..{size - 1}, got {cfg.index}")
        for fname, v in (("cir", cfg.cir), ("cburst", cfg.cburst), ("pir", cfg.pir), ("pburst", cfg.pburst)):
            if not 0 <= v <= _METER_RATE_MAX:
                raise _Reject("INVALID_ARGUMENT", f"meter {fname} must be in 0..2^64-1, got {v}")
        if cfg.pir < cfg.cir:
            raise _Reject("INVALID_ARGUMENT", f"meter pir ({cfg.pir}) must be >= cir ({cfg.cir})")
        self._set_meter(cfg)

    def _set_meter(self, cfg: MeterConfig) -> None:
        self._meter_cfgs[cfg.meter][cfg.index] = cfg
        self._meter_cells[cfg.meter][cfg.index] = _Meter(cfg, self._clock())

    def _write_clone_session(self, op: Op, cs: CloneSession) -> None:
        sid = cs.session_id
        if isinstance(sid, bool) or not isinstance(sid, int) or not 1 <= sid <= CLONE_SESSION_ID_MAX:
            raise _Reject("INVALID_ARGUMENT", f"clone session id must be in 1..{CLONE_SESSION_ID_MAX}, got {sid!r}")
        if op is Op.DELETE:
            if sid not in self._clone_sessions:
                raise _Reject("NOT_FOUND", f"clone session {sid} does not exist")
            del self._clone_sessions[sid]
            del self._clone_port[sid]
            return
        port = cs.egress_port
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < n.NUM_PORTS:
            raise _Reject("INVALID_ARGUMENT",
                          f"clone session egress_port must be in 0..{n.NUM_PORTS - 1}, got {port!r}")
        if op is Op.INSERT:
            if sid in self._clone_sessions:
                raise _Reject("ALREADY_EXISTS", f"clone session {sid} already exists")
        elif op is Op.MODIFY:
            if sid not in self._clone_sessions:
                raise _Reject("NOT_FOUND", f"clone session {sid} does not exist")
        else:
            raise _Reject("INVALID_ARGUMENT", f"unknown op {op!r}")
        self._clone_sessions[sid] = cs
        self._clone_port[sid] = port

    def _write_profile(self, op: Op, e: ActionProfileMember | ActionProfileGroup) -> None:
        """Members and groups of ``ecmp_selector``, as BMv2's PI answers: a group's members must
        exist, a member in a group or a group an entry uses cannot be deleted."""
        if e.profile != n.ECMP_SELECTOR:
            raise _Reject("INVALID_ARGUMENT", f"unknown action profile {e.profile!r}")
        if isinstance(e, ActionProfileMember):
            store: dict[int, Any] = self._members
            ident, limit = e.member_id, n.ECMP_MEMBERS
            if op is not Op.DELETE:
                spec = _SCHEMAS[n.ECMP].actions
                if e.action not in spec:
                    raise _Reject("INVALID_ARGUMENT", f"action {e.action!r} not in {n.ECMP}")
                self._check_params(cast(TableEntry, e), spec[e.action], _SCHEMAS[n.ECMP].param_names[e.action])
            elif any(ident in g.members for g in self._groups.values()):
                raise _Reject("FAILED_PRECONDITION", f"member {ident} is in a group")
        else:
            store, ident, limit = self._groups, e.group_id, n.ECMP_GROUPS
            if op is not Op.DELETE:
                missing = [m for m in e.members if m not in self._members]
                if missing or not e.members or len(set(e.members)) != len(e.members):
                    raise _Reject("INVALID_ARGUMENT" if not missing else "NOT_FOUND",
                                  f"group {ident} members must be distinct existing members, got {list(e.members)}")
                if e.max_size and len(e.members) > e.max_size:
                    raise _Reject("INVALID_ARGUMENT", f"group {ident} has more members than max_size {e.max_size}")
            elif any(t.group_id == ident for t in self._tables[n.ECMP].values()):
                raise _Reject("FAILED_PRECONDITION", f"group {ident} is used by an {n.ECMP} entry")
        if isinstance(ident, bool) or not isinstance(ident, int) or not 1 <= ident < (1 << 32):
            raise _Reject("INVALID_ARGUMENT", f"id must be in 1..2^32-1, got {ident!r}")
        if op is Op.INSERT:
            if ident in store:
                raise _Reject("ALREADY_EXISTS", f"{e.key()[0]} {ident} already exists")
            if len(store) >= limit:
                raise _Reject("RESOURCE_EXHAUSTED", f"{n.ECMP_SELECTOR} holds at most {limit} {e.key()[0]}s")
            store[ident] = e
        elif op in (Op.MODIFY, Op.DELETE):
            if ident not in store:
                raise _Reject("NOT_FOUND", f"{e.key()[0]} {ident} does not exist")
            if op is Op.MODIFY:
                store[ident] = e
            else:
                del store[ident]
        else:
            raise _Reject("INVALID_ARGUMENT", f"unknown op {op!r}")

    def _write_entry(self, op: Op, e: TableEntry) -> None:
        schema = _SCHEMAS.get(e.table)
        if schema is None:
            raise _Reject("INVALID_ARGUMENT", f"unknown table {e.table!r}")
        if e.table == n.ECMP or e.group_id:
            if e.table != n.ECMP:
                raise _Reject("INVALID_ARGUMENT", f"{e.table} is a direct table: give an action, not a group")
            if op is not Op.DELETE and (e.action or e.params or e.group_id not in self._groups):
                raise _Reject("NOT_FOUND" if not e.action else "INVALID_ARGUMENT",
                              f"{n.ECMP} entries name an existing {n.ECMP_SELECTOR} group, got "
                              f"group {e.group_id} action {e.action!r}")
            self._check_match(e, schema)
            self._write_keyed(op, e)
            return
        if e.action not in schema.actions:
            raise _Reject("INVALID_ARGUMENT", f"action {e.action!r} not in table {e.table}")
        self._check_params(e, schema.actions[e.action], schema.param_names[e.action])
        if e.is_default:
            if op is not Op.MODIFY:
                raise _Reject("INVALID_ARGUMENT", f"default action of {e.table} accepts only MODIFY")
            if e.match:
                raise _Reject("INVALID_ARGUMENT", "default entry must have an empty match")
            if e.table in _CONST_DEFAULT_TABLES:
                raise _Reject("INVALID_ARGUMENT", f"default action of {e.table} is const")
            self._defaults[e.table] = e
            return
        if not schema.keys:
            raise _Reject("INVALID_ARGUMENT", f"{e.table} is keyless: write its default action")
        if e.action not in schema.entry_actions:
            raise _Reject("INVALID_ARGUMENT", f"action {e.action!r} is default-only in {e.table}")
        self._check_match(e, schema)
        self._write_keyed(op, e)

    def _write_keyed(self, op: Op, e: TableEntry) -> None:
        """Apply a schema-valid, non-default entry: INSERT/MODIFY/DELETE by key."""
        table = self._tables[e.table]
        key = e.key()
        if op is Op.INSERT:
            if key in table:
                raise _Reject("ALREADY_EXISTS", f"entry already exists in {e.table}: {dict(e.match)}")
            table[key] = e
        elif op is Op.MODIFY:
            if key not in table:
                raise _Reject("NOT_FOUND", f"no such entry in {e.table}: {dict(e.match)}")
            table[key] = e
        elif op is Op.DELETE:
            if key not in table:
                raise _Reject("NOT_FOUND", f"no such entry in {e.table}: {dict(e.match)}")
            del table[key]
        else:
            raise _Reject("INVALID_ARGUMENT", f"unknown op {op!r}")
        if e.table == n.DEP_GRANT:
            # The scheduler rewrites dep_grant entries often: update the per-packet index for
            # this one entry instead of rebuilding it from the whole table (the result is the
            # same as _rebuild's: one tuple per stored entry, by (sender, dependency)).
            key2 = _grant_key(e)
            if op is Op.DELETE:
                del self._grants[key2]
            else:
                self._grants[key2] = _grant_tuple(e)
        elif e.table == n.DEP_CLAIM:  # the same for dep_claim (one per dependency)
            if op is Op.DELETE:
                self._claims.pop(_grant_key(e), None)
            else:
                self._claims[_grant_key(e)] = e.params["out_slot"]

    @staticmethod
    def _check_params(e: TableEntry, spec: tuple[tuple[str, int], ...], want: frozenset[str]) -> None:
        params = e.params
        if params.keys() != want:
            raise _Reject("INVALID_ARGUMENT", f"{e.action} params must be {sorted(want)}, got {sorted(params)}")
        for pname, bits in spec:
            v = params[pname]
            if not isinstance(v, int) or not 0 <= v < (1 << bits):
                raise _Reject("INVALID_ARGUMENT", f"{e.action}.{pname} must be in 0..2^{bits}-1, got {v!r}")

    @staticmethod
    def _check_match(e: TableEntry, schema: _TableSchema) -> None:
        want = schema.key_names
        if e.match.keys() != want:
            raise _Reject("INVALID_ARGUMENT", f"{e.table} match fields must be {sorted(want)}, got {sorted(e.match)}")
        has_range = False
        for fname, kind, bits in schema.keys:
            v = e.match[fname]
            limit = 1 << bits
            if kind == "exact":
                if not isinstance(v, int) or not 0 <= v < limit:
                    raise _Reject("INVALID_ARGUMENT", f"{fname} must be an int in 0..2^{bits}-1, got {v!r}")
            elif kind == "lpm":
                if not isinstance(v, Lpm) or not 0 <= v.prefix_len <= bits or not 0 <= v.value < limit:
                    raise _Reject("INVALID_ARGUMENT", f"{fname} must be Lpm within {bits} bits, got {v!r}")
                host_bits = (1 << (bits - v.prefix_len)) - 1
                if v.value & host_bits:
                    raise _Reject("INVALID_ARGUMENT", f"{fname} has bits set beyond /{v.prefix_len}: {v!r}")
            elif kind == "ternary":
                has_range = True
                if (not isinstance(v, Ternary) or not 0 <= v.value < limit or not 0 <= v.mask < limit
                        or v.value & v.mask != v.value):
                    raise _Reject("INVALID_ARGUMENT",
                                  f"{fname} must be Ternary within {bits} bits with value & mask == value, got {v!r}")
            else:  # range
                has_range = True
                if not isinstance(v, Range) or not 0 <= v.low < limit or not 0 <= v.high < limit or v.low > v.high:
                    raise _Reject("INVALID_ARGUMENT", f"{fname} must be Range low<=high within {bits} bits, got {v!r}")
        if has_range and e.priority <= 0:
            raise _Reject("INVALID_ARGUMENT", f"{e.table} needs priority > 0, got {e.priority}")
        if not has_range and e.priority != 0:
            raise _Reject("INVALID_ARGUMENT", f"{e.table} takes no priority, got {e.priority}")

    def _rebuild(self, table: str) -> None:
        """Recompute the per-packet lookup structure of ``table`` from its stored entries."""
        entries = self._tables[table].values()
        default = cast(TableEntry, self._defaults.get(table))  # None only where a branch does not read it
        if table == n.IPV4_LPM:
            self._lpm_by_len = _lpm_index(entries, n.F_DST_ADDR)
            self._lpm_default = default.params["port"] if default.action == n.ACT_SET_EGRESS else -1
            self._lpm_cache = {}
        elif table == n.ECMP:
            self._ecmp_ports = {
                cast(int, e.match[n.F_ECMP_GROUP]):
                    tuple(self._members[m].params["port"] for m in sorted(self._groups[e.group_id].members))
                for e in entries}
            self._ecmp_cache = {}
        elif table == n.GRANT_ROUTE:
            self._back_by_len = _lpm_index(entries, n.F_SRC_ADDR)
            self._back_cache = {}
        elif table == n.RECEIVER_PORT:
            self._receiver_ports = frozenset(cast(int, e.match[n.F_EGRESS_PORT]) for e in entries)
        elif table == n.HOST_PORT:
            self._host_src = {cast(int, e.match[n.F_INGRESS_PORT]): e.params["src_addr"] for e in entries}
        elif table == n.DEP_CLAIM:
            self._claims = {_grant_key(e): e.params["out_slot"] for e in entries}
        elif table == n.SLACK_CLASS:
            self._slack_bounds, self._slack_classes = _range_partition(
                [
                    (e.priority, cast(Range, e.match[n.F_SLACK_KEY]).low, cast(Range, e.match[n.F_SLACK_KEY]).high,
                     e.params["qclass"])
                    for e in entries
                ],
                default.params["qclass"],
            )
        elif table == n.DEP_GRANT:
            self._grants = {_grant_key(e): _grant_tuple(e) for e in entries}
        elif table in _SHARE_SIDES:
            side, field = getattr(self, _SHARE_SIDES[table]), _SHARE_KEY[table]
            side.shares = {
                (cast(int, e.match[field]), cast(int, e.match[n.F_LOAD]), cast(int, e.match[n.F_MODE])):
                    e.params["rate_kbps"] for e in entries}
        elif table in _SPARE_SIDES:
            side = getattr(self, _SPARE_SIDES[table])
            side.spare = _top_bytes_ranges(entries, _SHARE_KEY[table], "level", 1)
        elif table == n.TOP_BOOST:
            self._ports.boost = _top_bytes_ranges(entries, n.F_EGRESS_PORT, "boost", n.TOP_BOOST_ONE)
        elif table == n.SHARE_LEASE:
            self._share_lease_us = default.params["lease_us"]
        elif table == n.HOLDER:
            p = default.params
            self._holder_cfg = (p["idle_ns"], p["release_bytes"], p["preempt_ns"])
        elif table == n.CLOCK_OFFSET:
            self._offset = default.params["offset_ns"]
        elif table == n.DEFAULT_GRANT:
            p = default.params
            self._default_grant = (p["rate_kbps"], 0, p["lease_us"], p["meter_slot"])
        elif table == n.ECN_THRESHOLD:
            self._ecn_threshold = default.params["qdepth_pkts"]
        elif table == n.TRAFFIC_CLASS:
            self._aggregates = [_aggregate_tuple(e) for e in sorted(entries, key=lambda e: -e.priority)]

    def entries(self, table: str) -> list[TableEntry]:
        """Installed (non-default) entries of ``table``, in insertion order.

        Raises:
            InvalidInput: ``table`` is not a table of the pipeline.
        """
        if table not in self._tables:
            raise InvalidInput("table", f"must be one of {sorted(self._tables)}, got {table!r}")
        return list(self._tables[table].values())

    def profile_members(self) -> list[ActionProfileMember]:
        """Installed ``ecmp_selector`` members, by member id."""
        return [self._members[m] for m in sorted(self._members)]

    def profile_groups(self) -> list[ActionProfileGroup]:
        """Installed ``ecmp_selector`` groups, by group id."""
        return [self._groups[g] for g in sorted(self._groups)]

    def default_action(self, table: str) -> TableEntry:
        """The current default action of ``table`` (an ``is_default`` entry).

        Raises:
            InvalidInput: unknown table, or one whose default is const.
        """
        if table not in self._defaults:
            raise InvalidInput(
                "table", f"must be one of {sorted(self._defaults)} (others have const defaults), got {table!r}"
            )
        return self._defaults[table]

    def clone_sessions(self) -> list[CloneSession]:
        """Installed clone sessions, by session id."""
        return [self._clone_sessions[sid] for sid in sorted(self._clone_sessions)]

    def meter_config(self, index: int, meter: str = n.DEP_METER) -> MeterConfig | None:
        """The config of ``meter[index]`` (``dep_meter``, ``aggregate_meter``, ``control_meter``
        or ``unclaimed_meter``), or None when never configured (always green).

        Raises:
            KeyError: no meter of that name in the program.
        """
        return self._meter_cfgs[meter].get(index)

    def _control_check(self, pkt: Packet, in_port: int) -> Forged | None:
        """source_guard.p4 for a REQUEST/DONE from a host port: too long, or RED at the port's
        control_meter (an unconfigured meter is green)."""
        if pkt.size > (MAX_REQUEST_FRAME_BYTES if pkt.safs_type == _REQUEST else MAX_DONE_FRAME_BYTES):
            return Forged.OVERSIZED_CONTROL
        meter = self._ctl_meters.get(in_port)
        if meter is not None and meter.color(pkt.size, self._clock()) == _RED:
            return Forged.CONTROL_RATE
        return None

    def read_state(self, meter_cells: Mapping[str, Sequence[int]] | None = None) -> SwitchState:
        """What :meth:`safs.targets.p4rt.target.P4RuntimeTarget.read_state` reads from a switch:
        every table's entries and writable default entries, the configured meter cells
        (``meter_cells``: meter name -> indices; None: all), clone sessions, ECMP members and
        groups."""
        entries = [e for t in self._tables for e in self._tables[t].values()] + list(self._defaults.values())
        meters = []
        for name, cfg in self._meter_cfgs.items():
            cells = cfg.keys() if meter_cells is None else meter_cells.get(name, ())
            meters += [cfg[i] for i in cells if i in cfg]
        profiles: list[ActionProfileMember | ActionProfileGroup] = [*self.profile_members(), *self.profile_groups()]
        return SwitchState(tuple(entries), tuple(meters), tuple(self.clone_sessions()), tuple(profiles))

    def close(self) -> None:
        """Nothing to close (in-process); for callers that close every switch they opened."""

    def read_counter_cells(self, counter: str, indices: Sequence[int]) -> list[CounterValue]:
        """:meth:`read_counter` of each index, in order (one P4Runtime Read on a switch)."""
        return [self.read_counter(counter, i) for i in indices]

    def read_counter(self, counter: str, index: int) -> CounterValue:
        """Bytes and packets of ``counter[index]``.

        Raises:
            InvalidInput: unknown counter name, or index outside ``0..size-1``.
        """
        cells = self._counters.get(counter)
        if cells is None:
            raise InvalidInput("counter", f"must be one of {sorted(self._counters)}, got {counter!r}")
        size = len(cells[0])
        if not 0 <= index < size:
            raise InvalidInput("index", f"must be in 0..{size - 1} for {counter}, got {index}")
        return CounterValue(byte_count=cells[0][index], packet_count=cells[1][index])

    def set_clock_offset(self, offset_ns: int) -> None:
        """Set fabric time = switch clock + ``offset_ns`` (reduced mod 2^48, so negative is fine).

        Writes the ``clock_offset`` table's default action, as the P4Runtime target does.
        """
        self.write(
            [
                Update(
                    Op.MODIFY,
                    TableEntry(
                        table=n.CLOCK_OFFSET,
                        match={},
                        action=n.ACT_SET_CLOCK_OFFSET,
                        params={"offset_ns": offset_ns & TIME_MASK},
                        is_default=True,
                    ),
                )
            ]
        )

    def poll_digests(self) -> list[RequestDigest]:
        """Return and clear the queued REQUEST digests (oldest first)."""
        out, self._digests = self._digests, []
        return out

    def probe_queues(self, queues: Sequence[int], timeout_s: float = 0.0) -> set[int]:
        """The start-up probe of :meth:`P4RuntimeTarget.probe_queues`, true to this model: it
        has :data:`~safs.core.protocol.NUM_QUEUES` (8) priority queues and no packet I/O, so
        every queue in 0..7 of ``queues`` answers at once (``timeout_s`` is not used). Raises
        nothing."""
        return {q for q in queues if 0 <= q < NUM_QUEUES}

    def now(self) -> int:
        """Fabric time as the switch sees it: (clock() + clock_offset) mod 2^48, in ns."""
        return (self._clock() + self._offset) & TIME_MASK

    # ------------------------------------------------------------------ data plane

    def _route(self, dst: int) -> int:
        port = self._lpm_cache.get(dst)
        if port is None:
            port = _lpm_lookup(self._lpm_by_len, dst, self._lpm_default)
            self._lpm_cache[dst] = port
        return port

    def _ecmp_port(self, group: int, pkt: Packet) -> int:
        """The ECMP member port ``pkt`` hashes to in route group ``group`` (-1: no ecmp entry, drop)."""
        tcp_udp = pkt.proto in (PROTO_TCP, PROTO_UDP)
        sport, dport = (pkt.sport, pkt.dport) if tcp_udp else (0, 0)
        key = (group, pkt.src, pkt.dst, pkt.proto, sport, dport)
        port = self._ecmp_cache.get(key)
        if port is None:
            ports = self._ecmp_ports.get(group)
            port = ecmp.select(ports, ecmp.flow_hash(pkt.src, pkt.dst, pkt.proto, sport, dport)) if ports else -1
            self._ecmp_cache[key] = port
        return port

    def _route_back(self, src: int) -> int:
        port = self._back_cache.get(src)
        if port is None:
            port = _lpm_lookup(self._back_by_len, src, -1)
            self._back_cache[src] = port
        return port

    def ingress(self, pkt: Packet, in_port: int) -> list[tuple[int, Packet]]:
        """Parser + ingress for one packet arriving on ``in_port``.

        Returns the ``(egress_port, packet)`` pairs to enqueue, each with ``priority`` set;
        ``[]`` when dropped (IPv4 LPM miss or drop action). Mutates ``pkt`` (priority, qclass,
        colour; a REQUEST at the receiver's ToR becomes the GRANT); a stale-epoch DATA adds a
        new GRANT packet.
        """
        t = pkt.safs_type
        safs_ok = False
        if t != 0:
            if pkt.safs_truncated:
                self._malformed[1][Malformed.TRUNCATED] += 1
            elif pkt.safs_version != SAFS_VERSION:
                self._malformed[1][Malformed.BAD_VERSION] += 1
            elif t not in _KNOWN_TYPES:
                self._malformed[1][Malformed.BAD_TYPE] += 1
            else:
                safs_ok = True
        host_src = self._host_src.get(in_port)
        out_slot = 0
        if host_src is not None:  # source_guard.p4
            forged = (Forged.SPOOFED_SOURCE if pkt.src != host_src
                      else Forged.GRANT_FROM_HOST if safs_ok and t == _GRANT
                      else self._control_check(pkt, in_port) if safs_ok and (t == _REQUEST or t == _DONE)
                      else None)
            if forged is not None:
                self._forged[1][forged] += 1
                return []
            if safs_ok and (t == _DATA or t == _REQUEST):
                pkt.flags &= ~FLAG_CAPPED  # only this ToR sets it
                claimed = self._claims.get((pkt.src, pkt.dep_id))
                if claimed is not None:
                    out_slot = claimed
                elif t == _DATA:
                    meter = self._claim_meters.get(in_port)
                    if meter is not None and meter.color(pkt.size, self._clock()) != _GREEN:
                        pkt.flags |= FLAG_DEMOTED
                        self._forged[1][Forged.UNCLAIMED_DATA] += 1
        elif safs_ok and t == _GRANT:  # a GRANT from the fabric: to a host of this ToR?
            out_slot = self._claims.get((pkt.dst, pkt.dep_id), 0)
        port = self._route(pkt.dst)
        if port < -1:
            port = self._ecmp_port(-2 - port, pkt)
        if port < 0:
            return []
        if not safs_ok:
            if not self._aggregates:
                pkt.priority = QUEUE_BEST_EFFORT
                return [(port, pkt)]
            return self._traffic_class(pkt, port)
        at_receiver = port in self._receiver_ports
        if t != _DATA and t != _REQUEST:  # GRANT, DONE: control, forwarded
            if out_slot and t == _GRANT:  # to a host of this ToR: at most its out-link cap
                cap = self._dep_out_rate[out_slot]
                if cap and cap < pkt.rate_kbps:
                    pkt.rate_kbps = cap
            pkt.qclass = pkt.priority = QUEUE_CONTROL
            pkt.color = _UNMETERED
            return [(port, pkt)]
        local = self._clock()
        now = (local + self._offset) & TIME_MASK
        qclass = self._slack_classes[bisect_right(self._slack_bounds, ((pkt.ts - now) & TIME_MASK) ^ HALF)]
        if pkt.flags & FLAG_DEMOTED and t == _DATA:  # demoted at the sender's ToR: queue 1, least urgent
            qclass = QUEUE_OVER_RATE
        if not at_receiver:
            pkt.color = _UNMETERED
            if out_slot:
                self._out_link(pkt, port, out_slot, qclass, now)
            if t == _DATA:
                pkt.qclass = pkt.priority = qclass
            else:
                pkt.qclass = pkt.priority = QUEUE_CONTROL
            return [(port, pkt)]
        grant = self._grants.get((pkt.src, pkt.dep_id))
        kbps, epoch, lease, slot = self._default_grant
        stale = False
        self._hold_waiting = False
        if grant is None:
            pass
        elif grant[0]:  # a share grant: the port's share at the load after this packet
            slot = grant[4]
            link = -1 if host_src else in_port  # host_port hit (a host address is never 0)
            kbps, epoch, lease, stale = self._share_grant(pkt, port, link, slot, qclass, kbps, lease, now)
        else:
            kbps, epoch, lease, slot = grant[1], grant[2], grant[3], grant[4]
        if t == _DATA:
            pkt.qclass = qclass
            fb = self._flow_bytes
            fb[0][slot] += pkt.size
            fb[1][slot] += 1
            meter = self._meters.get(slot)
            color = _GREEN if meter is None else meter.color(pkt.size, local)
            pkt.color = color
            pkt.priority = qclass if color == _GREEN else QUEUE_OVER_RATE
            if grant is not None and not pkt.flags & FLAG_LAST and not stale and _push_wanted(pkt, kbps):
                gport = self._route_back(pkt.src)
                # Cloned to session gport + base; no session, no clone (as BMv2).
                cport = self._clone_port.get(gport + n.CLONE_SESSION_BASE) if gport >= 0 else None
                if cport is not None:
                    g = Packet(pkt.dst, pkt.src, PROTO_UDP, pkt.dport, SAFS_UDP_PORT, CONTROL_PACKET_BYTES)
                    g.safs_version = SAFS_VERSION
                    g.safs_type = _GRANT
                    g.flags = self._grant_flags(pkt.flags)
                    g.flow_id = pkt.flow_id
                    g.dep_id = pkt.dep_id
                    g.remaining = pkt.remaining
                    g.ts = now
                    g.rate_kbps, g.epoch, g.lease_us = kbps, epoch, lease
                    g.qclass = g.priority = QUEUE_CONTROL
                    g.color = _UNMETERED
                    return [(port, pkt), (cport, g)]
            return [(port, pkt)]
        pkt.qclass = pkt.priority = QUEUE_CONTROL
        pkt.color = _UNMETERED
        gport = self._route_back(pkt.src)
        if gport < 0:  # no route back: forwarded to the host as a plain REQUEST
            return [(port, pkt)]
        if grant is None:
            self._digests.append(RequestDigest(pkt.flow_id, pkt.src, pkt.dst, pkt.dep_id, pkt.remaining, pkt.ts))
        pkt.src, pkt.dst = pkt.dst, pkt.src
        pkt.safs_type = _GRANT
        pkt.flags = self._grant_flags(pkt.flags)
        pkt.rate_kbps, pkt.epoch, pkt.lease_us = kbps, epoch, lease
        pkt.ts = now
        return [(gport, pkt)]

    def _out_link(self, pkt: Packet, port: int, slot: int, qclass: int, now: int) -> None:
        """A local sender's DATA or REQUEST at its out-link (grant_enforcer.p4's update_out_link
        and the cap after it): the dependency moves to the packet's urgency at ``port`` (idle on
        LAST; it leaves the port it was counted at first if that was another), its cap is the
        out_share entry (x out_spare_level when waiting; 0: no entry), kept for the GRANTs
        coming back; a DATA holding more than the cap (by over 1/256) gets held rate 0 (the
        receiver's ToR then pushes a GRANT, capped here), one holding it (within 1/32) FLAG_CAPPED."""
        urgency, cls = _urgency_class(pkt, qclass)
        is_data = pkt.safs_type == _DATA
        outs = self._outs
        held = self._dep_out_class[slot]
        held_w = self._dep_out_weight[slot]
        weight = _link_weight(pkt.remaining)
        was = self._dep_out_port[slot]
        if was != port and held:
            outs.move(was, held, 0)
            outs.weigh(was, held, held_w, 0, 0)
            held = 0
        outs.move(port, held, cls)
        outs.weigh(port, held, held_w, cls, weight[0])
        self._dep_out_class[slot] = cls
        self._dep_out_port[slot] = port
        self._dep_out_weight[slot] = weight[0]
        kbps = outs.rate(port, urgency, is_data and cls != 0, pkt.size, now, weight)
        cap = kbps if cls and kbps is not None else 0
        self._dep_out_rate[slot] = cap
        if is_data and cap:
            rate = pkt.rate_kbps
            if rate > cap and rate - cap > (cap >> 8):
                pkt.rate_kbps = 0
            elif rate >= cap - (cap >> 5):
                pkt.flags |= FLAG_CAPPED

    def _grant_flags(self, flags: int) -> int:
        """A GRANT's flags: the packet's, with FLAG_SOLE set iff its dependency waits for the
        port's holder (its sender then polls without back-off)."""
        return flags | FLAG_SOLE if self._hold_waiting else flags & ~FLAG_SOLE

    def _traffic_class(self, pkt: Packet, port: int) -> list[tuple[int, Packet]]:
        """traffic_class.p4: the first (highest-priority) matching aggregate sets the queue; a
        metered one marks RED packets CE when ECN-capable and drops them otherwise."""
        tcp_udp = pkt.proto in (PROTO_TCP, PROTO_UDP)
        sport, dport = (pkt.sport, pkt.dport) if tcp_udp else (0, 0)
        qp = pkt.roce_qp if pkt.proto == PROTO_UDP and dport == n.ROCE_V2_UDP_PORT else 0
        for src, dst, proto, sp, dp, rqp, qclass, meter in self._aggregates:
            if (pkt.src & src[1] == src[0] and pkt.dst & dst[1] == dst[0] and pkt.proto & proto[1] == proto[0]
                    and sp[0] <= sport <= sp[1] and dp[0] <= dport <= dp[1] and qp & rqp[1] == rqp[0]):
                pkt.priority = qclass
                m = self._agg_meters.get(meter) if meter >= 0 else None
                if m is not None and m.color(pkt.size, self._clock()) == _RED:
                    if pkt.ecn == 0:
                        return []
                    pkt.ecn = ECN_CE
                return [(port, pkt)]
        pkt.priority = QUEUE_BEST_EFFORT
        return [(port, pkt)]

    def _share_grant(self, pkt: Packet, port: int, link: int, slot: int, qclass: int, default_kbps: int,
                     default_lease: int, now: int) -> tuple[int, int, int, bool]:
        """A share grant's (rate_kbps, epoch, lease_us, stale) for ``pkt`` (grant_enforcer.p4's
        update_share and update_link): the dependency moves to the packet's urgency (6 -
        ``qclass``; 4 if background; idle on LAST), the port's class counts and generation
        follow, and the rate is the port_share entry for (its class's count, alone or top) or
        (the waiting count, waiting) as the most urgent non-empty class decides; no entry: the
        default grant. ``stale``: an original DATA (neither LAST nor RESENT) of the transfer
        whose LAST already passed (``dep_ended``), which changes nothing and gets no GRANT
        pushed. A waiting dependency's rate is multiplied by the port's spare level: how many
        reserves the top class left unused in the last TOP_WINDOW_NS, or in the current one so
        far when it used more (``now``: fabric ns).

        ``link``: the ingress port when it does not face a host (-1 if it does): the dependency
        is counted there too, in its own class counts, and where link_share has an entry for
        the link its rate is the smaller of the two shares (the in-link is a contended fabric
        link into this ToR)."""
        urgency, cls = _urgency_class(pkt, qclass)
        is_data = pkt.safs_type == _DATA
        # An original DATA of the transfer whose LAST already passed (a straggler it overtook)
        # is stale: it would count an ended transfer as active, in the most urgent class since
        # it is late by now, until the dependency's next LAST. Retransmissions (RESENT) count.
        stale = (is_data and cls != 0 and not pkt.flags & FLAG_RESENT
                 and self._dep_ended[slot] == pkt.flow_id)
        if cls == 0:
            self._dep_ended[slot] = pkt.flow_id
        held = self._dep_class[slot]
        if stale:
            cls = held
            urgency = held - 1
        self._dep_class[slot] = cls
        gen = self._port_gen[port]
        if held != cls:
            self._ports.move(port, held, cls)
            gen = (gen + 1) & EPOCH_MAX or 1  # epoch 0 means "no grant"
            self._port_gen[port] = gen
        top_data = is_data and not stale and cls != 0  # counts in the top-class window if top
        # The in-link: the dependency leaves the link it was counted at if the packet came in
        # on another one (a new path), then moves as at the port.
        links = self._links
        link_port = self._dep_link_port[slot]
        link_held = self._dep_link_class[slot]
        held_w = self._dep_link_weight[slot]
        if link_port != link and link_held:
            links.move(link_port, link_held, 0)
            links.weigh(link_port, link_held, held_w, 0, 0)
            link_held = 0
        link_kbps = None
        weight = _link_weight(pkt.remaining)
        link_w = held_w if stale else weight[0]  # a stale packet keeps its weight
        self._dep_link_weight[slot] = link_w
        if link >= 0:
            link_cls = link_held if stale else cls
            links.move(link, link_held, link_cls)
            links.weigh(link, link_held, held_w, link_cls, link_w)
            self._dep_link_class[slot] = link_cls
            self._dep_link_port[slot] = link
            link_kbps = links.rate(link, urgency, top_data, pkt.size, now, weight)
        else:
            self._dep_link_class[slot] = 0
        # A dependency is sole at the port if its packet says so and no contended in-link cuts
        # its rate below the port's (a holder held back by its in-link would idle the port).
        sole = bool(pkt.flags & FLAG_SOLE) and link_kbps is None
        kbps = self._port_rate(pkt, port, slot, cls, urgency, sole, top_data, stale, now)
        if cls == 0 or kbps is None:
            return default_kbps, 0, default_lease, stale
        if link_kbps is not None and link_kbps < kbps:
            kbps = link_kbps
        return kbps, gen, self._share_lease_us, stale

    def _port_rate(self, pkt: Packet, port: int, slot: int, cls: int, urgency: int, sole: bool,
                   top_data: bool, stale: bool, now: int) -> int | None:
        """The port's share for the dependency in ``slot`` (grant_enforcer.p4's pick_port_share),
        kbit/s (None: no entry), with the holder rule: when two or more sole dependencies are in
        the port's most urgent class they count as one, and one at a time (the holder) gets that
        one's share; the others wait (the waiting share, without the spare level: they share
        the holder's queue, so the holder could not take back a spare they used). A sole
        dependency takes the port when no one holds it, the holder left the class, its DATA
        finds the holder silent for ``idle_ns`` or it finishes before the holder (finish = latest
        start + remaining at 100 Gbit/s) by more than ``preempt_ns``, or at all if it is shorter
        and its time fits in the holder's slack (``holder_start`` - now); a holder with at most
        ``release_bytes`` left frees the port and keeps its share (the next one ramps up
        meanwhile). A stale packet moves nothing. A top-class share (alone or top) of a load of
        2 or more is then multiplied by the port's top_boost / 256 (top-class overcommit)."""
        ports = self._ports
        ports.roll(port, now)
        spare = True
        top, n_top, rest = ports.top(port)
        idle_ns, release_bytes, preempt_ns = self._holder_cfg
        held_sole = self._dep_sole[slot]
        sole_cls = held_sole if stale else (cls if sole else 0)
        _move_count(self._sole_loads, port, held_sole, sole_cls)
        self._dep_sole[slot] = sole_cls
        n_sole = self._sole_loads[top][port] if idle_ns else 0
        load, waiting = (n_top - n_sole + 1, rest + n_sole - 1) if n_sole >= 2 else (n_top, rest)
        mode = n.SHARE_TOP if waiting else n.SHARE_ALONE
        if urgency != top:
            load, mode = waiting, n.SHARE_WAITING
        h_slot = self._holder_slot[port]
        h_cls = self._holder_class[port]
        if h_slot == slot and (h_cls != cls or not sole_cls):
            h_slot = 0  # the holder left the class or is no longer sole
        if urgency == top and n_sole >= 2 and sole_cls:
            rem = pkt.remaining
            if rem <= release_bytes:
                if h_slot == slot:
                    h_slot = 0
            else:
                dur = n.holder_time_ns(rem)  # its time at 100 Gbit/s
                finish = (pkt.ts + dur) & TIME_MASK
                ahead = (self._holder_finish[port] - finish) & TIME_MASK  # < HALF: finishes first
                # A shorter claimant finishing first whose whole time fits in the holder's slack
                # (the holder still starts by its latest start after it) costs the holder nothing.
                shorter = (self._holder_finish[port] - self._holder_start[port]) & TIME_MASK > dur
                fits = (self._holder_start[port] - now - dur) & TIME_MASK < HALF
                if (h_slot == slot or h_slot == 0 or h_cls != cls
                        or (pkt.safs_type == _DATA and (now - self._holder_seen[port]) & TIME_MASK > idle_ns)
                        or preempt_ns < ahead < HALF or (0 < ahead < HALF and shorter and fits)):
                    h_slot = slot
                    if not stale:
                        self._holder_class[port] = cls
                        self._holder_seen[port] = now
                        self._holder_finish[port] = finish
                        self._holder_start[port] = pkt.ts
                else:
                    load, mode = waiting, n.SHARE_WAITING
                    spare = False  # a waiting sole dependency: the waiting share, no spare
                    self._hold_waiting = True
        if not stale:
            self._holder_slot[port] = h_slot
        if top_data and mode != n.SHARE_WAITING:
            ports.win_bytes[port] += pkt.size
        kbps = ports.share(port, load, mode, ports.level_bytes(port) if spare else None)
        if kbps is not None and mode != n.SHARE_WAITING and load >= 2:
            ranges = ports.boost.get(port)
            if ranges is not None:  # top-class overcommit: x boost / 256 by the last window's bytes
                kbps = kbps * ranges[1][bisect_right(ranges[0], ports.top_bytes[port])] >> 8
        return kbps

    def read_register(self, register: str, index: int) -> int:
        """A register cell (model only: BMv2's P4Runtime cannot read registers; tests use it).

        Raises:
            InvalidInput: unknown register or index out of range.
        """
        ports, links = self._ports, self._links
        registers = {n.DEP_CLASS: self._dep_class, n.PORT_GEN: self._port_gen, n.DEP_ENDED: self._dep_ended,
                     n.PORT_WIN_START: ports.win_start, n.PORT_WIN_BYTES: ports.win_bytes,
                     n.PORT_TOP_BYTES: ports.top_bytes,
                     **dict(zip(n.CLASS_LOADS, ports.loads, strict=True)),
                     n.DEP_LINK_CLASS: self._dep_link_class, n.DEP_LINK_PORT: self._dep_link_port,
                     n.DEP_OUT_CLASS: self._dep_out_class, n.DEP_OUT_PORT: self._dep_out_port,
                     n.DEP_OUT_RATE: self._dep_out_rate, n.OUT_WIN_START: self._outs.win_start,
                     n.OUT_WIN_BYTES: self._outs.win_bytes, n.OUT_TOP_BYTES: self._outs.top_bytes,
                     **dict(zip(n.OUT_LOADS, self._outs.loads, strict=True)),
                     n.LINK_WIN_START: links.win_start, n.LINK_WIN_BYTES: links.win_bytes,
                     n.LINK_TOP_BYTES: links.top_bytes,
                     **dict(zip(n.LINK_LOADS, links.loads, strict=True)),
                     n.DEP_LINK_WEIGHT: self._dep_link_weight, n.DEP_OUT_WEIGHT: self._dep_out_weight,
                     **dict(zip(n.LINK_WEIGHTS, links.weights or (), strict=True)),
                     **dict(zip(n.OUT_WEIGHTS, self._outs.weights or (), strict=True)),
                     n.DEP_SOLE: self._dep_sole, **dict(zip(n.SOLE_LOADS, self._sole_loads, strict=True)),
                     n.HOLDER_SLOT: self._holder_slot, n.HOLDER_CLASS: self._holder_class,
                     n.HOLDER_SEEN: self._holder_seen, n.HOLDER_FINISH: self._holder_finish,
                     n.HOLDER_START: self._holder_start}
        cells = registers.get(register)
        if cells is None:
            raise InvalidInput("register", f"must be one of {', '.join(registers)}, got {register!r}")
        if not 0 <= index < len(cells):
            raise InvalidInput("index", f"must be in 0..{len(cells) - 1} for {register}, got {index}")
        return cells[index]

    def restart(self) -> None:
        """A switch restart: every table, meter, counter, clone session and register is lost."""
        self.__init__(self.name, self._clock)  # type: ignore[misc]  # a fresh pipeline, same identity

    def egress(self, pkt: Packet, egress_port: int, enq_qdepth: int) -> None:
        """Egress for one packet leaving ``egress_port``; ``enq_qdepth`` = packets queued ahead
        of it at enqueue. ECN-capable packets get CE when ``enq_qdepth`` exceeds the threshold
        (SAFS or not); valid SAFS packets get ``qdepth`` stamped (saturating at 65535);
        port_tx_bytes, qdepth_hist (and ecn_marked when marking) are counted.
        """
        ecn = pkt.ecn
        if (ecn == ECN_ECT0 or ecn == ECN_ECT1) and enq_qdepth > self._ecn_threshold:
            pkt.ecn = ECN_CE
            self._ecn_marked[1][egress_port] += 1
        if (
            pkt.safs_type != 0
            and pkt.safs_version == SAFS_VERSION
            and not pkt.safs_truncated
            and pkt.safs_type in _KNOWN_TYPES
        ):
            pkt.qdepth = enq_qdepth if enq_qdepth < QDEPTH_MAX else QDEPTH_MAX
        tx = self._port_tx
        tx[0][egress_port] += pkt.size
        tx[1][egress_port] += 1
        bucket = (enq_qdepth + 1).bit_length() - 1 if enq_qdepth > 0 else 0
        if bucket >= n.QDEPTH_BUCKETS:
            bucket = n.QDEPTH_BUCKETS - 1
        self._qhist[1][egress_port * n.QDEPTH_BUCKETS + bucket] += 1


def _urgency_class(pkt: Packet, qclass: int) -> tuple[int, int]:
    """(urgency, class) a DATA or REQUEST in queue ``qclass`` moves its dependency to
    (grant_enforcer.p4, update_share and update_out_link): urgency 6 - qclass, 0 late .. 4, the
    least urgent for BACKGROUND; class 1 + urgency, 0 (idle) for a DATA with LAST. A class
    outside 2..6 (queue 7, 1 or 0 in a slack_class entry): 6 - qclass wraps in the P4's 3 bits
    to 5..7, which count as the least urgent class, like BACKGROUND."""
    urgency = QUEUE_SLACK_MOST_URGENT - qclass
    if not 0 <= urgency <= _LEAST_URGENT or pkt.flags & FLAG_BACKGROUND:
        urgency = _LEAST_URGENT
    last = pkt.safs_type == _DATA and pkt.flags & FLAG_LAST
    return urgency, 0 if last else urgency + 1


def _push_wanted(pkt: Packet, kbps: int) -> bool:
    """A DATA packet gets a fresh GRANT (grant_enforcer.p4): the rate it holds is lower than the
    grant's ``kbps`` by more than 1/32 of it (unless FLAG_CAPPED: its out-link holds it down) or
    higher by more than 1/256 (so a push follows every change that matters for capacity or for
    the deadline, but not the jitter of the share; above the grant, the senders' held rates stay
    inside the allocator's 1% headroom), it holds no grant (epoch 0), or it asks for a renewal.
    (The caller excludes LAST.)"""
    held = pkt.rate_kbps
    return ((held < kbps - (kbps >> 5) and not pkt.flags & FLAG_CAPPED) or held - kbps > (kbps >> 8)
            or pkt.epoch == 0 or bool(pkt.flags & FLAG_RENEW))


_GRANT_ACTIONS = frozenset({n.ACT_SET_SHARE_GRANT, n.ACT_SET_FIXED_GRANT})
# The share tables: which _Shares they fill and the port they are keyed by.
_SHARE_SIDES = {n.PORT_SHARE: "_ports", n.LINK_SHARE: "_links", n.OUT_SHARE: "_outs"}
_SPARE_SIDES = {n.SPARE_LEVEL: "_ports", n.LINK_SPARE_LEVEL: "_links", n.OUT_SPARE_LEVEL: "_outs"}
_SHARE_KEY = {n.PORT_SHARE: n.F_EGRESS_PORT, n.SPARE_LEVEL: n.F_EGRESS_PORT, n.OUT_SHARE: n.F_EGRESS_PORT,
              n.OUT_SPARE_LEVEL: n.F_EGRESS_PORT, n.LINK_SHARE: n.F_INGRESS_PORT,
              n.LINK_SPARE_LEVEL: n.F_INGRESS_PORT}
# (table, action) of the entries write_trusted applies without schema checks, and the tables
# whose per-packet index _write_keyed keeps up to date.
_TRUSTED_ENTRIES = frozenset({(n.DEP_GRANT, a) for a in _GRANT_ACTIONS} | {(n.DEP_CLAIM, n.ACT_CLAIM)})
_PER_WRITE_INDEXED = frozenset({n.DEP_GRANT, n.DEP_CLAIM})


def _aggregate_tuple(e: TableEntry) -> _Aggregate:
    """A traffic_class entry in the per-packet form of :meth:`PipelineModel._traffic_class`."""
    m = e.match

    def tern(f: str) -> tuple[int, int]:
        t = cast(Ternary, m[f])
        return (t.value, t.mask)

    def rng(f: str) -> tuple[int, int]:
        r = cast(Range, m[f])
        return (r.low, r.high)

    meter = e.params["meter_index"] if e.action == n.ACT_SET_METERED_TRAFFIC_CLASS else -1
    return (tern(n.F_SRC_ADDR), tern(n.F_DST_ADDR), tern(n.F_PROTOCOL), rng(n.F_L4_SRC_PORT),
            rng(n.F_L4_DST_PORT), tern(n.F_ROCE_QP), e.params["qclass"], meter)


def _grant_key(e: TableEntry) -> tuple[int, int]:
    """The per-packet key of a dep_grant or dep_claim entry: (sender address, dependency id)."""
    return (cast(int, e.match[n.F_SRC_ADDR]), cast(int, e.match[n.F_DEP_ID]))


def _grant_tuple(e: TableEntry) -> tuple[bool, int, int, int, int]:
    """Per-packet form of a dep_grant entry: (share?, rate_kbps, epoch, lease_us, meter_slot)."""
    p = e.params
    if e.action == n.ACT_SET_SHARE_GRANT:
        return (True, 0, 0, 0, p["meter_slot"])
    return (False, p["rate_kbps"], p["epoch"], p["lease_us"], p["meter_slot"])


def _range_partition(ranges: list[tuple[int, int, int, V]], default: V) -> tuple[list[int], list[V]]:
    """Resolve possibly overlapping ``(priority, low, high, value)`` ranges (higher priority
    wins, as in P4Runtime; equal priorities: the first listed) into ``(bounds, values)`` with
    ``values[bisect_right(bounds, key)]`` the value for ``key`` (``default`` where none match)."""
    cuts = sorted({0} | {lo for _, lo, _, _ in ranges} | {hi + 1 for _, _, hi, _ in ranges})
    ordered = sorted(ranges, key=lambda r: -r[0])
    bounds: list[int] = []
    values: list[V] = []
    for start in cuts:
        value = next((v for _, lo, hi, v in ordered if lo <= start <= hi), default)
        if values and values[-1] == value:
            continue
        if values:
            bounds.append(start)
        values.append(value)
    return bounds, values


def _top_bytes_ranges(entries: Iterable[TableEntry], port_field: str, param: str,
                      default: int) -> dict[int, tuple[list[int], list[int]]]:
    """Entries keyed (port, top_bytes range) -> port: (bounds, values) of ``param`` as
    _range_partition gives them (``default`` where no range matches): spare_level,
    link_spare_level, out_spare_level and top_boost."""
    by_port: dict[int, list[tuple[int, int, int, int]]] = {}
    for e in entries:
        r = cast(Range, e.match[n.F_TOP_BYTES])
        by_port.setdefault(cast(int, e.match[port_field]), []).append((e.priority, r.low, r.high, e.params[param]))
    return {port: _range_partition(rows, default) for port, rows in by_port.items()}


def _lpm_index(entries: Iterable[TableEntry], field: str) -> list[tuple[int, dict[int, int]]]:
    """(mask, {prefix: port, -1 for drop, -2 - group for an ECMP group}) per prefix length,
    longest first."""
    by_len: dict[int, dict[int, int]] = {}
    for e in entries:
        m = cast(Lpm, e.match[field])
        port = e.params["port"] if "port" in e.params else -2 - e.params["group"] if "group" in e.params else -1
        by_len.setdefault(m.prefix_len, {})[m.value] = port
    return [(((1 << 32) - 1) ^ ((1 << (32 - plen)) - 1), by_len[plen]) for plen in sorted(by_len, reverse=True)]


def _lpm_lookup(index: list[tuple[int, dict[int, int]]], addr: int, miss: int) -> int:
    for mask, prefixes in index:
        hit = prefixes.get(addr & mask)
        if hit is not None:
            return hit
    return miss


def qdepth_bucket(enq_qdepth: int) -> int:
    """Histogram bucket of a queue depth (packets): b with depth in [2^b - 1, 2^(b+1) - 1),
    the last bucket open-ended (p4names.QDEPTH_BUCKETS)."""
    if enq_qdepth <= 0:
        return 0
    return min((enq_qdepth + 1).bit_length() - 1, n.QDEPTH_BUCKETS - 1)

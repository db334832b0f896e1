"""The target interface: what the controller writes, whichever switch implements it.

Two implementations: :class:`safs.targets.pipeline_model.PipelineModel` (in-process, used by the
simulator) and the P4Runtime target (p4runtime-shell over gRPC, for BMv2 and Tofino). Entries
are typed value objects that mirror P4Runtime's (table entry, meter config, clone session,
counter read), with names from :mod:`safs.core.p4names`. The allocator never sees this module.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from safs.core.p4names import CLONE_SESSION_BASE


class Op(enum.Enum):
    """P4Runtime update type."""

    INSERT = "INSERT"
    MODIFY = "MODIFY"
    DELETE = "DELETE"


@dataclass(frozen=True)
class Lpm:
    """Longest-prefix match value: ``value`` (int) with ``prefix_len`` bits."""

    value: int
    prefix_len: int


@dataclass(frozen=True)
class Range:
    """Range match value ``low..high`` inclusive (unsigned ints)."""

    low: int
    high: int


@dataclass(frozen=True)
class Ternary:
    """Ternary match value: the bits of ``value`` where ``mask`` has a 1 (mask 0: don't care)."""

    value: int
    mask: int


MatchValue = int | Lpm | Range | Ternary
# What :meth:`TableEntry.key` returns: (table, is_default, sorted match items, priority).
TableEntryKey = tuple[str, bool, tuple[tuple[str, MatchValue], ...], int]


@dataclass(frozen=True)
class TableEntry:
    """One table entry.

    ``match`` maps match-field names to ints (exact), :class:`Lpm`, :class:`Range` or
    :class:`Ternary`; an empty ``match`` with ``is_default=True`` sets the table's default action
    (single-entry settings tables). ``priority`` is required for range and ternary tables
    (higher wins, as in P4Runtime). ``group_id`` (> 0) makes it an entry of an indirect table
    whose action is an :class:`ActionProfileGroup` (P4Runtime ``action_profile_group_id``);
    ``action`` is then ``""`` and ``params`` empty.
    """

    table: str
    match: Mapping[str, MatchValue]
    action: str
    params: Mapping[str, int] = field(default_factory=dict)
    priority: int = 0
    is_default: bool = False
    group_id: int = 0

    def key(self) -> TableEntryKey:
        """Identity of the entry in its table (what INSERT/MODIFY/DELETE address)."""
        # Memoized in the instance dict (the entry is immutable): the scheduler's shadow and the
        # pipeline model both key every grant entry written, and sorting the match dominated.
        try:
            return self.__dict__["_key"]  # type: ignore[no-any-return]
        except KeyError:
            key = (self.table, self.is_default, tuple(sorted(self.match.items())), self.priority)
            self.__dict__["_key"] = key
            return key


@dataclass(frozen=True)
class MeterConfig:
    """Two-rate three-colour meter config of one index of an indirect meter (bytes).

    ``cir``/``pir`` in bytes per second, ``cburst``/``pburst`` in bytes (P4Runtime MeterConfig
    units for a BYTES meter). PI accepts only MODIFY for these.
    """

    meter: str
    index: int
    cir: int
    cburst: int
    pir: int
    pburst: int

    def key(self) -> tuple[str, int]:
        return (self.meter, self.index)


@dataclass(frozen=True)
class CloneSession:
    """A clone session: P4Runtime ``PacketReplicationEngineEntry.clone_session_entry`` with one
    replica (``egress_port``, instance 0).

    The P4 program clones a stale-epoch DATA to session ``port + p4names.CLONE_SESSION_BASE``
    (``port`` = the ``grant_route`` port toward the sender); the clone leaves on the replica's
    ``egress_port`` (0..NUM_PORTS-1). BMv2 accepts session ids 1..32767. INSERT/MODIFY/DELETE
    address it by ``session_id`` (a DELETE's ``egress_port`` is ignored).
    """

    session_id: int
    egress_port: int

    @classmethod
    def for_port(cls, port: int) -> CloneSession:
        """The session the P4 program clones to for a GRANT leaving on ``port``."""
        return cls(session_id=port + CLONE_SESSION_BASE, egress_port=port)

    def key(self) -> tuple[str, int]:
        """Identity of the session (what INSERT/MODIFY/DELETE address)."""
        return ("clone_session", self.session_id)


@dataclass(frozen=True)
class ActionProfileMember:
    """A member of an action profile or selector (P4Runtime ``ActionProfileMember``): one
    action with its parameters, e.g. one ECMP next hop ``set_egress(port, dst_mac)``.
    INSERT/MODIFY/DELETE address it by ``(profile, member_id)``."""

    profile: str
    member_id: int
    action: str
    params: Mapping[str, int] = field(default_factory=dict)

    def key(self) -> tuple[str, str, int]:
        return ("member", self.profile, self.member_id)


@dataclass(frozen=True)
class ActionProfileGroup:
    """A group of an action selector (P4Runtime ``ActionProfileGroup``, every member weight 1):
    the selector picks one of ``members`` (member ids) per packet by its hash
    (:mod:`safs.core.ecmp`). ``max_size`` 0: the server's default. INSERT/MODIFY/DELETE address
    it by ``(profile, group_id)``; its members must exist first."""

    profile: str
    group_id: int
    members: tuple[int, ...]
    max_size: int = 0

    def key(self) -> tuple[str, str, int]:
        return ("group", self.profile, self.group_id)


ProfileEntity = ActionProfileMember | ActionProfileGroup


@dataclass(frozen=True)
class SwitchState:
    """What a switch holds, as read back over P4Runtime (or from a pipeline model): the input
    of :meth:`safs.core.scheduler.Scheduler.reconcile`.

    Attributes:
        entries: table entries, default entries included (``is_default``).
        meters: configs of meter cells (``flow_meter`` and ``aggregate_meter``); an
            unconfigured cell may be left out or given with zero rates.
        clone_sessions: clone sessions.
        profiles: action profile members and groups.
    """

    entries: tuple[TableEntry, ...] = ()
    meters: tuple[MeterConfig, ...] = ()
    clone_sessions: tuple[CloneSession, ...] = ()
    profiles: tuple[ActionProfileMember | ActionProfileGroup, ...] = ()


@dataclass(frozen=True)
class Update:
    """One write: an operation on a table entry, a clone session, an action profile member or
    group, or (MODIFY only) a meter config."""

    op: Op
    entity: TableEntry | MeterConfig | CloneSession | ActionProfileMember | ActionProfileGroup


@dataclass(frozen=True)
class CounterValue:
    """A counter cell: bytes and packets."""

    byte_count: int
    packet_count: int


@dataclass(frozen=True)
class RequestDigest:
    """A digest the receiver's ToR sends for a REQUEST of a dependency it has no grant for.

    Addresses are IPv4 as ints; ``dep_id`` the sender's dependency id; ``remaining_bytes`` and
    ``latest_start_ns`` (48-bit fabric time) describe the transfer that sent the REQUEST.
    """

    flow_id: int
    src_addr: int
    dst_addr: int
    dep_id: int
    remaining_bytes: int
    latest_start_ns: int


class Target(Protocol):
    """What the controller needs from a switch (pipeline model or P4Runtime).

    Errors: ``write`` raises :class:`safs.core.errors.TargetError` carrying every failed update's
    index, gRPC status name and message (:class:`safs.core.errors.UpdateFailure`); the updates
    that succeeded stay applied (P4Runtime CONTINUE_ON_ERROR semantics). A switch target's
    reads and ``poll_digests`` raise :class:`safs.core.errors.TargetConnectionError` when the
    switch cannot be read or its stream closed.
    """

    name: str

    def write(self, updates: Sequence[Update]) -> None: ...

    def read_counter(self, counter: str, index: int) -> CounterValue: ...

    def read_counter_cells(self, counter: str, indices: Sequence[int]) -> list[CounterValue]: ...

    def set_clock_offset(self, offset_ns: int) -> None: ...

    def poll_digests(self) -> list[RequestDigest]: ...

"""The P4Runtime target: one switch (BMv2 ``simple_switch_grpc`` or Tofino) over gRPC.

:class:`P4RuntimeTarget` implements :class:`safs.core.target.Target`, so the scheduler drives it
exactly as it drives the in-process :class:`safs.targets.pipeline_model.PipelineModel`. Layers::

    Scheduler --Update[]--> P4RuntimeTarget --codec + P4InfoIndex--> p4.v1 Updates (one batch)
                                 |
                          SwitchClient (safs.targets.p4rt.client: one session per switch on
                          p4runtime-shell's P4RuntimeClient: channel, stub, StreamChannel with
                          arbitration, digest lists, typed errors)

The connection, arbitration and error parsing live in :mod:`safs.targets.p4rt.client` (its
docstring lists the p4runtime-shell 0.0.6 behaviours it works around); this module encodes,
decodes and maps the typed :class:`~safs.core.target.Target` calls onto it.

Errors (docs/p4runtime.md, "Errors"):

* :meth:`P4RuntimeTarget.write` raises :class:`~safs.core.errors.TargetError` with one
  :class:`~safs.core.errors.UpdateFailure` (index in the batch, gRPC code name, message) per
  failed update; P4Runtime returns them as ``p4.v1.Error`` in the ``grpc-status-details-bin``
  trailer, overall code UNKNOWN. A whole-request failure (not primary: PERMISSION_DENIED;
  switch gone: UNAVAILABLE) lists every update with that code, so a caller never mistakes an
  unsent update for an applied one. Updates the codec cannot encode are not sent and are
  listed at their index with the code the switch would give.
* Everything that is not a write batch -- connect, arbitration, pipeline push, reads, the
  digest stream -- raises :class:`~safs.core.errors.TargetConnectionError` naming the switch,
  its address, the operation and the gRPC code (no update index).

Switch restart: the switch loses its tables, meters and clock offset. :meth:`reconnect`
opens a new stream, re-arbitrates, optionally pushes the pipeline again and re-enables
digests; the caller then re-installs everything with
``Scheduler.reinstall(switch, now_ns, clock_offset_ns, target)``, which writes the clock offset
first (BMv2's clock restarts at 0).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from p4.v1 import p4runtime_pb2

from safs.core import p4names as n
from safs.core.errors import InvalidInput, TargetConnectionError, TargetError, UpdateFailure
from safs.core.protocol import pack_probe, unpack_probe
from safs.core.target import (
    ActionProfileGroup,
    ActionProfileMember,
    CloneSession,
    CounterValue,
    MeterConfig,
    Op,
    RequestDigest,
    SwitchState,
    TableEntry,
    Update,
)
from safs.core.timebase import TIME_MASK
from safs.targets.p4rt.client import SwitchClient, TlsPaths
from safs.targets.p4rt.codec import (
    EncodeError,
    decode_clone_session,
    decode_group,
    decode_member,
    decode_meter,
    decode_request_digest,
    decode_table_entry,
    digest_members,
    encode_update,
)
from safs.targets.p4rt.p4info import P4InfoIndex, bytes_to_int, canonical_bytes

log = logging.getLogger(__name__)

_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class DigestSettings:
    """DigestEntry config written for ``request_digest_t`` (P4Runtime ``DigestEntry.Config``).

    ``max_timeout_ns``: the switch sends a list at most this long after its first digest;
    ``max_list_size``: or as soon as it holds this many; ``ack_timeout_ns``: the switch
    suppresses a repeated digest until the list holding it is acked or this much time passed
    (repeated REQUESTs of one dependency then cost one digest). Defaults: 1 ms, 1, 50 ms.

    BMv2's PI cannot honour most other combinations (benchmarks/fit_control_profile.py and
    PI ``proto/frontend/src/digest_mgr.cpp``): a list of more than one digest is swept only
    every 100 ms, so it arrives 100-200 ms after its first digest whatever ``max_timeout_ns``
    says, and its learn engine truncates the timeout to whole milliseconds, so a list above
    one digest with a timeout below 1 ms is never sent; without an ack timeout PI also sweeps.
    With one digest per list and an ack timeout, digests arrive in about 1.5 ms. Those
    combinations are refused.

    ``bmv2_checks`` False skips these checks (benchmarks/fit_control_profile.py measures the
    refused settings).

    Raises:
        InvalidInput: ``max_list_size`` other than 1 with ``max_timeout_ns`` below 100 ms, or
            ``ack_timeout_ns`` 0 (fields named).
    """

    max_timeout_ns: int = 1_000_000
    max_list_size: int = 1
    ack_timeout_ns: int = 50_000_000
    bmv2_checks: bool = True

    def __post_init__(self) -> None:
        if not self.bmv2_checks:
            return
        if self.max_list_size != 1 and self.max_timeout_ns < BMV2_DIGEST_SWEEP_NS:
            raise InvalidInput("digest.max_list_size", f"must be 1 unless max_timeout_ns >= {BMV2_DIGEST_SWEEP_NS} "
                               f"(BMv2 sends longer lists only every 100-200 ms), got {self.max_list_size}")
        if self.ack_timeout_ns <= 0:
            raise InvalidInput("digest.ack_timeout_ns", "must be > 0 ns (without it BMv2's PI holds every "
                               f"digest for its 100-200 ms sweep), got {self.ack_timeout_ns}")


BMV2_DIGEST_SWEEP_NS = 100_000_000  # PI digest_mgr.cpp min_max_timeout_ns: its sweep period


class P4RuntimeTarget:
    """A SAFS switch over P4Runtime (implements :class:`safs.core.target.Target`).

    Args:
        name: switch name (as in the topology).
        grpc_addr: ``host:port`` of the switch's P4Runtime server (BMv2 default 9559).
        device_id: P4Runtime device id (BMv2 ``--device-id``), 0..2^64-1.
        p4info_path: the compiled P4Info text file (p4src/build/safs.p4info.txtpb).
        bmv2_json_path: the BMv2 JSON the pipeline push sends; needed only by
            :meth:`push_pipeline`.
        election_id: ``(high, low)``, each 0..2^64-1; the highest id among connected
            controllers is primary and may write.
        timeout_s: deadline of each RPC and of the arbitration answer, seconds (> 0).
        digests: DigestEntry settings written by :meth:`configure_digests`.
        padded_bytes: send byte strings padded to the field width instead of canonical
            (both are valid P4Runtime; for tests of servers).
        tls: (CA, client certificate, key) PEM paths of a TLS channel, each may be None
            (:data:`safs.targets.p4rt.client.TlsPaths`), or None: plaintext.
        doorbell: set whenever digests (or the stream's end) arrive, on every connection of
            this target (:class:`~safs.targets.p4rt.client.SwitchClient`); None: poll.

    Connects and arbitrates on construction (a backup connects too: see :attr:`is_primary`).
    Close it (:meth:`close`, or use it as a context manager).

    Raises:
        InvalidInput: a bad argument (field named) or an unreadable P4Info.
        TargetConnectionError: ``"connect"`` (switch not reachable, UNAVAILABLE) or
            ``"arbitration"`` (refused, or no answer within ``timeout_s``: UNAVAILABLE).
    """

    def __init__(self, name: str, grpc_addr: str, device_id: int, p4info_path: Path | str,
                 bmv2_json_path: Path | str | None = None, election_id: tuple[int, int] = (0, 1),
                 timeout_s: float = 10.0, digests: DigestSettings | None = None,
                 padded_bytes: bool = False, tls: TlsPaths | None = None,
                 doorbell: threading.Event | None = None) -> None:
        if not isinstance(grpc_addr, str) or ":" not in grpc_addr:
            raise InvalidInput("grpc_addr", f"must be 'host:port', got {grpc_addr!r}")
        if not isinstance(device_id, int) or not 0 <= device_id <= _U64:
            raise InvalidInput("device_id", f"must be an int in 0..2^64-1, got {device_id!r}")
        if (not isinstance(election_id, tuple) or len(election_id) != 2
                or not all(isinstance(v, int) and 0 <= v <= _U64 for v in election_id)):
            raise InvalidInput("election_id", f"must be (high, low) ints in 0..2^64-1, got {election_id!r}")
        if not timeout_s > 0:
            raise InvalidInput("timeout_s", f"must be > 0 seconds, got {timeout_s!r}")
        self.name = name
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.election_id = election_id
        self.p4info_path = Path(p4info_path)
        self.bmv2_json_path = Path(bmv2_json_path) if bmv2_json_path is not None else None
        self.index = P4InfoIndex.from_file(self.p4info_path)
        self.timeout_s = timeout_s
        self.digest_settings = digests or DigestSettings()
        self.padded_bytes = padded_bytes
        self.tls = tls
        self.doorbell = doorbell
        self._digest = self.index.digest(n.REQUEST_DIGEST)
        self._client: SwitchClient | None = None
        self._connect()

    # ------------------------------------------------------------------ connection

    def _connect(self) -> None:
        self._client = SwitchClient(self.grpc_addr, self.device_id, self.election_id, self.timeout_s,
                                    name=self.name, tls=self.tls, doorbell=self.doorbell)

    def _require_client(self, operation: str) -> SwitchClient:
        if self._client is None:
            raise TargetConnectionError(self.grpc_addr, operation, "UNAVAILABLE", "the target is closed",
                                        switch=self.name)
        return self._client

    @property
    def client(self) -> SwitchClient:
        """The P4Runtime session of this switch (:class:`safs.targets.p4rt.client.SwitchClient`;
        for requests the typed interface has no form for).

        Raises:
            TargetConnectionError: the target was closed (UNAVAILABLE).
        """
        return self._require_client("connection")

    @property
    def is_primary(self) -> bool:
        """True while this controller is the primary (may write), per the latest arbitration."""
        return self._client is not None and self._client.is_primary

    def rearbitrate(self, election_id: tuple[int, int]) -> bool:
        """Arbitrate again with ``election_id`` (:meth:`SwitchClient.rearbitrate`); returns
        :attr:`is_primary`.

        Raises:
            TargetConnectionError: closed, or no answer.
        """
        primary = self._require_client("arbitration").rearbitrate(election_id)
        self.election_id = election_id
        return primary

    @property
    def primary_election(self) -> tuple[int, int] | None:
        """The election id of the switch's primary per the latest arbitration update (None: the
        switch reported no primary, or the target is closed)."""
        client = self._client
        if client is None:
            return None
        _ = client.is_primary  # take pending updates
        return client.primary_election

    @property
    def highest_election(self) -> tuple[int, int]:
        """The highest election id any arbitration update from this switch carried (or ours)."""
        client = self._client
        if client is None:
            return self.election_id
        _ = client.is_primary
        return client.highest_election

    def close(self) -> None:
        """End the stream and close the channel (idempotent)."""
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> P4RuntimeTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reconnect(self, push_pipeline: bool = False) -> bool:
        """Drop the connection, open a new one, arbitrate with the same election id, then push
        the pipeline (when ``push_pipeline``; needed after a switch restart without a stored
        pipeline) or only re-enable digests. Returns :attr:`is_primary`.

        The switch's tables are not re-installed here: call ``Scheduler.reinstall``.

        Raises:
            TargetConnectionError: connect, arbitration or pipeline push failed.
            TargetError: the digest configuration was refused.
        """
        self.close()
        self._connect()
        if push_pipeline:
            self.push_pipeline()
        else:
            self.configure_digests()
        return self.is_primary

    def push_pipeline(self) -> None:
        """SetForwardingPipelineConfig (VERIFY_AND_COMMIT) with the P4Info and BMv2 JSON, then
        :meth:`configure_digests`. The switch's tables and meters start empty afterwards.

        Raises:
            InvalidInput: no ``bmv2_json_path`` was given, or it cannot be read (field
                ``bmv2_json_path``).
            TargetConnectionError: ``"pipeline push"``: the switch refused (e.g.
                PERMISSION_DENIED when not primary).
            TargetError: the digest configuration was refused.
        """
        cookie = self.cookie  # InvalidInput without a readable BMv2 JSON
        assert self.bmv2_json_path is not None
        self._require_client("pipeline push").push_pipeline(self.p4info_path, self.bmv2_json_path, cookie)
        self.configure_digests()

    @property
    def cookie(self) -> int:
        """The pipeline cookie this target pushes: the first 8 bytes (big-endian) of the
        SHA-256 of the P4Info text and the BMv2 JSON, so another build of the program (or
        another program) has another cookie.

        Raises:
            InvalidInput: no ``bmv2_json_path``, or a file cannot be read (field ``bmv2_json_path``).
        """
        if self.bmv2_json_path is None:
            raise InvalidInput("bmv2_json_path", "is needed to push the pipeline; none was given")
        try:
            digest = hashlib.sha256(self.p4info_path.read_bytes() + self.bmv2_json_path.read_bytes()).digest()
        except OSError as err:
            raise InvalidInput("bmv2_json_path", f"cannot read {err.filename}: {err.strerror}") from None
        return int.from_bytes(digest[:8], "big")

    def runs_pipeline(self) -> bool:
        """True when the switch runs this target's pipeline (its cookie, read COOKIE_ONLY,
        equals :attr:`cookie`): the controller then keeps the switch's state and reconciles it
        instead of pushing the pipeline again (which would wipe every table and meter).

        Raises:
            TargetConnectionError: the read failed. InvalidInput: as :attr:`cookie`.
        """
        return self._require_client("pipeline read").pipeline_cookie() == self.cookie

    def configure_digests(self) -> None:
        """Enable the ``request_digest_t`` stream: DigestEntry INSERT, or MODIFY when the
        switch already has it (a reconnect to a switch that kept its state).

        Raises:
            TargetError: the switch refused the DigestEntry (one update, index 0).
        """
        s = self.digest_settings
        entry = p4runtime_pb2.DigestEntry(digest_id=self._digest.id)
        entry.config.max_timeout_ns = s.max_timeout_ns
        entry.config.max_list_size = s.max_list_size
        entry.config.ack_timeout_ns = s.ack_timeout_ns
        upd = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
        upd.entity.digest_entry.CopyFrom(entry)
        try:
            self._send([upd])
        except TargetError as err:
            if err.failures[0].code != "ALREADY_EXISTS":
                raise self._named(err, "digest config: ") from None
            upd.type = p4runtime_pb2.Update.MODIFY
            try:
                self._send([upd])
            except TargetError as again:
                raise self._named(again, "digest config: ") from None

    # ------------------------------------------------------------------ Target: writes

    def write(self, updates: Sequence[Update]) -> None:
        """Send ``updates`` in ONE WriteRequest (CONTINUE_ON_ERROR: what succeeds stays applied).

        Updates that cannot be encoded (unknown table, action, field, parameter or meter; a
        negative value; a match of the wrong kind; a clone session id or port outside
        0..2^32-1) are not sent and are reported with the code
        the switch would give; values wider than their field are sent and the switch answers
        INVALID_ARGUMENT.

        Raises:
            TargetError: one :class:`~safs.core.errors.UpdateFailure` per failed update, its
                index the position in ``updates``, its message prefixed with the switch name.
                A whole-request failure (PERMISSION_DENIED when not primary, UNAVAILABLE when
                the switch is gone or the target closed) lists every sent update.
        """
        failures: list[UpdateFailure] = []
        encoded: list[p4runtime_pb2.Update] = []
        sent: list[int] = []
        for i, upd in enumerate(updates):
            try:
                encoded.append(encode_update(self.index, upd, self.padded_bytes))
                sent.append(i)
            except EncodeError as err:
                failures.append(UpdateFailure(i, err.code, f"{self.name}: {err}"))
        try:
            self._send(encoded)
        except TargetError as err:
            failures += [replace(f, index=sent[f.index], message=f"{self.name}: {f.message}") for f in err.failures]
        if failures:
            raise TargetError(sorted(failures, key=lambda f: f.index))

    def _send(self, updates: list[p4runtime_pb2.Update]) -> None:
        """One WriteRequest of ``updates``; TargetError indexes are positions in ``updates``."""
        if not updates:
            return
        if self._client is None:
            raise TargetError([UpdateFailure(i, "UNAVAILABLE", "the target is closed") for i in range(len(updates))])
        self._client.write(updates)

    def _named(self, err: TargetError, what: str) -> TargetError:
        return TargetError([replace(f, message=f"{self.name}: {what}{f.message}") for f in err.failures])

    def set_clock_offset(self, offset_ns: int) -> None:
        """Fabric time = switch clock + ``offset_ns`` (mod 2^48): MODIFY the default action of
        ``clock_offset``. Call again after every switch restart (BMv2's clock restarts at 0).

        Raises:
            TargetError: the switch refused the write.
        """
        self.write([Update(Op.MODIFY, TableEntry(
            table=n.CLOCK_OFFSET, match={}, action=n.ACT_SET_CLOCK_OFFSET,
            params={"offset_ns": offset_ns & TIME_MASK}, is_default=True))])

    # ------------------------------------------------------------------ reads

    def _read(self, *entities: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
        return self._require_client("read").read(entities)

    def _missing(self, what: str) -> TargetConnectionError:
        return TargetConnectionError(self.grpc_addr, "read", "NOT_FOUND", f"no {what} in the answer",
                                     switch=self.name)

    def read_counter(self, counter: str, index: int) -> CounterValue:
        """Bytes and packets of ``counter[index]`` (one CounterEntry read).

        Raises:
            InvalidInput: unknown counter, or index outside ``0..size-1``.
            TargetConnectionError: ``"read"``: the read failed, or the cell is missing from
                the answer (NOT_FOUND).
        """
        info = self.index.counter(counter)
        if not isinstance(index, int) or not 0 <= index < info.size:
            raise InvalidInput("index", f"must be in 0..{info.size - 1} for {counter}, got {index!r}")
        entity = p4runtime_pb2.Entity()
        entity.counter_entry.counter_id = info.id
        entity.counter_entry.index.index = index
        for e in self._read(entity):
            d = e.counter_entry.data
            return CounterValue(byte_count=d.byte_count, packet_count=d.packet_count)
        raise self._missing(f"cell {counter}[{index}]")

    def read_counter_cells(self, counter: str, indices: Sequence[int]) -> list[CounterValue]:
        """Bytes and packets of ``counter[i]`` for each of ``indices``, in order, in ONE
        ReadRequest (one CounterEntry per cell): the scheduler's tick reads every flow's cell
        this way (on BMv2, 8 cells in one Read took 0.6-1.2 ms against 0.5 ms per single Read;
        docs/mininet.md).

        Raises:
            InvalidInput: unknown counter, or an index outside ``0..size-1``.
            TargetConnectionError: ``"read"``: the read failed, or a cell is missing from the
                answer (NOT_FOUND).
        """
        info = self.index.counter(counter)
        entities = []
        for index in indices:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < info.size:
                raise InvalidInput("index", f"must be in 0..{info.size - 1} for {counter}, got {index!r}")
            entity = p4runtime_pb2.Entity()
            entity.counter_entry.counter_id = info.id
            entity.counter_entry.index.index = index
            entities.append(entity)
        if not entities:
            return []
        cells = {e.counter_entry.index.index: CounterValue(e.counter_entry.data.byte_count,
                                                          e.counter_entry.data.packet_count)
                 for e in self._read(*entities)}
        missing = [i for i in indices if i not in cells]
        if missing:
            raise self._missing(f"cells {counter}{missing}")
        return [cells[i] for i in indices]

    def read_counters(self, counter: str) -> list[CounterValue]:
        """Every cell of ``counter`` in one wildcard read, indexed by cell.

        Raises:
            InvalidInput: unknown counter. TargetConnectionError: the read failed.
        """
        info = self.index.counter(counter)
        entity = p4runtime_pb2.Entity()
        entity.counter_entry.counter_id = info.id
        cells = [CounterValue(0, 0)] * info.size
        for e in self._read(entity):
            c = e.counter_entry
            if 0 <= c.index.index < info.size:
                cells[c.index.index] = CounterValue(c.data.byte_count, c.data.packet_count)
        return cells

    def read_table(self, table: str) -> list[TableEntry]:
        """Installed (non-default) entries of ``table``, decoded.

        Raises:
            InvalidInput: unknown table. TargetConnectionError: the read failed.
        """
        entity = p4runtime_pb2.Entity()
        entity.table_entry.table_id = self.index.table(table).id
        return [decode_table_entry(self.index, e.table_entry) for e in self._read(entity)
                if not e.table_entry.is_default_action]

    def read_default(self, table: str) -> TableEntry | None:
        """The default action of ``table`` as an ``is_default`` entry (None if not answered).

        Raises:
            InvalidInput: unknown table. TargetConnectionError: the read failed.
        """
        entity = p4runtime_pb2.Entity()
        entity.table_entry.table_id = self.index.table(table).id
        entity.table_entry.is_default_action = True
        for e in self._read(entity):
            return decode_table_entry(self.index, e.table_entry)
        return None

    def read_meter(self, meter: str, index: int) -> MeterConfig:
        """The config of ``meter[index]``.

        Raises:
            InvalidInput: unknown meter or index out of range. TargetConnectionError: the read
                failed, or the cell is missing from the answer (NOT_FOUND).
        """
        info = self.index.meter(meter)
        if not isinstance(index, int) or not 0 <= index < info.size:
            raise InvalidInput("index", f"must be in 0..{info.size - 1} for {meter}, got {index!r}")
        entity = p4runtime_pb2.Entity()
        entity.meter_entry.meter_id = info.id
        entity.meter_entry.index.index = index
        for e in self._read(entity):
            return decode_meter(self.index, e.meter_entry)
        raise self._missing(f"cell {meter}[{index}]")

    def read_clone_sessions(self) -> list[CloneSession]:
        """Every clone session on the switch (one wildcard read), by session id.

        Raises:
            InvalidInput: a session without exactly one replica (field ``clone_session_entry``).
            TargetConnectionError: the read failed.
        """
        entity = p4runtime_pb2.Entity()
        entity.packet_replication_engine_entry.clone_session_entry.session_id = 0  # 0: all
        sessions = [decode_clone_session(e.packet_replication_engine_entry.clone_session_entry)
                    for e in self._read(entity)]
        return sorted(sessions, key=lambda cs: cs.session_id)

    def read_state(self, meter_cells: Mapping[str, Sequence[int]] | None = None) -> SwitchState:
        """Everything the controller writes, read back (one Read per kind): the entries and
        default entries of every table, the configs of meter cells (``meter_cells``: meter
        name -> the indices to read, e.g. those in use; None: every cell, one wildcard read
        per meter, which costs one entity per cell: 4,352 on this program), the clone
        sessions and the action profile members and groups. Cells without a config are left
        out of :attr:`SwitchState.meters`.

        Raises:
            TargetConnectionError: a read failed. InvalidInput: an entity this P4Info cannot
                decode (e.g. a clone session with several replicas).
        """
        tables = []
        for info in self.index.tables_by_id.values():
            for default in (False, True):
                e = p4runtime_pb2.Entity()
                e.table_entry.table_id = info.id
                e.table_entry.is_default_action = default
                tables.append(e)
        # (BMv2's PI answers an indirect table's default entry with no action: nothing to keep)
        entries = tuple(decode_table_entry(self.index, e.table_entry) for e in self._read(*tables)
                        if e.table_entry.action.WhichOneof("type") is not None)
        meters = []
        for name, meter in self.index.meters.items():
            cells: Sequence[int | None] = [None] if meter_cells is None else meter_cells.get(name, ())
            for cell in cells:
                e = p4runtime_pb2.Entity()
                e.meter_entry.meter_id = meter.id
                if cell is not None:
                    e.meter_entry.index.index = cell
                meters.append(e)
        configs = tuple(decode_meter(self.index, e.meter_entry) for e in (self._read(*meters) if meters else [])
                        if e.meter_entry.HasField("config"))
        profiles: list[ActionProfileMember | ActionProfileGroup] = []
        for prof in self.index.action_profiles.values():
            member, group = p4runtime_pb2.Entity(), p4runtime_pb2.Entity()
            member.action_profile_member.action_profile_id = prof.id
            group.action_profile_group.action_profile_id = prof.id
            for e in self._read(member, group):
                if e.HasField("action_profile_member"):
                    profiles.append(decode_member(self.index, e.action_profile_member))
                else:
                    profiles.append(decode_group(self.index, e.action_profile_group))
        return SwitchState(entries, configs, tuple(self.read_clone_sessions()), tuple(profiles))

    # ------------------------------------------------------------------ digests

    def poll_digests(self, timeout_s: float = 0.0) -> list[RequestDigest]:
        """REQUEST digests received on the stream since the last call, oldest first; each
        DigestList is acked (DigestListAck) once decoded. Waits up to ``timeout_s`` seconds for
        the first list when none is queued (0: do not wait). Undecodable samples are logged
        and dropped.

        Raises:
            TargetConnectionError: ``"stream"``, UNAVAILABLE: the stream is closed (the switch
                restarted or is gone, or the target is closed): reconnect.
        """
        client = self._require_client("stream")
        out: list[RequestDigest] = []
        for lst in client.digest_lists(timeout_s):
            if lst.digest_id == self._digest.id:
                for data in lst.data:
                    try:
                        out.append(decode_request_digest(digest_members(data)))
                    except InvalidInput as err:
                        log.warning("%s: undecodable digest dropped: %s", self.name, err)
            client.ack_digest_list(lst)
        return out

    # ------------------------------------------------------------------ packet I/O

    def probe_queues(self, queues: Sequence[int], timeout_s: float) -> set[int]:
        """The start-up probe (docs/operations.md, "Start-up self-check"): one PacketOut per
        queue in ``queues``, sent to the CPU port (:data:`safs.core.p4names.CPU_PORT`) at that
        priority queue with a probe frame (:func:`safs.core.protocol.pack_probe`, a fresh
        nonce); the program loops each back as a PacketIn through that queue. Returns the
        queues whose probe came back, with the queue in its ``packet_in`` metadata, within
        ``timeout_s`` seconds in all (the probes travel in parallel). Other PacketIns are
        dropped. Send it as the primary (a switch drops a backup's PacketOuts).

        Raises:
            InvalidInput: the P4Info has no ``packet_out`` / ``packet_in`` header with the
                fields the probe needs (field ``p4info``), or a queue outside 0..7 (``queue``).
            TargetConnectionError: ``"stream"``: the stream is closed.
        """
        client = self._require_client("stream")
        port_f = self.index.packet_field(n.PACKET_OUT, n.M_EGRESS_PORT)
        queue_f = self.index.packet_field(n.PACKET_OUT, n.M_QUEUE)
        in_queue_f = self.index.packet_field(n.PACKET_IN, n.M_QUEUE)
        nonce = secrets.randbits(64)
        frames = [(q, pack_probe(nonce, q)) for q in queues]  # InvalidInput before anything is sent
        for q, frame in frames:
            values = {port_f.id: n.CPU_PORT, queue_f.id: q}  # every other field (padding): 0
            client.packet_out(frame, [(f.id, canonical_bytes(values.get(f.id, 0)))
                                      for f in self.index.packet_metadata[n.PACKET_OUT]])
        wanted, answered = set(queues), set[int]()
        deadline = time.monotonic() + timeout_s
        while answered != wanted:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for packet in client.packet_ins(left):
                probe = unpack_probe(packet.payload)
                if probe is None or probe[0] != nonce:
                    log.debug("%s: PacketIn that is not this probe dropped", self.name)
                    continue
                via = {m.metadata_id: bytes_to_int(m.value) for m in packet.metadata}.get(in_queue_f.id)
                if via == probe[1]:
                    answered.add(probe[1])
        return answered

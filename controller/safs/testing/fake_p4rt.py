"""An in-process P4Runtime server that answers like BMv2's PI where the controller cares.

It serves ``p4.v1.P4Runtime`` over real gRPC on ``127.0.0.1:<ephemeral port>`` so tests of
the P4Runtime target need no switch. It knows nothing of SAFS: everything it checks comes from
the P4Info pushed to it (or given at construction), and it keeps table state generically,
keyed by (table id, decoded match key, priority).

Imitated from PI (p4lang/PI ``proto/frontend/src/device_mgr.cpp``, ``common.cpp``; the
messages are PI's):

* Write is CONTINUE_ON_ERROR only (other atomicity: UNIMPLEMENTED). A batch with failures
  ends with gRPC code UNKNOWN and a ``google.rpc.Status`` in the ``grpc-status-details-bin``
  trailer holding one ``p4.v1.Error`` per update, ``OK`` for those applied.
* Tables: INSERT of an existing key ALREADY_EXISTS; MODIFY/DELETE of a missing one
  NOT_FOUND; INSERT/DELETE of a default entry, a non-empty match or a priority on a default
  entry, writing a const default, unknown ids, a match of the wrong kind, a missing exact
  field, an explicit don't-care (LPM prefix 0, full range, zero ternary mask), LPM bits beyond
  the prefix, range low > high, a priority on a table without ternary/range/optional fields or
  none on one with them, an action not allowed in that place, a wrong number of parameters:
  INVALID_ARGUMENT.
* Byte strings: canonical or padded (any number of leading zero bytes) are accepted; a value
  with bits set beyond the field width is INVALID_ARGUMENT; reads answer canonical bytes.
* Meters: only MODIFY (INSERT/DELETE: INVALID_ARGUMENT); no index: UNIMPLEMENTED; an index
  beyond the size: UNKNOWN (BMv2's "Error when writing meter spec"); bursts above 2^32-1:
  UNIMPLEMENTED; negative values below -1: INVALID_ARGUMENT.
* Clone sessions (``packet_replication_engine_entry.clone_session_entry``; checked against
  BMv2 1.3 PI in tests/test_p4rt_target.py): INSERT of an existing session ALREADY_EXISTS,
  MODIFY/DELETE of a missing one NOT_FOUND, session id 0 or above 32767 INVALID_ARGUMENT;
  replicas are stored as given (no port check, as PI); a read with session id 0 answers all,
  one missing session NOT_FOUND. Multicast groups: UNIMPLEMENTED.
* Registers: reads and writes UNIMPLEMENTED. Counters: reads by index or wildcard.
* Digests: DigestEntry INSERT of a configured digest ALREADY_EXISTS, MODIFY/DELETE of an
  unconfigured one NOT_FOUND. Tests inject DigestLists with :meth:`FakeP4RuntimeServer.inject_digest`;
  they go to the primary's stream; acks are recorded.
* Arbitration: the highest election id is primary and gets status OK, others
  ALREADY_EXISTS; writes and pipeline pushes from anyone else PERMISSION_DENIED; a wrong
  device id NOT_FOUND; no pipeline yet FAILED_PRECONDITION.

* Action profiles: members (INSERT of an existing id ALREADY_EXISTS, MODIFY/DELETE of a
  missing one NOT_FOUND, an action the profile's tables cannot use INVALID_ARGUMENT, DELETE
  of a member in a group FAILED_PRECONDITION) and selector groups (members must exist:
  NOT_FOUND; more than ``max_size`` or a weight other than 1 INVALID_ARGUMENT; DELETE of a group
  a table entry uses FAILED_PRECONDITION). An indirect table's entries name an existing
  member or group (NOT_FOUND otherwise), a direct action there is INVALID_ARGUMENT, and so is a
  member or group on a direct table. Reads answer them as stored.

* Packet I/O, as the SAFS program on BMv2 (the one place the fake knows SAFS: the field names
  of ``safs.core.p4names``): a PacketOut from the primary whose ``packet_out`` header sends it
  to the CPU port (``cpu_port``, default 255) at a queue the switch has (``priority_queues``,
  default 8) comes back on the primary's stream as a PacketIn with the same payload and
  ``packet_in`` ingress_port = the CPU port, queue = that queue. Every other PacketOut is
  dropped (counted in ``packet_outs_dropped``), as BMv2 drops a priority beyond its queues
  ("Priority out of range") and cannot loop anything back without ``--cpu-port``.

Not imitated: other packet I/O (no data ports), direct counters/meters, idle timeouts, roles,
the initial default actions of the BMv2 JSON (a never-written default entry reads as nothing),
digest timeouts and duplicate suppression.
"""

from __future__ import annotations

import queue
import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from safs.core import p4names as n
from safs.core.errors import InvalidInput
from safs.targets.p4rt.p4info import P4InfoIndex, TableInfo, bytes_to_int, canonical_bytes, fits

_BURST_MAX = (1 << 32) - 1
_CLONE_SESSION_ID_MAX = 32767  # BMv2's PI: "Clone session id out-of-range" above


class _Reject(Exception):
    """One update failed: google.rpc code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Stream:
    out: queue.Queue = field(default_factory=queue.Queue)
    election: tuple[int, int] | None = None


class FakeP4RuntimeServer(p4runtime_pb2_grpc.P4RuntimeServicer):
    """The fake switch. Use as a context manager or call :meth:`start` / :meth:`stop`.

    Args:
        device_id: the device id it answers to.
        p4info: a pipeline to start with (as if pushed earlier), or None (a ``--no-p4`` switch).
        auto_promote: when the primary's stream ends, make the highest connected client primary
            (True, BMv2's PI does that) or none until a client arbitrates with an id at least
            the highest ever seen (False, the P4Runtime specification: backups are told
            NOT_FOUND with that id).
        priority_queues: priority queues per port (BMv2 ``--priority-queues``), 1..8: a
            PacketOut to a higher queue is dropped (the module docstring, "Packet I/O").
        cpu_port: the CPU port (BMv2 ``--cpu-port``), or None: started without one, no
            PacketOut comes back.

    Attributes (for tests, read under no lock after the RPC returned):
        writes: every WriteRequest received, in order.
        acks: ``(digest_id, list_id)`` of every DigestListAck received.
        pipeline_pushes: number of committed SetForwardingPipelineConfig calls.
        packet_outs_dropped: PacketOuts not looped back.
    """

    def __init__(self, device_id: int = 0, p4info=None, auto_promote: bool = True, priority_queues: int = 8,
                 cpu_port: int | None = n.CPU_PORT) -> None:
        self.device_id = device_id
        self.auto_promote = auto_promote
        self.priority_queues = priority_queues
        self.cpu_port = cpu_port
        self.packet_outs_dropped = 0
        self._highest: tuple[int, int] | None = None  # the highest election id ever seen
        self._lock = threading.RLock()
        self._acked = threading.Condition(self._lock)
        self._server: grpc.Server | None = None
        self.address: str | None = None
        self._streams: list[_Stream] = []
        self._primary: tuple[int, int] | None = None
        self.writes: list[p4runtime_pb2.WriteRequest] = []
        self.acks: list[tuple[int, int]] = []
        self.pipeline_pushes = 0
        self._next_list_id = 1
        self._config = p4runtime_pb2.ForwardingPipelineConfig()
        self.index: P4InfoIndex | None = None
        self._reset_state()
        if p4info is not None:
            self._config.p4info.CopyFrom(p4info)
            self.index = P4InfoIndex(p4info)

    # ------------------------------------------------------------------ lifecycle

    def start(self, port: int = 0, tls: tuple[bytes, bytes, bytes | None] | None = None) -> str:
        """Serve on 127.0.0.1 at ``port`` (0: an ephemeral one); returns ``"127.0.0.1:<port>"``.
        ``tls``: (certificate PEM, key PEM, client CA PEM or None) to serve TLS, requiring a
        client certificate when a client CA is given (as ``simple_switch_grpc --grpc-server-ssl
        [--grpc-server-with-client-auth]``).

        Raises:
            InvalidInput: ``port`` cannot be bound (in use; field ``port``).
        """
        # no SO_REUSEPORT (gRPC's default on Linux): a port another server holds is an error
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=[("grpc.so_reuseport", 0)])
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self, self._server)
        try:
            if tls is None:
                port = self._server.add_insecure_port(f"127.0.0.1:{port}")
            else:
                creds = grpc.ssl_server_credentials([(tls[1], tls[0])], root_certificates=tls[2],
                                                    require_client_auth=tls[2] is not None)
                port = self._server.add_secure_port(f"127.0.0.1:{port}", creds)
        except RuntimeError:  # grpcio raises RuntimeError when it cannot bind
            self._server = None
            raise InvalidInput("port", f"cannot serve P4Runtime on 127.0.0.1:{port} (in use?)") from None
        self._server.start()
        self.address = f"127.0.0.1:{port}"
        return self.address

    def stop(self) -> None:
        """Close every stream and stop serving (idempotent)."""
        with self._lock:
            for s in self._streams:
                s.out.put(None)
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None

    def __enter__(self) -> FakeP4RuntimeServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def restart(self) -> None:
        """Like a switch restart with ``--no-p4``: streams closed, pipeline and state gone."""
        with self._lock:
            for s in self._streams:
                s.out.put(None)
            self._streams = []
            self._primary = None
            self._highest = None
            self._config = p4runtime_pb2.ForwardingPipelineConfig()
            self.index = None
            self._reset_state()

    def _reset_state(self) -> None:
        self._entries: dict[int, dict[tuple, p4runtime_pb2.TableEntry]] = {}
        self._defaults: dict[int, p4runtime_pb2.TableEntry] = {}
        self._meters: dict[tuple[int, int], p4runtime_pb2.MeterConfig] = {}
        self._counters: dict[tuple[int, int], tuple[int, int]] = {}
        self._digest_config: dict[int, p4runtime_pb2.DigestEntry.Config] = {}
        self._clone_sessions: dict[int, p4runtime_pb2.CloneSessionEntry] = {}
        self._members: dict[tuple[int, int], p4runtime_pb2.ActionProfileMember] = {}
        self._groups: dict[tuple[int, int], p4runtime_pb2.ActionProfileGroup] = {}

    # ------------------------------------------------------------------ test hooks

    def action_profile_groups(self, profile: str) -> dict[int, list[int]]:
        """Group id -> member ids of action selector ``profile``."""
        with self._lock:
            pid = self._require_index().action_profiles[profile].id
            return {gid: [m.member_id for m in g.members] for (p, gid), g in self._groups.items() if p == pid}

    def action_profile_members(self, profile: str) -> dict[int, p4runtime_pb2.ActionProfileMember]:
        """Member id -> stored member of action profile ``profile``."""
        with self._lock:
            pid = self._require_index().action_profiles[profile].id
            return {mid: m for (p, mid), m in self._members.items() if p == pid}

    def table_entries(self, table: str) -> list[p4runtime_pb2.TableEntry]:
        """Stored (canonical) non-default entries of ``table``, in insertion order."""
        with self._lock:
            return list(self._entries.get(self._require_index().table(table).id, {}).values())

    def drop_entries(self, table: str, count: int | None = None) -> int:
        """Remove the first ``count`` (default all) entries of ``table`` behind every client's
        back (as a switch-local CLI or a bug would); returns how many were removed."""
        with self._lock:
            stored = self._entries.get(self._require_index().table(table).id, {})
            keys = list(stored)[:count]
            for key in keys:
                del stored[key]
            return len(keys)

    def insert_entry(self, entry: p4runtime_pb2.TableEntry) -> None:
        """INSERT ``entry`` behind every client's back (a foreign entry). Raises _Reject as a Write would."""
        with self._lock:
            self._write_table(p4runtime_pb2.Update.INSERT, entry)

    def default_entry(self, table: str) -> p4runtime_pb2.TableEntry | None:
        """The written default entry of ``table``, or None."""
        with self._lock:
            return self._defaults.get(self._require_index().table(table).id)

    def meter_config(self, meter: str, index: int) -> p4runtime_pb2.MeterConfig | None:
        """The config written for ``meter[index]``, or None."""
        with self._lock:
            return self._meters.get((self._require_index().meter(meter).id, index))

    def clone_sessions(self) -> dict[int, p4runtime_pb2.CloneSessionEntry]:
        """Stored clone sessions by session id."""
        with self._lock:
            return dict(self._clone_sessions)

    def set_counter(self, counter: str, index: int, byte_count: int, packet_count: int) -> None:
        """Set a counter cell, as if packets had been counted."""
        with self._lock:
            self._counters[(self._require_index().counter(counter).id, index)] = (byte_count, packet_count)

    def digest_configured(self, digest: str) -> bool:
        """True once a DigestEntry for ``digest`` was written."""
        with self._lock:
            return self._require_index().digest(digest).id in self._digest_config

    def inject_digest(self, digest: str, samples: list[list[int]]) -> int:
        """Send a DigestList of ``samples`` (each the struct's member values in P4Info order)
        to the primary controller's stream; returns its list id.

        Raises:
            InvalidInput: unknown digest, not configured, wrong member count, or no primary.
        """
        with self._lock:
            info = self._require_index().digest(digest)
            if info.id not in self._digest_config:
                raise InvalidInput("digest", f"{digest} is not configured (no DigestEntry written)")
            msg = p4runtime_pb2.StreamMessageResponse()
            lst = msg.digest
            lst.digest_id = info.id
            lst.list_id = self._next_list_id
            self._next_list_id += 1
            for sample in samples:
                if len(sample) != len(info.members):
                    raise InvalidInput("samples", f"{digest} has {len(info.members)} members, got {len(sample)}")
                data = lst.data.add()
                if len(info.members) == 1 and info.members[0][0] == info.name:
                    data.bitstring = canonical_bytes(sample[0])
                else:
                    struct = data.struct
                    for value in sample:
                        struct.members.add().bitstring = canonical_bytes(value)
            primary = self._primary_stream()
            if primary is None:
                raise InvalidInput("digest", "no primary controller connected")
            primary.out.put(msg)
            return lst.list_id

    def wait_acks(self, count: int, timeout_s: float = 5.0) -> bool:
        """Wait until at least ``count`` DigestListAcks arrived; False on timeout."""
        with self._acked:
            return self._acked.wait_for(lambda: len(self.acks) >= count, timeout=timeout_s)

    @property
    def primary_election_id(self) -> tuple[int, int] | None:
        """The election id of the current primary, or None."""
        with self._lock:
            return self._primary

    # ------------------------------------------------------------------ helpers

    def _require_index(self) -> P4InfoIndex:
        if self.index is None:
            raise InvalidInput("pipeline", "no pipeline has been pushed to the fake server")
        return self.index

    def _primary_stream(self) -> _Stream | None:
        for s in self._streams:
            if s.election is not None and s.election == self._primary:
                return s
        return None

    def _check_device(self, device_id: int, context) -> None:
        if device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Invalid device id {device_id}")

    def _check_primary(self, election: p4runtime_pb2.Uint128, context) -> None:
        if self._primary is None or (election.high, election.low) != self._primary:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "Not primary")

    def _arbitration_msg(self, stream: _Stream) -> p4runtime_pb2.StreamMessageResponse:
        msg = p4runtime_pb2.StreamMessageResponse()
        msg.arbitration.device_id = self.device_id
        shown = self._primary if self._primary is not None else (self._highest or (0, 0))
        msg.arbitration.election_id.high, msg.arbitration.election_id.low = shown
        is_primary = stream.election == self._primary
        if self._primary is None:  # the specification: NOT_FOUND and the highest id seen
            msg.arbitration.status.code, msg.arbitration.status.message = code_pb2.NOT_FOUND, "No primary"
        else:
            msg.arbitration.status.code = code_pb2.OK if is_primary else code_pb2.ALREADY_EXISTS
            msg.arbitration.status.message = "Is primary" if is_primary else "Is backup"
        return msg

    def _elect(self) -> None:
        """Recompute the primary; tell every stream if it changed. With ``auto_promote`` (PI's
        behaviour) the highest connected id is primary; without it (the P4Runtime
        specification's), a client becomes primary only with an id at least the highest ever
        seen, so when the primary leaves there is none until a backup arbitrates higher."""
        ids = [s.election for s in self._streams if s.election is not None]
        if ids:
            self._highest = max([self._highest, *ids]) if self._highest is not None else max(ids)
        primary = max(ids) if ids else None
        if not self.auto_promote and primary is not None and self._highest is not None and primary < self._highest:
            primary = None
        if primary != self._primary:
            self._primary = primary
            for s in self._streams:
                if s.election is not None:
                    s.out.put(self._arbitration_msg(s))

    # ------------------------------------------------------------------ RPCs

    def Capabilities(self, request, context):
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version="1.3.0")

    def StreamChannel(self, request_iterator, context):
        stream = _Stream()
        with self._lock:
            self._streams.append(stream)
        context.add_callback(lambda: stream.out.put(None))

        def read_requests() -> None:
            try:
                for req in request_iterator:
                    kind = req.WhichOneof("update")
                    if kind == "arbitration":
                        self._on_arbitration(stream, req.arbitration)
                    elif kind == "digest_ack":
                        with self._acked:
                            self.acks.append((req.digest_ack.digest_id, req.digest_ack.list_id))
                            self._acked.notify_all()
                    elif kind == "packet":
                        self._on_packet_out(stream, req.packet)
            except grpc.RpcError:
                pass
            except ValueError:  # the stream was cancelled under us
                pass
            finally:
                stream.out.put(None)

        threading.Thread(target=read_requests, daemon=True).start()
        try:
            while True:
                msg = stream.out.get()
                if msg is None:
                    return
                if isinstance(msg, tuple):  # (code, message): end the stream with an error
                    context.abort(*msg)
                yield msg
        finally:
            with self._lock:
                if stream in self._streams:
                    self._streams.remove(stream)
                    self._elect()

    def _on_packet_out(self, stream: _Stream, packet: p4runtime_pb2.PacketOut) -> None:
        """Loop ``packet`` back as a PacketIn as the SAFS program does, or drop it (module
        docstring, "Packet I/O")."""
        with self._lock:
            out_fields = {f.name: f.id for f in self.index.packet_metadata.get(n.PACKET_OUT, ())} if self.index else {}
            values = {m.metadata_id: bytes_to_int(m.value) for m in packet.metadata}
            port = values.get(out_fields.get(n.M_EGRESS_PORT, -1))
            queue_ = values.get(out_fields.get(n.M_QUEUE, -1), 0)
            if (self.index is None or stream.election is None or stream.election != self._primary
                    or self.cpu_port is None or port != self.cpu_port or queue_ >= self.priority_queues):
                self.packet_outs_dropped += 1
                return
            msg = p4runtime_pb2.StreamMessageResponse()
            msg.packet.payload = packet.payload
            looped = {n.M_INGRESS_PORT: self.cpu_port, n.M_QUEUE: queue_}
            for f in self.index.packet_metadata.get(n.PACKET_IN, ()):
                msg.packet.metadata.add(metadata_id=f.id, value=canonical_bytes(looped.get(f.name, 0)))
            stream.out.put(msg)

    def _on_arbitration(self, stream: _Stream, arb: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        with self._lock:
            if arb.device_id != self.device_id:
                stream.out.put((grpc.StatusCode.NOT_FOUND, f"Invalid device id {arb.device_id}"))
                return
            election = (arb.election_id.high, arb.election_id.low)
            if any(s is not stream and s.election == election for s in self._streams):
                stream.out.put((grpc.StatusCode.INVALID_ARGUMENT, "Election id already in use"))
                return
            stream.election = election
            before = self._primary
            self._elect()
            if self._primary == before:  # no change: only the sender hears back
                stream.out.put(self._arbitration_msg(stream))

    def SetForwardingPipelineConfig(self, request, context):
        with self._lock:
            self._check_device(request.device_id, context)
            self._check_primary(request.election_id, context)
            act = p4runtime_pb2.SetForwardingPipelineConfigRequest
            if request.action not in (act.VERIFY, act.VERIFY_AND_COMMIT, act.VERIFY_AND_SAVE,
                                      act.COMMIT, act.RECONCILE_AND_COMMIT):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Invalid action")
            try:
                index = P4InfoIndex(request.config.p4info)
            except InvalidInput as err:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            if request.action in (act.VERIFY_AND_COMMIT, act.COMMIT, act.RECONCILE_AND_COMMIT):
                self._config = p4runtime_pb2.ForwardingPipelineConfig()
                self._config.CopyFrom(request.config)
                self.index = index
                if request.action != act.RECONCILE_AND_COMMIT:
                    self._reset_state()
                self.pipeline_pushes += 1
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request, context):
        with self._lock:
            self._check_device(request.device_id, context)
            if self.index is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "No forwarding pipeline config set")
            req = p4runtime_pb2.GetForwardingPipelineConfigRequest
            config = p4runtime_pb2.ForwardingPipelineConfig()
            if request.response_type in (req.ALL, req.P4INFO_AND_COOKIE, req.DEVICE_CONFIG_AND_COOKIE):
                config.CopyFrom(self._config)
                if request.response_type == req.P4INFO_AND_COOKIE:
                    config.ClearField("p4_device_config")
                elif request.response_type == req.DEVICE_CONFIG_AND_COOKIE:
                    config.ClearField("p4info")
            elif self._config.HasField("cookie"):  # COOKIE_ONLY
                config.cookie.CopyFrom(self._config.cookie)
            return p4runtime_pb2.GetForwardingPipelineConfigResponse(config=config)

    def Write(self, request, context):
        with self._lock:
            self._check_device(request.device_id, context)
            self._check_primary(request.election_id, context)
            if self.index is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "No forwarding pipeline config set")
            if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                context.abort(grpc.StatusCode.UNIMPLEMENTED,
                              "Support for atomic write modes has not been implemented yet")
            copy = p4runtime_pb2.WriteRequest()
            copy.CopyFrom(request)
            self.writes.append(copy)
            errors: list[p4runtime_pb2.Error] = []
            for upd in request.updates:
                err = p4runtime_pb2.Error(code=code_pb2.OK)
                try:
                    self._write_one(upd)
                except _Reject as r:
                    err = p4runtime_pb2.Error(canonical_code=r.code, message=r.message,
                                              space="ALL-sswitch-p4org")
                errors.append(err)
            if any(e.canonical_code != code_pb2.OK for e in errors):
                status = status_pb2.Status(code=code_pb2.UNKNOWN, message="Write failure.")
                for e in errors:
                    packed = any_pb2.Any()
                    packed.Pack(e)
                    status.details.append(packed)
                context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
                context.set_code(grpc.StatusCode.UNKNOWN)
                context.set_details("Write failure.")
            return p4runtime_pb2.WriteResponse()

    def Read(self, request, context):
        with self._lock:
            self._check_device(request.device_id, context)
            if self.index is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "No forwarding pipeline config set")
            rep = p4runtime_pb2.ReadResponse()
            for entity in request.entities:
                try:
                    rep.entities.extend(self._read_one(entity))
                except _Reject as r:
                    context.abort(grpc.StatusCode(_GRPC_CODES[r.code]), r.message)
        yield rep

    # ------------------------------------------------------------------ writes

    def _write_one(self, upd: p4runtime_pb2.Update) -> None:
        kind = upd.entity.WhichOneof("entity")
        if upd.type == p4runtime_pb2.Update.UNSPECIFIED:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Update type is not set")
        if kind == "table_entry":
            self._write_table(upd.type, upd.entity.table_entry)
        elif kind == "meter_entry":
            self._write_meter(upd.type, upd.entity.meter_entry)
        elif kind == "register_entry":
            raise _Reject(code_pb2.UNIMPLEMENTED, "Register writes are not supported yet")
        elif kind == "digest_entry":
            self._write_digest(upd.type, upd.entity.digest_entry)
        elif kind == "counter_entry":
            self._write_counter(upd.type, upd.entity.counter_entry)
        elif kind == "packet_replication_engine_entry":
            self._write_pre(upd.type, upd.entity.packet_replication_engine_entry)
        elif kind == "action_profile_member":
            self._write_member(upd.type, upd.entity.action_profile_member)
        elif kind == "action_profile_group":
            self._write_group(upd.type, upd.entity.action_profile_group)
        else:
            raise _Reject(code_pb2.UNIMPLEMENTED, f"{kind} writes are not supported by the fake server")

    def _profile(self, profile_id: int):
        prof = self.index.action_profiles_by_id.get(profile_id)
        if prof is None:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Invalid P4 id")
        return prof

    @staticmethod
    def _check_exists(op: int, exists: bool, what: str) -> None:
        """PI's codes for a member or group id: INSERT of an existing one ALREADY_EXISTS,
        MODIFY or DELETE of a missing one NOT_FOUND."""
        if op == p4runtime_pb2.Update.INSERT and exists:
            raise _Reject(code_pb2.ALREADY_EXISTS, f"{what} id already exists")
        if op != p4runtime_pb2.Update.INSERT and not exists:
            raise _Reject(code_pb2.NOT_FOUND, f"{what} id does not exist")

    def _write_member(self, op: int, m: p4runtime_pb2.ActionProfileMember) -> None:
        prof = self._profile(m.action_profile_id)
        key = (prof.id, m.member_id)
        self._check_exists(op, key in self._members, "Member")
        if op == p4runtime_pb2.Update.DELETE:
            if any(p == prof.id and any(x.member_id == m.member_id for x in g.members)
                   for (p, _), g in self._groups.items()):
                raise _Reject(code_pb2.FAILED_PRECONDITION, "Member is still in a group")
            del self._members[key]
            return
        table = self._table(min(prof.table_ids))
        holder = p4runtime_pb2.TableEntry(table_id=table.id)
        holder.action.action.CopyFrom(m.action)
        canon = self._canonical_action(table, holder, default=False)
        stored = p4runtime_pb2.ActionProfileMember(action_profile_id=prof.id, member_id=m.member_id, action=canon)
        self._members[key] = stored

    def _write_group(self, op: int, g: p4runtime_pb2.ActionProfileGroup) -> None:
        prof = self._profile(g.action_profile_id)
        if not prof.with_selector:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Action profile has no selector: groups are not allowed")
        key = (prof.id, g.group_id)
        self._check_exists(op, key in self._groups, "Group")
        if op == p4runtime_pb2.Update.DELETE:
            if any(te.action.action_profile_group_id == g.group_id
                   for tid in prof.table_ids for te in self._entries.get(tid, {}).values()):
                raise _Reject(code_pb2.FAILED_PRECONDITION, "Group is used by a table entry")
            del self._groups[key]
            return
        limit = g.max_size or prof.max_group_size
        if limit and len(g.members) > limit:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Group has more members than its max size")
        for m in g.members:
            if (prof.id, m.member_id) not in self._members:
                raise _Reject(code_pb2.NOT_FOUND, "Member id does not exist")
            if m.weight != 1:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "Member weight must be 1")
        stored = p4runtime_pb2.ActionProfileGroup()
        stored.CopyFrom(g)
        self._groups[key] = stored

    def _table(self, table_id: int) -> TableInfo:
        table = self.index.tables_by_id.get(table_id)
        if table is None:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Invalid P4 id")
        return table

    def _write_table(self, op: int, te: p4runtime_pb2.TableEntry) -> None:
        table = self._table(te.table_id)
        U = p4runtime_pb2.Update
        if te.is_default_action:
            if op == U.INSERT:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "Cannot use INSERT for default entry")
            if op == U.DELETE:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "Cannot use DELETE for default entry")
            if te.match:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "Non-empty key for default entry")
            if te.priority != 0:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "Non-zero priority for default entry")
            if table.const_default_action_id:
                raise _Reject(code_pb2.INVALID_ARGUMENT,
                              f"Cannot change const default action for table {table.id}")
            self._defaults[table.id] = self._canonical_entry(table, te, (), default=True)
            return
        if op == U.INSERT and not te.HasField("action"):
            raise _Reject(code_pb2.INVALID_ARGUMENT, "'action' field must be set")
        canon_match, key = self._match_key(table, te)
        entries = self._entries.setdefault(table.id, {})
        if op == U.DELETE:
            if key not in entries:
                raise _Reject(code_pb2.NOT_FOUND, "Cannot find match entry")
            del entries[key]
            return
        if op == U.MODIFY and not te.HasField("action"):
            raise _Reject(code_pb2.INVALID_ARGUMENT, "'action' field must be set for non-default entries")
        canon = self._canonical_entry(table, te, canon_match, default=False)
        if op == U.INSERT:
            if key in entries:
                raise _Reject(code_pb2.ALREADY_EXISTS,
                              "Match entry exists, use MODIFY if you wish to change action")
        elif key not in entries:
            raise _Reject(code_pb2.NOT_FOUND, "Cannot find match entry")
        entries[key] = canon

    @staticmethod
    def _int(raw: bytes, bitwidth: int) -> int:
        if not fits(raw, bitwidth):
            raise _Reject(code_pb2.INVALID_ARGUMENT, f"Bytestring provided does not fit within {bitwidth} bits")
        return bytes_to_int(raw)

    def _match_key(self, table: TableInfo, te: p4runtime_pb2.TableEntry) -> tuple[list, tuple]:
        """Validate the match; return (canonical FieldMatch list, hashable key)."""
        given: dict[int, p4runtime_pb2.FieldMatch] = {}
        if len(te.match) > len(table.match_fields):
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Too many fields in match key")
        for fm in te.match:
            if table.field_by_id(fm.field_id) is None or fm.field_id in given:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "Unknown field in match key")
            given[fm.field_id] = fm
        canon: list[p4runtime_pb2.FieldMatch] = []
        key: list = []
        for f in table.match_fields:
            fm = given.get(f.id)
            full = (1 << f.bitwidth) - 1
            if fm is None:
                if f.kind == "exact":
                    raise _Reject(code_pb2.INVALID_ARGUMENT, "Missing non-ternary field in match key")
                key.append((0, full) if f.kind == "range" else (0, 0))
                continue
            kind = fm.WhichOneof("field_match_type")
            if kind != f.kind:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "Invalid match type")
            out = p4runtime_pb2.FieldMatch(field_id=f.id)
            if kind == "exact":
                v = self._int(fm.exact.value, f.bitwidth)
                out.exact.value = canonical_bytes(v)
                key.append(v)
            elif kind == "lpm":
                v = self._int(fm.lpm.value, f.bitwidth)
                plen = fm.lpm.prefix_len
                if plen < 0 or plen > f.bitwidth:
                    raise _Reject(code_pb2.INVALID_ARGUMENT, "Prefix length cannot be < 0 or > bitwidth")
                if plen == 0:
                    raise _Reject(code_pb2.INVALID_ARGUMENT,
                                  "Invalid reprsentation of 'don't care' LPM match, "
                                  "omit match field instead of using a prefix length of 0")
                if v & ((1 << (f.bitwidth - plen)) - 1):
                    raise _Reject(code_pb2.INVALID_ARGUMENT,
                                  "Invalid LPM value, incorrect number of trailing zeros")
                out.lpm.value, out.lpm.prefix_len = canonical_bytes(v), plen
                key.append((v, plen))
            elif kind == "range":
                low, high = self._int(fm.range.low, f.bitwidth), self._int(fm.range.high, f.bitwidth)
                if low == 0 and high == full:
                    raise _Reject(code_pb2.INVALID_ARGUMENT,
                                  "Invalid representation of 'don't care' range match, "
                                  "omit match field instead of using low=0 and high=2**bitwidth-1")
                if low > high:
                    raise _Reject(code_pb2.INVALID_ARGUMENT, "Invalid range value, make sure low <= high")
                out.range.low, out.range.high = canonical_bytes(low), canonical_bytes(high)
                key.append((low, high))
            elif kind == "ternary":
                v, mask = self._int(fm.ternary.value, f.bitwidth), self._int(fm.ternary.mask, f.bitwidth)
                if mask == 0:
                    raise _Reject(code_pb2.INVALID_ARGUMENT,
                                  "Invalid representation of 'don't care' ternary match, "
                                  "omit match field instead of using 0 mask")
                if v & mask != v:
                    raise _Reject(code_pb2.INVALID_ARGUMENT,
                                  "Invalid ternary value, make sure value & mask == value")
                out.ternary.value, out.ternary.mask = canonical_bytes(v), canonical_bytes(mask)
                key.append((v, mask))
            else:
                raise _Reject(code_pb2.UNIMPLEMENTED, f"match kind {kind} not supported by the fake server")
            canon.append(out)
        if not table.needs_priority and te.priority > 0:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Non-zero priority for non-ternary match")
        if table.needs_priority and te.priority <= 0:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Zero priority for ternary match")
        return canon, (tuple(key), te.priority)

    def _canonical_entry(self, table: TableInfo, te: p4runtime_pb2.TableEntry, match,
                         default: bool) -> p4runtime_pb2.TableEntry:
        """Validate the action; return the entry as stored and read back (canonical bytes)."""
        which = te.action.WhichOneof("type")
        out = p4runtime_pb2.TableEntry(table_id=table.id, priority=te.priority, is_default_action=default)
        out.match.extend(match)
        if table.implementation_id and not default:
            if which == "action_profile_member_id":
                if (table.implementation_id, te.action.action_profile_member_id) not in self._members:
                    raise _Reject(code_pb2.NOT_FOUND, "Member id does not exist")
            elif which == "action_profile_group_id":
                if (table.implementation_id, te.action.action_profile_group_id) not in self._groups:
                    raise _Reject(code_pb2.NOT_FOUND, "Group id does not exist")
            else:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "Expected indirect action for an indirect table")
            out.action.CopyFrom(te.action)
            return out
        if which != "action":
            raise _Reject(code_pb2.INVALID_ARGUMENT if which else code_pb2.INVALID_ARGUMENT,
                          "Cannot use an action profile member or group on a direct table" if which
                          else "'action' field must be set")
        out.action.action.CopyFrom(self._canonical_action(table, te, default))
        return out

    def _canonical_action(self, table: TableInfo, te: p4runtime_pb2.TableEntry, default: bool) -> p4runtime_pb2.Action:
        """Validate ``te``'s direct action for ``table``; return it with canonical bytes."""
        act = te.action.action
        action = self.index.actions_by_id.get(act.action_id)
        if action is None:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Invalid P4 id")
        allowed = table.default_actions if default else table.entry_actions
        if action.id not in allowed:
            raise _Reject(code_pb2.INVALID_ARGUMENT,
                          f"Invalid action for {'default entry' if default else 'table entry'}: {action.name}")
        if len(act.params) != len(action.params):
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Unexpected number of action parameters")
        by_id = {p.id: p for p in action.params}
        values: dict[int, int] = {}
        for p in act.params:
            info = by_id.get(p.param_id)
            if info is None or p.param_id in values:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "Unknown action parameter")
            values[p.param_id] = self._int(p.value, info.bitwidth)
        out = p4runtime_pb2.Action(action_id=action.id)
        for info in action.params:
            out.params.add(param_id=info.id, value=canonical_bytes(values[info.id]))
        return out

    def _write_meter(self, op: int, me: p4runtime_pb2.MeterEntry) -> None:
        meter = self.index.meters_by_id.get(me.meter_id)
        if meter is None:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Invalid P4 id")
        if not me.HasField("index"):
            raise _Reject(code_pb2.UNIMPLEMENTED, "Wildcard write is not supported for indirect meters yet")
        if me.index.index < 0:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "A negative number is not a valid index value")
        U = p4runtime_pb2.Update
        if op == U.INSERT:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "INSERT update type not supported for meters")
        if op == U.DELETE:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "DELETE update type not supported for meters")
        c = me.config
        for name in ("cir", "cburst", "pir", "pburst"):
            if getattr(c, name) < -1:
                raise _Reject(code_pb2.INVALID_ARGUMENT, f"Negative meter {name}")
        if c.cburst > _BURST_MAX:
            raise _Reject(code_pb2.UNIMPLEMENTED, "CBurst too large")
        if c.pburst > _BURST_MAX:
            raise _Reject(code_pb2.UNIMPLEMENTED, "Pburst too large")
        if me.index.index >= meter.size:
            raise _Reject(code_pb2.UNKNOWN, "Error when writing meter spec")
        cfg = p4runtime_pb2.MeterConfig()
        cfg.CopyFrom(c)
        self._meters[(meter.id, me.index.index)] = cfg

    def _write_counter(self, op: int, ce: p4runtime_pb2.CounterEntry) -> None:
        counter = self.index.counters_by_id.get(ce.counter_id)
        if counter is None:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Invalid P4 id")
        if op != p4runtime_pb2.Update.MODIFY:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Invalid update type for counters")
        if not 0 <= ce.index.index < counter.size:
            raise _Reject(code_pb2.UNKNOWN, "Error when writing counter")
        self._counters[(counter.id, ce.index.index)] = (ce.data.byte_count, ce.data.packet_count)

    def _write_pre(self, op: int, pre: p4runtime_pb2.PacketReplicationEngineEntry) -> None:
        if pre.WhichOneof("type") != "clone_session_entry":
            raise _Reject(code_pb2.UNIMPLEMENTED, "multicast groups are not supported by the fake server")
        cs = pre.clone_session_entry
        sid = cs.session_id
        if sid == 0:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "0 is not a valid session id")
        if sid > _CLONE_SESSION_ID_MAX:
            raise _Reject(code_pb2.INVALID_ARGUMENT, "Clone session id out-of-range")
        U = p4runtime_pb2.Update
        exists = sid in self._clone_sessions
        if op == U.INSERT and exists:
            raise _Reject(code_pb2.ALREADY_EXISTS, "Clone session id already exists")
        if op in (U.MODIFY, U.DELETE) and not exists:
            raise _Reject(code_pb2.NOT_FOUND, "Clone session id does not exist")
        if op == U.DELETE:
            del self._clone_sessions[sid]
        else:
            stored = p4runtime_pb2.CloneSessionEntry()
            stored.CopyFrom(cs)
            self._clone_sessions[sid] = stored

    def _write_digest(self, op: int, de: p4runtime_pb2.DigestEntry) -> None:
        if de.digest_id not in self.index.digests_by_id:
            raise _Reject(code_pb2.NOT_FOUND, f"{de.digest_id} is not a valid digest id")
        U = p4runtime_pb2.Update
        configured = de.digest_id in self._digest_config
        if op == U.INSERT and configured:
            raise _Reject(code_pb2.ALREADY_EXISTS, f"Digest {de.digest_id} already configured")
        if op in (U.MODIFY, U.DELETE) and not configured:
            raise _Reject(code_pb2.NOT_FOUND, f"Digest {de.digest_id} not configured")
        if op == U.DELETE:
            del self._digest_config[de.digest_id]
        else:
            cfg = p4runtime_pb2.DigestEntry.Config()
            cfg.CopyFrom(de.config)
            self._digest_config[de.digest_id] = cfg

    # ------------------------------------------------------------------ reads

    def _read_one(self, entity: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
        kind = entity.WhichOneof("entity")
        out: list[p4runtime_pb2.Entity] = []
        if kind == "table_entry":
            te = entity.table_entry
            tables = ([self._table(te.table_id)] if te.table_id else list(self.index.tables_by_id.values()))
            for table in tables:
                if te.is_default_action:
                    stored = [self._defaults[table.id]] if table.id in self._defaults else []
                else:
                    stored = list(self._entries.get(table.id, {}).values())
                    if te.match:
                        _, key = self._match_key(table, te)
                        hit = self._entries.get(table.id, {}).get(key)
                        stored = [hit] if hit is not None else []
                for s in stored:
                    out.append(p4runtime_pb2.Entity(table_entry=s))
        elif kind == "counter_entry":
            ce = entity.counter_entry
            counters = ([self.index.counters_by_id.get(ce.counter_id)] if ce.counter_id
                        else list(self.index.counters_by_id.values()))
            if counters == [None]:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "Invalid P4 id")
            for c in counters:
                if ce.HasField("index"):
                    if ce.index.index < 0:
                        raise _Reject(code_pb2.INVALID_ARGUMENT, "A negative number is not a valid index value")
                    if ce.index.index >= c.size:
                        raise _Reject(code_pb2.UNKNOWN, "Error when reading counter from target")
                    cells = [ce.index.index]
                else:
                    cells = range(c.size)
                for i in cells:
                    b, p = self._counters.get((c.id, i), (0, 0))
                    e = p4runtime_pb2.Entity()
                    e.counter_entry.counter_id = c.id
                    e.counter_entry.index.index = i
                    e.counter_entry.data.byte_count, e.counter_entry.data.packet_count = b, p
                    out.append(e)
        elif kind == "meter_entry":
            me = entity.meter_entry
            meter = self.index.meters_by_id.get(me.meter_id)
            if meter is None:
                raise _Reject(code_pb2.INVALID_ARGUMENT, "Invalid P4 id")
            cells = [me.index.index] if me.HasField("index") else range(meter.size)
            for i in cells:
                if not 0 <= i < meter.size:
                    raise _Reject(code_pb2.UNKNOWN, "Error when reading meter spec")
                e = p4runtime_pb2.Entity()
                e.meter_entry.meter_id = meter.id
                e.meter_entry.index.index = i
                cfg = self._meters.get((meter.id, i))
                if cfg is not None:
                    e.meter_entry.config.CopyFrom(cfg)
                out.append(e)
        elif kind == "register_entry":
            raise _Reject(code_pb2.UNIMPLEMENTED, "Register reads are not supported yet")
        elif kind == "packet_replication_engine_entry":
            pre = entity.packet_replication_engine_entry
            if pre.WhichOneof("type") != "clone_session_entry":
                raise _Reject(code_pb2.UNIMPLEMENTED, "multicast groups are not supported by the fake server")
            sid = pre.clone_session_entry.session_id
            if sid and sid not in self._clone_sessions:
                raise _Reject(code_pb2.NOT_FOUND, "Clone session id does not exist")
            for stored_id, cs in self._clone_sessions.items():
                if sid in (0, stored_id):
                    out.append(p4runtime_pb2.Entity(
                        packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(
                            clone_session_entry=cs)))
        elif kind in ("action_profile_member", "action_profile_group"):
            msg = getattr(entity, kind)
            store = self._members if kind == "action_profile_member" else self._groups
            for (pid, _), stored in store.items():
                if msg.action_profile_id in (0, pid):
                    e = p4runtime_pb2.Entity()
                    getattr(e, kind).CopyFrom(stored)
                    out.append(e)
        elif kind == "digest_entry":
            for digest_id, cfg in self._digest_config.items():
                if entity.digest_entry.digest_id in (0, digest_id):
                    e = p4runtime_pb2.Entity()
                    e.digest_entry.digest_id = digest_id
                    e.digest_entry.config.CopyFrom(cfg)
                    out.append(e)
        else:
            raise _Reject(code_pb2.UNIMPLEMENTED, f"{kind} reads are not supported by the fake server")
        return out


# google.rpc.Code number -> grpc.StatusCode value tuple (for aborting a Read).
_GRPC_CODES = {c.value[0]: c.value for c in grpc.StatusCode}

"""The P4Runtime client: one session with one switch, on p4runtime-shell.

This is the only place in ``safs`` that holds P4Runtime connection and arbitration code. The
controller's target (:class:`safs.targets.p4rt.target.P4RuntimeTarget`) and the PTF tests'
client (``ptf_tests/p4rt_client.py``) both open their sessions here; neither encodes entries
here (the PTF tests keep their own encoder on purpose, docs/p4runtime.md).

::

    SwitchClient --owns--> _ShellClient = p4runtime_sh.p4runtime.P4RuntimeClient
       write / read         (p4runtime-shell 0.0.6: channel, stub, StreamChannel, the stream
       push_pipeline         reader thread and its queue per message kind, set_fwd_pipe_config,
       is_primary            tear_down), with handshake() replaced
       digest_lists / ack
       packet_out / packet_ins
       close

What p4runtime-shell 0.0.6 does that a controller cannot live with, and where each is worked
around (nothing else of it is changed):

1. ``P4RuntimeClient.handshake`` waits a fixed 2 s for the arbitration answer, calls
   ``sys.exit(1)`` when none came, and only prints whether the client is primary.
   :class:`_ShellClient` replaces that one method: it waits ``timeout_s`` and keeps the answer;
   :class:`SwitchClient` raises :class:`~safs.core.errors.TargetConnectionError` instead.
2. ``P4RuntimeClient.write`` wraps errors in ``P4RuntimeWriteException``, whose
   ``P4RuntimeErrorIterator`` never advances past an ``OK`` entry of the error details, and PI
   puts one ``OK`` per applied update there: any batch with a partial failure loops forever.
   :meth:`SwitchClient.write` calls the stub itself and :func:`parse_write_error` reads the
   details.
3. The stream reader puts ``None`` in every queue when the stream ends with an error, but not
   when the switch ends it cleanly (the fake server's restart does). :class:`SwitchClient`
   also looks at whether the reader thread is still running.
4. ``tear_down`` joins the reader thread without a timeout (a switch that never ends the stream
   hangs it). :meth:`SwitchClient.close` ends the request stream, waits ``timeout_s``, cancels
   the stream if the switch did not end it, then calls ``tear_down``.
5. ``write``, ``read_one`` and ``set_fwd_pipe_config`` set no deadline, and
   ``set_fwd_pipe_config`` sets no cookie. Writes, reads and the pipeline push here call the
   stub with a deadline; the push carries a cookie (:meth:`SwitchClient.push_pipeline`).
6. The reader's queues can only be polled, so a controller waiting for digests from several
   switches would wake every millisecond to look. Given a ``doorbell`` (a ``threading.Event``),
   :class:`_ShellClient` replaces the digest queue with one whose ``put`` also sets it, in its
   ``handshake`` (before the arbitration request: a switch sends digests to its primary only,
   so none can come earlier).

Left as p4runtime-shell does it: the reader thread is not a daemon, so every client must be
closed (a context manager; :class:`~safs.targets.p4rt.target.P4RuntimeTarget` and the
controller close theirs); when a stream breaks, p4runtime-shell logs two CRITICAL lines on the
root logger ("StreamChannel error, closing stream") besides the error SAFS raises.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import grpc
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from p4runtime_sh.p4runtime import P4RuntimeClient, SSLOptions

from safs.core.errors import InvalidInput, TargetConnectionError, TargetError, UpdateFailure

log = logging.getLogger(__name__)

# (CA to verify the switch against or None for the system roots, client certificate or None,
# its key or None): the PEM files of a TLS P4Runtime channel (BMv2: --grpc-server-ssl).
TlsPaths = tuple[Path | None, Path | None, Path | None]


def code_name(code: int) -> str:
    """google.rpc.Code number -> name (``6`` -> ``"ALREADY_EXISTS"``; unknown ``n`` -> ``"CODE_n"``)."""
    try:
        return cast(str, code_pb2.Code.Name(code))  # google.rpc protobufs are untyped
    except ValueError:
        return f"CODE_{code}"


def parse_write_error(err: grpc.RpcError, n_updates: int) -> list[UpdateFailure]:
    """Failures of a failed Write RPC of ``n_updates`` updates, by index in the request.

    PI answers a batch with failures with code UNKNOWN and a ``google.rpc.Status`` in the
    ``grpc-status-details-bin`` trailer whose details hold one ``p4.v1.Error`` per update
    (``OK`` for those applied). Without such details (or with none failed in them) the whole
    request failed: every update is listed with the RPC's own code (e.g. PERMISSION_DENIED,
    UNAVAILABLE).
    """
    status = None
    # grpc's metadata items are (key, value) tuples; its stubs type them as plain objects.
    for key, value in cast("Sequence[tuple[str, bytes]]", err.trailing_metadata() or ()):
        if key == "grpc-status-details-bin":
            status = status_pb2.Status()
            status.ParseFromString(value)
    code = err.code()
    if code == grpc.StatusCode.UNKNOWN and status is not None and status.details:
        failures = []
        for i, detail in enumerate(status.details):
            p4_error = p4runtime_pb2.Error()
            if not detail.Unpack(p4_error):
                failures.append(UpdateFailure(i, "UNKNOWN", f"undecodable error detail {detail.type_url}"))
            elif p4_error.canonical_code != code_pb2.OK:
                failures.append(UpdateFailure(i, code_name(p4_error.canonical_code), p4_error.message))
        if failures:
            return failures
    return [UpdateFailure(i, code.name, err.details() or "") for i in range(n_updates)]


class _ShellClient(P4RuntimeClient):  # type: ignore[misc]  # p4runtime-shell is untyped
    """p4runtime-shell's ``P4RuntimeClient`` with :meth:`handshake` replaced (workaround 1 of
    the module docstring); everything else is p4runtime-shell's. Connects and arbitrates on
    construction; :attr:`answer` is the arbitration answer, or None when none came within
    ``wait_s`` seconds (the caller then closes it and raises)."""

    def __init__(self, device_id: int, grpc_addr: str, election_id: tuple[int, int], wait_s: float,
                 tls: TlsPaths | None = None, doorbell: threading.Event | None = None) -> None:
        self.wait_s = wait_s
        self.doorbell = doorbell
        self.answer: p4runtime_pb2.StreamMessageResponse | None = None
        ssl = None if tls is None else SSLOptions(False, *(str(p) if p is not None else None for p in tls))
        try:
            super().__init__(device_id, grpc_addr, election_id, ssl_options=ssl)
        except BaseException:  # e.g. KeyboardInterrupt while waiting: do not leave the reader running
            _shut_down(self, wait_s, grpc_addr)
            raise

    def handshake(self) -> None:
        """Send the arbitration request; keep the answer in :attr:`answer` (never exits). With a
        doorbell, the digest queue rings it first (workaround 6)."""
        if self.doorbell is not None:
            self.stream_in_q["digest"] = _DoorbellQueue(self.doorbell)
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.high, req.arbitration.election_id.low = self.election_id
        if self.role_name is not None:
            req.arbitration.role.name = self.role_name
        self.stream_out_q.put(req)
        self.answer = self.get_stream_packet("arbitration", timeout=self.wait_s)


class _DoorbellQueue(queue.Queue):  # type: ignore[type-arg]  # of stream messages or None
    """A queue whose every ``put`` also sets ``doorbell`` (workaround 6)."""

    def __init__(self, doorbell: threading.Event) -> None:
        super().__init__()
        self.doorbell = doorbell

    def put(self, item: object, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        self.doorbell.set()


def _shut_down(shell: P4RuntimeClient, wait_s: float, address: str) -> None:
    """End ``shell``'s stream (bounded: workaround 4), then p4runtime-shell's ``tear_down``."""
    thread = getattr(shell, "stream_recv_thread", None)
    if thread is None:  # failed before the stream existed
        channel = getattr(shell, "channel", None)
        if channel is not None:
            channel.close()
        return
    shell.stream_out_q.put(None)  # ends the request stream; the switch then ends the StreamChannel
    thread.join(wait_s)
    if thread.is_alive():
        log.warning("%s did not end the P4Runtime stream within %.3g s; cancelling it", address, wait_s)
        shell.stream.cancel()
        thread.join(wait_s)
    shell.tear_down()



def bmv2_device_config(path: Path | str) -> bytes:
    """The BMv2 JSON at ``path`` as a P4Runtime device config: without p4c's indentation, which
    takes the SAFS program's JSON (4.6 MB as written, about 1 MB without) over gRPC's default
    4 MiB receive limit.

    Raises:
        OSError: the file cannot be read. InvalidInput: it is not JSON (field ``device_config``).
    """
    try:
        config = json.loads(Path(path).read_text())
    except ValueError as err:
        raise InvalidInput("device_config", f"{path}: not JSON: {err}") from None
    return json.dumps(config, separators=(",", ":")).encode()

class SwitchClient:
    """One P4Runtime session with one switch: connection, arbitration, writes, reads, pipeline
    push, the digest stream and packet I/O (PacketOut, PacketIn). Entries are not encoded
    here: callers pass ``p4.v1`` protobufs.

    Args:
        grpc_addr: ``host:port`` of the switch's P4Runtime server.
        device_id: P4Runtime device id, 0..2^64-1.
        election_id: ``(high, low)``; the highest among connected clients is primary.
        timeout_s: deadline of each Write and Read, the longest wait for the arbitration
            answer, and the wait for the switch to end the stream on :meth:`close`; seconds > 0.
        name: the switch's name, put in errors (``TargetConnectionError.switch``); None: errors
            name the address only.
        tls: :data:`TlsPaths` for a TLS channel (mutual TLS with a client certificate), or
            None: plaintext.
        doorbell: set whenever a digest list (or the stream's end) arrives, so a caller can
            sleep on it instead of polling :meth:`digest_lists` (module docstring, item 6).

    Connects and arbitrates on construction; a backup (not primary) connects fine, see
    :attr:`is_primary`. Close it (:meth:`close`, or use it as a context manager): its stream
    thread is p4runtime-shell's and not a daemon.

    Raises:
        TargetConnectionError: ``"connect"`` (the switch is not reachable: UNAVAILABLE) or
            ``"arbitration"`` (refused, e.g. NOT_FOUND for a wrong device id, or no answer
            within ``timeout_s``: UNAVAILABLE).
    """

    def __init__(self, grpc_addr: str, device_id: int, election_id: tuple[int, int],
                 timeout_s: float = 10.0, name: str | None = None, tls: TlsPaths | None = None,
                 doorbell: threading.Event | None = None) -> None:
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.election_id = election_id
        self.timeout_s = timeout_s
        self.name = name
        shell = _ShellClient(device_id, grpc_addr, election_id, timeout_s, tls, doorbell)
        if shell.answer is None:
            err = self._no_answer(shell)
            _shut_down(shell, timeout_s, grpc_addr)
            raise err
        self._shell: _ShellClient | None = shell
        self._primary: bool = False
        self.primary_election: tuple[int, int] | None = None
        self.highest_election: tuple[int, int] = election_id
        self._take(shell.answer)

    def _no_answer(self, shell: _ShellClient) -> TargetConnectionError:
        stream = shell.stream
        if stream.done() and stream.code() != grpc.StatusCode.OK:
            code = stream.code().name
            op = "connect" if code == "UNAVAILABLE" else "arbitration"
            return self._error(op, code, stream.details() or "")
        return self._error("arbitration", "UNAVAILABLE", f"no arbitration answer within {self.timeout_s} s")

    def _error(self, operation: str, code: str, message: str) -> TargetConnectionError:
        return TargetConnectionError(self.grpc_addr, operation, code, message, switch=self.name)

    def _require(self, operation: str) -> _ShellClient:
        if self._shell is None:
            raise self._error(operation, "UNAVAILABLE", "the client is closed")
        return self._shell

    # ------------------------------------------------------------------ session

    @property
    def shell(self) -> P4RuntimeClient:
        """p4runtime-shell's client of this session, for its other calls (``get_p4info``,
        ``api_version``). Do not use its ``write``/``write_update`` against PI for batches that
        may fail partly (workaround 2 of the module docstring).

        Raises:
            TargetConnectionError: the client is closed.
        """
        return self._require("connection")

    @property
    def stub(self) -> p4runtime_pb2_grpc.P4RuntimeStub:
        """The ``p4.v1.P4Runtime`` gRPC stub of this session (for requests this class has no
        method for; pass ``timeout=``).

        Raises:
            TargetConnectionError: the client is closed.
        """
        return self._require("connection").stub

    def election(self) -> p4runtime_pb2.Uint128:
        """This client's election id as a ``p4.v1.Uint128`` (for requests built by hand)."""
        return p4runtime_pb2.Uint128(high=self.election_id[0], low=self.election_id[1])

    def _take(self, msg: p4runtime_pb2.StreamMessageResponse) -> None:
        """Record one arbitration update: whether this client is primary, the primary's election
        id (None: the switch says there is no primary, NOT_FOUND), the highest id seen."""
        arb = msg.arbitration
        self._primary = arb.status.code == code_pb2.OK
        seen = (arb.election_id.high, arb.election_id.low)
        self.primary_election = None if arb.status.code == code_pb2.NOT_FOUND else seen
        self.highest_election = max(self.highest_election, seen)

    @property
    def is_primary(self) -> bool:
        """True while this client is primary (may write), per the arbitration updates received
        so far; False once closed or once the stream ended. Also updates
        :attr:`primary_election` (the primary's election id; None when the switch reported no
        primary) and :attr:`highest_election` (the highest election id any update carried)."""
        shell = self._shell
        if shell is None:
            return False
        open_ = shell.stream_recv_thread.is_alive()
        q = shell.stream_in_q["arbitration"]
        while True:
            try:
                msg = q.get_nowait()
            except queue.Empty:
                break
            if msg is None:
                open_ = False
            else:
                self._take(msg)
        if not open_:
            self._primary = False
        return self._primary

    def rearbitrate(self, election_id: tuple[int, int]) -> bool:
        """Send a new arbitration request with ``election_id`` on the open stream (a backup
        taking over: an id above every id seen) and wait up to ``timeout_s`` for the answer.
        Returns :attr:`is_primary`; later writes carry the new id.

        Raises:
            TargetConnectionError: ``"arbitration"``: closed, or no answer in time (UNAVAILABLE).
        """
        shell = self._require("arbitration")
        _ = self.is_primary  # drain older updates first
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.high, req.arbitration.election_id.low = election_id
        shell.election_id = election_id
        self.election_id = election_id
        shell.stream_out_q.put(req)
        answer = shell.get_stream_packet("arbitration", timeout=self.timeout_s)
        if answer is None:
            raise self._error("arbitration", "UNAVAILABLE", f"no arbitration answer within {self.timeout_s} s")
        self._take(answer)
        return self.is_primary

    def close(self) -> None:
        """End the stream and close the channel (idempotent). Waits up to ``timeout_s`` for
        the switch to end the stream, then cancels it."""
        shell, self._shell = self._shell, None
        if shell is not None:
            _shut_down(shell, self.timeout_s, self.grpc_addr)

    def __enter__(self) -> SwitchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ RPCs

    def write(self, updates: Sequence[p4runtime_pb2.Update]) -> None:
        """Send ``updates`` in ONE WriteRequest (CONTINUE_ON_ERROR: what succeeds stays
        applied), with deadline ``timeout_s``. No updates: nothing is sent.

        Raises:
            TargetError: one :class:`~safs.core.errors.UpdateFailure` per failed update, its
                index the position in ``updates``; a whole-request failure (PERMISSION_DENIED
                when not primary, UNAVAILABLE when the switch is gone or the client closed,
                DEADLINE_EXCEEDED) lists every update with that code.
        """
        if not updates:
            return
        if self._shell is None:
            raise TargetError([UpdateFailure(i, "UNAVAILABLE", "the client is closed") for i in range(len(updates))])
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id, election_id=self.election(),
                                         atomicity=p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR)
        req.updates.extend(updates)
        try:
            self._shell.stub.Write(req, timeout=self.timeout_s)
        except grpc.RpcError as err:
            raise TargetError(parse_write_error(err, len(updates))) from None

    def read(self, entities: Sequence[p4runtime_pb2.Entity]) -> list[p4runtime_pb2.Entity]:
        """Every entity one ReadRequest of ``entities`` answers (all response messages), with
        deadline ``timeout_s``.

        Raises:
            TargetConnectionError: ``"read"`` with the RPC's code (e.g. UNAVAILABLE,
                FAILED_PRECONDITION before a pipeline push, INVALID_ARGUMENT).
        """
        shell = self._require("read")
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        req.entities.extend(entities)
        try:
            return [e for rep in shell.stub.Read(req, timeout=self.timeout_s) for e in rep.entities]
        except grpc.RpcError as err:
            raise self._error("read", err.code().name, err.details() or "") from None

    def push_pipeline(self, p4info_path: Path | str, device_config_path: Path | str, cookie: int = 0) -> None:
        """SetForwardingPipelineConfig (VERIFY_AND_COMMIT) of the P4Info text file and the
        device config (BMv2 JSON, :func:`bmv2_device_config`), with ``cookie`` (0..2^64-1) in the config so that a later
        :meth:`pipeline_cookie` tells whether the switch still runs this pipeline. Deadline:
        10 x ``timeout_s`` (BMv2 builds its pipeline while the call waits).

        Raises:
            TargetConnectionError: ``"pipeline push"`` refused (e.g. PERMISSION_DENIED when
                not primary, INVALID_ARGUMENT for a config the switch rejects).
            OSError: a file cannot be read. InvalidInput: the P4Info text or the JSON does not
                parse.
        """
        shell = self._require("pipeline push")
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id, election_id=self.election(),
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
        try:
            text_format.Parse(Path(p4info_path).read_text(), req.config.p4info)
        except text_format.ParseError as err:
            raise InvalidInput("p4info", f"{p4info_path}: {err}") from None
        req.config.p4_device_config = bmv2_device_config(device_config_path)
        req.config.cookie.cookie = cookie
        try:
            shell.stub.SetForwardingPipelineConfig(req, timeout=10 * self.timeout_s)
        except grpc.RpcError as err:
            raise self._error("pipeline push", err.code().name, err.details() or "") from None

    def pipeline_cookie(self) -> int | None:
        """The cookie of the switch's pipeline (GetForwardingPipelineConfig, COOKIE_ONLY), or
        None when it has no pipeline (FAILED_PRECONDITION or an empty answer).

        Raises:
            TargetConnectionError: ``"pipeline read"`` with the RPC's code.
        """
        shell = self._require("pipeline read")
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id, response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.COOKIE_ONLY)
        try:
            rep = shell.stub.GetForwardingPipelineConfig(req, timeout=self.timeout_s)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.FAILED_PRECONDITION:
                return None
            raise self._error("pipeline read", err.code().name, err.details() or "") from None
        return rep.config.cookie.cookie if rep.config.HasField("cookie") else None

    # ------------------------------------------------------------------ stream

    def digest_lists(self, timeout_s: float = 0.0) -> list[p4runtime_pb2.DigestList]:
        """DigestLists received on the stream since the last call, oldest first; waits up to
        ``timeout_s`` seconds for the first when none is queued (0: do not wait). Lists are
        not acked here (:meth:`ack_digest_list`).

        Raises:
            TargetConnectionError: ``"stream"``, UNAVAILABLE: the stream is closed (the switch
                ended it, restarted or is gone; or the client is closed) and nothing is queued.
        """
        return [msg.digest for msg in self._received("digest", timeout_s)]

    def packet_ins(self, timeout_s: float = 0.0) -> list[p4runtime_pb2.PacketIn]:
        """PacketIns received on the stream since the last call, oldest first; waits up to
        ``timeout_s`` seconds for the first when none is queued (0: do not wait).

        Raises:
            TargetConnectionError: ``"stream"``, UNAVAILABLE: the stream is closed and nothing
                is queued.
        """
        return [msg.packet for msg in self._received("packet", timeout_s)]

    def _received(self, kind: str, timeout_s: float) -> list[p4runtime_pb2.StreamMessageResponse]:
        """Drain p4runtime-shell's queue of stream messages of ``kind`` ("digest", "packet")."""
        shell = self._require("stream")
        open_ = shell.stream_recv_thread.is_alive()  # before draining: if ended, all is queued
        q = shell.stream_in_q[kind]
        out: list[p4runtime_pb2.StreamMessageResponse] = []
        wait = timeout_s > 0 and open_
        while True:
            try:
                msg = q.get(timeout=timeout_s) if wait else q.get_nowait()
            except queue.Empty:
                break
            wait = False
            if msg is None:  # p4runtime-shell's mark of a stream that ended with an error
                open_ = False
            else:
                out.append(msg)
        if not out and not open_:
            raise self._stream_closed(shell)
        return out

    def packet_out(self, payload: bytes, metadata: Sequence[tuple[int, bytes]]) -> None:
        """Send a PacketOut on the stream: the frame ``payload`` with ``metadata``, (P4Info
        metadata id, byte string) pairs of the program's ``packet_out`` header. A switch takes
        PacketOuts from the primary only (PI drops a backup's).

        Raises:
            TargetConnectionError: ``"stream"``: the client is closed.
        """
        shell = self._require("stream")
        req = p4runtime_pb2.StreamMessageRequest()
        req.packet.payload = payload
        for metadata_id, value in metadata:
            req.packet.metadata.add(metadata_id=metadata_id, value=value)
        shell.stream_out_q.put(req)

    def _stream_closed(self, shell: _ShellClient) -> TargetConnectionError:
        stream = shell.stream
        if not stream.done():
            why = "ended"
        elif stream.code() == grpc.StatusCode.OK:
            why = "ended by the switch"
        else:
            why = f"{stream.code().name}: {stream.details()}"
        return self._error("stream", "UNAVAILABLE", why)

    def ack_digest_list(self, digest_list: p4runtime_pb2.DigestList) -> None:
        """Send a DigestListAck for ``digest_list`` on the stream.

        Raises:
            TargetConnectionError: ``"stream"``: the client is closed.
        """
        shell = self._require("stream")
        ack = p4runtime_pb2.StreamMessageRequest()
        ack.digest_ack.digest_id = digest_list.digest_id
        ack.digest_ack.list_id = digest_list.list_id
        shell.stream_out_q.put(ack)

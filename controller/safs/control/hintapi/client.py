"""A small typed client of ``safs.v1.HintService`` (proto/safs/v1/hints.proto).

::

    with HintClient("127.0.0.1:50051") as hints:
        hints.announce(FlowHint(7, "a", "d", 1 << 20, deadline_ns, "job/stage1/mb3"),
                       start_time_ns=t0)
        hints.update(7, 512 * 1024)
        grant = hints.grant(7)          # safs.core.allocator.Grant or None (none yet)
        hints.complete(7)

Errors: INVALID_ARGUMENT from the server is raised as :class:`safs.core.errors.InvalidInput` with the
server's field name and message; NOT_FOUND as :class:`UnknownFlow` (an InvalidInput on field
``flow_id``, as the scheduler raises it locally); any other status as
:class:`HintServiceError` (code and details). Values that protobuf cannot carry (negative,
wider than the field) raise InvalidInput before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import grpc

from safs.control.hintapi import hints_pb2 as pb
from safs.control.hintapi import hints_pb2_grpc as pb_grpc
from safs.control.hintapi.convert import FIELD_METADATA_KEY, flow_class_to_pb, grant_from_pb
from safs.control.tls import TlsFiles, channel_credentials
from safs.core.allocator import Grant
from safs.core.errors import InvalidInput, SafsError
from safs.core.hints import DependencyHint, FlowHint

_T = TypeVar("_T")
_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1


class UnknownFlow(InvalidInput):
    """The server does not know the flow (NOT_FOUND): never announced, or completed."""


class HintServiceError(SafsError):
    """A hint-service call failed for a reason other than bad input or an unknown flow.

    Attributes:
        code: gRPC status name, e.g. ``"UNAVAILABLE"`` (server down, or hint accepted but the
            switch writes failed; see docs/hint-api.md) or ``"DEADLINE_EXCEEDED"``.
        details: the server's (or gRPC's) message.
    """

    def __init__(self, code: str, details: str) -> None:
        self.code = code
        self.details = details
        super().__init__(f"hint service: {code}: {details}")


@dataclass(frozen=True)
class AnnounceResult:
    """What an Announce did.

    Attributes:
        activated: the flow was allocated (meter slot and grant) during the call.
        activation_scheduled: allocation is pending at the flow's start time.
    """

    activated: bool
    activation_scheduled: bool


def _uint(field: str, value: object, hi: int, lo: int = 0) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise InvalidInput(field, f"must be an integer in {lo}..{hi}, got {value!r}")
    return value


def _dep_id(field: str, value: object) -> int:
    """A dependency id: 1..65535 (0 is no dependency, docs/protocol.md), as the server checks."""
    return _uint(field, value, 0xFFFF, lo=1)


def _text(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be text, got {type(value).__name__}")
    return value


def _dependency_class(i: int, flow_class: object) -> int:
    try:
        return flow_class_to_pb(flow_class)  # type: ignore[arg-type]  # checked there
    except InvalidInput as err:
        raise InvalidInput(f"dependencies[{i}].flow_class", err.message) from None


class HintClient:
    """Client of the hint service at ``address`` (``"host:port"`` or ``unix:/PATH``).

    Args:
        address: the server's ``host:port``.
        timeout_s: deadline of each call, seconds (> 0).
        tls: TLS files (:class:`safs.control.tls.TlsFiles`: ``ca`` the server's CA, None = the
            system roots; ``cert``/``key`` this application's certificate for mutual TLS), or
            None: plaintext.

    Raises:
        InvalidInput: ``timeout_s`` not positive.
    """

    def __init__(self, address: str, timeout_s: float = 5.0, tls: TlsFiles | None = None) -> None:
        if not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise InvalidInput("timeout_s", f"must be > 0 seconds, got {timeout_s!r}")
        self._timeout_s = float(timeout_s)
        self._channel = (grpc.secure_channel(address, channel_credentials(tls)) if tls is not None
                         else grpc.insecure_channel(address))
        self._stub = pb_grpc.HintServiceStub(self._channel)

    def __enter__(self) -> HintClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel. Idempotent."""
        self._channel.close()

    def wait_ready(self, timeout_s: float) -> bool:
        """Connect the channel now (gRPC connects lazily, at the first call); True once it is
        ready, False if it is not within ``timeout_s`` seconds (calls then retry as usual)."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            return False
        return True

    def announce(self, hint: FlowHint, *, start_time_ns: int | None = None) -> AnnounceResult:
        """Announce ``hint`` (flow id 1..2^32-1, remaining bytes, no-bubble timestamp in ns).

        ``start_time_ns``: when the flow's data starts (fabric ns); the server allocates the
        grant then (at once if not in the future). None leaves it to the server's mode.

        Raises:
            InvalidInput: a field the server (or protobuf) refuses, named (``hint.*``,
                ``start_time_ns``). HintServiceError: other failures.
        """
        if not isinstance(hint, FlowHint):
            raise InvalidInput("hint", f"must be a FlowHint, got {type(hint).__name__}")
        request = pb.AnnounceRequest(
            flow_id=_uint("hint.flow_id", hint.flow_id, _U32_MAX),
            sender=_text("hint.sender", hint.sender),
            receiver=_text("hint.receiver", hint.receiver),
            remaining_bytes=_uint("hint.remaining_bytes", hint.remaining_bytes, _U64_MAX),
            no_bubble_ts_ns=_uint("hint.no_bubble_ts_ns", hint.no_bubble_ts_ns, _U64_MAX),
            label=_text("hint.label", hint.label),
            flow_class=flow_class_to_pb(hint.flow_class))
        if start_time_ns is not None:
            request.start_time_ns = _uint("start_time_ns", start_time_ns, _U64_MAX)
        reply = self._call(self._stub.Announce, request)
        return AnnounceResult(reply.activated, reply.activation_scheduled)

    def update(self, flow_id: int, remaining_bytes: int, *, no_bubble_ts_ns: int | None = None) -> None:
        """Report a flow's remaining bytes (may only shrink) and optionally a new no-bubble
        timestamp (ns). Raises InvalidInput, UnknownFlow, HintServiceError."""
        request = pb.UpdateRequest(flow_id=_uint("flow_id", flow_id, _U32_MAX),
                                   remaining_bytes=_uint("hint.remaining_bytes", remaining_bytes, _U64_MAX))
        if no_bubble_ts_ns is not None:
            request.no_bubble_ts_ns = _uint("hint.no_bubble_ts_ns", no_bubble_ts_ns, _U64_MAX)
        self._call(self._stub.Update, request)

    def complete(self, flow_id: int) -> None:
        """Tell the controller the flow finished. Raises InvalidInput, UnknownFlow, HintServiceError."""
        self._call(self._stub.Complete, pb.CompleteRequest(flow_id=_uint("flow_id", flow_id, _U32_MAX)))

    def announce_dependencies(self, deps: Sequence[DependencyHint]) -> int:
        """Announce dependencies in one call (a job's launch); returns how many were new.

        Raises:
            InvalidInput: a bad field (``dependencies[i].<field>``, as the server names it).
            HintServiceError: the call failed otherwise (unreachable, a switch refused writes).
        """
        request = pb.AnnounceDependenciesRequest(dependencies=[
            pb.Dependency(dep_id=_dep_id(f"dependencies[{i}].dep_id", d.dep_id),
                          sender=_text(f"dependencies[{i}].sender", d.sender),
                          receiver=_text(f"dependencies[{i}].receiver", d.receiver),
                          label=_text(f"dependencies[{i}].label", d.label),
                          flow_class=_dependency_class(i, d.flow_class)) for i, d in enumerate(deps)])
        return int(self._call(self._stub.AnnounceDependencies, request).new)

    def end_dependency(self, sender: str, dep_id: int) -> None:
        """End a dependency (frees its grant entry and meter slot).

        Raises:
            InvalidInput: unknown dependency (``dep_id``). HintServiceError: as above.
        """
        self._call(self._stub.EndDependency, pb.EndDependencyRequest(
            sender=_text("sender", sender), dep_id=_dep_id("dep_id", dep_id)))

    def end_dependencies(self, keys: Sequence[tuple[str, int]]) -> None:
        """End several dependencies, ``(sender, dep_id)`` each, in one call, in order.

        Raises:
            InvalidInput: an unknown or bad one (``dependencies[i].<field>``; those before it are
                ended). HintServiceError: as above.
        """
        self._call(self._stub.EndDependencies, pb.EndDependenciesRequest(dependencies=[
            pb.EndDependencyRequest(sender=_text(f"dependencies[{i}].sender", s),
                                    dep_id=_dep_id(f"dependencies[{i}].dep_id", d))
            for i, (s, d) in enumerate(keys)]))

    def grant(self, flow_id: int) -> Grant | None:
        """The flow's current grant (rate bit/s, epoch, lease ns), or None when it has none yet.
        Raises InvalidInput, UnknownFlow, HintServiceError."""
        reply = self._call(self._stub.GetGrant, pb.GetGrantRequest(flow_id=_uint("flow_id", flow_id, _U32_MAX)))
        return grant_from_pb(flow_id, reply.grant) if reply.HasField("grant") else None

    def _call(self, method: Callable[..., _T], request: object) -> _T:
        try:
            return method(request, timeout=self._timeout_s)
        except grpc.RpcError as err:
            raise _translate(err) from err


def _translate(err: grpc.RpcError) -> SafsError:
    """The SAFS error for a failed call (module docstring)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else None) or ""
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND):
        metadata = dict(err.trailing_metadata() or ()) if hasattr(err, "trailing_metadata") else {}
        field, sep, message = details.partition(": ")
        field = str(metadata.get(FIELD_METADATA_KEY, field if sep else "request"))
        message = message if sep else details
        return (UnknownFlow if code == grpc.StatusCode.NOT_FOUND else InvalidInput)(field, message)
    return HintServiceError(code.name, details)

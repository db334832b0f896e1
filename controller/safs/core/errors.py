"""Error types shared by every part of SAFS.

``SafsError`` is the root. ``InvalidInput`` is raised for bad user or wire input and always
names the offending field and what was allowed, so the CLI and the gRPC hint service can turn
it into a one-line message (CLI) or INVALID_ARGUMENT (gRPC) without a traceback.

Switch errors come in two kinds (docs/p4runtime.md, "Errors"):

- :class:`TargetError` -- a write batch was (partly) refused: one :class:`UpdateFailure` per
  failed update, at its index in the batch; the other updates stay applied.
- :class:`TargetConnectionError` -- a switch could not be used outside a write batch: connect,
  arbitration, pipeline push, a read, or the stream (digests). It names the switch's address,
  the operation and the gRPC code, and has no update index.

This module never imports gRPC: codes travel as their names (``"ALREADY_EXISTS"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class SafsError(Exception):
    """Root of all SAFS errors."""


class InvalidInput(SafsError, ValueError):
    """Bad input: names the field and the allowed range.

    Args:
        field: dotted name of the offending field (e.g. ``"hint.remaining_bytes"``).
        message: what was wrong and what is allowed (e.g. ``"must be in 1..2^48-1, got 0"``).
        source: optional file name the input came from.
    """

    def __init__(self, field: str, message: str, source: str | None = None) -> None:
        self.field = field
        self.message = message
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{field}: {message}")


class ProtocolError(SafsError, ValueError):
    """A SAFS header could not be decoded (truncated, unknown version or type)."""


@dataclass(frozen=True)
class UpdateFailure:
    """One refused update of a write batch.

    Attributes:
        index: position of the update in the batch the caller passed (0-based).
        code: gRPC / ``google.rpc.Code`` name, e.g. ``"ALREADY_EXISTS"``, ``"NOT_FOUND"``,
            ``"INVALID_ARGUMENT"``, ``"PERMISSION_DENIED"`` (not primary), ``"UNAVAILABLE"``
            (switch gone).
        message: the switch's (or the encoder's) message, prefixed with the switch name where
            the target knows it.
    """

    index: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"update {self.index}: {self.code}: {self.message}"


class TargetError(SafsError):
    """A target (pipeline model or P4Runtime switch) refused one or more updates of a write batch.

    Args:
        failures: one :class:`UpdateFailure` per failed update, by index in the batch. A
            whole-request failure (not primary, switch gone) lists every update of the batch
            with that code, so an unsent update is never mistaken for an applied one.

    Attributes:
        failures: the same, as a tuple.

    Raises:
        TypeError: an item of ``failures`` is not an :class:`UpdateFailure`.
    """

    def __init__(self, failures: Sequence[UpdateFailure]) -> None:
        self.failures: tuple[UpdateFailure, ...] = tuple(failures)
        for f in self.failures:
            if not isinstance(f, UpdateFailure):
                raise TypeError(f"TargetError failures must be UpdateFailure objects, got {f!r}")
        detail = "; ".join(str(f) for f in self.failures)
        super().__init__(f"{len(self.failures)} update(s) failed: {detail}")


class TargetConnectionError(SafsError):
    """A switch could not be used outside a write batch: connect, arbitration, pipeline push,
    a read or the stream. Never carries an update index (nothing of a batch failed).

    Args:
        address: the switch's P4Runtime address, ``host:port``.
        operation: what failed: ``"connect"``, ``"arbitration"``, ``"pipeline push"``,
            ``"read"`` or ``"stream"`` (the StreamChannel, which carries digests, closed).
        code: gRPC status code name, e.g. ``"UNAVAILABLE"`` (not reachable, or the stream
            ended), ``"PERMISSION_DENIED"`` (another controller is primary), ``"NOT_FOUND"``
            (wrong device id), ``"FAILED_PRECONDITION"`` (no pipeline yet).
        message: what the switch (or the client) said.
        switch: the switch's name, when known.
    """

    def __init__(self, address: str, operation: str, code: str, message: str,
                 switch: str | None = None) -> None:
        self.address = address
        self.operation = operation
        self.code = code
        self.message = message
        self.switch = switch
        who = f"{switch} at {address}" if switch else address
        super().__init__(f"{who}: {operation} failed: {code}: {message}")

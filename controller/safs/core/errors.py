"""Error types shared by every part of SAFS.

``SafsError`` is the root. ``InvalidInput`` is raised for bad user or wire input and always
names the offending field and what was allowed, so the CLI and the gRPC hint service can turn
it into a one-line message (CLI) or INVALID_ARGUMENT (gRPC) without a traceback.
"""

from __future__ import annotations


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


class TargetError(SafsError):
    """A target (pipeline model or P4Runtime switch) rejected one or more updates.

    Args:
        failures: one ``(index_in_batch, code, message)`` per failed update; ``code`` is a
            gRPC status name such as ``"ALREADY_EXISTS"`` or ``"NOT_FOUND"``.
    """

    def __init__(self, failures: list[tuple[int, str, str]]) -> None:
        self.failures = failures
        detail = "; ".join(f"update {i}: {code}: {msg}" for i, code, msg in failures)
        super().__init__(f"{len(failures)} update(s) failed: {detail}")

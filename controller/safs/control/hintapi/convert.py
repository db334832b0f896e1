"""Conversions between the hint service's protobuf messages and SAFS value objects, shared by
the server and the client (one place for the enum mapping and the error metadata key)."""

from __future__ import annotations

from safs.control.hintapi import hints_pb2 as pb
from safs.core.allocator import Grant
from safs.core.errors import InvalidInput
from safs.core.hints import FlowClass

# Trailing-metadata key of an INVALID_ARGUMENT status: the name of the offending field.
FIELD_METADATA_KEY = "safs-field"

_CLASS_TO_PB = {FlowClass.PIPELINE: pb.FLOW_CLASS_PIPELINE, FlowClass.BACKGROUND: pb.FLOW_CLASS_BACKGROUND}
_CLASS_FROM_PB = {pb.FLOW_CLASS_UNSPECIFIED: FlowClass.PIPELINE, pb.FLOW_CLASS_PIPELINE: FlowClass.PIPELINE,
                  pb.FLOW_CLASS_BACKGROUND: FlowClass.BACKGROUND}


def flow_class_to_pb(flow_class: FlowClass | str) -> int:
    """``safs.v1.FlowClass`` value of a :class:`FlowClass` (or ``"pipeline"``/``"background"``).

    Raises InvalidInput("hint.flow_class") for anything else."""
    try:
        return _CLASS_TO_PB[FlowClass(flow_class)]
    except ValueError:
        raise InvalidInput("hint.flow_class", "must be 'pipeline' or 'background', "
                           f"got {flow_class!r}") from None


def flow_class_from_pb(value: int) -> FlowClass:
    """:class:`FlowClass` of a ``safs.v1.FlowClass`` value; UNSPECIFIED (0) means PIPELINE.

    Raises InvalidInput("hint.flow_class") for a value the enum does not define (proto3 enums
    are open, so a newer client may send one)."""
    try:
        return _CLASS_FROM_PB[value]
    except KeyError:
        raise InvalidInput("hint.flow_class", "must be FLOW_CLASS_UNSPECIFIED (0), FLOW_CLASS_PIPELINE "
                           f"(1) or FLOW_CLASS_BACKGROUND (2), got {value}") from None


def grant_to_pb(grant: Grant) -> pb.Grant:
    """Protobuf ``Grant`` (rate bit/s, epoch, lease ns) of an allocator grant."""
    return pb.Grant(rate_bps=grant.rate_bps, epoch=grant.epoch, lease_ns=grant.lease_ns)


def grant_from_pb(flow_id: int, msg: pb.Grant) -> Grant:
    """Allocator :class:`Grant` for ``flow_id`` from a protobuf ``Grant``."""
    return Grant(flow_id=flow_id, rate_bps=msg.rate_bps, epoch=msg.epoch, lease_ns=msg.lease_ns)

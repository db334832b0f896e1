"""BMv2 ``simple_switch_grpc``: the target options the SAFS program needs, in one place.

Everything that starts a BMv2 switch for SAFS (the Mininet builder, the PTF runner, the
benchmarks, the tests) puts :func:`target_options` after the ``--`` of its command line.
"""

from __future__ import annotations

from safs.core.p4names import CPU_PORT
from safs.core.protocol import NUM_QUEUES


def target_options() -> list[str]:
    """``simple_switch_grpc`` target options (after ``--``) of a SAFS switch:
    ``--priority-queues 8`` (SAFS uses queues 0..7; a priority outside the configured queues is
    dropped with only "Priority out of range" in BMv2's log) and ``--cpu-port 255`` (PacketOut
    and PacketIn, which the controller's start-up self-check needs). Raises nothing."""
    return ["--priority-queues", str(NUM_QUEUES), "--cpu-port", str(CPU_PORT)]

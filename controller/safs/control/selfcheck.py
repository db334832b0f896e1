"""The controller's start-up self-check of its switches (docs/operations.md, "Start-up self-check").

After the pipeline is pushed or kept and before the controller serves, every switch gets one
probe per priority queue SAFS uses (0..7): a PacketOut to the switch's CPU port at that queue,
which the SAFS program loops back as a PacketIn through the same queue
(:meth:`safs.targets.p4rt.target.P4RuntimeTarget.probe_queues`; the in-process
:class:`~safs.targets.pipeline_model.PipelineModel` answers all eight). A switch where some
queue does not answer is refused with one line naming it as the user gave it
(``--switch NAME=ADDR``), the missing queues and the likely cause.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol

from safs.core.errors import InvalidInput
from safs.core.protocol import NUM_QUEUES

log = logging.getLogger(__name__)

SELF_CHECK_TIMEOUT_S = 2.0  # per switch, all probes in parallel


class Probeable(Protocol):
    """A switch that answers the start-up probe (P4RuntimeTarget, PipelineModel)."""

    def probe_queues(self, queues: Sequence[int], timeout_s: float) -> set[int]: ...


def _ranges(queues: Sequence[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1..3, 5"``."""
    parts: list[str] = []
    start = prev = None
    for q in sorted(queues):
        if prev is not None and q == prev + 1:
            prev = q
            continue
        if start is not None:
            parts.append(f"{start}..{prev}" if prev != start else f"{start}")
        start = prev = q
    if start is not None:
        parts.append(f"{start}..{prev}" if prev != start else f"{start}")
    return ", ".join(parts)


def check_switch(name: str, address: str, target: Probeable, timeout_s: float = SELF_CHECK_TIMEOUT_S) -> None:
    """Probe every queue 0..7 of one switch (in parallel, ``timeout_s`` seconds in all) and
    refuse the switch unless all of them answer. Call it as the primary, after the pipeline is
    pushed or kept.

    Args:
        name, address: the switch as the user named it (``--switch NAME=ADDR``).
        target: the switch (:class:`Probeable`).
        timeout_s: how long to wait for the answers, seconds (> 0).

    Raises:
        InvalidInput: field ``--switch NAME=ADDR``: some queues did not answer (likely started
            without ``-- --priority-queues 8``), none did (likely no ``-- --cpu-port 255``, or
            not the SAFS program), or the program has no packet I/O (built from another
            source: ``--p4info``).
        TargetConnectionError: the stream is closed.
    """
    field = f"--switch {name}={address}"
    queues = range(NUM_QUEUES)
    t0 = time.monotonic()
    try:
        answered = target.probe_queues(queues, timeout_s)
    except InvalidInput as err:
        raise InvalidInput(field, f"self-check cannot probe the switch: {err.message} (is --p4info the SAFS "
                           "program of this release? p4src/README.md)") from None
    missing = [q for q in queues if q not in answered]
    if not missing:
        log.info("%s: self-check: queues 0..%d forward (probes back in %.1f ms)", name, NUM_QUEUES - 1,
                 (time.monotonic() - t0) * 1e3)
        return
    if not answered:
        raise InvalidInput(field, f"self-check failed: no probe came back from the CPU port within {timeout_s:g} s "
                           "(queues 0..7 probed): started without -- --cpu-port 255, or not running the SAFS "
                           "program?")
    raise InvalidInput(field, f"self-check failed: queues {_ranges(missing)} do not forward (answered: "
                       f"{_ranges(sorted(answered))}): started without -- --priority-queues 8?")

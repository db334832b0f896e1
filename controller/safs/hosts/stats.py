"""Host transports of the simulator: SAFS (grant-paced) and DCTCP (ECN window control)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TransportStats:
    """Counters shared by every endpoint of one run (mutable; bytes are wire bytes).

    Attributes:
        data_bytes: DATA packets (SAFS DATA, TCP segments with payload) sent by hosts,
            retransmissions included.
        safs_data_bytes: the SAFS DATA part of ``data_bytes``.
        retransmitted_bytes: the part of ``data_bytes`` that was sent again.
        control_bytes / control_packets: SAFS REQUEST and DONE sent by hosts plus GRANTs
            received by hosts (each control message counted once, on its one wire trip to or
            from the host).
        ack_bytes: TCP pure ACKs sent.
        lease_fallbacks: SAFS senders that fell back to the default rate after a lease expired.
        timeouts: SAFS probe timeouts plus DCTCP retransmission timeouts.
        fast_retransmits: DCTCP fast retransmits (3 duplicate ACKs).
    """

    data_bytes: int = 0
    safs_data_bytes: int = 0
    retransmitted_bytes: int = 0
    control_bytes: int = 0
    control_packets: int = 0
    ack_bytes: int = 0
    lease_fallbacks: int = 0
    timeouts: int = 0
    fast_retransmits: int = 0

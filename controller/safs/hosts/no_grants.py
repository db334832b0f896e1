"""SAFS ablations: the two halves of SAFS, each without the other (docs/baselines.md).

- ``"safs-no-classes"`` (rate grants without slack classes): hints, allocator, grants, meters
  and the SAFS transport exactly as ``"safs"``; the controller installs no ``slack_class``
  ranges (:attr:`safs.core.scheduler.SchedulerConfig.slack_classes` False), so every SAFS DATA
  packet goes to one data queue (the table's default, ``QUEUE_SLACK_LEAST_URGENT``) whatever
  its slack. Packets over their grant are still demoted to queue 1.
- ``"safs-no-grants"`` (slack classes without rate grants): hints are announced, activated
  and completed as under ``"safs"``, but the scheduler admits nothing to the allocator
  (:attr:`SchedulerConfig.rate_grants` False): no grant entries, no meters, and the default
  meter unconfigured (never demotes). Without grants a sender needs some other rate control;
  it is DCTCP's window (:class:`safs.hosts.dctcp.DctcpSender`), not line rate: line
  rate into a 16-to-1 incast overflows the buffer at once and the run would measure SAFS's
  loss recovery instead of the value of the classes, while DCTCP is the congestion control the
  same fabric already runs (every switch marks ECN for ECN-capable packets, SAFS or not).
  Its packets carry the SAFS header (:class:`SafsShim`), so every switch classifies them into
  the slack classes exactly as SAFS DATA.

The DCTCP payload per packet shrinks by the SAFS header (36 bytes) so frames stay within the
MTU. ACKs carry the SAFS header as DONE-type control messages (queue 7), the class of SAFS's
own receiver feedback, so the ablation does not also starve its ACKs behind class-0 traffic.
"""

from __future__ import annotations

from collections.abc import Callable

from safs.core.packet import Packet
from safs.core.protocol import HEADER_LEN, SAFS_VERSION, MsgType, latest_start_ns
from safs.hosts.dctcp import ACK_BYTES, TCP_OVERHEAD_BYTES, DctcpConfig, DctcpReceiver, DctcpSender
from safs.hosts.env import Clock, HostPort, Nic
from safs.hosts.stats import TransportStats

_DATA = int(MsgType.DATA)
_DONE = int(MsgType.DONE)
SHIM_ACK_BYTES = TCP_OVERHEAD_BYTES + HEADER_LEN  # 90: a pure ACK with the SAFS header


class SafsShim:
    """Stands in for a host NIC under one DCTCP endpoint: adds the SAFS header, then sends.

    Data segments become SAFS DATA (remaining bytes = size - seq, latest start =
    ``latest_start_ns(no_bubble, remaining, line rate)``, epoch 0, as :class:`SafsSender`
    stamps them); pure ACKs become DONE-type control messages. ``Packet.size`` grows by the
    36-byte header and the transport counters by the same bytes (retransmitted bytes are
    counted without it).

    Args:
        nic: the host's NIC port.  stats: the run's counters.
        size_bytes: the flow's size.  no_bubble_ts_ns: its no-bubble timestamp (absolute ns).
    """

    __slots__ = ("nic", "stats", "size", "no_bubble", "line_rate")

    def __init__(self, nic: Nic, stats: TransportStats, size_bytes: int, no_bubble_ts_ns: int) -> None:
        self.nic = nic
        self.stats = stats
        self.size = size_bytes
        self.no_bubble = no_bubble_ts_ns
        self.line_rate = nic.rate_bps

    def send(self, pkt: Packet) -> bool:
        """Stamp the SAFS header on ``pkt`` and hand it to the NIC."""
        pkt.safs_version = SAFS_VERSION
        if pkt.payload:
            remaining = self.size - pkt.seq
            pkt.safs_type = _DATA
            pkt.remaining = remaining
            pkt.ts = latest_start_ns(self.no_bubble, remaining, self.line_rate)
            pkt.size += HEADER_LEN
            self.stats.data_bytes += HEADER_LEN
        else:
            pkt.safs_type = _DONE
            pkt.size = SHIM_ACK_BYTES
            self.stats.ack_bytes += SHIM_ACK_BYTES - ACK_BYTES
        return self.nic.send(pkt)


def no_grant_endpoints(engine: Clock, src: HostPort, dst: HostPort, flow_id: int, size_bytes: int,
                       no_bubble_ts_ns: int, dctcp: DctcpConfig, stats: TransportStats,
                       on_finish: Callable[[int, int], None],
                       on_closed: Callable[[int], None]) -> tuple[DctcpReceiver, DctcpSender]:
    """Receiver and sender of one ``safs-no-grants`` pipeline flow: DCTCP under a SAFS shim.

    ``dctcp`` is the run's DCTCP config; its MTU is lowered by the SAFS header. Returns
    ``(receiver, sender)``, both sending through a :class:`SafsShim`.

    Raises:
        InvalidInput: as :class:`DctcpSender` (bad size).
    """
    cfg = dctcp.replace(mtu_bytes=dctcp.mtu_bytes - HEADER_LEN)
    rx = DctcpReceiver(engine, dst, src.ip, flow_id, size_bytes, stats, on_finish)
    tx = DctcpSender(engine, src, dst.ip, flow_id, size_bytes, cfg, stats, on_closed)
    rx.nic = SafsShim(dst.nic, stats, size_bytes, no_bubble_ts_ns)  # type: ignore[assignment,arg-type]
    tx.nic = SafsShim(src.nic, stats, size_bytes, no_bubble_ts_ns)  # type: ignore[assignment,arg-type]
    return rx, tx

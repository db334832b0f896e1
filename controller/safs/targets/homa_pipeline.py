"""The pipeline model under the Homa baseline: switches that trust the host's priority."""

from __future__ import annotations

from safs.core.packet import PROTO_HOMA, Packet
from safs.targets.pipeline_model import PipelineModel


class HomaPipeline(PipelineModel):
    """The SAFS pipeline model that keeps the host-chosen priority of Homa packets.

    Homa packets (IP protocol :data:`PROTO_HOMA`) are routed and counted as any non-SAFS
    packet, but leave on queue ``pkt.priority`` as the host set it (a switch trusting the
    packet's priority field, as the paper's switches trust 802.1p). Every other packet is
    handled exactly as by :class:`PipelineModel`.
    """

    def ingress(self, pkt: Packet, in_port: int) -> list[tuple[int, Packet]]:
        if pkt.proto != PROTO_HOMA:
            return super().ingress(pkt, in_port)
        prio = pkt.priority
        out = super().ingress(pkt, in_port)
        pkt.priority = prio
        return out

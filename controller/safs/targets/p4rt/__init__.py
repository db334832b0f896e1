"""The controller's P4Runtime side: a P4Info index, the entry codec, the P4Runtime target
(one switch over gRPC, built on p4runtime-shell's client) and an in-process fake P4Runtime
server that answers like BMv2's PI for tests. See docs/p4runtime.md.

``safs.targets.p4rt`` is the only part of ``safs`` that imports p4runtime-shell; the scheduler and
allocator never import it.
"""

from safs.targets.p4rt.p4info import P4InfoIndex
from safs.targets.p4rt.target import DigestSettings, P4RuntimeTarget

__all__ = ["DigestSettings", "P4InfoIndex", "P4RuntimeTarget"]

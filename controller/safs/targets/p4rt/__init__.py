"""The controller's P4Runtime side: a P4Info index, the entry codec, the P4Runtime client (one
session with one switch, built on p4runtime-shell's client) and the P4Runtime target over it.
The in-process fake P4Runtime server that answers like BMv2's PI is :mod:`safs.testing.fake_p4rt`.
See docs/p4runtime.md.

``safs.targets.p4rt`` is the only part of ``safs`` that imports p4runtime-shell, and
:mod:`safs.targets.p4rt.client` the only module holding P4Runtime connection and arbitration
code; the scheduler and allocator never import either.
"""

from safs.targets.p4rt.client import SwitchClient
from safs.targets.p4rt.p4info import P4InfoIndex
from safs.targets.p4rt.target import DigestSettings, P4RuntimeTarget

__all__ = ["DigestSettings", "P4InfoIndex", "P4RuntimeTarget", "SwitchClient"]

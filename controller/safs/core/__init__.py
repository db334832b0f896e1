"""Core tier: what every body of SAFS shares and nothing below it.

Protocol and wire format (:mod:`~safs.core.protocol`, :mod:`~safs.core.packet`,
:mod:`~safs.core.scapy_layer`), 48-bit fabric time (:mod:`~safs.core.timebase`), hints
(:mod:`~safs.core.hints`), the pure allocator (:mod:`~safs.core.allocator`), the scheduler
that turns hints into switch writes (:mod:`~safs.core.scheduler`), the switch-target interface
(:mod:`~safs.core.target`, :mod:`~safs.core.p4names`), topologies (:mod:`~safs.core.topology`)
and flow-size distributions. Imports nothing of ``safs`` outside ``safs.core`` and never gRPC.
"""

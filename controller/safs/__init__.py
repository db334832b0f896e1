"""SAFS: Slack-Aware Flow Scheduling for pipelined AI workloads.

The package holds the protocol (``safs.protocol``, ``safs.packet``), hint intake
(``safs.hints``), the pure allocator (``safs.allocator``), the target interface and the
in-process pipeline model (``safs.target``, ``safs.pipeline_model``), the packet-level
simulator (``safs.sim``), workloads (``safs.workloads``) and the ``safs`` command line.
"""

__version__ = "0.1.0"

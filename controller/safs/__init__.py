"""SAFS: Slack-Aware Flow Scheduling for pipelined AI workloads.

Tiers, each importing only the ones below it (docs/design.md, enforced by import-linter):

- :mod:`safs.apps` -- the ``safs`` command line and the Mininet host agent;
- :mod:`safs.experiments` -- scenarios, workloads, policies, simulator and Mininet backends, eval;
- :mod:`safs.control` -- the controller runtime over P4Runtime switches and the gRPC hint API;
- :mod:`safs.targets` (switches: pipeline model, P4Runtime), :mod:`safs.hosts` (transport
  endpoints), :mod:`safs.testing` (a fake P4Runtime server);
- :mod:`safs.core` -- protocol, time, hints, allocator, scheduler, the target interface.
"""

__version__ = "0.1.0"

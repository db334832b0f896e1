"""Targets tier: switches the scheduler drives through :class:`safs.core.target.Target`.

:mod:`~safs.targets.pipeline_model` (the in-process model of the P4 program, used by the
simulator and by ``safs controller --model``) and :mod:`~safs.targets.p4rt` (P4Runtime over
gRPC, p4runtime-shell). Imports only :mod:`safs.core`.
"""

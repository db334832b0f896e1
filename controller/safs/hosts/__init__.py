"""Hosts tier: transport endpoints, written once as state machines over a host environment.

Each endpoint sees only :class:`safs.hosts.env.HostEnv` (``now``, ``at``/``after``) and a
:class:`safs.hosts.env.Nic` (``send``, ``rate_bps``): the simulator and the Mininet host agent
drive the same code. SAFS (:mod:`~safs.hosts.safs`), DCTCP, D2TCP, Homa, pFabric and the
``safs-no-grants`` ablation shim. Imports only :mod:`safs.core`.
"""

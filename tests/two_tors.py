"""The small two-ToR topology the scheduler, hint-API, P4Runtime and controller tests share.

Hosts a, b, c on tor0 and d on tor1 (10 Gbit/s access links, 40 Gbit/s between the ToRs).
"""

from __future__ import annotations

import yaml

from safs.core.topology import Topology, build_topology

TOPO_YAML = """
name: two-tors
defaults: {rate: 10Gbps, delay_ns: 500}
switches: [tor0, tor1]
hosts:
  a: {ip: 10.0.0.1, switch: tor0}
  b: {ip: 10.0.0.2, switch: tor0}
  c: {ip: 10.0.0.3, switch: tor0}
  d: {ip: 10.0.1.1, switch: tor1}
links:
  - {a: tor0, b: tor1, rate: 40Gbps}
"""
MS = 1_000_000


def two_tors() -> Topology:
    """A fresh copy of the topology."""
    return build_topology(yaml.safe_load(TOPO_YAML), "inline")

"""Named control profiles: what the control plane costs on a target, charged by the simulator
(:mod:`safs.experiments.sim.control_plane`, docs/simulator.md "Control plane cost").

Each number has its source next to it. ``bmv2`` is fitted on this project's 2-core development
machine by ``benchmarks/fit_control_profile.py`` (BMv2 ``simple_switch_grpc`` 1.15.5 with PI,
the controller over p4runtime-shell); ``tofino`` takes the switch's cost from a published
P4Runtime measurement on Tofino and the controller's own cost from the same fit as ``bmv2``
(it is this Python controller either way); ``ideal`` is the free control plane the simulator
had before (a hint takes 20 µs, nothing else costs anything): an ablation, labelled so in every
record and table, never a result.
"""

from __future__ import annotations

from pydantic import Field

from safs.core.config import ConfigModel
from safs.core.errors import InvalidInput


class ControlProfile(ConfigModel):
    """The costs of one target's control plane (all ns).

    Attributes:
        name: the profile's name (recorded with every run).
        hint_rpc_ns: a hint API call's latency before the controller handles it (gRPC).
        hint_cpu_ns: controller time to handle one hint.
        digest_latency_ns: switch -> controller delivery time of a digest.
        digest_cpu_ns: controller time per digest.
        write_request_cpu_ns, write_update_cpu_ns: controller time to encode and send one
            write request, and per update in it (codec, protobuf, gRPC).
        rpc_ns: one-way controller -> switch latency of a request.
        switch_request_ns, switch_update_ns: switch time to apply one write request and per
            update in it (one writer per switch: requests queue behind each other).
        read_request_ns, read_cell_ns: controller time of a counter read request and per cell.
        ablation: True for a profile that is not a real target (``ideal``).
    """

    name: str
    hint_rpc_ns: int = Field(ge=0)
    hint_cpu_ns: int = Field(ge=0)
    digest_latency_ns: int = Field(ge=0)
    digest_cpu_ns: int = Field(ge=0)
    write_request_cpu_ns: int = Field(ge=0)
    write_update_cpu_ns: int = Field(ge=0)
    rpc_ns: int = Field(ge=0)
    switch_request_ns: int = Field(ge=0)
    switch_update_ns: int = Field(ge=0)
    read_request_ns: int = Field(ge=0)
    read_cell_ns: int = Field(ge=0)
    ablation: bool = False


# This Python controller's own costs, measured by benchmarks/fit_control_profile.py on the
# 2-core development machine (two runs, load average 1.4-2.0; BMv2 1.15.5, p4runtime-shell 0.0.6
# on pure-Python protobuf 3.20.3, which dominates the encoding). The same for every target.
_CONTROLLER = dict(
    hint_rpc_ns=400_000,  # HintClient.announce round trip (0.9-1.1 ms p50) minus controller CPU
    hint_cpu_ns=600_000,  # controller CPU per record-only announce (553-670 us)
    digest_cpu_ns=300_000,  # merging one digest: assumed half a record-only announce (not measured)
    write_request_cpu_ns=110_000,  # encode intercept of a WriteRequest (82-146 us)
    write_update_cpu_ns=220_000,  # encode per update: grant entries 307-359 us, meters 101-121 us
    rpc_ns=0,  # the gRPC round trip is in switch_request_ns (measured as write wall time - encode)
    read_request_ns=1_080_000,  # counter Read intercept (1024-1134 us)
    read_cell_ns=83_000,  # per counter cell (client-side decoding)
)

PROFILES: dict[str, ControlProfile] = {p.name: p for p in (
    ControlProfile(
        name="bmv2",
        # max_list_size 1 (the only setting BMv2 delivers in milliseconds: PI sweeps other
        # lists every 100-200 ms; docs/p4runtime.md "Digests"): 1.3-1.6 ms p50.
        digest_latency_ns=1_500_000,
        switch_request_ns=800_000,  # write wall time - encode, intercept (788-821 us, gRPC client CPU included)
        switch_update_ns=20_000,  # ... slope (grant 15-29 us, meter 11-13 us)
        **_CONTROLLER),
    ControlProfile(
        name="tofino",
        # Stratum PR #568 (M. Pudelko, 2021-03-10, github.com/stratum/stratum/pull/568): P4Runtime,
        # 819 ternary ACL inserts in one WriteRequest, 57.8 us/op (17,303 ops/s); target inferred
        # to be Tofino (the benchmark sizes tables for it).
        switch_update_ns=58_000,
        # Per request: this controller's gRPC client cost as measured with BMv2 (~450 us of the
        # 800) plus an assumed 50 us at the switch (no published single-write latency).
        switch_request_ns=500_000,
        # No published digest latency for Tofino: assumed the learn filter's 1 ms timeout.
        digest_latency_ns=1_000_000,
        **_CONTROLLER),
    ControlProfile(
        name="ideal", ablation=True,
        hint_rpc_ns=20_000,  # the simulator's old fixed hint latency
        hint_cpu_ns=0, digest_latency_ns=0, digest_cpu_ns=0, write_request_cpu_ns=0, write_update_cpu_ns=0,
        rpc_ns=0, switch_request_ns=0, switch_update_ns=0, read_request_ns=0, read_cell_ns=0),
)}


def control_profile(name: str, field: str = "sim.control_profile") -> ControlProfile:
    """The profile called ``name``.

    Raises:
        InvalidInput: unknown name (the message lists the valid ones).
    """
    if name not in PROFILES:
        raise InvalidInput(field, f"must be one of {', '.join(PROFILES)}, got {name!r}")
    return PROFILES[name]

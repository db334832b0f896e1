"""Scenario files: what `safs run` runs.

A scenario YAML names the topology, the workload, the policies, the seeds, the repetitions and
the parameters to sweep. Example (scenarios/zerobubble.yaml)::

    name: zerobubble
    topology: ../topologies/zerobubble-pp.yaml   # relative to the scenario file
    workload:
      kind: zerobubble                 # afd | zerobubble | trace
      params: {stages: 4, microbatches: 8, iterations: 2}
    background:
      bulk_flows: [0, 2, 4]            # swept: one run per value
      load: 0.0                        # Poisson arrivals, fraction of the receiver link
      distribution: hpcc_WebSearch_distribution.txt
    policies: [safs, dctcp]
    seeds: [1]
    repetitions: 1
    max_time_ms: 500
    sim: {mtu_bytes: 9000}             # safs.sim.run.SimConfig fields
    scheduler: {}                      # safs.scheduler.SchedulerConfig fields

Validation is done with pydantic; every error is re-raised as
:class:`safs.errors.InvalidInput` naming the file, the key path and what was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from safs.errors import InvalidInput

WORKLOAD_KINDS = ("afd", "zerobubble", "trace")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkloadSpec(_Strict):
    """Which workload and its constructor parameters (checked by the workload itself)."""

    kind: Literal["afd", "zerobubble", "trace"]
    params: dict[str, Any] = Field(default_factory=dict)


class BackgroundSpec(_Strict):
    """Background traffic: persistent bulk DCTCP flows (swept list) and Poisson arrivals."""

    bulk_flows: list[int] = Field(default_factory=lambda: [0])
    load: list[float] | float = 0.0
    distribution: str = "hpcc_WebSearch_distribution.txt"

    @field_validator("bulk_flows")
    @classmethod
    def _bulk_range(cls, v: list[int]) -> list[int]:
        if not v or any(n < 0 or n > 64 for n in v):
            raise ValueError("must be a non-empty list of integers in 0..64")
        return v

    @field_validator("load")
    @classmethod
    def _load_range(cls, v: list[float] | float) -> list[float]:
        loads = v if isinstance(v, list) else [v]
        if not loads or any(not 0.0 <= x < 1.0 for x in loads):
            raise ValueError("must be a number (or list of numbers) in [0, 1)")
        return loads


class Scenario(_Strict):
    """A validated scenario; ``path`` is the file it came from (set by :func:`load_scenario`)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    topology: str
    workload: WorkloadSpec
    background: BackgroundSpec = Field(default_factory=BackgroundSpec)
    policies: list[str] = Field(default_factory=lambda: ["safs", "dctcp"], min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [1], min_length=1)
    repetitions: int = Field(default=1, ge=1, le=100)
    max_time_ms: float = Field(default=1000.0, gt=0, le=600_000)
    sim: dict[str, Any] = Field(default_factory=dict)
    scheduler: dict[str, Any] = Field(default_factory=dict)
    path: Path | None = None

    def topology_path(self) -> Path:
        """The topology file, resolved relative to the scenario file."""
        base = self.path.parent if self.path else Path.cwd()
        return (base / self.topology).resolve()


def _format_loc(loc: tuple) -> str:
    return ".".join(str(p) for p in loc) or "<top level>"


def load_scenario(path: str | Path, overrides: dict[str, Any] | None = None) -> Scenario:
    """Read and validate a scenario YAML file.

    Args:
        path: the scenario file.
        overrides: top-level keys replacing the file's (used by the CLI, e.g. ``seeds``).

    Raises:
        InvalidInput: unreadable file, bad YAML, or a key with a wrong value; the message names
            the file, the key path and what was expected. Only the first error is reported.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise InvalidInput("scenario", f"cannot read file: {exc.strerror}", source=str(path)) from None
    except yaml.YAMLError as exc:
        raise InvalidInput("scenario", f"not valid YAML: {exc}", source=str(path)) from None
    if not isinstance(raw, dict):
        raise InvalidInput("<top level>", "expected a mapping of scenario keys", source=str(path))
    raw.update(overrides or {})
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        got = err.get("input")
        got_text = "" if isinstance(got, dict) else f" (got {got!r})"
        raise InvalidInput(_format_loc(err["loc"]), f"{err['msg']}{got_text}", source=str(path)) from None
    scenario.path = path.resolve()
    if not scenario.topology_path().is_file():
        raise InvalidInput("topology", f"no such topology file {scenario.topology_path()}", source=str(path))
    return scenario

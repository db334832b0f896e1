"""Scenario files: what `safs run` runs.

A scenario YAML names the topology, the workload, the policies, the seeds, the repetitions and
the parameters to sweep. Example (scenarios/zerobubble.yaml)::

    name: zerobubble
    topology: ../topologies/zerobubble-pp.yaml   # relative to the scenario file
    workload:
      kind: zerobubble                 # afd | zerobubble | urgent | trace | fabric | a collective
      params: {stages: 4, microbatches: 8, iterations: 2}
      sweep: {microbatches: [4, 8]}    # optional: one run per value, merged into params
    background:
      bulk_flows: [0, 2, 4]            # swept: one run per value
      load: 0.0                        # Poisson arrivals, fraction of the receiver link
      distribution: hpcc_WebSearch_distribution.txt
    policies: [safs, dctcp]
    seeds: [1]
    repetitions: 1
    max_time_ms: 500
    sim: {mtu_bytes: 9000}             # safs.experiments.sim.simulation.SimConfig fields
    scheduler: {}                      # safs.core.scheduler.SchedulerConfig fields

Validation is done with pydantic (:class:`safs.core.config.ConfigModel`: frozen, unknown keys
refused, strict types); every error is re-raised by :func:`safs.core.config.invalid_input` as
:class:`safs.core.errors.InvalidInput` naming the file, the key path and what was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, field_validator, model_validator

from safs.core.config import ConfigModel, FieldError
from safs.core.errors import InvalidInput
from safs.core.files import load_yaml
from safs.experiments.workloads import KINDS

# Keys that identify a run in its record (docs/results.md); a workload.sweep may not reuse them.
RECORD_IDENTITY = ("scenario", "target", "policy", "seed", "repetition", "background_flows", "load")


class WorkloadSpec(ConfigModel):
    """Which workload and its constructor parameters (checked by the workload itself)."""

    kind: str  # one of safs.experiments.workloads.KINDS, checked at load before any run
    params: dict[str, Any] = Field(default_factory=dict)
    # Swept workload parameters: one run per combination of values, each merged into params
    # and recorded under its own key (docs/results.md), e.g. {size_bytes: [65536, 4194304]}.
    sweep: dict[str, list[Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sweep_not_in_params(self) -> WorkloadSpec:
        both = sorted(set(self.sweep) & set(self.params))
        if both:
            raise FieldError(f"sweep.{both[0]}", "is also set in workload.params; give it in one place")
        return self

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        if v not in KINDS:
            raise ValueError(f"must be one of {', '.join(map(repr, KINDS))}, got {v!r}")
        return v

    @field_validator("sweep")
    @classmethod
    def _sweep_lists(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in v.items():
            if key in RECORD_IDENTITY:
                raise ValueError(f"{key}: {key!r} is a record key, not a workload parameter")
            if not values:
                raise ValueError(f"{key}: needs at least one value")
            _unique(values, f"sweep.{key}")
        return v


class BackgroundSpec(ConfigModel):
    """Background traffic: persistent bulk DCTCP flows (swept list) and Poisson arrivals."""

    bulk_flows: list[int] = Field(default_factory=lambda: [0])
    load: list[float] = Field(default_factory=lambda: [0.0])
    distribution: str = "hpcc_WebSearch_distribution.txt"

    @field_validator("bulk_flows")
    @classmethod
    def _bulk_range(cls, v: list[int]) -> list[int]:
        if not v or any(n < 0 or n > 64 for n in v):
            raise ValueError(f"must be a non-empty list of integers in 0..64, got {v!r}")
        return v

    @field_validator("load", mode="before")
    @classmethod
    def _load_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    @field_validator("load")
    @classmethod
    def _load_range(cls, v: list[float]) -> list[float]:
        if not v or any(not 0.0 <= x < 1.0 for x in v):
            raise ValueError(f"must be a number (or list of numbers) in [0, 1), got {v!r}")
        return v


class Scenario(ConfigModel):
    """A validated scenario; ``path`` is the file it came from (set by :func:`load_scenario`)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    topology: str
    workload: WorkloadSpec
    background: BackgroundSpec = Field(default_factory=BackgroundSpec)
    policies: list[str] = Field(default_factory=lambda: ["safs", "dctcp"], min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [1], min_length=1)
    repetitions: int = Field(default=1, ge=1, le=100)
    max_time_ms: float = Field(default=1000.0, gt=0, le=600_000)
    # A pipeline transfer later than this past its no-bubble timestamp is a deadline miss:
    # the timing resolution of the target (2 us: safs.experiments.metrics.MISS_TOLERANCE_NS; emulated
    # fabrics set more, their timers jitter by about a millisecond).
    miss_tolerance_us: float = Field(default=2.0, ge=0, le=10_000_000)
    sim: dict[str, Any] = Field(default_factory=dict)
    scheduler: dict[str, Any] = Field(default_factory=dict)
    _path: Path | None = PrivateAttr(None)  # the resolved file (relative paths start there)

    @field_validator("seeds")
    @classmethod
    def _seeds_range(cls, v: list[int]) -> list[int]:
        for seed in v:
            if seed < 0:
                raise ValueError(f"must be integers >= 0, got {seed}")
        return _unique(v, "seed")

    @field_validator("policies")
    @classmethod
    def _policies_unique(cls, v: list[str]) -> list[str]:
        return _unique(v, "policy")
    _source: str = PrivateAttr("")  # the file name as the user gave it, for messages

    @property
    def path(self) -> Path | None:
        """The scenario file, resolved (None for a scenario built in memory)."""
        return self._path

    @property
    def source(self) -> str:
        """The scenario file name as given, for error messages."""
        return self._source

    def topology_path(self) -> Path:
        """The topology file, resolved relative to the scenario file."""
        base = self.path.parent if self.path else Path.cwd()
        return (base / self.topology).resolve()


def _unique(values: list[Any], what: str) -> list[Any]:
    # A repeated seed or policy would count the same runs twice and narrow the intervals.
    seen: list[Any] = []  # a list, not a set: swept values may be lists (ranks)
    for v in values:
        if v in seen:
            raise ValueError(f"duplicate {what} {v!r}; each may appear once")
        seen.append(v)
    return values


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
    raw = load_yaml(path, "scenario")
    if not isinstance(raw, dict):
        raise InvalidInput("<top level>", "expected a mapping of scenario keys", source=str(path))
    raw.update(overrides or {})
    scenario = Scenario.from_mapping(raw, source=str(path))
    scenario._path = path.resolve()
    scenario._source = str(path)
    if not scenario.topology_path().is_file():
        raise InvalidInput("topology", f"no such topology file {scenario.topology_path()}", source=str(path))
    return scenario

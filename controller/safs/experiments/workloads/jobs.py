"""Several pipeline jobs on one fabric at once (``kind: jobs``): for example an AFD deployment
and a ZeroBubble training job whose transfers share receiver and fabric links.

Each job is a workload of its own kind and parameters (the hosts it runs on given by its host
lists: AFD ``attention_hosts`` / ``ffn_hosts``, ZeroBubble ``stage_hosts``, collectives
``ranks``, fabric ``hosts``); the jobs start together and the run ends when all are done. A job's
transfers are labelled ``<job>: <label>`` and belong to dependencies of their own
(``<job>:<dependency>``), so two jobs between the same hosts hold separate grants.

Who is late when the jobs' demands cannot all be met is decided by the network's policy, not
by the jobs' order in the file: SAFS serves the least slack first (strict priority by slack
class, docs/protocol.md "Grants"), so lateness goes to the transfers with the most slack left,
whichever job they belong to; the EDF oracle minimises the largest lateness. Per job the
record says how many of its transfers were late and by how much (docs/workloads.md,
"Several jobs").

Metrics: each job's own metrics prefixed ``<job>.`` (``afd.tpot_p99_ms``,
``train.iteration_time_ms``), plus per job ``<job>.transfers``, ``<job>.misses`` (later than
its no-bubble timestamp by more than the 2 µs default tolerance; the record's
``pipeline_deadline_misses`` uses the scenario's tolerance over all jobs),
``<job>.late_mean_us`` over its late transfers and ``<job>.late_max_us``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from safs.core.errors import InvalidInput
from safs.experiments.metrics import MISS_TOLERANCE_NS
from safs.experiments.workloads.api import DependencySpec, FlowSpec, Workload, WorkloadAPI
from safs.experiments.workloads.params import check_known

JOB_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
NS_PER_US = 1_000


class _JobAPI:
    """The network as one job sees it: its labels and dependency names prefixed by the job's
    name, its transfers' lateness recorded."""

    def __init__(self, api: WorkloadAPI, job: Job) -> None:
        self.api = api
        self.job = job

    def now(self) -> int:
        return self.api.now()

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None:
        self.api.call_at(t_ns, fn)

    def start_flow(self, spec: FlowSpec, on_done: Callable[[int], None], send_at_ns: int | None = None) -> int:
        job = self.job
        ours = FlowSpec(spec.sender, spec.receiver, spec.size_bytes, spec.no_bubble_ts_ns, f"{job.name}: {spec.label}",
                        spec.flow_class, f"{job.name}:{spec.dependency_key()}", spec.firm)

        def done(finish_ns: int) -> None:
            job.finished(spec, finish_ns)
            on_done(finish_ns)

        return self.api.start_flow(ours, done, send_at_ns)


class Job:
    """One job of a :class:`Jobs` workload: its name, its workload and its transfers' lateness."""

    def __init__(self, name: str, workload: Workload) -> None:
        self.name = name
        self.workload = workload
        self.transfers = 0
        self.late_ns: list[int] = []  # of the transfers later than MISS_TOLERANCE_NS

    def finished(self, spec: FlowSpec, finish_ns: int) -> None:
        """A transfer of this job delivered its last byte at ``finish_ns``."""
        if spec.flow_class != "pipeline" or spec.no_bubble_ts_ns is None:
            return
        self.transfers += 1
        late = finish_ns - spec.no_bubble_ts_ns
        if late > MISS_TOLERANCE_NS:
            self.late_ns.append(late)

    def metrics(self) -> dict[str, float]:
        """The job's own metrics and its lateness, keys prefixed ``<name>.``."""
        late = self.late_ns
        own = {
            **self.workload.metrics(),
            "transfers": float(self.transfers),
            "misses": float(len(late)),
            "late_mean_us": sum(late) / len(late) / NS_PER_US if late else 0.0,
            "late_max_us": max(late) / NS_PER_US if late else 0.0,
        }
        return {f"{self.name}.{k}": v for k, v in own.items()}


class Jobs:
    """Several pipeline jobs at once (module docstring).

    Params: ``jobs``: a list of 1..8 entries ``{name, kind, params}``: ``name`` unique, 1-32 of
    ``A-Z a-z 0-9 _ -``; ``kind`` any workload kind but ``jobs``; ``params`` that kind's
    parameters (default none).

    Args:
        params: ``workload.params``.
        build: makes one job's workload from ``(kind, params)`` on the run's topology and seed
            (:func:`safs.experiments.workloads.build_workload`'s factory).
        kinds: the kinds a job may have.

    Raises:
        InvalidInput: a bad entry (field ``workload.params.jobs[i].<key>``), or a job's own bad
            parameter (``workload.params.jobs[i].params.<key>``).
    """

    def __init__(self, params: dict[str, Any], build: Callable[[str, dict[str, Any]], Workload],
                 kinds: tuple[str, ...]) -> None:
        check_known(params, {"jobs"})
        entries = params.get("jobs")
        if not isinstance(entries, list) or not 1 <= len(entries) <= 8:
            got = f"a list of {len(entries)}" if isinstance(entries, list) else f"{type(entries).__name__}"
            raise InvalidInput("workload.params.jobs", f"must be a list of 1..8 jobs {{name, kind, params}}, got {got}")
        self.jobs: list[Job] = []
        for i, entry in enumerate(entries):
            where = f"workload.params.jobs[{i}]"
            if not isinstance(entry, dict):
                raise InvalidInput(where, f"must be a mapping {{name, kind, params}}, got {type(entry).__name__}")
            unknown = sorted(set(entry) - {"name", "kind", "params"})
            if unknown:
                raise InvalidInput(f"{where}.{unknown[0]}", "unknown key; allowed: kind, name, params")
            for key in ("name", "kind"):
                if key not in entry:
                    raise InvalidInput(f"{where}.{key}", "missing (each job needs a name and a kind)")
            name, kind, job_params = entry["name"], entry["kind"], entry.get("params", {})
            if not isinstance(name, str) or not JOB_NAME.match(name) or any(j.name == name for j in self.jobs):
                raise InvalidInput(f"{where}.name", f"must be a unique name of 1-32 letters, digits, _ or -, "
                                   f"got {name!r}")
            if kind not in kinds:
                raise InvalidInput(f"{where}.kind", f"must be one of {', '.join(kinds)}, got {kind!r}")
            if not isinstance(job_params, dict):
                raise InvalidInput(f"{where}.params", f"must be a mapping, got {job_params!r}")
            try:
                workload = build(kind, job_params)
            except InvalidInput as exc:
                field = exc.field.replace("workload.", f"{where}.", 1)
                raise InvalidInput(field, exc.message, exc.source) from None
            self.jobs.append(Job(name, workload))

    def receivers(self) -> list[str]:
        """Every job's receivers (where background traffic is aimed), in order, once each."""
        return list(dict.fromkeys(r for job in self.jobs for r in job.workload.receivers()))

    def start(self, api: WorkloadAPI) -> None:
        for job in self.jobs:
            job.workload.start(_JobAPI(api, job))

    def done(self) -> bool:
        return all(job.workload.done() for job in self.jobs)

    def dependencies(self) -> list[DependencySpec]:
        return [DependencySpec(d.sender, d.receiver, f"{job.name}:{d.name}", d.flow_class)
                for job in self.jobs for d in job.workload.dependencies()]

    def warmup_end_ns(self) -> int | None:
        """The latest warm-up end of the jobs (None if none has one)."""
        ends = [e for job in self.jobs if (e := job.workload.warmup_end_ns()) is not None]
        return max(ends) if ends else None

    def metrics(self) -> dict[str, float]:
        return {k: v for job in self.jobs for k, v in job.metrics().items()}

    def samples(self) -> dict[str, list[float]]:
        return {f"{job.name}.{k}": v for job in self.jobs for k, v in job.workload.samples().items()}

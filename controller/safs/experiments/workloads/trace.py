"""User flow traces: run your own workload as a list of timed flows (docs/trace-format.md).

CSV with header ``start_ns,sender,receiver,bytes,no_bubble_ts_ns,label[,class][,deadline]`` or a
JSON list of objects with the same keys. ``no_bubble_ts_ns`` may be empty / null (then the flow
has no deadline; it must be of class ``background``); ``class`` is ``pipeline`` (default) or
``background``; ``deadline`` is ``soft`` (default: a pipeline's, late bytes are still needed)
or ``firm`` (a late flow is worthless, ``FlowSpec.firm``; pipeline flows only). Each flow
starts at ``start_ns`` (open loop). Deadline misses and FCTs are computed by the runner from
the simulator's flow records.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from safs.core.errors import InvalidInput
from safs.core.files import read_text
from safs.core.hints import FLOW_CLASSES
from safs.core.timebase import HALF, TIME_MASK
from safs.experiments.workloads.api import DependencySpec, FlowSpec, WorkloadAPI

REQUIRED = ("start_ns", "sender", "receiver", "bytes", "no_bubble_ts_ns", "label")
OPTIONAL = ("class", "deadline")
DEADLINE_KINDS = ("soft", "firm")


def _int_cell(value: Any, where: str, column: str, source: str, minimum: int, allow_empty: bool = False) -> int | None:
    if allow_empty and (value is None or (isinstance(value, str) and value.strip() == "")):
        return None
    if isinstance(value, bool):
        value = "bool"
    try:
        number = int(value) if not isinstance(value, float) else None
    except (TypeError, ValueError):
        number = None
    if number is None or number < minimum:
        empty = " or empty" if allow_empty else ""
        raise InvalidInput(
            f"{where}, column {column}", f"expected an integer >= {minimum}{empty}, got {value!r}", source
        )
    return number


def parse_rows(
    rows: list[dict[str, Any]], line_numbers: list[int], source: str, hosts: set[str] | None = None,
    horizon_ns: int | None = None,
) -> list[tuple[int, FlowSpec]]:
    """Validate trace rows into ``(start_ns, FlowSpec)`` pairs sorted by start time.

    Times are on the fabric's 48-bit ns clock (:mod:`safs.core.timebase`): ``start_ns`` at most
    2^48 - 1 and a no-bubble timestamp less than 2^47 ns (about 39 hours) after its start, the
    largest distance the dataplane compares unambiguously (further ones would wrap and read as
    late). ``horizon_ns`` (the scenario's ``max_time_ms``), when given: every flow must start
    before it, or it would never run.

    Raises:
        InvalidInput: naming the file, the line (CSV) or entry (JSON), the column and what
            was expected; or no rows at all (field ``trace``).
    """
    if not rows:
        raise InvalidInput("trace", "no flows: the trace has a header (or an empty list) and no rows", source)
    flows = []
    for row, line in zip(rows, line_numbers):
        where = f"line {line}"
        if not isinstance(row, dict):
            raise InvalidInput(where, "expected an object with keys " + ", ".join(REQUIRED), source)
        for key in REQUIRED:
            if key not in row:
                raise InvalidInput(f"{where}, column {key}", "missing", source)
        for key in row:
            if key not in REQUIRED + OPTIONAL:
                raise InvalidInput(
                    f"{where}, column {key}", f"unknown column; allowed: {', '.join(REQUIRED + OPTIONAL)}", source
                )
        start = _int_cell(row["start_ns"], where, "start_ns", source, 0)
        size = _int_cell(row["bytes"], where, "bytes", source, 1)
        deadline = _int_cell(row["no_bubble_ts_ns"], where, "no_bubble_ts_ns", source, 0, allow_empty=True)
        assert start is not None and size is not None  # not allow_empty
        if start > TIME_MASK:
            raise InvalidInput(f"{where}, column start_ns",
                               f"expected at most 2^48 - 1 ns (the 48-bit fabric clock), got {start}", source)
        if horizon_ns is not None and start >= horizon_ns:
            raise InvalidInput(f"{where}, column start_ns", f"starts at {start} ns, not before the scenario's "
                               f"max_time_ms ({horizon_ns / 1e6:g} ms): it would never run", source)
        if deadline is not None and deadline - start >= HALF:
            raise InvalidInput(f"{where}, column no_bubble_ts_ns",
                               f"expected less than 2^47 ns after start_ns {start} (it would wrap on the "
                               f"48-bit fabric clock and read as late), got {deadline}", source)
        flow_class = (
            (row.get("class") or "pipeline").strip() if isinstance(row.get("class") or "pipeline", str) else None
        )
        if flow_class not in FLOW_CLASSES:
            raise InvalidInput(
                f"{where}, column class", f"expected one of {', '.join(FLOW_CLASSES)}, got {row.get('class')!r}", source
            )
        if flow_class == "pipeline" and deadline is None:
            raise InvalidInput(
                f"{where}, column no_bubble_ts_ns",
                "a pipeline flow needs a no-bubble timestamp (or set class to background)",
                source,
            )
        kind = row.get("deadline") or "soft"
        kind = kind.strip() if isinstance(kind, str) else kind
        if kind not in DEADLINE_KINDS or (kind == "firm" and flow_class != "pipeline"):
            raise InvalidInput(f"{where}, column deadline", f"expected soft or firm (firm only for a pipeline "
                               f"flow), got {row.get('deadline')!r} for a {flow_class} flow", source)
        for column in ("sender", "receiver"):
            name = row[column]
            if not isinstance(name, str) or not name.strip():
                raise InvalidInput(f"{where}, column {column}", f"expected a host name, got {name!r}", source)
            if hosts is not None and name.strip() not in hosts:
                raise InvalidInput(f"{where}, column {column}", f"unknown host {name!r}", source)
        sender, receiver = row["sender"].strip(), row["receiver"].strip()
        if sender == receiver:
            raise InvalidInput(f"{where}, column receiver", f"must differ from the sender {sender!r}", source)
        label = str(row["label"]) if row["label"] is not None else ""
        flows.append((start, FlowSpec(sender, receiver, size, deadline, label, flow_class, firm=kind == "firm")))
    flows.sort(key=lambda item: item[0])
    return flows


def load_trace_file(path: str | Path, hosts: set[str] | None = None,
                    horizon_ns: int | None = None) -> list[tuple[int, FlowSpec]]:
    """Read a CSV (``.csv``) or JSON (``.json``) flow trace; see :func:`parse_rows`.

    Raises:
        InvalidInput: unreadable file, bad header / JSON, or a bad row.
    """
    path = Path(path)
    source = str(path)
    text = read_text(path, "trace")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"line {exc.lineno}", f"not valid JSON: {exc.msg}", source) from None
        if not isinstance(data, list):
            raise InvalidInput("trace", "expected a JSON list of flow objects", source)
        # JSON entries are numbered from 1 and reported as "line N" (entry N of the list).
        return parse_rows(data, list(range(1, len(data) + 1)), source, hosts, horizon_ns)
    lines = text.splitlines()
    reader = csv.DictReader(lines)
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InvalidInput(
            "line 1",
            f"header lacks {', '.join(missing)}; expected start_ns,sender,receiver,bytes,no_bubble_ts_ns,label[,class]",
            source,
        )
    rows, numbers = [], []
    for row in reader:
        if None in row:
            raise InvalidInput(f"line {reader.line_num}", "more cells than header columns", source)
        if any(v is None for v in row.values()):
            raise InvalidInput(f"line {reader.line_num}", "fewer cells than header columns", source)
        rows.append({k: v for k, v in row.items() if not (k == "class" and v == "")})
        numbers.append(reader.line_num)
    return parse_rows(rows, numbers, source, hosts, horizon_ns)


class TraceWorkload:
    """Open-loop replay of a flow trace: each flow starts at its ``start_ns``.

    Params: ``path`` (the trace file; relative paths are resolved against the scenario file's
    directory by :func:`safs.experiments.workloads.build_workload`).

    Metrics: ``trace_flows`` and ``trace_flows_done``; deadline misses and FCTs come from the
    runner's flow records.
    """

    def __init__(self, flows: list[tuple[int, FlowSpec]]) -> None:
        self.flows = flows
        self.finished = 0

    def receivers(self) -> list[str]:
        """Receivers of pipeline flows (where background traffic is aimed)."""
        return sorted({spec.receiver for _, spec in self.flows if spec.flow_class == "pipeline"})

    def start(self, api: WorkloadAPI) -> None:
        base = api.now()
        for start, spec in self.flows:
            api.call_at(base + start, lambda spec=spec: api.start_flow(spec, self._done))

    def _done(self, _t: int) -> None:
        self.finished += 1

    def done(self) -> bool:
        return self.finished >= len(self.flows)

    def metrics(self) -> dict[str, float]:
        return {"trace_flows": float(len(self.flows)), "trace_flows_done": float(self.finished)}

    def dependencies(self) -> list[DependencySpec]:
        """One per (sender, receiver, class) of the trace's pipeline flows."""
        pairs = dict.fromkeys((s.sender, s.receiver, s.flow_class) for _, s in self.flows if s.flow_class == "pipeline")
        return [DependencySpec.of(a, b, c) for a, b, c in pairs]

    def warmup_end_ns(self) -> int | None:
        """No warm-up: a trace counts from its start."""
        return None

    def samples(self) -> dict[str, list[float]]:
        """A trace has no per-step samples."""
        return {}

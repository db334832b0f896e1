"""The SAFS controller as a long-running program (``safs controller``; docs/controller.md).

::

    applications --hint API (gRPC)--> HintServicer --+
                                                     |  one lock
    switches --digest stream--> run loop: poll ------+--> Scheduler --> SwitchLink --> P4RuntimeTarget
                                run loop: tick every tick_ns ----+         (per switch; fails fast
                                run loop: reconnect + reinstall a switch     while the switch is down)
                                          whose stream broke (backoff)

:class:`ControllerApp` owns the pieces: ``start()`` connects to every switch, pushes the
pipeline (P4Info + BMv2 JSON), enables digests, sets clock offsets, installs the static state
(``Scheduler.setup``) and starts the hint API; ``run(stop_event)`` loops until the event is set
or the configured duration passed; ``stop()`` stops the hint server and closes the switches.

Fabric time is the host's wall clock in ns modulo 2^48 (``time.time_ns()``). BMv2's clock counts
microseconds from the switch's start and cannot be read over P4Runtime, so a switch's clock
offset (fabric time minus switch time) is estimated as the fabric time just before its pipeline
push; ``--clock-offset NAME=NS`` overrides it for the first connection (docs/controller.md,
"Clock offset", says what error this leaves).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safs.control import selfcheck
from safs.control.bind import check_listen
from safs.control.hintapi import server as hint_server
from safs.control.state import StateStore
from safs.control.tls import Identities, TlsFiles, load_identities
from safs.core import p4names as n
from safs.core.errors import InvalidInput, TargetConnectionError, TargetError, UpdateFailure
from safs.core.files import load_yaml
from safs.core.packet import ETH_HEADER_BYTES
from safs.core.scheduler import Repairs, Scheduler, SchedulerConfig, scheduler_config_for
from safs.core.target import CounterValue, RequestDigest, SwitchState, Update
from safs.core.telemetry import BackgroundShareAdapter
from safs.core.timebase import TIME_MASK, fabric_clock
from safs.core.topology import Topology, load_topology
from safs.targets.p4rt.target import P4RuntimeTarget
from safs.targets.pipeline_model import PipelineModel

log = logging.getLogger(__name__)

_U64 = (1 << 64) - 1
NS_PER_MS = 1_000_000
DIGEST_POLL_S = 0.001  # longest wait between digest polls with in-process models (no stream to wake it)
# How often the run loop looks at the switches' arbitration (backup takeover); with switches it
# also bounds the loop's sleep, since digests wake it (ControllerApp.digests_ready).
ROLE_CHECK_S = 0.02
# Upper bounds of the write-latency histogram, seconds: BMv2 answers a write in about 1 ms,
# a large reconciliation batch takes seconds (docs/controller.md, "Metrics").
WRITE_LATENCY_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
RECONCILE_MIN_S = 0.1  # --reconcile-s: a read-back of one switch takes tens to hundreds of ms
RECONCILE_MAX_S = 86_400.0


# ---------------------------------------------------------------------------- arguments

@dataclass(frozen=True)
class SwitchSpec:
    """Where one topology switch is reached.

    Attributes:
        name: the switch's name in the topology.
        grpc_addr: ``host:port`` of its P4Runtime server (port 1..65535).
        device_id: P4Runtime device id, 0..2^64-1 (BMv2 ``--device-id``; default 0).
    """

    name: str
    grpc_addr: str
    device_id: int = 0


def parse_switch_spec(text: str) -> SwitchSpec:
    """Parse ``NAME=HOST:PORT[:DEVICE_ID]`` (IPv4 address or host name; no IPv6 literals).

    Raises:
        InvalidInput: field ``--switch``, naming the expected form.
    """
    form = "expected NAME=HOST:PORT[:DEVICE_ID], e.g. tor0=127.0.0.1:9559:0"
    name, sep, addr = text.partition("=")
    parts = addr.split(":")
    if not sep or not name or len(parts) not in (2, 3) or not all(parts):
        raise InvalidInput("--switch", f"{form}; got {text!r}")
    host, port_text = parts[0], parts[1]
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise InvalidInput("--switch", f"port must be an integer in 1..65535, got {port_text!r} in {text!r}")
    device_id = 0
    if len(parts) == 3:
        if not parts[2].isdigit() or int(parts[2]) > _U64:
            raise InvalidInput("--switch", f"device id must be an integer in 0..2^64-1, got {parts[2]!r} in {text!r}")
        device_id = int(parts[2])
    return SwitchSpec(name, f"{host}:{int(port_text)}", device_id)


def parse_clock_offset(text: str) -> tuple[str, int]:
    """Parse ``NAME=NS`` (an integer, may be negative; used modulo 2^48).

    Raises:
        InvalidInput: field ``--clock-offset``.
    """
    name, sep, value = text.partition("=")
    try:
        offset = int(value)
    except ValueError:
        offset = None
    if not sep or not name or offset is None:
        raise InvalidInput("--clock-offset", f"expected NAME=NS with an integer NS, got {text!r}")
    return name, offset


def load_scheduler_config(path: str | Path | None, topology: Topology | None = None) -> SchedulerConfig:
    """The controller's :class:`SchedulerConfig`: a YAML mapping of its fields (``allocator`` a
    mapping of :class:`~safs.core.allocator.AllocatorConfig` fields; ``slack_thresholds_ns`` a
    list); an empty file, or no file (``path`` None), sets none.

    With ``topology``, the fields the file leaves unset are derived from it as the simulator
    and the Mininet backend derive them (:func:`safs.core.scheduler.scheduler_config_for`):
    ``allocator.line_rate_bps`` = the fastest host link, ``ecn_threshold_pkts`` = DCTCP's K for
    that link in frames of ``max_frame_bytes`` (at most a quarter of the smallest switch port
    buffer). The fabric's MTU is ``max_frame_bytes`` - 14: the file's ``max_frame_bytes``, else
    the default 1514 (a 1500-byte MTU; give 9014 for jumbo frames). Without ``topology`` unset
    fields keep their defaults.

    Raises:
        InvalidInput: unreadable file, bad YAML, an unknown key or a value out of range
            (field ``scheduler.<key>``, source the file).
    """
    src = None if path is None else str(path)
    raw = {} if path is None else load_yaml(path, "scheduler-config")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidInput("scheduler", "expected a mapping of SchedulerConfig fields", src)
    given = SchedulerConfig.from_mapping(raw, prefix="scheduler.", source=src)
    if topology is None:
        return given
    return scheduler_config_for(topology, given.max_frame_bytes - ETH_HEADER_BYTES, raw, source=src)


@dataclass(frozen=True)
class ControllerConfig:
    """Everything ``safs controller`` needs (validated on construction; InvalidInput names the
    command-line option).

    Attributes:
        topology_path: topology YAML (``safs.core.topology``).
        switches: where each managed switch is; names must be topology switches, each once.
            Topology switches not listed are not written (a warning is logged).
        p4info_path: compiled P4Info text (default ``p4src/build/safs.p4info.txtpb``).
        bmv2_json_path: compiled BMv2 JSON pushed with it (default ``p4src/build/safs.json``).
        hint_addr: ``host:port`` the hint API binds (port 0: any free port), or ``unix:/PATH``
            (a Unix socket; the Mininet runner uses one so host namespaces reach it).
        tick_ns: period of ``Scheduler.tick``, ns, 1 µs..60 s. Default 1 ms.
        duration_s: stop after this many seconds (> 0), or None to run until stopped.
        scheduler: :class:`SchedulerConfig`, used as given. ``safs controller``
            (:func:`config_from_args`) derives it from the topology and ``--scheduler-config``
            (:func:`load_scheduler_config`); the default here is the topology-independent
            :class:`SchedulerConfig` (100 Gbit/s line rate, ECN K 65).
        clock_offsets_ns: switch -> clock offset (ns) overriding the estimate on the first
            connection; names must be in ``switches``.
        election_id: P4Runtime ``(high, low)`` election id of this controller.
        rpc_timeout_s: deadline of each P4Runtime RPC and of arbitration, seconds (> 0).
        activation_lead_ns: the hint API allocates a flow announced with a start time this
            many ns before it (>= 0). Default 1 ms: about one grant write over P4Runtime.
        reconnect_min_s, reconnect_max_s: first and largest wait between reconnection attempts
            of a switch, seconds (0 < min <= max); the wait doubles after each failure.
        summary_period_s: period of the INFO summary line, seconds (> 0).
        state_dir: directory of the durable state (:class:`safs.control.state.StateStore`),
            or None: nothing survives a restart.
        reconcile_period_s: read every switch back and repair what differs this often,
            seconds (> 0), or 0: only at start and after a reconnection.
        telemetry_period_s: read the receiver ports' counters and adapt their background
            shares this often (:class:`safs.core.telemetry.BackgroundShareAdapter`, only with
            ``scheduler.background_share_max`` set), seconds, or 0: never. Default 1 s.
        tls: TLS of the hint API (:class:`safs.control.tls.TlsFiles`; ``ca`` = the client CA:
            mutual TLS), or None: plaintext, allowed on loopback and Unix-socket addresses
            only, unless ``insecure``.
        identities_path: ``--tls-identities`` file (needs mutual TLS), or None.
        insecure: allow a plaintext hint API on any address (local tests only).
        p4rt_tls: TLS of the P4Runtime channels (``ca`` the switches' CA, ``cert``/``key`` this
            controller's certificate for switches that demand client authentication), or None.
        model: run every switch as an in-process pipeline model
            (:class:`~safs.targets.pipeline_model.PipelineModel`) instead of connecting to
            ``switches`` (whose addresses are then ignored): the controller, hint API,
            state and metrics without BMv2. No packets flow (there are no hosts).
    """

    topology_path: Path
    switches: tuple[SwitchSpec, ...]
    p4info_path: Path = Path("p4src/build/safs.p4info.txtpb")
    bmv2_json_path: Path = Path("p4src/build/safs.json")
    hint_addr: str = "127.0.0.1:50051"
    tick_ns: int = NS_PER_MS
    duration_s: float | None = None
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    clock_offsets_ns: dict[str, int] = field(default_factory=dict)
    election_id: tuple[int, int] = (0, 1)
    rpc_timeout_s: float = 10.0
    activation_lead_ns: int = NS_PER_MS
    reconnect_min_s: float = 0.05
    reconnect_max_s: float = 5.0
    summary_period_s: float = 1.0
    state_dir: Path | None = None
    reconcile_period_s: float = 10.0
    telemetry_period_s: float = 1.0
    model: bool = False
    tls: TlsFiles | None = None
    identities_path: Path | None = None
    insecure: bool = False
    p4rt_tls: TlsFiles | None = None

    def __post_init__(self) -> None:
        if not self.switches:
            raise InvalidInput("--switch", "give at least one NAME=HOST:PORT[:DEVICE_ID]")
        names = [s.name for s in self.switches]
        for name in names:
            if names.count(name) > 1:
                raise InvalidInput("--switch", f"switch {name!r} given more than once")
        if not self.model:
            seen: dict[tuple[str, int], str] = {}
            for spec in self.switches:
                other = seen.setdefault((spec.grpc_addr, spec.device_id), spec.name)
                if other != spec.name:
                    raise InvalidInput("--switch", f"{other} and {spec.name} both at {spec.grpc_addr} device "
                                       f"{spec.device_id}: each switch needs its own address or device id")
        for name in self.clock_offsets_ns:
            if name not in names:
                raise InvalidInput("--clock-offset", f"{name!r} is not a --switch; switches: {', '.join(names)}")
        if isinstance(self.tick_ns, bool) or not isinstance(self.tick_ns, int) \
                or not 1_000 <= self.tick_ns <= 60 * 1_000 * NS_PER_MS:
            raise InvalidInput("--tick-ms", f"must be in 0.001..60000 ms, got {self.tick_ns / NS_PER_MS!r}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise InvalidInput("--duration-s", f"must be > 0 seconds, got {self.duration_s!r}")
        host, sep, port = self.hint_addr.rpartition(":")
        if self.hint_addr.startswith("unix:"):  # a Unix socket (reachable from other network namespaces)
            if not self.hint_addr.startswith("unix:/"):
                raise InvalidInput("--hint-addr",
                                   f"a Unix socket address must be absolute, unix:/PATH; got {self.hint_addr!r}")
        elif not sep or not host or not port.isdigit() or int(port) > 65535:
            raise InvalidInput(
                "--hint-addr", f"must be HOST:PORT with port 0..65535, or unix:/PATH, got {self.hint_addr!r}"
            )
        if not self.rpc_timeout_s > 0:
            raise InvalidInput("rpc_timeout_s", f"must be > 0 seconds, got {self.rpc_timeout_s!r}")
        if not 0 < self.reconnect_min_s <= self.reconnect_max_s:
            raise InvalidInput(
                "reconnect_min_s",
                f"need 0 < reconnect_min_s <= reconnect_max_s, got {self.reconnect_min_s!r}, {self.reconnect_max_s!r}",
            )
        if not self.summary_period_s > 0:
            raise InvalidInput("summary_period_s", f"must be > 0 seconds, got {self.summary_period_s!r}")
        for option, period in (("--reconcile-s", self.reconcile_period_s), ("--telemetry-s", self.telemetry_period_s)):
            if period != 0 and not RECONCILE_MIN_S <= period <= RECONCILE_MAX_S:
                raise InvalidInput(option, f"must be 0 (off) or {RECONCILE_MIN_S:g}..{RECONCILE_MAX_S:g} "
                                   f"seconds, got {period!r}")
        if self.identities_path is not None and (self.tls is None or self.tls.ca is None):
            raise InvalidInput("--tls-identities", "needs mutual TLS: give --tls-cert, --tls-key and --tls-client-ca")
        local = self.hint_addr.startswith("unix:") or host in ("127.0.0.1", "localhost", "[::1]")
        if self.tls is None and not local and not self.insecure:
            raise InvalidInput("--hint-addr", f"{self.hint_addr} is not a loopback or Unix-socket address: give "
                               "--tls-cert and --tls-key (with --tls-client-ca: mutual TLS, recommended), or "
                               "--insecure for a plaintext, unauthenticated hint API (local tests only)")
        for what, path in (("--p4info", self.p4info_path), ("--bmv2-json", self.bmv2_json_path)):
            if not Path(path).is_file():
                raise InvalidInput(what, f"no such file: {path}")


# ---------------------------------------------------------------------------- one switch


class SwitchLink:
    """One switch as the scheduler sees it (implements :class:`safs.core.target.Target`): forwards to
    the current :class:`P4RuntimeTarget`, and while the switch is marked down fails fast.

    Down (``down_reason`` set) after the digest stream closed (TargetConnectionError), a write
    failed with UNAVAILABLE on every update (TargetError), or a read failed with UNAVAILABLE
    (TargetConnectionError). Then writes raise TargetError UNAVAILABLE for every update without
    any I/O (the scheduler keeps them unrecorded; ``Scheduler.reinstall`` writes all again), and
    counter reads answer the last value read (no progress seen while down), so a tick still
    serves the other switches. The run loop reconnects and calls :meth:`attach`.
    """

    def __init__(self, spec: SwitchSpec, target: P4RuntimeTarget) -> None:
        self.name = spec.name
        self.spec = spec
        self.target = target
        self.down_reason: str | None = None
        self._counters: dict[tuple[str, int], CounterValue] = {}
        self.writes = 0  # write calls sent to the switch (metrics)
        self.write_updates = 0  # updates in them
        self.write_seconds = 0.0  # time spent in them
        # writes that took at most WRITE_LATENCY_BUCKETS_S[i] seconds (the metrics' histogram)
        self.write_latency_counts = [0] * len(WRITE_LATENCY_BUCKETS_S)

    @property
    def is_down(self) -> bool:
        """True while the connection is known broken."""
        return self.down_reason is not None

    def mark_down(self, reason: str) -> None:
        """Record that the connection broke (the first reason is kept)."""
        if self.down_reason is None:
            self.down_reason = reason
            log.warning("%s: connection lost: %s", self.name, reason)

    def attach(self, target: P4RuntimeTarget) -> None:
        """Use a new connection; the link is up again. Counter cache dropped (counters restart)."""
        self.target = target
        self.down_reason = None
        self._counters.clear()

    def _unavailable(self, n: int) -> TargetError:
        return TargetError(
            [UpdateFailure(i, "UNAVAILABLE", f"{self.name}: switch down ({self.down_reason})") for i in range(n)]
        )

    def _check(self, err: TargetError) -> None:
        if err.failures and all(f.code == "UNAVAILABLE" for f in err.failures):
            self.mark_down(err.failures[0].message)

    def _check_read(self, err: TargetConnectionError) -> None:
        if err.code == "UNAVAILABLE":
            self.mark_down(str(err))

    def write(self, updates: Sequence[Update]) -> None:
        """``P4RuntimeTarget.write``, or UNAVAILABLE for every update while down (nothing to
        write: nothing fails).

        Raises:
            TargetError: as ``P4RuntimeTarget.write``.
        """
        self._write(self.target.write, updates)

    def write_trusted(self, updates: Sequence[Update]) -> None:
        """:meth:`write` through the target's ``write_trusted`` where its class has one (the
        pipeline model behind ``--model``; see ``Scheduler._write``), else its ``write``.

        Raises:
            TargetError: as :meth:`write`.
        """
        target = self.target
        trusted = getattr(type(target), "write_trusted", None)
        self._write(target.write if trusted is None else lambda batch: trusted(target, batch), updates)

    def _write(self, write: Callable[[Sequence[Update]], None], updates: Sequence[Update]) -> None:
        if self.is_down:
            if updates:
                raise self._unavailable(len(updates))
            return
        t0 = time.perf_counter()
        try:
            write(updates)
        except TargetError as err:
            self._check(err)
            raise
        finally:
            took = time.perf_counter() - t0
            self.writes += 1
            self.write_updates += len(updates)
            self.write_seconds += took
            for i, bound in enumerate(WRITE_LATENCY_BUCKETS_S):
                if took <= bound:
                    self.write_latency_counts[i] += 1

    def set_clock_offset(self, offset_ns: int) -> None:
        """``P4RuntimeTarget.set_clock_offset`` (UNAVAILABLE while down).

        Raises:
            TargetError: the write was refused (one update, index 0).
        """
        if self.is_down:
            raise self._unavailable(1)
        try:
            self.target.set_clock_offset(offset_ns)
        except TargetError as err:
            self._check(err)
            raise

    def read_counter(self, counter: str, index: int) -> CounterValue:
        """``P4RuntimeTarget.read_counter``; while down (or when the read finds it down) the
        last value read for that cell, zero if none.

        Raises:
            TargetConnectionError: the read failed with a code other than UNAVAILABLE.
        """
        key = (counter, index)
        if not self.is_down:
            try:
                value = self.target.read_counter(counter, index)
            except TargetConnectionError as err:
                self._check_read(err)
                if not self.is_down:
                    raise
            else:
                self._counters[key] = value
                return value
        return self._counters.get(key, CounterValue(0, 0))

    def read_counter_cells(self, counter: str, indices: Sequence[int]) -> list[CounterValue]:
        """``P4RuntimeTarget.read_counter_cells`` (one Read); while down (or when the read finds
        it down) the last value read for each cell, zero if none.

        Raises:
            TargetConnectionError: the read failed with a code other than UNAVAILABLE.
        """
        if not self.is_down:
            try:
                values = self.target.read_counter_cells(counter, indices)
            except TargetConnectionError as err:
                self._check_read(err)
                if not self.is_down:
                    raise
            else:
                for index, value in zip(indices, values):
                    self._counters[(counter, index)] = value
                return values
        return [self._counters.get((counter, i), CounterValue(0, 0)) for i in indices]

    def poll_digests(self) -> list[RequestDigest]:
        """Digests received since the last call ([] while down; a closed stream marks it down)."""
        if self.is_down:
            return []
        try:
            return self.target.poll_digests()
        except TargetConnectionError as err:
            self.mark_down(str(err))
            return []


# ---------------------------------------------------------------------------- the program


@dataclass
class ControllerStats:
    """Counters of a :class:`ControllerApp` run.

    Attributes:
        digests: REQUEST digests received from switches.
        digests_rejected: digests the scheduler refused (bad content, no free meter slot).
        ticks: scheduler ticks run.
        tick_failures: ticks (or digest merges) with switch writes refused or counter reads
            failed (retried next tick).
        reconnects: switches reconnected and re-installed.
        reconnect_failures: reconnection attempts that failed (retried with backoff).
        pipelines_kept: switches found running this pipeline (cookie) at connection, so
            reconciled instead of pushed again.
        takeovers: times this controller, a backup, became primary at every switch.
        step_downs: times it lost primary at a switch and stepped back from all.
        reconciliations: switches read back and reconciled (at start, reconnection, periodic).
        repairs_missing, repairs_changed, repairs_extra: what those reconciliations wrote
            (:class:`safs.core.scheduler.Repairs`).
    """

    digests: int = 0
    digests_rejected: int = 0
    ticks: int = 0
    tick_failures: int = 0
    reconnects: int = 0
    reconnect_failures: int = 0
    pipelines_kept: int = 0
    takeovers: int = 0
    step_downs: int = 0
    reconciliations: int = 0
    repairs_missing: int = 0
    repairs_changed: int = 0
    repairs_extra: int = 0


@dataclass
class _Retry:
    due_s: float  # time.monotonic() of the next attempt
    wait_s: float  # wait after the next failure


class StartInterrupted(Exception):
    """A stop request (SIGINT, SIGTERM) came while :meth:`ControllerApp.start` connected to or
    prepared the switches; it stopped at the next step, with everything it opened closed."""


class ControllerApp:
    """The controller program: switches, scheduler, hint API and the run loop.

    Args:
        config: :class:`ControllerConfig`.
        clock: fabric time now in ns (default :func:`fabric_clock`); also the hint API's clock.

    Raises:
        InvalidInput: an unreadable topology, or a ``--switch`` name that is not a topology
            switch (field ``--switch``, listing the topology's switches).

    Thread safety: :attr:`lock` serialises every scheduler call (hint RPCs, digests, ticks,
    re-installs). ``run`` is meant for one thread; ``stop`` may be called from another after
    ``run`` returned.
    """

    def __init__(self, config: ControllerConfig, clock: Callable[[], int] = fabric_clock) -> None:
        self.config = config
        self.clock = clock
        self.topology: Topology = load_topology(config.topology_path)
        switches = self.topology.switches()
        for spec in config.switches:
            if spec.name not in switches:
                raise InvalidInput(
                    "--switch",
                    f"unknown switch {spec.name!r}; topology "
                    f"{self.topology.name!r} has switches: {', '.join(switches)}",
                )
        self.lock = threading.Lock()
        self.stats = ControllerStats()
        self.links: dict[str, SwitchLink] = {}
        self.clock_offsets_ns: dict[str, int] = {}
        self.scheduler: Scheduler | None = None
        self.adapter: BackgroundShareAdapter | None = None  # with scheduler.background_share_max
        self.store: StateStore | None = None
        self.identities: Identities | None = (
            load_identities(config.identities_path, self.topology.hosts()) if config.identities_path else None)
        self.hint_server: hint_server.RunningHintServer | None = None
        self.role = "starting"  # then "primary" or "backup" (docs/operations.md, "Primary and backup")
        self.election_id = config.election_id  # raised by a takeover
        self._next_role_check = 0.0
        self._start_stop: threading.Event | None = None  # start()'s stop event while it runs
        # Set by every switch's stream when digests arrive (SwitchClient's doorbell): the run
        # loop sleeps on it instead of polling the streams every millisecond.
        self.digests_ready = threading.Event()
        self._retry: dict[str, _Retry] = {}
        self._stopped = False
        self._next_tick_warning = 0.0

    @property
    def hint_address(self) -> str:
        """``host:port`` (or ``unix:/PATH``) the hint API listens on (after :meth:`start`)."""
        if self.hint_server is None:
            raise InvalidInput("hint_address", "the controller is not started")
        if self.config.hint_addr.startswith("unix:"):
            return self.config.hint_addr
        return self.hint_server.target

    # ------------------------------------------------------------------ lifecycle

    def start(self, stop: threading.Event | None = None) -> None:
        """Connect to every switch. Primary at all of them: keep or push each pipeline, enable
        digests, restore the state store, reconcile every switch (static state and grants) and
        start the hint API. Primary at none: stand by as a backup (:meth:`run` takes over when
        the primary is gone). ``stop`` set meanwhile (a signal): it stops after the step under
        way (one switch's connection, or one phase of all switches' preparation).

        Raises:
            StartInterrupted: ``stop`` was set.
            TargetConnectionError: a switch did not answer, or it refused the pipeline.
            InvalidInput: primary at some switches only (field ``--election-id``).
            TargetError: a switch refused a write (digest config, static state).
            InvalidInput: the hint address cannot be bound (field ``address``).
            InvalidInput: a switch failed the start-up self-check (field ``--switch NAME=ADDR``;
                :func:`safs.control.selfcheck.check_switch`).
            Everything opened so far is closed before the error propagates.
        """
        cfg = self.config
        if cfg.model and cfg.election_id != (0, 1):
            log.warning("--election-id has no effect with --model: in-process switches do not arbitrate, "
                        "every controller is primary (one per --state directory)")
        missing = [sw for sw in self.topology.switches() if sw not in {s.name for s in cfg.switches}]
        if missing:
            log.warning(
                "no --switch for %s: the controller will not write to %s (their flows are still allocated)",
                ", ".join(missing),
                "it" if len(missing) == 1 else "them",
            )
        try:
            hint_server.check_bind(cfg.hint_addr, cfg.tls)  # before any switch is touched
            if cfg.state_dir is not None:
                self.store = StateStore(cfg.state_dir, self.topology.name)
            self._start_stop = stop
            for spec in cfg.switches:
                self._check_start_stop()
                target = self._open_model(spec) if cfg.model else self._connect(spec)
                self.links[spec.name] = SwitchLink(spec, target)  # a PipelineModel serves as the target too
            primary = [name for name, link in self.links.items() if cfg.model or link.target.is_primary]
            if not primary:
                self.role = "backup"
                others = {name: link.target.primary_election for name, link in self.links.items()}
                log.info("standing by as backup (election id %s): primary at every switch is %s", cfg.election_id,
                         ", ".join(f"{name}: {eid}" for name, eid in others.items()))
                return
            if len(primary) < len(self.links):
                raise InvalidInput(
                    "--election-id",
                    f"{cfg.election_id[1]} is primary at {', '.join(primary)} but not at "
                    f"{', '.join(sorted(set(self.links) - set(primary)))}, where another controller is: a "
                    "controller runs all of its switches or none (no split brain); stop it or give a higher id")
            self._become_primary(first=True)
        except BaseException:
            self.stop()
            raise
        finally:
            self._start_stop = None

    def _check_start_stop(self) -> None:
        """Raise StartInterrupted if the stop event given to :meth:`start` is set."""
        if self._start_stop is not None and self._start_stop.is_set():
            raise StartInterrupted("stop requested during start")

    def _become_primary(self, first: bool = False) -> None:
        """Primary at every switch: keep or push each pipeline, restore the store into a new
        scheduler, reconcile every switch and start the hint API.

        ``first``: at start (``--clock-offset`` applies), not at a takeover.

        Raises:
            TargetConnectionError, TargetError, InvalidInput: as :meth:`start`.
        """
        cfg = self.config
        names = list(self.links)
        # One thread per switch for the round trips (cookie, digest config, read-back): a
        # takeover or restart waits for the slowest switch, not for their sum.
        with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="safs-adopt") as pool:
            opened = dict(zip(names, pool.map(
                lambda name: (self.clock() & TIME_MASK, False) if cfg.model else self._prepare(self.links[name].target),
                names)))
            self._check_start_stop()
            if first:  # every queue of every switch forwards, before anything is served
                list(pool.map(lambda name: selfcheck.check_switch(
                    name, self.links[name].spec.grpc_addr, self.links[name].target), names))
                self._check_start_stop()
            self.scheduler = Scheduler(self.topology, self.links, cfg.scheduler)
            self.adapter = (BackgroundShareAdapter(self.scheduler)
                            if cfg.scheduler.background_share_max is not None else None)
            if self.adapter is not None:
                log.info("adaptive background share on: every receiver port between %g and %g, step %g, every %s",
                         self.adapter.floor, self.adapter.ceiling, self.adapter.step,
                         f"{cfg.telemetry_period_s:g} s" if cfg.telemetry_period_s else "never (--telemetry-s 0)")
            if self.store is not None:
                self.store.lock_primary()  # one primary per state directory
                stored = self.store.load()
                self.scheduler.journal = self.store  # a dependency restore moves to a new slot is stored
                try:
                    self.scheduler.restore([(d.dep, d.slot) for d in stored.dependencies],
                                           [(f.hint, f.admitted) for f in stored.flows], self.clock())
                except InvalidInput as err:
                    raise InvalidInput("--state", f"{self.store.path}: a stored hint is refused: {err} (the "
                                       "topology changed? give another --state directory, or delete that row of "
                                       "its dependencies or flows table with sqlite3 while no controller "
                                       "runs)") from None
                log.info("state %s: %d dependencies and %d flows restored", self.store.path,
                         len(stored.dependencies), len(stored.flows))
            t0 = time.monotonic()
            scheduler = self.scheduler
            reads: dict[Future[SwitchState], str] = {
                pool.submit(lambda name=name: self.links[name].target.read_state(scheduler.meter_cells(name))): name
                for name in names}
            order: Iterable[Future[SwitchState]] = reads
            if first and self.store is not None and self.store.created:
                # every switch read before any write: does one hold another controller's grants?
                self._refuse_foreign_grants({name: fut.result() for fut, name in reads.items()}, opened)
            else:  # each switch reconciled as soon as it is read: the fast ones are written meanwhile
                order = as_completed(reads)
            for fut in order:
                name = reads[fut]
                estimate, kept = opened[name]
                with self.lock:
                    self._adopt(name, estimate, kept, cfg.clock_offsets_ns.get(name) if first else None,
                                fut.result())
        log.info("reconciled routes, slack classes, defaults and %d grants on %s in %.1f ms",
                 len(self.scheduler.dependencies) + len(self.scheduler.allocator.grants()),
                 ", ".join(self.links), (time.monotonic() - t0) * 1e3)
        self._check_start_stop()
        check_listen("--hint-addr", cfg.hint_addr)  # again: it may have been taken since the start
        try:
            self.hint_server = hint_server.start(
                self.scheduler, cfg.hint_addr, self.clock, lock=self.lock, activation_lead_ns=cfg.activation_lead_ns,
                store=self.store, tls=cfg.tls, identities=self.identities,
            )
        except InvalidInput as err:  # taken between the check and the bind
            raise InvalidInput("--hint-addr", err.message) from None
        if cfg.tls is None:
            log.warning("the hint API is plaintext and unauthenticated (local tests only): give --tls-cert, "
                        "--tls-key and --tls-client-ca")
        self.role = "primary"
        log.info("hint API listening on %s", self.hint_address)

    def _refuse_foreign_grants(self, observed: dict[str, SwitchState], opened: dict[str, tuple[int, bool]]) -> None:
        """A new (just created) --state directory over switches that kept another controller's
        grants: remove the directory and refuse (a mistyped --state would delete them as stale).

        Raises:
            InvalidInput: field ``--state``, naming the switch and how many grants it holds.
        """
        assert self.store is not None
        for name, (_, kept) in opened.items():
            held = sum(1 for e in observed[name].entries if e.table == n.DEP_GRANT and not e.is_default)
            if kept and held:
                self.store.discard()  # else the next start would find it and remove the grants
                raise InvalidInput("--state", f"{self.store.path.parent} is a new state directory, but {name} "
                                   f"holds {held} grants of another controller: a mistyped --state? Give the "
                                   "directory of the controller that wrote them (or start once without "
                                   "--state to remove them as stale)")

    def _adopt(self, name: str, estimate: int, kept: bool, override: int | None = None,
               observed: SwitchState | None = None) -> Repairs:
        """Under the lock: read ``name`` back (unless ``observed`` was read already), set its
        clock offset (``override``, else the switch's own when it kept the pipeline, else
        ``estimate``), and reconcile it.

        Raises:
            TargetConnectionError: the read failed. TargetError: writes refused.
        """
        assert self.scheduler is not None
        link = self.links[name]
        if observed is None:
            observed = link.target.read_state(self.scheduler.meter_cells(name))
        held = _clock_offset_of(observed)
        offset = override if override is not None else held if kept and held is not None else estimate
        if override is not None:
            log.info("%s: clock offset %d ns (from --clock-offset; estimate was %d ns)", name, offset, estimate)
        elif kept:
            log.info("%s: keeps its clock offset %d ns (its clock did not restart)", name, offset)
        if offset != held:
            link.set_clock_offset(offset)
        self.clock_offsets_ns[name] = offset
        held_grants = sum(1 for e in observed.entries if e.table == n.DEP_GRANT and not e.is_default)
        if kept and held_grants and not self.scheduler.dependencies and not self.scheduler.allocator.grants():
            log.warning("%s holds %d grants this controller does not know (%s): they are removed as stale; to keep "
                        "them, give the --state directory of the controller that wrote them", name, held_grants,
                        "no --state" if self.store is None else f"nothing in {self.store.path}")
        return self._reconcile(name, observed)

    def _reconcile(self, name: str, observed: SwitchState) -> Repairs:
        """Under the lock: ``Scheduler.reconcile`` of ``name``, counted and logged."""
        assert self.scheduler is not None
        repairs = self.scheduler.reconcile(name, observed)
        s = self.stats
        s.reconciliations += 1
        s.repairs_missing += repairs.missing
        s.repairs_changed += repairs.changed
        s.repairs_extra += repairs.extra
        log.log(logging.INFO if repairs.total else logging.DEBUG,
                "%s: reconciled: %d missing, %d changed, %d extra entities repaired", name,
                repairs.missing, repairs.changed, repairs.extra)
        return repairs

    def reconcile_all(self) -> Repairs:
        """Read every switch that is up back and repair what differs (the periodic
        reconciliation; a switch whose read or writes fail is logged and left for the next)."""
        assert self.scheduler is not None
        total = Repairs()
        for name, link in self.links.items():
            if link.is_down:
                continue
            try:
                # Read outside the lock (hints keep flowing): a write that lands between the
                # read and the diff is written again (INSERT -> MODIFY; a DELETE of a gone
                # entry counts as done): at worst one spurious repair counted.
                with self.lock:
                    cells = self.scheduler.meter_cells(name)
                observed = link.target.read_state(cells)
                with self.lock:
                    # Differences seen in a read taken outside the lock may be writes that raced
                    # it: only then read again under the lock, and repair what that read shows.
                    if self.scheduler.diff(name, observed).total:
                        observed = link.target.read_state(self.scheduler.meter_cells(name))
                    r = self._reconcile(name, observed)
            except (TargetConnectionError, TargetError) as err:
                log.warning("%s: reconciliation failed (retried next period): %s", name, err)
                continue
            total.missing += r.missing
            total.changed += r.changed
            total.extra += r.extra
        return total

    def _open_model(self, spec: SwitchSpec) -> PipelineModel:
        """An in-process pipeline model for ``spec`` (``--model``): its clock counts ns from
        now, so the clock offset is the fabric time now."""
        start = time.monotonic_ns()
        log.info("%s: in-process pipeline model (--model)", spec.name)
        model = PipelineModel(spec.name, lambda: time.monotonic_ns() - start)
        return model

    def _connect(self, spec: SwitchSpec) -> P4RuntimeTarget:
        """Connect and arbitrate with the configured election id (primary or backup).

        Raises:
            TargetConnectionError: connect or arbitration failed.
        """
        cfg = self.config
        tls = None if cfg.p4rt_tls is None else (cfg.p4rt_tls.ca, cfg.p4rt_tls.cert, cfg.p4rt_tls.key)
        target = P4RuntimeTarget(spec.name, spec.grpc_addr, spec.device_id, cfg.p4info_path, cfg.bmv2_json_path,
                                 election_id=cfg.election_id, timeout_s=cfg.rpc_timeout_s, tls=tls,
                                 doorbell=self.digests_ready)
        log.info("%s: connected to %s (device %d), %s", spec.name, spec.grpc_addr, spec.device_id,
                 "primary" if target.is_primary else f"backup (primary: {target.primary_election})")
        return target

    def _open(self, spec: SwitchSpec) -> tuple[P4RuntimeTarget, int, bool]:
        """:meth:`_connect` and :meth:`_prepare` (a reconnection); a switch that lost its
        pipeline (restarted) gets the start-up self-check again before anything is written.

        Raises:
            TargetConnectionError: connect, arbitration (also PERMISSION_DENIED: another
                controller is primary) or pipeline push failed.
            TargetError: the digest configuration was refused.
            InvalidInput: the restarted switch fails the self-check (for example restarted
                without ``-- --priority-queues 8``): the reconnection is retried later.
        """
        target = self._connect(spec)
        try:
            if not target.is_primary:
                raise TargetConnectionError(spec.grpc_addr, "arbitration", "PERMISSION_DENIED",
                                            "another controller with a higher election id is primary",
                                            switch=spec.name)
            estimate, kept = self._prepare(target)
            if not kept:
                selfcheck.check_switch(spec.name, spec.grpc_addr, target)
            return target, estimate, kept
        except BaseException:
            target.close()
            raise

    def _prepare(self, target: P4RuntimeTarget) -> tuple[int, bool]:
        """On a switch where this controller is primary: keep the pipeline if the switch runs
        it (its cookie matches: its tables are then reconciled), else push it. Returns the
        estimated clock offset (fabric time just before the push, ns mod 2^48) and whether the
        pipeline was kept.

        Raises:
            TargetConnectionError: the cookie read or the push failed.
            TargetError: the digest configuration was refused.
        """
        name = target.name
        before = self.clock()
        if target.runs_pipeline():
            target.configure_digests()
            self.stats.pipelines_kept += 1
            log.info("%s: runs this pipeline already (cookie %#x): kept, its state is reconciled", name, target.cookie)
            return before & TIME_MASK, True
        t0 = time.monotonic_ns()
        target.push_pipeline()  # also enables the digest stream
        push_ns = time.monotonic_ns() - t0
        offset = before & TIME_MASK
        log.info(
            "%s: pipeline pushed and digests enabled in %.1f ms; clock offset estimate %d ns "
            "(error below the push time if the switch clock starts at the push)",
            name,
            push_ns / NS_PER_MS,
            offset,
        )
        return offset, False

    def stop(self) -> None:
        """Stop the hint server and close every switch connection. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self.hint_server is not None:
            self.hint_server.stop(grace_s=0.5)
        if self.store is not None:
            self.store.close()
        for link in self.links.values():
            link.target.close()
        log.info("controller stopped")

    def __enter__(self) -> ControllerApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ run loop

    def run(self, stop_event: threading.Event) -> None:
        """Poll digests, tick every ``tick_ns`` and reconnect broken switches until
        ``stop_event`` is set or ``duration_s`` passed. Errors of single switches are logged
        and retried, never raised.

        A backup only watches the switches' arbitration (every ROLE_CHECK_S) and takes over
        when the primary is gone; a primary that loses primary at a switch steps back from all
        (docs/operations.md, "Primary and backup").

        Raises:
            InvalidInput: not started; a takeover that cannot finish (:meth:`check_role`).
        """
        if self.role == "starting":
            raise InvalidInput("run", "call start() first")
        cfg = self.config
        tick_s = cfg.tick_ns / 1e9
        begin = time.monotonic()
        end = begin + cfg.duration_s if cfg.duration_s is not None else None
        next_tick = begin
        next_summary = begin + cfg.summary_period_s
        next_reconcile = begin + cfg.reconcile_period_s
        next_telemetry = begin + cfg.telemetry_period_s
        last = _Snapshot.of(self)
        while not stop_event.is_set():
            now_s = time.monotonic()
            if end is not None and now_s >= end:
                log.info("duration of %.3g s reached", cfg.duration_s)
                break
            if now_s >= self._next_role_check and not cfg.model:
                self._next_role_check = now_s + ROLE_CHECK_S
                self.check_role()
            if self.role != "primary":
                stop_event.wait(ROLE_CHECK_S if end is None else max(0.0, min(ROLE_CHECK_S, end - now_s)))
                continue
            self.digests_ready.clear()  # before polling: a digest arriving after it rings again
            self.poll_digests()
            if now_s >= next_tick:
                self.tick()
                next_tick += tick_s
                if next_tick < now_s:  # a slow tick: do not try to catch up
                    next_tick = now_s + tick_s
            self.reconnect_due(now_s)
            if cfg.reconcile_period_s and now_s >= next_reconcile:
                self.reconcile_all()
                next_reconcile = time.monotonic() + cfg.reconcile_period_s
            if self.adapter is not None and cfg.telemetry_period_s and now_s >= next_telemetry:
                self.adapt_background()
                next_telemetry = time.monotonic() + cfg.telemetry_period_s
            if now_s >= next_summary:
                last = self._summary(last)
                next_summary = now_s + cfg.summary_period_s
            # Until the next tick, at most ROLE_CHECK_S (the timers above are seconds apart), or
            # until a switch's stream brings digests: a flow nobody announced is admitted by its
            # first REQUEST's digest. In-process models have no stream: polled every DIGEST_POLL_S.
            wait = min(next_tick, time.monotonic() + (DIGEST_POLL_S if cfg.model else ROLE_CHECK_S)) - time.monotonic()
            if end is not None:
                wait = min(wait, end - time.monotonic())
            if wait > 0:
                (stop_event if cfg.model else self.digests_ready).wait(wait)

    def check_role(self) -> None:
        """A backup takes over when the primary is gone from any switch (the switch promoted
        this controller, as BMv2's PI does, or reports no primary, as the P4Runtime
        specification says); a primary steps back from all switches when another controller
        is primary at any of them. Switch failures are logged; the next check retries.

        Raises:
            InvalidInput: a takeover cannot finish for a reason retrying would not mend (the
                hint API's address cannot be bound, a stored hint the topology refuses): the
                controller stops instead of re-arbitrating again and again.
        """
        try:
            if self.role == "backup":
                targets = [link.target for link in self.links.values()]
                if any(t.is_primary or t.primary_election is None for t in targets):
                    self._take_over()
            elif self.role == "primary":
                lost = {name: link.target.primary_election for name, link in self.links.items()
                        if not link.is_down and not link.target.is_primary
                        and link.target.primary_election not in (None, self.election_id)}
                if lost:
                    self._step_down(lost)
        except (TargetConnectionError, TargetError) as err:
            log.warning("role check (%s): %s", self.role, err)

    def _take_over(self) -> None:
        """Arbitrate at every switch with an election id above any seen; primary at all of
        them: restore, reconcile, serve. Else stay backup (another backup won)."""
        t0 = time.monotonic()
        targets = [link.target for link in self.links.values()]
        high, low = max([self.election_id, *(t.highest_election for t in targets)])
        new = (high, low + 1) if low < _U64 else (high + 1, 0)
        won = [t.rearbitrate(new) for t in targets]
        self.election_id = new
        if not all(won):
            log.warning("takeover with election id %s lost at %s: another controller is primary; staying backup",
                        new, ", ".join(t.name for t, w in zip(targets, won) if not w))
            return
        log.warning("the primary controller is gone: taking over with election id %s", new)
        self._become_primary()
        self.stats.takeovers += 1
        log.warning("took over as primary of %s in %.0f ms (arbitration, restore, reconciliation)",
                    ", ".join(self.links), (time.monotonic() - t0) * 1e3)

    def _step_down(self, lost: dict[str, tuple[int, int] | None]) -> None:
        """Another controller is primary somewhere: stop serving and writing everywhere."""
        log.warning("controller %s is primary at %s: stepping back from all switches (now backup)",
                    ", ".join(str(eid) for eid in set(lost.values())), ", ".join(lost))
        if self.hint_server is not None:
            self.hint_server.stop(grace_s=0.5)
            self.hint_server = None
        with self.lock:
            self.scheduler = None
            self.adapter = None
        if self.store is not None:
            self.store.unlock_primary()
        self.role = "backup"
        self.stats.step_downs += 1

    def poll_digests(self) -> int:
        """Merge the digests every switch sent since the last call; returns how many arrived."""
        assert self.scheduler is not None
        received = 0
        for name, link in self.links.items():
            digests = link.poll_digests()
            if not digests:
                continue
            received += len(digests)
            with self.lock:
                now = self.clock()
                for digest in digests:
                    try:
                        self.scheduler.on_digest(name, digest, now)
                    except InvalidInput as err:
                        self.stats.digests_rejected += 1
                        log.warning("%s: digest of flow %d refused: %s", name, digest.flow_id, err)
                    except (TargetError, TargetConnectionError) as err:  # admitted; retried by tick
                        self.stats.tick_failures += 1
                        log.debug("%s: digest of flow %d: writes failed: %s", name, digest.flow_id, err)
        self.stats.digests += received
        return received

    def tick(self) -> None:
        """One ``Scheduler.tick`` under the lock; refused writes (TargetError) and failed counter
        reads (TargetConnectionError) are counted and logged (DEBUG while a switch is down, else
        at most one WARNING per summary period), and retried by the next tick."""
        assert self.scheduler is not None
        with self.lock:
            try:
                self.scheduler.tick(self.clock())
            except (TargetError, TargetConnectionError) as err:
                self.stats.tick_failures += 1
                down = any(link.is_down for link in self.links.values())
                # At most one WARNING per summary period: a persistent refusal would otherwise
                # log once per tick.
                now_s = time.monotonic()
                what = "writes refused" if isinstance(err, TargetError) else "counter read failed"
                if down or now_s < self._next_tick_warning:
                    log.debug("tick: %s: %s", what, err)
                else:
                    self._next_tick_warning = now_s + self.config.summary_period_s
                    log.warning("tick: %s (retried every tick): %s", what, err)
            self.stats.ticks += 1

    def adapt_background(self) -> dict[tuple[str, int], float]:
        """One telemetry period: read the receiver ports' counters and move their background
        shares (:meth:`BackgroundShareAdapter.step_all`) under the lock; returns the ports
        that changed. Failures are logged (WARNING) and counted in ``stats.tick_failures``;
        the next period retries."""
        assert self.adapter is not None
        with self.lock:
            try:
                return self.adapter.step_all(self.clock())
            except (TargetError, TargetConnectionError) as err:
                self.stats.tick_failures += 1
                log.warning("telemetry: background shares not adapted (retried next period): %s", err)
                return {}

    def reconnect_due(self, now_s: float | None = None) -> list[str]:
        """Try to reconnect every down switch whose backoff elapsed: close the old connection,
        connect, push the pipeline unless the switch still runs it (a restarted BMv2 has none),
        then under the lock read it back and reconcile it (a new clock offset estimate when the
        pipeline was pushed). Returns the switches reconnected. Failures are logged and
        retried after a doubling wait."""
        assert self.scheduler is not None
        now_s = time.monotonic() if now_s is None else now_s
        done = []
        for name, link in self.links.items():
            if not link.is_down:
                self._retry.pop(name, None)
                continue
            retry = self._retry.setdefault(name, _Retry(now_s, self.config.reconnect_min_s))
            if now_s < retry.due_s:
                continue
            try:
                link.target.close()
                target, estimate, kept = self._open(link.spec)
                with self.lock:
                    link.attach(target)
                    self._adopt(name, estimate, kept)
            except (TargetConnectionError, TargetError, InvalidInput) as err:
                self.stats.reconnect_failures += 1
                if not link.is_down:
                    link.mark_down(str(err))
                retry.due_s = time.monotonic() + retry.wait_s
                log.warning("%s: reconnect failed (next try in %.2g s): %s", name, retry.wait_s, err)
                retry.wait_s = min(2 * retry.wait_s, self.config.reconnect_max_s)
                continue
            self.stats.reconnects += 1
            self._retry.pop(name, None)
            done.append(name)
            log.info("%s: reconnected and re-installed", name)
        return done

    def _summary(self, last: _Snapshot) -> _Snapshot:
        now = _Snapshot.of(self)
        down = [name for name, link in self.links.items() if link.is_down]
        log.info(
            "flows %d (granted %d); last %.3g s: grant changes %d, digests %d, table/meter updates %d, "
            "ticks %d (%d with refused writes)%s",
            now.flows,
            now.granted,
            self.config.summary_period_s,
            now.grant_changes - last.grant_changes,
            now.digests - last.digests,
            now.updates - last.updates,
            now.ticks - last.ticks,
            now.tick_failures - last.tick_failures,
            f"; down: {', '.join(down)}" if down else "",
        )
        return now


def _clock_offset_of(state: SwitchState) -> int | None:
    """The clock offset (ns) a switch's ``clock_offset`` default action holds, if read."""
    for e in state.entries:
        if e.table == n.CLOCK_OFFSET and e.is_default and e.action == n.ACT_SET_CLOCK_OFFSET:
            return e.params.get("offset_ns")
    return None


@dataclass(frozen=True)
class _Snapshot:
    flows: int
    granted: int
    grant_changes: int
    digests: int
    updates: int
    ticks: int
    tick_failures: int

    @classmethod
    def of(cls, app: ControllerApp) -> _Snapshot:
        sched = app.scheduler
        if sched is None:  # a backup
            return cls(0, 0, 0, app.stats.digests, 0, app.stats.ticks, app.stats.tick_failures)
        with app.lock:
            s = sched.stats
            return cls(
                len(sched.registry),
                len(sched.allocator.grants()),
                s.grant_changes,
                app.stats.digests,
                s.table_updates + s.meter_updates,
                app.stats.ticks,
                app.stats.tick_failures,
            )


def _state_dir(text: str | None) -> Path | None:
    if text is None:
        return None
    if not text.strip():
        raise InvalidInput("--state", "must name a directory, got an empty string")
    return Path(text)


def config_from_args(args: Any) -> ControllerConfig:
    """A :class:`ControllerConfig` from the ``safs controller`` argparse namespace (strings are
    parsed here so every bad value gives one InvalidInput line naming the option); the scheduler
    settings are :func:`load_scheduler_config` of ``--scheduler-config`` (if any) and
    ``--topology``.

    Raises:
        InvalidInput: a bad option value, topology or scheduler-config file."""
    switches = tuple(parse_switch_spec(s) for s in args.switch or [])
    if args.model:
        if switches:
            raise InvalidInput("--model", "runs every topology switch in-process; give no --switch")
        switches = tuple(SwitchSpec(sw, "in-process:0") for sw in load_topology(Path(args.topology)).switches())
    offsets: dict[str, int] = {}
    for text in args.clock_offset or []:
        name, value = parse_clock_offset(text)
        offsets[name] = value
    tick_ns = _number("--tick-ms", args.tick_ms, NS_PER_MS)
    duration = None if args.duration_s is None else _number("--duration-s", args.duration_s, 1)
    # Line rate and ECN K from the topology, as the simulator and Mininet derive them; the
    # --scheduler-config file's keys override.
    scheduler = load_scheduler_config(args.scheduler_config, load_topology(Path(args.topology)))
    return ControllerConfig(
        topology_path=Path(args.topology),
        switches=switches,
        p4info_path=Path(args.p4info),
        bmv2_json_path=Path(args.bmv2_json),
        hint_addr=args.hint_addr,
        tick_ns=int(tick_ns),
        duration_s=duration,
        scheduler=scheduler,
        clock_offsets_ns=offsets,
        state_dir=_state_dir(args.state),
        reconcile_period_s=_period("--reconcile-s", args.reconcile_s),
        telemetry_period_s=_period("--telemetry-s", args.telemetry_s),
        model=args.model,
        election_id=(0, _election_id(args.election_id)),
        tls=_tls(args.tls_cert, args.tls_key, args.tls_client_ca, "--tls"),
        identities_path=Path(args.tls_identities) if args.tls_identities else None,
        insecure=args.insecure,
        p4rt_tls=(TlsFiles(_path(args.p4rt_cert), _path(args.p4rt_key), _path(args.p4rt_ca), option="--p4rt")
                  if args.p4rt_ca or args.p4rt_cert or args.p4rt_key else None),
    )


def _path(text: str | None) -> Path | None:
    return Path(text) if text else None


def _tls(cert: str | None, key: str | None, ca: str | None, option: str) -> TlsFiles | None:
    if not (cert or key or ca):
        return None
    if not cert or not key:
        raise InvalidInput(f"{option}-cert", f"a TLS hint API needs {option}-cert and {option}-key"
                           f"{f' ({option}-client-ca alone is not enough)' if ca else ''}")
    return TlsFiles(Path(cert), Path(key), _path(ca), option=option)


def _election_id(text: str) -> int:
    """``--election-id``: 1..2^64-1 (0 is not a valid election id in P4Runtime)."""
    if not str(text).isdigit() or not 1 <= int(text) <= _U64:
        raise InvalidInput("--election-id", f"must be an integer in 1..2^64-1, got {text!r}")
    return int(text)



def _period(option: str, text: str) -> float:
    """``--reconcile-s``, ``--telemetry-s``: 0 (off) or RECONCILE_MIN_S..RECONCILE_MAX_S seconds."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if value == 0:
        return 0.0
    if not RECONCILE_MIN_S <= value <= RECONCILE_MAX_S:  # also NaN
        raise InvalidInput(option, f"must be 0 (off) or {RECONCILE_MIN_S:g}..{RECONCILE_MAX_S:g} seconds, "
                           f"got {text!r}")
    return value


def _number(option: str, text: str, scale: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidInput(option, f"must be a number, got {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise InvalidInput(option, f"must be a finite number > 0, got {text!r}")
    return value * scale

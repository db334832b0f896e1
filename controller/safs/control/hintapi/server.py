"""The gRPC hint service ``safs.v1.HintService`` (proto/safs/v1/hints.proto) over a Scheduler.

::

    application --Announce/Update/Complete/GetGrant--> HintServicer --(lock)--> Scheduler
                                                           |                      |
                                     pending activations (start_time_ns)    allocator grants,
                                     -> Scheduler.activate at that time     target writes

One lock serialises every call into the scheduler (gRPC runs handlers on a thread pool). Code
that drives the same scheduler from elsewhere (a digest poller, a tick loop) must hold
:attr:`HintServicer.lock` too.

Errors (docs/hint-api.md): :class:`safs.core.errors.InvalidInput` becomes INVALID_ARGUMENT with
details ``"<field>: <message>"`` and the field in trailing metadata ``safs-field``; Update,
Complete or GetGrant for a flow the scheduler's registry does not hold becomes NOT_FOUND;
:class:`safs.core.errors.TargetError` (hint accepted, switch writes refused, retried on the next
tick) and :class:`safs.core.errors.TargetConnectionError` (a switch's counter read failed)
become UNAVAILABLE. The scheduler validates before it changes anything, so a refused
call leaves every admitted flow as it was.

Activation at a start time: an Announce with ``start_time_ns`` asks for the flow's grant to be
allocated (:meth:`Scheduler.activate`) at ``start_time_ns - activation_lead_ns``. Due times at or
before now are activated inside the Announce call. Later ones wait in a table served by one
daemon thread, which sleeps until the earliest due time on the servicer's clock, assuming that
clock advances like real time, and never longer than ``max_wait_s`` (so a simulated clock that
jumps is noticed within that bound); :meth:`HintServicer.run_due` runs due activations
synchronously (for a caller that owns the clock, e.g. a test or a simulator). Complete cancels
a pending activation. An activation that fails (no free meter slot at the receiver's ToR) is
counted in :attr:`HintServicer.stats`; the flow stays recorded and is allocated at its first
REQUEST digest instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import NoReturn

import grpc

from safs.control.bind import check_listen
from safs.control.failpoints import failpoint
from safs.control.hintapi import hints_pb2 as pb
from safs.control.hintapi import hints_pb2_grpc as pb_grpc
from safs.control.hintapi.batch_wire import BatchParsing
from safs.control.hintapi.convert import FIELD_METADATA_KEY, flow_class_from_pb, grant_to_pb
from safs.control.state import StateStore
from safs.control.tls import Identities, TlsFiles, peer_name, server_credentials
from safs.core.errors import InvalidInput, TargetConnectionError, TargetError
from safs.core.hints import DependencyHint, FlowHint
from safs.core.scheduler import Scheduler
from safs.core.timebase import diff, wrap

_log = logging.getLogger(__name__)


MAX_DEPENDENCIES_PER_CALL = 4096  # one AnnounceDependencies call (a job's launch)


@dataclass
class HintServiceStats:
    """Counters of a :class:`HintServicer`.

    Attributes:
        activations: flows allocated because their start time came (or had passed at announce).
        activation_failures: activations the scheduler refused (e.g. no free meter slot); those
            flows are allocated at their first REQUEST digest instead.
        write_failures: calls whose hint was accepted but whose switch writes (TargetError) or
            counter reads (TargetConnectionError) failed; the scheduler retries on its next tick.
    """

    activations: int = 0
    activation_failures: int = 0
    write_failures: int = 0


class HintServicer(pb_grpc.HintServiceServicer):
    """``safs.v1.HintService`` implemented on a :class:`safs.core.scheduler.Scheduler`.

    Args:
        scheduler: the scheduler every call goes to (its hint registry decides what is known).
        clock: returns now in ns of the fabric clock (any integer; reduced modulo 2^48 where
            compared); passed as ``now_ns`` to every scheduler call.
        lock: the lock serialising scheduler access; a new ``threading.Lock`` when None.
            Share it with any other code that calls the same scheduler.
        activation_lead_ns: allocate a flow with a start time this many ns before it (>= 0).
        max_wait_s: longest sleep of the activation thread, seconds (> 0).
        identities: applications allowed by client certificate name, their hosts and quotas
            (:class:`safs.control.tls.Identities`; mutual TLS), or None: no limit.
        store: the controller's durable state (:class:`safs.control.state.StateStore`, set as
            the scheduler's journal by the caller), or None. With a store, a call answers only
            after what it changed is committed (group commit: concurrent calls share one); a
            dependency's grant is written to the switch after the commit and before the answer,
            so "acknowledged" implies "durable" (docs/operations.md).

    Raises:
        InvalidInput: ``activation_lead_ns`` or ``max_wait_s`` out of range.
    """

    def __init__(self, scheduler: Scheduler, clock: Callable[[], int], *,
                 lock: threading.Lock | threading.RLock | None = None,
                 activation_lead_ns: int = 0, max_wait_s: float = 0.05,
                 store: StateStore | None = None, identities: Identities | None = None) -> None:
        if type(activation_lead_ns) is not int or activation_lead_ns < 0:
            raise InvalidInput("activation_lead_ns", f"must be an integer >= 0 ns, got {activation_lead_ns!r}")
        if not isinstance(max_wait_s, (int, float)) or not max_wait_s > 0:
            raise InvalidInput("max_wait_s", f"must be > 0 seconds, got {max_wait_s!r}")
        self._sched = scheduler
        self._clock = clock
        self._store = store
        self._identities = identities
        self.counter: CallCounter | None = None  # set by start(): calls by method and status
        self.lock = lock if lock is not None else threading.Lock()
        self._cond = threading.Condition(self.lock)
        self._lead_ns = activation_lead_ns
        self._max_wait_s = float(max_wait_s)
        self._pending: dict[int, int] = {}  # flow id -> due time, 48-bit ns
        self._thread: threading.Thread | None = None
        self._closed = False
        self.stats = HintServiceStats()

    # ------------------------------------------------------------------ RPCs

    def Announce(self, request: pb.AnnounceRequest, context: grpc.ServicerContext) -> pb.AnnounceResponse:
        """Announce a flow (:meth:`Scheduler.announce`); with a start time, activate it then."""
        start = request.start_time_ns if request.HasField("start_time_ns") else None
        self._authorize(context, [request.sender])
        with self.lock:
            now = self._clock()
            try:
                hint = FlowHint(request.flow_id, request.sender, request.receiver, request.remaining_bytes,
                                request.no_bubble_ts_ns, request.label, flow_class_from_pb(request.flow_class))
                self._sched.announce(hint, now)
            except (InvalidInput, TargetError, TargetConnectionError) as err:
                self._abort(context, err)
            if start is None:
                response = pb.AnnounceResponse()
            elif diff(due := wrap(start - self._lead_ns), wrap(now)) > 0:
                self._pending[request.flow_id] = due
                self._ensure_thread()
                self._cond.notify_all()
                response = pb.AnnounceResponse(activation_scheduled=True)
            else:
                self._pending.pop(request.flow_id, None)
                try:
                    response = pb.AnnounceResponse(activated=self._activate(request.flow_id, now))
                except (TargetError, TargetConnectionError) as err:
                    self._abort(context, err)
        self._wait_durable(context)
        return response

    def Update(self, request: pb.UpdateRequest, context: grpc.ServicerContext) -> pb.UpdateResponse:
        """Report remaining bytes and optionally a new no-bubble timestamp of a known flow."""
        ts = request.no_bubble_ts_ns if request.HasField("no_bubble_ts_ns") else None
        self._authorize_flow(context, request.flow_id)
        with self.lock:
            now = self._clock()
            self._require_known(request.flow_id, context)
            try:
                self._update(request.flow_id, request.remaining_bytes, ts, now)
            except (InvalidInput, TargetError, TargetConnectionError) as err:
                self._abort(context, err)
        self._wait_durable(context)
        return pb.UpdateResponse()

    def Complete(self, request: pb.CompleteRequest, context: grpc.ServicerContext) -> pb.CompleteResponse:
        """Complete a known flow (:meth:`Scheduler.complete`); cancels a pending activation."""
        self._authorize_flow(context, request.flow_id)
        with self.lock:
            now = self._clock()
            self._require_known(request.flow_id, context)
            self._pending.pop(request.flow_id, None)
            try:
                self._sched.complete(request.flow_id, now)
            except (InvalidInput, TargetError, TargetConnectionError) as err:
                self._abort(context, err)
        self._wait_durable(context)
        return pb.CompleteResponse()

    def GetGrant(self, request: pb.GetGrantRequest, context: grpc.ServicerContext) -> pb.GetGrantResponse:
        """The allocator's installed grant of a known flow, or an empty response (none yet)."""
        with self.lock:
            self._require_known(request.flow_id, context)
            grant = self._sched.allocator.grants().get(request.flow_id)
        return pb.GetGrantResponse(grant=grant_to_pb(grant)) if grant is not None else pb.GetGrantResponse()

    def AnnounceDependencies(self, request: pb.AnnounceDependenciesRequest,
                             context: grpc.ServicerContext) -> pb.AnnounceDependenciesResponse:
        """Announce dependencies (:meth:`Scheduler.announce_dependency`), in order."""
        self._check_batch_size(context, request)
        new = 0
        app = self._authorize(context, [d.sender for d in request.dependencies])
        with self.lock:
            if app is not None:
                self._check_quota(context, app, request)
            now = self._clock()
            for i, d in enumerate(request.dependencies):
                try:
                    dep = DependencyHint(d.dep_id, d.sender, d.receiver, d.label, flow_class_from_pb(d.flow_class))
                    new += self._sched.announce_dependency(dep, now, write=False)
                except InvalidInput as err:  # "dependency.receiver" -> "dependencies[i].receiver"
                    field = err.field.removeprefix("dependency.").removeprefix("hint.")
                    refused = InvalidInput(f"dependencies[{i}].{field}", err.message)
                    break
            else:
                refused = None
        self._wait_durable(context)
        self._flush_dependencies(context)  # those before a refused one are accepted
        if refused is not None:
            self._abort(context, refused)
        return pb.AnnounceDependenciesResponse(new=new)

    def EndDependency(self, request: pb.EndDependencyRequest,
                      context: grpc.ServicerContext) -> pb.EndDependencyResponse:
        """End a known dependency (:meth:`Scheduler.end_dependency`)."""
        self._authorize(context, [request.sender])
        with self.lock:
            try:
                self._sched.dependencies.check_key((request.sender, request.dep_id))
            except InvalidInput as err:  # names no dependency at all: INVALID_ARGUMENT, not NOT_FOUND
                self._abort(context, err)
            try:
                self._sched.end_dependency(request.sender, request.dep_id, self._clock(), write=False)
            except InvalidInput as err:
                if (request.sender, request.dep_id) not in self._sched.dependencies:
                    context.abort(grpc.StatusCode.NOT_FOUND, f"dep_id: {err.message}")
                self._abort(context, err)
        self._wait_durable(context)
        self._flush_dependencies(context)
        return pb.EndDependencyResponse()

    def EndDependencies(self, request: pb.EndDependenciesRequest,
                        context: grpc.ServicerContext) -> pb.EndDependenciesResponse:
        """End dependencies in order (:meth:`Scheduler.end_dependency`); an unknown one stops
        the call there with NOT_FOUND naming its index (those before it stay ended)."""
        self._check_batch_size(context, request)
        refused: tuple[grpc.StatusCode, str, str] | None = None  # code, field, message
        self._authorize(context, [d.sender for d in request.dependencies])
        with self.lock:
            now = self._clock()
            for i, d in enumerate(request.dependencies):
                try:
                    self._sched.dependencies.check_key((d.sender, d.dep_id))
                except InvalidInput as err:
                    refused = (grpc.StatusCode.INVALID_ARGUMENT, f"dependencies[{i}].{err.field}", err.message)
                    break
                try:
                    self._sched.end_dependency(d.sender, d.dep_id, now, write=False)
                except InvalidInput as err:
                    code = (grpc.StatusCode.NOT_FOUND if (d.sender, d.dep_id) not in self._sched.dependencies
                            else grpc.StatusCode.INVALID_ARGUMENT)
                    refused = (code, f"dependencies[{i}].dep_id", err.message)
                    break
        self._wait_durable(context)
        self._flush_dependencies(context)  # those before a refused one are ended
        if refused is not None:
            code, field, message = refused
            context.set_trailing_metadata(((FIELD_METADATA_KEY, field),))
            context.abort(code, f"{field}: {message}")
        return pb.EndDependenciesResponse()

    def _authorize(self, context: grpc.ServicerContext, senders: list[str]) -> str | None:
        """With identities: the calling application's name, after checking it may announce
        for every sender in ``senders`` (else the call is aborted: UNAUTHENTICATED without a
        known certificate, PERMISSION_DENIED for a host it does not own). Without: None."""
        if self._identities is None:
            return None
        name = peer_name(context)
        app = self._identities.applications.get(name) if name is not None else None
        if app is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          f"client certificate {name!r} is not an application of --tls-identities")
        for i, sender in enumerate(senders):
            if sender not in app.hosts:
                context.abort(grpc.StatusCode.PERMISSION_DENIED, f"application {name!r} may not announce, update "
                              f"or end anything sent by host {sender!r} (item {i}); its hosts: {', '.join(app.hosts)}")
        return name

    def _authorize_flow(self, context: grpc.ServicerContext, flow_id: int) -> None:
        """:meth:`_authorize` for the sender of a known flow (unknown flows are NOT_FOUND later)."""
        if self._identities is None:
            return
        with self.lock:
            sender = self._sched.registry.get(flow_id).sender if flow_id in self._sched.registry else None
        self._authorize(context, [sender] if sender is not None else [])

    def _check_quota(self, context: grpc.ServicerContext, name: str,
                     request: pb.AnnounceDependenciesRequest) -> None:
        """Under the lock: abort RESOURCE_EXHAUSTED when the call would give application
        ``name`` more live dependencies (those whose sender is one of its hosts) than its quota."""
        assert self._identities is not None
        app = self._identities.applications[name]
        hosts = set(app.hosts)
        live = sum(1 for d in self._sched.dependencies if d.sender in hosts)
        new = {(d.sender, d.dep_id) for d in request.dependencies} - {
            (d.sender, d.dep_id) for d in self._sched.dependencies}
        if live + len(new) > app.max_dependencies:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"application {name!r} holds {live} dependencies; {len(new)} more would exceed its "
                          f"quota max_dependencies={app.max_dependencies}")

    def _check_batch_size(self, context: grpc.ServicerContext, request: object) -> None:
        """Abort INVALID_ARGUMENT (field ``dependencies``) when the call holds more than
        MAX_DEPENDENCIES_PER_CALL items (batch_wire stops reading after one more: ``more``)."""
        items = len(request.dependencies)  # type: ignore[attr-defined]
        if items > MAX_DEPENDENCIES_PER_CALL:
            got = f"more than {MAX_DEPENDENCIES_PER_CALL}" if getattr(request, "more", False) else str(items)
            self._abort(context, InvalidInput("dependencies", f"at most {MAX_DEPENDENCIES_PER_CALL} per call, "
                                                              f"got {got}"))

    def _wait_durable(self, context: grpc.ServicerContext) -> None:
        """Return once this call's changes are committed (no store: at once); else abort
        UNAVAILABLE (the change is in memory only and will not survive a restart)."""
        if self._store is None:
            return
        try:
            self._store.wait_durable()
        except InvalidInput as err:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"not durable, retry: {err.field}: {err.message}")

    def _flush_dependencies(self, context: grpc.ServicerContext) -> None:
        """Write the grants of the dependencies this call (and concurrent ones) changed."""
        with self.lock:
            try:
                self._sched.flush_dependencies()
            except (TargetError, TargetConnectionError) as err:
                self._abort(context, err)
        failpoint("hint.after-switch-write")

    # ------------------------------------------------------------------ activations

    def pending_activations(self) -> dict[int, int]:
        """Flow id -> due time (48-bit ns) of every activation not yet run."""
        with self.lock:
            return dict(self._pending)

    def run_due(self, now_ns: int | None = None) -> list[int]:
        """Run every pending activation due at ``now_ns`` (default: the clock) and return the
        ids of the flows that were allocated. Failures are counted in :attr:`stats`."""
        with self.lock:
            return self._run_due_locked(self._clock() if now_ns is None else now_ns)

    def close(self) -> None:
        """Stop the activation thread (pending activations are dropped). Idempotent."""
        with self.lock:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    # ------------------------------------------------------------------ internals

    def _run_due_locked(self, now_ns: int) -> list[int]:
        now = wrap(now_ns)
        due = sorted((t, fid) for fid, t in self._pending.items() if diff(t, now) <= 0)
        done = []
        for _, fid in due:
            del self._pending[fid]
            try:
                if self._activate(fid, now_ns):
                    done.append(fid)
            except (TargetError, TargetConnectionError) as err:  # admitted; retried on tick
                self.stats.write_failures += 1
                _log.warning("activation of flow %d: %s", fid, err)
                done.append(fid)
        return done

    def _activate(self, flow_id: int, now_ns: int) -> bool:
        """Scheduler.activate; an InvalidInput (no free slot) is counted, not raised."""
        try:
            activated = self._sched.activate(flow_id, now_ns)
        except InvalidInput as err:
            self.stats.activation_failures += 1
            _log.warning("activation of flow %d refused: %s", flow_id, err)
            return False
        self.stats.activations += activated
        return activated

    def _ensure_thread(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._activation_loop, name="safs-hint-activations",
                                            daemon=True)
            self._thread.start()

    def _activation_loop(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._pending:
                    self._cond.wait()
                    continue
                now = self._clock()
                self._run_due_locked(now)
                if self._pending:
                    wait_ns = min(diff(t, wrap(now)) for t in self._pending.values())
                    self._cond.wait(min(max(wait_ns, 0) / 1e9, self._max_wait_s))

    def _update(self, flow_id: int, remaining_bytes: int, ts: int | None, now_ns: int) -> None:
        self._sched.update(flow_id, remaining_bytes, now_ns, no_bubble_ts_ns=ts)

    def _require_known(self, flow_id: int, context: grpc.ServicerContext) -> None:
        if flow_id not in self._sched.registry:
            context.abort(grpc.StatusCode.NOT_FOUND, f"flow_id: unknown flow {flow_id} "
                          "(never announced, or completed)")

    def _abort(self, context: grpc.ServicerContext,
               err: InvalidInput | TargetError | TargetConnectionError) -> NoReturn:
        if isinstance(err, InvalidInput):
            context.set_trailing_metadata(((FIELD_METADATA_KEY, err.field),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{err.field}: {err.message}")
        self.stats.write_failures += 1
        what = "refused the grant writes" if isinstance(err, TargetError) else "could not be read"
        context.abort(grpc.StatusCode.UNAVAILABLE, f"hint accepted, but a switch {what} "
                      f"(the controller retries on its next tick): {err}")
        raise AssertionError("unreachable")  # context.abort raises


class CallCounter(grpc.ServerInterceptor):  # type: ignore[misc]
    """Counts hint API calls by method and status code (``calls[(method, code)]``, e.g.
    ``("AnnounceDependencies", "OK")``, ``("Announce", "INVALID_ARGUMENT")``): what the
    metrics export as hints accepted and refused."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def _count(self, method: str, context: grpc.ServicerContext) -> None:
        code = context.code() or grpc.StatusCode.OK
        key = (method, code.name if isinstance(code, grpc.StatusCode) else str(code))
        with self._lock:
            self.calls[key] = self.calls.get(key, 0) + 1

    def intercept_service(self, continuation, details):  # noqa: ANN001, ANN201 (grpc's interface)
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = details.method.rsplit("/", 1)[-1]
        inner = handler.unary_unary

        def counted(request, context):  # noqa: ANN001, ANN202
            try:
                return inner(request, context)
            finally:
                self._count(method, context)

        return grpc.unary_unary_rpc_method_handler(counted, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)


@dataclass
class RunningHintServer:
    """A started hint server: the gRPC server, its servicer and the bound port.

    Use as a context manager or call :meth:`stop`.
    """

    server: grpc.Server
    servicer: HintServicer
    host: str
    port: int

    @property
    def target(self) -> str:
        """``host:port`` to give :class:`safs.control.hintapi.client.HintClient`."""
        return f"{self.host}:{self.port}"

    def stop(self, grace_s: float | None = None) -> None:
        """Stop serving (waiting up to ``grace_s`` s for calls in progress) and the activation thread."""
        self.server.stop(grace_s).wait()
        self.servicer.close()

    def __enter__(self) -> RunningHintServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(scheduler: Scheduler, address: str, clock: Callable[[], int], *,
          lock: threading.Lock | threading.RLock | None = None, activation_lead_ns: int = 0,
          max_workers: int = 4, store: StateStore | None = None, tls: TlsFiles | None = None,
          identities: Identities | None = None) -> RunningHintServer:
    """Serve ``safs.v1.HintService`` on ``address`` (``"host:port"``, port 0 = any free port).

    ``tls``: serve TLS with these files (mutual TLS when ``tls.ca`` is given; reloaded when
    they change, :func:`safs.control.tls.server_credentials`); None: plaintext (the caller
    decides whether that is allowed: ``safs controller`` permits it on loopback and Unix
    sockets, elsewhere only with ``--insecure``). Other args as :class:`HintServicer`;
    ``max_workers`` threads run handlers (they serialise on the lock anyway). Raises
    InvalidInput("address") when the address cannot be bound.
    """
    host, sep, _ = address.rpartition(":")
    if not sep or not host:
        raise InvalidInput("address", f"must be 'host:port', got {address!r}")
    servicer = HintServicer(scheduler, clock, lock=lock, activation_lead_ns=activation_lead_ns, store=store,
                            identities=identities)
    servicer.counter = CallCounter()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                    thread_name_prefix="safs-hint-rpc"),
                         interceptors=[servicer.counter, BatchParsing(MAX_DEPENDENCIES_PER_CALL)],
                         options=[("grpc.so_reuseport", 0)])  # a port in use is an error, not shared
    pb_grpc.add_HintServiceServicer_to_server(servicer, server)
    try:
        port = server.add_secure_port(address, server_credentials(tls)) if tls else server.add_insecure_port(address)
    except RuntimeError as err:
        port, why = 0, str(err)
    else:
        why = "port in use or address not local"
    if port == 0:
        raise InvalidInput("address", f"cannot bind {address!r}: {why}")
    server.start()
    return RunningHintServer(server, servicer, host, port)


def check_bind(address: str, tls: TlsFiles | None = None) -> None:
    """Check, before anything else starts, that the hint API could serve: the TLS files make
    valid server credentials (certificate, matching key, client CA) and ``address`` can be bound.

    Raises:
        InvalidInput: field ``--tls-cert`` (unusable TLS files) or ``--hint-addr`` (cannot bind).
    """
    if tls is not None:
        probe = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        try:
            ok = probe.add_secure_port("127.0.0.1:0", server_credentials(tls)) != 0
        except (RuntimeError, ValueError):
            ok = False
        finally:
            probe.stop(None)
        if not ok:
            raise InvalidInput("--tls-cert", f"{tls.cert}, {tls.key}" + (f", {tls.ca}" if tls.ca else "") +
                               ": not a PEM certificate with its matching private key" +
                               (" and a PEM CA certificate" if tls.ca else ""))
    check_listen("--hint-addr", address)


def serve(scheduler: Scheduler, address: str, clock: Callable[[], int], **kwargs: object) -> grpc.Server:
    """Start the hint service (:func:`start`) and return the running ``grpc.Server``.

    The caller stops it with ``server.stop(grace)``; the activation thread is a daemon. Use
    :func:`start` to learn the port bound for ``host:0`` or to stop the thread too.
    """
    return start(scheduler, address, clock, **kwargs).server  # type: ignore[arg-type]

"""Run independent tasks (simulation runs, baseline checks) serially, in a local process pool,
or on an existing Ray cluster; results come back in task order either way.

Every task is ``fn(*args)`` with ``fn`` a module-level function and picklable ``args``. A run
of the simulator depends only on its arguments (scenario, run spec: its seed included), so the
three executors give the same records apart from wall-time and memory fields
(tests/test_eval_parallel.py checks this).

* Serial: ``jobs == 1`` (or a single task), in this process.
* Local pool: :class:`concurrent.futures.ProcessPoolExecutor` with ``jobs`` workers (default:
  the CPUs this process may use), started with ``spawn`` so no thread state of the caller (the
  progress bar's refresh thread) is forked into the workers.
* Ray: ``ray_address`` as for ``ray.init(address=...)`` -- ``auto`` (the cluster this machine
  belongs to), ``ray://host:10001`` (Ray Client) or ``local`` (start a private one-machine
  Ray). Each task is one Ray task of one CPU. The cluster's workers must be able to import
  ``safs`` and read the scenario's topology and data files at the same paths (the same
  checkout on a shared filesystem, or the same container image). If Ray is already
  initialised in this process, that session is used and left running.

Errors: :class:`safs.core.errors.InvalidInput` raised in a worker is re-raised here unchanged (it
does not survive pickling on its own, so workers send back its field, message and source).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import socket
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from safs.core.errors import InvalidInput


def default_jobs() -> int:
    """The number of CPUs this process may run on (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_jobs(jobs: int | None) -> int:
    """``jobs`` checked (None: :func:`default_jobs`).

    Raises:
        InvalidInput: field ``--jobs``, not an integer >= 1.
    """
    if jobs is None:
        return default_jobs()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InvalidInput("--jobs", f"must be an integer >= 1, got {jobs!r}")
    return jobs


RAY_FORMS = "auto, local, ray://HOST:PORT or HOST:PORT"
_HOST_PORT = r"[A-Za-z0-9_.\-]+:([0-9]{1,5})"


def check_ray(address: str | None, jobs: int | None = None, timeout_s: float = 5.0) -> None:
    """``--ray ADDRESS`` checked before anything runs: its form, not given with ``--jobs``, and
    for ``HOST:PORT`` / ``ray://HOST:PORT`` that something accepts TCP connections there
    (waiting at most ``timeout_s`` seconds; Ray itself would retry for minutes).

    Raises:
        InvalidInput: field ``--ray``: not one of :data:`RAY_FORMS` (port 1..65535), an
            explicit ``jobs`` as well (a Ray cluster schedules its own workers), or nothing
            listening at the address.
    """
    if address is None:
        return
    if jobs is not None:
        raise InvalidInput(
            "--ray", "cannot be combined with --jobs (Ray runs one task per cluster CPU); give one of them"
        )
    match = re.fullmatch(f"(?:ray://)?{_HOST_PORT}", address)
    if address not in ("auto", "local") and not (match and 1 <= int(match.group(1)) <= 65535):
        raise InvalidInput("--ray", f"expected {RAY_FORMS} (port 1..65535), got {address!r}")
    if match:
        host, port = address.removeprefix("ray://").rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise InvalidInput("--ray", f"cannot connect to Ray at {address!r}: {why}") from None


@dataclass(frozen=True)
class _Failure:
    """An InvalidInput raised in a worker, in picklable form."""

    field: str
    message: str
    source: str | None


def _call(fn: Callable[..., Any], args: tuple) -> Any:
    try:
        return fn(*args)
    except InvalidInput as exc:
        return _Failure(exc.field, exc.message, exc.source)


def _unwrap(value: Any) -> Any:
    if isinstance(value, _Failure):
        raise InvalidInput(value.field, value.message, value.source)
    return value


def map_ordered(
    fn: Callable[..., Any],
    tasks: Sequence[tuple],
    jobs: int | None = None,
    ray_address: str | None = None,
    on_done: Callable[[int], None] | None = None,
) -> list[Any]:
    """``[fn(*t) for t in tasks]``, computed serially, in a process pool or on Ray.

    Args:
        fn: a module-level function (pickled by reference).
        tasks: argument tuples, each picklable.
        jobs: local worker processes (None: :func:`default_jobs`; 1: serial, in this process).
            Ignored when ``ray_address`` is given.
        ray_address: run on Ray at this address (see the module docstring).
        on_done: called with the task index as each task finishes (any order).

    Returns:
        The results in task order.

    Raises:
        InvalidInput: bad ``jobs`` (field ``--jobs``); Ray not installed or not reachable
            (field ``--ray``); or whatever InvalidInput a task raised.
    """
    tasks = list(tasks)
    if ray_address is not None:
        return _map_ray(fn, tasks, ray_address, on_done)
    jobs = check_jobs(jobs)
    if jobs == 1 or len(tasks) <= 1:
        results = []
        for i, args in enumerate(tasks):
            results.append(fn(*args))
            if on_done:
                on_done(i)
        return results
    out: list[Any] = [None] * len(tasks)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx) as pool:
        index = {pool.submit(_call, fn, args): i for i, args in enumerate(tasks)}
        pending = set(index)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    out[index[fut]] = _unwrap(fut.result())
                    if on_done:
                        on_done(index[fut])
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise
    return out


def _map_ray(
    fn: Callable[..., Any], tasks: list[tuple], address: str, on_done: Callable[[int], None] | None
) -> list[Any]:
    try:
        import ray  # noqa: PLC0415 (optional dependency: pip install 'safs[ray]')
    except ImportError:
        raise InvalidInput("--ray", "needs the ray package: pip install 'safs[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        check_ray(address)
        try:
            with warnings.catch_warnings():  # Ray warns (UserWarning) before it fails
                warnings.simplefilter("ignore")
                ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        except Exception as exc:  # noqa: BLE001  Ray raises ConnectionError, RuntimeError, ValueError...
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InvalidInput("--ray", f"cannot connect to Ray at {address!r}: {first}") from None
    try:
        remote = ray.remote(num_cpus=1)(_call)
        refs = [remote.remote(fn, args) for args in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        out: list[Any] = [None] * len(tasks)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                out[index[ref]] = _unwrap(ray.get(ref))
                if on_done:
                    on_done(index[ref])
        return out
    finally:
        if started_here:
            ray.shutdown()

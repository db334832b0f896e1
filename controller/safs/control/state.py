"""Durable controller state (``safs controller --state DIR``): SQLite in WAL mode, group commit.

What is kept is what the controller acknowledged to applications and cannot read back from a
switch: every dependency (sender, id, receiver, label, class) with the ToR and meter slot it
holds, and every flow hint of the per-transfer grant mode with whether it was admitted. Switch
state (routes, grant entries, meters) is not kept: it is derived from this and the topology,
and reconciled against what the switches hold (docs/operations.md).

Group commit: callers :meth:`StateStore.put_dependency` etc. under the scheduler's lock (cheap:
a list append), then wait outside it (:meth:`StateStore.wait_durable`) while one writer thread
commits everything queued so far in one transaction (``synchronous=FULL``: on disk when
acknowledged, a power loss included). An acknowledgement waits for one commit, not one per
hint, so durability costs about one fsync per batch, whatever the hint rate. The writer starts
a commit when someone waits for one, else within ``IDLE_COMMIT_S`` of the first change queued
(changes nobody waits for, e.g. digest admissions): waking it per queued change made it commit
batches of a few changes while a hint call was still queueing its thousand.

Failpoints ``store.before-commit`` and ``store.after-commit`` (:mod:`safs.control.failpoints`)
let tests kill the process around the commit.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from safs.control.failpoints import failpoint
from safs.core.errors import InvalidInput
from safs.core.hints import DependencyHint, FlowClass, FlowHint

log = logging.getLogger(__name__)

STATE_FILE = "safs-state.sqlite3"
LOCK_FILE = "safs-state.lock"  # held by the primary (StateStore.lock_primary)
SCHEMA_VERSION = "1"
IDLE_COMMIT_S = 0.05  # the most a change nobody waits for stays uncommitted (module docstring)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dependencies (
    sender TEXT NOT NULL, dep_id INTEGER NOT NULL, receiver TEXT NOT NULL, label TEXT NOT NULL,
    flow_class TEXT NOT NULL, tor TEXT, slot INTEGER, PRIMARY KEY (sender, dep_id));
CREATE TABLE IF NOT EXISTS flows (
    flow_id INTEGER PRIMARY KEY, sender TEXT NOT NULL, receiver TEXT NOT NULL,
    remaining_bytes INTEGER NOT NULL, no_bubble_ts_ns INTEGER NOT NULL, label TEXT NOT NULL,
    flow_class TEXT NOT NULL, admitted INTEGER NOT NULL);
"""
_PUT_DEP = "INSERT OR REPLACE INTO dependencies VALUES (?, ?, ?, ?, ?, ?, ?)"
_DEL_DEP = "DELETE FROM dependencies WHERE sender = ? AND dep_id = ?"
_PUT_FLOW = "INSERT OR REPLACE INTO flows VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_DEL_FLOW = "DELETE FROM flows WHERE flow_id = ?"


@dataclass(frozen=True)
class StoredDependency:
    """A dependency as stored: the hint and where its grant lives (None: not admitted)."""

    dep: DependencyHint
    tor: str | None
    slot: int | None


@dataclass(frozen=True)
class StoredFlow:
    """A per-transfer flow hint as stored, and whether the allocator had admitted it."""

    hint: FlowHint
    admitted: bool


@dataclass(frozen=True)
class StoredState:
    """Everything :meth:`StateStore.load` read."""

    topology: str | None
    dependencies: list[StoredDependency]
    flows: list[StoredFlow]


@dataclass
class StoreStats:
    """Counters of a :class:`StateStore`: ``commits`` (transactions), ``records`` (rows written
    or deleted), ``commit_ns`` (time spent committing, ns)."""

    commits: int = 0
    records: int = 0
    commit_ns: int = 0


class StateStore:
    """The controller's durable state in ``DIR/safs-state.sqlite3``.

    Args:
        directory: created if missing.
        topology: the topology's name; a store written for another topology is refused.

    Raises:
        InvalidInput: field ``--state``: the directory cannot be created or the database cannot
            be opened, has another schema version, or belongs to another topology.

    The journal methods (``put_dependency``, ``end_dependency``, ``put_flow``, ``end_flow``)
    implement :class:`safs.core.scheduler.Journal`: they queue a change and return at once;
    :meth:`wait_durable` blocks until every change queued before the call is committed.
    """

    def __init__(self, directory: Path | str, topology: str) -> None:
        path = Path(directory)
        if path.exists() and not path.is_dir():
            raise InvalidInput("--state", f"{path} is not a directory")
        # A store this process creates: the controller refuses to remove grants it finds on
        # the switches with it (a mistyped --state would otherwise wipe them).
        self.created = not (path / STATE_FILE).exists()
        self._made_dir = not path.exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path / STATE_FILE, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except (OSError, sqlite3.Error) as err:
            raise InvalidInput("--state", f"cannot open {path / STATE_FILE}: {err}") from None
        if meta.get("schema", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise InvalidInput("--state", f"{path / STATE_FILE} has schema {meta['schema']}, "
                               f"this controller reads {SCHEMA_VERSION}")
        if meta.get("topology", topology) != topology:
            raise InvalidInput("--state", f"{path / STATE_FILE} holds the state of topology "
                               f"{meta['topology']!r}, not {topology!r}; give another directory")
        self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                             (("schema", SCHEMA_VERSION), ("topology", topology)))
        self.path = path / STATE_FILE
        self.topology = topology
        self.stats = StoreStats()
        self._cond = threading.Condition()
        self._queue: list[tuple[str, tuple[object, ...]]] = []
        self._queued = 0  # changes queued since start (sequence number of the last)
        self._durable = 0  # changes committed
        self._wanted = 0  # the highest change a wait_durable caller waits for
        self._error: sqlite3.Error | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._commit_loop, name="safs-state-commit", daemon=True)
        self._thread.start()
        self._lock_fd: int | None = None

    def lock_primary(self) -> None:
        """Hold ``DIR/safs-state.lock`` (an exclusive ``flock``) while this controller is
        primary: two primaries writing one store would overwrite each other's acknowledged
        dependencies. A backup shares the directory and takes the lock when it takes over (the
        kernel releases a killed primary's lock). Idempotent.

        Raises:
            InvalidInput: field ``--state``: another live controller holds it (named by PID).
        """
        if self._lock_fd is not None:
            return
        lock = self.path.parent / LOCK_FILE
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise InvalidInput("--state", f"{self.path.parent} is in use by another primary controller (PID "
                               f"{holder}, {lock}): give each primary its own directory") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    # ------------------------------------------------------------------ reading

    def load(self) -> StoredState:
        """Every stored dependency and flow (dependencies in (sender, dep_id) order)."""
        with self._cond:
            deps = [StoredDependency(DependencyHint(dep_id, sender, receiver, label, FlowClass(cls)), tor, slot)
                    for sender, dep_id, receiver, label, cls, tor, slot in self._db.execute(
                        "SELECT * FROM dependencies ORDER BY sender, dep_id")]
            flows = [StoredFlow(FlowHint(fid, s, r, rem, ts, label, FlowClass(cls)), bool(admitted))
                     for fid, s, r, rem, ts, label, cls, admitted in self._db.execute(
                         "SELECT * FROM flows ORDER BY flow_id")]
        return StoredState(self.topology, deps, flows)

    # ------------------------------------------------------------------ Journal

    def put_dependency(self, dep: DependencyHint, tor: str | None, slot: int | None) -> None:
        """Queue: ``dep`` is known (admitted at ``tor``'s meter ``slot``, or not admitted)."""
        self._enqueue(_PUT_DEP, (dep.sender, dep.dep_id, dep.receiver, dep.label,
                                 FlowClass(dep.flow_class).value, tor, slot))

    def end_dependency(self, sender: str, dep_id: int) -> None:
        """Queue: the dependency ``(sender, dep_id)`` ended."""
        self._enqueue(_DEL_DEP, (sender, dep_id))

    def put_flow(self, hint: FlowHint, admitted: bool) -> None:
        """Queue: a per-transfer flow hint is known (and whether the allocator admitted it)."""
        self._enqueue(_PUT_FLOW, (hint.flow_id, hint.sender, hint.receiver, hint.remaining_bytes,
                                  hint.no_bubble_ts_ns, hint.label, FlowClass(hint.flow_class).value,
                                  int(admitted)))

    def end_flow(self, flow_id: int) -> None:
        """Queue: the flow completed."""
        self._enqueue(_DEL_FLOW, (flow_id,))

    def _enqueue(self, sql: str, params: tuple[object, ...]) -> None:
        with self._cond:
            self._queue.append((sql, params))
            self._queued += 1

    def wait_durable(self, timeout_s: float = 30.0) -> None:
        """Block until every change queued before this call is committed to disk.

        Raises:
            InvalidInput: field ``--state``: the commit failed (disk full, I/O error), the store
                was closed, or it took longer than ``timeout_s``. The changes are then not
                durable and the caller must not acknowledge them.
        """
        with self._cond:
            target = self._queued
            if target > self._wanted:
                self._wanted = target
                self._cond.notify_all()  # the writer commits now
            done = self._cond.wait_for(lambda: self._durable >= target or self._error is not None
                                       or self._closed, timeout_s)
            if self._error is not None:
                raise InvalidInput("--state", f"commit to {self.path} failed: {self._error}")
            if self._durable < target:
                raise InvalidInput("--state", f"commit to {self.path} " +
                                   ("did not finish in time" if not done else "stopped: the store is closed"))

    @property
    def pending(self) -> int:
        """Changes queued and not yet committed."""
        with self._cond:
            return self._queued - self._durable

    def close(self) -> None:
        """Commit what is queued, stop the writer thread and close the database. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        self._db.close()
        self.unlock_primary()

    def discard(self) -> None:
        """Close a store this process created (:attr:`created`) and remove its files, and its
        directory when this process made it: a refused start leaves nothing that the next start
        would take for a real store. Does nothing to a store that existed."""
        self.close()
        if not self.created:
            return
        for name in (STATE_FILE, STATE_FILE + "-wal", STATE_FILE + "-shm", LOCK_FILE):
            (self.path.parent / name).unlink(missing_ok=True)
        if self._made_dir:
            try:
                self.path.parent.rmdir()
            except OSError:  # something else is in it now
                pass

    def unlock_primary(self) -> None:
        """Let the lock of :meth:`lock_primary` go (stepping back to backup). Idempotent."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # ------------------------------------------------------------------ the writer

    def _commit_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: (bool(self._queue) and self._wanted > self._durable)
                                    or self._closed, IDLE_COMMIT_S)
                batch, self._queue = self._queue, []
                upto = self._queued
                if not batch:
                    if self._closed:
                        return
                    continue
            try:
                self._commit(batch)
            except sqlite3.Error as err:
                log.error("state: commit of %d changes to %s failed: %s", len(batch), self.path, err)
                with self._cond:
                    self._error = err
                    self._cond.notify_all()
                return
            failpoint("store.after-commit")
            with self._cond:
                self._durable = upto
                self._cond.notify_all()

    def _commit(self, batch: list[tuple[str, tuple[object, ...]]]) -> None:
        t0 = time.monotonic_ns()
        self._db.execute("BEGIN")
        try:
            for sql, rows in itertools.groupby(batch, key=lambda change: change[0]):  # in order
                self._db.executemany(sql, (params for _, params in rows))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        failpoint("store.before-commit")
        self._db.execute("COMMIT")
        self.stats.commits += 1
        self.stats.records += len(batch)
        self.stats.commit_ns += time.monotonic_ns() - t0


"""A compute instance (GPU / stage host) that runs its operations one at a time, in order.

An op starts when the previous op on the instance has ended and all its inputs (flows) have
arrived. The instance also answers the workloads' no-bubble question: *when could op ``key``
start if its data were already there?* -- :meth:`SerialInstance.ready_time` -- and gives the
no-bubble timestamp of a transfer feeding an op (:meth:`SerialInstance.no_bubble_ts`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from safs.core.errors import InvalidInput
from safs.experiments.workloads.api import WorkloadAPI


@dataclass
class _Op:
    key: Hashable
    duration_ns: int
    needs: int
    arrived: int = 0
    start_ns: int | None = None
    end_ns: int | None = None


class SerialInstance:
    """Ops in a fixed order on one instance.

    Args:
        name: host name (for messages).
        api: the network / clock.
        on_end: called as ``on_end(key, end_ns)`` when an op ends.
        on_begin: called as ``on_begin(key, end_ns)`` when an op starts: the producer then
            knows which transfers it will make at ``end_ns`` and announces them ahead.
        paused: start no op until :meth:`resume` (lets a workload add every instance's ops
            before the first ``on_begin`` looks at a consumer's ops).
    """

    def __init__(self, name: str, api: WorkloadAPI, on_end: Callable[[Hashable, int], None],
                 on_begin: Callable[[Hashable, int], None] | None = None, paused: bool = False) -> None:
        self.name = name
        self.api = api
        self.on_end = on_end
        self.on_begin = on_begin
        # Ops from the last started one on; older ones are dropped (nothing looks back past the
        # last started op), so memory does not grow with the length of a run.
        self.ops: list[_Op] = []
        self.index: dict[Hashable, int] = {}  # key -> position + self._base, for held ops
        self._base = 0  # ops dropped so far
        self.next = 0  # position of the first op not yet started
        self.busy = False
        self.paused = paused

    def add(self, key: Hashable, duration_ns: int, needs: int) -> None:
        """Append op ``key`` (duration ns >= 0, ``needs`` inputs >= 0) to the order."""
        if key in self.index:
            raise InvalidInput("op", f"{self.name}: op {key!r} added twice")
        self.index[key] = self._base + len(self.ops)
        self.ops.append(_Op(key, duration_ns, needs))
        self._try_start()

    def has(self, key: Hashable) -> bool:
        """True if op ``key`` was added and is still held (every op not yet started is)."""
        return key in self.index

    def deliver(self, key: Hashable) -> None:
        """One input of op ``key`` has arrived."""
        op = self.ops[self.index[key] - self._base]
        op.arrived += 1
        if op.arrived > op.needs:
            raise InvalidInput("op", f"{self.name}: op {key!r} got more inputs than it needs ({op.needs})")
        self._try_start()

    def ready_time(self, key: Hashable) -> int:
        """When op ``key`` could start if its inputs were there: the (predicted) end of the op
        before it, but not earlier than now. Ops not yet started are predicted to start as
        soon as their predecessor ends (their inputs in flight assumed to arrive by then)."""
        now = self.api.now()
        i = self.index[key] - self._base
        # Walk back to the last op that has started, then forward with durations.
        j = i - 1
        while j >= 0 and self.ops[j].start_ns is None:
            j -= 1
        if j < 0:
            t = now
        else:
            op = self.ops[j]
            t = op.end_ns if op.end_ns is not None else op.start_ns + op.duration_ns
        for k in range(j + 1, i):
            t = max(t, now) + self.ops[k].duration_ns
        return max(t, now)

    def no_bubble_ts(self, key: Hashable, send_at_ns: int, transfer_ns: int) -> int:
        """No-bubble timestamp of a transfer feeding op ``key``, sent at ``send_at_ns``.

        It is when the op could otherwise start (:meth:`ready_time`), but never earlier than
        the transfer's uncontended arrival (``send_at_ns + transfer_ns``): a consumer that is
        already idle cannot be saved by the network, only not delayed further.
        """
        return max(self.ready_time(key), send_at_ns + transfer_ns)

    def resume(self) -> None:
        """Start running ops (see ``paused``)."""
        self.paused = False
        self._try_start()

    def _try_start(self) -> None:
        if self.paused or self.busy or self.next >= len(self.ops):
            return
        op = self.ops[self.next]
        if op.arrived < op.needs:
            return
        self.busy = True
        self.next += 1
        self._drop_old()
        op.start_ns = self.api.now()
        end = op.start_ns + op.duration_ns
        self.api.call_at(end, lambda: self._finish(op, end))
        if self.on_begin is not None:
            self.on_begin(op.key, end)

    def _drop_old(self) -> None:
        """Forget the ops before the last started one."""
        old = self.next - 1
        if old > 64:  # in chunks, so the list is not shifted at every op
            for dropped in self.ops[:old]:
                del self.index[dropped.key]
            del self.ops[:old]
            self._base += old
            self.next -= old

    def _finish(self, op: _Op, end: int) -> None:
        op.end_ns = end
        self.busy = False
        self.on_end(op.key, end)
        self._try_start()

"""Hint intake: flow hints from applications and REQUEST digests, validated and merged.

A hint announces a flow as a semantic dependency: flow id, sender, receiver, remaining bytes
and its no-bubble timestamp (the time by which the bytes must arrive so the consumer starts
without a bubble). Source: ../shared/BRIEF.md, "The idea" and "Design decisions / Who
allocates". The registry is the one place that accepts or rejects them; the allocator reads it.

Rules (docs/protocol.md, "Hints"):
- every field is validated before anything changes; a rejected call leaves the registry as it was;
- no-bubble timestamps are reduced modulo 2^48 (host clocks may exceed 48 bits);
- late hints (timestamp already past) are accepted; the allocator treats them as most urgent;
- re-announcing identical content is a no-op; remaining bytes may only shrink;
- a digest for an unknown flow creates a provisional hint, which the application's own
  announce later completes (label, class, timestamp); a digest never raises remaining bytes
  and its content conflicts are ignored.
"""

from __future__ import annotations

import enum
import ipaddress
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from safs.core.errors import InvalidInput
from safs.core.protocol import DEP_ID_MAX, DEP_ID_MIN, FLOW_ID_MAX, FLOW_ID_MIN, REMAINING_BYTES_MAX
from safs.core.timebase import TIME_MASK, before, wrap

LABEL_MAX_LEN = 128  # characters
DIGEST_LABEL = "digest"  # label of a hint created by a REQUEST digest
RECENTLY_COMPLETED_MAX = 8192  # completed ids remembered to ignore stale digests (a REQUEST
# still in flight when its flow completes is digested within a control round, microseconds to
# milliseconds later; thousands of flows complete in that time at most)


class FlowClass(str, enum.Enum):
    """Scheduling class of a SAFS flow: pipeline flows get their no-bubble demand first;
    background SAFS flows get only what the pipeline does not need."""

    PIPELINE = "pipeline"
    BACKGROUND = "background"


FLOW_CLASSES = tuple(c.value for c in FlowClass)  # ("pipeline", "background"): the names files and requests use


@dataclass(frozen=True)
class FlowHint:
    """One flow's hint.

    Attributes:
        flow_id: 1..2^32-1.
        sender, receiver: host names from the topology (must differ).
        remaining_bytes: bytes left to deliver, 1..2^48-1.
        no_bubble_ts_ns: no-bubble timestamp, ns of the fabric clock (>= 0; stored mod 2^48).
        label: dependency label, free text up to 128 characters
            (e.g. ``"job3/stage2/mb7"`` or ``"decode/step41/layer5"``).
        flow_class: :class:`FlowClass` (a plain ``"pipeline"``/``"background"`` is accepted).
    """

    flow_id: int
    sender: str
    receiver: str
    remaining_bytes: int
    no_bubble_ts_ns: int
    label: str
    flow_class: FlowClass = FlowClass.PIPELINE


# Fields that identify a flow's content: a re-announce may not change them.
_CONTENT_FIELDS = ("sender", "receiver", "flow_class", "label", "no_bubble_ts_ns")


def _check_int(field: str, value: object, lo: int, hi: int, allowed: str) -> int:
    if type(value) is not int:
        raise InvalidInput(field, f"must be an integer in {allowed}, got {value!r}")
    if not lo <= value <= hi:
        raise InvalidInput(field, f"must be in {allowed}, got {value}")
    return value


def _check_flow_id(field: str, flow_id: object) -> int:
    return _check_int(field, flow_id, FLOW_ID_MIN, FLOW_ID_MAX, "1..2^32-1")


def _check_remaining(field: str, remaining: object) -> int:
    return _check_int(field, remaining, 1, REMAINING_BYTES_MAX, "1..2^48-1 bytes")


def _check_ts(field: str, ts: object, hi: int | None = None) -> int:
    if hi is None:
        if type(ts) is not int or ts < 0:
            raise InvalidInput(field, f"must be an integer >= 0 ns, got {ts!r}")
        return ts
    return _check_int(field, ts, 0, hi, "0..2^48-1 ns")


class HintRegistry:
    """The accepted flow hints, keyed by flow id.

    Args:
        hosts: host name -> IPv4 address as int (from the topology).

    Raises:
        InvalidInput: ``hosts`` has an address outside 0..2^32-1 or two hosts share one.
    """

    def __init__(self, hosts: Mapping[str, int]) -> None:
        self._hosts: dict[str, int] = {}
        self._by_ip: dict[int, str] = {}
        for name, ip in hosts.items():
            _check_int(f"hosts[{name!r}]", ip, 0, (1 << 32) - 1, "0..2^32-1 (IPv4 as int)")
            if ip in self._by_ip:
                raise InvalidInput(f"hosts[{name!r}]", f"address {ipaddress.IPv4Address(ip)} "
                                   f"already used by host {self._by_ip[ip]!r}")
            self._hosts[name] = ip
            self._by_ip[ip] = name
        self._hints: dict[int, FlowHint] = {}
        self._provisional: set[int] = set()  # created by a digest, not yet announced
        self._recently_completed: OrderedDict[int, None] = OrderedDict()

    # ---- reading -------------------------------------------------------------------------
    def get(self, flow_id: int) -> FlowHint:
        """The hint of ``flow_id``. Raises InvalidInput("flow_id") when unknown."""
        try:
            return self._hints[flow_id]
        except (KeyError, TypeError):
            raise InvalidInput("flow_id", f"unknown flow {flow_id!r} "
                               f"({len(self._hints)} flows known)") from None

    def __contains__(self, flow_id: object) -> bool:
        return flow_id in self._hints

    def __iter__(self) -> Iterator[FlowHint]:
        """Hints in the order they were first accepted."""
        return iter(list(self._hints.values()))

    def __len__(self) -> int:
        return len(self._hints)

    def is_provisional(self, flow_id: int) -> bool:
        """True when the flow is known only from a REQUEST digest (no announce yet)."""
        self.get(flow_id)
        return flow_id in self._provisional

    def is_late(self, flow_id: int, now_ns: int) -> bool:
        """True when the flow's no-bubble timestamp is strictly before ``now_ns`` (48-bit
        wraparound-safe, so only meaningful within 2^47 ns, about 1.6 days)."""
        return before(self.get(flow_id).no_bubble_ts_ns, wrap(now_ns))

    # ---- validation ----------------------------------------------------------------------
    def _check_host(self, field: str, name: object) -> str:
        if not isinstance(name, str) or name not in self._hosts:
            few = ", ".join(sorted(self._hosts)[:5])
            more = f", ... ({len(self._hosts)} hosts)" if len(self._hosts) > 5 else ""
            raise InvalidInput(field, f"unknown host {name!r}; valid hosts: {few}{more}")
        return name

    def _host_of_ip(self, field: str, ip: object) -> str:
        _check_int(field, ip, 0, (1 << 32) - 1, "0..2^32-1 (IPv4 as int)")
        if ip not in self._by_ip:
            raise InvalidInput(field, f"no host has address {ipaddress.IPv4Address(ip)}")
        return self._by_ip[ip]

    def _validated(self, hint: FlowHint) -> FlowHint:
        """A normalised copy of ``hint`` (timestamp mod 2^48, class as FlowClass) or InvalidInput."""
        if not isinstance(hint, FlowHint):
            raise InvalidInput("hint", f"must be a FlowHint, got {type(hint).__name__}")
        _check_flow_id("hint.flow_id", hint.flow_id)
        self._check_host("hint.sender", hint.sender)
        self._check_host("hint.receiver", hint.receiver)
        if hint.sender == hint.receiver:
            raise InvalidInput("hint.receiver", f"must differ from sender {hint.sender!r}")
        _check_remaining("hint.remaining_bytes", hint.remaining_bytes)
        _check_ts("hint.no_bubble_ts_ns", hint.no_bubble_ts_ns)
        if not isinstance(hint.label, str) or len(hint.label) > LABEL_MAX_LEN:
            got = f"{len(hint.label)} characters" if isinstance(hint.label, str) else repr(hint.label)
            raise InvalidInput("hint.label", f"must be text of at most {LABEL_MAX_LEN} characters, got {got}")
        try:
            flow_class = FlowClass(hint.flow_class)
        except ValueError:
            raise InvalidInput("hint.flow_class", "must be 'pipeline' or 'background', "
                               f"got {hint.flow_class!r}") from None
        return replace(hint, no_bubble_ts_ns=wrap(hint.no_bubble_ts_ns), flow_class=flow_class)

    # ---- changing ------------------------------------------------------------------------
    def announce(self, hint: FlowHint, now_ns: int) -> bool:
        """Accept a hint from an application; True if the flow is new or changed.

        Re-announcing the same content returns False; a smaller ``remaining_bytes`` updates it.
        A provisional (digest-created) flow takes the announced label, class and timestamp.

        Raises:
            InvalidInput: a field out of range (named), or a reused ``flow_id`` whose
                sender/receiver/flow_class/label/no_bubble_ts_ns differ, or whose remaining
                bytes grew. The registry is unchanged.
        """
        _check_ts("now_ns", now_ns)
        new = self._validated(hint)
        old = self._hints.get(new.flow_id)
        if old is None:
            self._hints[new.flow_id] = new
            self._recently_completed.pop(new.flow_id, None)
            return True
        if new.flow_id in self._provisional:
            for field in ("sender", "receiver"):  # these came from the packet's addresses
                if getattr(old, field) != getattr(new, field):
                    raise InvalidInput(f"hint.{field}", f"flow {new.flow_id} was requested with "
                                       f"{field} {getattr(old, field)!r}, got {getattr(new, field)!r}")
            self._hints[new.flow_id] = replace(
                new, remaining_bytes=min(old.remaining_bytes, new.remaining_bytes))
            self._provisional.discard(new.flow_id)
            return True
        for field in _CONTENT_FIELDS:
            if getattr(old, field) != getattr(new, field):
                raise InvalidInput(f"hint.{field}", f"flow {new.flow_id} already announced with "
                                   f"{field}={getattr(old, field)!r}, got {getattr(new, field)!r}")
        return self._shrink(old, new.remaining_bytes, old.no_bubble_ts_ns)

    def update(self, flow_id: int, remaining_bytes: int, now_ns: int,
               no_bubble_ts_ns: int | None = None) -> bool:
        """Report progress of a known flow (and optionally a re-derived no-bubble timestamp).

        Returns True if anything changed. Raises InvalidInput: unknown ``flow_id``;
        ``hint.remaining_bytes`` out of 1..2^48-1 or larger than known ("may only decrease");
        negative ``hint.no_bubble_ts_ns``.
        """
        _check_ts("now_ns", now_ns)
        old = self.get(flow_id)
        _check_remaining("hint.remaining_bytes", remaining_bytes)
        ts = old.no_bubble_ts_ns
        if no_bubble_ts_ns is not None:
            ts = wrap(_check_ts("hint.no_bubble_ts_ns", no_bubble_ts_ns))
        return self._shrink(old, remaining_bytes, ts)

    def _shrink(self, old: FlowHint, remaining_bytes: int, ts: int) -> bool:
        if remaining_bytes > old.remaining_bytes:
            raise InvalidInput("hint.remaining_bytes", f"may only decrease, was "
                               f"{old.remaining_bytes}, got {remaining_bytes}")
        if remaining_bytes == old.remaining_bytes and ts == old.no_bubble_ts_ns:
            return False
        self._hints[old.flow_id] = replace(old, remaining_bytes=remaining_bytes, no_bubble_ts_ns=ts)
        return True

    def merge_digest(self, flow_id: int, src_ip: int, dst_ip: int, remaining_bytes: int,
                     no_bubble_ts_ns: int, now_ns: int,
                     flow_class: FlowClass = FlowClass.PIPELINE) -> bool:
        """Merge a REQUEST digest from a receiver's ToR; True if the registry changed.

        An unknown flow becomes a provisional hint (sender/receiver from the addresses, label
        :data:`DIGEST_LABEL`). A known flow only ever has its remaining bytes lowered; more
        bytes than known, other addresses or another timestamp are ignored (a digest is a
        late, lossy echo of what the sender knew). A digest for a flow completed recently
        (last :data:`RECENTLY_COMPLETED_MAX` completions) is a stale REQUEST and is ignored.

        Raises:
            InvalidInput: ``digest.flow_id``, ``digest.remaining_bytes`` (1..2^48-1),
                ``digest.no_bubble_ts_ns`` (0..2^48-1) out of range; for an unknown flow,
                ``digest.src_ip``/``digest.dst_ip`` with no host, or equal hosts.
        """
        _check_ts("now_ns", now_ns)
        _check_flow_id("digest.flow_id", flow_id)
        _check_remaining("digest.remaining_bytes", remaining_bytes)
        _check_ts("digest.no_bubble_ts_ns", no_bubble_ts_ns, TIME_MASK)
        old = self._hints.get(flow_id)
        if old is not None:
            if remaining_bytes >= old.remaining_bytes:
                return False
            self._hints[flow_id] = replace(old, remaining_bytes=remaining_bytes)
            return True
        if flow_id in self._recently_completed:
            return False
        sender = self._host_of_ip("digest.src_ip", src_ip)
        receiver = self._host_of_ip("digest.dst_ip", dst_ip)
        if sender == receiver:
            raise InvalidInput("digest.dst_ip", f"must differ from the sender's address ({sender!r})")
        hint = self._validated(FlowHint(flow_id, sender, receiver, remaining_bytes,
                                        no_bubble_ts_ns, DIGEST_LABEL, flow_class))
        self._hints[flow_id] = hint
        self._provisional.add(flow_id)
        return True

    def complete(self, flow_id: int) -> FlowHint:
        """Remove a finished flow and return its last hint. Raises InvalidInput("flow_id")
        when unknown. Later digests for it are ignored; a later announce starts a new flow."""
        hint = self.get(flow_id)
        del self._hints[flow_id]
        self._provisional.discard(flow_id)
        self._recently_completed[flow_id] = None
        if len(self._recently_completed) > RECENTLY_COMPLETED_MAX:
            self._recently_completed.popitem(last=False)
        return hint


@dataclass(frozen=True)
class DependencyHint:
    """One dependency: a stream of transfers from ``sender`` to ``receiver`` that the
    receiver's ToR grants as one (docs/protocol.md, "Grants"). Announced once; its transfers
    are not announced (their bytes and latest start times travel in-band).

    Attributes:
        dep_id: 1..65535, the sender's id for it (the switch keys the grant on the sender's
            address and this id).
        sender, receiver: host names from the topology (must differ).
        label: free text up to 128 characters (e.g. ``"A2F a3->f1"``).
        flow_class: :class:`FlowClass`: background dependencies get the lowest share weight.
    """

    dep_id: int
    sender: str
    receiver: str
    label: str = ""
    flow_class: FlowClass = FlowClass.PIPELINE


class DependencyRegistry:
    """The known dependencies, keyed by ``(sender, dep_id)``.

    Args:
        hosts: host name -> IPv4 address as int (from the topology).
    """

    def __init__(self, hosts: Mapping[str, int]) -> None:
        self._hosts = dict(hosts)
        self._ip_to_host = {ip: h for h, ip in self._hosts.items()}
        self._deps: dict[tuple[str, int], DependencyHint] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._deps

    def __len__(self) -> int:
        return len(self._deps)

    def __iter__(self) -> Iterator[DependencyHint]:
        return iter(list(self._deps.values()))

    def check_key(self, key: tuple[str, int]) -> None:
        """Raise InvalidInput naming ``sender`` (not a host) or ``dep_id`` (outside 1..65535)
        when ``(sender, dep_id)`` cannot name any dependency (as opposed to an unknown one)."""
        sender, dep_id = key
        if not isinstance(sender, str) or sender not in self._hosts:
            raise InvalidInput("sender", f"unknown host {sender!r}")
        _check_int("dep_id", dep_id, DEP_ID_MIN, DEP_ID_MAX, f"{DEP_ID_MIN}..{DEP_ID_MAX}")

    def get(self, key: tuple[str, int]) -> DependencyHint:
        """The dependency ``(sender, dep_id)``. Raises InvalidInput("dep_id") when unknown."""
        dep = self._deps.get(key)
        if dep is None:
            raise InvalidInput("dep_id", f"unknown dependency {key[1]!r} of {key[0]!r}")
        return dep

    def validated(self, dep: DependencyHint) -> DependencyHint:
        """A normalised copy (class as :class:`FlowClass`), or InvalidInput naming the field."""
        if not isinstance(dep, DependencyHint):
            raise InvalidInput("dependency", f"must be a DependencyHint, got {type(dep).__name__}")
        _check_int("dependency.dep_id", dep.dep_id, DEP_ID_MIN, DEP_ID_MAX, f"{DEP_ID_MIN}..{DEP_ID_MAX}")
        for name in ("sender", "receiver"):
            value = getattr(dep, name)
            if not isinstance(value, str) or value not in self._hosts:
                raise InvalidInput(f"dependency.{name}", f"unknown host {value!r}")
        if dep.sender == dep.receiver:
            raise InvalidInput("dependency.receiver", f"must differ from the sender ({dep.sender!r})")
        if not isinstance(dep.label, str) or len(dep.label) > LABEL_MAX_LEN:
            got = f"{len(dep.label)} characters" if isinstance(dep.label, str) else repr(dep.label)
            raise InvalidInput("dependency.label", f"must be text of at most {LABEL_MAX_LEN} characters, got {got}")
        try:
            flow_class = FlowClass(dep.flow_class)
        except ValueError:
            raise InvalidInput("dependency.flow_class",
                               f"must be one of {', '.join(FLOW_CLASSES)}, got {dep.flow_class!r}") from None
        return replace(dep, flow_class=flow_class)

    def announce(self, dep: DependencyHint, checked: bool = False) -> bool:
        """Record a dependency; True when it is new. Announcing the same content again is a
        no-op; the same key with another receiver or class is refused (an application must end
        a dependency before it reuses its id), a new label replaces a digest's placeholder.
        ``checked``: ``dep`` is already :meth:`validated`'s result (not validated again).

        Raises:
            InvalidInput: a bad field, or a conflicting re-announce (field ``dependency.dep_id``).
        """
        if not checked:
            dep = self.validated(dep)
        key = (dep.sender, dep.dep_id)
        old = self._deps.get(key)
        if old is not None:
            if (old.receiver, old.flow_class) != (dep.receiver, dep.flow_class):
                raise InvalidInput("dependency.dep_id", f"{dep.sender!r} already uses {dep.dep_id} for "
                                   f"{old.receiver!r} ({old.flow_class.value}); end it first")
            if old.label != dep.label:
                self._deps[key] = dep
            return False
        self._deps[key] = dep
        return True

    def from_digest(self, src_ip: int, dst_ip: int, dep_id: int) -> DependencyHint:
        """The dependency a REQUEST digest names (a placeholder labelled ``"digest"`` when new).

        Raises:
            InvalidInput: addresses of no known host (``digest.src_addr``/``digest.dst_addr``),
                or a ``dep_id`` out of range.
        """
        sender = self._ip_to_host.get(src_ip)
        receiver = self._ip_to_host.get(dst_ip)
        if sender is None:
            raise InvalidInput("digest.src_addr", f"no host has address {src_ip!r}")
        if receiver is None:
            raise InvalidInput("digest.dst_addr", f"no host has address {dst_ip!r}")
        key = (sender, dep_id)
        if key in self._deps:
            return self._deps[key]
        dep = DependencyHint(dep_id, sender, receiver, DIGEST_LABEL)
        self.announce(dep)
        return self._deps[key]

    def end(self, key: tuple[str, int]) -> DependencyHint:
        """Forget a dependency; returns it. Raises InvalidInput("dep_id") when unknown."""
        dep = self.get(key)
        del self._deps[key]
        return dep

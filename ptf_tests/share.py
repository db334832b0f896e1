"""Switch-local share grants at the receiver's ToR (docs/protocol.md "Grants", grant_enforcer.p4).

A ``dep_grant`` entry ``set_share_grant(meter_slot)`` keyed on (sender address, dep_id) makes the
switch grant the dependency by itself, strict priority by urgency and equal shares within the
most urgent class. The urgency of a packet is ``6 - slack class`` (0 late .. 4; 4 for
BACKGROUND whatever the slack). Every DATA and REQUEST of the dependency moves it to the
packet's urgency (``dep_class[slot]`` = 1 + urgency), a DATA with LAST makes it idle (0); the
per-port counts ``class_load_0`` .. ``class_load_4`` follow (never below 0) and ``port_gen``
grows whenever the dependency's class changes. With *top* the most urgent non-empty class, the
rate is ``port_share[port, load, mode]``:

    the dependency in top, no other class active  SHARE_ALONE   load = top's count
    in top, others waiting                        SHARE_TOP     load = top's count
    in a less urgent class                        SHARE_WAITING load = all waiting dependencies

with the port generation as epoch and the ``share_lease``; a key without an entry (a load above
the last one, "grant queue full") and a DATA with LAST get the default grant (epoch 0). A DATA
is pushed a GRANT by the rule of grants.py (held rate lower by more than 1/32 or higher by more
than 1/256 of the grant's, epoch 0, RENEW; never LAST).

BMv2 registers are not readable over P4Runtime, so the register state is observed only through
the rates and epochs of GRANTs. Every test starts with ``push_pipeline_again()`` (registers zero,
generation 0) and tracks the class of every dependency and the generation itself (:class:`Book`,
the rules above); each step names the (mode, load) it expects and the Book must agree, so every
GRANT's rate AND epoch is checked exactly.

Setup of every test: ``port_share[2, load, mode]`` for loads 1..LOADS as the scheduler writes
them (``_share_entries``): ALONE ``R // load``, TOP ``(R - Q) // load``, WAITING ``Q // load``,
with the usable rate R = 9 999 991 kbit/s and the reserve Q = 1 250 009 kbit/s, both prime and
all 3 x LOADS rates distinct, so a rate names its mode and load. The reserve is 1/8 of R, not
the scheduler's 1/32, so that every mode change is a push (with 1/32 a lone top dependency is
told when others start waiting, ALONE -> TOP, but not when they stop, TOP -> ALONE, exactly the
push rule's 1/32 below: differential.py shows that on the scheduler's own entries).
``share_lease`` 20 ms; the default grant 10 000 kbit/s, lease
500 µs; clone session 2 -> port 1 (pushed GRANTs); slack classes 1000 s wide:

    late (slack < 0)      -> class 6, urgency 0    LATE: 500 s late
    slack 0 .. 1000 s     -> class 5, urgency 1    SOON: 500 s of slack
    slack 1000 .. 2000 s  -> class 4, urgency 2    MID:  1500 s
    slack 2000 .. 3000 s  -> class 3, urgency 3    LAX:  2500 s
    slack >= 3000 s       -> miss: class 2, urgency 4    MISS: 5000 s

A test's sender keeps the grant it was sent as a sender does (docs/protocol.md sender rule 2)
and sends it in its DATA. When a step expects no GRANT, the test does not wait: every step has
its own flow id, and a GRANT of such a step showing up later (before the GRANT of a later step,
or in the final ``expect_nothing``) fails the test naming the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from base_test import (
    CLONE_SESSION_BASE,
    PORT_OTHER,
    PORT_RECEIVER,
    PORT_SENDER,
    RECEIVER_IP,
    SENDER2_IP,
    SENDER_IP,
    TO_SWITCH,
    SafsTest,
    ip_int,
)
from p4rt_client import decode

from safs.core import p4names as n
from safs.core.protocol import (
    EPOCH_MAX,
    FLAG_BACKGROUND,
    FLAG_LAST,
    FLAG_RENEW,
    FLAG_RESENT,
    QUEUE_SLACK_MOST_URGENT,
    Color,
    MsgType,
    epoch_newer,
)
from safs.core.scapy_layer import SAFS, safs_data, safs_request
from safs.core.target import Range
from safs.core.timebase import TIME_MASK

S = 1_000_000_000  # ns
R = 9_999_991  # kbit/s, the port's usable rate (prime)
Q = 1_250_009  # kbit/s, the waiting dependencies' reserve (prime, about R / 8)
LOADS = 8  # port_share entries for loads 1..LOADS in each mode
ALONE, TOP, WAITING = n.SHARE_ALONE, n.SHARE_TOP, n.SHARE_WAITING
MODE_NAME = {ALONE: "ALONE", TOP: "TOP", WAITING: "WAITING"}
SHARE_LEASE_US = 20_000
DEFAULT_RATE_KBPS = 10_000
DEFAULT_LEASE_US = 500
DEFAULT = (DEFAULT_RATE_KBPS, 0, DEFAULT_LEASE_US)
SHARE_CLASSES = [(None, 0, 6), (0, 1000 * S, 5), (1000 * S, 2000 * S, 4), (2000 * S, 3000 * S, 3)]  # (lo, hi, qclass)
LATE, SOON, MID, LAX, MISS = -500 * S, 500 * S, 1500 * S, 2500 * S, 5000 * S  # slack of the latest starts used
CLASS_OF = {LATE: 6, SOON: 5, MID: 4, LAX: 3, MISS: 2}  # slack -> qclass (MISS: slack_class's default)
BACKGROUND_URGENCY = n.URGENCY_CLASSES - 1  # 4


def share_rate(mode: int, load: int, loads: int = LOADS) -> int | None:
    """The test's port_share entry (module docstring), None where it has none."""
    if not 1 <= load <= loads:
        return None
    return {ALONE: R, TOP: R - Q, WAITING: Q}[mode] // load


def link_weight(remaining: int) -> int:
    """A dependency's weight at a contended link: 2^k, k = clamp(bit length of its remaining
    bytes - WEIGHT_BASE_BITS, 0, WEIGHT_MAX_SHIFT) (grant_enforcer.p4)."""
    return 1 << min(n.WEIGHT_MAX_SHIFT, max(0, remaining.bit_length() - n.WEIGHT_BASE_BITS))


def urgency(slack: int, flags: int = 0) -> int:
    return BACKGROUND_URGENCY if flags & FLAG_BACKGROUND else QUEUE_SLACK_MOST_URGENT - CLASS_OF[slack]


@dataclass(frozen=True)
class Dep:
    """A dependency: its grant key (sender address, dep_id) and meter / dep_class slot."""

    sender: str
    dep_id: int
    slot: int

    def __str__(self) -> str:
        return f"{self.sender}/{self.dep_id}"


class Book:
    """The expected register state (module docstring): per slot the class it is counted in
    (1 + urgency, 0 idle), the port's generation, and the share key of a dependency."""

    def __init__(self, loads: int = LOADS) -> None:
        self.cls: dict[int, int] = {}
        self.gen = 0
        self.loads = loads
        self.level = 1  # the spare level waiting shares are multiplied by (no spare_level entry: 1)
        self.boost = 256  # top_boost, in 1/256, of a top-class share at a load >= 2 (no entry: 256)
        # In-link 1 (PORT_SENDER, no host_port entry): the slots counted there (every dependency
        # whose last packet came in on it), its link_share entries (mode, load) -> rate and level.
        self.on_link: set[int] = set()
        self.link: dict[tuple[int, int], int] = {}
        self.link_level = 1
        self.weight: dict[int, int] = {}  # slot -> its weight at the link (link_weight)

    def counts(self) -> list[int]:
        return [sum(1 for c in self.cls.values() if c == u + 1) for u in range(n.URGENCY_CLASSES)]

    def move(self, dep: Dep, cls: int, on_link: bool = True, remaining: int = 0) -> None:
        """The dependency is counted in ``cls`` after this packet (0: idle), which came in on
        in-link 1 (``on_link``) or another port with ``remaining`` bytes (its weight)."""
        (self.on_link.add if on_link else self.on_link.discard)(dep.slot)
        self.weight[dep.slot] = link_weight(remaining)
        if self.cls.get(dep.slot, 0) != cls:
            self.cls[dep.slot] = cls
            self.gen = (self.gen + 1) & EPOCH_MAX or 1

    def key(self, dep: Dep, link: bool = False) -> tuple[int, int] | None:
        """(mode, load) of an active dependency's share at the port (at in-link 1 with ``link``),
        None when idle."""
        cls = self.cls.get(dep.slot, 0)
        if cls == 0:
            return None
        counts = self.counts()
        if link:
            counts = [sum(1 for slot, c in self.cls.items() if c == u + 1 and slot in self.on_link)
                      for u in range(n.URGENCY_CLASSES)]
        top = next(u for u, c in enumerate(counts) if c)
        rest = sum(counts) - counts[top]
        if cls - 1 != top:
            return (WAITING, rest)
        load = counts[top]
        if link:  # weighted: ceil(the class's weight sum / its weight), at most MAX_LOAD
            total = sum(self.weight[slot] for slot, c in self.cls.items() if c == cls and slot in self.on_link)
            load = min(n.MAX_LOAD, -(-total // self.weight[dep.slot]))
        return (TOP if rest else ALONE, load)

    def grant(self, dep: Dep) -> tuple[int, int, int]:
        """(rate, epoch, lease) the switch grants ``dep`` now: its share, or the default grant."""
        key = self.key(dep)
        rate = None if key is None else share_rate(*key, loads=self.loads)
        if rate is not None and key is not None and key[0] == WAITING:
            rate *= self.level
        elif rate is not None and key is not None and key[1] >= 2:
            rate = rate * self.boost >> 8
        link_key = self.key(dep, link=True) if dep.slot in self.on_link else None
        link_rate = self.link.get(link_key) if link_key is not None else None
        if rate is not None and link_rate is not None:  # the smaller of the two shares
            rate = min(rate, link_rate * (self.link_level if link_key[0] == WAITING else 1))
        return DEFAULT if rate is None else (rate, self.gen, SHARE_LEASE_US)


# What a step expects: a share (mode, load), the default grant, or (for DATA) no GRANT.
Want = tuple[int, int] | str | None
GET_DEFAULT = "default"


class ShareTestBase(SafsTest):
    def start(self, deps: list[Dep], loads: int = LOADS) -> None:
        """Fresh pipeline (registers zero), the setup of the module docstring, the clock."""
        self.push_pipeline_again()
        self.install(deps, loads)
        self.now = self.switch_now()
        self.book = Book(loads)
        self.held: dict[Dep, tuple[int, int]] = {}  # what each sender holds: (rate, epoch)
        self.seq = 0
        self.silent: dict[int, str] = {}  # flow id -> step that expected no GRANT

    def install(self, deps: list[Dep], loads: int = LOADS) -> None:
        self.setup_routes()
        self.add_clone_session(PORT_SENDER + CLONE_SESSION_BASE, PORT_SENDER)
        self.set_default(n.DEFAULT_GRANT, n.ACT_SET_DEFAULT_GRANT,
                         {"rate_kbps": DEFAULT_RATE_KBPS, "lease_us": DEFAULT_LEASE_US, "meter_slot": 0})
        self.set_default(n.SHARE_LEASE, n.ACT_SET_SHARE_LEASE, {"lease_us": SHARE_LEASE_US})
        rates = [share_rate(mode, load) for mode in (ALONE, TOP, WAITING) for load in range(1, loads + 1)]
        self.assertEqual(len(set(rates + [DEFAULT_RATE_KBPS])), len(rates) + 1, "test setup: rates must differ")
        for mode in (ALONE, TOP, WAITING):
            for load in range(1, loads + 1):
                self.insert(n.PORT_SHARE, {n.F_EGRESS_PORT: PORT_RECEIVER, n.F_LOAD: load, n.F_MODE: mode},
                            n.ACT_SET_SHARE, {"rate_kbps": share_rate(mode, load)})
        self.install_slack_classes(SHARE_CLASSES)
        for d in deps:
            self.insert(n.DEP_GRANT, {n.F_SRC_ADDR: ip_int(d.sender), n.F_DEP_ID: d.dep_id},
                        n.ACT_SET_SHARE_GRANT, {"meter_slot": d.slot})

    # ------------------------------------------------------------------ steps

    def _ids(self) -> tuple[int, int]:
        self.seq += 1
        return 7000 + self.seq, 100_000 + self.seq  # (flow id, remaining bytes) of this step

    def _expected(self, dep: Dep, want: Want, what: str) -> tuple[int, int, int]:
        """The GRANT ``want`` names, after checking that the Book agrees with it."""
        key, grant = self.book.key(dep), self.book.grant(dep)
        if want == GET_DEFAULT:
            self.assertEqual(grant, DEFAULT, f"{what}: the test's Book expects {key} with an entry, "
                                              "the step the default grant")
        else:
            self.assertEqual(key, want, f"{what}: the test's Book and the step disagree on (mode, load)")
            self.assertNotEqual(grant, DEFAULT, f"{what}: test setup: no port_share entry for {want}")
        return grant

    def _grant(self, dep: Dep, flow_id: int, remaining: int, want: tuple[int, int, int], flags: int,
               what: str) -> tuple[int, int, int]:
        got = self.receive(PORT_SENDER)
        if got[SAFS].flow_id in self.silent:
            self.fail(f"a GRANT for step {self.silent[got[SAFS].flow_id]!r}, which expected none "
                      f"({got[SAFS].rate_kbps} kbit/s, epoch {got[SAFS].epoch})")
        rate, epoch, lease = want
        self.check_grant(got, flow_id=flow_id, dep_id=dep.dep_id, remaining=remaining, rate=rate, epoch=epoch,
                         lease=lease, flags=flags, sender_ip=dep.sender, what=what)
        held = self.held.get(dep)
        if held is None or epoch == 0 or not epoch_newer(held[1], epoch):  # sender rule 2
            self.held[dep] = (rate, epoch)
        return want

    def request(self, dep: Dep, slack: int, want: Want, flags: int = 0, what: str = "",
                in_port: int = PORT_SENDER, remaining: int | None = None) -> tuple[int, int, int]:
        """A REQUEST of ``dep`` at ``slack`` (arriving on ``in_port``; ``remaining`` bytes, the
        step's own, weight 1, unless given): it moves to that urgency; its GRANT must carry
        the share ``want`` = (mode, load) (or the default grant); returns (rate, epoch, lease)."""
        what = what or f"REQUEST {dep}"
        flow_id, own_remaining = self._ids()
        remaining = own_remaining if remaining is None else remaining
        latest = (self.now + slack) & TIME_MASK
        self.book.move(dep, urgency(slack, flags) + 1, on_link=in_port == PORT_SENDER, remaining=remaining)
        grant = self._expected(dep, want, what)
        self.send(in_port, safs_request(dep.sender, RECEIVER_IP, flow_id, remaining, latest, flags=flags,
                                            dep_id=dep.dep_id, **TO_SWITCH))
        return self._grant(dep, flow_id, remaining, grant, flags, what)

    def data(self, dep: Dep, slack: int, want: Want, flags: int = 0, held: tuple[int, int] | None = None,
             what: str = "", flow_id: int | None = None, stale: bool = False) -> tuple[int, int, int] | None:
        """A DATA of ``dep`` at ``slack`` holding ``held`` (default: what its sender holds; given,
        its sender holds it from now on): it moves to that urgency (idle with LAST); forwarded to
        the receiver in its slack class, green (the share slots' meters are unconfigured), and
        pushed a GRANT carrying the share ``want`` (or the default grant) exactly when ``want``
        is not None. ``flow_id``: the step's own unless given; ``stale``: a DATA of a transfer
        whose LAST already passed, which moves nothing."""
        what = what or f"DATA {dep} flags {flags:#x}"
        own_flow_id, remaining = self._ids()
        flow_id = own_flow_id if flow_id is None else flow_id
        if held is not None:  # the sender holds what its DATA carries
            self.held[dep] = held
        rate, epoch = self.held.get(dep, (0, 0))
        latest = (self.now + slack) & TIME_MASK
        if not stale:
            self.book.move(dep, 0 if flags & FLAG_LAST else urgency(slack, flags) + 1, remaining=remaining)
        grant = None if want is None else self._expected(dep, want, what)
        self.silent.pop(flow_id, None)  # a flow id given again: this step's GRANT is its own
        self.send(PORT_SENDER, safs_data(dep.sender, RECEIVER_IP, flow_id, remaining, latest, epoch, 64, flags=flags,
                                         dep_id=dep.dep_id, rate_kbps=rate, **TO_SWITCH))
        h = self.receive(PORT_RECEIVER)[SAFS]
        self.assertEqual((h.type, h.flow_id, h.dep_id, h.rate_kbps, h.epoch),
                         (int(MsgType.DATA), flow_id, dep.dep_id, rate, epoch), f"{what}: forwarded as sent")
        self.assertEqual((h.qclass, h.color), (CLASS_OF[slack], int(Color.GREEN)), f"{what}: class, colour")
        if grant is None:
            self.silent[flow_id] = what
            return None
        return self._grant(dep, flow_id, remaining, grant, flags, what)

    def last(self, *deps_slacks: tuple[Dep, int], flags: int = 0, what: str = "") -> None:
        """Each (dependency, slack) sends a DATA with LAST: idle, no GRANT."""
        for dep, slack in deps_slacks:
            self.data(dep, slack, None, flags | FLAG_LAST, what=f"{what}: {dep} LAST")

    def assert_held(self, dep: Dep, mode: int, load: int, what: str) -> None:
        """``dep``'s sender holds the share (mode, load) at the current generation."""
        self.assertEqual(self.held[dep], (share_rate(mode, load), self.book.gen),
                         f"{what}: {dep} holds {MODE_NAME[mode]} at load {load}, epoch {self.book.gen}")


A1, A2, B1 = Dep(SENDER_IP, 11, 11), Dep(SENDER_IP, 12, 12), Dep(SENDER2_IP, 11, 13)
A3, A4 = Dep(SENDER_IP, 14, 14), Dep(SENDER_IP, 15, 15)


class ShareAloneTest(ShareTestBase):
    """A lone dependency, in each urgency class: its REQUEST gets ALONE at load 1 (the whole
    usable rate R) with epoch = the new generation and the share lease; a second REQUEST in the
    same class the same grant and epoch (no count changed); a DATA holding it nothing; a DATA
    holding half of it a GRANT with the same epoch; LAST makes it idle (no GRANT, the
    generation grows, so each variant's epoch is 2 above the one before). Variants: late,
    500 s, 1500 s and 2500 s of slack (classes 6..3, urgencies 0..3), a latest start no class
    covers (the default action: class 2, urgency 4), and BACKGROUND late and at 5000 s (urgency
    4; the DATA still goes in its slack class's queue)."""

    def runTest(self) -> None:
        self.start([A1])
        variants = [("late", LATE, 0), ("500 s", SOON, 0), ("1500 s", MID, 0), ("2500 s", LAX, 0),
                    ("no class (miss)", MISS, 0), ("late but BACKGROUND", LATE, FLAG_BACKGROUND),
                    ("miss and BACKGROUND", MISS, FLAG_BACKGROUND)]
        for i, (name, slack, flags) in enumerate(variants):
            with self.subTest(name):
                grant = self.request(A1, slack, (ALONE, 1), flags, f"{name}: REQUEST")
                self.assertEqual(grant, (R, 2 * i + 1, SHARE_LEASE_US), name)
                self.assertEqual(self.request(A1, slack, (ALONE, 1), flags, f"{name}: second REQUEST"), grant)
                self.data(A1, slack, None, flags, what=f"{name}: DATA holding the grant")
                self.data(A1, slack, (ALONE, 1), flags, held=(R // 2, grant[1]), what=f"{name}: DATA holding half")
                self.last((A1, slack), flags=flags, what=name)
        self.expect_nothing()


class ShareSameClassTest(ShareTestBase):
    """Dependencies of one urgency class share it equally (ALONE: nothing else active). Per
    variant each dependency's REQUEST in turn gets ``R // k`` (k active), and the ones active
    before it are pushed ``R // k`` on their next DATA, with a newer epoch; with all active, a
    DATA holding its share gets nothing; then from the last one back each goes idle (LAST, no
    GRANT) and the ones left are pushed their larger share. Variants: two dep_ids of one sender;
    one dep_id from two senders (different keys); a late BACKGROUND dependency with one at
    5000 s (both urgency 4); three late ones."""

    def runTest(self) -> None:
        self.start([A1, A2, B1])
        variants = [("two dep_ids of one sender, 1500 s", [(A1, MID, 0), (A2, MID, 0)]),
                    ("one dep_id from two senders, 500 s", [(A1, SOON, 0), (B1, SOON, 0)]),
                    ("BACKGROUND late and 5000 s", [(A1, LATE, FLAG_BACKGROUND), (A2, MISS, 0)]),
                    ("three late", [(A1, LATE, 0), (A2, LATE, 0), (B1, LATE, 0)])]
        for name, deps in variants:
            with self.subTest(name):
                active: list[tuple[Dep, int, int]] = []
                for dep, slack, flags in deps:
                    k = len(active) + 1
                    self.request(dep, slack, (ALONE, k), flags, f"{name}: {dep} REQUEST")
                    for other, s, f in active:
                        old_epoch = self.held[other][1]
                        self.data(other, s, (ALONE, k), f, what=f"{name}: {other} pushed to 1/{k}")
                        self.assertTrue(epoch_newer(self.held[other][1], old_epoch), name)
                    active.append((dep, slack, flags))
                for dep, slack, flags in active:
                    self.assert_held(dep, ALONE, len(active), name)
                    self.data(dep, slack, None, flags, what=f"{name}: {dep} holds its share")
                while active:
                    dep, slack, flags = active.pop()
                    self.last((dep, slack), flags=flags, what=name)
                    for other, s, f in active:
                        self.data(other, s, (ALONE, len(active)), f, what=f"{name}: {other} pushed up")
        self.expect_nothing()


class SharePriorityTest(ShareTestBase):
    """A more urgent dependency arriving: A active alone (ALONE 1); B's REQUEST in a more urgent
    class gets TOP at load 1 (R - Q) with the new generation, newer than A's epoch; A's next
    DATA is pushed WAITING at load 1 (the reserve Q) with that same epoch (the port
    generation); a DATA of either holding its grant gets nothing. C arriving behind B (less
    urgent than B) gets WAITING at load 2 and A is pushed the same; B's next DATA, holding TOP
    at load 1 under an older epoch, gets nothing (its rate did not change; the push rule does
    not compare epochs). D arriving in B's class gets TOP at load 2 and B is pushed it; all go
    idle (LAST). Variants (A, B, C): (2500 s, late, 1500 s), (5000 s, 500 s, 2500 s), (late but
    BACKGROUND, 2500 s, 5000 s: a background dependency waits behind any slack class)."""

    def runTest(self) -> None:
        a, b, c, d = A1, A2, B1, A3
        self.start([a, b, c, d])
        variants = [("B late", (LAX, 0), (LATE, 0), (MID, 0)), ("B 500 s", (MISS, 0), (SOON, 0), (LAX, 0)),
                    ("A BACKGROUND", (LATE, FLAG_BACKGROUND), (LAX, 0), (MISS, 0))]
        for name, (sa, fa), (sb, fb), (sc, fc) in variants:
            with self.subTest(name):
                ga = self.request(a, sa, (ALONE, 1), fa, f"{name}: A alone")
                gb = self.request(b, sb, (TOP, 1), fb, f"{name}: B, more urgent")
                self.assertTrue(epoch_newer(gb[1], ga[1]), name)
                self.data(a, sa, (WAITING, 1), fa, what=f"{name}: A pushed to WAITING")
                self.assertEqual(self.held[a], (Q, gb[1]), f"{name}: A's epoch = the port generation")
                self.data(a, sa, None, fa, what=f"{name}: A holds WAITING")
                self.data(b, sb, None, fb, what=f"{name}: B holds TOP")
                self.request(c, sc, (WAITING, 2), fc, f"{name}: C behind B")
                self.data(a, sa, (WAITING, 2), fa, what=f"{name}: A pushed to WAITING at load 2")
                self.data(b, sb, None, fb, what=f"{name}: B, same rate under an older epoch")
                self.assertTrue(epoch_newer(self.book.gen, self.held[b][1]), name)
                self.request(d, sb, (TOP, 2), fb, f"{name}: D in B's class")
                self.data(b, sb, (TOP, 2), fb, what=f"{name}: B pushed to TOP at load 2")
                for dep, s, f in ((a, sa, fa), (c, sc, fc)):
                    self.data(dep, s, None, f, what=f"{name}: {dep} still WAITING at load 2")
                for dep, s, f in ((a, sa, fa), (b, sb, fb), (c, sc, fc), (d, sb, fb)):
                    self.last((dep, s), flags=f, what=name)
        self.expect_nothing()


class ShareUrgencyChangeTest(ShareTestBase):
    """A dependency's urgency follows its packets. A late (TOP 1 once B waits), B at 2500 s and
    C at 1500 s waiting (WAITING 2). B's slack shrinks into the top class (a DATA 500 s late):
    B is pushed TOP at load 2 (it shares the port with A), A is pushed the same, C WAITING at
    load 1. C's slack shrinks from 1500 s to 500 s, still behind the top class: its class
    changes (a new generation) but not its rate, so no GRANT. A's next transfer has more slack
    (2500 s): A moves behind B, WAITING at load 2 (A and C), B is pushed TOP at load 1. A REQUEST
    moves a dependency too: C's REQUEST of a late transfer gets TOP at load 2, B is pushed it
    and A, the only one waiting now, WAITING at load 1."""

    def runTest(self) -> None:
        a, b, c = A1, A2, B1
        self.start([a, b, c])
        self.request(a, LATE, (ALONE, 1), what="A alone")
        self.request(b, LAX, (WAITING, 1), what="B behind A")
        self.data(a, LATE, (TOP, 1), what="A pushed to TOP")
        self.request(c, MID, (WAITING, 2), what="C behind A")
        self.data(b, LAX, (WAITING, 2), what="B pushed to WAITING at load 2")
        self.data(b, LATE, (TOP, 2), what="B's slack shrinks into the top class")
        self.data(a, LATE, (TOP, 2), what="A pushed to TOP at load 2")
        self.data(c, MID, (WAITING, 1), what="C pushed to WAITING at load 1")
        gen = self.book.gen
        self.data(c, SOON, None, what="C's slack shrinks, still waiting: same rate")
        self.assertEqual(self.book.gen, gen + 1, "the class changed")
        self.data(a, LAX, (WAITING, 2), what="A's next transfer has more slack")
        self.data(b, LATE, (TOP, 1), what="B pushed to TOP at load 1")
        self.request(c, LATE, (TOP, 2), what="C's REQUEST of a late transfer")
        self.data(b, LATE, (TOP, 2), what="B pushed to TOP at load 2")
        self.data(a, LAX, (WAITING, 1), what="A pushed to WAITING at load 1")
        self.last((a, LAX), (b, LATE), (c, LATE), what="end")
        self.expect_nothing()


class ShareTopLastTest(ShareTestBase):
    """LAST of the top class: the waiting dependencies' next DATA are pushed their new share.
    Variants: A late, B at 1500 s: after A's LAST, B is pushed ALONE at load 1. A late, B at
    1500 s, C at 2500 s: after A's LAST, B (now top) is pushed TOP at load 1 and C WAITING at
    load 1 (the waiting load fell from 2 to 1). A and B late, C at 1500 s: A's LAST leaves B in
    the top class, pushed TOP at load 1, C's share unchanged (WAITING at load 1: no GRANT)."""

    def runTest(self) -> None:
        a, b, c = A1, A2, B1
        self.start([a, b, c])
        variants = [  # (name, REQUESTs in order, DATA bringing every sender up to date, DATA after A's LAST)
            ("two", [(a, LATE, (ALONE, 1)), (b, MID, (WAITING, 1))],
             [(a, LATE, (TOP, 1)), (b, MID, None)],
             [(b, MID, (ALONE, 1))]),
            ("three classes", [(a, LATE, (ALONE, 1)), (b, MID, (WAITING, 1)), (c, LAX, (WAITING, 2))],
             [(a, LATE, (TOP, 1)), (b, MID, (WAITING, 2)), (c, LAX, None)],
             [(b, MID, (TOP, 1)), (c, LAX, (WAITING, 1))]),
            ("two on top", [(a, LATE, (ALONE, 1)), (b, LATE, (ALONE, 2)), (c, MID, (WAITING, 1))],
             [(a, LATE, (TOP, 2)), (b, LATE, (TOP, 2)), (c, MID, None)],
             [(b, LATE, (TOP, 1)), (c, MID, None)]),
        ]
        for name, requests, updates, after in variants:
            with self.subTest(name):
                for dep, slack, want in requests:
                    self.request(dep, slack, want, what=f"{name}: {dep} REQUEST")
                for dep, slack, want in updates:
                    self.data(dep, slack, want, what=f"{name}: {dep} up to date")
                self.last((a, LATE), what=name)
                for dep, slack, want in after:
                    self.data(dep, slack, want, what=f"{name}: {dep} after the top's LAST")
                self.last(*((dep, slack) for dep, slack, _ in requests[1:]), what=name)
        self.expect_nothing()


class ShareStaleTest(ShareTestBase):
    """An original DATA of a transfer whose LAST already passed (``dep_ended``: a straggler its
    LAST overtook, late by now) changes nothing: the dependency stays idle, or in the class of its
    next transfer, the counts and the generation stay, and no GRANT is pushed. Without this one
    late straggler kept an ended transfer counted in the most urgent class, and every other
    dependency of the port at the waiting share, until the dependency's next LAST
    (docs/evaluation.md, "Stragglers after LAST"). A retransmission (RESENT) counts as before."""

    def runTest(self) -> None:
        a, b = A1, A2
        self.start([a, b])
        ended = 9001
        self.request(b, MID, (ALONE, 1), what="B alone")
        self.request(a, MID, (ALONE, 2), what="A joins B's class")
        self.data(a, MID, None, FLAG_LAST, flow_id=ended, what="A's transfer ends")
        self.data(a, LATE, None, flow_id=ended, stale=True, what="a late straggler of the ended transfer")
        self.request(b, MID, (ALONE, 1), what="B alone again: the straggler counted nothing")
        self.request(a, MID, (ALONE, 2), what="A's next transfer counts")
        self.data(a, LATE, None, flow_id=ended, stale=True, what="a straggler while A's next transfer runs")
        self.request(b, MID, (ALONE, 2), what="B still shares with A: nothing moved")
        self.data(a, MID, None, FLAG_LAST, flow_id=ended + 1, what="A's next transfer ends")
        self.data(a, LATE, (TOP, 1), FLAG_RESENT, flow_id=ended + 1, what="a retransmission of it counts")
        self.request(b, MID, (WAITING, 1), what="B waits behind the late retransmission")
        self.last((a, LATE), flags=FLAG_RESENT, what="the retransmission's LAST")
        self.last((b, MID), what="end")
        self.expect_nothing()


class ShareSpareTest(ShareTestBase):
    """Work conservation (``spare_level``): a waiting dependency's share is the WAITING entry
    times the level of the range holding the port's top-class DATA bytes of the last window
    (or of this window so far when more); no range: level 1. Only REQUESTs here, which count
    no bytes, so the port's window holds 0 bytes however fast BMv2 is (the window itself:
    tests/test_pipeline_model_share.py). The top dependency's share does not change."""

    def runTest(self) -> None:
        a, b = A1, A2
        self.start([a, b])
        self.request(a, LATE, (ALONE, 1), what="A alone, late")
        self.request(b, MID, (WAITING, 1), what="B waits: no spare_level entry, level 1")
        idle = {n.F_EGRESS_PORT: PORT_RECEIVER, n.F_TOP_BYTES: Range(0, 0)}
        self.insert(n.SPARE_LEVEL, idle, n.ACT_SET_SPARE_LEVEL, {"level": 3}, priority=3)
        self.insert(n.SPARE_LEVEL, {n.F_EGRESS_PORT: PORT_RECEIVER, n.F_TOP_BYTES: Range(1, 10**6)},
                    n.ACT_SET_SPARE_LEVEL, {"level": 2}, priority=2)
        self.book.level = 3
        self.assertEqual(self.request(b, MID, (WAITING, 1), what="B waits, the top class sent nothing: level 3")[0],
                         3 * Q)
        self.assertEqual(self.request(a, LATE, (TOP, 1), what="A keeps its share")[0], R - Q)
        self.modify(n.SPARE_LEVEL, idle, n.ACT_SET_SPARE_LEVEL, {"level": 5}, priority=3)
        self.book.level = 5
        self.assertEqual(self.request(b, MID, (WAITING, 1), what="B waits, the entry says level 5")[0], 5 * Q)
        self.last((a, LATE), (b, MID), what="end")
        self.expect_nothing()


class ShareTopBoostTest(ShareTestBase):
    """Top-class overcommit (``top_boost``): a top-class share (ALONE or TOP) of a load of 2 or
    more is multiplied by boost / 256 of the range holding the port's top-class DATA bytes of
    the last window (REQUESTs only: 0 bytes); no range: x1. A load of 1 and a waiting share
    are not raised."""

    def runTest(self) -> None:
        a, b = A1, A2
        self.start([a, b])
        self.request(a, MID, (ALONE, 1), what="A alone")
        self.request(b, MID, (ALONE, 2), what="B shares with A: no top_boost entry, x1")
        idle = {n.F_EGRESS_PORT: PORT_RECEIVER, n.F_TOP_BYTES: Range(0, 0)}
        self.insert(n.TOP_BOOST, idle, n.ACT_SET_TOP_BOOST, {"boost": 448}, priority=1)
        self.book.boost = 448
        self.assertEqual(self.request(b, MID, (ALONE, 2), what="B: x 448 / 256")[0], R // 2 * 448 >> 8)
        self.request(a, LATE, (TOP, 1), what="A late: load 1, not raised")
        self.assertEqual(self.request(b, MID, (WAITING, 1), what="B waits: not raised")[0], Q)
        self.request(a, MID, (ALONE, 2), what="A back in B's class")
        self.modify(n.TOP_BOOST, idle, n.ACT_SET_TOP_BOOST, {"boost": 300}, priority=1)
        self.book.boost = 300
        self.assertEqual(self.request(b, MID, (ALONE, 2), what="B: the entry says x 300 / 256")[0],
                         R // 2 * 300 >> 8)
        self.last((a, MID), (b, MID), what="end")
        self.expect_nothing()


LINK_R = 4_999_999  # kbit/s: link_share ALONE (below the port's R) ...
LINK_Q = 600_011  # ... and WAITING (below Q); TOP 2 R (above the port's)


class ShareLinkTest(ShareTestBase):
    """In-link shares (``link_share``, ``link_spare_level``): port 1 faces no host here (no
    host_port entry), so every dependency arriving on it is counted at in-link 1 as at the
    receiver port, and with link_share entries for port 1 its rate is the smaller of its two
    shares: ALONE and WAITING at the link are below the port's, TOP above. A link_spare_level
    entry multiplies the link's waiting share (then above the port's). A REQUEST arriving on
    port 3 (a new path) moves its dependency off link 1, where the other is then ALONE.
    Weighted: with both late at the link (and the port: ALONE at load 2 there), each one's key
    is ceil(W / w) (w = 2^k by its remaining bytes, W the class's sum; unit U = 2^WEIGHT_BASE_BITS
    bytes): both under U (w 1) get load 2; A at 2.25 U (w 4) and B under U loads 2 and 5; B at
    1.5 U (w 2) loads 3 and 2; A at 64 U (w 128) load 2, and B at w 1 key 129, clamped to
    MAX_LOAD, which has no entry here (LOADS): the port's share.
    Only REQUESTs, which count no bytes (the windows: tests/test_pipeline_model_share.py)."""

    def runTest(self) -> None:
        a, b = A1, A2
        self.start([a, b])
        for mode, total in ((ALONE, LINK_R), (TOP, 2 * R), (WAITING, LINK_Q)):
            for load in range(1, LOADS + 1):
                self.insert(n.LINK_SHARE, {n.F_INGRESS_PORT: PORT_SENDER, n.F_LOAD: load, n.F_MODE: mode},
                            n.ACT_SET_LINK_SHARE, {"rate_kbps": total // load})
                self.book.link[(mode, load)] = total // load
        self.assertEqual(self.request(a, LATE, (ALONE, 1), what="A alone: the link's ALONE")[0], LINK_R)
        self.assertEqual(self.request(b, MID, (WAITING, 1), what="B waits: the link's WAITING")[0], LINK_Q)
        self.assertEqual(self.request(a, LATE, (TOP, 1), what="A top: the port's TOP")[0], R - Q)
        self.insert(n.LINK_SPARE_LEVEL, {n.F_INGRESS_PORT: PORT_SENDER, n.F_TOP_BYTES: Range(0, 0)},
                    n.ACT_SET_LINK_SPARE_LEVEL, {"level": 3}, priority=3)
        self.book.link_level = 3
        self.assertEqual(self.request(b, MID, (WAITING, 1), what="B waits, link level 3: the port's WAITING")[0], Q)
        self.assertEqual(self.request(b, MID, (WAITING, 1), what="B from port 3: off link 1",
                                      in_port=PORT_OTHER)[0], Q)
        self.assertEqual(self.request(a, LATE, (TOP, 1), what="A alone at link 1: the link's ALONE")[0], LINK_R)
        self.book.link_level = 1
        unit = 1 << n.WEIGHT_BASE_BITS
        w1, w2, w4, w128 = unit * 3 // 4, unit * 3 // 2, unit * 9 // 4, unit * 64
        weighted = ((b, w1, (ALONE, 2), LINK_R // 2),
                    (a, w4, (ALONE, 2), LINK_R // 2), (b, w1, (ALONE, 2), LINK_R // 5),
                    (b, w2, (ALONE, 2), LINK_R // 3), (a, w4, (ALONE, 2), LINK_R // 2),
                    (a, w128, (ALONE, 2), LINK_R // 2), (b, w1, (ALONE, 2), R // 2))
        for dep, remaining, key, rate in weighted:
            what = f"{dep} late at link 1 with {remaining} bytes left"
            self.assertEqual(self.request(dep, LATE, key, what=what, remaining=remaining)[0], rate, what)
        self.last((a, LATE), (b, LATE), what="end")
        self.expect_nothing()


class ShareBackgroundTest(ShareTestBase):
    """BACKGROUND counts as urgency 4 whatever its slack: a late background dependency A is
    alone (ALONE 1); B at 2500 s (urgency 3) is more urgent than it: TOP at load 1, A pushed
    WAITING at load 1 (its DATA still in queue 6, its slack class); C without the flag at
    5000 s (no class: urgency 4) joins A's class: WAITING at load 2. After B's LAST, A and C
    share the top class: each pushed ALONE at load 2. A's next DATA without the flag, still
    late, moves it to urgency 0: TOP at load 1, C pushed WAITING at load 1."""

    def runTest(self) -> None:
        a, b, c = A1, A2, B1
        bg = FLAG_BACKGROUND
        self.start([a, b, c])
        self.request(a, LATE, (ALONE, 1), bg, "A late but BACKGROUND")
        self.request(b, LAX, (TOP, 1), what="B at 2500 s")
        self.data(a, LATE, (WAITING, 1), bg, what="A pushed behind B")
        self.request(c, MISS, (WAITING, 2), what="C at 5000 s: A's class")
        self.data(a, LATE, (WAITING, 2), bg, what="A pushed to WAITING at load 2")
        self.last((b, LAX), what="B")
        self.data(a, LATE, (ALONE, 2), bg, what="A shares the top class with C")
        self.data(c, MISS, (ALONE, 2), what="C shares the top class with A")
        self.data(a, LATE, (TOP, 1), what="A without BACKGROUND: urgency 0")
        self.data(c, MISS, (WAITING, 1), what="C behind A")
        self.last((a, LATE), (c, MISS), what="end")
        self.expect_nothing()


class ShareLoadLimitTest(ShareTestBase):
    """"Grant queue full": ``port_share`` entries only for loads 1..2 (each mode).

    Top class full: A and B at 1500 s share it (ALONE at load 2). C's REQUEST in the same class
    brings its count to 3: the default grant (epoch 0). C is counted all the same, so A's and
    B's next DATA get the default grant pushed too (docs/dataplane.md, open points), and while
    the load stays above 2 every DATA of theirs, now holding epoch 0, is pushed it again (the
    push rule's "epoch 0"). D at 2500 s behind the full class is granted: WAITING at load 1 (A,
    B, C are TOP at load 3 now: still no entry). After C's LAST, A's and B's next DATA (holding
    epoch 0) are pushed TOP at load 2 again; D's share did not change.

    Waiting full: A late; B, C at 2500 s waiting (WAITING at load 2). D's REQUEST at 2500 s
    makes the waiting load 3: the default grant, and B's next DATA too; A (TOP at load 1) is not
    affected. After D's LAST, B and C are pushed WAITING at load 2 again."""

    def runTest(self) -> None:
        a, b, c, d = A1, A2, B1, A3
        self.start([a, b, c, d], loads=2)
        with self.subTest("top class full"):
            self.request(a, MID, (ALONE, 1), what="A")
            self.request(b, MID, (ALONE, 2), what="B fills the class")
            self.data(a, MID, (ALONE, 2), what="A pushed to load 2")
            self.request(c, MID, GET_DEFAULT, what="C over the limit")
            self.assertEqual(self.book.counts()[2], 3)
            for dep in (a, b):
                self.data(dep, MID, GET_DEFAULT, what=f"{dep} while the class counts 3")
                self.assertEqual(self.held[dep], DEFAULT[:2])
                self.data(dep, MID, GET_DEFAULT, what=f"{dep} holding epoch 0: pushed again")
            self.request(d, LAX, (WAITING, 1), what="D behind the full class")
            self.data(a, MID, GET_DEFAULT, what="A: TOP at load 3")
            self.last((c, MID), what="C")
            for dep in (a, b):
                self.data(dep, MID, (TOP, 2), what=f"{dep} re-admitted")
            self.data(d, LAX, None, what="D still WAITING at load 1")
            self.last((a, MID), (b, MID), (d, LAX), what="top class full")
        with self.subTest("waiting full"):
            self.request(a, LATE, (ALONE, 1), what="A")
            self.request(b, LAX, (WAITING, 1), what="B")
            self.data(a, LATE, (TOP, 1), what="A pushed to TOP")
            self.request(c, LAX, (WAITING, 2), what="C")
            self.data(b, LAX, (WAITING, 2), what="B pushed to WAITING at load 2")
            self.request(d, LAX, GET_DEFAULT, what="D: waiting load 3")
            self.data(b, LAX, GET_DEFAULT, what="B at waiting load 3")
            self.data(a, LATE, None, what="A not affected")
            self.last((d, LAX), what="D")
            self.data(b, LAX, (WAITING, 2), what="B re-admitted")
            self.data(c, LAX, None, what="C holds WAITING at load 2 (its grant was from before)")
            self.last((a, LATE), (b, LAX), (c, LAX), what="waiting full")
        self.expect_nothing()


class NoEntryDigestTest(ShareTestBase):
    """A REQUEST of a dependency without a ``dep_grant`` entry gets the default grant (epoch 0)
    and sends one ``request_digest_t`` digest: flow_id, src_addr, dst_addr, dep_id,
    remaining_bytes, latest_start (read from the P4Runtime stream and acked); the REQUEST of a
    known dependency (share or fixed grant) sends none. Digests arrive in order on the stream,
    so "none" is checked by seeing the digest of the REQUEST sent after it; digests of REQUESTs
    this test did not send (the clock probe's) are acked and skipped."""

    def next_digest(self, sent: set[tuple[int, int]]) -> list[int]:
        while True:
            dl = self.client.next_digest(self.timeout)
            self.client.ack_digest(dl)
            self.assertEqual(dl.digest_id, self.digest_id)
            self.assertEqual(len(dl.data), 1)
            members = [decode(m.bitstring) for m in dl.data[0].struct.members]
            if (members[0], members[3]) in sent:
                return members

    def runTest(self) -> None:
        share, fixed = Dep(SENDER_IP, 41, 41), Dep(SENDER_IP, 42, 42)
        self.start([share])
        self.insert(n.DEP_GRANT, {n.F_SRC_ADDR: ip_int(SENDER_IP), n.F_DEP_ID: fixed.dep_id}, n.ACT_SET_FIXED_GRANT,
                    {"rate_kbps": 123_000, "epoch": 77, "lease_us": 999, "meter_slot": fixed.slot})
        self.digest_id = self.enable_digest(n.REQUEST_DIGEST)
        mid = (self.now + MID) & TIME_MASK  # the share grant's REQUEST: alone -> ALONE at load 1
        variants = [  # (sender, dep_id, flow_id, remaining, latest start, GRANT (rate, epoch, lease), digest?)
            (SENDER_IP, 43, 61, 77_777, 2**47 + 5, DEFAULT, True),        # unknown dep_id
            (SENDER_IP, share.dep_id, 62, 1, mid, (R, 1, SHARE_LEASE_US), False),
            (SENDER_IP, fixed.dep_id, 63, 5, 6, (123_000, 77, 999), False),
            (SENDER2_IP, share.dep_id, 64, 2**48 - 1, 2**48 - 1, DEFAULT, True),  # known dep_id, other sender
        ]
        for sender, dep_id, flow_id, remaining, latest, (rate, epoch, lease), _ in variants:
            with self.subTest(sender=sender, dep_id=dep_id):
                self.send(PORT_SENDER, safs_request(sender, RECEIVER_IP, flow_id, remaining, latest, dep_id=dep_id,
                                                    **TO_SWITCH))
                self.check_grant(self.receive(PORT_SENDER), flow_id=flow_id, dep_id=dep_id, remaining=remaining,
                                 rate=rate, epoch=epoch, lease=lease, sender_ip=sender)
        sent = {(f, d) for _, d, f, _, _, _, _ in variants}
        for sender, dep_id, flow_id, remaining, latest, _, digest in variants:
            if digest:
                self.assertEqual(self.next_digest(sent),
                                 [flow_id, ip_int(sender), ip_int(RECEIVER_IP), dep_id, remaining, latest])
        self.expect_nothing()


class ShareRestartTest(ShareTestBase):
    """Registers lost: A late (TOP at load 1), B and C at 1500 s (WAITING at load 2), generation
    3; then the switch "restarts" (the pipeline is pushed again: tables and registers gone) and
    the controller re-installs the tables. Then:

    - a stale LAST of C (counted before, its class lost) changes nothing: no count falls below
      0 and the generation stays 0 (A's next DATA gets epoch 1);
    - A's next DATA, holding its pre-restart grant (TOP at load 1, epoch 3), rebuilds the counts
      (A alone: ALONE at load 1) and is pushed that with epoch 1: the generation restarted. The
      sender ignores it, as older (RFC 1982) than the epoch 3 it holds (rule 2), so its next
      DATA, still holding the old grant, is pushed the same GRANT again: every DATA until the
      lease runs out (docs/dataplane.md "Open points");
    - B's next DATA (holding WAITING at load 2, epoch 3) counts B again: WAITING at load 1,
      epoch 2, ignored by the sender as well;
    - a second stale LAST of C subtracts nothing from B's class: B's next DATA with RENEW gets
      WAITING at load 1 (a count of 0 there would leave the waiting load 0: the default grant)
      and the same epoch 2 (no new generation);
    - once A's lease has run out, its sender holds the default grant (epoch 0): its next DATA
      is pushed TOP at load 1 and the sender takes it;
    - C's next transfer (REQUEST) counts it again: WAITING at load 2."""

    def runTest(self) -> None:
        a, b, c = A1, A2, B1
        self.start([a, b, c])
        self.request(a, LATE, (ALONE, 1), what="A before the restart")
        self.request(b, MID, (WAITING, 1), what="B before the restart")
        self.request(c, MID, (WAITING, 2), what="C before the restart")
        self.data(a, LATE, (TOP, 1), what="A pushed to TOP before the restart")
        self.data(b, MID, (WAITING, 2), what="B pushed to WAITING at load 2 before the restart")
        self.assertEqual(self.book.gen, 3)
        self.assert_held(a, TOP, 1, "before the restart")
        self.expect_nothing()  # every GRANT of before is in
        before = dict(self.held)

        self.push_pipeline_again()
        self.install([a, b, c])
        self.book = Book()
        self.silent = {}
        self.last((c, MID), what="stale LAST of C at load 0")
        self.data(a, LATE, (ALONE, 1), what="A rebuilds the counts")
        self.assertEqual(self.book.grant(a), (R, 1, SHARE_LEASE_US), "the generation restarted at 1")
        self.assertEqual(self.held[a], before[a], "the sender ignores the older epoch (rule 2)")
        self.data(a, LATE, (ALONE, 1), what="A still holding its old grant: pushed again")
        self.data(b, MID, (WAITING, 1), what="B counted again")
        self.assertEqual(self.held[b], before[b], "B's sender ignores the older epoch too")
        self.last((c, MID), what="stale LAST of C at a non-zero load")
        self.data(b, MID, (WAITING, 1), FLAG_RENEW, held=(Q, 2), what="B after the stale LAST")
        self.assertEqual(self.book.gen, 2)
        self.data(a, LATE, (TOP, 1), held=(DEFAULT_RATE_KBPS, 0), what="A after its lease ran out")
        self.assert_held(a, TOP, 1, "the sender takes a GRANT when it holds epoch 0")
        self.request(c, MID, (WAITING, 2), what="C's next transfer")
        self.last((a, LATE), (b, MID), (c, MID), what="end")
        self.expect_nothing()


class ShareRenewTest(ShareTestBase):
    """RENEW and LAST on a share grant: a DATA holding exactly its grant gets nothing; with
    RENEW it gets a GRANT (same rate and epoch: the lease renewed, RENEW echoed); holding epoch
    0 with the right rate it gets one; LAST never gets one, RENEW or not, and makes the
    dependency idle (the generation grows); a second LAST while idle changes nothing (no new
    generation); a later DATA with RENEW makes it active again with a newer epoch. A waiting
    dependency renews its WAITING share the same way."""

    def runTest(self) -> None:
        a, b = A1, A2
        self.start([a, b])
        rate, epoch, _ = self.request(a, MID, (ALONE, 1))
        steps = [  # (name, flags, held, GRANT expected)
            ("holds the grant", 0, (rate, epoch), False),
            ("RENEW", FLAG_RENEW, (rate, epoch), True),
            ("epoch 0, right rate", 0, (rate, 0), True),
            ("LAST and RENEW", FLAG_LAST | FLAG_RENEW, (rate, epoch), False),
            ("LAST and RENEW while idle, rate off", FLAG_LAST | FLAG_RENEW, (rate // 2, epoch), False),
            ("LAST, epoch 0, while idle", FLAG_LAST, (rate, 0), False),
            ("RENEW after LAST: active again", FLAG_RENEW, (rate, epoch), True),
        ]
        for name, flags, held, want in steps:
            with self.subTest(name):
                self.data(a, MID, (ALONE, 1) if want else None, flags, held, what=name)
        # Idle LASTs made no new generation: active again at epoch + 2 (one for going idle).
        self.assertEqual(self.held[a], (rate, epoch + 2), "active again: same rate, newer epoch")
        self.request(b, LAX, (WAITING, 1), what="B behind A")
        self.data(b, LAX, (WAITING, 1), FLAG_RENEW, what="B renews WAITING")
        self.data(b, LAX, None, FLAG_LAST | FLAG_RENEW, what="B LAST and RENEW")
        self.last((a, MID), what="end")
        self.expect_nothing()

"""The forged-packet corpus against the pipeline model (p4src/include/source_guard.p4 and the
grant path; the same corpus runs on BMv2 in ptf_tests/source_guard_test.py): every forged
packet a host sends is dropped or demoted, and fuzzed SAFS headers from a host port never leave
the switch as something a host may not send. Switches set up by the Scheduler on the two-ToR
topology (hosts a, b, c on tor0; d on tor1)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from two_tors import two_tors

from safs.core import p4names as n
from safs.core.hints import DependencyHint
from safs.core.packet import PROTO_TCP, PROTO_UDP, Packet
from safs.core.protocol import (
    FLAG_DEMOTED,
    MAX_DONE_FRAME_BYTES,
    MAX_REQUEST_FRAME_BYTES,
    QUEUE_CONTROL,
    QUEUE_OVER_RATE,
    QUEUE_SLACK_MOST_URGENT,
    SAFS_UDP_PORT,
    SAFS_VERSION,
    Forged,
    MsgType,
)
from safs.core.scheduler import Scheduler, SchedulerConfig
from safs.targets.pipeline_model import PipelineModel

TOPO = two_tors()
LATE = (1 << 48) - 10**6  # a latest start time 1 ms before the switches' time 0 (mod 2^48)
IP = {h: TOPO.host_ip(h) for h in TOPO.hosts()}


def port_of(sw: str, host: str) -> int:
    return next(p for p, nb in TOPO.ports(sw).items() if nb == host)


def fabric() -> tuple[dict[str, PipelineModel], Scheduler]:
    models = {sw: PipelineModel(sw, lambda: 0) for sw in TOPO.switches()}
    sched = Scheduler(TOPO, models, SchedulerConfig())
    sched.setup(0)
    sched.announce_dependency(DependencyHint(1, "a", "d", "A2F"), 0)
    return models, sched


def safs(src: str | int, t: MsgType | int, size: int = 1078, dep_id: int = 1, ts: int = 10**9) -> Packet:
    p = Packet(IP[src] if isinstance(src, str) else src, IP["d"], PROTO_UDP, 40001, SAFS_UDP_PORT, size,
               payload=max(0, size - 78))
    p.safs_version, p.safs_type, p.dep_id, p.flow_id, p.ts, p.remaining = SAFS_VERSION, int(t), dep_id, 7, ts, size
    return p


def forged_count(model: PipelineModel, reason: Forged) -> int:
    return model.read_counter(n.FORGED, reason).packet_count


def test_host_ports_get_their_hosts_address_and_fabric_ports_none() -> None:
    models, _ = fabric()
    got = {(e.match[n.F_INGRESS_PORT], e.params["src_addr"]) for e in models["tor0"].entries(n.HOST_PORT)}
    assert got == {(port_of("tor0", h), IP[h]) for h in ("a", "b", "c")}


def test_the_forged_corpus_is_dropped_or_demoted() -> None:
    models, sched = fabric()
    tor0, tor1 = models["tor0"], models["tor1"]
    a_port = port_of("tor0", "a")
    corpus = {  # name: (packet from a's port, the forged reason it is dropped for)
        "spoofed DATA (b's address)": (safs("b", MsgType.DATA), Forged.SPOOFED_SOURCE),
        "spoofed REQUEST (reflects a GRANT at c)": (safs("c", MsgType.REQUEST, size=78), Forged.SPOOFED_SOURCE),
        "spoofed TCP": (Packet(IP["b"], IP["d"], PROTO_TCP, 1, 2, 1500), Forged.SPOOFED_SOURCE),
        "spoofed stale-epoch DATA": (safs("c", MsgType.DATA), Forged.SPOOFED_SOURCE),
        "GRANT from a host": (safs("a", MsgType.GRANT, size=78), Forged.GRANT_FROM_HOST),
        "9000-byte DONE": (safs("a", MsgType.DONE, size=9078), Forged.OVERSIZED_CONTROL),
        "9000-byte REQUEST": (safs("a", MsgType.REQUEST, size=9078), Forged.OVERSIZED_CONTROL),
        "200-byte REQUEST": (safs("a", MsgType.REQUEST, size=200), Forged.OVERSIZED_CONTROL),
        "1100-byte DONE": (safs("a", MsgType.DONE, size=1100), Forged.OVERSIZED_CONTROL),
    }
    for name, (pkt, reason) in corpus.items():
        before = forged_count(tor0, reason)
        assert tor0.ingress(pkt, a_port) == [], name
        assert forged_count(tor0, reason) == before + 1, name
    # honest control packets pass, in the control queue (a NACK DONE with its 128 offsets too)
    for t, size in ((MsgType.REQUEST, 78), (MsgType.DONE, 78), (MsgType.DONE, 78 + 6 * 128)):
        out = tor0.ingress(safs("a", t, size=size), a_port)
        assert [p.priority for _, p in out] == [QUEUE_CONTROL]
    # a flood of small REQUESTs (the clock stands still: no refill) is cut at the port's
    # control_meter burst; the rest is dropped and counted
    passed = sum(len(tor0.ingress(safs("a", MsgType.REQUEST, size=78), a_port)) for _ in range(2000))
    burst = tor0.meter_config(a_port, n.CONTROL_METER).pburst
    assert passed <= burst // 78 + 1 and forged_count(tor0, Forged.CONTROL_RATE) == 2000 - passed
    # c sends under a's dependency id: the grant is keyed on the source too, so c gets the
    # default grant (slot 0), a's meter and byte counter are untouched
    slot = sched._dep_slots[("a", 1)][1]
    d_port = port_of("tor1", "d")
    for _, p in tor0.ingress(safs("c", MsgType.DATA), port_of("tor0", "c")):
        tor1.ingress(p, next(iter(set(TOPO.ports("tor1")) - {d_port})))
    assert tor1.read_counter(n.DEP_BYTES, slot).packet_count == 0
    # a host claiming negative slack on a dependency nobody granted: the receiver's ToR meters it
    # at the default rate and demotes the rest (slack classes only within a grant)
    priorities = []
    for _ in range(200):
        for _, p in tor0.ingress(safs("b", MsgType.DATA, size=9078, dep_id=9, ts=0), port_of("tor0", "b")):
            priorities += [q.priority for _, q in tor1.ingress(p, next(iter(set(TOPO.ports("tor1")) - {d_port})))]
    assert len(priorities) == 200 and priorities.count(QUEUE_OVER_RATE) >= 190  # only the meter's burst keeps its class


def test_a_slack_claim_nobody_granted_is_demoted_at_the_senders_tor_for_the_whole_path() -> None:
    """b writes a latest start 1 ms in the past (late: queue 6) into back-to-back 9 KB DATA of a dependency
    the controller never admitted for it: past its port's unclaimed_meter burst, its own ToR
    sends them in queue 1 with FLAG_DEMOTED, and the receiver's ToR keeps them there. a's
    admitted dependency, sent the same way, keeps its class at its ToR (its rate is the
    receiver's ToR's to enforce)."""
    models, sched = fabric()
    tor0, tor1 = models["tor0"], models["tor1"]
    d_port = port_of("tor1", "d")
    uplink = next(iter(set(TOPO.ports("tor1")) - {d_port}))
    b_port = port_of("tor0", "b")
    burst = tor0.meter_config(b_port, n.UNCLAIMED_METER).cburst
    assert burst >= sched.config.unscheduled_bytes  # an honest sender's first RTT keeps its class
    at_tor0, at_tor1 = [], []
    for _ in range(200):
        for _, p in tor0.ingress(safs("b", MsgType.DATA, size=9078, dep_id=9, ts=LATE), b_port):
            at_tor0.append((p.priority, bool(p.flags & FLAG_DEMOTED)))
            at_tor1 += [q.priority for _, q in tor1.ingress(p, uplink)]
    demoted = at_tor0.count((QUEUE_OVER_RATE, True))
    assert demoted >= 200 - burst // 9078 - 1 and at_tor0.count((QUEUE_SLACK_MOST_URGENT, False)) == 200 - demoted
    assert forged_count(tor0, Forged.UNCLAIMED_DATA) == demoted
    assert at_tor1.count(QUEUE_OVER_RATE) >= demoted  # and later switches honour the flag
    a_out = [p for _ in range(200)
             for _, p in tor0.ingress(safs("a", MsgType.DATA, size=9078, dep_id=1, ts=LATE), port_of("tor0", "a"))]
    assert [p.priority for p in a_out] == [QUEUE_SLACK_MOST_URGENT] * 200
    assert not any(p.flags & FLAG_DEMOTED for p in a_out)
    # ending the dependency removes its claim: the same DATA is demoted past the burst again
    sched.end_dependency("a", 1, 0)
    assert tor0.entries(n.DEP_CLAIM) == []
    after = [p.priority for _ in range(200)
             for _, p in tor0.ingress(safs("a", MsgType.DATA, size=9078, dep_id=1, ts=LATE), port_of("tor0", "a"))]
    assert after.count(QUEUE_OVER_RATE) >= 200 - burst // 9078 - 1


@settings(max_examples=300, deadline=None)
@given(t=st.integers(0, 15), version=st.integers(0, 15), src=st.sampled_from(["a", "b", "d", 0x0B000001]),
       size=st.integers(60, 9100), dep_id=st.integers(0, 65535), ts=st.integers(0, (1 << 48) - 1),
       dport=st.sampled_from([SAFS_UDP_PORT, 4791, 80]), flags=st.integers(0, 255))
def test_fuzzed_packets_from_a_host_port_never_leave_as_what_a_host_may_not_send(
        t: int, version: int, src: str | int, size: int, dep_id: int, ts: int, dport: int, flags: int) -> None:
    models, _ = fabric()
    tor0 = models["tor0"]
    pkt = safs(src, t, size=size, dep_id=dep_id, ts=ts)
    pkt.safs_version, pkt.dport, pkt.flags = version, dport, flags
    if dport != SAFS_UDP_PORT:
        pkt.safs_type = 0  # not SAFS on the wire
    out = tor0.ingress(pkt, port_of("tor0", "a"))
    for _, p in out:
        assert p.src == IP["a"]
        if p.safs_type and p.safs_version == SAFS_VERSION:
            assert p.safs_type != MsgType.GRANT
            if p.safs_type == MsgType.REQUEST:
                assert p.size <= MAX_REQUEST_FRAME_BYTES
            if p.safs_type == MsgType.DONE:
                assert p.size <= MAX_DONE_FRAME_BYTES
            if p.safs_type == MsgType.DATA and p.flags & FLAG_DEMOTED:
                assert p.priority == QUEUE_OVER_RATE  # whoever set the flag
    if (IP[src] if isinstance(src, str) else src) != IP["a"]:
        assert out == []

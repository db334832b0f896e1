"""P4Runtime names of the SAFS pipeline: the contract between the P4 program, the
in-process pipeline model and the controller. A test checks the committed P4Info against it.

Names are the fully qualified P4Info names (control instance + object); match fields and
action parameters carry these exact ``@name`` annotations in p4src/.
"""

from __future__ import annotations

# Ingress tables -----------------------------------------------------------------------
IPV4_LPM = "SafsIngress.ipv4_lpm"  # key dst_addr (lpm, 32) -> set_egress(port) | set_ecmp_group | drop
ACT_SET_EGRESS = "SafsIngress.set_egress"  # params: port (9 bits)
ACT_DROP = "SafsIngress.drop"
ACT_SET_ECMP_GROUP = "SafsIngress.set_ecmp_group"  # params: group (16): look the next hop up in ecmp

# ECMP (forwarding.p4): an indirect table keyed by the route's group, with an action selector
# hashing the 5-tuple (safs.core.ecmp); members set_egress(port, dst_mac), one per next hop.
ECMP = "SafsIngress.ecmp"  # key ecmp_group (exact, 16); implementation ECMP_SELECTOR
ECMP_SELECTOR = "SafsIngress.ecmp_selector"  # action_selector(crc16): members and groups
F_ECMP_GROUP = "ecmp_group"
ECMP_GROUPS = 1024  # ECMP_GROUPS in defines.p4: groups (distinct next-hop sets) per switch
ECMP_MEMBERS = 4096  # ECMP_MEMBERS in defines.p4: members of the selector

RECEIVER_PORT = "SafsIngress.receiver_port"  # key egress_port (exact, 9): ports with a host
ACT_MARK_RECEIVER = "SafsIngress.mark_receiver_port"  # no params

SLACK_CLASS = "SafsIngress.slack_class"  # key slack_key (range, 48) -> set_slack_class(qclass)
ACT_SET_SLACK_CLASS = "SafsIngress.set_slack_class"  # params: qclass (3 bits, 2..6); urgency = 6 - qclass

# Dependency grants at the receiver's ToR, keyed by the sender's address and its dependency id.
DEP_GRANT = "SafsIngress.dep_grant"  # key src_addr (exact, 32), dep_id (exact, 16)
ACT_SET_SHARE_GRANT = "SafsIngress.set_share_grant"  # params: meter_slot(16): rate = the port's share
ACT_SET_FIXED_GRANT = "SafsIngress.set_fixed_grant"  # params: rate_kbps(32) epoch(32) lease_us(32) meter_slot(16)
ACT_NO_GRANT = "SafsIngress.no_grant"  # default: use the default grant and meter slot

# Share rates: per receiver port, load and mode, the rate of one dependency, written by the
# controller at setup (grant_enforcer.p4): SHARE_ALONE usable / load (the most urgent class,
# nothing waiting), SHARE_TOP (usable - reserve) / load (others waiting), SHARE_WAITING
# reserve / load (behind a more urgent class; load = all waiting dependencies).
PORT_SHARE = "SafsIngress.port_share"  # key egress_port (exact, 9), load (exact, 16), mode (exact, 2)
ACT_SET_SHARE = "SafsIngress.set_share"  # params: rate_kbps (32)
MAX_LOAD = 128  # largest load with a port_share entry (p4src/include/defines.p4); above: the default grant
# Work conservation: waiting dependencies get SHARE_WAITING x level, level = how many reserves
# the top class left unused in the last window (TOP_WINDOW_NS) of the port (its top-class bytes:
# the last window's, or the current window's so far when more).
SPARE_LEVEL = "SafsIngress.spare_level"  # key egress_port (exact, 9), top_bytes (range, 32)
ACT_SET_SPARE_LEVEL = "SafsIngress.set_spare_level"  # params: level (8); default no_spare: level 1
MAX_SPARE_LEVEL = 64  # waiting dependencies get at most 64 reserves (SPARE_LEVEL_SIZE in defines.p4: 64 x 64)
TOP_WINDOW_NS = 32768  # TOP_WINDOW_NS in defines.p4
# Top-class overcommit (SchedulerConfig.top_overcommit): a top-class share of a load of 2 or more
# is multiplied by boost / 256 for the port's top-class bytes of the last window (no entry: 256).
TOP_BOOST = "SafsIngress.top_boost"  # key egress_port (exact, 9), top_bytes (range, 32)
ACT_SET_TOP_BOOST = "SafsIngress.set_top_boost"  # params: boost (16), 1/256; default no_top_boost: 256
TOP_BOOST_ONE = 256  # boost x1
TOP_BOOST_STEPS = 16  # the controller's ranges per unit of boost (steps of 1/16)
TOP_BOOST_SIZE = 2048  # TOP_BOOST_SIZE in defines.p4: 16 steps per host port (top_overcommit <= 2), 128 ports
FINISH_SHIFTS = (4, 6)  # FINISH_SHIFT_A, _B in defines.p4: finish = latest start + (rem >> 4) + (rem >> 6)
FINISH_RATE_BPS = 100_000_000_000  # the port rate that estimate is for


def holder_time_ns(remaining: int) -> int:
    """The holder rule's time for ``remaining`` bytes at :data:`FINISH_RATE_BPS`, ns, as the
    P4 program computes it (constant shifts, 2.4% short)."""
    return (remaining >> FINISH_SHIFTS[0]) + (remaining >> FINISH_SHIFTS[1])


# Contended in-links: the same shares for a fabric link into a receiver's ToR, by ingress port
# (every dependency arriving on a non-host port is counted there; with entries for the port, its
# rate is the smaller of the two shares). The controller writes them for the links it accounts.
LINK_SHARE = "SafsIngress.link_share"  # key ingress_port (exact, 9), load (exact, 16), mode (exact, 2)
ACT_SET_LINK_SHARE = "SafsIngress.set_link_share"  # params: rate_kbps (32)
LINK_SPARE_LEVEL = "SafsIngress.link_spare_level"  # key ingress_port (exact, 9), top_bytes (range, 32)
ACT_SET_LINK_SPARE_LEVEL = "SafsIngress.set_link_spare_level"  # params: level (8); default level 1
MAX_SHARE_LINKS = 16  # in-links (and out-links) with entries per switch (LINK_/OUT_SHARE_SIZE, ..._SPARE_SIZE)
# Contended out-links: the same at the sender's ToR, by egress port, for the dependencies its
# hosts send (a dep_claim entry gives each an out slot); a GRANT coming back is capped there.
OUT_SHARE = "SafsIngress.out_share"  # key egress_port (exact, 9), load (exact, 16), mode (exact, 2)
ACT_SET_OUT_SHARE = "SafsIngress.set_out_share"  # params: rate_kbps (32)
OUT_SPARE_LEVEL = "SafsIngress.out_spare_level"  # key egress_port (exact, 9), top_bytes (range, 32)
ACT_SET_OUT_SPARE_LEVEL = "SafsIngress.set_out_spare_level"  # params: level (8); default level 1
SHARE_ALONE, SHARE_TOP, SHARE_WAITING = 0, 1, 2  # port_share modes (defines.p4)
SHARE_MODES = (SHARE_ALONE, SHARE_TOP, SHARE_WAITING)
URGENCY_CLASSES = 5  # urgency 0 (late, slack class 6) .. 4 (slack class 2, and background)

# Single-entry settings tables (keyless; the setting is the default action's parameters).
CLOCK_OFFSET = "SafsIngress.clock_offset"
ACT_SET_CLOCK_OFFSET = "SafsIngress.set_clock_offset"  # params: offset_ns (48)
DEFAULT_GRANT = "SafsIngress.default_grant"
ACT_SET_DEFAULT_GRANT = "SafsIngress.set_default_grant"  # params: rate_kbps(32) lease_us(32) meter_slot(16)
SHARE_LEASE = "SafsIngress.share_lease"
ACT_SET_SHARE_LEASE = "SafsIngress.set_share_lease"  # params: lease_us (32): the lease of share grants
HOLDER = "SafsIngress.holder"
# params: idle_ns (32; 0: no holder, sole dependencies share like the others), release_bytes (32),
# preempt_ns (32) (SchedulerConfig.holder_*)
ACT_SET_HOLDER = "SafsIngress.set_holder"
ECN_THRESHOLD = "SafsEgress.ecn_threshold"
ACT_SET_ECN_THRESHOLD = "SafsEgress.set_ecn_threshold"  # params: qdepth_pkts (19)

# Non-SAFS traffic aggregates (traffic_class.p4): key src_addr, dst_addr, protocol (ternary),
# l4_src_port, l4_dst_port (range), roce_qp (ternary, 24: the RoCEv2 BTH destination QP).
TRAFFIC_CLASS = "SafsIngress.traffic_class"
ACT_SET_TRAFFIC_CLASS = "SafsIngress.set_traffic_class"  # params: qclass (3)
ACT_SET_METERED_TRAFFIC_CLASS = "SafsIngress.set_metered_traffic_class"  # params: qclass (3), meter_index (16)
AGGREGATE_METER = "SafsIngress.aggregate_meter"  # indirect, bytes; RED: ECN CE if ECT, else drop
AGGREGATE_METERS = 256  # AGGREGATE_METERS in defines.p4; index 0 unused
TRAFFIC_CLASS_SIZE = 256  # TRAFFIC_CLASS_SIZE in defines.p4
ROCE_V2_UDP_PORT = 4791  # IANA; InfiniBand Architecture Specification, Annex A17

# Match field names.
F_DST_ADDR = "dst_addr"
F_EGRESS_PORT = "egress_port"
F_SLACK_KEY = "slack_key"
F_DEP_ID = "dep_id"
F_LOAD = "load"
F_MODE = "mode"
F_TOP_BYTES = "top_bytes"
F_PROTOCOL = "protocol"
F_L4_SRC_PORT = "l4_src_port"
F_L4_DST_PORT = "l4_dst_port"
F_ROCE_QP = "roce_qp"

# Externs ------------------------------------------------------------------------------
DEP_METER = "SafsIngress.dep_meter"  # indirect, bytes; index = meter_slot; slot 0 = default
DEP_SLOTS = 4096  # meter, counter and dep_class slots per switch (DEP_SLOTS in defines.p4)
DEFAULT_METER_SLOT = 0

DEP_BYTES = "SafsIngress.dep_bytes"  # indirect counter (bytes and packets) by meter_slot
# Registers (soft state, not readable over P4Runtime on BMv2; rebuilt by in-band traffic).
DEP_CLASS = "SafsIngress.dep_class"  # by meter_slot: 1 + the urgency the dependency is counted in (0 idle)
CLASS_LOADS = tuple(f"SafsIngress.class_load_{u}" for u in range(URGENCY_CLASSES))  # by egress port:
# active dependencies of urgency u
PORT_GEN = "SafsIngress.port_gen"  # by egress port: grows whenever a class count changes (share epochs)
DEP_ENDED = "SafsIngress.dep_ended"  # by meter_slot: flow id of the last transfer whose LAST passed
PORT_WIN_START = "SafsIngress.port_win_start"  # by egress port: start (fabric ns) of the current window
PORT_WIN_BYTES = "SafsIngress.port_win_bytes"  # by egress port: top-class DATA bytes of the current window
PORT_TOP_BYTES = "SafsIngress.port_top_bytes"  # by egress port: ... of the last whole window (0 if silent)
DEP_LINK_CLASS = "SafsIngress.dep_link_class"  # by meter_slot: as dep_class, at the in-link
DEP_LINK_PORT = "SafsIngress.dep_link_port"  # by meter_slot: the ingress port it is counted at
LINK_LOADS = tuple(f"SafsIngress.link_load_{u}" for u in range(URGENCY_CLASSES))  # by ingress port
LINK_WIN_START = "SafsIngress.link_win_start"  # by ingress port: as port_win_start
LINK_WIN_BYTES = "SafsIngress.link_win_bytes"  # by ingress port: as port_win_bytes
LINK_TOP_BYTES = "SafsIngress.link_top_bytes"  # by ingress port: as port_top_bytes
DEP_OUT_CLASS = "SafsIngress.dep_out_class"  # by out slot: as dep_class, at the out-link
DEP_OUT_PORT = "SafsIngress.dep_out_port"  # by out slot: the egress port it is counted at
DEP_OUT_RATE = "SafsIngress.dep_out_rate"  # by out slot: its out-link cap, kbit/s (0: none)
OUT_LOADS = tuple(f"SafsIngress.out_load_{u}" for u in range(URGENCY_CLASSES))  # by egress port
OUT_WIN_START = "SafsIngress.out_win_start"  # by egress port: as port_win_start, at the out-link
OUT_WIN_BYTES = "SafsIngress.out_win_bytes"  # by egress port: as port_win_bytes, at the out-link
OUT_TOP_BYTES = "SafsIngress.out_top_bytes"  # by egress port: as port_top_bytes, at the out-link
# Weighted link shares: at an in- or out-link a top-class dependency's key is ceil(W / w), at
# most MAX_LOAD, W the class's weight sum there and w = 2^k its weight, k = clamp(bit length of
# its remaining bytes - WEIGHT_BASE_BITS, 0, WEIGHT_MAX_SHIFT) (defines.p4).
DEP_LINK_WEIGHT = "SafsIngress.dep_link_weight"  # by meter_slot: its weight at the in-link
LINK_WEIGHTS = tuple(f"SafsIngress.link_weight_{u}" for u in range(URGENCY_CLASSES))  # by ingress port:
# the weight sum of urgency u
DEP_OUT_WEIGHT = "SafsIngress.dep_out_weight"  # by out slot: its weight at the out-link
OUT_WEIGHTS = tuple(f"SafsIngress.out_weight_{u}" for u in range(URGENCY_CLASSES))  # by egress port
WEIGHT_BASE_BITS = 20  # WEIGHT_BASE_BITS in defines.p4: weight 1 below 1 MiB remaining
WEIGHT_MAX_SHIFT = 7  # WEIGHT_MAX_SHIFT in defines.p4: weight 128 from 64 MiB remaining
# The port's holder (grant_enforcer.p4): sole dependencies (FLAG_SOLE) of the most urgent class
# count as one in the port's share and take the full share one at a time.
DEP_SOLE = "SafsIngress.dep_sole"  # by meter_slot: 1 + the urgency it is counted sole in (0: not sole)
SOLE_LOADS = tuple(f"SafsIngress.sole_load_{u}" for u in range(URGENCY_CLASSES))  # by egress port:
# sole dependencies of urgency u (a subset of class_load_u's)
HOLDER_SLOT = "SafsIngress.holder_slot"  # by egress port: the holder's meter slot (0: none)
HOLDER_CLASS = "SafsIngress.holder_class"  # by egress port: 1 + the holder's urgency when it took the port
HOLDER_SEEN = "SafsIngress.holder_seen"  # by egress port: when the holder's last packet passed (fabric ns)
HOLDER_FINISH = "SafsIngress.holder_finish"  # by egress port: its finish estimate (fabric ns)
HOLDER_START = "SafsIngress.holder_start"  # by egress port: its latest start (fabric ns)
PORT_TX_BYTES = "SafsEgress.port_tx_bytes"  # indirect counter by egress port
QDEPTH_HIST = "SafsEgress.qdepth_hist"  # indirect counter, index = port * 8 + bucket
QDEPTH_BUCKETS = 8  # bucket b counts packets enqueued with depth in [2^b - 1, 2^(b+1) - 1)
MALFORMED = "SafsIngress.malformed"  # indirect counter, index 0 truncated, 1 bad version, 2 bad type
FORGED = "SafsIngress.forged"  # indirect counter, index = safs.core.protocol.Forged (dropped/demoted at a host port)
CONTROL_METER = "SafsIngress.control_meter"  # indirect, bytes, by host ingress port: REQUEST/DONE, RED dropped
HOST_PORT = "SafsIngress.host_port"  # ingress port facing a host -> that host's address (source guard)
# At the sender's ToR: the dependencies admitted for each of its hosts (source guard); DATA of
# any other is metered by unclaimed_meter (by host ingress port) and demoted when not green.
DEP_CLAIM = "SafsIngress.dep_claim"  # key src_addr (exact, 32), dep_id (exact, 16)
ACT_CLAIM = "SafsIngress.claim"  # params: out_slot (16): the dependency's out-link slot (0: none)
UNCLAIMED_METER = "SafsIngress.unclaimed_meter"  # indirect, bytes, by host ingress port
ACT_SET_HOST_SOURCE = "SafsIngress.set_host_source"  # params: src_addr (32)
F_INGRESS_PORT = "ingress_port"
ECN_MARKED = "SafsEgress.ecn_marked"  # indirect counter by egress port

REQUEST_DIGEST = "request_digest_t"  # digest: flow_id, src_addr, dst_addr, dep_id, remaining_bytes, latest_start

NUM_PORTS = 512  # 9-bit port space of v1model

# Packet replication engine: a stale-epoch DATA is cloned ingress-to-egress to clone session
# egress port + CLONE_SESSION_BASE (p4src/include/defines.p4), whose one replica goes out on
# that port; the controller writes one session per port of every receiver's ToR.
CLONE_SESSION_BASE = 1

# Route back toward a packet's sender for switch-generated GRANTs (same routes as ipv4_lpm,
# keyed on the source address; applied only at the receiver's ToR).
GRANT_ROUTE = "SafsIngress.grant_route"  # key src_addr (lpm, 32) -> set_grant_route(port, dst_mac)
ACT_SET_GRANT_ROUTE = "SafsIngress.set_grant_route"
F_SRC_ADDR = "src_addr"
# set_egress and set_grant_route both take (port: 9 bits, dst_mac: 48 bits): the next hop's MAC.

# Packet I/O with the controller (P4Runtime controller_packet_metadata; headers.p4): a
# PacketOut's packet_out header sends the frame out of egress_port at priority queue; whatever
# leaves through CPU_PORT comes to the controller as a PacketIn with packet_in. The start-up
# self-check (safs.control.selfcheck) sends one probe per queue to CPU_PORT itself.
CPU_PORT = 255  # CPU_PORT in defines.p4; BMv2: simple_switch_grpc ... -- --cpu-port 255
PACKET_OUT = "packet_out"  # metadata egress_port (9), queue (3), pad (4)
PACKET_IN = "packet_in"  # metadata ingress_port (9), queue (3), pad (4)
M_EGRESS_PORT = "egress_port"
M_INGRESS_PORT = "ingress_port"
M_QUEUE = "queue"
M_PAD = "pad"

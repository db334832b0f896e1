/*
 * SAFS constants, types and table sizes shared by every control.
 * Wire layout and ranges: docs/protocol.md (the one source); queue map: BRIEF "Queues".
 */
#ifndef SAFS_DEFINES_P4
#define SAFS_DEFINES_P4

typedef bit<48> mac_t;
typedef bit<32> ipv4_addr_t;
typedef bit<9>  port_t;
typedef bit<32> flow_id_t;
typedef bit<48> ns_t;          // fabric time, ns modulo 2^48
typedef bit<48> bytes48_t;     // remaining bytes
typedef bit<32> rate_kbps_t;   // granted rate, kbit/s
typedef bit<32> epoch_t;       // grant epoch, serial-number compared
typedef bit<32> lease_us_t;    // grant lease, microseconds
typedef bit<16> meter_slot_t;  // index into dep_meter / dep_bytes / dep_class
typedef bit<16> dep_id_t;      // dependency id, per sender (0 = none)
typedef bit<16> load_t;        // active dependencies of one urgency class at a receiver port
typedef bit<3>  qclass_t;      // BMv2 priority queue, 7 = highest

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_TCP   = 6;
const bit<8>  IP_PROTO_UDP   = 17;
const bit<16> SAFS_UDP_PORT  = 0x5AF5;   // 23285
const bit<16> ROCE_V2_UDP_PORT = 4791;   // IANA; InfiniBand Architecture Spec. Annex A17 (RoCEv2)
const bit<4>  SAFS_VERSION   = 2;
const bit<16> SAFS_HDR_LEN   = 36;
const bit<16> UDP_HDR_LEN    = 8;

const bit<4> SAFS_DATA    = 1;
const bit<4> SAFS_REQUEST = 2;
const bit<4> SAFS_GRANT   = 3;
const bit<4> SAFS_DONE    = 4;

// Flag bits (docs/protocol.md "Header layout").
const bit<8> FLAG_BACKGROUND = 0x01;   // dependency hinted as background class
const bit<8> FLAG_LAST       = 0x02;   // DATA: the dependency has no new data after this packet
const bit<8> FLAG_RENEW      = 0x04;   // DATA: the sender's lease is running out: send a GRANT
const bit<8> FLAG_DEMOTED    = 0x08;   // DATA: the sender's ToR demoted it (no admitted dependency,
                                       // over the port's unclaimed_meter): queue 1 at every switch
const bit<8> FLAG_RESENT     = 0x10;   // DATA: a retransmitted segment (not a straggler after LAST)
const bit<8> FLAG_SOLE       = 0x20;   // DATA/REQUEST: the sender's only dependency with data
const bit<8> FLAG_CAPPED     = 0x40;   // DATA: its held rate is its out-link share at the sender's
                                       // ToR (set there only): no push for a held rate below the grant

const qclass_t QUEUE_CONTROL     = 7;
const qclass_t QUEUE_OVER_RATE   = 1;
const qclass_t QUEUE_BEST_EFFORT = 0;
const qclass_t QUEUE_SLACK_MOST_URGENT = 6;  // slack class of late transfers (urgency 0)
const qclass_t QUEUE_SLACK_DEFAULT = 2;  // least urgent slack class (slack_class miss; urgency 4)

// port_share modes (grant_enforcer.p4): the key's load counts different dependencies per mode.
const bit<2> SHARE_ALONE   = 0;  // the most urgent class, nothing waiting: load = its dependencies
const bit<2> SHARE_TOP     = 1;  // the most urgent class, others waiting: load = its dependencies
const bit<2> SHARE_WAITING = 2;  // behind a more urgent class: load = all waiting dependencies

const bit<8> COLOR_GREEN = 0;
const bit<8> COLOR_UNMETERED = 3;

const bit<2> ECN_CE = 3;

// Indices of the malformed counter (docs/protocol.md "Malformed input").
const bit<32> MALFORMED_TRUNCATED   = 0;
const bit<32> MALFORMED_BAD_VERSION = 1;
const bit<32> MALFORMED_BAD_TYPE    = 2;
// forged counter indices (source_guard.p4; safs.core.protocol.Forged)
const bit<32> FORGED_SPOOFED_SOURCE    = 0;
const bit<32> FORGED_GRANT_FROM_HOST   = 1;
const bit<32> FORGED_OVERSIZED_CONTROL = 2;
const bit<32> FORGED_CONTROL_RATE      = 3;
const bit<32> FORGED_UNCLAIMED_DATA    = 4;  // demoted, not dropped
const bit<2>  METER_RED = 2;  // v1model meter colours: 0 green, 1 yellow, 2 red
const bit<32> MAX_REQUEST_FRAME = 128;   // bytes: a REQUEST is 78 (safs.core.protocol)
const bit<32> MAX_DONE_FRAME = 1024;     // bytes: a NACK DONE lists up to 157 6-byte offsets

const bit<32> PKT_INSTANCE_TYPE_INGRESS_CLONE = 1;

// Packet I/O with the controller (P4Runtime PacketOut / PacketIn): BMv2's CPU port, given to
// simple_switch_grpc as `-- --cpu-port 255` (safs.core.p4names.CPU_PORT).
const port_t CPU_PORT = 255;

// Table and extern sizes (safs/core/p4names.py mirrors the slot count and the load limit).
#define IPV4_LPM_SIZE     1024
#define ECMP_GROUPS       1024   // ecmp entries: distinct next-hop sets per switch
#define ECMP_MEMBERS      4096   // ecmp_selector members (one per next hop of any group)
#define RECEIVER_PORT_SIZE 512
#define SLACK_CLASS_SIZE    16
#define DEP_GRANT_SIZE    4096   // dependencies known per receiver ToR
#define DEP_SLOTS         4096   // meter / counter / dep_class slots (slot 0: the default grant)
#define MAX_LOAD           128   // largest load with a port_share entry (dependencies per class or waiting)
#define PORT_SHARE_SIZE  32768   // 64 host ports x 3 modes x MAX_LOAD loads, and spare
#define SPARE_LEVEL_SIZE  4096   // 64 host ports x up to 64 spare levels
#define LINK_SHARE_SIZE   6144   // 16 in-links (p4names.MAX_SHARE_LINKS) x 3 modes x MAX_LOAD loads
#define LINK_SPARE_SIZE   1024   // 16 in-links x up to 64 spare levels
#define OUT_SHARE_SIZE    6144   // 16 out-links (p4names.MAX_SHARE_LINKS) x 3 modes x MAX_LOAD loads
#define OUT_SPARE_SIZE    1024   // 16 out-links x up to 64 spare levels
#define TOP_BOOST_SIZE    2048   // top_boost: 16 steps per host port (top_overcommit <= 2), 128 ports
// spare levels go up to safs.core.p4names.MAX_SPARE_LEVEL (64): waiting rate = level x the entry
#define TOP_WINDOW_NS    32768   // the window over which a port's top-class bytes are counted
// A holder's finish estimate: latest start + remaining x 8 / 100 Gbit/s, as remaining / 16 +
// remaining / 64 (2.4% short): constant shifts, so the estimate is for 100 Gbit/s receiver
// ports (the controller warns for other rates; docs/protocol.md, "Grants").
#define FINISH_SHIFT_A      4
#define FINISH_SHIFT_B      6
// A dependency's weight at a contended link: w = 2^k, k = clamp(bit length of its remaining
// bytes - WEIGHT_BASE_BITS, 0, WEIGHT_MAX_SHIFT): 1 below 1 MiB, 2 below 2 MiB, .., 128 from
// 64 MiB (docs/protocol.md "Weighted shares at contended links"; the base from the sweep in
// docs/evaluation.md "Weighted link shares: shipped"; constant compares and shifts only).
#define WEIGHT_BASE_BITS   20
#define WEIGHT_MAX_SHIFT    7   // fixed: grant_enforcer.p4's chains spell out shifts 1..7
#define NUM_PORTS          512
#define QDEPTH_BUCKETS       8
#define CLONE_SESSION_BASE   1   // clone session id = egress port + base
#define TRAFFIC_CLASS_SIZE 256   // controller-installed aggregates of non-SAFS traffic
#define AGGREGATE_METERS   256   // one meter per metered aggregate (index 0 unused)

#endif

/* Header and metadata definitions. SAFS header layout: docs/protocol.md (36 bytes). */
#ifndef SAFS_HEADERS_P4
#define SAFS_HEADERS_P4

#include "include/defines.p4"

header ethernet_t {
    mac_t   dst_addr;
    mac_t   src_addr;
    bit<16> ether_type;
}

header ipv4_t {
    bit<4>      version;
    bit<4>      ihl;
    bit<6>      dscp;
    bit<2>      ecn;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

// InfiniBand Base Transport Header (12 bytes), after UDP port 4791 in RoCEv2 (IBTA Vol. 1,
// 9.2; Annex A17). Only dest_qp is read: the queue pair is the RDMA flow's identity.
header bth_t {
    bit<8>  opcode;
    bit<8>  se_m_pad_tver;
    bit<16> pkey;
    bit<8>  fecn_becn_resv;
    bit<24> dest_qp;
    bit<8>  ackreq_resv;
    bit<24> psn;
}

header safs_t {
    bit<4>      version;
    bit<4>      msg_type;
    bit<8>      flags;
    bit<8>      qclass;          // switch-filled
    bit<8>      color;           // switch-filled
    flow_id_t   flow_id;
    bytes48_t   remaining_bytes;
    ns_t        timestamp_ns;    // DATA/REQUEST: latest start; DONE: no-bubble ts; GRANT: switch time
    rate_kbps_t rate_kbps;       // GRANT: granted rate; DATA: the rate the sender holds
    epoch_t     epoch;           // GRANT: grant epoch; DATA: the epoch the sender holds
    lease_us_t  lease_us;
    bit<16>     qdepth;          // switch-filled in egress
    dep_id_t    dep_id;          // the sender's dependency id (the grant key with the source address)
}

// Packet I/O with the controller through CPU_PORT (docs/protocol.md "Start-up probe"). A
// PacketOut's metadata become packet_out before the frame; ingress sends the frame out of
// egress_port at priority queue (a probe: egress_port = CPU_PORT, so it comes back as a PacketIn
// through that queue). egress prepends packet_in to whatever leaves through CPU_PORT.
@controller_header("packet_out")
header packet_out_t {
    port_t   egress_port;
    qclass_t queue;
    bit<4>   pad;
}

@controller_header("packet_in")
header packet_in_t {
    port_t   ingress_port;   // CPU_PORT for a PacketOut looped back
    qclass_t queue;          // the priority queue the packet left through
    bit<4>   pad;
}

struct headers_t {
    packet_out_t packet_out;
    packet_in_t  packet_in;
    ethernet_t ethernet;
    ipv4_t     ipv4;
    udp_t      udp;
    bth_t      bth;
    safs_t     safs;
}

// Digest to the controller for a REQUEST of a dependency without a dep_grant entry.
struct request_digest_t {
    flow_id_t   flow_id;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
    dep_id_t    dep_id;
    bytes48_t   remaining_bytes;
    ns_t        latest_start;
}

struct metadata_t {
    bit<1>       safs_ok;          // valid SAFS header of a known version and type
    bit<1>       truncated;        // UDP to the SAFS port shorter than the header
    bit<1>       receiver_port;    // egress port faces a directly attached host
    bit<1>       has_grant;
    bit<1>       has_grant_route;
    port_t       grant_port;      // toward the sender, from grant_route
    @field_list(1)
    mac_t        grant_mac;
    ns_t         now_ns;           // switch time converted to fabric time
    bit<48>      slack_key;        // (latest_start - now) with bit 47 flipped
    meter_slot_t meter_slot;
    bit<1>       share;            // the dependency's rate is its share of the port (else fixed)
    bit<3>       urgency;          // 6 - slack class: 0 late (most urgent) .. 4 (from slack_class)
    bit<8>       dep_class;        // 1 + the urgency the dependency is counted in after this packet (0: idle)
    bit<1>       stale;            // DATA of a transfer whose LAST already passed: changes nothing
    load_t       load;             // port_share key: dependencies sharing with this one (see mode)
    bit<2>       share_mode;       // port_share key: SHARE_ALONE, SHARE_TOP or SHARE_WAITING
    bit<32>      top_bytes;        // top_boost key: the port's top-class DATA bytes in the last window
    bit<32>      spare_bytes;      // spare_level key: top_bytes, or this window's so far when more
    bit<1>       is_link;          // the ingress port does not face a host: an in-link, counted too
    load_t       link_load;        // link_share key: as load, at the in-link
    bit<2>       link_mode;        // link_share key: as share_mode, at the in-link
    bit<32>      link_top_bytes;   // link_spare_level key: as spare_bytes, at the in-link
    rate_kbps_t  rate_kbps;
    epoch_t      epoch;
    lease_us_t   lease_us;
    bit<2>       color;
    @field_list(1)
    bit<1>       make_grant;       // clone to egress becomes a GRANT to the sender
    @field_list(1)
    rate_kbps_t  grant_rate_kbps;
    @field_list(1)
    epoch_t      grant_epoch;
    @field_list(1)
    lease_us_t   grant_lease_us;
    @field_list(1)
    ns_t         grant_now_ns;
    @field_list(1)
    bit<8>       grant_flags;      // the GRANT's flags: the packet's, FLAG_SOLE set iff it waits for the holder
    bit<16>      ecn_threshold;
    bit<16>      l4_src_port;      // UDP or TCP ports, 0 for other protocols (traffic_class key)
    bit<16>      l4_dst_port;
    bit<16>      ecmp_group;       // set_ecmp_group: the route's ecmp key (0: single next hop)
    bit<24>      roce_qp;          // BTH destination QP of RoCEv2, else 0 (traffic_class key)
    ipv4_addr_t  host_src;         // host_port: the address of the host on the ingress port
    bit<1>       forged;           // source_guard dropped the packet
    bit<2>       control_color;    // control_meter colour of a REQUEST/DONE from a host port
    bit<2>       claim_color;      // unclaimed_meter colour of a DATA no dep_claim entry admits
    meter_slot_t out_slot;         // dep_claim at the sender's ToR: the dependency's out-link slot (0: none)
}

#endif

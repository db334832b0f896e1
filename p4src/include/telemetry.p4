/*
 * Egress telemetry, for every packet leaving a port:
 *   ECN: an ECN-capable packet (ECT0/ECT1), SAFS or not, enqueued with more than
 *        ecn_threshold packets in its queue is marked CE (so DCTCP-style baselines run through
 *        the same switch);
 *   counters: port_tx_bytes[port], ecn_marked[port], qdepth_hist[port * 8 + bucket]
 *        (bucket b counts depths in [2^b - 1, 2^(b+1) - 1)); registers are not readable over
 *        P4Runtime on BMv2, so telemetry is counters plus safs.qdepth stamped into SAFS packets.
 */
#ifndef SAFS_TELEMETRY_P4
#define SAFS_TELEMETRY_P4

#include "include/headers.p4"

control Telemetry(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    @name(".SafsEgress.port_tx_bytes")
    counter(NUM_PORTS, CounterType.packets_and_bytes) port_tx_bytes;
    @name(".SafsEgress.ecn_marked")
    counter(NUM_PORTS, CounterType.packets) ecn_marked;
    @name(".SafsEgress.qdepth_hist")
    counter(NUM_PORTS * QDEPTH_BUCKETS, CounterType.packets) qdepth_hist;

    @name(".SafsEgress.set_ecn_threshold")
    action set_ecn_threshold(@name("qdepth_pkts") bit<19> qdepth_pkts) {
        meta.ecn_threshold = (bit<16>) qdepth_pkts;
    }
    @name(".SafsEgress.ecn_threshold")
    table ecn_threshold {
        actions = { set_ecn_threshold; }
        default_action = set_ecn_threshold(0x7ffff);
        size = 1;
    }

    apply {
        ecn_threshold.apply();
        bit<19> depth = standard_metadata.enq_qdepth;
        if (hdr.ipv4.isValid() && hdr.ipv4.ecn != 0 && hdr.ipv4.ecn != ECN_CE
                && depth > (bit<19>) meta.ecn_threshold) {
            hdr.ipv4.ecn = ECN_CE;
            ecn_marked.count((bit<32>) standard_metadata.egress_port);
        }
        if (hdr.safs.isValid() && meta.safs_ok == 1) {
            hdr.safs.qdepth = depth > 0xffff ? 16w0xffff : (bit<16>) depth;
        }
        bit<32> bucket = 7;
        if (depth < 1) { bucket = 0; }
        else if (depth < 3) { bucket = 1; }
        else if (depth < 7) { bucket = 2; }
        else if (depth < 15) { bucket = 3; }
        else if (depth < 31) { bucket = 4; }
        else if (depth < 63) { bucket = 5; }
        else if (depth < 127) { bucket = 6; }
        qdepth_hist.count((bit<32>) standard_metadata.egress_port * QDEPTH_BUCKETS + bucket);
        port_tx_bytes.count((bit<32>) standard_metadata.egress_port);
    }
}

// A clone made by GrantEnforcer for a DATA packet with a stale epoch becomes a GRANT to the
// DATA's sender carrying the installed grant.
control GrantFromClone(inout headers_t hdr, inout metadata_t meta,
                       inout standard_metadata_t standard_metadata) {
    apply {
        if (standard_metadata.instance_type == PKT_INSTANCE_TYPE_INGRESS_CLONE && meta.make_grant == 1) {
            ipv4_addr_t sender = hdr.ipv4.src_addr;
            hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
            hdr.ipv4.dst_addr = sender;
            hdr.ethernet.dst_addr = meta.grant_mac;
            bit<16> port = hdr.udp.src_port;
            hdr.udp.src_port = hdr.udp.dst_port;
            hdr.udp.dst_port = SAFS_UDP_PORT;
            hdr.safs.msg_type = SAFS_GRANT;
            hdr.safs.rate_kbps = meta.grant_rate_kbps;
            hdr.safs.epoch = meta.grant_epoch;
            hdr.safs.lease_us = meta.grant_lease_us;
            hdr.safs.timestamp_ns = meta.grant_now_ns;
            hdr.safs.flags = meta.grant_flags;
            hdr.safs.color = COLOR_UNMETERED;
            hdr.safs.qclass = (bit<8>) QUEUE_CONTROL;
            // Drop the DATA payload: a GRANT is header-only.
            truncate((bit<32>) (14 + 20 + 8 + 36));
            hdr.ipv4.total_len = 20 + 8 + 36;
            hdr.udp.length = 8 + 36;
            hdr.udp.checksum = 0;
        }
    }
}

#endif

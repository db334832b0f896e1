/*
 * Grant enforcer, at the receiver's ToR only (egress port marked by receiver_port):
 *
 *   flow_grant(flow_id) -> set_grant(rate, epoch, lease, meter_slot)   miss -> default grant
 *   DATA    : flow_meter[slot] -> colour; not green -> queue 1 (over rate), never dropped;
 *             flow_bytes[slot] counts; epoch older than installed -> clone a GRANT to the sender
 *   REQUEST : rewritten in place into a GRANT to the sender (installed or default grant);
 *             no grant entry -> digest request_digest_t to the controller
 * Elsewhere SAFS packets are not metered (colour 3 = unmetered).
 */
#ifndef SAFS_GRANT_ENFORCER_P4
#define SAFS_GRANT_ENFORCER_P4

#include "include/headers.p4"

control GrantEnforcer(inout headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    @name(".SafsIngress.flow_meter")
    meter(FLOW_METER_SIZE, MeterType.bytes) flow_meter;
    @name(".SafsIngress.flow_bytes")
    counter(FLOW_METER_SIZE, CounterType.packets_and_bytes) flow_bytes;
    @name(".SafsIngress.flow_grant_counter")
    direct_counter(CounterType.packets_and_bytes) flow_grant_counter;

    @name(".SafsIngress.set_default_grant")
    action set_default_grant(@name("rate_kbps") rate_kbps_t rate_kbps,
                             @name("lease_us") lease_us_t lease_us,
                             @name("meter_slot") meter_slot_t meter_slot) {
        meta.rate_kbps = rate_kbps;
        meta.epoch = 0;
        meta.lease_us = lease_us;
        meta.meter_slot = meter_slot;
    }
    @name(".SafsIngress.default_grant")
    table default_grant {
        actions = { set_default_grant; }
        default_action = set_default_grant(0, 0, 0);
        size = 1;
    }

    @name(".SafsIngress.set_grant")
    action set_grant(@name("rate_kbps") rate_kbps_t rate_kbps, @name("epoch") epoch_t epoch,
                     @name("lease_us") lease_us_t lease_us, @name("meter_slot") meter_slot_t meter_slot) {
        meta.has_grant = 1;
        meta.rate_kbps = rate_kbps;
        meta.epoch = epoch;
        meta.lease_us = lease_us;
        meta.meter_slot = meter_slot;
    }
    @name(".SafsIngress.no_grant")
    action no_grant() {
        meta.has_grant = 0;
    }
    @name(".SafsIngress.flow_grant")
    table flow_grant {
        key = { hdr.safs.flow_id: exact @name("flow_id"); }
        actions = { set_grant; @defaultonly no_grant; }
        const default_action = no_grant();
        size = FLOW_GRANT_SIZE;
        counters = flow_grant_counter;
    }

    @hidden
    action stash_grant() {
        meta.grant_rate_kbps = meta.rate_kbps;
        meta.grant_epoch = meta.epoch;
        meta.grant_lease_us = meta.lease_us;
        meta.grant_now_ns = meta.now_ns;
    }

    apply {
        if (meta.safs_ok == 1 && meta.receiver_port == 1) {
            default_grant.apply();
            flow_grant.apply();
            if (hdr.safs.msg_type == SAFS_DATA) {
                flow_meter.execute_meter((bit<32>) meta.meter_slot, meta.color);
                hdr.safs.color = (bit<8>) meta.color;
                if (meta.color != 0) {
                    standard_metadata.priority = QUEUE_OVER_RATE;
                }
                flow_bytes.count((bit<32>) meta.meter_slot);
                // Serial-number compare (RFC 1982): the packet's epoch is older than installed.
                bit<32> age = meta.epoch - hdr.safs.epoch;
                if (meta.has_grant == 1 && age != 0 && age < 32w0x80000000 && meta.has_grant_route == 1) {
                    stash_grant();
                    meta.make_grant = 1;
                    clone_preserving_field_list(CloneType.I2E,
                        (bit<32>) meta.grant_port + CLONE_SESSION_BASE, 1);
                }
            } else if (hdr.safs.msg_type == SAFS_REQUEST && meta.has_grant_route == 1) {
                if (meta.has_grant == 0) {
                    digest<request_digest_t>(1, { hdr.safs.flow_id, hdr.ipv4.src_addr,
                        hdr.ipv4.dst_addr, hdr.safs.remaining_bytes, hdr.safs.timestamp_ns });
                }
                // Turn the REQUEST around into a GRANT toward the sender.
                ipv4_addr_t sender = hdr.ipv4.src_addr;
                hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
                hdr.ipv4.dst_addr = sender;
                hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
                hdr.ethernet.dst_addr = meta.grant_mac;
                standard_metadata.egress_spec = meta.grant_port;
                hdr.safs.msg_type = SAFS_GRANT;
                hdr.safs.rate_kbps = meta.rate_kbps;
                hdr.safs.epoch = meta.epoch;
                hdr.safs.lease_us = meta.lease_us;
                hdr.safs.timestamp_ns = meta.now_ns;
                hdr.safs.color = COLOR_UNMETERED;
            } else {
                hdr.safs.color = COLOR_UNMETERED;
            }
        } else if (meta.safs_ok == 1) {
            hdr.safs.color = COLOR_UNMETERED;
        }
    }
}

#endif

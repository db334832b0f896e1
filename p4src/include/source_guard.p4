/*
 * Source guard: on a port facing a host (a host_port entry: the controller writes one per
 * host port, with the host's address), drop and count what no honest host sends:
 *   - an IPv4 source other than the host's (spoofing: a forged REQUEST would reflect a GRANT
 *     at the victim, a forged DATA would use the victim's grant, keyed on its address);
 *   - a GRANT (only a receiver's ToR originates GRANTs);
 *   - a REQUEST longer than MAX_REQUEST_FRAME or a DONE longer than MAX_DONE_FRAME (data riding
 *     the control queue 7; a DONE that is a NACK lists missing offsets),
 *     or beyond the port's control_meter rate (RED: a flood of small control packets);
 * and demote (FLAG_DEMOTED: queue 1 at this and every later switch; counted, not dropped) a DATA
 * whose (source, dep_id) has no dep_claim entry (the controller writes one at the sender's ToR
 * for every dependency it admitted) beyond the port's unclaimed_meter (the default grant's rate
 * and burst: what an honest sender sends before its first GRANT). So a host that writes a small
 * latest-start time into DATA nobody granted rides no slack class through the fabric; within an
 * admitted dependency its rate is enforced at the receiver's ToR (grant_enforcer.p4).
 * Ports without an entry (fabric links) are not checked: the neighbour switch checked its hosts.
 * A DATA from a host loses FLAG_CAPPED (only its ToR sets it, grant_enforcer.p4). The dep_claim
 * entry also gives the dependency's out-link slot (meta.out_slot) for its DATA and REQUEST from
 * the host and for its GRANTs coming back from the fabric (keyed by their destination then).
 * Mirrored by controller/safs/targets/pipeline_model.py; counter indices are
 * safs.core.protocol.Forged.
 */
#ifndef SAFS_SOURCE_GUARD_P4
#define SAFS_SOURCE_GUARD_P4

#include "include/headers.p4"

control SourceGuard(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    @name(".SafsIngress.forged")
    counter(5, CounterType.packets) forged;
    @name(".SafsIngress.control_meter")
    meter(NUM_PORTS, MeterType.bytes) control_meter;
    @name(".SafsIngress.unclaimed_meter")
    meter(NUM_PORTS, MeterType.bytes) unclaimed_meter;

    @name(".SafsIngress.set_host_source")
    action set_host_source(@name("src_addr") ipv4_addr_t src_addr) {
        meta.host_src = src_addr;
    }
    @name(".SafsIngress.host_port")
    table host_port {
        key = { standard_metadata.ingress_port: exact @name("ingress_port"); }
        actions = { set_host_source; @defaultonly NoAction; }
        const default_action = NoAction();
        size = RECEIVER_PORT_SIZE;
    }

    ipv4_addr_t claim_addr;  // the host end of the packet: source from a host, destination of a GRANT
    @name(".SafsIngress.claim")
    action claim(@name("out_slot") meter_slot_t out_slot) {
        meta.out_slot = out_slot;
    }
    @name(".SafsIngress.dep_claim")
    table dep_claim {
        key = {
            claim_addr: exact @name("src_addr");
            hdr.safs.dep_id: exact @name("dep_id");
        }
        actions = { claim; @defaultonly NoAction; }
        const default_action = NoAction();
        size = DEP_GRANT_SIZE;
    }

    apply {
        meta.forged = 0;
        meta.out_slot = 0;
        claim_addr = hdr.ipv4.src_addr;
        bool look_up = false;  // dep_claim is applied once, after the checks
        bool from_host = false;
        if (hdr.ipv4.isValid() && host_port.apply().hit) {
            from_host = true;
            if (hdr.ipv4.src_addr != meta.host_src) {
                forged.count(FORGED_SPOOFED_SOURCE);
                meta.forged = 1;
            } else if (meta.safs_ok == 1 && hdr.safs.msg_type == SAFS_GRANT) {
                forged.count(FORGED_GRANT_FROM_HOST);
                meta.forged = 1;
            } else if (meta.safs_ok == 1 && (hdr.safs.msg_type == SAFS_REQUEST || hdr.safs.msg_type == SAFS_DONE)) {
                if ((hdr.safs.msg_type == SAFS_REQUEST && standard_metadata.packet_length > MAX_REQUEST_FRAME)
                        || standard_metadata.packet_length > MAX_DONE_FRAME) {
                    forged.count(FORGED_OVERSIZED_CONTROL);
                    meta.forged = 1;
                } else {
                    control_meter.execute_meter((bit<32>) standard_metadata.ingress_port, meta.control_color);
                    if (meta.control_color == METER_RED) {
                        forged.count(FORGED_CONTROL_RATE);
                        meta.forged = 1;
                    }
                }
            }
            if (meta.forged == 1) {
                mark_to_drop(standard_metadata);
            } else if (meta.safs_ok == 1 && (hdr.safs.msg_type == SAFS_DATA || hdr.safs.msg_type == SAFS_REQUEST)) {
                look_up = true;
                hdr.safs.flags = hdr.safs.flags & ~FLAG_CAPPED;
            }
        } else if (hdr.ipv4.isValid() && meta.safs_ok == 1 && hdr.safs.msg_type == SAFS_GRANT) {
            claim_addr = hdr.ipv4.dst_addr;
            look_up = true;
        }
        if (look_up) {
            bool claimed = dep_claim.apply().hit;
            if (from_host && !claimed && hdr.safs.msg_type == SAFS_DATA) {
                unclaimed_meter.execute_meter((bit<32>) standard_metadata.ingress_port, meta.claim_color);
                if (meta.claim_color != 0) {  // not green, as at the receiver's ToR
                    hdr.safs.flags = hdr.safs.flags | FLAG_DEMOTED;
                    forged.count(FORGED_UNCLAIMED_DATA);
                }
            }
        }
    }
}

#endif

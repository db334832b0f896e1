/*
 * Forwarding: IPv4 longest-prefix match on the destination, and the receiver_port table that
 * marks egress ports facing a directly attached host (only there does the switch meter, answer
 * REQUESTs and send digests: BRIEF "Where the switch acts").
 *
 * A route with several equal-cost next hops sets an ECMP group; the ecmp table's action selector
 * picks one member (set_egress) by crc16 of the 5-tuple, so every packet of a flow takes one path
 * and SAFS dependencies, each with its own UDP source port, spread over the paths. The controller
 * predicts the choice exactly (controller/safs/core/ecmp.py; PTF EcmpPredictionTest checks it).
 */
#ifndef SAFS_FORWARDING_P4
#define SAFS_FORWARDING_P4

#include "include/headers.p4"

control Forwarding(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    @name(".SafsIngress.ipv4_lpm_counter")
    direct_counter(CounterType.packets_and_bytes) ipv4_lpm_counter;
    @name(".SafsIngress.receiver_port_counter")
    direct_counter(CounterType.packets_and_bytes) receiver_port_counter;
    @name(".SafsIngress.ecmp_counter")
    direct_counter(CounterType.packets_and_bytes) ecmp_counter;
    @name(".SafsIngress.grant_route_counter")
    direct_counter(CounterType.packets_and_bytes) grant_route_counter;

    @name(".SafsIngress.set_egress")
    action set_egress(@name("port") port_t port, @name("dst_mac") mac_t dst_mac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    @name(".SafsIngress.drop")
    action drop() {
        mark_to_drop(standard_metadata);
    }
    // Next hop chosen by ecmp; dropped if the group has no ecmp entry (mark_to_drop sets the
    // drop port, which set_egress overwrites).
    @name(".SafsIngress.set_ecmp_group")
    action set_ecmp_group(@name("group") bit<16> group) {
        mark_to_drop(standard_metadata);
        meta.ecmp_group = group;
    }
    @name(".SafsIngress.ipv4_lpm")
    table ipv4_lpm {
        key = { hdr.ipv4.dst_addr: lpm @name("dst_addr"); }
        actions = { set_egress; set_ecmp_group; drop; }
        default_action = drop();
        size = IPV4_LPM_SIZE;
        counters = ipv4_lpm_counter;
    }

    // Field order is the hash input order (safs.core.ecmp.flow_hash): changing it moves flows.
    @name(".SafsIngress.ecmp_selector")
    action_selector(HashAlgorithm.crc16, ECMP_MEMBERS, 16) ecmp_selector;
    @name(".SafsIngress.ecmp")
    table ecmp {
        key = {
            meta.ecmp_group: exact @name("ecmp_group");
            hdr.ipv4.src_addr: selector;
            hdr.ipv4.dst_addr: selector;
            hdr.ipv4.protocol: selector;
            meta.l4_src_port: selector;
            meta.l4_dst_port: selector;
        }
        actions = { set_egress; @defaultonly NoAction; }
        const default_action = NoAction();  // a miss: set_ecmp_group's drop stands
        size = ECMP_GROUPS;
        implementation = ecmp_selector;
        counters = ecmp_counter;
    }

    @name(".SafsIngress.mark_receiver_port")
    action mark_receiver_port() {
        meta.receiver_port = 1;
    }
    @name(".SafsIngress.not_receiver_port")
    action not_receiver_port() {
        meta.receiver_port = 0;
    }
    @name(".SafsIngress.receiver_port")
    table receiver_port {
        key = { standard_metadata.egress_spec: exact @name("egress_port"); }
        actions = { mark_receiver_port; @defaultonly not_receiver_port; }
        const default_action = not_receiver_port();
        size = RECEIVER_PORT_SIZE;
        counters = receiver_port_counter;
    }

    // Route back to a packet's sender, for GRANTs the switch generates (a table can be
    // applied only once per packet, so this is the same routes keyed on the source).
    @name(".SafsIngress.set_grant_route")
    action set_grant_route(@name("port") port_t port, @name("dst_mac") mac_t dst_mac) {
        meta.grant_port = port;
        meta.grant_mac = dst_mac;
        meta.has_grant_route = 1;
    }
    @name(".SafsIngress.no_grant_route")
    action no_grant_route() {
        meta.has_grant_route = 0;
    }
    @name(".SafsIngress.grant_route")
    table grant_route {
        key = { hdr.ipv4.src_addr: lpm @name("src_addr"); }
        actions = { set_grant_route; @defaultonly no_grant_route; }
        const default_action = no_grant_route();
        size = IPV4_LPM_SIZE;
        counters = grant_route_counter;
    }

    apply {
        if (hdr.ipv4.isValid()) {
            meta.ecmp_group = 0;
            ipv4_lpm.apply();
            if (meta.ecmp_group != 0) {
                ecmp.apply();
            }
            receiver_port.apply();
            if (meta.receiver_port == 1) {
                grant_route.apply();
            }
        }
    }
}

#endif

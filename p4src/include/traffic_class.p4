/*
 * Traffic classes of non-SAFS traffic (docs/dataplane.md, "Traffic classes"): controller-
 * installed aggregates, matched on the 5-tuple and, for RoCEv2, the BTH destination QP, each
 * mapped to one queue and optionally one meter for the whole aggregate.
 *
 *   key: src_addr, dst_addr, protocol, dst QP: ternary; src_port, dst_port: range; priority
 *        decides overlaps (higher wins, P4Runtime); miss: queue 0, unmetered.
 *   set_traffic_class(qclass)                       every packet of the aggregate in qclass
 *   set_metered_traffic_class(qclass, meter_index)  and aggregate_meter[meter_index]: a RED
 *        packet is ECN-marked CE when ECN-capable (DCQCN's and DCTCP's signal), else dropped
 *        (a policer). It is never moved to another queue: reordering part of a RoCE flow sets
 *        off go-back-N retransmission on most NICs.
 *
 * A class with a slack of its own is the controller's choice of qclass per aggregate (there
 * is no per-packet latest start in non-SAFS traffic).
 */
#ifndef SAFS_TRAFFIC_CLASS_P4
#define SAFS_TRAFFIC_CLASS_P4

#include "include/headers.p4"

control TrafficClass(inout headers_t hdr, inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {
    @name(".SafsIngress.traffic_class_counter")
    direct_counter(CounterType.packets_and_bytes) traffic_class_counter;
    @name(".SafsIngress.aggregate_meter")
    meter(AGGREGATE_METERS, MeterType.bytes) aggregate_meter;

    bit<1> metered = 0;
    bit<32> meter_index = 0;

    @name(".SafsIngress.set_traffic_class")
    action set_traffic_class(@name("qclass") qclass_t qclass) {
        standard_metadata.priority = qclass;
    }
    @name(".SafsIngress.set_metered_traffic_class")
    action set_metered_traffic_class(@name("qclass") qclass_t qclass,
                                     @name("meter_index") bit<16> index) {
        standard_metadata.priority = qclass;
        metered = 1;
        meter_index = (bit<32>) index;
    }
    @name(".SafsIngress.traffic_class")
    table traffic_class {
        key = {
            hdr.ipv4.src_addr: ternary @name("src_addr");
            hdr.ipv4.dst_addr: ternary @name("dst_addr");
            hdr.ipv4.protocol: ternary @name("protocol");
            meta.l4_src_port: range @name("l4_src_port");
            meta.l4_dst_port: range @name("l4_dst_port");
            meta.roce_qp: ternary @name("roce_qp");
        }
        actions = { set_traffic_class; set_metered_traffic_class; }
        const default_action = set_traffic_class(QUEUE_BEST_EFFORT);
        size = TRAFFIC_CLASS_SIZE;
        counters = traffic_class_counter;
    }

    apply {
        if (hdr.ipv4.isValid()) {
            traffic_class.apply();
        } else {
            standard_metadata.priority = QUEUE_BEST_EFFORT;
        }
        if (metered == 1) {
            bit<2> color;
            aggregate_meter.execute_meter(meter_index, color);
            if (color == V1MODEL_METER_COLOR_RED) {
                if (hdr.ipv4.ecn != 0) {
                    hdr.ipv4.ecn = ECN_CE;
                } else {
                    mark_to_drop(standard_metadata);
                }
            }
        }
    }
}

#endif

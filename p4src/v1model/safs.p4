/*
 * SAFS dataplane for BMv2 (v1model). Thin top level: includes and instantiates.
 * Compile from the repository root:
 *   p4c-bm2-ss --arch v1model -I p4src --p4runtime-files p4src/build/safs.p4info.txtpb \
 *       -o p4src/build/safs.json p4src/v1model/safs.p4
 * Run BMv2 with 8 priority queues and the CPU port:
 *   simple_switch_grpc ... -- --priority-queues 8 --cpu-port 255
 */
#include <core.p4>
#include <v1model.p4>

#include "include/defines.p4"
#include "include/headers.p4"
#include "include/parser.p4"
#include "include/forwarding.p4"
#include "include/slack_classifier.p4"
#include "include/grant_enforcer.p4"
#include "include/telemetry.p4"
#include "include/source_guard.p4"

// Ingress: a PacketOut goes out of the port and queue it names, nothing else applied; every
// other packet: validate SAFS, drop what a host port must not send, forward, classify by slack,
// enforce grants (receiver ToR only).
control SafsIngress(inout headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    @name(".SafsIngress.malformed")
    counter(3, CounterType.packets) malformed;

    SourceGuard() source_guard;
    Forwarding() forwarding;
    SlackClassifier() slack_classifier;
    GrantEnforcer() grant_enforcer;

    apply {
        if (hdr.packet_out.isValid()) {
            standard_metadata.egress_spec = hdr.packet_out.egress_port;
            standard_metadata.priority = hdr.packet_out.queue;
            hdr.packet_out.setInvalid();
            return;
        }
        meta.safs_ok = 0;
        if (hdr.safs.isValid()) {
            if (hdr.safs.version != SAFS_VERSION) {
                malformed.count(MALFORMED_BAD_VERSION);
            } else if (hdr.safs.msg_type < SAFS_DATA || hdr.safs.msg_type > SAFS_DONE) {
                malformed.count(MALFORMED_BAD_TYPE);
            } else {
                meta.safs_ok = 1;
                hdr.udp.checksum = 0;  // the switch rewrites SAFS fields (RFC 768: 0 = no checksum)
            }
        } else if (meta.truncated == 1 || standard_metadata.parser_error != error.NoError) {
            malformed.count(MALFORMED_TRUNCATED);
        }
        source_guard.apply(hdr, meta, standard_metadata);
        if (meta.forged == 0) {
            forwarding.apply(hdr, meta, standard_metadata);
            slack_classifier.apply(hdr, meta, standard_metadata);
            grant_enforcer.apply(hdr, meta, standard_metadata);
        }
    }
}

control SafsEgress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    Telemetry() telemetry;
    GrantFromClone() grant_from_clone;
    apply {
        if (standard_metadata.egress_port == CPU_PORT) {  // to the controller: a PacketIn
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = standard_metadata.ingress_port;
            hdr.packet_in.queue = standard_metadata.priority;  // BMv2 keeps the queue it used
            hdr.packet_in.pad = 0;
            return;
        }
        grant_from_clone.apply(hdr, meta, standard_metadata);
        telemetry.apply(hdr, meta, standard_metadata);
    }
}

V1Switch(SafsParser(), SafsVerifyChecksum(), SafsIngress(), SafsEgress(),
         SafsComputeChecksum(), SafsDeparser()) main;

/*
 * Slack classifier: every SAFS DATA packet gets a strict-priority queue from its slack, and
 * DATA and REQUEST an urgency (6 - class: 0 late .. 4) for the receiver's ToR (grant_enforcer.p4).
 *
 *   now       = ingress_global_timestamp (BMv2: us since switch start) * 1000 + clock offset
 *   slack     = latest_start_ns - now            (mod 2^48, one subtraction)
 *   slack_key = slack ^ 2^47                     (late = negative slack sorts lowest)
 *   slack_class: range(slack_key) -> set_slack_class(qclass 6..2), miss -> 2
 *
 * DATA with FLAG_DEMOTED (set by the sender's ToR, source_guard.p4) goes to queue 1 instead,
 * counted as the least urgent. REQUEST, GRANT and DONE go to the control queue 7; everything else (non-SAFS, malformed)
 * to its traffic class (traffic_class.p4; queue 0 when no aggregate matches). The chosen class
 * is written into safs.qclass so tests and receivers can see it.
 */
#ifndef SAFS_SLACK_CLASSIFIER_P4
#define SAFS_SLACK_CLASSIFIER_P4

#include "include/headers.p4"
#include "include/traffic_class.p4"

control SlackClassifier(inout headers_t hdr, inout metadata_t meta,
                        inout standard_metadata_t standard_metadata) {
    @name(".SafsIngress.slack_class_counter")
    direct_counter(CounterType.packets_and_bytes) slack_class_counter;
    TrafficClass() traffic_classifier;

    @name(".SafsIngress.set_clock_offset")
    action set_clock_offset(@name("offset_ns") ns_t offset_ns) {
        meta.now_ns = standard_metadata.ingress_global_timestamp * 1000 + offset_ns;
    }
    // Single-entry settings table: the offset is the default action's parameter.
    @name(".SafsIngress.clock_offset")
    table clock_offset {
        actions = { set_clock_offset; }
        default_action = set_clock_offset(0);
        size = 1;
    }

    @name(".SafsIngress.set_slack_class")
    action set_slack_class(@name("qclass") qclass_t qclass) {
        standard_metadata.priority = qclass;
        meta.urgency = QUEUE_SLACK_MOST_URGENT - qclass;
    }
    @name(".SafsIngress.slack_class")
    table slack_class {
        key = { meta.slack_key: range @name("slack_key"); }
        actions = { set_slack_class; }
        default_action = set_slack_class(QUEUE_SLACK_DEFAULT);
        size = SLACK_CLASS_SIZE;
        counters = slack_class_counter;
    }

    apply {
        clock_offset.apply();
        if (meta.safs_ok == 1) {
            if (hdr.safs.msg_type == SAFS_DATA || hdr.safs.msg_type == SAFS_REQUEST) {
                meta.slack_key = (hdr.safs.timestamp_ns - meta.now_ns) ^ 48w0x800000000000;
                slack_class.apply();
                if ((hdr.safs.flags & FLAG_DEMOTED) != 0 && hdr.safs.msg_type == SAFS_DATA) {
                    standard_metadata.priority = QUEUE_OVER_RATE;  // demoted at the sender's ToR
                    meta.urgency = QUEUE_SLACK_MOST_URGENT - QUEUE_SLACK_DEFAULT;  // the least urgent
                }
            }
            if (hdr.safs.msg_type != SAFS_DATA) {
                standard_metadata.priority = QUEUE_CONTROL;
            }
            hdr.safs.qclass = (bit<8>) standard_metadata.priority;
        } else {
            traffic_classifier.apply(hdr, meta, standard_metadata);
        }
    }
}

#endif

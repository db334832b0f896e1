/*
 * Grant enforcer, at the receiver's ToR only (egress port marked by receiver_port). It grants
 * every transfer of a dependency it knows without the controller (docs/protocol.md "Grants"):
 *
 *   dep_grant(src_addr, dep_id) -> set_share_grant(slot)            rate = the port's share
 *                               -> set_fixed_grant(rate, epoch, lease, slot)  (per-transfer mode)
 *                          miss -> default grant (slot 0), REQUEST digested to the controller
 *
 *   share grants, strict priority by urgency (the packet's slack class: 0 late .. 4 relaxed;
 *   background dependencies 4), equal shares within the most urgent class:
 *     dep_class[slot]     = 1 + the urgency the dependency is counted in (0: idle)
 *     class_load_u[port]  = active dependencies of urgency u at the port (u = 0..4)
 *     port_gen[port]      grows whenever a count changes (the grants' epoch)
 *     dep_ended[slot]     the flow id of the dependency's last transfer whose LAST passed
 *       DATA/REQUEST, not LAST: the dependency moves to the packet's urgency
 *       DATA with LAST:         it goes idle
 *       DATA of the flow in dep_ended, neither LAST nor RESENT (a straggler its LAST overtook):
 *       stale, nothing changes and no GRANT is pushed (it would count an ended transfer as
 *       active, in the most urgent class since it is late by now, until the next LAST);
 *       retransmissions count as before and end with a LAST of their own
 *     then, with top = the most urgent non-empty class:
 *       urgency == top, nothing less urgent  -> port_share(port, n_top, SHARE_ALONE)
 *       urgency == top, others waiting       -> port_share(port, n_top, SHARE_TOP)
 *       urgency  > top (waiting)             -> port_share(port, n_waiting, SHARE_WAITING)
 *     (the controller's entries: usable / n, (usable - reserve) / n and reserve / n; waiting
 *     dependencies keep a trickle so their packets keep passing and their urgency is seen;
 *     no entry, i.e. a load above MAX_LOAD: the default grant)
 *   work conservation: waiting dependencies share what the top class left unused in the last
 *   TOP_WINDOW_NS, in units of the reserve:
 *     port_top_bytes[port]  top-class DATA bytes of the last whole window (port_win_start,
 *                           port_win_bytes: the current window's start and bytes)
 *     spare bytes = max(port_top_bytes, port_win_bytes): the current window's count when it
 *                 is already more, so a top class that starts sending after a silent window
 *                 takes the port back at once (else waiting shares granted meanwhile add up to
 *                 about twice the port for up to a window)
 *     spare_level(port, spare bytes) -> level = floor((usable - spare bytes) / reserve) (default 1)
 *     waiting rate = port_share(port, n_waiting, SHARE_WAITING) x level
 *   (capacity granted to top-class senders busy elsewhere does not idle; the top class keeps
 *   its queue priority, so a top sender that speeds up takes the port back at once and the
 *   waiting rate follows with its next packets)
 *   top-class overcommit (off unless the controller installs top_boost entries): a top-class
 *   share of a load of 2 or more is multiplied by top_boost(port, port_top_bytes) / 256, the
 *   controller's min(top_overcommit, usable / port_top_bytes), so when the class's senders are busy
 *   elsewhere and leave the port partly idle, the others may send faster (policy
 *   safs-overcommit; it can allocate more than the port's usable rate for up to a window)
 *   in-links: a packet arriving on a port that does not face a host (host_port miss) counts its
 *   dependency there too, by ingress port, in the same way (dep_link_class, dep_link_port,
 *   link_load_u, link_win_start, link_win_bytes, link_top_bytes; a dependency that arrives on
 *   another link, or from a host, leaves the one it was counted at); where link_share has
 *   entries for the ingress port (a contended fabric link into this ToR, from the controller),
 *   rate = min(port share, link_share(in port, load, mode) x link_spare_level when waiting)
 *   the port holder (holder table: idle_ns, release_bytes, preempt_ns; idle 0: off): packets
 *   with FLAG_SOLE (the sender's only dependency with data) not behind a contended in-link
 *   are counted in dep_sole / sole_load_u too; when top has n_sole >= 2 they count as one
 *   (load = n_top - n_sole + 1, waiting = rest + n_sole - 1) and one of them, the holder
 *   (holder_slot, _class, _seen, _finish, _start by port), gets that share; the others wait, without
 *   the spare level, and their GRANTs say FLAG_SOLE (pick_port_share has the rules)
 *
 *   DATA    : dep_meter[slot] -> colour; not green -> queue 1 (over rate), never dropped;
 *             dep_bytes[slot] counts; unless LAST is set: the rate the packet carries is off
 *             the grant's (lower by more than 1/32 of the grant's, unless FLAG_CAPPED says it
 *             is held down by its out-link, or higher by more than 1/256), its epoch is 0 or
 *             RENEW is set -> clone a GRANT to the sender
 *   REQUEST : rewritten in place into a GRANT to the sender (share, fixed or default grant)
 * Elsewhere SAFS packets are not metered (colour 3 = unmetered).
 *
 * Out-links, at the sender's ToR (a DATA or REQUEST from a host whose dep_claim entry gives an
 * out slot, leaving on a fabric port): the dependency is counted at its egress port as at an
 * in-link (dep_out_class, dep_out_port by out slot; out_load_u, out_win_start, out_win_bytes,
 * out_top_bytes by port); where out_share has entries for the port (a contended fabric link
 * out of this ToR, from the controller) its cap = out_share(port, load, mode) x
 * out_spare_level when waiting, kept in dep_out_rate (0: no cap). A DATA holding more than the
 * cap (by over 1/256) leaves with held rate 0, so the receiver's ToR pushes a GRANT; one
 * holding the cap (within 1/32) leaves with FLAG_CAPPED, so it does not. A GRANT from the
 * fabric to a host with a claimed out slot gets rate = min(rate, dep_out_rate).
 *
 * Weighted link shares, at in- and out-links only: a dependency's weight w = 2^k by its
 * remaining bytes (WEIGHT_FROM_REMAINING); per link and class the weight sum W (link_weight_u,
 * out_weight_u; each dependency's weight in dep_link_weight / dep_out_weight); a top-class
 * dependency's link_share / out_share key is ceil(W / w) = (W + w - 1) >> k (at most MAX_LOAD)
 * instead of the class's count (WEIGHTED_LINK_LOAD).
 *
 * Every register array but link_load_u, link_weight_u, out_load_u and out_weight_u is
 * read-modified-written at most once per packet (one RegisterAction each on TNA; those twice,
 * at the link a dependency leaves and at the one it joins, which a TNA port would split); no
 * division, no variable shift.
 */
#ifndef SAFS_GRANT_ENFORCER_P4
#define SAFS_GRANT_ENFORCER_P4

#include "include/headers.p4"

control GrantEnforcer(inout headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    @name(".SafsIngress.dep_meter")
    meter(DEP_SLOTS, MeterType.bytes) dep_meter;
    @name(".SafsIngress.dep_bytes")
    counter(DEP_SLOTS, CounterType.packets_and_bytes) dep_bytes;
    @name(".SafsIngress.dep_grant_counter")
    direct_counter(CounterType.packets_and_bytes) dep_grant_counter;
    @name(".SafsIngress.port_share_counter")
    direct_counter(CounterType.packets_and_bytes) port_share_counter;
    // Soft state: zero after a switch restart and rebuilt by the next packet of each active
    // dependency (registers are not readable over P4Runtime on BMv2).
    @name(".SafsIngress.dep_class")
    register<bit<8>>(DEP_SLOTS) dep_class;
    @name(".SafsIngress.class_load_0")
    register<load_t>(NUM_PORTS) class_load_0;
    @name(".SafsIngress.class_load_1")
    register<load_t>(NUM_PORTS) class_load_1;
    @name(".SafsIngress.class_load_2")
    register<load_t>(NUM_PORTS) class_load_2;
    @name(".SafsIngress.class_load_3")
    register<load_t>(NUM_PORTS) class_load_3;
    @name(".SafsIngress.class_load_4")
    register<load_t>(NUM_PORTS) class_load_4;
    @name(".SafsIngress.port_gen")
    register<epoch_t>(NUM_PORTS) port_gen;
    @name(".SafsIngress.dep_ended")
    register<flow_id_t>(DEP_SLOTS) dep_ended;
    @name(".SafsIngress.port_win_start")
    register<ns_t>(NUM_PORTS) port_win_start;
    @name(".SafsIngress.port_win_bytes")
    register<bit<32>>(NUM_PORTS) port_win_bytes;
    @name(".SafsIngress.port_top_bytes")
    register<bit<32>>(NUM_PORTS) port_top_bytes;
    @name(".SafsIngress.dep_link_class")
    register<bit<8>>(DEP_SLOTS) dep_link_class;
    @name(".SafsIngress.dep_link_port")
    register<bit<16>>(DEP_SLOTS) dep_link_port;
    @name(".SafsIngress.link_load_0")
    register<load_t>(NUM_PORTS) link_load_0;
    @name(".SafsIngress.link_load_1")
    register<load_t>(NUM_PORTS) link_load_1;
    @name(".SafsIngress.link_load_2")
    register<load_t>(NUM_PORTS) link_load_2;
    @name(".SafsIngress.link_load_3")
    register<load_t>(NUM_PORTS) link_load_3;
    @name(".SafsIngress.link_load_4")
    register<load_t>(NUM_PORTS) link_load_4;
    @name(".SafsIngress.link_win_start")
    register<ns_t>(NUM_PORTS) link_win_start;
    @name(".SafsIngress.link_win_bytes")
    register<bit<32>>(NUM_PORTS) link_win_bytes;
    @name(".SafsIngress.link_top_bytes")
    register<bit<32>>(NUM_PORTS) link_top_bytes;
    @name(".SafsIngress.dep_link_weight")
    register<bit<8>>(DEP_SLOTS) dep_link_weight;
    @name(".SafsIngress.link_weight_0")
    register<bit<32>>(NUM_PORTS) link_weight_0;
    @name(".SafsIngress.link_weight_1")
    register<bit<32>>(NUM_PORTS) link_weight_1;
    @name(".SafsIngress.link_weight_2")
    register<bit<32>>(NUM_PORTS) link_weight_2;
    @name(".SafsIngress.link_weight_3")
    register<bit<32>>(NUM_PORTS) link_weight_3;
    @name(".SafsIngress.link_weight_4")
    register<bit<32>>(NUM_PORTS) link_weight_4;
    @name(".SafsIngress.dep_sole")
    register<bit<8>>(DEP_SLOTS) dep_sole;
    @name(".SafsIngress.sole_load_0")
    register<load_t>(NUM_PORTS) sole_load_0;
    @name(".SafsIngress.sole_load_1")
    register<load_t>(NUM_PORTS) sole_load_1;
    @name(".SafsIngress.sole_load_2")
    register<load_t>(NUM_PORTS) sole_load_2;
    @name(".SafsIngress.sole_load_3")
    register<load_t>(NUM_PORTS) sole_load_3;
    @name(".SafsIngress.sole_load_4")
    register<load_t>(NUM_PORTS) sole_load_4;
    @name(".SafsIngress.holder_slot")
    register<meter_slot_t>(NUM_PORTS) holder_slot;
    @name(".SafsIngress.holder_class")
    register<bit<8>>(NUM_PORTS) holder_class;
    @name(".SafsIngress.holder_seen")
    register<ns_t>(NUM_PORTS) holder_seen;
    @name(".SafsIngress.holder_finish")
    register<ns_t>(NUM_PORTS) holder_finish;
    @name(".SafsIngress.holder_start")
    register<ns_t>(NUM_PORTS) holder_start;
    @name(".SafsIngress.dep_out_class")
    register<bit<8>>(DEP_SLOTS) dep_out_class;
    @name(".SafsIngress.dep_out_port")
    register<bit<16>>(DEP_SLOTS) dep_out_port;
    @name(".SafsIngress.dep_out_rate")
    register<rate_kbps_t>(DEP_SLOTS) dep_out_rate;
    @name(".SafsIngress.out_load_0")
    register<load_t>(NUM_PORTS) out_load_0;
    @name(".SafsIngress.out_load_1")
    register<load_t>(NUM_PORTS) out_load_1;
    @name(".SafsIngress.out_load_2")
    register<load_t>(NUM_PORTS) out_load_2;
    @name(".SafsIngress.out_load_3")
    register<load_t>(NUM_PORTS) out_load_3;
    @name(".SafsIngress.out_load_4")
    register<load_t>(NUM_PORTS) out_load_4;
    @name(".SafsIngress.out_win_start")
    register<ns_t>(NUM_PORTS) out_win_start;
    @name(".SafsIngress.out_win_bytes")
    register<bit<32>>(NUM_PORTS) out_win_bytes;
    @name(".SafsIngress.out_top_bytes")
    register<bit<32>>(NUM_PORTS) out_top_bytes;
    @name(".SafsIngress.dep_out_weight")
    register<bit<8>>(DEP_SLOTS) dep_out_weight;
    @name(".SafsIngress.out_weight_0")
    register<bit<32>>(NUM_PORTS) out_weight_0;
    @name(".SafsIngress.out_weight_1")
    register<bit<32>>(NUM_PORTS) out_weight_1;
    @name(".SafsIngress.out_weight_2")
    register<bit<32>>(NUM_PORTS) out_weight_2;
    @name(".SafsIngress.out_weight_3")
    register<bit<32>>(NUM_PORTS) out_weight_3;
    @name(".SafsIngress.out_weight_4")
    register<bit<32>>(NUM_PORTS) out_weight_4;

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

    lease_us_t share_lease_us;
    @name(".SafsIngress.set_share_lease")
    action set_share_lease(@name("lease_us") lease_us_t lease_us) {
        share_lease_us = lease_us;
    }
    @name(".SafsIngress.share_lease")
    table share_lease {
        actions = { set_share_lease; }
        default_action = set_share_lease(0);
        size = 1;
    }

    // The port holder's settings (SchedulerConfig.holder_*); idle 0: no holder.
    bit<32> hold_idle_ns;
    bit<32> hold_release_bytes;
    bit<32> hold_preempt_ns;
    @name(".SafsIngress.set_holder")
    action set_holder(@name("idle_ns") bit<32> idle_ns, @name("release_bytes") bit<32> release_bytes,
                      @name("preempt_ns") bit<32> preempt_ns) {
        hold_idle_ns = idle_ns;
        hold_release_bytes = release_bytes;
        hold_preempt_ns = preempt_ns;
    }
    @name(".SafsIngress.holder")
    table holder {
        actions = { set_holder; }
        default_action = set_holder(0, 0, 0);
        size = 1;
    }

    @name(".SafsIngress.set_share_grant")
    action set_share_grant(@name("meter_slot") meter_slot_t meter_slot) {
        meta.has_grant = 1;
        meta.share = 1;
        meta.meter_slot = meter_slot;
    }
    @name(".SafsIngress.set_fixed_grant")
    action set_fixed_grant(@name("rate_kbps") rate_kbps_t rate_kbps, @name("epoch") epoch_t epoch,
                           @name("lease_us") lease_us_t lease_us, @name("meter_slot") meter_slot_t meter_slot) {
        meta.has_grant = 1;
        meta.share = 0;
        meta.rate_kbps = rate_kbps;
        meta.epoch = epoch;
        meta.lease_us = lease_us;
        meta.meter_slot = meter_slot;
    }
    @name(".SafsIngress.no_grant")
    action no_grant() {
        meta.has_grant = 0;
    }
    @name(".SafsIngress.dep_grant")
    table dep_grant {
        key = {
            hdr.ipv4.src_addr: exact @name("src_addr");
            hdr.safs.dep_id: exact @name("dep_id");
        }
        actions = { set_share_grant; set_fixed_grant; @defaultonly no_grant; }
        const default_action = no_grant();
        size = DEP_GRANT_SIZE;
        counters = dep_grant_counter;
    }

    // A dependency's share of its port at a load and mode, from the controller.
    bit<1> has_share;
    @name(".SafsIngress.set_share")
    action set_share(@name("rate_kbps") rate_kbps_t rate_kbps) {
        meta.rate_kbps = rate_kbps;
        meta.lease_us = share_lease_us;
        has_share = 1;
    }
    @name(".SafsIngress.no_share")
    action no_share() {
        has_share = 0;
    }
    @name(".SafsIngress.port_share")
    table port_share {
        key = {
            standard_metadata.egress_spec: exact @name("egress_port");
            meta.load: exact @name("load");
            meta.share_mode: exact @name("mode");
        }
        actions = { set_share; @defaultonly no_share; }
        const default_action = no_share();
        size = PORT_SHARE_SIZE;
        counters = port_share_counter;
    }

    // How many reserves waiting dependencies share: what the top class left of the usable rate.
    bit<8> spare_level;
    @name(".SafsIngress.set_spare_level")
    action set_spare_level(@name("level") bit<8> level) {
        spare_level = level;
    }
    @name(".SafsIngress.no_spare")
    action no_spare() {
        spare_level = 1;  // the reserve: the port was busy (or its ranges are not installed)
    }
    @name(".SafsIngress.spare_level")
    table spare_level_table {
        key = {
            standard_metadata.egress_spec: exact @name("egress_port");
            meta.spare_bytes: range @name("top_bytes");
        }
        actions = { set_spare_level; @defaultonly no_spare; }
        const default_action = no_spare();
        size = SPARE_LEVEL_SIZE;
    }

    // Top-class overcommit (SchedulerConfig.top_overcommit): by the port's top-class DATA bytes
    // of the last window, the factor, in 1/256, that a top-class share of a load of 2 or more is
    // multiplied by (no entry: 256, none; the controller installs entries only when enabled).
    bit<16> top_boost;
    @name(".SafsIngress.set_top_boost")
    action set_top_boost(@name("boost") bit<16> boost) {
        top_boost = boost;
    }
    @name(".SafsIngress.no_top_boost")
    action no_top_boost() {
        top_boost = 256;
    }
    @name(".SafsIngress.top_boost")
    table top_boost_table {
        key = {
            standard_metadata.egress_spec: exact @name("egress_port");
            meta.top_bytes: range @name("top_bytes");
        }
        actions = { set_top_boost; @defaultonly no_top_boost; }
        const default_action = no_top_boost();
        size = TOP_BOOST_SIZE;
    }

    // The same for the contended in-links, by ingress port.
    bit<1> has_link_share;
    rate_kbps_t link_rate_kbps;
    @name(".SafsIngress.set_link_share")
    action set_link_share(@name("rate_kbps") rate_kbps_t rate_kbps) {
        link_rate_kbps = rate_kbps;
        has_link_share = 1;
    }
    @name(".SafsIngress.no_link_share")
    action no_link_share() {
        has_link_share = 0;
    }
    @name(".SafsIngress.link_share")
    table link_share {
        key = {
            standard_metadata.ingress_port: exact @name("ingress_port");
            meta.link_load: exact @name("load");
            meta.link_mode: exact @name("mode");
        }
        actions = { set_link_share; @defaultonly no_link_share; }
        const default_action = no_link_share();
        size = LINK_SHARE_SIZE;
    }
    bit<8> link_spare;
    @name(".SafsIngress.set_link_spare_level")
    action set_link_spare_level(@name("level") bit<8> level) {
        link_spare = level;
    }
    @name(".SafsIngress.no_link_spare")
    action no_link_spare() {
        link_spare = 1;
    }
    @name(".SafsIngress.link_spare_level")
    table link_spare_level_table {
        key = {
            standard_metadata.ingress_port: exact @name("ingress_port");
            meta.link_top_bytes: range @name("top_bytes");
        }
        actions = { set_link_spare_level; @defaultonly no_link_spare; }
        const default_action = no_link_spare();
        size = LINK_SPARE_SIZE;
    }

    // The same for the contended out-links at the sender's ToR, by egress port.
    bit<1> has_out_share;
    rate_kbps_t out_rate_kbps;
    @name(".SafsIngress.set_out_share")
    action set_out_share(@name("rate_kbps") rate_kbps_t rate_kbps) {
        out_rate_kbps = rate_kbps;
        has_out_share = 1;
    }
    @name(".SafsIngress.no_out_share")
    action no_out_share() {
        has_out_share = 0;
    }
    @name(".SafsIngress.out_share")
    table out_share {
        key = {
            standard_metadata.egress_spec: exact @name("egress_port");
            meta.link_load: exact @name("load");
            meta.link_mode: exact @name("mode");
        }
        actions = { set_out_share; @defaultonly no_out_share; }
        const default_action = no_out_share();
        size = OUT_SHARE_SIZE;
    }
    bit<8> out_spare;
    @name(".SafsIngress.set_out_spare_level")
    action set_out_spare_level(@name("level") bit<8> level) {
        out_spare = level;
    }
    @name(".SafsIngress.no_out_spare")
    action no_out_spare() {
        out_spare = 1;
    }
    @name(".SafsIngress.out_spare_level")
    table out_spare_level_table {
        key = {
            standard_metadata.egress_spec: exact @name("egress_port");
            meta.link_top_bytes: range @name("top_bytes");
        }
        actions = { set_out_spare_level; @defaultonly no_out_spare; }
        const default_action = no_out_spare();
        size = OUT_SPARE_SIZE;
    }

    // update_share's result at the port, for pick_port_share: the most urgent non-empty class,
    // its count and the count behind it, and the urgency the dependency is counted in.
    bit<3> port_top;
    load_t port_n_top;
    load_t port_rest;
    bit<3> dep_urgency;
    bit<1> hold_waiting;  // a sole dependency waiting for the holder: no spare level
    bit<8> grant_flags;   // a GRANT's flags: the packet's, FLAG_SOLE set iff hold_waiting
    // Weighted link shares: this packet's weight 2^weight_shift (from its remaining bytes, set
    // in apply), and the top class's weight sum at its in- or out-link after the update.
    bit<8> dep_weight;
    bit<3> weight_shift;
    bit<32> link_w_top;

    @hidden
    action stash_grant() {
        meta.grant_rate_kbps = meta.rate_kbps;
        meta.grant_epoch = meta.epoch;
        meta.grant_lease_us = meta.lease_us;
        meta.grant_now_ns = meta.now_ns;
        meta.grant_flags = grant_flags;
    }

    // One urgency class's count at port IDX after this packet: - 1 if the dependency leaves
    // it (HELD -> CLS), + 1 if it joins it (never below 0: a restart zeroes counts, not the
    // senders' LASTs).
#define CLASS_COUNT(U, REG, N, IDX, HELD, CLS) \
        REG.read(N, IDX); \
        if (HELD == U + 1 && HELD != CLS && N != 0) { N = N - 1; } \
        if (CLS == U + 1 && HELD != CLS) { N = N + 1; } \
        REG.write(IDX, N);
    // The same for the class's weight sum: the dependency's old weight HELD_W leaves class HELD,
    // its new weight NEW_W joins class CLS (saturating, a safety net: 4096 slots x 128 < 2^32).
#define CLASS_WEIGHT(U, REG, W, IDX, HELD, HELD_W, CLS, NEW_W) \
        REG.read(W, IDX); \
        if (HELD == U + 1) { W = W |-| (bit<32>) HELD_W; } \
        if (CLS == U + 1) { W = W |+| (bit<32>) NEW_W; } \
        REG.write(IDX, W);

    // The share grant of this packet's dependency: move it to the packet's urgency (idle on
    // LAST), update the port's class counts and generation, and pick the port_share key.
    @hidden
    action update_share() {
        bit<32> slot = (bit<32>) meta.meter_slot;
        bit<32> port = (bit<32>) standard_metadata.egress_spec;
        bit<3> urgency = meta.urgency;  // a class outside 2..6 wraps to 5..7: the least urgent
        if (urgency > 4 || (hdr.safs.flags & FLAG_BACKGROUND) != 0) {
            urgency = 4;
        }
        bit<8> cls = 1 + (bit<8>) urgency;
        bool is_data = hdr.safs.msg_type == SAFS_DATA;
        bool last = is_data && (hdr.safs.flags & FLAG_LAST) != 0;
        if (last) {
            cls = 0;
        }
        flow_id_t ended;
        dep_ended.read(ended, slot);
        flow_id_t ends = ended;
        if (last) {
            ends = hdr.safs.flow_id;
        }
        dep_ended.write(slot, ends);
        if (is_data && !last && (hdr.safs.flags & FLAG_RESENT) == 0 && ended == hdr.safs.flow_id) {
            meta.stale = 1;
        }
        bit<8> held;
        dep_class.read(held, slot);
        if (meta.stale == 1) {
            cls = held;  // unchanged: no count moves
            urgency = (bit<3>) (held - 1);  // held 0 (idle): no share, see apply
        }
        dep_class.write(slot, cls);
        load_t n0; load_t n1; load_t n2; load_t n3; load_t n4;
        CLASS_COUNT(0, class_load_0, n0, port, held, cls)
        CLASS_COUNT(1, class_load_1, n1, port, held, cls)
        CLASS_COUNT(2, class_load_2, n2, port, held, cls)
        CLASS_COUNT(3, class_load_3, n3, port, held, cls)
        CLASS_COUNT(4, class_load_4, n4, port, held, cls)
        epoch_t gen;
        port_gen.read(gen, port);
        if (held != cls) {
            gen = gen + 1;
            if (gen == 0) {
                gen = 1;  // epoch 0 means "no grant"
            }
        }
        port_gen.write(port, gen);
        meta.dep_class = cls;
        meta.epoch = gen;
        // top: the most urgent non-empty class (none: 4 with load 0, i.e. the default grant; only
        // for a dependency counted at another port); rest: the dependencies behind top.
        bit<3> top = 4;
        load_t n_top = n4;
        if (n0 != 0) { top = 0; n_top = n0; }
        else if (n1 != 0) { top = 1; n_top = n1; }
        else if (n2 != 0) { top = 2; n_top = n2; }
        else if (n3 != 0) { top = 3; n_top = n3; }
        load_t rest = n0 + n1 + n2 + n3 + n4 - n_top;
        port_top = top;
        port_n_top = n_top;
        port_rest = rest;
        dep_urgency = urgency;

        // The in-link (ingress port not facing a host): the dependency leaves the link it was
        // counted at if it came in on another one (a new path) or from a host, then moves there
        // as at the port (a stale packet moves nothing).
        bool is_link = meta.host_src == 0;
        bit<32> link = (bit<32>) standard_metadata.ingress_port;
        bit<16> was_link;
        dep_link_port.read(was_link, slot);
        bit<8> link_held;
        dep_link_class.read(link_held, slot);
        bit<8> held_w;
        dep_link_weight.read(held_w, slot);
        bit<8> gone = 0;  // the class it leaves at was_link (0: none)
        if (!is_link || (bit<32>) was_link != link) {
            gone = link_held;
            link_held = 0;
        }
        load_t o;
        CLASS_COUNT(0, link_load_0, o, (bit<32>) was_link, gone, 0)
        CLASS_COUNT(1, link_load_1, o, (bit<32>) was_link, gone, 0)
        CLASS_COUNT(2, link_load_2, o, (bit<32>) was_link, gone, 0)
        CLASS_COUNT(3, link_load_3, o, (bit<32>) was_link, gone, 0)
        CLASS_COUNT(4, link_load_4, o, (bit<32>) was_link, gone, 0)
        bit<32> ow;
        CLASS_WEIGHT(0, link_weight_0, ow, (bit<32>) was_link, gone, held_w, 0, 0)
        CLASS_WEIGHT(1, link_weight_1, ow, (bit<32>) was_link, gone, held_w, 0, 0)
        CLASS_WEIGHT(2, link_weight_2, ow, (bit<32>) was_link, gone, held_w, 0, 0)
        CLASS_WEIGHT(3, link_weight_3, ow, (bit<32>) was_link, gone, held_w, 0, 0)
        CLASS_WEIGHT(4, link_weight_4, ow, (bit<32>) was_link, gone, held_w, 0, 0)
        bit<8> link_cls = cls;
        bit<8> link_w = dep_weight;
        if (meta.stale == 1) {
            link_cls = link_held;
            link_w = held_w;
        }
        if (!is_link) {
            link_cls = 0;  // counted nowhere; dep_link_port keeps the last link
        } else {
            was_link = (bit<16>) link;
        }
        dep_link_class.write(slot, link_cls);
        dep_link_port.write(slot, was_link);
        dep_link_weight.write(slot, link_w);
        load_t l0; load_t l1; load_t l2; load_t l3; load_t l4;
        CLASS_COUNT(0, link_load_0, l0, link, link_held, link_cls)
        CLASS_COUNT(1, link_load_1, l1, link, link_held, link_cls)
        CLASS_COUNT(2, link_load_2, l2, link, link_held, link_cls)
        CLASS_COUNT(3, link_load_3, l3, link, link_held, link_cls)
        CLASS_COUNT(4, link_load_4, l4, link, link_held, link_cls)
        bit<32> w0; bit<32> w1; bit<32> w2; bit<32> w3; bit<32> w4;
        CLASS_WEIGHT(0, link_weight_0, w0, link, link_held, held_w, link_cls, link_w)
        CLASS_WEIGHT(1, link_weight_1, w1, link, link_held, held_w, link_cls, link_w)
        CLASS_WEIGHT(2, link_weight_2, w2, link, link_held, held_w, link_cls, link_w)
        CLASS_WEIGHT(3, link_weight_3, w3, link, link_held, held_w, link_cls, link_w)
        CLASS_WEIGHT(4, link_weight_4, w4, link, link_held, held_w, link_cls, link_w)
        bit<3> link_top = 4;
        load_t l_top = l4;
        link_w_top = w4;
        if (l0 != 0) { link_top = 0; l_top = l0; link_w_top = w0; }
        else if (l1 != 0) { link_top = 1; l_top = l1; link_w_top = w1; }
        else if (l2 != 0) { link_top = 2; l_top = l2; link_w_top = w2; }
        else if (l3 != 0) { link_top = 3; l_top = l3; link_w_top = w3; }
        load_t link_rest = l0 + l1 + l2 + l3 + l4 - l_top;
        ns_t link_start;
        link_win_start.read(link_start, link);
        bit<32> link_bytes;
        link_win_bytes.read(link_bytes, link);
        bit<32> link_top_bytes_now;
        link_top_bytes.read(link_top_bytes_now, link);
        ns_t link_age = meta.now_ns - link_start;
        if (is_link && link_age >= TOP_WINDOW_NS) {
            link_top_bytes_now = link_age < 2 * TOP_WINDOW_NS ? link_bytes : 0;
            link_start = meta.now_ns;
            link_bytes = 0;
        }
        if (is_link && is_data && !last && meta.stale == 0 && urgency == link_top) {
            link_bytes = link_bytes + standard_metadata.packet_length;
        }
        link_win_start.write(link, link_start);
        link_win_bytes.write(link, link_bytes);
        link_top_bytes.write(link, link_top_bytes_now);
        meta.is_link = is_link ? 1w1 : 1w0;
        // The spare level's key: the last window's top-class bytes, or this window's so far when
        // more (a top class that starts sending takes its capacity back at once).
        meta.link_top_bytes = link_bytes > link_top_bytes_now ? link_bytes : link_top_bytes_now;
        if (urgency == link_top) {
            meta.link_load = l_top;
            meta.link_mode = SHARE_TOP;
            if (link_rest == 0) {
                meta.link_mode = SHARE_ALONE;
            }
        } else {
            meta.link_load = link_rest;
            meta.link_mode = SHARE_WAITING;
        }
    }

    // The port_share key (pick_port_share), with the port holder: when two or more sole
    // dependencies (FLAG_SOLE, not behind a contended in-link) are in the port's most urgent
    // class, they count as one, and one at a time, the holder, gets that one's share; the
    // others wait (the waiting share without the spare level: they share the holder's queue,
    // so it could not take back a spare they used). A sole dependency takes the port when no one
    // holds it, the holder left the class, its DATA finds the holder silent for idle_ns, or it
    // finishes before the holder (finish = latest start + remaining at 100 Gbit/s) by more than
    // preempt_ns, or at all if it is shorter and its time fits in the holder's slack; a holder
    // with at most release_bytes left frees the port and keeps its share.
    // Then the port's top-class DATA window. A stale packet writes nothing back.
    @hidden
    action pick_port_share() {
        bit<32> port = (bit<32>) standard_metadata.egress_spec;
        bit<8> cls = meta.dep_class;
        bit<8> sole_held;
        dep_sole.read(sole_held, (bit<32>) meta.meter_slot);
        bit<8> sole_cls = 0;
        if ((hdr.safs.flags & FLAG_SOLE) != 0 && has_link_share == 0) {
            sole_cls = cls;
        }
        if (meta.stale == 1) {
            sole_cls = sole_held;
        }
        dep_sole.write((bit<32>) meta.meter_slot, sole_cls);
        load_t s0; load_t s1; load_t s2; load_t s3; load_t s4;
        CLASS_COUNT(0, sole_load_0, s0, port, sole_held, sole_cls)
        CLASS_COUNT(1, sole_load_1, s1, port, sole_held, sole_cls)
        CLASS_COUNT(2, sole_load_2, s2, port, sole_held, sole_cls)
        CLASS_COUNT(3, sole_load_3, s3, port, sole_held, sole_cls)
        CLASS_COUNT(4, sole_load_4, s4, port, sole_held, sole_cls)
        load_t n_sole = s4;
        if (port_top == 0) { n_sole = s0; }
        else if (port_top == 1) { n_sole = s1; }
        else if (port_top == 2) { n_sole = s2; }
        else if (port_top == 3) { n_sole = s3; }
        bool grouped = hold_idle_ns != 0 && n_sole >= 2;
        load_t load = port_n_top;
        load_t waiting = port_rest;
        if (grouped) {
            load = port_n_top - n_sole + 1;
            waiting = port_rest + n_sole - 1;
        }
        bit<2> mode = SHARE_TOP;
        if (waiting == 0) {
            mode = SHARE_ALONE;
        }
        if (dep_urgency != port_top) {
            load = waiting;
            mode = SHARE_WAITING;
        }
        meter_slot_t was_slot;
        holder_slot.read(was_slot, port);
        bit<8> was_cls;
        holder_class.read(was_cls, port);
        ns_t was_seen;
        holder_seen.read(was_seen, port);
        ns_t was_finish;
        holder_finish.read(was_finish, port);
        ns_t was_start;
        holder_start.read(was_start, port);
        meter_slot_t h_slot = was_slot;
        bit<8> h_cls = was_cls;
        ns_t h_seen = was_seen;
        ns_t h_finish = was_finish;
        ns_t h_start = was_start;
        if (h_slot == meta.meter_slot && (h_cls != cls || sole_cls == 0)) {
            h_slot = 0;  // the holder left the class or is no longer sole
        }
        hold_waiting = 0;
        if (dep_urgency == port_top && grouped && sole_cls != 0) {
            bytes48_t rem = hdr.safs.remaining_bytes;
            ns_t dur = (rem >> FINISH_SHIFT_A) + (rem >> FINISH_SHIFT_B);  // its time at 100 Gbit/s
            ns_t finish = hdr.safs.timestamp_ns + dur;
            ns_t ahead = was_finish - finish;  // below 2^47: the claimant finishes first
            bool silent = hdr.safs.msg_type == SAFS_DATA && meta.now_ns - was_seen > (ns_t) hold_idle_ns;
            bool first = ahead != 0 && ahead < 48w0x800000000000;
            bool earlier = first && ahead > (ns_t) hold_preempt_ns;
            // A shorter claimant finishing first whose whole time fits in the holder's slack
            // (the holder still starts by its latest start after it) costs the holder nothing.
            bool shorter = was_finish - was_start > dur;
            bool fits = was_start - meta.now_ns - dur < 48w0x800000000000;
            if (first && shorter && fits) {
                earlier = true;
            }
            if (rem <= (bytes48_t) hold_release_bytes) {
                if (h_slot == meta.meter_slot) {
                    h_slot = 0;
                }
            } else if (h_slot == meta.meter_slot || h_slot == 0 || h_cls != cls || silent || earlier) {
                h_slot = meta.meter_slot;
                h_cls = cls;
                h_seen = meta.now_ns;
                h_finish = finish;
                h_start = hdr.safs.timestamp_ns;
            } else {
                load = waiting;
                mode = SHARE_WAITING;
                hold_waiting = 1;
            }
        }
        if (meta.stale == 1) {
            h_slot = was_slot;
            h_cls = was_cls;
            h_seen = was_seen;
            h_finish = was_finish;
            h_start = was_start;
        }
        holder_slot.write(port, h_slot);
        holder_class.write(port, h_cls);
        holder_seen.write(port, h_seen);
        holder_finish.write(port, h_finish);
        holder_start.write(port, h_start);
        meta.load = load;
        meta.share_mode = mode;
        // The port's top-class DATA bytes: a window older than TOP_WINDOW_NS closes (its bytes
        // become the last window's, or 0 after a silent window); this packet counts if it has
        // a top share. Registers written unconditionally (BMv2).
        ns_t win_start;
        port_win_start.read(win_start, port);
        bit<32> win_bytes;
        port_win_bytes.read(win_bytes, port);
        bit<32> top_bytes;
        port_top_bytes.read(top_bytes, port);
        ns_t age = meta.now_ns - win_start;
        if (age >= TOP_WINDOW_NS) {
            top_bytes = age < 2 * TOP_WINDOW_NS ? win_bytes : 0;
            win_start = meta.now_ns;
            win_bytes = 0;
        }
        if (hdr.safs.msg_type == SAFS_DATA && cls != 0 && meta.stale == 0 && mode != SHARE_WAITING) {
            win_bytes = win_bytes + standard_metadata.packet_length;
        }
        port_win_start.write(port, win_start);
        port_win_bytes.write(port, win_bytes);
        port_top_bytes.write(port, top_bytes);
        meta.top_bytes = top_bytes;
        meta.spare_bytes = win_bytes > top_bytes ? win_bytes : top_bytes;  // as for in-links
    }
    // A local sender's DATA or REQUEST at its out-link (sender's ToR): the dependency leaves the
    // port it was counted at if it leaves on another one (a new path), then moves to the packet's
    // urgency there (idle on LAST); sets the out_share / out_spare_level keys. No stale rule:
    // a host's packets reach its ToR in the order it sent them.
    @hidden
    action update_out_link() {
        bit<32> slot = (bit<32>) meta.out_slot;
        bit<32> port = (bit<32>) standard_metadata.egress_spec;
        bit<3> urgency = meta.urgency;
        if (urgency > 4 || (hdr.safs.flags & FLAG_BACKGROUND) != 0) {
            urgency = 4;
        }
        bit<8> cls = 1 + (bit<8>) urgency;
        bool is_data = hdr.safs.msg_type == SAFS_DATA;
        bool last = is_data && (hdr.safs.flags & FLAG_LAST) != 0;
        if (last) {
            cls = 0;
        }
        bit<16> was_port;
        dep_out_port.read(was_port, slot);
        bit<8> held;
        dep_out_class.read(held, slot);
        bit<8> held_w;
        dep_out_weight.read(held_w, slot);
        bit<8> gone = 0;  // the class it leaves at was_port (0: none)
        if ((bit<32>) was_port != port) {
            gone = held;
            held = 0;
        }
        load_t o;
        CLASS_COUNT(0, out_load_0, o, (bit<32>) was_port, gone, 0)
        CLASS_COUNT(1, out_load_1, o, (bit<32>) was_port, gone, 0)
        CLASS_COUNT(2, out_load_2, o, (bit<32>) was_port, gone, 0)
        CLASS_COUNT(3, out_load_3, o, (bit<32>) was_port, gone, 0)
        CLASS_COUNT(4, out_load_4, o, (bit<32>) was_port, gone, 0)
        bit<32> ow;
        CLASS_WEIGHT(0, out_weight_0, ow, (bit<32>) was_port, gone, held_w, 0, 0)
        CLASS_WEIGHT(1, out_weight_1, ow, (bit<32>) was_port, gone, held_w, 0, 0)
        CLASS_WEIGHT(2, out_weight_2, ow, (bit<32>) was_port, gone, held_w, 0, 0)
        CLASS_WEIGHT(3, out_weight_3, ow, (bit<32>) was_port, gone, held_w, 0, 0)
        CLASS_WEIGHT(4, out_weight_4, ow, (bit<32>) was_port, gone, held_w, 0, 0)
        dep_out_class.write(slot, cls);
        dep_out_port.write(slot, (bit<16>) port);
        dep_out_weight.write(slot, dep_weight);
        load_t l0; load_t l1; load_t l2; load_t l3; load_t l4;
        CLASS_COUNT(0, out_load_0, l0, port, held, cls)
        CLASS_COUNT(1, out_load_1, l1, port, held, cls)
        CLASS_COUNT(2, out_load_2, l2, port, held, cls)
        CLASS_COUNT(3, out_load_3, l3, port, held, cls)
        CLASS_COUNT(4, out_load_4, l4, port, held, cls)
        bit<32> w0; bit<32> w1; bit<32> w2; bit<32> w3; bit<32> w4;
        CLASS_WEIGHT(0, out_weight_0, w0, port, held, held_w, cls, dep_weight)
        CLASS_WEIGHT(1, out_weight_1, w1, port, held, held_w, cls, dep_weight)
        CLASS_WEIGHT(2, out_weight_2, w2, port, held, held_w, cls, dep_weight)
        CLASS_WEIGHT(3, out_weight_3, w3, port, held, held_w, cls, dep_weight)
        CLASS_WEIGHT(4, out_weight_4, w4, port, held, held_w, cls, dep_weight)
        bit<3> top = 4;
        load_t n_top = l4;
        link_w_top = w4;
        if (l0 != 0) { top = 0; n_top = l0; link_w_top = w0; }
        else if (l1 != 0) { top = 1; n_top = l1; link_w_top = w1; }
        else if (l2 != 0) { top = 2; n_top = l2; link_w_top = w2; }
        else if (l3 != 0) { top = 3; n_top = l3; link_w_top = w3; }
        load_t rest = l0 + l1 + l2 + l3 + l4 - n_top;
        ns_t start;
        out_win_start.read(start, port);
        bit<32> bytes;
        out_win_bytes.read(bytes, port);
        bit<32> top_bytes;
        out_top_bytes.read(top_bytes, port);
        ns_t age = meta.now_ns - start;
        if (age >= TOP_WINDOW_NS) {
            top_bytes = age < 2 * TOP_WINDOW_NS ? bytes : 0;
            start = meta.now_ns;
            bytes = 0;
        }
        if (is_data && !last && urgency == top) {
            bytes = bytes + standard_metadata.packet_length;
        }
        out_win_start.write(port, start);
        out_win_bytes.write(port, bytes);
        out_top_bytes.write(port, top_bytes);
        meta.dep_class = cls;
        meta.link_top_bytes = bytes > top_bytes ? bytes : top_bytes;  // as for in-links
        if (urgency == top) {
            meta.link_load = n_top;
            meta.link_mode = SHARE_TOP;
            if (rest == 0) {
                meta.link_mode = SHARE_ALONE;
            }
        } else {
            meta.link_load = rest;
            meta.link_mode = SHARE_WAITING;
        }
    }
#undef CLASS_COUNT
#undef CLASS_WEIGHT

    // Weighted link shares (in apply, not in an action: p4c predicates every branch of an
    // action). WEIGHT_FROM_REMAINING: dep_weight = 2^weight_shift from the remaining bytes
    // (apply starts both at weight 1, shift 0).
    // WEIGHTED_LINK_LOAD: a top-class (TOP or ALONE) dependency's link_share / out_share key is
    // ceil(W / w) = (W + w - 1) >> k, W the top class's weight sum: its share usable / ceil(W / w)
    // is about usable x w / W; a key above MAX_LOAD is clamped to it (usable / MAX_LOAD, more
    // than usable x w / W: docs/protocol.md). The chains spell out k = 1..7: WEIGHT_MAX_SHIFT
    // must stay 7 (bit<8> weights).
#define WEIGHT_STEP(K) \
        else if (hdr.safs.remaining_bytes >= 48w1 << (WEIGHT_BASE_BITS + K - 1)) { \
            dep_weight = 1 << K; weight_shift = K; }
#define WEIGHT_FROM_REMAINING \
        if (hdr.safs.remaining_bytes >= 48w1 << (WEIGHT_BASE_BITS + WEIGHT_MAX_SHIFT - 1)) { \
            dep_weight = 1 << WEIGHT_MAX_SHIFT; weight_shift = WEIGHT_MAX_SHIFT; } \
        WEIGHT_STEP(6) WEIGHT_STEP(5) WEIGHT_STEP(4) WEIGHT_STEP(3) WEIGHT_STEP(2) WEIGHT_STEP(1)
#define WEIGHT_SHIFT(K) else if (weight_shift == K) { w_key = w_key >> K; }
#define WEIGHTED_LINK_LOAD \
        if (meta.link_mode != SHARE_WAITING) { \
            bit<32> w_key = link_w_top + (bit<32>) dep_weight - 1; \
            if (weight_shift == 0) { } \
            WEIGHT_SHIFT(1) WEIGHT_SHIFT(2) WEIGHT_SHIFT(3) WEIGHT_SHIFT(4) WEIGHT_SHIFT(5) \
            WEIGHT_SHIFT(6) WEIGHT_SHIFT(7) \
            if (w_key > MAX_LOAD) { w_key = MAX_LOAD; } \
            meta.link_load = (load_t) w_key; \
        }

    apply {
        has_share = 0;
        spare_level = 1;
        has_link_share = 0;
        link_rate_kbps = 0;
        link_spare = 1;
        has_out_share = 0;
        out_rate_kbps = 0;
        out_spare = 1;
        meta.is_link = 0;
        share_lease_us = 0;
        hold_idle_ns = 0;
        hold_release_bytes = 0;
        hold_preempt_ns = 0;
        hold_waiting = 0;
        grant_flags = 0;
        port_top = 4;
        port_n_top = 0;
        port_rest = 0;
        dep_urgency = 4;
        link_w_top = 0;
        dep_weight = 1;
        weight_shift = 0;
        meta.stale = 0;
        if (meta.safs_ok == 1 && meta.receiver_port == 1) {
            default_grant.apply();
            share_lease.apply();
            holder.apply();
            dep_grant.apply();
            if (meta.share == 1 && (hdr.safs.msg_type == SAFS_DATA || hdr.safs.msg_type == SAFS_REQUEST)) {
                WEIGHT_FROM_REMAINING  // only for a share grant's DATA or REQUEST: not on every packet
                update_share();
                if (meta.is_link == 1) {
                    WEIGHTED_LINK_LOAD
                    link_share.apply();
                }
                pick_port_share();
                if (meta.dep_class != 0) {
                    port_share.apply();
                    if (has_share == 0) {
                        meta.epoch = 0;  // over the largest load: the default grant stays
                    } else {
                        if (meta.share_mode == SHARE_WAITING && hold_waiting == 0) {
                            spare_level_table.apply();
                            // level x (reserve / n) <= usable / n: fits in 32 bits
                            meta.rate_kbps = (rate_kbps_t) ((bit<40>) meta.rate_kbps * (bit<40>) spare_level);
                        } else if (meta.share_mode != SHARE_WAITING && meta.load >= 2) {
                            top_boost_table.apply();
                            // boost <= 512 (top_overcommit <= 2) and load >= 2: at most the usable rate
                            meta.rate_kbps = (rate_kbps_t) (((bit<48>) meta.rate_kbps * (bit<48>) top_boost) >> 8);
                        }
                        if (has_link_share == 1) {
                            if (meta.link_mode == SHARE_WAITING) {
                                link_spare_level_table.apply();
                                link_rate_kbps = (rate_kbps_t) ((bit<40>) link_rate_kbps * (bit<40>) link_spare);
                            }
                            if (link_rate_kbps < meta.rate_kbps) {
                                meta.rate_kbps = link_rate_kbps;
                            }
                        }
                    }
                } else {
                    meta.epoch = 0;  // LAST: the default grant (never pushed)
                }
            }
            // A GRANT says FLAG_SOLE iff its dependency waits for the port's holder (its sender
            // then polls without back-off: the first REQUEST after the holder leaves takes the port).
            grant_flags = hdr.safs.flags & ~FLAG_SOLE;
            if (hold_waiting == 1) {
                grant_flags = grant_flags | FLAG_SOLE;
            }
            if (hdr.safs.msg_type == SAFS_DATA) {
                dep_meter.execute_meter((bit<32>) meta.meter_slot, meta.color);
                hdr.safs.color = (bit<8>) meta.color;
                if (meta.color != 0) {
                    standard_metadata.priority = QUEUE_OVER_RATE;
                }
                dep_bytes.count((bit<32>) meta.meter_slot);
                // Push a fresh GRANT when the rate the sender holds is off the grant's (lower
                // by more than 1/32 of it or higher by more than 1/256: a held rate above the
                // grant must stay inside the allocator's 1% headroom), it holds no grant
                // (epoch 0) or asks for a renewal; never for the last packet. Written so that
                // no 32-bit intermediate overflows.
                rate_kbps_t held = hdr.safs.rate_kbps;
                rate_kbps_t rate = meta.rate_kbps;
                bool off = (held < rate - (rate >> 5) && (hdr.safs.flags & FLAG_CAPPED) == 0)
                           || (held > rate && held - rate > (rate >> 8));
                bool wanted = hdr.safs.epoch == 0 || (hdr.safs.flags & FLAG_RENEW) != 0;
                if (meta.has_grant == 1 && meta.has_grant_route == 1 && (hdr.safs.flags & FLAG_LAST) == 0
                        && meta.stale == 0 && (off || wanted)) {
                    stash_grant();
                    meta.make_grant = 1;
                    clone_preserving_field_list(CloneType.I2E,
                        (bit<32>) meta.grant_port + CLONE_SESSION_BASE, 1);
                }
            } else if (hdr.safs.msg_type == SAFS_REQUEST && meta.has_grant_route == 1) {
                if (meta.has_grant == 0) {
                    digest<request_digest_t>(1, { hdr.safs.flow_id, hdr.ipv4.src_addr,
                        hdr.ipv4.dst_addr, hdr.safs.dep_id, hdr.safs.remaining_bytes, hdr.safs.timestamp_ns });
                }
                // Turn the REQUEST around into a GRANT toward the sender.
                ipv4_addr_t sender = hdr.ipv4.src_addr;
                hdr.ipv4.src_addr = hdr.ipv4.dst_addr;
                hdr.ipv4.dst_addr = sender;
                hdr.ethernet.src_addr = hdr.ethernet.dst_addr;
                hdr.ethernet.dst_addr = meta.grant_mac;
                standard_metadata.egress_spec = meta.grant_port;
                hdr.safs.msg_type = SAFS_GRANT;
                hdr.safs.flags = grant_flags;
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
            bit<32> out_slot = (bit<32>) meta.out_slot;
            if (meta.out_slot != 0 && (hdr.safs.msg_type == SAFS_DATA || hdr.safs.msg_type == SAFS_REQUEST)) {
                WEIGHT_FROM_REMAINING
                update_out_link();
                rate_kbps_t cap = 0;
                if (meta.dep_class != 0) {
                    WEIGHTED_LINK_LOAD
                    out_share.apply();
                    if (has_out_share == 1) {
                        cap = out_rate_kbps;
                        if (meta.link_mode == SHARE_WAITING) {
                            out_spare_level_table.apply();
                            cap = (rate_kbps_t) ((bit<40>) cap * (bit<40>) out_spare);
                        }
                    }
                }
                dep_out_rate.write(out_slot, cap);
                if (hdr.safs.msg_type == SAFS_DATA && cap != 0) {
                    rate_kbps_t held = hdr.safs.rate_kbps;
                    if (held > cap && held - cap > (cap >> 8)) {
                        hdr.safs.rate_kbps = 0;  // over its cap: the receiver's ToR pushes a GRANT
                    } else if (held >= cap - (cap >> 5)) {
                        hdr.safs.flags = hdr.safs.flags | FLAG_CAPPED;
                    }
                }
            }
        }
        // A GRANT from the fabric to a host of this ToR (source_guard found its claim): at most
        // the dependency's out-link cap.
        if (meta.safs_ok == 1 && meta.out_slot != 0 && hdr.safs.msg_type == SAFS_GRANT) {
            rate_kbps_t cap;
            dep_out_rate.read(cap, (bit<32>) meta.out_slot);
            if (cap != 0 && cap < hdr.safs.rate_kbps) {
                hdr.safs.rate_kbps = cap;
            }
        }
    }
}

#endif

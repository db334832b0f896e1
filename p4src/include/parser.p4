/*
 * Parser, checksum controls and deparser.
 * From CPU_PORT (a PacketOut): packet_out, then the frame as from any port.
 * Ethernet -> IPv4 -> UDP -> SAFS (only UDP to port 23285 whose UDP length covers the 36-byte
 * SAFS header; a shorter one is marked truncated and stays plain UDP: docs/protocol.md).
 * UDP to 4791 (RoCEv2) -> BTH; TCP: only its ports are read (lookahead, nothing extracted).
 * The L4 ports and the BTH destination QP are copied to metadata for traffic_class.
 */
#ifndef SAFS_PARSER_P4
#define SAFS_PARSER_P4

#include "include/headers.p4"

parser SafsParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }
    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition parse_ethernet;
    }
    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) {
            IP_PROTO_UDP: parse_udp;
            IP_PROTO_TCP: parse_tcp_ports;
            default: accept;
        }
    }
    state parse_tcp_ports {
        bit<32> ports = packet.lookahead<bit<32>>();
        meta.l4_src_port = ports[31:16];
        meta.l4_dst_port = ports[15:0];
        transition accept;
    }
    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src_port = hdr.udp.src_port;
        meta.l4_dst_port = hdr.udp.dst_port;
        transition select(hdr.udp.dst_port) {
            SAFS_UDP_PORT: check_safs_len;
            ROCE_V2_UDP_PORT: parse_bth;
            default: accept;
        }
    }
    state parse_bth {
        packet.extract(hdr.bth);
        meta.roce_qp = hdr.bth.dest_qp;
        transition accept;
    }
    state check_safs_len {
        transition select(hdr.udp.length < UDP_HDR_LEN + SAFS_HDR_LEN) {
            true: truncated;
            false: parse_safs;
        }
    }
    state truncated {
        meta.truncated = 1;
        transition accept;
    }
    state parse_safs {
        packet.extract(hdr.safs);
        transition accept;
    }
}

control SafsVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control SafsComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control SafsDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.packet_in);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.bth);
        packet.emit(hdr.safs);
    }
}

#endif

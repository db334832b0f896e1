-- Wireshark / tshark dissector for SAFS (Slack-Aware Flow Scheduling), protocol version 2.
-- Wire format: docs/protocol.md, "Header layout" (36 bytes after UDP to port 23285, network
-- byte order). Use:  tshark -X lua_script:safs.lua -r capture.pcap -Y safs
-- or copy this file into Wireshark's personal plugins folder (Help > About > Folders).
-- The header is decoded field by field; a short header, an unknown version or an unknown
-- message type is flagged as malformed (Analyze > Expert Information), as the P4 program
-- counts them (malformed[0..2]).

local SAFS_UDP_PORT = 23285
local SAFS_VERSION = 2
local HEADER_LEN = 36

local safs = Proto("safs", "Slack-Aware Flow Scheduling")

local msg_types = { [1] = "DATA", [2] = "REQUEST", [3] = "GRANT", [4] = "DONE" }
local colors = { [0] = "green", [1] = "yellow", [2] = "red", [3] = "unmetered" }

local f = safs.fields
f.version = ProtoField.uint8("safs.version", "Version", base.DEC, nil, 0xF0)
f.type = ProtoField.uint8("safs.type", "Type", base.DEC, msg_types, 0x0F)
f.flags = ProtoField.uint8("safs.flags", "Flags", base.HEX)
f.flag_background = ProtoField.bool("safs.flags.background", "BACKGROUND", 8, nil, 0x01)
f.flag_last = ProtoField.bool("safs.flags.last", "LAST", 8, nil, 0x02)
f.flag_renew = ProtoField.bool("safs.flags.renew", "RENEW", 8, nil, 0x04)
f.flag_demoted = ProtoField.bool("safs.flags.demoted", "DEMOTED", 8, nil, 0x08)
f.flag_resent = ProtoField.bool("safs.flags.resent", "RESENT", 8, nil, 0x10)
f.flag_sole = ProtoField.bool("safs.flags.sole", "SOLE", 8, nil, 0x20)
f.flag_capped = ProtoField.bool("safs.flags.capped", "CAPPED", 8, nil, 0x40)
f.flag_late = ProtoField.bool("safs.flags.late", "LATE", 8, nil, 0x80)
f.qclass = ProtoField.uint8("safs.qclass", "Queue class (switch)", base.DEC)
f.color = ProtoField.uint8("safs.color", "Meter colour (switch)", base.DEC, colors)
f.flow_id = ProtoField.uint32("safs.flow_id", "Flow id", base.DEC)
f.remaining = ProtoField.uint64("safs.remaining_bytes", "Remaining bytes", base.DEC)
f.timestamp = ProtoField.uint64("safs.timestamp_ns", "Timestamp (ns mod 2^48)", base.DEC)
f.rate = ProtoField.uint32("safs.rate_kbps", "Rate (kbit/s)", base.DEC)
f.epoch = ProtoField.uint32("safs.epoch", "Epoch", base.DEC)
f.lease = ProtoField.uint32("safs.lease_us", "Lease (us)", base.DEC)
f.qdepth = ProtoField.uint16("safs.qdepth", "Queue depth (packets, switch)", base.DEC)
f.dep_id = ProtoField.uint16("safs.dep_id", "Dependency id", base.DEC)

local e_short = ProtoExpert.new("safs.truncated", "SAFS header truncated (36 bytes expected)",
                                expert.group.MALFORMED, expert.severity.ERROR)
local e_version = ProtoExpert.new("safs.bad_version", "SAFS version is not 2",
                                  expert.group.MALFORMED, expert.severity.ERROR)
local e_type = ProtoExpert.new("safs.bad_type", "SAFS message type is not 1..4",
                               expert.group.MALFORMED, expert.severity.ERROR)
safs.experts = { e_short, e_version, e_type }

-- What timestamp_ns and remaining_bytes mean depends on the type (docs/protocol.md).
local ts_meaning = { [1] = "latest start", [2] = "latest start", [3] = "switch time", [4] = "no-bubble timestamp" }

function safs.dissector(buf, pinfo, tree)
    -- SAFS is UDP *to* 23285 (as the P4 parser reads it); "udp.port" also offers packets
    -- from 23285, which are not SAFS: decline them (0 = not ours, the next dissector tries).
    if pinfo.dst_port ~= SAFS_UDP_PORT then return 0 end
    pinfo.cols.protocol = "SAFS"
    local t = tree:add(safs, buf(0, math.min(buf:len(), HEADER_LEN)))
    if buf:len() < HEADER_LEN then
        t:add_proto_expert_info(e_short)
        pinfo.cols.info = "SAFS (truncated)"
        return buf:len()
    end
    local version = buf(0, 1):bitfield(0, 4)
    local mtype = buf(0, 1):bitfield(4, 4)
    local vi = t:add(f.version, buf(0, 1))
    if version ~= SAFS_VERSION then vi:add_proto_expert_info(e_version) end
    local ti = t:add(f.type, buf(0, 1))
    if msg_types[mtype] == nil then ti:add_proto_expert_info(e_type) end
    local fl = t:add(f.flags, buf(1, 1))
    fl:add(f.flag_background, buf(1, 1))
    fl:add(f.flag_last, buf(1, 1))
    fl:add(f.flag_renew, buf(1, 1))
    fl:add(f.flag_demoted, buf(1, 1))
    fl:add(f.flag_resent, buf(1, 1))
    fl:add(f.flag_sole, buf(1, 1))
    fl:add(f.flag_capped, buf(1, 1))
    fl:add(f.flag_late, buf(1, 1))
    t:add(f.qclass, buf(2, 1))
    t:add(f.color, buf(3, 1))
    t:add(f.flow_id, buf(4, 4))
    local remaining = buf(8, 6):uint64()
    t:add(f.remaining, buf(8, 6), remaining)
    local ts = buf(14, 6):uint64()
    t:add(f.timestamp, buf(14, 6), ts):append_text(" (" .. (ts_meaning[mtype] or "?") .. ")")
    t:add(f.rate, buf(20, 4))
    t:add(f.epoch, buf(24, 4))
    t:add(f.lease, buf(28, 4))
    t:add(f.qdepth, buf(32, 2))
    t:add(f.dep_id, buf(34, 2))
    local name = msg_types[mtype] or ("type " .. mtype)
    if mtype == 4 and remaining > 0 then name = "DONE (NACK)" end
    pinfo.cols.info = string.format("%s flow=%d dep=%d remaining=%s rate=%d kbit/s epoch=%d",
        name, buf(4, 4):uint(), buf(34, 2):uint(), tostring(remaining), buf(20, 4):uint(), buf(24, 4):uint())
    if buf:len() > HEADER_LEN then
        Dissector.get("data"):call(buf(HEADER_LEN):tvb(), pinfo, tree)
    end
    return buf:len()
end

DissectorTable.get("udp.port"):add(SAFS_UDP_PORT, safs)

"""ECMP: a route with set_ecmp_group picks the ecmp_selector member that the controller's
prediction (safs.core.ecmp: crc16 of src, dst, protocol, L4 ports; member hash % size in member
handle order) names, for every flow, on BMv2 itself. The scheduler's link accounting and the
simulator rely on that prediction being exact."""

from __future__ import annotations

from base_test import PORT_OTHER, PORT_RECEIVER, PORT_SENDER, SENDER_IP, SWITCH_MAC, Lpm, SafsTest, ip_int, update
from p4.v1 import p4runtime_pb2
from p4rt_client import encode
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from safs.core import ecmp
from safs.core import p4names as n
from safs.core.protocol import SAFS_UDP_PORT

ECMP_DST = "10.0.9.7"  # a destination only the ECMP route covers
MEMBER_PORTS = (PORT_SENDER, PORT_RECEIVER, PORT_OTHER)


def member_mac(port: int) -> str:
    return f"00:00:00:00:0e:{port:02x}"


class EcmpPredictionTest(SafsTest):
    """Members id = port 1..3 inserted in ascending order (BMv2 handles follow), group 1 of all
    three, group 2 of ports 3 and 1 (listed out of order: BMv2 orders a group by handle). UDP
    flows over many source ports (as SAFS dependencies use) and TCP flows: each packet leaves on
    the predicted port with the member's MAC and TTL - 1."""

    def profile_id(self) -> int:
        return next(ap.preamble.id for ap in self.client.index.p4info.action_profiles
                    if ap.preamble.name == n.ECMP_SELECTOR)

    def add_members_and_group(self, group_id: int, members: tuple[int, ...]) -> None:
        pid = self.profile_id()
        g = p4runtime_pb2.ActionProfileGroup(action_profile_id=pid, group_id=group_id, max_size=len(MEMBER_PORTS))
        for m in members:
            g.members.add(member_id=m, weight=1)
        self.client.write([update("INSERT", action_profile_group=g)])
        key = p4runtime_pb2.ActionProfileGroup(action_profile_id=pid, group_id=group_id)
        self.add_undo(lambda: self.client.write([update("DELETE", action_profile_group=key)]), p4rt=True)
        te = self.client.table_entry(n.ECMP, {n.F_ECMP_GROUP: group_id})
        te.action.action_profile_group_id = group_id
        self.client.write([update("INSERT", table_entry=te)])
        ekey = self.client.table_entry(n.ECMP, {n.F_ECMP_GROUP: group_id})
        self.add_undo(lambda: self.client.write([update("DELETE", table_entry=ekey)]), p4rt=True)

    def check_flows(self, ports: tuple[int, ...]) -> set[int]:
        seen = set()
        flows = [(UDP, 17, sport, SAFS_UDP_PORT) for sport in range(1024, 1056)]
        flows += [(TCP, 6, sport, 5000 + sport) for sport in range(40000, 40008)]
        for layer, proto, sport, dport in flows:
            want = ecmp.select(ports, ecmp.flow_hash(ip_int(SENDER_IP), ip_int(ECMP_DST), proto, sport, dport))
            pkt = (Ether(src="00:00:00:00:01:01", dst=SWITCH_MAC) / IP(src=SENDER_IP, dst=ECMP_DST, ttl=64)
                   / layer(sport=sport, dport=dport) / (b"e" * 40))
            exp = pkt.copy()
            exp[Ether].dst = member_mac(want)
            exp[IP].ttl = 63
            del exp[IP].chksum
            self.send(PORT_SENDER, pkt)
            got = self.receive(want)
            self.assertEqual(bytes(got), bytes(Ether(bytes(exp))), f"{proto}/{sport}->{dport}: port {want}")
            seen.add(want)
        self.expect_nothing()
        return seen

    def runTest(self) -> None:
        self.setup_routes()
        pid = self.profile_id()
        for port in MEMBER_PORTS:
            m = p4runtime_pb2.ActionProfileMember(action_profile_id=pid, member_id=port)
            m.action.action_id = self.client.index.action_id(n.ACT_SET_EGRESS)
            mac = int(member_mac(port).replace(":", ""), 16)
            for pname, value in (("port", port), ("dst_mac", mac)):
                param = self.client.index.param(n.ACT_SET_EGRESS, pname)
                m.action.params.add(param_id=param.id, value=encode(value, param.bitwidth))
            self.client.write([update("INSERT", action_profile_member=m)])
            key = p4runtime_pb2.ActionProfileMember(action_profile_id=pid, member_id=port)
            self.add_undo(lambda key=key: self.client.write([update("DELETE", action_profile_member=key)]),
                          p4rt=True)
        self.add_members_and_group(1, MEMBER_PORTS)
        self.add_members_and_group(2, (PORT_OTHER, PORT_SENDER))
        route = {n.F_DST_ADDR: Lpm(ip_int(ECMP_DST) & 0xFFFFFF00, 24)}
        self.insert(n.IPV4_LPM, route, n.ACT_SET_ECMP_GROUP, {"group": 1})
        self.assertEqual(self.check_flows(MEMBER_PORTS), set(MEMBER_PORTS), "flows spread over every member")
        self.modify(n.IPV4_LPM, route, n.ACT_SET_ECMP_GROUP, {"group": 2})
        self.check_flows((PORT_SENDER, PORT_OTHER))  # group 2 in handle order
        # A group with no ecmp entry: set_ecmp_group marked the packet to drop.
        self.modify(n.IPV4_LPM, route, n.ACT_SET_ECMP_GROUP, {"group": 3})
        self.send(PORT_SENDER, Ether(src="00:00:00:00:01:01", dst=SWITCH_MAC) / IP(src=SENDER_IP, dst=ECMP_DST)
                  / UDP(sport=1, dport=2) / (b"x" * 20))
        self.expect_nothing()

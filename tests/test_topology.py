"""Topology loader: shipped files, ports, routes, and every malformed-input error."""

from __future__ import annotations

import copy
from pathlib import Path

import networkx as nx
import pytest
import yaml

from safs.core import ecmp
from safs.core.errors import InvalidInput
from safs.core.topology import build_topology, load_topology, parse_rate

TOPO_DIR = Path(__file__).resolve().parents[1] / "topologies"

BASE = {
    "name": "t",
    "defaults": {"rate": "100Gbps", "delay_ns": 500},
    "switches": ["s1", "s2"],
    "hosts": {"h1": {"ip": "10.0.0.1", "switch": "s1"}, "h2": {"ip": "10.0.0.2", "switch": "s2"}},
    "links": [{"a": "s1", "b": "s2", "rate": "400Gbps"}],
}


def _variant(**changes):
    raw = copy.deepcopy(BASE)
    raw.update(changes)
    return raw


@pytest.mark.parametrize("name", ["afd-16a2f", "zerobubble-pp", "leaf-spine"])
def test_shipped_topologies_load_and_route_everywhere(name):
    topo = load_topology(TOPO_DIR / f"{name}.yaml")
    assert nx.is_connected(topo.graph)
    for h in topo.hosts():
        assert topo.graph.nodes[h]["kind"] == "host"
        assert topo.host_ip(h) >> 16 == (10 << 8)  # 10.0.x.y
        assert topo.ip_to_host[topo.host_ip(h)] == h
    hosts = topo.hosts()
    for src in hosts[:3]:
        for dst in hosts:
            path = topo.path(src, dst)
            assert path[0] == src and path[-1] == dst
            # Hosts never forward: only the ends of a path are hosts.
            assert all(not topo.is_host(n) for n in path[1:-1])
            if src != dst:
                assert len(path) - 1 == nx.shortest_path_length(
                    topo.graph.subgraph([n for n in topo.graph if n in (src, dst) or not topo.is_host(n)]), src, dst)


def test_afd_topology_has_16_attention_2_ffn_and_background_on_one_tor():
    topo = load_topology(TOPO_DIR / "afd-16a2f.yaml")
    hosts = set(topo.hosts())
    assert {f"a{i}" for i in range(16)} <= hosts and {"f0", "f1"} <= hosts
    bg = [h for h in hosts if h.startswith("bg")]
    assert 2 <= len(bg) <= 5
    assert {topo.tor_of(h) for h in hosts} == {"tor0"}


def test_zerobubble_stage_transfers_cross_the_fabric():
    topo = load_topology(TOPO_DIR / "zerobubble-pp.yaml")
    for s in range(3):
        assert topo.tor_of(f"stage{s}") != topo.tor_of(f"stage{s + 1}")
    # Background hosts reach every stage's receiver link.
    for bg in [h for h in topo.hosts() if h.startswith("bg")]:
        for s in range(4):
            assert topo.path(bg, f"stage{s}")[-2] == topo.tor_of(f"stage{s}")


def test_ports_are_deterministic_and_consistent():
    a = load_topology(TOPO_DIR / "leaf-spine.yaml")
    b = load_topology(TOPO_DIR / "leaf-spine.yaml")
    for sw in a.switches():
        ports = a.ports(sw)
        assert ports == b.ports(sw)
        assert sorted(ports) == list(range(1, len(ports) + 1))
        for port, nb in ports.items():
            assert a.port_of(sw, nb) == port
            assert a.neighbor_at(sw, port) == nb
    # Hosts first, in file order: h0 on port 1 of leaf0.
    assert a.port_of("leaf0", "h0") == 1 and a.port_of("leaf0", "h3") == 4


def test_routes_one_slash32_per_host_towards_it():
    topo = load_topology(TOPO_DIR / "leaf-spine.yaml")
    for sw in topo.switches():
        routes = topo.routes(sw)
        assert len(routes) == len(topo.hosts())
        for prefix, plen, ports in routes:
            assert plen == 32 and list(ports) == sorted(ports)
            dst = topo.ip_to_host[prefix]
            for port in ports:
                nb = topo.neighbor_at(sw, port)
                # One step closer to the destination.
                assert nx.shortest_path_length(topo.graph, nb, dst) == nx.shortest_path_length(topo.graph, sw, dst) - 1


def test_ecmp_groups_hold_every_equal_cost_next_hop():
    topo = load_topology(TOPO_DIR / "leaf-spine.yaml")
    ups = (topo.port_of("leaf0", "spine0"), topo.port_of("leaf0", "spine1"))
    assert topo.next_hop_ports("leaf0", "h4") == ups
    assert topo.next_hop_ports("leaf0", "h1") == (topo.port_of("leaf0", "h1"),)
    assert topo.next_hop_ports("spine1", "h4") == (topo.port_of("spine1", "leaf1"),)
    # grant_route's single next hop: the lowest port (spine0's link comes first in the file).
    assert topo.next_hop_port("leaf0", "h4") == topo.port_of("leaf0", "spine0")


def test_single_path_routing_keeps_the_lowest_port():
    raw = yaml.safe_load((TOPO_DIR / "leaf-spine.yaml").read_text())
    topo = build_topology({**raw, "routing": "single-path"})
    assert topo.next_hop_ports("leaf0", "h4") == (topo.port_of("leaf0", "spine0"),)
    with pytest.raises(InvalidInput, match="routing: must be one of ecmp, single-path, got 'random'"):
        build_topology({**raw, "routing": "random"})


def test_crc16_is_bmv2s_crc16_arc():
    assert ecmp.crc16(b"123456789") == 0xBB3D  # CRC-16/ARC check value
    assert ecmp.crc16(b"") == 0


def test_flow_path_follows_the_hash_and_spreads_flows():
    topo = load_topology(TOPO_DIR / "leaf-spine.yaml")
    spines = set()
    for sport in range(1024, 1088):
        path = topo.path("h0", "h4", (17, sport, 23285))
        h = ecmp.flow_hash(topo.host_ip("h0"), topo.host_ip("h4"), 17, sport, 23285)
        ups = topo.next_hop_ports("leaf0", "h4")
        assert path[2] == topo.neighbor_at("leaf0", ups[h % len(ups)])
        spines.add(path[2])
    assert spines == {"spine0", "spine1"}
    assert topo.path("h0", "h4")[2] == "spine0"  # no flow: the lowest-port path


def test_oversubscribed_links_are_named():
    topo = load_topology(TOPO_DIR / "leaf-spine.yaml")  # 4 x 100G down, 2 x 400G up per leaf
    assert topo.oversubscribed_links() == []
    assert topo.link_load_bounds()[("leaf0", "spine0")] == 200_000_000_000  # half of 4 x 100G
    raw = yaml.safe_load((TOPO_DIR / "leaf-spine.yaml").read_text())
    single = build_topology({**raw, "routing": "single-path"})  # every leaf's uplink traffic on spine0
    names = {(a, b) for a, b, _, _ in single.oversubscribed_links()}
    assert ("leaf0", "spine0") not in names  # 400G offered, 400G rate: not over
    narrow = build_topology({**raw, "routing": "single-path",
                             "links": [{**link, "rate": "100Gbps"} for link in raw["links"]]})
    over = narrow.oversubscribed_links()
    assert ("leaf0", "spine0", 400_000_000_000, 100_000_000_000) in over
    assert all(b != "spine1" for _, b, _, _ in over)  # spine1 carries nothing


def test_link_attributes_and_overrides():
    raw = _variant(hosts={"h1": {"ip": "10.0.0.1", "switch": "s1", "rate": "25Gbps", "delay_ns": 7},
                          "h2": {"ip": "10.0.0.2", "switch": "s2"}})
    topo = build_topology(raw)
    assert topo.host_link_bps("h1") == 25_000_000_000
    assert topo.link("h1", "s1")["delay_ns"] == 7
    assert topo.host_link_bps("h2") == 100_000_000_000
    assert topo.link("s1", "s2")["rate_bps"] == 400_000_000_000
    assert topo.receiver_capacity_bps() == {"h1": 25_000_000_000, "h2": 100_000_000_000}
    assert topo.tor_of("h2") == "s2"


@pytest.mark.parametrize("text,bps", [("100Gbps", 10**11), ("1.5Gbit/s", 1_500_000_000), ("10Mbps", 10**7),
                                      ("400 Gb/s", 4 * 10**11), ("1Tbps", 10**12), (12345, 12345), ("800bps", 800)])
def test_parse_rate(text, bps):
    assert parse_rate(text, "r") == bps


@pytest.mark.parametrize("bad", ["fast", "100", "100GBps!", "-1Gbps", 0, -5, True, None, 1.5, "0Gbps"])
def test_parse_rate_rejects(bad):
    with pytest.raises(InvalidInput) as exc:
        parse_rate(bad, "links[0].rate", "f.yaml")
    assert exc.value.field == "links[0].rate" and exc.value.source == "f.yaml"


BAD_CASES = [
    ({"links": [{"a": "s1", "b": "nope"}]}, "links[0].b", "unknown switch"),
    ({"links": [{"a": "s1", "b": "h2"}]}, "links[0].b", "is a host"),
    ({"links": [{"a": "s1", "b": "s1"}]}, "links[0]", "itself"),
    ({"links": [{"a": "s1", "b": "s2"}, {"a": "s2", "b": "s1"}]}, "links[1]", "duplicate link"),
    ({"links": [{"a": "s1", "b": "s2", "rate": "quick"}]}, "links[0].rate", "rate"),
    ({"links": [{"a": "s1", "b": "s2", "speed": 1}]}, "links[0].speed", "unknown key"),
    ({"links": []}, "links", "disconnected"),
    ({"hosts": {"h1": {"ip": "10.0.0.1", "switch": "s1"}, "h2": {"ip": "10.0.0.1", "switch": "s2"}}},
     "hosts.h2.ip", "duplicate IP"),
    ({"hosts": {"h1": {"ip": "10.0.0.300", "switch": "s1"}}}, "hosts.h1.ip", "IPv4"),
    ({"hosts": {"h1": {"ip": "10.0.0.1", "switch": "h2"}, "h2": {"ip": "10.0.0.2", "switch": "s1"}}},
     "hosts.h1.switch", "is a host"),
    ({"hosts": {"h1": {"ip": "10.0.0.1", "switch": "s9"}}}, "hosts.h1.switch", "unknown switch"),
    ({"hosts": {"h1": {"switch": "s1"}}}, "hosts.h1.ip", "missing"),
    ({"hosts": {"s1": {"ip": "10.0.0.1", "switch": "s2"}}}, "hosts.s1", "already used"),
    ({"hosts": {}}, "hosts", "non-empty"),
    ({"switches": ["s1", "s1"]}, "switches[1]", "duplicate"),
    ({"switches": []}, "switches", "non-empty"),
    ({"defaults": {"delay_ns": -1}}, "defaults.delay_ns", ">= 0"),
    ({"defaults": {"buffer_bytes": 0}}, "defaults.buffer_bytes", ">= 1"),
    ({"name": "has space"}, "name", "characters"),
    ({"extra": 1}, "extra", "unknown key"),
]


@pytest.mark.parametrize("changes,field,words", BAD_CASES)
def test_malformed_files_name_file_key_and_expectation(tmp_path, changes, field, words):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_variant(**changes)))
    with pytest.raises(InvalidInput) as exc:
        load_topology(path)
    assert exc.value.field == field
    assert words in exc.value.message
    assert exc.value.source == str(path)
    assert str(path) in str(exc.value)


def test_missing_top_level_key(tmp_path):
    raw = copy.deepcopy(BASE)
    del raw["switches"]
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InvalidInput, match="missing required key") as exc:
        load_topology(path)
    assert exc.value.field == "switches"


def test_unreadable_and_bad_yaml(tmp_path):
    with pytest.raises(InvalidInput, match="cannot read"):
        load_topology(tmp_path / "absent.yaml")
    bad = tmp_path / "b.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(InvalidInput, match="YAML"):
        load_topology(bad)
    notmap = tmp_path / "c.yaml"
    notmap.write_text("- 1\n- 2\n")
    with pytest.raises(InvalidInput, match="mapping"):
        load_topology(notmap)


def test_unknown_host_or_switch_lookups():
    topo = build_topology(copy.deepcopy(BASE))
    with pytest.raises(InvalidInput):
        topo.host_ip("zz")
    with pytest.raises(InvalidInput):
        topo.next_hop_port("h1", "h2")  # h1 is not a switch
    with pytest.raises(InvalidInput):
        topo.port_of("s1", "h2")  # not adjacent

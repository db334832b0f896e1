"""Topology files: YAML -> networkx graph with host addresses, switch ports and routes.

File format (all keys except ``defaults`` and ``links`` are required)::

    name: afd-16a2f                   # [A-Za-z0-9_.-]{1,64}
    defaults:                         # optional; applies to every host link and fabric link
      rate: 100Gbps                   # "<number><unit>" with unit bps|Kbps|Mbps|Gbps|Tbps
                                      #   (or "Gbit/s" style), or an integer bit/s
      delay_ns: 500                   # one-way propagation delay of a link, integer ns >= 0
      buffer_bytes: 1048576           # shared buffer per switch egress port, integer bytes > 0
    routing: ecmp                     # optional: ecmp (default) or single-path
    switches: [tor0, spine0]          # switch names (unique)
    hosts:                            # host name -> attachment
      a0: {ip: 10.0.0.1, switch: tor0}            # IPv4, unique; the switch it hangs off
      f0: {ip: 10.0.1.1, switch: tor0, rate: 200Gbps, delay_ns: 300}   # per-link override
    links:                            # switch-to-switch links (hosts attach via `switch`)
      - {a: tor0, b: spine0, rate: 400Gbps, delay_ns: 500}

Built-in defaults when ``defaults`` omits a key: rate 100 Gbit/s, delay 500 ns (about 100 m of
fibre), buffer 1 MiB per port. Switch ports are numbered from 1 per switch in file order: first
the hosts attached to it (in the order of ``hosts``), then its links (in the order of
``links``). Routing is shortest path by hop count. With ``routing: ecmp`` every equal-cost next
hop is used: the switch hashes each packet's 5-tuple (:mod:`safs.core.ecmp`, the P4 program's
action selector) and :meth:`Topology.path` predicts the path a given 5-tuple takes; with
``routing: single-path`` the lowest port wins (one path per host pair). Hosts never forward.

Errors: a malformed file raises :class:`safs.core.errors.InvalidInput` with ``source`` = the file,
``field`` = the key path (``hosts.a3.ip``) and a message saying what was expected.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import networkx as nx

from safs.core import ecmp
from safs.core.errors import InvalidInput
from safs.core.files import load_yaml
from safs.core.protocol import WIRE_OVERHEAD_BYTES

DEFAULT_RATE_BPS = 100_000_000_000  # 100 Gbit/s
DEFAULT_DELAY_NS = 500  # ~100 m of fibre at 5 ns/m
DEFAULT_BUFFER_BYTES = 1 << 20  # 1 MiB per egress port

_RATE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]?)(?:bps|bit/s|b/s)\s*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

NS_PER_S = 1_000_000_000
_DATA_HEADERS_IN_MTU = WIRE_OVERHEAD_BYTES - 14  # IPv4 + UDP + SAFS: the part inside the IP MTU

HOST = "host"
SWITCH = "switch"
ROUTING_MODES = ("ecmp", "single-path")


def parse_rate(value: Any, field_name: str, source: str | None = None) -> int:
    """Parse a link rate into integer bit/s.

    Accepts a positive integer (bit/s) or a string ``"<number><unit>"`` with unit ``bps``,
    ``Kbps``, ``Mbps``, ``Gbps``, ``Tbps`` (or ``Gbit/s``, ``Gb/s``), decimal prefixes.

    Raises:
        InvalidInput: not a positive rate of at least 1 bit/s.
    """
    if isinstance(value, bool):
        value = None  # bool is an int subclass; reject it below
    if isinstance(value, int):
        if value <= 0:
            raise InvalidInput(field_name, f"rate must be > 0 bit/s, got {value}", source)
        return value
    if isinstance(value, str):
        m = _RATE_RE.match(value)
        if m:
            bps = round(float(m.group(1)) * _RATE_UNITS[m.group(2).lower()])
            if bps > 0:
                return int(bps)
    raise InvalidInput(field_name, f"expected a rate such as \"100Gbps\" or an integer bit/s > 0, got {value!r}",
                       source)


def _int_field(value: Any, field_name: str, minimum: int, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(field_name, f"expected an integer >= {minimum}, got {value!r}", source)
    return value


def _check_keys(mapping: Any, allowed: set[str], required: set[str], where: str, source: str) -> dict[str, Any]:
    if not isinstance(mapping, dict):
        raise InvalidInput(where or "<top level>", f"expected a mapping, got {type(mapping).__name__}", source)
    for key in mapping:
        if key not in allowed:
            raise InvalidInput(f"{where}.{key}" if where else str(key),
                               f"unknown key; allowed: {', '.join(sorted(allowed))}", source)
    for key in sorted(required):
        if key not in mapping:
            raise InvalidInput(f"{where}.{key}" if where else key, "missing required key", source)
    return mapping


@dataclass
class Topology:
    """A loaded topology.

    Attributes:
        name: the file's ``name``.
        graph: undirected ``nx.Graph``. Node attributes: ``kind`` (``"host"``|``"switch"``),
            ``ip`` (int, hosts only), ``buffer_bytes`` (switches only). Edge attributes:
            ``rate_bps`` (int), ``delay_ns`` (int), ``ports`` (dict switch name -> port number).
        source: the file it came from ("" when built in memory).
        mtu_bytes: the fabric's largest IP packet, bytes, the default of
            :meth:`min_transfer_ns`; the runner sets it to the run's ``sim.mtu_bytes`` before it
            builds the workload, so ideal times and no-bubble floors use the MTU the run uses.
        routing: ``"ecmp"`` (every equal-cost next hop, chosen per packet by the 5-tuple hash)
            or ``"single-path"`` (the lowest port).
    """

    name: str
    graph: nx.Graph
    source: str = ""
    mtu_bytes: int = 9000
    routing: str = "ecmp"
    _ip_to_host: dict[int, str] = field(default_factory=dict, repr=False)
    _next_hop: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict, repr=False)
    _path_cost: dict[tuple[str, str], tuple[int, int, list[int]]] = field(default_factory=dict, repr=False)

    # networkx is untyped: the accessors below cast node and edge attributes to the types
    # the loader checked.

    def hosts(self) -> list[str]:
        """Host names in file order."""
        return [n for n, d in self.graph.nodes(data=True) if d["kind"] == HOST]

    def switches(self) -> list[str]:
        """Switch names in file order."""
        return [n for n, d in self.graph.nodes(data=True) if d["kind"] == SWITCH]

    def is_host(self, name: str) -> bool:
        return name in self.graph and self.graph.nodes[name]["kind"] == HOST

    def _require_host(self, name: str) -> None:
        if not self.is_host(name):
            raise InvalidInput("host", f"unknown host {name!r}; hosts: {', '.join(self.hosts())}", self.source)

    def host_ip(self, name: str) -> int:
        """IPv4 address of host ``name`` as an int. Raises InvalidInput for an unknown host."""
        self._require_host(name)
        return cast(int, self.graph.nodes[name]["ip"])

    @property
    def ip_to_host(self) -> dict[int, str]:
        """Map IPv4 int -> host name."""
        return dict(self._ip_to_host)

    def tor_of(self, host: str) -> str:
        """The switch host ``host`` is attached to. Raises InvalidInput for an unknown host."""
        self._require_host(host)
        return cast(str, next(iter(self.graph.neighbors(host))))

    def host_link_bps(self, host: str) -> int:
        """Rate of the host's access link in bit/s (its uplink and its receiver link)."""
        return cast(int, self.graph.edges[host, self.tor_of(host)]["rate_bps"])

    def link(self, a: str, b: str) -> dict[str, Any]:
        """Edge attributes of link a-b (``rate_bps``, ``delay_ns``, ``ports``).

        Raises:
            InvalidInput: no such link.
        """
        if not self.graph.has_edge(a, b):
            raise InvalidInput("link", f"no link between {a!r} and {b!r}", self.source)
        return cast("dict[str, Any]", self.graph.edges[a, b])

    def port_of(self, switch: str, neighbor: str) -> int:
        """Port number (1-based) of ``switch`` facing ``neighbor``.

        Raises:
            InvalidInput: ``switch`` is not a switch or has no link to ``neighbor``.
        """
        if switch not in self.graph or self.graph.nodes[switch]["kind"] != SWITCH:
            raise InvalidInput("switch", f"unknown switch {switch!r}", self.source)
        return cast(int, self.link(switch, neighbor)["ports"][switch])

    def neighbor_at(self, switch: str, port: int) -> str:
        """The node on ``port`` of ``switch``. Raises InvalidInput for an unused port."""
        for nb in self.graph.neighbors(switch):
            if self.graph.edges[switch, nb]["ports"][switch] == port:
                return cast(str, nb)
        raise InvalidInput("port", f"switch {switch!r} has no port {port}", self.source)

    def ports(self, switch: str) -> dict[int, str]:
        """All ports of ``switch``: port number -> neighbor name, ascending."""
        out = {self.graph.edges[switch, nb]["ports"][switch]: nb for nb in self.graph.neighbors(switch)}
        return dict(sorted(out.items()))

    def _table_to(self, dst_host: str) -> dict[str, tuple[int, ...]]:
        """Equal-cost next-hop ports (ascending) at every switch towards ``dst_host`` (cached)."""
        table = self._next_hop.get(dst_host)
        if table is not None:
            return table
        # Hosts other than the destination are not transit nodes.
        transit = self.graph.subgraph([n for n in self.graph if n == dst_host or not self.is_host(n)])
        dist = nx.single_source_shortest_path_length(transit, dst_host)
        table = {}
        for sw in self.switches():
            if sw not in dist:
                continue
            ports = sorted(self.graph.edges[sw, nb]["ports"][sw] for nb in transit.neighbors(sw)
                           if dist.get(nb, -2) == dist[sw] - 1)
            table[sw] = tuple(ports) if self.routing == "ecmp" else tuple(ports[:1])
        self._next_hop[dst_host] = table
        return table

    def _require_switch(self, switch: str) -> None:
        if switch not in self.graph or self.graph.nodes[switch]["kind"] != SWITCH:
            raise InvalidInput("switch", f"unknown switch {switch!r}", self.source)

    def next_hop_ports(self, switch: str, dst_host: str) -> tuple[int, ...]:
        """Egress ports at ``switch`` on shortest paths to ``dst_host``, ascending: all of them
        under ``routing: ecmp`` (the switch's ECMP group), the lowest under ``single-path``."""
        self._require_host(dst_host)
        self._require_switch(switch)
        return self._table_to(dst_host)[switch]

    def next_hop_port(self, switch: str, dst_host: str) -> int:
        """The lowest egress port at ``switch`` on a shortest path to ``dst_host`` (the route
        back for switch-generated GRANTs, ``grant_route``, which does not hash)."""
        return self.next_hop_ports(switch, dst_host)[0]

    def path(self, src_host: str, dst_host: str, flow: tuple[int, int, int] | None = None) -> list[str]:
        """Node names from ``src_host`` to ``dst_host`` along the installed routes.

        Args:
            flow: ``(protocol, l4_src_port, l4_dst_port)`` of the packets: the path the switches'
                ECMP hash gives them (:mod:`safs.core.ecmp`). None: the lowest-port path (the same
                as any flow's where every route has one next hop).
        """
        self._require_host(src_host)
        self._require_host(dst_host)
        nodes = [src_host]
        if src_host == dst_host:
            return nodes
        h = 0 if flow is None else ecmp.flow_hash(self.host_ip(src_host), self.host_ip(dst_host), *flow)
        node = self.tor_of(src_host)
        while node != dst_host:
            nodes.append(node)
            ports = self._table_to(dst_host)[node]
            node = self.neighbor_at(node, ecmp.select(ports, h) if flow is not None else ports[0])
        nodes.append(dst_host)
        return nodes

    def routes(self, switch: str) -> list[tuple[int, int, tuple[int, ...]]]:
        """LPM routes for ``switch``: ``(prefix_int, prefix_len, ports)``, one /32 per host, by IP;
        ``ports`` the next hops (:meth:`next_hop_ports`; more than one: an ECMP group)."""
        return [(self.host_ip(h), 32, self.next_hop_ports(switch, h))
                for h in sorted(self.hosts(), key=self.host_ip)]

    def link_load_bounds(self) -> dict[tuple[str, str], int]:
        """For every directed switch-to-switch link ``(a, b)``: the most traffic, bit/s, the hosts
        can offer it under perfectly balanced ECMP (the hose model: every host sends and receives
        at most its access rate). A source host contributes its rate times the largest share of
        its traffic to any destination that the routes put on the link (equal split at every
        ECMP group), a destination likewise; the bound is the smaller of the two sums.

        Used by :meth:`oversubscribed_links`. ECMP hashes flows, it does not split them, so a
        link under its bound can still be congested by hash collisions.
        """
        src_share: dict[tuple[str, str], dict[str, float]] = {}
        dst_share: dict[tuple[str, str], dict[str, float]] = {}
        hosts = self.hosts()
        for dst in hosts:
            table = self._table_to(dst)
            for src in hosts:
                if src == dst:
                    continue
                frontier = {self.tor_of(src): 1.0}
                while frontier:
                    nxt: dict[str, float] = {}
                    for sw, share in frontier.items():
                        ports = table[sw]
                        for port in ports:
                            nb = self.neighbor_at(sw, port)
                            if self.is_host(nb):
                                continue
                            part = share / len(ports)
                            s = src_share.setdefault((sw, nb), {})
                            s[src] = max(s.get(src, 0.0), part)
                            d = dst_share.setdefault((sw, nb), {})
                            d[dst] = max(d.get(dst, 0.0), part)
                            nxt[nb] = nxt.get(nb, 0.0) + part
                    frontier = nxt
        return {link: int(min(sum(self.host_link_bps(h) * f for h, f in src_share[link].items()),
                              sum(self.host_link_bps(h) * f for h, f in dst_share[link].items())))
                for link in src_share}

    def oversubscribed_links(self) -> list[tuple[str, str, int, int]]:
        """Directed switch-to-switch links that can be offered more than their rate:
        ``(a, b, load_bound_bps, rate_bps)`` (:meth:`link_load_bounds`), sorted. Empty: the core is
        non-blocking under balanced ECMP, so only host links (which the allocator shares out)
        bind. The scheduler warns with these names (BRIEF: the non-blocking-core assumption is
        checked)."""
        out = []
        for (a, b), load in sorted(self.link_load_bounds().items()):
            rate = cast(int, self.graph.edges[a, b]["rate_bps"])
            if load > rate:
                out.append((a, b, load, rate))
        return out

    def min_transfer_ns(self, src_host: str, dst_host: str, size_bytes: int, mtu_bytes: int | None = None) -> int:
        """Uncontended transfer time of ``size_bytes`` of payload from ``src_host`` to ``dst_host``, ns.

        The packet-level lower bound the simulator can reach: payload in MTU-sized SAFS DATA
        packets (78 bytes of Ethernet/IPv4/UDP/SAFS headers each, docs/protocol.md) serialised
        at the slower access link, plus every link's propagation delay, plus one frame's
        store-and-forward serialisation per switch on the path. Used for ideal (no-contention)
        references and as the floor of no-bubble timestamps (a transfer cannot beat it).

        Raises:
            InvalidInput: unknown host, size < 1 or MTU too small for one payload byte.
        """
        if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 1:
            raise InvalidInput("size_bytes", f"must be an integer >= 1, got {size_bytes!r}")
        if mtu_bytes is None:
            mtu_bytes = self.mtu_bytes
        payload = mtu_bytes - _DATA_HEADERS_IN_MTU
        if payload < 1:
            raise InvalidInput("mtu_bytes", f"must exceed {_DATA_HEADERS_IN_MTU} bytes of headers, got {mtu_bytes}")
        key = (src_host, dst_host)
        if key not in self._path_cost:
            path = self.path(src_host, dst_host)
            delay = sum(self.link(a, b)["delay_ns"] for a, b in zip(path, path[1:]))
            rate = min(self.host_link_bps(src_host), self.host_link_bps(dst_host))
            # A switch forwards a frame once it has received it whole, onto the next link.
            hop_rates = [self.link(a, b)["rate_bps"] for a, b in zip(path[1:-1], path[2:])]
            self._path_cost[key] = (rate, delay, hop_rates)
        rate, delay, hop_rates = self._path_cost[key]
        packets = -(-size_bytes // payload)
        wire = size_bytes + packets * WIRE_OVERHEAD_BYTES
        frame = min(size_bytes, payload) + WIRE_OVERHEAD_BYTES
        store_forward = sum(-(-frame * 8 * NS_PER_S // r) for r in hop_rates)
        return -(-wire * 8 * NS_PER_S // rate) + delay + store_forward

    def buffer_bytes(self, switch: str) -> int:
        """Egress buffer per port of ``switch`` in bytes."""
        return cast(int, self.graph.nodes[switch]["buffer_bytes"])

    def receiver_capacity_bps(self) -> dict[str, int]:
        """Host name -> access link rate (the receiver link the allocator shares out)."""
        return {h: self.host_link_bps(h) for h in self.hosts()}


def build_topology(raw: Any, source: str = "") -> Topology:
    """Validate a parsed topology mapping (see module docstring) and build the graph.

    Raises:
        InvalidInput: any malformed or inconsistent entry, naming ``source`` and the key.
    """
    src = source
    _check_keys(raw, {"name", "defaults", "routing", "switches", "hosts", "links"}, {"name", "switches", "hosts"},
                "", src)
    name = raw["name"]
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidInput("name", f"expected 1-64 characters of [A-Za-z0-9_.-], got {name!r}", src)
    routing = raw.get("routing", "ecmp")
    if routing not in ROUTING_MODES:
        raise InvalidInput("routing", f"must be one of {', '.join(ROUTING_MODES)}, got {routing!r}", src)
    defaults = _check_keys(raw.get("defaults") or {}, {"rate", "delay_ns", "buffer_bytes"}, set(), "defaults", src)
    rate0 = parse_rate(defaults.get("rate", DEFAULT_RATE_BPS), "defaults.rate", src)
    delay0 = _int_field(defaults.get("delay_ns", DEFAULT_DELAY_NS), "defaults.delay_ns", 0, src)
    buffer0 = _int_field(defaults.get("buffer_bytes", DEFAULT_BUFFER_BYTES), "defaults.buffer_bytes", 1, src)

    g = nx.Graph()
    switches = raw["switches"]
    if not isinstance(switches, list) or not switches:
        raise InvalidInput("switches", "expected a non-empty list of switch names", src)
    for i, sw in enumerate(switches):
        if not isinstance(sw, str) or not _NAME_RE.match(sw):
            raise InvalidInput(f"switches[{i}]", f"expected a name of [A-Za-z0-9_.-]{{1,64}}, got {sw!r}", src)
        if sw in g:
            raise InvalidInput(f"switches[{i}]", f"duplicate switch {sw!r}", src)
        g.add_node(sw, kind=SWITCH, buffer_bytes=buffer0)

    hosts = raw["hosts"]
    if not isinstance(hosts, dict) or not hosts:
        raise InvalidInput("hosts", "expected a non-empty mapping host name -> {ip, switch}", src)
    next_port = {sw: 1 for sw in switches}
    ip_to_host: dict[int, str] = {}
    for h, spec in hosts.items():
        where = f"hosts.{h}"
        if not isinstance(h, str) or not _NAME_RE.match(h):
            raise InvalidInput(where, "host names must be 1-64 characters of [A-Za-z0-9_.-]", src)
        if h in g:
            raise InvalidInput(where, f"name {h!r} is already used by a switch", src)
        _check_keys(spec, {"ip", "switch", "rate", "delay_ns"}, {"ip", "switch"}, where, src)
        try:
            ip = int(ipaddress.IPv4Address(str(spec["ip"])))
        except ValueError:
            raise InvalidInput(f"{where}.ip", f"expected a dotted IPv4 address like 10.0.0.1, got {spec['ip']!r}",
                               src) from None
        if ip == 0 or ip == 0xFFFFFFFF:
            raise InvalidInput(f"{where}.ip", f"not a unicast address: {spec['ip']}", src)
        if ip in ip_to_host:
            raise InvalidInput(f"{where}.ip", f"duplicate IP {spec['ip']} (also {ip_to_host[ip]})", src)
        sw = spec["switch"]
        if sw in hosts:
            raise InvalidInput(f"{where}.switch", f"{sw!r} is a host; hosts must attach to a switch", src)
        if sw not in next_port:
            raise InvalidInput(f"{where}.switch", f"unknown switch {sw!r}; switches: {', '.join(switches)}", src)
        ip_to_host[ip] = h
        g.add_node(h, kind=HOST, ip=ip)
        g.add_edge(h, sw, rate_bps=parse_rate(spec.get("rate", rate0), f"{where}.rate", src),
                   delay_ns=_int_field(spec.get("delay_ns", delay0), f"{where}.delay_ns", 0, src),
                   ports={sw: next_port[sw]})
        next_port[sw] += 1

    links = raw.get("links") or []
    if not isinstance(links, list):
        raise InvalidInput("links", "expected a list of {a, b, rate?, delay_ns?}", src)
    for i, spec in enumerate(links):
        where = f"links[{i}]"
        _check_keys(spec, {"a", "b", "rate", "delay_ns"}, {"a", "b"}, where, src)
        a, b = spec["a"], spec["b"]
        for end, node in (("a", a), ("b", b)):
            if node in hosts:
                raise InvalidInput(f"{where}.{end}", f"{node!r} is a host; links join switches, hosts attach "
                                   f"via hosts.<name>.switch", src)
            if node not in next_port:
                raise InvalidInput(f"{where}.{end}", f"unknown switch {node!r}; switches: {', '.join(switches)}", src)
        if a == b:
            raise InvalidInput(where, f"a link cannot join {a!r} to itself", src)
        if g.has_edge(a, b):
            raise InvalidInput(where, f"duplicate link {a!r}-{b!r}", src)
        g.add_edge(a, b, rate_bps=parse_rate(spec.get("rate", rate0), f"{where}.rate", src),
                   delay_ns=_int_field(spec.get("delay_ns", delay0), f"{where}.delay_ns", 0, src),
                   ports={a: next_port[a], b: next_port[b]})
        next_port[a] += 1
        next_port[b] += 1

    if not nx.is_connected(g):
        parts = sorted((sorted(c) for c in nx.connected_components(g)), key=len)
        raise InvalidInput("links", f"graph is disconnected: {parts[0]} cannot reach the rest", src)
    return Topology(name=name, graph=g, source=src, routing=routing, _ip_to_host=ip_to_host)


def load_topology(path: str | Path) -> Topology:
    """Read a topology YAML file (format in the module docstring).

    Raises:
        InvalidInput: unreadable file, bad YAML or a malformed entry; ``source`` is the path.
    """
    path = Path(path)
    return build_topology(load_yaml(path, "topology"), source=str(path))

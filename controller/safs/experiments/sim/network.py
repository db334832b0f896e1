"""Links, ports, hosts and switches of the packet simulator.

Model (docs/simulator.md):

- A link is two one-way :class:`Port` s. A port serialises one packet at a time at
  ``rate_bps``: a packet of ``size`` bytes occupies it for ``ceil(size * 8e9 / rate_bps)`` ns and
  arrives at the peer ``delay_ns`` after its last bit left (store and forward).
- A switch port has 8 strict-priority FIFO queues (BMv2 >= 1.15.1: the highest non-empty
  priority value is served first) sharing ``buffer_bytes``; a packet that does not fit (or,
  with dynamic thresholds, would push its queue above ``dt_alpha`` x free bytes) is tail
  dropped and counted per (port, class). A host NIC is one FIFO with an unbounded buffer (host
  memory; the transports limit what they queue).
- A switch runs its pipeline's ``ingress(pkt, in_port)`` on arrival (zero pipeline latency)
  and ``egress(pkt, port, enq_qdepth)`` when the packet is enqueued, with the depth in packets
  of the queue it joins (BMv2's ``enq_qdepth``); a packet that finds its port idle and nothing
  queued starts at once with depth 0.
- The pipeline's clock is the switch-local time: simulation time minus the switch's start
  time ``start_ns`` (<= 0: switches booted before the run), so the controller has to set a real
  clock offset, as on BMv2.

Hot paths (``Port.send``, ``Port._on_free``, ``Switch.receive``) use local bindings and push
event tuples onto the engine's heap directly (no per-packet objects except the tuple).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from heapq import heappush
from typing import Any, Protocol

from safs.core.errors import InvalidInput
from safs.core.packet import Packet
from safs.core.protocol import NUM_QUEUES, MsgType
from safs.experiments.sim.engine import Engine

NS_PER_S = 1_000_000_000
UNBOUNDED_BYTES = 1 << 62  # host NIC buffer: host memory, effectively unbounded

_GRANT = int(MsgType.GRANT)
_DONE = int(MsgType.DONE)


class Pipeline(Protocol):
    """What a switch runs per packet (``safs.targets.pipeline_model.PipelineModel`` implements it)."""

    def ingress(self, pkt: Packet, in_port: int) -> list[tuple[int, Packet]]: ...

    def egress(self, pkt: Packet, egress_port: int, enq_qdepth: int) -> None: ...


class Node(Protocol):
    """Anything a port delivers packets to (host or switch)."""

    name: str

    def receive(self, pkt: Packet, in_port: int) -> None: ...


def serialization_ns(size_bytes: int, rate_bps: int) -> int:
    """Time a packet of ``size_bytes`` occupies a link of ``rate_bps``: ceil(size*8e9/rate) ns."""
    return (size_bytes * 8 * NS_PER_S + rate_bps - 1) // rate_bps


class Port:
    """One direction of a link: queues, serialiser and propagation to the peer.

    Args:
        engine: the simulator.
        owner: name of the node that owns this egress port.  number: its port number.
        rate_bps: link rate (> 0).  delay_ns: propagation delay (>= 0).
        buffer_bytes: bytes all queues of the port may hold together (> 0).
        strict: 8 strict-priority queues chosen by ``pkt.priority`` (switch port) or one FIFO
            (host NIC).
        egress: the pipeline's ``egress`` hook, called at enqueue (switch ports), or None.
        dt_alpha: dynamic-threshold admission (Choudhury and Hahne, "Dynamic queue length
            thresholds for shared-memory packet switches", IEEE/ACM ToN 1998): a queue may
            grow only while its bytes stay <= dt_alpha * (free buffer bytes); 0 turns it off
            (plain shared buffer).

    Counters: ``tx_packets``, ``tx_bytes``, ``drops`` (list of 8, per class), ``drop_bytes``.

    Raises:
        InvalidInput: rate, delay or buffer out of range.
    """

    __slots__ = ("engine", "owner", "number", "rate_bps", "delay_ns", "buffer_bytes", "strict",
                 "queues", "queued_bytes", "queued_packets", "busy_until", "wake_pending",
                 "peer", "peer_port", "egress", "tx_packets", "tx_bytes", "drops", "drop_bytes",
                 "class_bytes", "dt_alpha")

    def __init__(self, engine: Engine, owner: str, number: int, rate_bps: int, delay_ns: int,
                 buffer_bytes: int, strict: bool,
                 egress: Callable[[Packet, int, int], None] | None = None, dt_alpha: float = 0.0) -> None:
        if type(rate_bps) is not int or rate_bps <= 0:
            raise InvalidInput(f"{owner}.port{number}.rate_bps", f"must be an integer > 0 bit/s, got {rate_bps!r}")
        if type(delay_ns) is not int or delay_ns < 0:
            raise InvalidInput(f"{owner}.port{number}.delay_ns", f"must be an integer >= 0 ns, got {delay_ns!r}")
        if type(buffer_bytes) is not int or buffer_bytes <= 0:
            raise InvalidInput(f"{owner}.port{number}.buffer_bytes",
                               f"must be an integer > 0 bytes, got {buffer_bytes!r}")
        self.engine = engine
        self.owner = owner
        self.number = number
        self.rate_bps = rate_bps
        self.delay_ns = delay_ns
        self.buffer_bytes = buffer_bytes
        self.strict = strict
        self.queues: list[deque[Packet]] = [deque() for _ in range(NUM_QUEUES if strict else 1)]
        self.queued_bytes = 0
        self.queued_packets = 0
        self.busy_until = 0  # ns: the serialiser is busy until then
        self.wake_pending = False  # an _on_free event is queued
        self.peer: Node | None = None
        self.peer_port = 0
        self.egress = egress
        self.tx_packets = 0
        self.tx_bytes = 0
        self.drops = [0] * NUM_QUEUES
        self.drop_bytes = 0
        self.class_bytes = [0] * len(self.queues)
        self.dt_alpha = dt_alpha

    def send(self, pkt: Packet) -> bool:
        """Enqueue ``pkt`` (class ``pkt.priority`` on a switch port); False when tail dropped."""
        engine = self.engine
        now = engine.now
        size = pkt.size
        if self.queued_packets == 0 and now >= self.busy_until:
            if self.egress is not None:
                self.egress(pkt, self.number, 0)
            # Start serialising now: the port is busy for serialization_ns(size), then the packet
            # arrives at the peer delay_ns later (inlined: this runs once per packet per hop).
            rate = self.rate_bps
            end = now + (pkt.size * 8_000_000_000 + rate - 1) // rate
            self.busy_until = end
            self.tx_packets += 1
            self.tx_bytes += pkt.size
            engine._seq += 1
            heappush(engine._queue, (end + self.delay_ns, engine._seq, self._arrive, pkt))
            return True
        prio = pkt.priority if self.strict else 0
        free = self.buffer_bytes - self.queued_bytes
        if size > free or (self.dt_alpha and self.class_bytes[prio] + size > self.dt_alpha * free):
            self.drops[prio] += 1
            self.drop_bytes += size
            return False
        queue = self.queues[prio]
        if self.egress is not None:
            self.egress(pkt, self.number, len(queue))
        queue.append(pkt)
        self.class_bytes[prio] += size
        self.queued_bytes += size
        self.queued_packets += 1
        if not self.wake_pending:
            self.wake_pending = True
            engine._seq += 1
            heappush(engine._queue, (self.busy_until, engine._seq, self._on_free, None))
        return True

    def _on_free(self, _: Any) -> None:
        self.wake_pending = False
        if self.queued_packets == 0:
            return
        queues = self.queues
        i = len(queues) - 1
        while not queues[i]:
            i -= 1
        pkt = queues[i].popleft()
        size = pkt.size
        self.class_bytes[i] -= size
        self.queued_bytes -= size
        self.queued_packets -= 1
        engine = self.engine
        # Serialise the head packet (as in send's idle-port case).
        rate = self.rate_bps
        end = engine.now + (size * 8_000_000_000 + rate - 1) // rate
        self.busy_until = end
        self.tx_packets += 1
        self.tx_bytes += size
        engine._seq += 1
        heappush(engine._queue, (end + self.delay_ns, engine._seq, self._arrive, pkt))
        if self.queued_packets:
            self.wake_pending = True
            engine._seq += 1
            heappush(engine._queue, (self.busy_until, engine._seq, self._on_free, None))

    def _schedule_wake(self) -> None:
        """Queue one :meth:`_on_free` for when the serialiser is free (for subclasses with their
        own queue; :meth:`send` inlines it)."""
        if not self.wake_pending:
            self.wake_pending = True
            engine = self.engine
            engine._seq += 1
            heappush(engine._queue, (self.busy_until, engine._seq, self._on_free, None))

    def _transmit(self, pkt: Packet, now: int) -> None:
        """Serialise ``pkt`` from ``now`` (for subclasses with their own queue; :meth:`send` and
        :meth:`_on_free` inline the same steps, as they run once per packet per hop)."""
        rate = self.rate_bps
        end = now + (pkt.size * 8_000_000_000 + rate - 1) // rate
        self.busy_until = end
        self.tx_packets += 1
        self.tx_bytes += pkt.size
        engine = self.engine
        engine._seq += 1
        heappush(engine._queue, (end + self.delay_ns, engine._seq, self._arrive, pkt))

    def _arrive(self, pkt: Packet) -> None:
        self.peer.receive(pkt, self.peer_port)  # type: ignore[union-attr]

    def dropped(self) -> int:
        """Packets tail dropped at this port (all classes)."""
        return sum(self.drops)


class Endpoint(Protocol):
    """A transport endpoint on a host (sender or receiver side of one flow)."""

    def receive(self, pkt: Packet) -> None: ...


class Host:
    """An end host: one NIC and the transport endpoints of its flows.

    Packets are handed to ``dependencies[dep_id]`` (SAFS GRANTs of a dependency registered
    there), ``senders[flow_id]`` (SAFS GRANT/DONE, TCP pure ACKs) or ``receivers[flow_id]``
    (everything else); packets of no known flow are counted in ``unmatched`` and dropped.
    """

    __slots__ = ("name", "ip", "nic", "senders", "receivers", "dependencies", "unmatched")

    def __init__(self, name: str, ip: int) -> None:
        self.name = name
        self.ip = ip
        self.nic: Port | None = None
        self.senders: dict[int, Endpoint] = {}
        self.receivers: dict[int, Endpoint] = {}
        self.dependencies: dict[int, Endpoint] = {}  # SAFS dependency id -> its sender side
        self.unmatched = 0

    def receive(self, pkt: Packet, in_port: int) -> None:
        t = pkt.safs_type
        if t:  # SAFS (UDP); other UDP (RoCEv2-identity DCTCP) is told apart as TCP is
            to_sender = t == _GRANT or t == _DONE
            if t == _GRANT:  # a GRANT is for the dependency, whichever of its transfers it names
                dep = self.dependencies.get(pkt.dep_id)
                if dep is not None:
                    dep.receive(pkt)
                    return
        else:
            to_sender = pkt.payload == 0
        ep = (self.senders if to_sender else self.receivers).get(pkt.flow_id)
        if ep is None:
            self.unmatched += 1
            return
        ep.receive(pkt)


class Switch:
    """A switch: ports by number and a pipeline deciding each packet's egress port and class.

    Args:
        name: switch name.  pipeline: per-packet ingress/egress (e.g. a PipelineModel).
        start_ns: simulation time at which the switch booted (<= 0); its pipeline clock reads
            ``engine.now - start_ns``.

    Packets the pipeline sends to a port the switch does not have are counted in
    ``no_port_drops``.
    """

    __slots__ = ("name", "pipeline", "ports", "start_ns", "no_port_drops", "_ingress")

    def __init__(self, name: str, pipeline: Pipeline, start_ns: int = 0) -> None:
        self.name = name
        self.pipeline = pipeline
        self.ports: dict[int, Port] = {}
        self.start_ns = start_ns
        self.no_port_drops = 0
        self._ingress = pipeline.ingress

    def receive(self, pkt: Packet, in_port: int) -> None:
        ports = self.ports
        for port, out in self._ingress(pkt, in_port):
            p = ports.get(port)
            if p is None:
                self.no_port_drops += 1
            else:
                p.send(out)


class Network:
    """Hosts, switches and links on one engine.

    Build it with :meth:`add_host`, :meth:`add_switch` and :meth:`connect`, or from a
    topology with :func:`safs.experiments.sim.network.build_network`.
    """

    def __init__(self, engine: Engine, dt_alpha: float = 0.0, make_port: Callable[..., Port] = Port) -> None:
        self.engine = engine
        self.dt_alpha = dt_alpha  # dynamic-threshold alpha of every switch port (0 = off)
        self.make_port = make_port  # builds every port, Port's signature (e.g. pFabric's ports)
        self.hosts: dict[str, Host] = {}
        self.switches: dict[str, Switch] = {}
        self.host_by_ip: dict[int, Host] = {}

    def add_host(self, name: str, ip: int) -> Host:
        """Add a host with IPv4 address ``ip`` (int). Raises InvalidInput on a duplicate name/ip."""
        if name in self.hosts or name in self.switches:
            raise InvalidInput("host", f"node name {name!r} already used")
        if type(ip) is not int or not 0 <= ip < (1 << 32):
            raise InvalidInput(f"{name}.ip", f"must be an IPv4 address as int in 0..2^32-1, got {ip!r}")
        if ip in self.host_by_ip:
            raise InvalidInput(f"{name}.ip", f"address already used by {self.host_by_ip[ip].name!r}")
        host = Host(name, ip)
        self.hosts[name] = host
        self.host_by_ip[ip] = host
        return host

    def add_switch(self, name: str, make_pipeline: Callable[[str, Callable[[], int]], Pipeline],
                   start_ns: int = 0) -> Switch:
        """Add a switch whose pipeline is ``make_pipeline(name, clock)``; ``clock()`` returns
        the switch-local ns, ``engine.now - start_ns``. Raises InvalidInput on a duplicate name
        or ``start_ns > 0``."""
        if name in self.hosts or name in self.switches:
            raise InvalidInput("switch", f"node name {name!r} already used")
        if start_ns > 0:
            raise InvalidInput(f"{name}.start_ns", f"must be <= 0 (booted before the run), got {start_ns}")
        engine = self.engine
        pipeline = make_pipeline(name, lambda: engine.now - start_ns)
        switch = Switch(name, pipeline, start_ns)
        self.switches[name] = switch
        return switch

    def _node(self, name: str) -> Host | Switch:
        node = self.hosts.get(name) or self.switches.get(name)
        if node is None:
            raise InvalidInput("link", f"unknown node {name!r}")
        return node

    def _port(self, node: Host | Switch, number: int, rate_bps: int, delay_ns: int,
              buffer_bytes: int) -> Port:
        if isinstance(node, Host):
            if node.nic is not None:
                raise InvalidInput(f"{node.name}.nic", "a host has exactly one link")
            port = self.make_port(self.engine, node.name, number, rate_bps, delay_ns, UNBOUNDED_BYTES, strict=False)
            node.nic = port
            return port
        if number in node.ports:
            raise InvalidInput(f"{node.name}.port", f"port {number} already connected")
        port = self.make_port(self.engine, node.name, number, rate_bps, delay_ns, buffer_bytes, strict=True,
                              egress=node.pipeline.egress, dt_alpha=self.dt_alpha)
        node.ports[number] = port
        return port

    def connect(self, a: str, a_port: int, b: str, b_port: int, rate_bps: int, delay_ns: int,
                buffer_bytes: int, buffer_bytes_b: int | None = None) -> tuple[Port, Port]:
        """Join ``a``'s port ``a_port`` to ``b``'s port ``b_port`` with a full-duplex link.

        ``buffer_bytes`` is the egress buffer of ``a``'s port (``buffer_bytes_b`` of ``b``'s,
        default the same) when that end is a switch; host NICs are unbounded. Returns the two
        egress ports (a->b, b->a). Raises InvalidInput for unknown nodes, a port used twice,
        or bad rate/delay/buffer.
        """
        na, nb = self._node(a), self._node(b)
        for node, number in ((na, a_port), (nb, b_port)):  # check both ends before changing either
            if isinstance(node, Host) and node.nic is not None:
                raise InvalidInput(f"{node.name}.nic", "a host has exactly one link")
            if isinstance(node, Switch) and number in node.ports:
                raise InvalidInput(f"{node.name}.port", f"port {number} already connected")
        for end, value in (("rate_bps", rate_bps), ("delay_ns", delay_ns)):
            if type(value) is not int or value < (1 if end == "rate_bps" else 0):
                allowed = "> 0 bit/s" if end == "rate_bps" else ">= 0 ns"
                raise InvalidInput(f"{a}-{b}.{end}", f"must be an integer {allowed}, got {value!r}")
        pa = self._port(na, a_port, rate_bps, delay_ns, buffer_bytes)
        pb = self._port(nb, b_port, rate_bps, delay_ns, buffer_bytes if buffer_bytes_b is None else buffer_bytes_b)
        pa.peer, pa.peer_port = nb, b_port
        pb.peer, pb.peer_port = na, a_port
        return pa, pb

    def switch_ports(self) -> list[Port]:
        """Every switch egress port, in (switch, port) order."""
        return [sw.ports[p] for _, sw in sorted(self.switches.items()) for p in sorted(sw.ports)]

    def drops(self) -> int:
        """Packets dropped in the network: tail drops at switch ports plus pipeline drops to
        missing ports (pipeline drops of LPM misses are counted by the pipeline itself)."""
        return sum(p.dropped() for p in self.switch_ports()) + sum(sw.no_port_drops for sw in self.switches.values())

    def drops_by_port_class(self) -> dict[tuple[str, int, int], int]:
        """Tail drops keyed by (switch, port, class), non-zero entries only."""
        out: dict[tuple[str, int, int], int] = {}
        for p in self.switch_ports():
            for cls, count in enumerate(p.drops):
                if count:
                    out[(p.owner, p.number, cls)] = count
        return out


MAX_BOOT_SKEW_NS = 10 * NS_PER_S  # switches booted up to 10 s before the run


def build_network(
    topology: Any,
    engine: Engine,
    make_pipeline: Callable[[str, Callable[[], int]], Pipeline],
    dt_alpha: float = 0.0,
    make_port: Callable[..., Port] = Port,
) -> Network:
    """Build the network of a :class:`safs.core.topology.Topology` on ``engine``.

    Hosts get their topology address; each switch gets ``make_pipeline(name, clock)`` and a
    boot time drawn from ``engine.rng`` in ``[-MAX_BOOT_SKEW_NS, 0]`` (so the controller must
    set a real clock offset); every edge becomes a link with the edge's ``rate_bps`` and
    ``delay_ns``, switch ports numbered as in the topology (host NICs are port 0) and each
    switch port buffering ``topology.buffer_bytes(switch)`` bytes, admitted by dynamic threshold
    ``dt_alpha`` (see :class:`Port`). ``make_port`` builds every port (host NICs with
    ``strict=False``), with :class:`Port`'s signature; the default is :class:`Port` itself
    (``safs.experiments.sim.pfabric_port.pfabric_port_factory`` gives pFabric's).
    """
    net = Network(engine, dt_alpha, make_port)
    for host in topology.hosts():
        net.add_host(host, topology.host_ip(host))
    for sw in topology.switches():
        net.add_switch(sw, make_pipeline, start_ns=-engine.rng.randrange(MAX_BOOT_SKEW_NS + 1))
    graph = topology.graph
    for a, b, data in graph.edges(data=True):
        ports = data["ports"]
        a_port = ports.get(a, 0)
        b_port = ports.get(b, 0)
        buf_a = topology.buffer_bytes(a) if a in net.switches else UNBOUNDED_BYTES
        buf_b = topology.buffer_bytes(b) if b in net.switches else UNBOUNDED_BYTES
        net.connect(a, a_port, b, b_port, data["rate_bps"], data["delay_ns"], buf_a, buf_b)
    return net

"""A Mininet network of a SAFS topology: BMv2 switches, Mininet hosts, an explicit bottleneck.

Built from a ``topologies/`` file (:class:`safs.core.topology.Topology`), docs/mininet.md:

- every topology switch is a :class:`Bmv2Switch`: a Mininet ``Switch`` subclass that runs
  ``simple_switch_grpc --no-p4 ... -- --grpc-server-addr 127.0.0.1:<port> --priority-queues 8
  --cpu-port 255`` (:func:`safs.targets.bmv2.target_options`) in the root namespace when the
  network starts (as p4lang/tutorials ``utils/p4runtime_switch.py`` and ONOS ``bmv2.py`` do),
  polls its gRPC port until P4Runtime answers, keeps its log in ``<run dir>/<switch>.log``
  and is stopped by PID. The controller pushes the committed SAFS
  pipeline (``p4src/build/safs.json``, ``safs.p4info.txtpb``) over P4Runtime.
- every topology host is a Mininet ``Host`` (its own network namespace) with the topology's IP,
  the MAC :func:`safs.core.scheduler.node_mac` gives it (the routes the controller installs rewrite the
  destination MAC to it), a /32 route and a permanent neighbour entry for every other host, NIC
  offloads off (BMv2 reads and writes whole frames, so checksums must be filled in by the sender
  and no frame may exceed the MTU), and a rate limit at its link rate on its egress.
- switch ports are numbered as the topology numbers them (hosts first, then links, from 1).

The bottleneck (BRIEF, "Design decisions"): BMv2's queue rate limit applies to each priority
queue separately, so a port cannot be a shared bottleneck inside BMv2. Every switch egress
interface (the switch side of a veth, root namespace) therefore gets Linux traffic control:

    htb root 1: (default 1:10)
      class 1:1  rate = ceil = link rate                       the bottleneck
        class 1:17 prio 0  <- SAFS qclass 7 (REQUEST, GRANT, DONE)
        class 1:16 prio 1  <- SAFS qclass 6 (most urgent slack class)
        ...
        class 1:12 prio 5  <- SAFS qclass 2 (least urgent slack class)
        class 1:10 prio 7  <- everything else (non-SAFS: TCP baselines, background)
      each leaf: red (ECN marking at the scheduler's ECN threshold) where the kernel has it,
      else a bfifo of the port's buffer (drop-tail)

A u32 filter per SAFS class matches UDP to :data:`safs.core.protocol.SAFS_UDP_PORT` and the ``qclass``
byte the P4 program wrote into the SAFS header (IPv4 header without options + 8 + 2). Every
leaf is guaranteed a token rate (8 kbit/s) and may borrow up to the link rate; HTB lends spare
rate strictly by ``prio``, so a band is served only while no band of higher priority has packets
(strict priority; the approach of ptf_tests/priority.py). BMv2 forwards faster than the
shaper drains, so its own queues stay short and the queueing, priority and ECN decisions happen
here. Where the kernel has no ``prio``, ``red`` or ``tcp_dctcp`` (e.g. a minimal VM kernel) this
is stated by :func:`kernel_features` and in every run's record.

Cleanup: :meth:`EmuNet.stop` stops switches by PID, removes every interface, qdisc and namespace
(Mininet's host shells and links), and is idempotent; child processes are started with
``PR_SET_PDEATHSIG`` (:func:`die_with_parent`) so they die with the run even when it is SIGKILLed; :func:`leftovers`
lists anything of a topology still present (used by the tests) and
:func:`remove_leftovers` deletes interfaces a killed run left behind.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from safs.core.errors import InvalidInput, SafsError
from safs.core.protocol import SAFS_UDP_PORT, MsgType, pack_header, unpack_header
from safs.core.scheduler import node_mac
from safs.core.timebase import fabric_clock
from safs.core.topology import Topology
from safs.targets.bmv2 import target_options

log = logging.getLogger(__name__)

BMV2 = "simple_switch_grpc"
SWITCH_START_TIMEOUT_S = 30.0
QCLASS_OFFSET = 20 + 8 + 2  # SAFS qclass byte from the IPv4 header start (no options); safs.core.protocol
SAFS_CLASSES = (7, 6, 5, 4, 3, 2)  # control, then slack classes most urgent first (safs.core.protocol)
DEFAULT_CLASS_ID = 10  # leaf 1:10, everything else
LEAF_GUARANTEE = "8kbit"  # token rate each leaf is guaranteed; the rest is lent by prio
PR_SET_PDEATHSIG = 1


class EmuError(SafsError):
    """The emulated network could not be built, started or cleaned (the message says what)."""


def _mac(value: int) -> str:
    return ":".join(f"{(value >> (8 * i)) & 0xFF:02x}" for i in range(5, -1, -1))


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the process that started it dies (Linux prctl).
    Only for processes without gRPC: see :func:`die_with_parent`."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def die_with_parent(cmd: Sequence[str]) -> list[str]:
    """``cmd`` prefixed so that it is SIGKILLed when the thread that starts it dies
    (``setpriv --pdeathsig KILL``, util-linux; the same prctl as :func:`_die_with_parent`).

    Why not ``preexec_fn``: a ``preexec_fn`` makes Python fork instead of vfork, and a fork
    runs gRPC's fork handlers. Once the controller's gRPC is running in this process, the
    child restarts gRPC's poller, whose epoll descriptor ``close_fds`` has just closed, and
    aborts before it can exec ("Epoll1Poller ... epoll_wait error: Bad file descriptor",
    grpc/grpc#43055). A vfork runs no fork handlers.

    Raises:
        EmuError: ``setpriv`` is not installed (Debian: util-linux).
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise EmuError("setpriv (util-linux) is not on PATH: needed to tie the emulation's processes to the run")
    return [setpriv, "--pdeathsig", "KILL", *cmd]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cmd(args: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    """Run a command in the root namespace; raise :class:`EmuError` with its stderr on failure."""
    out = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    if check and out.returncode != 0:
        raise EmuError(f"{' '.join(args)}: {out.stderr.strip() or out.stdout.strip()}")
    return out


# ---------------------------------------------------------------------------- kernel features

@dataclass(frozen=True)
class KernelFeatures:
    """What traffic control and TCP offer on this kernel (:func:`kernel_features`).

    Attributes:
        red: the ``red`` qdisc exists (ECN marking at the bottleneck).
        prio: the ``prio`` qdisc exists (informational; HTB prio gives strict priority anyway).
        dctcp: ``tcp_dctcp`` is an available congestion control.
    """

    red: bool
    prio: bool
    dctcp: bool


def _qdisc_kind_known(kind: str, *args: str) -> bool:
    # "Specified qdisc kind is unknown" means the kernel (or its modules) lacks it; any other
    # answer (missing parameters) means it exists. Nothing is changed: the handle is invalid.
    out = subprocess.run(["tc", "qdisc", "add", "dev", "lo", "parent", "ffff:fff1", kind, *args],
                         capture_output=True, text=True, timeout=30)
    if out.returncode == 0:  # pragma: no cover - cannot attach there; remove if it did
        subprocess.run(["tc", "qdisc", "del", "dev", "lo", "parent", "ffff:fff1"], capture_output=True)
    return "unknown" not in out.stderr.lower()


def kernel_features() -> KernelFeatures:
    """Probe the kernel (needs ``tc``; reading only).  See :class:`KernelFeatures`."""
    try:
        cc = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    except OSError:
        cc = []
    red = _qdisc_kind_known("red", "limit", "100000", "min", "10000", "max", "20000", "avpkt", "1000",
                            "burst", "11", "probability", "1.0", "bandwidth", "10mbit", "ecn")
    return KernelFeatures(red=red, prio=_qdisc_kind_known("prio"), dctcp="dctcp" in cc)


# ---------------------------------------------------------------------------- bottleneck

@dataclass(frozen=True)
class Bottleneck:
    """The traffic control put on one switch egress interface.

    Attributes:
        intf: interface name (root namespace).
        rate_bps: shaper rate, bit/s.
        buffer_bytes: queue limit of each leaf, bytes.
        ecn_threshold_bytes: RED marks ECN-capable packets above this backlog (0: no RED, drop-tail).
    """

    intf: str
    rate_bps: int
    buffer_bytes: int
    ecn_threshold_bytes: int


def bottleneck_commands(intf: str, rate_bps: int, buffer_bytes: int, mtu_bytes: int,
                        ecn_threshold_bytes: int = 0) -> list[list[str]]:
    """The ``tc`` commands of the strict-priority bottleneck (module docstring) on ``intf``.

    Args:
        intf: interface name.
        rate_bps: link rate, bit/s (>= 16 kbit/s, so every leaf's guarantee fits).
        buffer_bytes: limit of each leaf queue, bytes (>= one frame).
        mtu_bytes: IP MTU of the link (quantum and burst are one frame of it).
        ecn_threshold_bytes: > 0: leaves are RED queues marking ECN above this backlog
            (min = threshold, max = threshold + one frame, probability 1: a step marker like
            DCTCP's K); 0: leaves are bfifo (drop-tail).

    Raises:
        InvalidInput: a value out of range (field named).
    """
    if rate_bps < 16_000:
        raise InvalidInput("rate_bps", f"must be >= 16000 bit/s, got {rate_bps}")
    frame = mtu_bytes + 14
    if buffer_bytes < frame:
        raise InvalidInput("buffer_bytes", f"must be >= one frame ({frame} bytes), got {buffer_bytes}")
    if ecn_threshold_bytes < 0 or (ecn_threshold_bytes and ecn_threshold_bytes + frame > buffer_bytes):
        raise InvalidInput("ecn_threshold_bytes", f"must be 0 or in 1..buffer - one frame "
                           f"({buffer_bytes - frame}), got {ecn_threshold_bytes}")
    rate = f"{rate_bps}bit"
    # Burst: one frame or 1 ms at the rate, whichever is larger (HTB needs at least a frame).
    burst = str(max(2 * frame, rate_bps // 8 // 1000))
    cmds = [["tc", "qdisc", "add", "dev", intf, "root", "handle", "1:", "htb", "default", str(DEFAULT_CLASS_ID)],
            ["tc", "class", "add", "dev", intf, "parent", "1:", "classid", "1:1", "htb", "rate", rate,
             "ceil", rate, "burst", burst, "cburst", burst]]
    leaves = [(10 + q, 7 - q) for q in SAFS_CLASSES] + [(DEFAULT_CLASS_ID, 7)]
    for minor, prio in leaves:
        cmds.append(["tc", "class", "add", "dev", intf, "parent", "1:1", "classid", f"1:{minor}", "htb",
                     "rate", LEAF_GUARANTEE, "ceil", rate, "burst", burst, "cburst", burst,
                     "prio", str(prio), "quantum", str(frame)])
        if ecn_threshold_bytes:
            leaf = ["red", "limit", str(buffer_bytes), "min", str(ecn_threshold_bytes),
                    "max", str(ecn_threshold_bytes + frame), "avpkt", str(frame),
                    "probability", "1.0", "bandwidth", rate, "ecn"]
        else:
            leaf = ["bfifo", "limit", str(buffer_bytes)]
        cmds.append(["tc", "qdisc", "add", "dev", intf, "parent", f"1:{minor}", "handle", f"{minor}:", *leaf])
    for q in SAFS_CLASSES:
        cmds.append(["tc", "filter", "add", "dev", intf, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                     "match", "ip", "protocol", "17", "0xff",
                     "match", "ip", "dport", str(SAFS_UDP_PORT), "0xffff",
                     "match", "u8", str(q), "0xff", "at", str(QCLASS_OFFSET),
                     "flowid", f"1:{10 + q}"])
    return cmds


def shaper_commands(intf: str, rate_bps: int, mtu_bytes: int) -> list[list[str]]:
    """A plain HTB rate limit at ``rate_bps`` on a host's egress ``intf`` (its NIC rate)."""
    rate = f"{rate_bps}bit"
    burst = str(max(2 * (mtu_bytes + 14), rate_bps // 8 // 1000))
    return [["tc", "qdisc", "add", "dev", intf, "root", "handle", "1:", "htb", "default", "1"],
            ["tc", "class", "add", "dev", intf, "parent", "1:", "classid", "1:1", "htb", "rate", rate,
             "ceil", rate, "burst", burst, "cburst", burst]]


def qdisc_drops(intf: str, runner: Callable[[list[str]], str] | None = None) -> int:
    """Packets dropped so far by the qdiscs of ``intf`` (sum of the leaves' ``dropped``)."""
    text = runner(["tc", "-s", "qdisc", "show", "dev", intf]) if runner else \
        run_cmd(["tc", "-s", "qdisc", "show", "dev", intf]).stdout
    total = 0
    for block in text.split("qdisc ")[1:]:
        if block.startswith("htb"):
            continue  # the root counts its leaves' drops again
        m = re.search(r"dropped (\d+)", block)
        if m:
            total += int(m.group(1))
    return total


# ---------------------------------------------------------------------------- the switch

def _mininet():
    try:
        import mininet.link  # noqa: PLC0415 (optional: Mininet is Debian's, linked in where installed)
        import mininet.net  # noqa: PLC0415
        import mininet.node  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise EmuError("Mininet is not importable from this Python: install Debian's mininet "
                       "(apt-get install mininet) and link it into the venv (README, 'Mininet')") from exc
    return mininet


def switch_class():
    """The :class:`mininet.node.Switch` subclass running BMv2 (built on first use so this module
    imports without Mininet).

    Constructor keywords (besides Mininet's): ``grpc_port``, ``thrift_port``, ``device_id``,
    ``log_dir`` (Path), ``log_level`` (BMv2 ``-L``, default ``warn``: per-packet logging costs
    throughput), ``sw_path`` (default ``simple_switch_grpc``).
    Attributes after start: ``proc`` (Popen), ``started_ns`` (fabric time just before exec),
    ``grpc_addr``, ``log_path``.
    """
    global _SWITCH_CLASS
    if _SWITCH_CLASS is not None:
        return _SWITCH_CLASS
    Switch = _mininet().node.Switch

    class Bmv2Switch(Switch):
        def __init__(self, name: str, grpc_port: int = 0, thrift_port: int = 0, device_id: int = 0,
                     log_dir: Path | None = None, log_level: str = "warn", sw_path: str = BMV2,
                     **params: Any) -> None:
            super().__init__(name, **params)
            self.grpc_port = grpc_port or free_port()
            self.thrift_port = thrift_port or free_port()
            self.device_id = device_id
            self.log_dir = Path(log_dir or tempfile.gettempdir())
            self.log_level = log_level
            self.sw_path = sw_path
            self.proc: subprocess.Popen | None = None
            self.started_ns = 0
            self.grpc_addr = f"127.0.0.1:{self.grpc_port}"
            self.log_path = self.log_dir / f"{name}.log"

        def command(self) -> list[str]:
            """The ``simple_switch_grpc`` command line (ports in Mininet's numbering)."""
            args = [self.sw_path, "--no-p4", "--device-id", str(self.device_id),
                    "--thrift-port", str(self.thrift_port), "--log-console", "-L", self.log_level]
            for port, intf in sorted(self.intfs.items()):
                if intf.name != "lo" and port > 0:
                    args += ["-i", f"{port}@{intf.name}"]
            return args + ["--", "--grpc-server-addr", self.grpc_addr, *target_options()]

        def start(self, controllers: Any) -> None:  # Mininet calls this from net.start()

            for intf in self.intfList():
                if intf.name != "lo":
                    # A failure is an error: with offloads on, TCP and UDP through BMv2 fail
                    # their checksums and the run would measure nothing but losses.
                    _offloads_off(run_cmd, intf.name)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "ab") as logf:
                self.started_ns = fabric_clock()
                self.proc = subprocess.Popen(die_with_parent(self.command()), stdout=logf,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            wait_for_p4runtime(self.grpc_addr, self.proc, SWITCH_START_TIMEOUT_S, self.log_path, self.sw_path)
            log.info("%s: %s up, pid %d, P4Runtime on %s, log %s", self.name, self.sw_path, self.proc.pid,
                     self.grpc_addr, self.log_path)

        def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's name
            stop_process(self.proc)
            super().stop(deleteIntfs)

    _SWITCH_CLASS = Bmv2Switch
    return Bmv2Switch


_SWITCH_CLASS = None


def stop_process(proc: subprocess.Popen | None, timeout_s: float = 10.0) -> None:
    """SIGTERM ``proc`` by PID, SIGKILL after ``timeout_s``; reap it. None or exited: nothing."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for_p4runtime(addr: str, proc: subprocess.Popen, timeout_s: float, log_path: Path | None = None,
                       name: str = BMV2) -> None:
    """Poll ``addr`` with P4Runtime Capabilities until it answers.

    Raises:
        EmuError: the process exited (its log is named) or did not answer within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EmuError(f"{name} exited with {proc.returncode} before answering on {addr}"
                           + (f"; log: {log_path}" if log_path else ""))
        channel = grpc.insecure_channel(addr)
        try:
            p4runtime_pb2_grpc.P4RuntimeStub(channel).Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=1.0)
            return
        except grpc.RpcError as err:
            last = err.code()
            time.sleep(0.05)
        finally:
            channel.close()
    raise EmuError(f"{name} at {addr} did not answer P4Runtime within {timeout_s} s (last: {last})")


def _offloads_off(run: Callable[[list[str]], Any], intf: str) -> None:
    """Turn checksum and segmentation offloads off on ``intf`` with ``run`` (a command runner
    that raises :class:`EmuError` on failure, as :func:`run_cmd`).

    As p4lang/tutorials' P4Host does: BMv2 reads frames with libpcap and writes them back out,
    so checksums must be complete and no segment may be larger than the MTU.

    Raises:
        EmuError: one line naming ``intf`` and the command's error (with offloads on, TCP and
            UDP through BMv2 fail their checksums and a run would measure only losses).
    """
    try:
        run(["ethtool", "--offload", intf, "rx", "off", "tx", "off", "sg", "off", "tso", "off", "gso", "off",
             "gro", "off"])
    except (EmuError, OSError) as err:  # OSError: no ethtool
        detail = " ".join(str(err).split())  # one line
        raise EmuError(f"{intf}: cannot turn checksum offload off: {detail}") from None


# ---------------------------------------------------------------------------- the network

@dataclass
class EmuNet:
    """A built and started Mininet network of a topology (see module docstring).

    Attributes:
        topology: the topology it was built from.
        net: the ``mininet.net.Mininet``.
        run_dir: directory of logs and sockets of this run.
        mtu_bytes: IP MTU of every link.
        bottlenecks: traffic control installed on switch egress interfaces.
        features: :class:`KernelFeatures` probed at build.
    """

    topology: Topology
    net: Any
    run_dir: Path
    mtu_bytes: int
    bottlenecks: list[Bottleneck] = field(default_factory=list)
    features: KernelFeatures | None = None
    lock: Any = None
    _stopped: bool = False

    def host(self, name: str) -> Any:
        """The Mininet host of a topology host."""
        return self.net.get(name)

    def switch(self, name: str) -> Any:
        """The Mininet switch of a topology switch."""
        return self.net.get(name)

    def drops(self) -> int:
        """Packets dropped at the bottlenecks so far."""
        return sum(qdisc_drops(b.intf) for b in self.bottlenecks)

    def stop(self) -> None:
        """Stop switches (by PID), host shells and processes, delete links, qdiscs and
        namespaces. Idempotent; errors are logged, cleanup continues."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.net.stop()
        except Exception as exc:  # noqa: BLE001 - keep cleaning
            log.warning("mininet stop: %s", exc)
        remove_leftovers(self.topology)
        if self.lock is not None:
            self.lock.close()  # releases the flock
            self.lock = None

    def __enter__(self) -> EmuNet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def build(topology: Topology, run_dir: Path, *, mtu_bytes: int = 1500, switch_cls: Any = None,
          ecn_threshold_pkts: int | None = None, bmv2_log_level: str = "warn",
          start: bool = True) -> EmuNet:
    """Build (and start) the Mininet network of ``topology``.

    Args:
        topology: the topology (every link rate >= 16 kbit/s).
        run_dir: logs go here (created).
        mtu_bytes: IP MTU of every link, 576..9000.
        switch_cls: Mininet switch class; default :func:`switch_class` (BMv2). Tests without
            BMv2 pass a class that forwards nothing.
        ecn_threshold_pkts: ECN threshold of the bottleneck in frames (RED, where the kernel has
            it); None: drop-tail only.
        bmv2_log_level: BMv2 ``-L`` level.
        start: start the switches and configure hosts and traffic control (False: build only).

    Raises:
        EmuError: not root, Mininet missing, a switch did not start, a ``tc``/``ip`` command
            failed. Everything created so far is removed before it propagates.
        InvalidInput: ``mtu_bytes`` out of range.
    """
    if os.geteuid() != 0:
        raise EmuError("Mininet needs root (network namespaces, veth pairs)")
    if not 576 <= mtu_bytes <= 9000:
        raise InvalidInput("mtu_bytes", f"must be in 576..9000, got {mtu_bytes}")
    _mininet()
    from mininet.link import Link  # noqa: PLC0415 (optional, checked by _mininet() above)
    from mininet.net import Mininet  # noqa: PLC0415
    from mininet.node import Host  # noqa: PLC0415

    switch_cls = switch_cls or switch_class()
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = acquire_run_lock()
    try:
        remove_leftovers(topology)
    except BaseException:
        lock.close()
        raise
    features = kernel_features()
    net = Mininet(topo=None, switch=switch_cls, host=Host, link=Link, controller=None, build=False,
                  autoSetMacs=False, autoStaticArp=False, waitConnected=False, inNamespace=False)
    emu = EmuNet(topology, net, run_dir, mtu_bytes, features=features, lock=lock)
    try:
        for i, sw in enumerate(topology.switches()):
            extra = {"log_dir": run_dir, "device_id": 0, "log_level": bmv2_log_level} \
                if switch_cls is _SWITCH_CLASS else {}
            net.addSwitch(sw, cls=switch_cls, dpid=f"{i + 1:016x}", **extra)
        for h in topology.hosts():
            net.addHost(h, ip=f"{_ip(topology.host_ip(h))}/32", mac=_mac(node_mac(topology, h)))
        for sw in topology.switches():
            for port, neighbor in sorted(topology.ports(sw).items()):
                if topology.is_host(neighbor):
                    net.addLink(net.get(neighbor), net.get(sw), port1=0, port2=port,
                                intfName1=f"{neighbor}-eth0", intfName2=f"{sw}-eth{port}")
                elif sw < neighbor:  # one link per switch pair
                    p2 = topology.port_of(neighbor, sw)
                    net.addLink(net.get(sw), net.get(neighbor), port1=port, port2=p2,
                                intfName1=f"{sw}-eth{port}", intfName2=f"{neighbor}-eth{p2}")
        net.build()
        if start:
            _configure(emu, ecn_threshold_pkts)
            net.start()
            _install_traffic_control(emu, ecn_threshold_pkts)
    except BaseException:
        emu.stop()
        raise
    return emu


def _ip(value: int) -> str:
    return ".".join(str((value >> s) & 0xFF) for s in (24, 16, 8, 0))


RUN_LOCK = (Path("/run/lock") if Path("/run/lock").is_dir() else Path(tempfile.gettempdir())) / "safs-emu.lock"


def acquire_run_lock(path: Path = RUN_LOCK, timeout_s: float = 3600.0) -> Any:
    """Wait for the machine-wide lock of emulated networks and return it (an open file; closing
    it, or the process ending, releases it). One network at a time: networks of the same
    topology share interface and host names, and a build removes the interfaces a killed run
    left (:func:`remove_leftovers`), which would tear down a live run's links.

    Raises:
        EmuError: still held by another process after ``timeout_s`` (its pid is named).
    """
    f = open(path, "a+")
    deadline = time.monotonic() + timeout_s
    waiting = False
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            if time.monotonic() >= deadline:
                f.close()
                raise EmuError(f"another emulated network (pid {holder}) holds {path} "
                               f"for more than {timeout_s} s") from None
            if not waiting:
                log.warning("waiting for another emulated network (pid %s, lock %s) to finish", holder, path)
                waiting = True
            time.sleep(0.5)
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def _host_run(host: Any, args: list[str]) -> str:
    out, err, code = host.pexec(args)
    if code != 0:
        raise EmuError(f"{host.name}: {' '.join(args)}: {err.strip() or out.strip()}")
    return out


def _configure(emu: EmuNet, ecn_threshold_pkts: int | None) -> None:
    """Host addresses, neighbours, routes, MTU, offloads, sysctls (before the switches start)."""
    topo = emu.topology
    for h in topo.hosts():
        host = emu.host(h)
        intf = f"{h}-eth0"
        run = lambda args, host=host: _host_run(host, args)  # noqa: E731
        run(["ip", "link", "set", "dev", intf, "mtu", str(emu.mtu_bytes)])
        run(["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1"])
        run(["sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1"])
        if emu.features and emu.features.dctcp:
            run(["sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=dctcp"])
        _offloads_off(run, intf)
        for other in topo.hosts():
            if other == h:
                continue
            ip = _ip(topo.host_ip(other))
            run(["ip", "route", "replace", f"{ip}/32", "dev", intf])
            run(["ip", "neigh", "replace", ip, "lladdr", _mac(node_mac(topo, other)), "dev", intf, "nud", "permanent"])
    for sw in topo.switches():
        for port in topo.ports(sw):
            intf = f"{sw}-eth{port}"
            run_cmd(["ip", "link", "set", "dev", intf, "mtu", str(emu.mtu_bytes)])
            run_cmd(["sysctl", "-q", "-w", f"net.ipv6.conf.{intf}.disable_ipv6=1"], check=False)


def _install_traffic_control(emu: EmuNet, ecn_threshold_pkts: int | None) -> None:
    topo = emu.topology
    frame = emu.mtu_bytes + 14
    use_red = bool(ecn_threshold_pkts) and emu.features is not None and emu.features.red
    for sw in topo.switches():
        buffer = topo.buffer_bytes(sw)
        for port, neighbor in sorted(topo.ports(sw).items()):
            intf = f"{sw}-eth{port}"
            rate = topo.link(sw, neighbor)["rate_bps"]
            ecn = min(ecn_threshold_pkts * frame, buffer - frame) if use_red and ecn_threshold_pkts else 0
            for cmd in bottleneck_commands(intf, rate, buffer, emu.mtu_bytes, ecn):
                run_cmd(cmd)
            emu.bottlenecks.append(Bottleneck(intf, rate, buffer, ecn))
    for h in topo.hosts():
        host = emu.host(h)
        rate = topo.host_link_bps(h)
        for cmd in shaper_commands(f"{h}-eth0", rate, emu.mtu_bytes):
            _host_run(host, cmd)


# ---------------------------------------------------------------------------- leftovers

def _root_links() -> list[str]:
    out = run_cmd(["ip", "-o", "link", "show"], check=False).stdout
    return [m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)[:@]", out, re.M)]


def _processes(pattern: re.Pattern) -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pattern.search(cmdline):
            found.append((int(entry.name), cmdline.strip()))
    return found


def leftovers(topology: Topology) -> list[str]:
    """What of a run on ``topology`` is still present: root-namespace interfaces named after its
    switches (``<switch>-eth<N>``), Mininet host shells of its hosts (``mininet:<host>``; their
    namespace lives as long as they do) and BMv2 switch processes whose interfaces are its
    switches'. Empty when clean."""
    names = "|".join(re.escape(n) for n in topology.switches())
    intf_re = re.compile(rf"^(?:{names})-eth\d+$")
    found = [f"interface {i}" for i in _root_links() if intf_re.match(i)]
    hosts = "|".join(re.escape(h) for h in topology.hosts())
    found += [f"host shell pid {pid}: {cmd}" for pid, cmd in _processes(re.compile(rf"mininet:(?:{hosts})(?:\s|$)"))]
    found += [f"switch pid {pid}: {cmd}" for pid, cmd in
              _processes(re.compile(rf"{BMV2}.*-i \d+@(?:{names})-eth\d+"))]
    return found


def remove_leftovers(topology: Topology) -> None:
    """Delete root-namespace interfaces named after ``topology``'s switches (left by a run that
    was SIGKILLed; deleting one end of a veth deletes both and their qdiscs)."""
    names = "|".join(re.escape(n) for n in topology.switches())
    intf_re = re.compile(rf"^(?:{names})-eth\d+$")
    for intf in _root_links():
        if intf_re.match(intf):
            run_cmd(["ip", "link", "del", intf], check=False)


# ---------------------------------------------------------------------------- clock probe

PROBE_FLOW_ID = 0xFFFFFF00  # far above the driver's flow ids (1, 2, ...)
PROBE_DEP_ID = 0xFFFF  # a valid dependency id (1..65535) the workloads' ids (1, 2, ...) stay below


def probe_switch_time(dst_ip: str, flow_id: int = PROBE_FLOW_ID, tries: int = 5,
                      timeout_s: float = 1.0) -> tuple[int, int, int]:
    """Send a SAFS REQUEST of an unknown flow to ``dst_ip`` and read the switch time from the
    GRANT the receiver's ToR answers with (as ptf_tests/base_test.py ``switch_now`` does).
    Run inside a host namespace (``python -m safs.experiments.mininet.net probe DST_IP``), with no agent bound
    to the SAFS port there.

    Returns:
        ``(sent_ns, received_ns, grant_ns)``: fabric times (48-bit) just before the send and
        just after the receive, and the GRANT's timestamp (the switch's fabric time).

    Raises:
        EmuError: no GRANT after ``tries`` attempts of ``timeout_s`` each.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("0.0.0.0", SAFS_UDP_PORT))
        sock.settimeout(timeout_s)
        # A valid dependency id: the receiver's ToR digests the REQUEST (no grant for it) and
        # the controller learns the dependency; the backend ends it after the probe.
        request = pack_header(MsgType.REQUEST, flow_id, remaining_bytes=1, timestamp_ns=0, dep_id=PROBE_DEP_ID)
        for _ in range(tries):
            sent = fabric_clock()
            sock.sendto(request, (dst_ip, SAFS_UDP_PORT))
            try:
                while True:
                    data = sock.recv(2048)
                    received = fabric_clock()
                    fields = unpack_header(data)
                    if fields[0] == MsgType.GRANT and fields[4] == flow_id:
                        return sent, received, fields[6]
            except TimeoutError:
                continue
    raise EmuError(f"no GRANT from the switch of {dst_ip} after {tries} REQUESTs")


if __name__ == "__main__":  # python -m safs.experiments.mininet.net probe DST_IP [FLOW_ID]
    import sys

    if len(sys.argv) not in (3, 4) or sys.argv[1] != "probe":
        sys.exit("usage: python -m safs.experiments.mininet.net probe DST_IP [FLOW_ID]")
    print(*probe_switch_time(sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else PROBE_FLOW_ID))

#!/usr/bin/env python3
"""Run the SAFS PTF suite against BMv2 (simple_switch_grpc) on veth pairs.

Steps (every one undone in ``finally``, even on failure):

1. create ``--ports`` veth pairs ``<prefix>S<i>`` (switch side, BMv2 port i) <-> ``<prefix>P<i>``
   (PTF side, PTF port i), i = 1..N, up, IPv6 off (no stray router solicitations);
2. start ``simple_switch_grpc --no-p4 -i i@safsS<i> ... -- --grpc-server-addr
   127.0.0.1:<free port> --priority-queues 8 --cpu-port 255``
   (:func:`safs.targets.bmv2.target_options`) with a free Thrift port too;
3. poll the gRPC port until a P4Runtime ``Capabilities`` call answers (no fixed sleeps);
4. run ``ptf --test-dir ptf_tests --interface i@safsP<i> ...`` with this Python (the tests push
   the pipeline themselves, see ptf_tests/base_test.py);
5. stop the switch by its PID, delete the veths.

Needs root (ip link), simple_switch_grpc and simple_switch_CLI on PATH. simple_switch_CLI (BMv2's
Thrift CLI, which the ECN and meter tests use to rate-limit queues) is a Python script run by the
interpreter on its first line, not by this venv, and that interpreter needs the ``thrift`` module
(Debian: ``apt-get install python3-thrift``; docs/dataplane.md): checked before anything is set
up, naming the interpreter. Logs (switch log, PTF log and output) go to a temporary directory
whose path is printed. Exit status is PTF's (0 = every test passed), 2 for a missing prerequisite.

Usage (from the repository root)::

    sudo .venv/bin/python ptf_tests/run.py [--ports 3] [--test-timeout 10] [TEST ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from safs.targets.bmv2 import target_options

REPO = Path(__file__).resolve().parent.parent
TEST_DIR = REPO / "ptf_tests"
P4INFO = REPO / "p4src" / "build" / "safs.p4info.txtpb"
BMV2_JSON = REPO / "p4src" / "build" / "safs.json"
SWITCH_START_TIMEOUT_S = 60.0


def cli_problem() -> str | None:
    """Why ``simple_switch_CLI --help`` cannot run here (None when it can). It imports thrift
    at start, so this finds an interpreter without the module before a test needs the CLI."""
    path = shutil.which("simple_switch_CLI")
    if path is None:
        return "simple_switch_CLI is not on PATH"
    try:
        out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{path} did not run: {err}"
    if out.returncode == 0:
        return None
    with open(path, "rb") as f:
        first = f.readline().decode(errors="replace").strip()
    interp = first[2:].strip() if first.startswith("#!") else "its interpreter"
    text = (out.stderr or out.stdout).strip()
    last = text.splitlines()[-1] if text else f"exit status {out.returncode}"
    hint = ""
    if "thrift" in text:
        hint = (f"; its interpreter {interp} needs the thrift module: apt-get install python3-thrift "
                f"(Debian), or {interp} -m pip install thrift")
    return f"{path} (run by {interp}) fails: {last}{hint}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def create_veths(n: int, prefix: str) -> list[tuple[str, str]]:
    """Create ``n`` veth pairs (switch side, PTF side) named ``{prefix}S<i>`` / ``{prefix}P<i>``."""
    pairs = []
    for i in range(1, n + 1):
        sw, ptf = f"{prefix}S{i}", f"{prefix}P{i}"
        _ip("link", "del", sw, check=False)  # leftover from a killed run
        _ip("link", "add", sw, "type", "veth", "peer", "name", ptf)
        pairs.append((sw, ptf))
        for dev in (sw, ptf):
            subprocess.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1"],
                           check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _ip("link", "set", dev, "mtu", "9000")
            _ip("link", "set", dev, "up")
    return pairs


def delete_veths(pairs: list[tuple[str, str]]) -> None:
    """Delete the pairs (deleting one end removes both)."""
    for sw, _ in pairs:
        _ip("link", "del", sw, check=False)


def wait_for_grpc(addr: str, proc: subprocess.Popen, timeout_s: float) -> None:
    """Poll ``addr`` with P4Runtime Capabilities until it answers.

    Raises:
        RuntimeError: the switch exited, or did not answer within ``timeout_s``.
    """
    import grpc
    from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"simple_switch_grpc exited with {proc.returncode} before answering")
        channel = grpc.insecure_channel(addr)
        try:
            stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
            stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=1.0)
            return
        except grpc.RpcError as e:  # not listening yet: the 1 s call timeout paces the poll
            last = e.code()
            time.sleep(0.05)
        finally:
            channel.close()
    raise RuntimeError(f"simple_switch_grpc at {addr} did not answer in {timeout_s} s (last: {last})")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the switch by PID, SIGKILL after 10 s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ports", type=int, default=3, help="veth pairs / switch ports (default 3)")
    ap.add_argument("--prefix", default=f"sf{os.getpid() % 100000}",
                    help="veth name prefix (default sf<pid>, so parallel runs do not collide)")
    ap.add_argument("--test-timeout", type=float, default=10.0,
                    help="PTF --default-timeout: seconds to wait for an expected packet (default 10)")
    ap.add_argument("--negative-timeout", type=float, default=0.5,
                    help="PTF --default-negative-timeout: seconds to wait for an unexpected packet")
    ap.add_argument("--log-dir", help="keep logs here (default: a new temp dir)")
    ap.add_argument("tests", nargs="*", help="PTF test names (module or module.Class); default all")
    args = ap.parse_args(argv)
    if args.ports < 3 or args.ports > 16:
        ap.error("--ports must be in 3..16 (the tests use ports 1..3)")
    if not args.prefix.isalnum() or len(args.prefix) > 10:
        ap.error("--prefix must be 1..10 letters/digits (interface names are at most 15 characters)")
    if os.geteuid() != 0:
        print("run.py: needs root (ip link)", file=sys.stderr)
        return 2
    if not shutil.which("simple_switch_grpc"):
        print("run.py: simple_switch_grpc is not on PATH", file=sys.stderr)
        return 2
    problem = cli_problem()
    if problem:
        print(f"run.py: {problem}", file=sys.stderr)
        return 2
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="safs-ptf-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"run.py: logs in {log_dir}", flush=True)

    grpc_port, thrift_port = free_port(), free_port()
    while thrift_port == grpc_port:
        thrift_port = free_port()
    grpc_addr = f"127.0.0.1:{grpc_port}"
    pairs: list[tuple[str, str]] = []
    switch: subprocess.Popen | None = None
    t0 = time.monotonic()
    try:
        pairs = create_veths(args.ports, args.prefix)
        cmd = ["simple_switch_grpc", "--no-p4", "--device-id", "0", "--thrift-port", str(thrift_port),
               "--log-console", "-L", "info"]
        for i, (sw, _) in enumerate(pairs, start=1):
            cmd += ["-i", f"{i}@{sw}"]
        cmd += ["--", "--grpc-server-addr", grpc_addr, *target_options()]
        with open(log_dir / "switch.log", "wb") as swlog:
            switch = subprocess.Popen(cmd, stdout=swlog, stderr=subprocess.STDOUT)
        wait_for_grpc(grpc_addr, switch, SWITCH_START_TIMEOUT_S)
        print(f"run.py: switch pid {switch.pid} answered on {grpc_addr} after "
              f"{time.monotonic() - t0:.1f} s", flush=True)

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO / "controller"), str(TEST_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        ptf_bin = Path(sys.executable).with_name("ptf")
        ptf_cmd = [sys.executable, str(ptf_bin), "--test-dir", str(TEST_DIR),
                   "--default-timeout", str(args.test_timeout),
                   "--default-negative-timeout", str(args.negative_timeout),
                   "--log-file", str(log_dir / "ptf.log"),
                   "--test-params",
                   f"grpc_addr='{grpc_addr}';device_id=0;thrift_port={thrift_port};"
                   f"p4info='{P4INFO}';bmv2_json='{BMV2_JSON}';ports={args.ports};"
                   f"switch_ifaces='{','.join(sw for sw, _ in pairs)}'"]
        for i, (_, ptf_if) in enumerate(pairs, start=1):
            ptf_cmd += ["--interface", f"{i}@{ptf_if}"]
        ptf_cmd += args.tests
        result = subprocess.run(ptf_cmd, env=env, cwd=str(log_dir))
        print(f"run.py: ptf exited {result.returncode} after {time.monotonic() - t0:.1f} s; "
              f"logs in {log_dir}", flush=True)
        return result.returncode
    finally:
        if switch is not None:
            stop(switch)
        delete_veths(pairs)


if __name__ == "__main__":
    sys.exit(main())

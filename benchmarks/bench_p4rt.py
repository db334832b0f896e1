"""P4Runtime on BMv2: entries written per second (batched vs one per request) and hint-to-grant latency.

Starts its own ``simple_switch_grpc`` (``--no-p4``, no interfaces, 8 priority queues, free
gRPC and Thrift ports; polled until its gRPC port answers; stopped by PID), then, in one run:

1. **Batched**: ``safs.targets.p4rt.P4RuntimeTarget`` pushes the pipeline and writes ``--entries`` N
   ``flow_grant`` INSERTs in WriteRequests of ``--batch`` B updates (``P4RuntimeTarget.write``);
   the inserts are timed, read back (count checked), then deleted in batches (not timed).
2. **One per request, p4runtime-shell client**: the same N entries, each in its own
   WriteRequest through ``p4runtime_sh.p4runtime.P4RuntimeClient.write_update`` (protobufs
   built with ``safs.targets.p4rt.codec.encode_update``, the encoder the batched path uses, so the two
   rows differ only in requests per entry).
3. **One per request, p4runtime-shell shell**: the loop a shell user writes,
   ``te = TableEntry(table)(action=...); te.match[...] = ...; te.action[...] = ...; te.insert()``
   through ``p4runtime_sh.shell`` (its process-global session, set up here once). Includes the
   shell's own string parsing and validation per entry.
4. **Hint to grant**: ``safs.control.controller.ControllerApp`` (``admit_on_request=False``) runs
   in a thread against the switch as ``tor1`` of a two-ToR topology; for each of ``--flows``
   K flows (a -> d, d attached to tor1) the benchmark announces the flow with
   ``HintClient.announce`` and polls the switch (``P4RuntimeTarget.read_table`` of
   ``flow_grant`` on a separate backup connection) until the flow's entry is there; then
   completes the flow. Latency = first read that shows the entry returned - announce sent,
   so it includes the announce RPC (the controller installs the grant inside it) and one
   read round trip: an upper bound with one-read resolution. The announce RPC time alone is
   printed too.

Each phase uses its own P4Runtime connection with a higher election id, so it is primary;
the first target stays connected as a backup for reads. Timings are ``time.perf_counter``
(this benchmark's own clock; nothing in ``safs`` reads it). Run (about 10 s):

    cd /work/main && PYTHONPATH=controller .venv/bin/python benchmarks/bench_p4rt.py
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
from p4.v1 import p4runtime_pb2

from safs.control.controller import ControllerApp, ControllerConfig, SwitchSpec
from safs.control.hintapi.client import HintClient
from safs.core import p4names as n
from safs.core.hints import FlowHint
from safs.core.scheduler import SchedulerConfig
from safs.core.target import Op, TableEntry, Update
from safs.targets.bmv2 import target_options
from safs.targets.p4rt.codec import encode_update
from safs.targets.p4rt.target import P4RuntimeTarget

ROOT = Path(__file__).resolve().parents[1]
P4INFO = ROOT / "p4src" / "build" / "safs.p4info.txtpb"
BMV2_JSON = ROOT / "p4src" / "build" / "safs.json"
MS = 1_000_000
# Two ToRs; the benchmark's switch is tor1, where receiver d is attached (grants live there).
TOPOLOGY_YAML = """
name: bench-two-tors
defaults: {rate: 10Gbps, delay_ns: 500}
switches: [tor0, tor1]
hosts:
  a: {ip: 10.0.0.1, switch: tor0}
  d: {ip: 10.0.1.1, switch: tor1}
links:
  - {a: tor0, b: tor1, rate: 40Gbps}
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def bmv2_switch(binary: str, log_path: Path) -> Iterator[str]:
    """``simple_switch_grpc --no-p4`` with 8 priority queues; yields its gRPC ``host:port``.

    Polls the gRPC port until it answers (up to 20 s, no fixed sleep); terminates the process
    by its PID on exit (kill after 10 s).

    Raises:
        RuntimeError: the switch did not answer.
    """
    address = f"127.0.0.1:{free_port()}"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [binary, "--no-p4", "--device-id", "0", "--log-level", "error", "--thrift-port", str(free_port()),
             "--", "--grpc-server-addr", address, *target_options()],
            stdout=log_file, stderr=subprocess.STDOUT)
        try:
            channel = grpc.insecure_channel(address)
            try:
                grpc.channel_ready_future(channel).result(timeout=20)
            except grpc.FutureTimeoutError:
                raise RuntimeError(f"simple_switch_grpc did not answer on {address}; log: {log_path}") from None
            finally:
                channel.close()
            yield address
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def grant_entry(flow_id: int) -> TableEntry:
    """The ``flow_grant`` entry written for ``flow_id`` (arbitrary but valid grant values)."""
    return TableEntry(table=n.FLOW_GRANT, match={n.F_FLOW_ID: flow_id}, action=n.ACT_SET_GRANT,
                      params={"rate_kbps": 1_000_000 + flow_id, "epoch": 1, "lease_us": 10_000,
                              "meter_slot": 1 + flow_id % (n.FLOW_METER_SIZE - 1)})


def delete_all(target: P4RuntimeTarget, flow_ids: range, batch: int) -> None:
    """DELETE the grant entries of ``flow_ids`` through ``target`` in batches."""
    entries = [Update(Op.DELETE, grant_entry(f)) for f in flow_ids]
    for i in range(0, len(entries), batch):
        target.write(entries[i:i + batch])


def check_count(reader: P4RuntimeTarget, expected: int, phase: str) -> None:
    """Fail loudly if the switch does not hold ``expected`` flow_grant entries."""
    got = len(reader.read_table(n.FLOW_GRANT))
    if got != expected:
        raise RuntimeError(f"{phase}: switch holds {got} flow_grant entries, expected {expected}")


def bench_batched(target: P4RuntimeTarget, flow_ids: range, batch: int) -> float:
    """Seconds to INSERT the entries of ``flow_ids`` with ``P4RuntimeTarget.write`` in batches."""
    updates = [Update(Op.INSERT, grant_entry(f)) for f in flow_ids]
    start = time.perf_counter()
    for i in range(0, len(updates), batch):
        target.write(updates[i:i + batch])
    return time.perf_counter() - start


def bench_client_loop(address: str, target: P4RuntimeTarget, flow_ids: range) -> float:
    """Seconds to INSERT the entries one WriteRequest each through p4runtime-shell's
    ``P4RuntimeClient.write_update`` (election id (0, 2)); deletes them afterwards."""
    from p4runtime_sh.p4runtime import P4RuntimeClient
    client = P4RuntimeClient(0, address, (0, 2))
    try:
        start = time.perf_counter()
        for f in flow_ids:
            client.write_update(encode_update(target.index, Update(Op.INSERT, grant_entry(f))))
        elapsed = time.perf_counter() - start
        check_count(target, len(flow_ids), "p4runtime-shell client loop")
        req = p4runtime_pb2.WriteRequest(atomicity=p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR)
        req.updates.extend(encode_update(target.index, Update(Op.DELETE, grant_entry(f))) for f in flow_ids)
        client.write(req)
        return elapsed
    finally:
        client.tear_down()


def bench_shell_loop(address: str, target: P4RuntimeTarget, flow_ids: range) -> float:
    """Seconds to INSERT the entries with ``p4runtime_sh.shell`` ``TableEntry(...).insert()``
    one by one (election id (0, 3); the shell fetches the P4Info from the switch); deletes them
    afterwards in one request."""
    import p4runtime_sh.shell as sh
    sh.setup(device_id=0, grpc_addr=address, election_id=(0, 3), verbose=False)
    try:
        start = time.perf_counter()
        for f in flow_ids:
            e = grant_entry(f)
            te = sh.TableEntry(e.table)(action=e.action)
            te.match[n.F_FLOW_ID] = str(f)
            for name, value in e.params.items():
                te.action[name] = str(value)
            te.insert()
        elapsed = time.perf_counter() - start
        check_count(target, len(flow_ids), "p4runtime-shell TableEntry loop")
        req = p4runtime_pb2.WriteRequest(atomicity=p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR)
        req.updates.extend(encode_update(target.index, Update(Op.DELETE, grant_entry(f))) for f in flow_ids)
        sh.client.write(req)
        return elapsed
    finally:
        sh.teardown()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def bench_hint_to_grant(address: str, reader: P4RuntimeTarget, flows: int, work_dir: Path
                        ) -> tuple[list[float], list[float]]:
    """(hint-to-grant-readable seconds, announce RPC seconds) for ``flows`` flows announced one
    after another to a ControllerApp (admit_on_request=False) driving the switch as tor1."""
    topo = work_dir / "topology.yaml"
    topo.write_text(TOPOLOGY_YAML)
    config = ControllerConfig(topology_path=topo, switches=(SwitchSpec("tor1", address, 0),),
                              p4info_path=P4INFO, bmv2_json_path=BMV2_JSON, hint_addr="127.0.0.1:0",
                              scheduler=SchedulerConfig(admit_on_request=False), election_id=(0, 10))
    app = ControllerApp(config)
    app.start()
    stop = threading.Event()
    runner = threading.Thread(target=app.run, args=(stop,), daemon=True, name="controller")
    runner.start()
    to_grant: list[float] = []
    to_ack: list[float] = []
    try:
        with HintClient(app.hint_address) as hints:
            for flow_id in range(1, flows + 1):
                hint = FlowHint(flow_id, "a", "d", 1 << 20, app.clock() + 50 * MS, f"bench/{flow_id}")
                sent = time.perf_counter()
                hints.announce(hint)
                to_ack.append(time.perf_counter() - sent)
                deadline = sent + 10.0
                while not any(e.match[n.F_FLOW_ID] == flow_id for e in reader.read_table(n.FLOW_GRANT)):
                    if time.perf_counter() > deadline:
                        raise RuntimeError(f"flow {flow_id}: no flow_grant entry on the switch after 10 s")
                to_grant.append(time.perf_counter() - sent)
                hints.complete(flow_id)
    finally:
        stop.set()
        runner.join(timeout=10)
        app.stop()
    return to_grant, to_ack


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=2_000, help="flow_grant entries written per method (N)")
    parser.add_argument("--batch", type=int, default=200, help="updates per WriteRequest, batched path (B)")
    parser.add_argument("--flows", type=int, default=200, help="flows announced for the latency (K)")
    parser.add_argument("--no-shell", action="store_true", help="skip the p4runtime_sh.shell TableEntry loop")
    args = parser.parse_args()
    for name in ("entries", "batch", "flows"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.entries > (1 << 32) - 1:
        parser.error("--entries must be below 2^32 (flow ids)")
    binary = shutil.which("simple_switch_grpc")
    if binary is None:
        print("bench_p4rt: simple_switch_grpc is not on PATH; install BMv2 (with PI/gRPC) to run "
              "this benchmark", file=sys.stderr)
        return 2
    for path in (P4INFO, BMV2_JSON):
        if not path.is_file():
            print(f"bench_p4rt: missing compiled artifact {path}; compile p4src first", file=sys.stderr)
            return 2
    logging.basicConfig(level=logging.WARNING)
    # tor0 is deliberately unmanaged (one switch); its "no --switch for tor0" warning is noise here.
    logging.getLogger("safs.control.controller").setLevel(logging.ERROR)

    flow_ids = range(1, args.entries + 1)
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench_p4rt_") as tmp:
        work_dir = Path(tmp)
        with bmv2_switch(binary, work_dir / "bmv2.log") as address:
            with P4RuntimeTarget("tor1", address, 0, P4INFO, BMV2_JSON, election_id=(0, 1)) as target:
                target.push_pipeline()
                batched_s = bench_batched(target, flow_ids, args.batch)
                check_count(target, args.entries, "batched")
                delete_all(target, flow_ids, args.batch)
                check_count(target, 0, "batched delete")
                client_s = bench_client_loop(address, target, flow_ids)
                check_count(target, 0, "client loop delete")
                shell_s = None
                if not args.no_shell:
                    shell_s = bench_shell_loop(address, target, flow_ids)
                    check_count(target, 0, "shell loop delete")
                to_grant, to_ack = bench_hint_to_grant(address, target, args.flows, work_dir)

    batched_rate = args.entries / batched_s
    client_rate = args.entries / client_s
    rows.append((f"P4RuntimeTarget.write, batches of {args.batch}", f"{batched_rate:,.0f} entries/s"))
    rows.append(("p4runtime-shell P4RuntimeClient.write_update, 1 per request", f"{client_rate:,.0f} entries/s"))
    if shell_s is not None:
        rows.append(("p4runtime-shell shell TableEntry().insert(), 1 per request",
                     f"{args.entries / shell_s:,.0f} entries/s"))
    rows.append(("ratio batched / client loop", f"{batched_rate / client_rate:.1f}x"))
    if shell_s is not None:
        rows.append(("ratio batched / shell loop", f"{batched_rate / (args.entries / shell_s):.1f}x"))
    ms = [v * 1e3 for v in to_grant]
    ack_ms = [v * 1e3 for v in to_ack]
    rows.append((f"hint -> grant readable on switch, p50 ({args.flows} flows)", f"{percentile(ms, 50):.2f} ms"))
    rows.append((f"hint -> grant readable on switch, p99 ({args.flows} flows)", f"{percentile(ms, 99):.2f} ms"))
    rows.append(("announce RPC (grant written inside it), p50 / p99",
                 f"{percentile(ack_ms, 50):.2f} / {percentile(ack_ms, 99):.2f} ms"))
    rows.append(("hint -> grant readable, mean", f"{statistics.fmean(ms):.2f} ms"))

    print(f"P4Runtime on BMv2 simple_switch_grpc: {args.entries:,} flow_grant entries per method, "
          f"{args.flows} flows for latency")
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"  {label:<{width}}  {value:>20}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

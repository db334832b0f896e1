"""Host agent pacing: achieved SAFS rate / target rate, and the TCP baseline, on loopback.

Starts two agents (``python -m safs.apps.agent``) on two loopback addresses of this namespace,
no switch: the sender holds the default grant (epoch 0), so it paces at ``--default-rate-bps``,
set to each target rate in turn. For every rate it sends one flow lasting ``--seconds`` and
prints the achieved wire rate (DATA wire bytes the sender sent, over first REQUEST to the
receiver's last byte, both fabric time) as a ratio of the target, with the token-bucket depth
used. A TCP flow of the same size (no pacing: as fast as loopback and the CPU allow) is the
baseline row. Ratios below 1 come from the agent being descheduled longer than its token
bucket holds credit (busy machine) or running out of CPU (hundreds of Mbit/s in Python).

Run (about 10 s):

    cd /work/main && .venv/bin/python benchmarks/bench_emu_agent.py [--rates-mbps 20 50 100 200]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from safs.experiments.mininet.agent_control import AgentClient

A_IP, B_IP = "127.77.0.1", "127.77.0.2"


def _agents(tmp: str, extra: list[str]) -> tuple[list[subprocess.Popen], list[AgentClient]]:
    procs, clients = [], []
    for name, ip in (("a", A_IP), ("b", B_IP)):
        path = os.path.join(tmp, f"{name}.sock")
        proc = subprocess.Popen([sys.executable, "-m", "safs.apps.agent", "--host", name, "--ip", ip,
                                 "--control", path, *extra], stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()  # READY <pid>
        procs.append(proc)
        clients.append(AgentClient.connect(path))
    return procs, clients


def _flow(a: AgentClient, b: AgentClient, flow_id: int, size: int, transport: str) -> tuple[dict, dict]:
    b.expect(flow_id, A_IP, size, transport)
    a.send(flow_id, B_IP, size, transport)
    got: dict[str, dict] = {}
    deadline = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < deadline:
        for ev in a.events() + b.events():
            got[ev["role"]] = ev
        time.sleep(0.002)
    return got["sender"], got["receiver"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates-mbps", type=float, nargs="+", default=[20, 50, 100, 200])
    ap.add_argument("--seconds", type=float, default=0.5, help="planned duration of each flow")
    ap.add_argument("--burst-bytes", type=int, default=None, help="--pace-burst-bytes of the sender")
    args = ap.parse_args()
    print(f"{'transport':>9} {'target Mbit/s':>13} {'achieved':>9} {'ratio':>6} {'burst B':>8} {'CPU load':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, mbps in enumerate(args.rates_mbps):
            rate = int(mbps * 1e6)
            extra = ["--default-rate-bps", str(rate), "--line-rate-bps", str(rate)]
            if args.burst_bytes:
                extra += ["--pace-burst-bytes", str(args.burst_bytes)]
            procs, (a, b) = _agents(tmp, extra)
            try:
                size = int(rate * args.seconds / 8)
                sender, receiver = _flow(a, b, 100 + i, size, "safs")
                stats = a.stats()
                wire = stats["safs"]["data_bytes_sent"]
                achieved = wire * 8 / ((receiver["finish_ns"] - sender["start_ns"]) / 1e9)
                print(f"{'safs':>9} {mbps:13.0f} {achieved / 1e6:9.1f} {achieved / rate:6.3f} "
                      f"{stats['config']['pace_burst_bytes']:8d} {os.getloadavg()[0]:8.2f}")
                if i == len(args.rates_mbps) - 1:
                    t_sender, t_receiver = _flow(a, b, 999, size, "tcp")
                    tcp_rate = size * 8 / ((t_receiver["finish_ns"] - t_sender["start_ns"]) / 1e9)
                    print(f"{'tcp':>9} {'(unpaced)':>13} {tcp_rate / 1e6:9.1f} {'':>6} {'':>8} "
                          f"{os.getloadavg()[0]:8.2f}  cc={stats['tcp']['tcp_congestion_control']}")
            finally:
                for c in (a, b):
                    c.shutdown()
                for p in procs:
                    p.wait(10)


if __name__ == "__main__":
    main()

"""Bring a topology up in Mininet with BMv2 switches and the SAFS controller, for hands-on use.

    sudo .venv/bin/python mininet/net_up.py topologies/mininet-afd.yaml [--cli] [--keep-logs DIR]

Builds the network (safs.experiments.mininet.net.build: BMv2 ``simple_switch_grpc`` per switch, hosts, the
strict-priority bottleneck on every switch egress), starts the controller over P4Runtime with the
hint API on a Unix socket, calibrates the switch clocks, prints where everything is, and waits
for Ctrl-C (or opens Mininet's CLI with ``--cli``). Everything is removed on exit.
Not a package module: this folder must not become a package (it would shadow Mininet).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import threading
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology", type=Path)
    ap.add_argument("--cli", action="store_true", help="open Mininet's CLI instead of waiting for Ctrl-C")
    ap.add_argument("--keep-logs", type=Path, help="directory for switch logs and sockets (default: temporary)")
    ap.add_argument("--mtu-bytes", type=int, default=1500)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from safs.control.controller import ControllerApp, ControllerConfig, SwitchSpec
    from safs.core.topology import load_topology
    from safs.experiments.mininet import net as emunet
    from safs.experiments.mininet.backend import BMV2_JSON, P4INFO, calibrate_clocks

    topology = load_topology(args.topology)
    run_dir = args.keep_logs or Path(tempfile.mkdtemp(prefix="safs-mn-"))
    emu = emunet.build(topology, run_dir, mtu_bytes=args.mtu_bytes)
    stop = threading.Event()
    try:
        hint = f"unix:{run_dir / 'hints.sock'}"
        config = ControllerConfig(
            topology_path=args.topology,
            p4info_path=P4INFO,
            bmv2_json_path=BMV2_JSON,
            switches=tuple(SwitchSpec(sw, emu.switch(sw).grpc_addr) for sw in topology.switches()),
            hint_addr=hint,
        )
        with ControllerApp(config) as app:
            app.start()
            thread = threading.Thread(target=app.run, args=(stop,), daemon=True)
            thread.start()
            calibrate_clocks(emu, app)
            for sw in topology.switches():
                s = emu.switch(sw)
                print(f"{sw}: P4Runtime {s.grpc_addr}, Thrift {s.thrift_port}, log {s.log_path}")
            print(f"hint API: {hint}; hosts: {', '.join(topology.hosts())}")
            if args.cli:
                from mininet.cli import CLI

                CLI(emu.net)
            else:
                print("up; Ctrl-C stops and removes everything")
                stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        emu.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

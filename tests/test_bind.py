"""The controller's early listen checks (safs.control.bind): a free fixed port passes and stays
free (the bug: a probe gRPC server kept it, so every fixed --hint-addr, the default 50051
included, then failed), a port in use or a missing socket directory is one line naming the
option."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from safs.control.bind import check_listen
from safs.control.hintapi.server import check_bind
from safs.core.errors import InvalidInput


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_free_fixed_port_passes_and_is_still_free_afterwards() -> None:
    port = free_port()
    check_bind(f"127.0.0.1:{port}")
    check_bind(f"127.0.0.1:{port}")  # twice: the first check let it go
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()


def test_a_port_in_use_an_unknown_host_and_a_missing_directory_are_refused(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(InvalidInput, match=rf"cannot listen on 127.0.0.1:{port}: Address already in use") as err:
            check_listen("--metrics-addr", f"127.0.0.1:{port}")
        assert err.value.field == "--metrics-addr"
    with pytest.raises(InvalidInput, match="cannot resolve no-such-host.invalid:1"):
        check_listen("--hint-addr", "no-such-host.invalid:1")
    with pytest.raises(InvalidInput, match="is not a writable directory") as err:
        check_bind(f"unix:{tmp_path}/missing/h.sock")
    assert err.value.field == "--hint-addr"
    check_bind(f"unix:{tmp_path}/h.sock")


def test_the_controller_serves_on_a_fixed_port(topo_file: Path) -> None:
    """``safs controller --model --hint-addr 127.0.0.1:PORT`` serves there (it failed for every
    fixed port)."""
    from safs.control.controller import ControllerApp, ControllerConfig, SwitchSpec
    from safs.control.hintapi.client import HintClient
    from safs.core.hints import DependencyHint

    root = Path(__file__).resolve().parents[1]
    port = free_port()
    cfg = ControllerConfig(topology_path=topo_file, switches=(SwitchSpec("tor0", "in-process:0"),
                                                              SwitchSpec("tor1", "in-process:0")),
                           p4info_path=root / "p4src/build/safs.p4info.txtpb",
                           bmv2_json_path=root / "p4src/build/safs.json", hint_addr=f"127.0.0.1:{port}", model=True)
    app = ControllerApp(cfg)
    app.start()
    try:
        with HintClient(f"127.0.0.1:{port}") as hints:
            assert hints.announce_dependencies([DependencyHint(1, "a", "d")]) == 1
    finally:
        app.stop()

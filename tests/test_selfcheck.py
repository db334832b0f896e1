"""The controller's start-up self-check (safs.control.selfcheck, docs/operations.md): one probe
per priority queue, looped back through the switch's CPU port.

Against the in-process fake P4Runtime switch everywhere (its ``priority_queues`` and
``cpu_port`` options stand for BMv2's command line), and against BMv2 where
``simple_switch_grpc`` is installed (marker ``bmv2``): started as SAFS needs it, it passes;
with ``--priority-queues 1`` or without ``--cpu-port`` it is refused with the cause named.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from test_p4rt_target import Bmv2  # simple_switch_grpc started and stopped by PID

from safs.control.selfcheck import _ranges, check_switch
from safs.core.errors import InvalidInput
from safs.core.protocol import pack_probe, unpack_probe
from safs.targets.bmv2 import target_options
from safs.targets.p4rt.target import P4RuntimeTarget
from safs.targets.pipeline_model import PipelineModel
from safs.testing.fake_p4rt import FakeP4RuntimeServer

ROOT = Path(__file__).resolve().parents[1]
P4INFO = ROOT / "p4src" / "build" / "safs.p4info.txtpb"
BMV2_JSON = ROOT / "p4src" / "build" / "safs.json"
TIMEOUT_S = 10.0  # generous: two busy cores (an answered probe returns in milliseconds)


def _target(address: str, p4info: Path = P4INFO) -> P4RuntimeTarget:
    t = P4RuntimeTarget("tor0", address, 0, p4info, BMV2_JSON, timeout_s=20.0)
    try:
        t.push_pipeline()
    except BaseException:
        t.close()
        raise
    return t


def test_probe_frame_round_trips_and_rejects_other_frames() -> None:
    frame = pack_probe(0x0123456789ABCDEF, 7)
    assert len(frame) == 27 and frame[12:14] == b"\x88\xb5"
    assert unpack_probe(frame) == (0x0123456789ABCDEF, 7)
    assert unpack_probe(frame[:20]) is None
    assert unpack_probe(frame[:12] + b"\x08\x00" + frame[14:]) is None
    with pytest.raises(InvalidInput, match="queue"):
        pack_probe(1, 8)


def test_ranges() -> None:
    assert _ranges([1, 2, 3, 4, 5, 6, 7]) == "1..7"
    assert _ranges([0, 2, 3, 7]) == "0, 2..3, 7"


def test_every_queue_answers_on_a_switch_with_eight_queues() -> None:
    with FakeP4RuntimeServer() as server:
        t = _target(server.address)
        try:
            assert t.probe_queues(range(8), TIMEOUT_S) == set(range(8))
            check_switch("tor0", server.address, t, TIMEOUT_S)  # passes
        finally:
            t.close()
    assert PipelineModel("m", lambda: 0).probe_queues(range(8), 0.0) == set(range(8))
    check_switch("m", "in-process:0", PipelineModel("m", lambda: 0))


def test_one_queue_switch_is_refused_naming_the_switch_the_queues_and_priority_queues() -> None:
    with FakeP4RuntimeServer(priority_queues=1) as server:
        t = _target(server.address)
        try:
            with pytest.raises(InvalidInput) as err:
                check_switch("tor0", server.address, t, timeout_s=2.0)
        finally:
            t.close()
    assert err.value.field == f"--switch tor0={server.address}"
    assert "queues 1..7 do not forward" in err.value.message
    assert "--priority-queues 8" in err.value.message
    assert "\n" not in str(err.value)


def test_no_answer_is_refused_naming_the_cpu_port() -> None:
    with FakeP4RuntimeServer(cpu_port=None) as server:
        t = _target(server.address)
        try:
            with pytest.raises(InvalidInput) as err:
                check_switch("tor0", server.address, t, timeout_s=1.0)
        finally:
            t.close()
        assert server.packet_outs_dropped == 8
    assert err.value.field == f"--switch tor0={server.address}"
    assert "--cpu-port 255" in err.value.message and "SAFS program" in err.value.message


def test_a_program_without_packet_io_is_refused_naming_p4info(tmp_path: Path) -> None:
    p4info = p4info_pb2.P4Info()
    text_format.Merge(P4INFO.read_text(), p4info)
    del p4info.controller_packet_metadata[:]
    old = tmp_path / "old.p4info.txtpb"
    old.write_text(text_format.MessageToString(p4info))
    with FakeP4RuntimeServer() as server:
        t = _target(server.address, old)
        try:
            with pytest.raises(InvalidInput, match=r"--switch tor0=.*no packet_out header.*--p4info"):
                check_switch("tor0", server.address, t, timeout_s=1.0)
        finally:
            t.close()


def test_a_backup_cannot_probe() -> None:
    """Only the primary's PacketOuts are taken (PI): a backup sees no answer."""
    with FakeP4RuntimeServer() as server:
        primary = _target(server.address)
        backup = P4RuntimeTarget("tor0", server.address, 0, P4INFO, BMV2_JSON, election_id=(0, 0), timeout_s=20.0)
        try:
            assert not backup.is_primary
            assert backup.probe_queues(range(8), 0.5) == set()
            assert primary.probe_queues(range(8), TIMEOUT_S) == set(range(8))
        finally:
            backup.close()
            primary.close()


@pytest.mark.bmv2
@pytest.mark.parametrize("options, problem", [
    (None, None),
    (["--priority-queues", "1", "--cpu-port", "255"], "queues 1..7 do not forward"),
    (["--priority-queues", "8"], "no probe came back"),
], ids=["as-safs-needs", "one-queue", "no-cpu-port"])
def test_bmv2(tmp_path: Path, options: list[str] | None, problem: str | None) -> None:
    """BMv2 started with target_options() passes; one priority queue or no CPU port is refused."""
    assert target_options() == ["--priority-queues", "8", "--cpu-port", "255"]
    sw = Bmv2(tmp_path, options)
    try:
        t = _target(sw.address)
        try:
            if problem is None:
                check_switch("tor0", sw.address, t, TIMEOUT_S)
            else:
                with pytest.raises(InvalidInput) as err:
                    check_switch("tor0", sw.address, t, timeout_s=2.0)
                assert err.value.field == f"--switch tor0={sw.address}"
                assert problem in err.value.message
        finally:
            t.close()
    finally:
        sw.stop()

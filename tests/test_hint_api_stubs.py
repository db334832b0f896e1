"""The committed gRPC stubs of the hint API match proto/safs/v1/hints.proto.

Without a generator: the stubs' header names the generator version and the SHA-256 of the
.proto they came from (so editing the .proto without regenerating fails here), and they load
on the installed protobuf. With ``grpcio-tools==1.49.1`` (importable here, or a Python that has
it named by ``SAFS_GRPC_TOOLS_PYTHON``): regenerate into a temporary directory and compare
byte for byte. grpcio-tools 1.49.1 needs protobuf >= 4.21.3 while p4runtime-shell 0.0.6 needs
protobuf 3.20.x, so it normally lives in its own virtual environment (docs/hint-api.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import google.protobuf
import pytest

from safs.control.hintapi import generate
from safs.control.hintapi import hints_pb2 as pb
from safs.control.hintapi import hints_pb2_grpc as pb_grpc

ENV_VAR = "SAFS_GRPC_TOOLS_PYTHON"
GENERATE_SCRIPT = Path(generate.__file__)


def test_committed_stubs_name_generator_and_current_proto() -> None:
    sha = generate.proto_sha256()
    for name in generate.STUB_NAMES:
        text = (generate.STUB_DIR / name).read_text()
        assert text.startswith(generate.header(sha)), (
            f"{name} was not generated from the current proto/{generate.PROTO_REL} by "
            f"{generate.GENERATOR} {generate.GENERATOR_VERSION}: regenerate (docs/hint-api.md)")


def test_stubs_load_on_installed_protobuf_and_define_the_service() -> None:
    service = pb.DESCRIPTOR.services_by_name["HintService"]
    assert service.full_name == "safs.v1.HintService"
    assert [m.name for m in service.methods] == ["Announce", "Update", "Complete", "GetGrant",
                                                 "AnnounceDependencies", "EndDependency", "EndDependencies"]
    assert pb.AnnounceRequest.__module__ == "safs.control.hintapi.hints_pb2"
    assert [f.name for f in pb.Dependency.DESCRIPTOR.fields] == ["dep_id", "sender", "receiver", "label", "flow_class"]
    assert hasattr(pb_grpc, "HintServiceStub") and hasattr(pb_grpc, "add_HintServiceServicer_to_server")
    # proto3 `optional` fields keep presence on this protobuf runtime
    assert not pb.AnnounceRequest().HasField("start_time_ns")
    assert pb.AnnounceRequest(start_time_ns=0).HasField("start_time_ns")
    major_minor = tuple(int(x) for x in google.protobuf.__version__.split(".")[:2])
    assert major_minor >= (3, 20), "builder-style stubs need protobuf >= 3.20"


def _generator_python() -> str:
    """A Python interpreter with exactly the generator version, or pytest.skip naming what is missing."""
    want = f"{generate.GENERATOR}=={generate.GENERATOR_VERSION}"
    found = generate.installed_generator_version()
    if found == generate.GENERATOR_VERSION:
        return sys.executable
    other = os.environ.get(ENV_VAR)
    if other:
        probe = subprocess.run([other, "-c", "import grpc_tools.protoc; from importlib.metadata import version; "
                                f"print(version({generate.GENERATOR!r}))"],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode == 0 and probe.stdout.strip() == generate.GENERATOR_VERSION:
            return other
        pytest.skip(f"{want} is not importable by {ENV_VAR}={other} "
                    f"(got {probe.stdout.strip() or probe.stderr.strip()[-200:]})")
    pytest.skip(f"{want} is not importable here (found {found or 'none'}) and {ENV_VAR} is not set; "
                f"install it in its own venv (it needs protobuf>=4.21.3) and set {ENV_VAR} to its python")


def test_regenerate_and_diff(tmp_path: Path) -> None:
    python = _generator_python()
    run = subprocess.run([python, str(GENERATE_SCRIPT), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    for name in generate.STUB_NAMES:
        fresh = (tmp_path / name).read_text()
        committed = (generate.STUB_DIR / name).read_text()
        assert fresh == committed, f"{name} differs from a fresh generation: regenerate (docs/hint-api.md)"

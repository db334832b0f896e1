"""The P4 program and the pipeline model share one set of P4Runtime names (safs.core.p4names).

The pure-Python test reads the P4 source everywhere; the compile test needs p4c-bm2-ss and
checks that the committed artifacts (P4Info text, BMv2 JSON) are what the source compiles to.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from safs.core import p4names
from safs.targets.p4rt.p4info import P4InfoIndex

ROOT = Path(__file__).resolve().parents[1]
P4SRC = ROOT / "p4src"
MAIN = P4SRC / "v1model" / "safs.p4"
ARTIFACTS = P4SRC / "build"


def _p4_text() -> str:
    return "\n".join(p.read_text() for p in sorted(P4SRC.rglob("*.p4")))


def _contract_names() -> dict[str, str]:
    """Every fully qualified object name in safs.core.p4names (tables, actions, externs)."""
    return {k: v for k, v in vars(p4names).items()
            if k.isupper() and isinstance(v, str) and v.startswith(("SafsIngress.", "SafsEgress."))}


def test_every_p4names_object_is_named_in_the_p4_source() -> None:
    absolute = set(re.findall(r'@name\("\.([A-Za-z0-9_.]+)"\)', _p4_text()))
    missing = {k: v for k, v in _contract_names().items() if v not in absolute}
    assert not missing, f"names in safs.core.p4names without an @name in p4src/: {missing}"


def test_p4names_constants_equal_the_defines_of_the_p4_source() -> None:
    """The numbers the pipeline model and the controller mirror from defines.p4 (a drift would
    make the model and the switch disagree, which only the BMv2 differential test would see)."""
    defines = dict(re.findall(r"^#define (\w+) +(\d+)", (P4SRC / "include" / "defines.p4").read_text(), re.M))
    mirrored = {name: getattr(p4names, name) for name in (
        "ECMP_GROUPS", "ECMP_MEMBERS", "MAX_LOAD", "TOP_WINDOW_NS", "DEP_SLOTS", "NUM_PORTS", "QDEPTH_BUCKETS",
        "CLONE_SESSION_BASE", "TRAFFIC_CLASS_SIZE", "TOP_BOOST_SIZE", "AGGREGATE_METERS", "WEIGHT_BASE_BITS",
        "WEIGHT_MAX_SHIFT")}
    mirrored["FINISH_SHIFT_A"], mirrored["FINISH_SHIFT_B"] = p4names.FINISH_SHIFTS
    assert {name: int(defines[name]) for name in mirrored} == mirrored


def test_match_fields_and_digest_are_in_the_p4_source() -> None:
    text = _p4_text()
    fields = {k: v for k, v in vars(p4names).items() if k.startswith("F_")}
    assert len(fields) >= 6  # dst/src addr, egress port, slack key, dep_id, load, mode
    missing = {k: v for k, v in fields.items() if f'@name("{v}")' not in text}
    assert not missing, f"match fields in safs.core.p4names without an @name in p4src/: {missing}"
    assert f"struct {p4names.REQUEST_DIGEST}" in text


@pytest.mark.p4c
def test_committed_artifacts_match_the_source(tmp_path: Path) -> None:
    """Recompile p4src/ and compare with p4src/build/ (regenerate: see p4src/README.md)."""
    p4info, json_out = tmp_path / "safs.p4info.txtpb", tmp_path / "safs.json"
    # Paths relative to the repository root, as in p4src/README.md: the BMv2 JSON records them.
    subprocess.run([shutil.which("p4c-bm2-ss"), "--arch", "v1model", "-I", "p4src",
                    "--p4runtime-files", str(p4info), "-o", str(json_out), "p4src/v1model/safs.p4"],
                   check=True, capture_output=True, text=True, cwd=ROOT)
    assert (ARTIFACTS / "safs.p4info.txtpb").read_text() == p4info.read_text()
    assert (ARTIFACTS / "safs.json").read_text() == json_out.read_text()


def test_committed_p4info_has_every_name_the_pipeline_model_uses() -> None:
    """Runs everywhere: the P4Info the controller loads knows every name of safs.core.p4names."""
    text = (ARTIFACTS / "safs.p4info.txtpb").read_text()
    names = set(re.findall(r'^\s+name: "([^"]+)"', text, flags=re.M))
    missing = {k: v for k, v in _contract_names().items() if v not in names}
    assert not missing, f"not in the committed P4Info (recompile p4src/): {missing}"
    assert p4names.REQUEST_DIGEST in names


def test_committed_p4info_has_the_packet_io_headers_p4names_names() -> None:
    """PacketOut/PacketIn (the start-up self-check's probe): the controller headers, their
    fields in order and the CPU port, as safs.core.p4names names them."""
    index = P4InfoIndex.from_file(ARTIFACTS / "safs.p4info.txtpb")
    assert [(f.name, f.bitwidth) for f in index.packet_metadata[p4names.PACKET_OUT]] == \
        [(p4names.M_EGRESS_PORT, 9), (p4names.M_QUEUE, 3), (p4names.M_PAD, 4)]
    assert [(f.name, f.bitwidth) for f in index.packet_metadata[p4names.PACKET_IN]] == \
        [(p4names.M_INGRESS_PORT, 9), (p4names.M_QUEUE, 3), (p4names.M_PAD, 4)]
    assert f"const port_t CPU_PORT = {p4names.CPU_PORT};" in _p4_text()

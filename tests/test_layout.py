"""Repository layout rules that protect users' environments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mininet_folder_never_shadows_the_real_mininet_package() -> None:
    """`import mininet` from the repository root must not load code from ./mininet/.

    A folder without __init__.py is at most a namespace package, and the import system prefers
    a regular package (Debian's mininet) anywhere on sys.path over it.
    """
    assert not (ROOT / "mininet" / "__init__.py").exists()
    probe = ("import importlib.util, json; s = importlib.util.find_spec('mininet'); "
             "print(json.dumps(None if s is None else s.origin))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    origin = out.stdout.strip()
    # None (absent), null (namespace: no code) or a real module file that is not in ./mininet/
    # (a .venv inside the repository may hold Debian's package, linked in: docs/mininet.md).
    if origin not in ("null", "None"):
        assert not Path(json.loads(origin)).resolve().is_relative_to(ROOT / "mininet")

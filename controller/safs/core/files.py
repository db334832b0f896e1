"""Reading user files (scenarios, topologies, traces, distributions) with one-line errors.

Every failure becomes :class:`safs.core.errors.InvalidInput` naming the file and what was wrong,
so the CLI prints one line and no traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from safs.core.errors import InvalidInput


def read_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of ``path``.

    Args:
        what: the kind of file, used as the error's field (``"trace"``, ``"topology"``...).

    Raises:
        InvalidInput: unreadable (missing, a directory, no permission) or not UTF-8 text.
    """
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(what, f"cannot read file: {exc.strerror}", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(what, f"not UTF-8 text (byte {exc.start})", source=str(path)) from None


def load_yaml(path: str | Path, what: str) -> Any:
    """Parse a YAML file.

    Raises:
        InvalidInput: as :func:`read_text`, or not valid YAML (the message gives line, column
            and the parser's problem on one line).
    """
    text = read_text(path, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else what
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidInput(where, f"not valid YAML: {problem}", source=str(path)) from None

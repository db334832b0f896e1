"""Reading user files (scenarios, topologies, traces, distributions) with one-line errors.

Every failure becomes :class:`safs.core.errors.InvalidInput` naming the file and what was wrong,
so the CLI prints one line and no traceback.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from safs.core.errors import InvalidInput


def data_path(*parts: str) -> Path:
    """A file or directory the package ships (``safs/data/...``): scenarios, topologies, the
    compiled P4 programs (``p4/``), the hint API's .proto (``proto/``), flow-size
    distributions and traces. Works for editable and regular installs (pip unpacks packages
    as files); the checkout's ``scenarios/``, ``topologies/``, ``proto/`` and ``p4src/build``
    are links into the same directory.
    """
    return Path(str(resources.files("safs").joinpath("data", *parts)))


P4INFO_PATH = data_path("p4", "safs.p4info.txtpb")  # the compiled v1model program (p4src/build)
BMV2_JSON_PATH = data_path("p4", "safs.json")


def shipped_scenarios() -> list[str]:
    """Names of the scenarios the package ships (``safs run NAME``), sorted; ``eval/NAME`` for
    the evaluation's own."""
    root = data_path("scenarios")
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.yaml"))


def scenario_path(text: str | Path) -> Path:
    """The scenario file a user named: an existing path as given, else a shipped scenario by
    name (``zerobubble``, ``eval/afd-16a2f``; ``.yaml`` optional).

    Raises:
        InvalidInput: neither a file nor a shipped name (the message lists the shipped ones).
    """
    path = Path(text)
    if path.exists():
        return path
    name = path.as_posix().removesuffix(".yaml")
    shipped = data_path("scenarios", f"{name}.yaml")
    if shipped.is_file() and ".." not in path.parts:
        return shipped
    raise InvalidInput("scenario", f"no such file, and not a shipped scenario; shipped: "
                       f"{', '.join(shipped_scenarios())}", source=str(text))


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


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with the same key twice (PyYAML keeps the last one,
    so ``background_share: 0.1`` then ``background_share: 0.3`` would silently mean 0.3)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: str | Path, what: str) -> Any:
    """Parse a YAML file.

    Raises:
        InvalidInput: as :func:`read_text`, or not valid YAML, or a key given twice in one
            mapping (the message gives line, column and the problem on one line).
    """
    text = read_text(path, what)
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else what
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidInput(where, f"not valid YAML: {problem}", source=str(path)) from None

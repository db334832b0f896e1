"""argparse with one-line errors, for every command line of the package."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line, ``PROG: error: MESSAGE (see PROG --help)``, exit 2
    (argparse prints the whole usage block first; with many options that buries the message)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def progress_bar(console: Console, quiet: bool) -> Progress:
    """The bar ``safs run`` and ``safs eval`` show while runs finish (description, bar, done of
    total, elapsed time); gone when it ends, off with ``--quiet``."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, disable=quiet, transient=True)

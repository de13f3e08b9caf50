"""The one exception type the data pipeline raises for bad input."""

from __future__ import annotations

from pathlib import Path


class DatasetError(ValueError):
    """Bad dataset input: a registry entry, an OGB folder, a cache entry.

    The message is one line that names the file (or field) and what was expected, so the CLI can
    print it as is.

    Args:
        where: The file path or dotted field name the problem is in.
        problem: What is wrong and what was expected.
    """

    def __init__(self, where: str | Path, problem: str) -> None:
        self.where = str(where)
        self.problem = problem
        super().__init__(f"{self.where}: {problem}")

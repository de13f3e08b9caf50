"""The one exception type the data pipeline raises for bad input."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def writing_under(folder: str | Path) -> Iterator[None]:
    """Name ``folder`` in an ``OSError`` without a file name raised inside the block (a write that
    found the disk full names none), so the CLI says where in one line; it was a traceback."""
    try:
        yield
    except OSError as err:
        if err.filename is not None or err.errno is None:
            raise
        raise OSError(err.errno, err.strerror or str(err), str(folder)) from err

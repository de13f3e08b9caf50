"""The one exception type the data pipeline raises for bad input, and the folder named in a failed write."""

from __future__ import annotations

import errno
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


#: ``OSError`` numbers of a write the file system refused for want of room or rights: a write names
#: no file, and :func:`writing_under` names the folder written to.
WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


@contextmanager
def writing_under(folder: str | Path) -> Iterator[None]:
    """Name ``folder`` in a :data:`WRITE_ERRORS` ``OSError`` without a file name raised inside the
    block (a write that found the disk full names none), so the CLI says where in one line; it was
    a traceback. Other errors (a read's ``EIO``) pass as they are."""
    try:
        yield
    except OSError as err:
        if err.filename is not None or err.errno not in WRITE_ERRORS:
            raise
        raise OSError(err.errno, err.strerror or str(err), str(folder)) from err

"""Write-then-rename helpers: nothing half-written is ever visible under its final name."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO, Callable

from pipeline.temp_paths import current_umask, make_temp_file


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write`` on a binary temp file beside ``path`` (unique, so concurrent writers never
    share it), fsync it, then rename it over ``path``; on any error the temp file is removed.

    The temp is named after its owner (:mod:`pipeline.temp_paths`), and stale temps of killed
    writers in the same folder are removed first."""
    path = Path(path)
    fd, tmp = make_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_write`."""
    atomic_write(path, lambda handle: handle.write(text.encode()))


def save_figure(fig: Any, path: Path, dpi: int = 100) -> None:
    """Save a matplotlib figure as PNG through :func:`atomic_write`."""
    atomic_write(path, lambda handle: fig.savefig(handle, format="png", dpi=dpi))

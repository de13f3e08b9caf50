"""Which files of a folder changed since their checksums were last compared, known from their stat.

A cache hit cannot afford to checksum every array (gigabytes for the products twin), so it read a
flipped byte in the features as data. A stamp — each file's size, modification and change times and
inode, recorded when its checksum was taken or compared — tells the files that were written to,
replaced, copied or restored since: only those are checksummed again. The change time cannot be
set back by a program (``touch -d`` or ``os.utime`` set the modification time, and move the change
time forward), so an edit is seen even when it keeps the modification time. What the stamp cannot
see is a byte the disk itself flipped without a write; ``gnnkit cache verify`` checksums everything.

The stamps live in ``checked.json`` beside the files (written whole by a rename); a folder gnnkit
cannot write to keeps no stamp, and its files are checked each time they are looked up.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipeline.atomic import atomic_write_text

#: The stamps' file, in the folder whose files it stamps.
STAMPS = "checked.json"


def stamp(path: Path) -> list[int]:
    """``path``'s size, modification and change times (ns) and inode."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _read(folder: Path) -> dict[str, list[int]]:
    try:
        stamps = json.loads((folder / STAMPS).read_text())
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def changed(folder: Path, files: list[str]) -> list[str]:
    """Those of ``files`` (relative to ``folder``) whose stat differs from their stamp, or that have
    none (a folder without stamps, or an unreadable stamps file: every file)."""
    stamps = _read(folder)
    return [name for name in files if stamps.get(name) != _stamp_or_none(folder / name)]


def _stamp_or_none(path: Path) -> list[int] | None:
    try:
        return stamp(path)
    except OSError:
        return None


def record(folder: Path, stamps: dict[str, list[int]]) -> bool:
    """Keep ``stamps`` (file -> :func:`stamp`, taken before the file's checksum was taken or
    compared) beside the folder's other stamps; ``False`` when the folder cannot be written (the
    files are then checked at every look-up)."""
    try:
        atomic_write_text(folder / STAMPS, json.dumps({**_read(folder), **stamps}) + "\n")
    except OSError:
        return False
    return True

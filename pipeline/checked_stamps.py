"""Which files of a folder changed since their checksums were last compared, known from their stat.

A cache hit cannot afford to checksum every array (gigabytes for the products twin), so it read a
flipped byte in the features as data. A stamp — each file's size, modification and change times and
inode, recorded when its checksum was taken or compared — tells the files that were written to,
replaced, copied or restored since: only those are checksummed again. The change time cannot be
set back by a program (``touch -d`` or ``os.utime`` set the modification time, and move the change
time forward), so an edit is seen even when it keeps the modification time. What the stamp cannot
see is a byte the disk itself flipped without a write; ``gnnkit cache verify`` checksums everything.

The stamps live in ``checked.json`` beside the files (written whole by a rename); those of a folder
gnnkit cannot write to (a shared read-only cache) in ``$GNNKIT_HOME/checked/``, named by a hash of
the folder's path; where neither can be written, the files are checked at every look-up.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pipeline.atomic import atomic_write_text
from pipeline.errors import DatasetError
from pipeline.paths import gnnkit_home

#: The stamps' file, in the folder whose files it stamps.
STAMPS = "checked.json"


def stamp(path: Path) -> list[int]:
    """``path``'s size, modification and change times (ns) and inode."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _kept_elsewhere(folder: Path) -> Path | None:
    """Where the stamps of a folder gnnkit cannot write to are kept (``None``: no usable home)."""
    try:
        home = gnnkit_home()
    except DatasetError:
        return None
    name = hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:32]
    return home / "checked" / f"{name}.json"


def _read_file(path: Path | None) -> dict[str, list[int]]:
    try:
        stamps = json.loads(path.read_text()) if path is not None else {}
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def _read(folder: Path) -> dict[str, list[int]]:
    return {**_read_file(_kept_elsewhere(folder)), **_read_file(folder / STAMPS)}


def changed(folder: Path, files: list[str]) -> list[str]:
    """Those of ``files`` (relative to ``folder``) whose stat differs from their stamp, or that have
    none (a folder without stamps, or an unreadable stamps file: every file). A stamp in the folder
    or one kept under ``$GNNKIT_HOME`` will do: a read-only cache's own stamps, gone stale (a
    ``chmod -R`` moves every change time), must not hide those its readers keep."""
    kept = (_read_file(folder / STAMPS), _read_file(_kept_elsewhere(folder)))
    return [name for name in files if (now := _stamp_or_none(folder / name)) is None
            or all(stamps.get(name) != now for stamps in kept)]


def _stamp_or_none(path: Path) -> list[int] | None:
    try:
        return stamp(path)
    except OSError:
        return None


def record(folder: Path, stamps: dict[str, list[int]]) -> bool:
    """Keep ``stamps`` (file -> :func:`stamp`, taken before the file's checksum was taken or
    compared) beside the folder's other stamps, in the folder or else under ``$GNNKIT_HOME``;
    ``False`` when neither can be written (the files are then checked at every look-up)."""
    text = json.dumps({**_read(folder), **stamps}) + "\n"
    try:
        atomic_write_text(folder / STAMPS, text)
        return True
    except OSError:
        pass
    elsewhere = _kept_elsewhere(folder)
    try:
        if elsewhere is None:
            return False
        elsewhere.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(elsewhere, text)
    except OSError:
        return False
    return True

"""Temp names that carry their owner, so leftovers of killed writers can be told apart and removed.

Every temp file or folder that is later renamed into place is created beside its final path as::

    .<final name>.tmp-<pid>@<host>.<random>

A temp is *stale* when its owner is known to be gone (the pid no longer runs on this host) or when
it is older than :data:`MAX_AGE_S` whoever owns it (an owner on another host of a shared file
system cannot be asked, and a pid may have been reused). Stale temps are removed whenever a new temp
is made in the same folder (atomic writes, preprocess, synthetic generation) and by
``gnnkit cache clear``. Hidden ``.*.tmp-*`` names of older gnnkit versions (no owner) are
recognised too and go by age alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Temps older than this (by mtime) are stale whatever their owner: two days.
MAX_AGE_S: float = 2 * 24 * 3600.0
MARK = ".tmp-"
_OWNED = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)@(?P<host>.+)\.(?P<rand>[^.]+)$")


@dataclass(frozen=True)
class Owner:
    """Who made a temp.

    Attributes:
        pid: Process id on ``host``.
        host: ``socket.gethostname()`` of the owner.
    """

    pid: int
    host: str


def _host() -> str:
    return socket.gethostname().replace("/", "_") or "localhost"


def temp_prefix(final: Path) -> str:
    """The name prefix of this process's temps for ``final`` (``.<name>.tmp-<pid>@<host>.``)."""
    return f".{Path(final).name}{MARK}{os.getpid()}@{_host()}."


def owner_of(path: Path) -> Owner | None:
    """The owner recorded in a temp's name, or ``None`` for names without one."""
    match = _OWNED.match(Path(path).name)
    return Owner(int(match["pid"]), match["host"]) if match else None


def is_temp(path: Path) -> bool:
    """Whether ``path`` is named like a gnnkit temp (owned, or an older unowned ``.*.tmp-*``)."""
    name = Path(path).name
    return name.startswith(".") and MARK in name


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` runs on this host (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def is_stale(path: Path, now: float | None = None, max_age_s: float = MAX_AGE_S) -> bool:
    """Whether the temp at ``path`` is a leftover: owner gone from this host, or older than ``max_age_s``."""
    owner = owner_of(path)
    if owner is not None and owner.host == _host() and not pid_alive(owner.pid):
        return True
    try:
        age = (time.time() if now is None else now) - os.lstat(path).st_mtime
    except FileNotFoundError:
        return False
    return age > max_age_s


def stale_temps(folder: Path, max_age_s: float = MAX_AGE_S) -> list[Path]:
    """Stale temps directly inside ``folder`` (not recursive), sorted."""
    try:
        children = list(Path(folder).iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    now = time.time()
    return sorted(p for p in children if is_temp(p) and is_stale(p, now, max_age_s))


def stale_temps_under(root: Path, max_age_s: float = MAX_AGE_S) -> list[Path]:
    """Stale temps in ``root`` and in its direct subfolders (e.g. the data root and ``synthetic/``)."""
    if not Path(root).is_dir():
        return []
    folders = [Path(root), *sorted(p for p in Path(root).iterdir() if p.is_dir() and not is_temp(p))]
    return [temp for folder in folders for temp in stale_temps(folder, max_age_s)]


def remove(path: Path) -> None:
    """Delete a temp file or folder; one already gone is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def remove_stale(folder: Path, max_age_s: float = MAX_AGE_S) -> list[Path]:
    """Remove the stale temps directly inside ``folder``; returns what was removed."""
    found = stale_temps(folder, max_age_s)
    for path in found:
        remove(path)
    return found


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask, read from ``/proc/self/status`` where Linux gives it: ``os.umask`` reads it
    by setting it, to 0 for a moment in which another thread's new files would be anyone's (that
    way only where /proc has no ``Umask:`` line, under a lock for gnnkit's own threads)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        umask = os.umask(0)
        os.umask(umask)
    return umask


def make_temp_dir(final: Path) -> Path:
    """Create this process's temp folder beside ``final`` (after removing stale temps there), with
    the mode ``mkdir`` gives under the umask: ``mkdtemp``'s 0700 stayed on the published folder,
    so a cache entry in a shared ``GNNKIT_HOME`` was its builder's alone."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(final.parent)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(final), dir=final.parent))
    os.chmod(tmp, 0o777 & ~current_umask())
    return tmp


def make_temp_file(final: Path) -> tuple[int, Path]:
    """Create this process's temp file beside ``final`` (after removing stale temps there).

    Returns:
        The open file descriptor and the temp path.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(final.parent)
    fd, name = tempfile.mkstemp(prefix=temp_prefix(final), dir=final.parent)
    return fd, Path(name)


@contextlib.contextmanager
def published_folder(final: Path) -> Iterator[Path]:
    """A temp folder to fill, renamed to ``final`` when the block ends (removed if it fails), so
    ``final`` appears complete or not at all.

    Raises:
        FileExistsError: ``final`` appeared meanwhile (created concurrently); nothing is replaced.
    """
    made_parent = not Path(final).parent.exists()
    tmp = make_temp_dir(final)
    try:
        yield tmp
        try:
            os.rename(tmp, final)
        except OSError as err:
            if os.path.lexists(final):
                raise FileExistsError(f"{final}: already exists (created concurrently)") from err
            raise
    except BaseException:
        _remove_temp(tmp, made_parent)
        raise


@contextlib.contextmanager
def scratch_folder(final: Path) -> Iterator[Path]:
    """A work folder beside ``final`` (named as this process's temp, so a killed writer's is removed
    as stale), removed when the block ends, whether it succeeded or failed."""
    made_parent = not Path(final).parent.exists()
    tmp = make_temp_dir(final)
    try:
        yield tmp
    finally:
        _remove_temp(tmp, made_parent)


def _remove_temp(tmp: Path, made_parent: bool) -> None:
    """Remove a temp folder, and the folder made for it if nothing else is there now (a failed first
    preprocess of a dataset leaves no empty ``cache/<name>/``)."""
    shutil.rmtree(tmp, ignore_errors=True)
    if made_parent:
        with contextlib.suppress(OSError):  # not empty: another writer's, or a published entry
            tmp.parent.rmdir()

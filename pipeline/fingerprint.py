"""Cache keys from declared inputs: dataset id, source version, raw-file digests, options, schema.

Raw files are hashed with SHA-256. Hashing gigabytes on every run would make a cache hit slow, so
digests are memoised in ``<cache_root>/digests.json`` by path and stat (size, modification and change
times, inode: :func:`pipeline.checked_stamps.stamp`); the memo only saves
re-hashing, the key itself never contains a path or an mtime.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

from pipeline.atomic import atomic_write_text
from pipeline.checked_stamps import stamp

CHUNK = 8 << 20


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class DigestMemo:
    """Remembers file digests by path and :func:`~pipeline.checked_stamps.stamp` (size, modification
    and change times, inode) so unchanged raw files are not re-hashed. The change time cannot be set
    back: a same-size edit whose modification time was restored (``rsync -a``, ``cp -p``, ``touch -r``)
    was taken for the file remembered, and the entry of the old content was a cache hit.

    Args:
        path: The JSON memo file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.entries: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.entries = {}
        if not isinstance(self.entries, dict):
            self.entries = {}
        self.dirty = False

    def knows(self, file: Path) -> bool:
        """Whether ``file``'s digest is remembered for the file as it is now."""
        seen = self.entries.get(str(file.resolve()))
        return isinstance(seen, dict) and seen.get("stamp") == stamp(file)

    def digest(self, file: Path) -> str:
        """Digest of ``file``, from the memo when the file is unchanged (:meth:`knows`)."""
        if self.knows(file):
            return self.entries[str(file.resolve())]["sha256"]
        now = stamp(file)  # before hashing: a write while it hashes makes the next look hash again
        value = file_digest(file)
        self.entries[str(file.resolve())] = {"stamp": now, "sha256": value}
        self.dirty = True
        return value

    def save(self) -> None:
        """Write the memo back if anything was added (atomically; best effort)."""
        if self.dirty:
            try:
                atomic_write_text(self.path, json.dumps(self.entries))
            except OSError:
                pass


def raw_digests(
    folder: Path, files: list[Path], memo: DigestMemo, progress: Callable[[str], None] | None = None
) -> dict[str, str]:
    """Digests of ``files`` keyed by their path relative to ``folder``."""
    new = [f for f in files if not memo.knows(f)]
    if progress and new:
        size = sum(f.stat().st_size for f in new)
        progress(f"hashing {len(new)} raw file(s), {size / 2**20:.0f} MiB")
    out = {file.relative_to(folder).as_posix(): memo.digest(file) for file in files}
    memo.save()
    return out


def cache_key(inputs: dict[str, Any]) -> str:
    """Stable short hash of the declared inputs (a JSON-serialisable dict)."""
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def tree_size(path: Path) -> int:
    """Total bytes of the files below ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())



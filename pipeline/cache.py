"""The preprocessed-graph cache: Arrow IPC arrays + ``manifest.json``, published by rename.

An entry lives at ``<cache_root>/<dataset>/<key>/`` with ``arrays/<name>.arrow`` (one uncompressed
Arrow IPC file per array, a single flat primitive column in one record batch, :mod:`pipeline.arrow_file`;
written whole or streamed, through one :class:`EntryBuilder`) and ``manifest.json``
(declared inputs, shapes, dtypes, SHA-256 checksums, build stats). Entries are built in a hidden
owned temp folder (``.<key>.tmp-<pid>@<host>.*``, see :mod:`pipeline.temp_paths`) and renamed into
place, so a killed preprocess never leaves an entry that looks valid; its temp is removed as stale
by the next publish into that dataset's folder or by :func:`clear`. Opening memory-maps the files: arrays become torch tensors without a copy.

Tensors of an opened entry are backed by a read-only mapping: copy before writing in place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pyarrow as pa

from pipeline import checked_stamps, paths, temp_paths
from pipeline.arrow_file import StreamedArray, write_array
from pipeline.errors import DatasetError
from pipeline.graph import CanonicalGraph
from pipeline.temp_paths import scratch_folder

if TYPE_CHECKING:  # torch only where arrays become tensors: listing and verifying need none
    import torch

#: Bump when the layout or meaning of cached arrays changes.
SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


@dataclass
class CacheEntry:
    """A published cache entry.

    Attributes:
        path: The entry folder.
        manifest: Its parsed ``manifest.json``.
    """

    path: Path
    manifest: dict[str, Any]

    @property
    def key(self) -> str:
        return self.path.name

    @property
    def dataset(self) -> str:
        return self.manifest["inputs"]["dataset"]

    def numpy(self, name: str) -> np.ndarray:
        """Memory-map one array as a read-only numpy array, without copying."""
        info = self.manifest["arrays"][name]
        file = self.path / info["file"]
        try:
            column = pa.ipc.open_file(pa.memory_map(str(file), "r")).get_batch(0).column(0)
        except (OSError, pa.ArrowException) as err:
            raise DatasetError(file, f"unreadable array ({str(err).splitlines()[0]}); 'gnnkit preprocess "
                                     f"--force' builds the entry again") from None
        count = int(np.prod(info["shape"]))
        if len(column) != count or column.null_count:
            raise DatasetError(file, f"holds {len(column)} values, manifest says {count}")
        if count == 0:
            return np.empty(info["shape"], dtype=info["dtype"])
        return np.frombuffer(column.buffers()[1], dtype=info["dtype"], count=count).reshape(info["shape"])

    def array(self, name: str) -> torch.Tensor:
        """Memory-map one array as a (read-only backed) tensor, without copying."""
        return _tensor(self.numpy(name))

    def open(self) -> CanonicalGraph:
        """The cached canonical graph, every array memory-mapped once, its CSR, class labels and
        splits checked on those mappings (:func:`_check_csr_arrays`, :func:`_check_labels_and_splits`):
        a damaged byte in them failed deep in a run (``Adjacency: indices must lie in [0, N)``,
        ``IndexError: Target 69 is out of bounds``), where the checksums are not compared
        (:func:`lookup` compares those of files written to since).

        Raises:
            DatasetError: Naming the entry and the commands that check and rebuild it.
        """
        arrays = {name: self.numpy(name) for name in self.manifest["arrays"]}
        _check_csr_arrays(self.path, arrays["indptr"], arrays["indices"])
        _check_labels_and_splits(self.path, arrays, self.manifest["meta"].get("num_classes"))
        tensors = {name: _tensor(values) for name, values in arrays.items()}
        return CanonicalGraph(
            indptr=tensors["indptr"],
            indices=tensors["indices"],
            x=tensors.get("x"),
            y=tensors["y"],
            split={s: tensors[f"split.{s}"] for s in ("train", "valid", "test")},
            meta=dict(self.manifest["meta"]),
            extra={n.removeprefix("extra."): t for n, t in tensors.items() if n.startswith("extra.")},
        )


def _tensor(values: np.ndarray) -> torch.Tensor:
    """A tensor over ``values`` (a read-only mapping), without copying."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "non-writable tensor": documented above
        return torch.from_numpy(values)


def _check_labels_and_splits(path: Path, arrays: dict[str, np.ndarray], classes: Any) -> None:
    """Raise :func:`_damaged` unless class labels lie in ``[-1, classes)`` and split indices are
    nodes (one pass over each)."""
    nodes, y = len(arrays["indptr"]) - 1, arrays["y"]
    if y.ndim == 1 and y.size and np.issubdtype(y.dtype, np.integer) and isinstance(classes, int) and \
            (int(y.min()) < -1 or int(y.max()) >= classes):
        raise _damaged(path, f"its class labels leave [-1, {classes})")
    for name in ("train", "valid", "test"):
        idx = arrays[f"split.{name}"]
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= nodes):
            raise _damaged(path, f"its {name} split holds node ids outside [0, {nodes:,})")


#: Entries with more edges than this are not range-checked when opened (a scan of every index of
#: papers100M's 1.6 billion would hold up each run's start); ``gnnkit cache verify`` checks them whole.
CHECKED_EDGES = 1 << 28


def _damaged(path: Path, problem: str) -> DatasetError:
    return DatasetError(path, f"damaged entry: {problem}; 'gnnkit cache verify' checks it, 'gnnkit preprocess "
                              f"--force' builds it again")


def _check_csr_arrays(path: Path, indptr: np.ndarray, indices: np.ndarray) -> None:
    """Raise :func:`_damaged` unless ``indptr`` runs from 0 to ``len(indices)`` without falling and
    every index is a node (up to :data:`CHECKED_EDGES` of them)."""
    nodes = len(indptr) - 1
    if nodes < 0 or indptr[0] != 0 or indptr[-1] != len(indices) or (nodes and (np.diff(indptr) < 0).any()):
        raise _damaged(path, f"its CSR row offsets do not run from 0 to {len(indices):,} edges")
    if 0 < len(indices) <= CHECKED_EDGES and (int(indices.min()) < 0 or int(indices.max()) >= nodes):
        raise _damaged(path, f"its CSR holds node ids outside [0, {nodes:,})")


def _fsync_tree(path: Path) -> None:
    for file in path.rglob("*"):
        if file.is_file():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())


class EntryBuilder:
    """An entry being written in its temp folder: arrays added whole or streamed, then published.

    Made by :func:`building`; :func:`publish` (arrays whole in memory) and the out-of-core build
    (:mod:`pipeline.out_of_core`, arrays streamed) both write through it, so an entry has one
    layout and one publishing protocol whichever way its arrays were made.

    Attributes:
        folder: The temp folder (``arrays/`` inside).
    """

    def __init__(self, folder: Path, final: Path, key: str, inputs: dict[str, Any]) -> None:
        self.folder = folder
        self.final = final
        self.key = key
        self.inputs = inputs
        self.described: dict[str, dict[str, Any]] = {}

    def _describe(self, name: str, shape: tuple[int, ...], dtype: np.dtype, sha256: str) -> None:
        self.described[name] = {
            "file": f"arrays/{name}.arrow",
            "shape": list(shape),
            "dtype": str(dtype),
            "sha256": sha256,
            "bytes": int(np.prod(shape, dtype=np.int64)) * dtype.itemsize,
        }

    def add(self, name: str, array: np.ndarray) -> None:
        """Write an array that is whole in memory."""
        sha256 = write_array(self.folder / f"arrays/{name}.arrow", array)
        self._describe(name, array.shape, array.dtype, sha256)

    @contextlib.contextmanager
    def stream(self, name: str, shape: tuple[int, ...], dtype: np.dtype | type) -> Iterator[StreamedArray]:
        """An array written in chunks (:class:`~pipeline.arrow_file.StreamedArray`); recorded when
        the block ends, which fails unless every value was written."""
        with StreamedArray(self.folder / f"arrays/{name}.arrow", shape, dtype) as array:
            yield array
            self._describe(name, array.shape, array.dtype, array.sha256())

    def publish(self, meta: dict[str, Any], stats: dict[str, Any] | None = None,
                order: list[str] | None = None, replace: bool = False) -> CacheEntry:
        """Write the manifest, fsync, and rename the folder into place.

        Args:
            meta: Task meta recorded in the manifest.
            stats: Build statistics (time, memory).
            order: The arrays' order in the manifest (default: the order they were added).
            replace: Replace an entry already published under the key (a forced rebuild); the old
                one is first renamed to a temp name, so the key never shows a half-written entry.

        Returns:
            The published entry (an existing one if another process published the same key first
            and ``replace`` is false).
        """
        names = order if order is not None else list(self.described)
        if sorted(names) != sorted(self.described):
            raise ValueError(f"manifest order {names} does not name the arrays written, {list(self.described)}")
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "key": self.key,
            "inputs": self.inputs,
            "arrays": {name: self.described[name] for name in names},
            "meta": meta,
            "stats": stats or {},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        manifest["digest"] = manifest_digest(manifest)
        (self.folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        files = [info["file"] for info in self.described.values()]  # their checksums were taken as they were written
        checked_stamps.record(self.folder, {file: checked_stamps.stamp(self.folder / file) for file in files})
        _fsync_tree(self.folder)
        if self.final.exists() and (replace or not (self.final / MANIFEST).is_file()):
            _retire(self.final)  # a folder without a manifest is debris: entries appear whole by a rename
        try:
            os.rename(self.folder, self.final)
        except OSError:
            if not (self.final / MANIFEST).is_file():
                raise
            shutil.rmtree(self.folder, ignore_errors=True)  # someone else published the same key
        return load_entry(self.final)


def _retire(entry: Path) -> None:
    """Move a published entry out of the way under a temp name, then remove it."""
    with scratch_folder(entry) as old:
        os.rename(entry, old / "entry")


@contextlib.contextmanager
def building(cache_root: Path, key: str, inputs: dict[str, Any]) -> Iterator[EntryBuilder]:
    """A new entry's temp folder, removed unless :meth:`EntryBuilder.publish` renamed it into place.

    Args:
        cache_root: The cache folder.
        key: The fingerprint of ``inputs``.
        inputs: The declared inputs (recorded in the manifest; ``inputs["dataset"]`` names the folder).
    """
    final = cache_root / inputs["dataset"] / key
    with scratch_folder(final) as tmp:  # gone already when published
        (tmp / "arrays").mkdir()
        yield EntryBuilder(tmp, final, key, inputs)


#: Arrays from this size on get a progress line as they are written (small ones took a line each:
#: synthetic-tiny's first build logged 20 lines for 0.2 s of work).
PROGRESS_BYTES = 64 * 2**20


def publish(
    cache_root: Path,
    key: str,
    inputs: dict[str, Any],
    arrays: dict[str, np.ndarray],
    meta: dict[str, Any],
    stats: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
    replace: bool = False,
) -> CacheEntry:
    """Write ``arrays`` as a new entry and rename it into place.

    Args:
        cache_root: The cache folder.
        key: The fingerprint of ``inputs``.
        inputs: The declared inputs (recorded in the manifest).
        arrays: Name -> numpy array (``indptr``, ``indices``, ``y``, ``split.*``, optional ``x``, ``extra.*``).
        meta: Task meta recorded in the manifest (``num_classes``, ``eval_metric``, ...).
        stats: Build statistics to record (time, memory).
        progress: Called with a line per array written of :data:`PROGRESS_BYTES` or more (a small
            one is written at once).
        replace: Replace an entry already published under the key (see :meth:`EntryBuilder.publish`).

    Returns:
        The published entry (an existing one if another process published the same key first
        and ``replace`` is false).
    """
    with building(cache_root, key, inputs) as entry:
        for i, (name, array) in enumerate(arrays.items(), 1):
            if progress and array.nbytes >= PROGRESS_BYTES:
                progress(f"writing array {i}/{len(arrays)}: {name} {list(array.shape)} {array.dtype}")
            entry.add(name, array)
        return entry.publish(meta, stats, replace=replace)


#: What every array of a manifest records, and the types the readers rely on.
ARRAY_FIELDS = {"file": str, "shape": list, "dtype": str, "sha256": str, "bytes": int}


def load_entry(path: Path) -> CacheEntry:
    """Read an entry's manifest (no array is touched) and check its structure.

    Raises:
        DatasetError: Naming the manifest: unreadable, of another schema or key, or a field missing
            or of the wrong type.
    """
    file = path / MANIFEST
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DatasetError(file, f"unreadable manifest ({str(err).splitlines()[0]})") from None
    if not isinstance(manifest, dict):
        raise DatasetError(file, f"malformed manifest: expected a JSON object, got {json.dumps(manifest)[:40]}")
    problem = _identity_problem(manifest, path.name)
    if problem:
        raise DatasetError(file, problem)
    problem = _manifest_problem(manifest)
    if problem:
        raise DatasetError(file, f"malformed manifest: {problem}")
    if manifest["inputs"]["dataset"] != path.parent.name:
        raise DatasetError(file, f"the entry of dataset {manifest['inputs']['dataset']!r}, not of its folder's name "
                                 f"{path.parent.name!r} (a moved or edited entry; gnnkit builds its own again)")
    if "digest" in manifest and manifest["digest"] != manifest_digest(manifest):  # entries before it have none
        raise DatasetError(file, "damaged manifest: it changed after it was written (its digest does not match); "
                                 "'gnnkit preprocess --force' builds the entry again")
    return CacheEntry(path, manifest)


def manifest_digest(manifest: dict[str, Any]) -> str:
    """SHA-256 of the manifest's fields but ``digest`` and the build's ``stats`` and ``created``
    (canonical JSON; two builds of an entry have one digest): an edit of its ``meta``
    (``num_classes``) or of an array's dtype trained silently, or failed deep in a run."""
    fields = {name: value for name, value in manifest.items() if name not in ("digest", "stats", "created")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _identity_problem(manifest: dict[str, Any], key: str) -> str | None:
    """Why a manifest is not this gnnkit's entry for the folder named ``key``, or None."""
    version = manifest.get("schema_version")
    if version is None:
        return "malformed manifest: no schema_version"
    if version != SCHEMA_VERSION:
        return (f"an entry of cache schema {version!r}; this gnnkit reads schema {SCHEMA_VERSION} "
                "(another gnnkit version wrote it; 'gnnkit cache clear' removes it)")
    if manifest.get("key") != key:
        return (f"the entry of key {manifest.get('key')!r}, not of its folder's name {key!r} (a copied or renamed "
                "entry; gnnkit builds its own again)")
    return None


def _manifest_problem(manifest: dict[str, Any]) -> str | None:
    """What is missing or mistyped in a manifest's ``inputs``, ``meta`` and ``arrays``, or None."""
    inputs, meta, arrays = manifest.get("inputs"), manifest.get("meta"), manifest.get("arrays")
    if not isinstance(inputs, dict) or not isinstance(inputs.get("dataset"), str):
        return "'inputs' must be a mapping with the dataset's name"
    if not isinstance(meta, dict):
        return "'meta' must be a mapping"
    if not isinstance(arrays, dict) or not arrays:
        return "'arrays' must map array names to their files"
    for name, info in arrays.items():
        if not isinstance(info, dict):
            return f"arrays.{name} must be a mapping"
        for field, kind in ARRAY_FIELDS.items():
            if not isinstance(info.get(field), kind):
                return f"arrays.{name}.{field} must be a {kind.__name__}"
        try:
            dtype = np.dtype(info["dtype"])
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind not in "biuf":  # objects would unpickle, void has no values
            return f"arrays.{name}.dtype must name a numpy number dtype, not {info['dtype']!r}"
        shape = info["shape"]
        if not all(isinstance(n, int) and 0 <= n < 2**62 for n in shape):
            return f"arrays.{name}.shape must list sizes (integers >= 0), not {shape}"
        if info["bytes"] != math.prod(shape) * dtype.itemsize:
            return f"arrays.{name}.bytes must be its shape's size times its dtype's ({info['bytes']} is not)"
    return None


def damaged_arrays(entry: CacheEntry) -> list[str]:
    """The entry's array files that are gone, shorter than the values they hold, or without a
    readable Arrow footer: the check of a cache hit (O(1) a file; ``gnnkit cache verify``
    recomputes the checksums)."""
    problems = []
    for info in entry.manifest["arrays"].values():
        file = entry.path / info["file"]
        try:
            size = file.stat().st_size
        except OSError:
            problems.append(f"{info['file']} missing")
            continue
        if size < info["bytes"]:
            problems.append(f"{info['file']} truncated ({size} bytes, holds {info['bytes']} of values)")
            continue
        try:
            pa.ipc.open_file(pa.memory_map(str(file), "r"))
        except (OSError, pa.ArrowException) as err:
            problems.append(f"{info['file']} unreadable ({str(err).splitlines()[0]})")
    return problems


def lookup(cache_root: Path, dataset: str, key: str, say: Callable[[str], None] | None = None) -> CacheEntry | None:
    """The published entry for ``(dataset, key)``, or ``None``.

    The arrays written to, replaced or copied since their checksums were last compared
    (:mod:`pipeline.checked_stamps`) are checksummed again: a flipped byte in an entry's features
    was read as data.

    Args:
        cache_root: The cache folder.
        dataset: The dataset's name.
        key: The entry's fingerprint.
        say: Told when arrays of :data:`PROGRESS_BYTES` or more are checksummed again.

    Raises:
        DatasetError: The entry is there but damaged: its manifest (:func:`load_entry`), or an array
            file gone, truncated or unreadable (:func:`damaged_arrays`), or changed (:func:`verify`).
    """
    path = paths.dataset_folder(cache_root, dataset) / key
    if not (path / MANIFEST).is_file():
        return None
    entry = load_entry(path)
    problems = damaged_arrays(entry)
    arrays = entry.manifest["arrays"]
    if not problems:
        changed = set(checked_stamps.changed(path, [info["file"] for info in arrays.values()]))
        names = [name for name, info in arrays.items() if info["file"] in changed]
        size = sum(arrays[name]["bytes"] for name in names)
        if say and size >= PROGRESS_BYTES:
            say(f"checksumming {len(names)} arrays of {path} ({size / 2**20:,.0f} MB): unchecked since they last "
                "changed (written to or copied, or an entry of an older gnnkit)")
        problems = verify(entry, names) if names else []
    if problems:
        raise DatasetError(path, "damaged entry: " + "; ".join(problems))
    return entry


def entries(cache_root: Path) -> list[CacheEntry | Path]:
    """Every entry below ``cache_root``; unreadable ones are returned as their path."""
    found: list[CacheEntry | Path] = []
    if not cache_root.is_dir():
        return found
    for dataset in sorted(p for p in cache_root.iterdir() if p.is_dir()):
        for path in sorted(p for p in dataset.iterdir() if p.is_dir() and not p.name.startswith(".")):
            try:
                found.append(load_entry(path))
            except DatasetError:
                found.append(path)
    return found


def verify(entry: CacheEntry, names: list[str] | None = None) -> list[str]:
    """Recompute the checksums of ``names`` (default: every array); returns the problems found
    (empty = intact). The arrays found intact are stamped as checked (:mod:`pipeline.checked_stamps`)."""
    problems, intact = [], {}
    for name in entry.manifest["arrays"] if names is None else names:
        info = entry.manifest["arrays"][name]
        try:
            before = checked_stamps.stamp(entry.path / info["file"])
            values = entry.numpy(name)
        except (OSError, pa.ArrowException, DatasetError, ValueError) as err:
            problems.append(f"{info['file']}: unreadable ({str(err).splitlines()[0]})")
            continue
        digest = hashlib.sha256(memoryview(values.reshape(-1)).cast("B")).hexdigest()
        if digest != info["sha256"]:
            problems.append(f"{info['file']}: checksum mismatch")
        else:
            intact[info["file"]] = before
    if intact:
        checked_stamps.record(entry.path, intact)
    return problems


def clear(cache_root: Path, dataset: str | None = None, folder: Path | None = None) -> int:
    """Delete all entries (or one dataset's) and leftover temp folders; returns folders removed.

    The temp folder of a build that still runs is left to it (deleting it failed that build with a
    traceback): the build publishes its entry when it ends.

    Args:
        cache_root: The cache folder.
        dataset: Only this dataset's entries.
        folder: Only the entries of ``dataset`` built from this source folder (and those that do not
            record theirs): two folders of the same name share ``cache/<name>/``.
    """
    if not cache_root.is_dir():
        return 0
    targets = [paths.dataset_folder(cache_root, dataset)] if dataset else [p for p in cache_root.iterdir() if p.is_dir()]
    removed = 0
    for target in targets:
        if not target.is_dir():
            continue
        for child in list(target.iterdir()):
            if temp_paths.is_temp(child):
                if temp_paths.is_stale(child):
                    temp_paths.remove(child)
                    removed += 1
            elif child.is_dir() and not child.is_symlink() and _of_folder(child, folder):
                shutil.rmtree(child)
                removed += 1
            elif folder is None:
                child.unlink()  # a file, or a link (to a folder too: what it points to stays)
        with contextlib.suppress(OSError):  # kept while a build runs in it
            target.rmdir()
    return removed


def _of_folder(entry: Path, folder: Path | None) -> bool:
    """Whether ``entry`` goes with a clear of ``folder``'s entries (all: ``None``; an entry that does
    not record its source goes with any)."""
    return folder is None or _built_from(entry) in (None, str(folder))


def _built_from(entry: Path) -> str | None:
    """The source folder an entry's manifest records (``None``: unrecorded, or unreadable)."""
    try:
        return load_entry(entry).manifest["meta"].get("folder")
    except DatasetError:
        return None


def stale_temps(cache_root: Path) -> list[Path]:
    """Temp folders left behind by killed preprocess runs (never mistaken for entries)."""
    if not cache_root.is_dir():
        return []
    return [p for d in sorted(cache_root.iterdir()) if d.is_dir() for p in temp_paths.stale_temps(d)]

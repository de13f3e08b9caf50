"""The CSR of an edge stream larger than memory, by an external distribution (bucket) sort.

:func:`pipeline.canonicalize.build_csr` packs every edge into the int64 key ``dst * N + src``,
sorts the keys, drops duplicates when symmetrising, and reads the row pointer and the indices off
the sorted keys. :class:`ExternalCsr` produces the same two arrays with bounded memory, the classic
distribution sort of external-memory algorithms (Aggarwal and Vitter, "The input/output complexity
of sorting and related problems", CACM 31(9), 1988, https://doi.org/10.1145/48529.48535):

1. **Distribute.** Keys arrive in chunks (:meth:`ExternalCsr.add`); each chunk is split by key
   range into bucket files (a key range is a destination range whose ends may fall inside a row),
   with a stable radix sort on the bucket number. There are about four buckets per sort load, so
   skewed in-degrees still pack into full loads.
2. **Sort.** Consecutive buckets are loaded together while they fit ``sort_keys`` keys, sorted in
   memory, de-duplicated (``undirected``, as ``build_csr`` does) and emitted: the indices
   (``key % N``) to a raw file, the row pointer to a sink as rows complete. A bucket that alone
   exceeds the load is distributed again over finer ranges of its own key range; a bucket of one
   key (a repeated edge) needs no sort. Key ranges are disjoint and ordered, so concatenating the
   sorted loads is the sorted key array, and duplicates never straddle two loads.

Every bucket file is deleted as soon as it has been read; the caller owns the work folder.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from pipeline.canonicalize import drop_repeats

#: Buckets per sort load: finer buckets pack skewed key ranges into fuller loads.
OVERSPLIT = 4
#: Most bucket files open at once.
MAX_BUCKETS = 1024
#: Rows whose pointers are computed at once.
ROW_WINDOW = 1 << 20


class ValueSink(Protocol):
    """Where the row pointer goes (e.g. :class:`pipeline.arrow_file.StreamedArray`)."""

    def write(self, values: np.ndarray) -> None: ...


@dataclass
class _Bucket:
    """Keys in ``[lo, hi)``, stored in ``path``."""

    lo: int
    hi: int
    path: Path
    count: int = 0


def _write_all(fd: int, data: memoryview) -> None:
    while data.nbytes:
        data = data[os.write(fd, data):]


def _read_keys(handle: BinaryIO, out: np.ndarray) -> None:
    """Fill ``out`` with the next int64 keys of an open file (bounded reads into the given array)."""
    view = memoryview(out).cast("B")
    while view.nbytes:
        done = handle.readinto(view)
        if not done:
            raise EOFError(f"{handle.name}: shorter than the keys written to it")
        view = view[done:]


class _Distribution:
    """Bucket files over ``[lo, hi)``, each key appended to the file of its range."""

    def __init__(self, folder: Path, lo: int, hi: int, buckets: int, tag: str) -> None:
        self.lo, self.hi = lo, hi
        buckets = max(1, min(buckets, MAX_BUCKETS, hi - lo))
        self.width = -(-(hi - lo) // buckets)
        count = -(-(hi - lo) // self.width)
        self.buckets = [_Bucket(lo + b * self.width, min(hi, lo + (b + 1) * self.width), folder / f"{tag}-{b}.keys")
                        for b in range(count)]
        self._fds = [os.open(b.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) for b in self.buckets]

    def add(self, keys: np.ndarray) -> None:
        """Append ``keys`` (int64, all in ``[lo, hi)``) to their buckets."""
        if keys.size == 0:
            return
        number = (keys - self.lo if self.lo else keys) // self.width
        number = number.astype(np.uint16 if len(self.buckets) <= 1 << 16 else np.int64)
        order = np.argsort(number, kind="stable")  # a radix sort for 16-bit numbers
        counts = np.bincount(number, minlength=len(self.buckets))
        del number
        ordered = keys[order]
        del order
        ends = np.cumsum(counts)
        for b in np.flatnonzero(counts):
            _write_all(self._fds[b], memoryview(ordered[ends[b] - counts[b]:ends[b]]).cast("B"))
            self.buckets[b].count += int(counts[b])

    def close(self) -> list[_Bucket]:
        """Close the bucket files (again is fine); returns the buckets in key order."""
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        return self.buckets


class _Indptr:
    """Row pointers from sorted keys given in order, written as rows complete."""

    def __init__(self, num_nodes: int, sink: ValueSink) -> None:
        self.n = num_nodes
        self.sink = sink
        self.done = 0  # rows whose end pointer has been written
        self.total = 0  # = indptr[done]
        self.carry = 0  # keys already seen of row ``done``
        sink.write(np.zeros(1, dtype=np.int64))

    def add(self, keys: np.ndarray, end: int) -> None:
        """Sorted ``keys`` (all below ``end``, all at or above earlier ones), after which every key
        below ``end`` has been given: rows ``r`` with ``(r + 1) * N <= end`` are complete."""
        complete = end // self.n
        base = self.total + self.carry
        if complete <= self.done:
            self.carry += keys.size
            return
        for start in range(self.done, complete, ROW_WINDOW):
            stop = min(complete, start + ROW_WINDOW)
            bounds = np.arange(start + 1, stop + 1, dtype=np.int64) * self.n
            self.sink.write(base + np.searchsorted(keys, bounds))
        before = int(np.searchsorted(keys, complete * self.n))
        self.total = base + before
        self.carry = keys.size - before
        self.done = complete


@dataclass
class CsrStats:
    """What the sort did (for the build's progress lines and stats).

    Attributes:
        keys: Keys distributed (edges after self-loop removal, both directions counted).
        nnz: Entries of the CSR (after de-duplication).
        buckets: Bucket files of the first distribution.
        loads: In-memory sorts.
        redistributed: Buckets too big for one load, distributed again.
    """

    keys: int = 0
    nnz: int = 0
    buckets: int = 0
    loads: int = 0
    redistributed: int = 0


class ExternalCsr:
    """Builds ``build_csr``'s ``(indptr, indices)`` from edge keys that need not fit in memory.

    Use it as a context manager, so that the bucket files are closed if the build fails.

    Args:
        num_nodes: N (keys are ``dst * N + src`` in ``[0, N^2)``).
        folder: Work folder for the bucket files (the caller removes it).
        sort_keys: Most keys sorted at once (about 18 bytes each are needed then).
        expected_keys: About how many keys :meth:`add` will be given (sets the bucket count).
        undirected: Drop duplicate keys, as ``build_csr`` does when symmetrising.
    """

    def __init__(self, num_nodes: int, folder: Path, sort_keys: int, expected_keys: int, undirected: bool) -> None:
        self.n = int(num_nodes)
        self.folder = Path(folder)
        self.sort_keys = max(1, int(sort_keys))
        self.undirected = undirected
        self.stats = CsrStats()
        buckets = OVERSPLIT * math.ceil(max(1, expected_keys) / self.sort_keys)
        self._top = _Distribution(self.folder, 0, max(1, self.n * self.n), buckets, "b0")
        self.stats.buckets = len(self._top.buckets)
        self._digest = hashlib.sha256()

    def __enter__(self) -> ExternalCsr:
        return self

    def __exit__(self, *exc: object) -> None:
        self._top.close()  # the bucket files stay open until written out, or an error ends the build

    def add(self, keys: np.ndarray) -> None:
        """Distribute a chunk of int64 keys ``dst * N + src`` (any order)."""
        self._top.add(keys)
        self.stats.keys += int(keys.size)

    def write(self, indptr: ValueSink, indices: Path,
              progress: Callable[[str], None] | None = None) -> str:
        """Sort the buckets and emit the CSR.

        Args:
            indptr: Receives the ``N + 1`` row pointers (int64) in order.
            indices: Raw file that receives the indices (int64, native byte order), ``stats.nnz`` of them.
            progress: Called with a line per sort load.

        Returns:
            The SHA-256 of the indices' bytes.
        """
        say = progress or (lambda _msg: None)
        buckets = self._top.close()
        if self.n == 0:  # no rows, no keys
            indptr.write(np.zeros(1, dtype=np.int64))
            open(indices, "wb").close()
            return self._digest.hexdigest()
        rows = _Indptr(self.n, indptr)
        fd = os.open(indices, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            self._sort(buckets, rows, fd, say, depth=0)
        finally:
            os.close(fd)
        if rows.done != self.n:
            raise RuntimeError(f"external CSR: {rows.done} of {self.n} rows written")
        return self._digest.hexdigest()

    def _emit(self, keys: np.ndarray, end: int, rows: _Indptr, fd: int) -> None:
        rows.add(keys, end)
        np.remainder(keys, self.n, out=keys)
        data = memoryview(keys).cast("B")
        self._digest.update(data)
        _write_all(fd, data)
        self.stats.nnz += int(keys.size)

    def _sort(self, buckets: list[_Bucket], rows: _Indptr, fd: int, say: Callable[[str], None], depth: int) -> None:
        load: list[_Bucket] = []
        for bucket in buckets:
            if bucket.count > self.sort_keys:
                self._sort_load(load, rows, fd, say)
                load = []
                self._sort_big(bucket, rows, fd, say, depth)
                continue
            if sum(b.count for b in load) + bucket.count > self.sort_keys:
                self._sort_load(load, rows, fd, say)
                load = []
            load.append(bucket)
        self._sort_load(load, rows, fd, say)

    def _sort_load(self, load: list[_Bucket], rows: _Indptr, fd: int, say: Callable[[str], None]) -> None:
        """Sort the keys of consecutive buckets together and emit them."""
        if not load:
            return
        keys = np.empty(sum(b.count for b in load), dtype=np.int64)
        start = 0
        for bucket in load:
            with open(bucket.path, "rb", buffering=0) as handle:
                _read_keys(handle, keys[start:start + bucket.count])
            start += bucket.count
            bucket.path.unlink()
        keys.sort()
        if self.undirected:
            keys = drop_repeats(keys)
        self._emit(keys, load[-1].hi, rows, fd)
        self.stats.loads += 1
        if self.stats.loads % 8 == 0 or load[-1].hi == self.n * self.n:
            say(f"CSR: sorted {self.stats.loads} load(s), rows up to {rows.done:,}/{self.n:,}, "
                f"{self.stats.nnz:,} entries")

    def _sort_big(self, bucket: _Bucket, rows: _Indptr, fd: int, say: Callable[[str], None], depth: int) -> None:
        """A bucket bigger than one load: a single repeated key, or distributed again more finely."""
        if bucket.hi - bucket.lo == 1:  # every key is bucket.lo: sorted already
            total = 1 if self.undirected else bucket.count
            for start in range(0, total, self.sort_keys):
                count = min(self.sort_keys, total - start)
                end = bucket.hi if start + count == total else bucket.lo
                self._emit(np.full(count, bucket.lo, dtype=np.int64), end, rows, fd)
            bucket.path.unlink()
            return
        self.stats.redistributed += 1
        finer = _Distribution(self.folder, bucket.lo, bucket.hi,
                              OVERSPLIT * math.ceil(bucket.count / self.sort_keys), f"b{depth + 1}-{bucket.lo}")
        try:
            with open(bucket.path, "rb", buffering=0) as handle:
                for start in range(0, bucket.count, self.sort_keys):
                    keys = np.empty(min(self.sort_keys, bucket.count - start), dtype=np.int64)
                    _read_keys(handle, keys)
                    finer.add(keys)
                    del keys
        finally:
            finer.close()
        bucket.path.unlink()
        self._sort(finer.buckets, rows, fd, say, depth + 1)

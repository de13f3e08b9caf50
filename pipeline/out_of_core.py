"""Out-of-core preprocessing of a node-property dataset: peak memory under ``memory_budget_mb``.

The in-memory build (:func:`pipeline.ogb_layout.build`, then :func:`pipeline.cache.publish`) holds
the edge list, the sort keys and the features at once (the products twin peaks at 4.2 GB, and
ogbn-papers100M's 1.6 billion edges alone are 26 GB). With ``preprocess.memory_budget_mb`` set,
:func:`build` writes the same cache entry, byte for byte, without ever holding a whole edge-,
key- or feature-sized array:

1. The raw files are read in chunks (:class:`pipeline.raw_chunks.RawNodeChunks`; OGB's own readers
   load whole files, so this path cannot use them).
2. Every check of :func:`pipeline.canonicalize.canonicalize` runs chunk by chunk, with the same
   one-line :class:`DatasetError` and in the same order: edge ids in range, finite features, labels,
   split indices, labels of the split nodes. Edge chunks are checked while their keys are
   distributed to bucket files; an error is raised once the pass has seen every edge (the message
   names the smallest or largest id, as the in-memory check does).
3. The CSR comes from an external bucket sort (:class:`pipeline.external_csr.ExternalCsr`) in a
   work folder inside the cache's dataset folder, removed when the build ends, whether it succeeded
   or failed (and as a stale temp if the process was killed).
4. Features, labels and extra node arrays are written straight into their Arrow files
   (:meth:`pipeline.cache.EntryBuilder.stream`). Features are read in the
   :data:`~pipeline.feature_prep.CHUNK_ROWS`-row blocks :mod:`pipeline.feature_prep` works in; ``row``
   and ``column`` normalisation take a first pass for the minimum or the column sums (the blocks
   written as read), then rewrite each block with the same block functions, so the bits are the
   in-memory path's.

Memory: :class:`Plan` sizes the edge chunks, the sort loads and the feature rows parsed at a time
from the budget minus what the process already holds; one feature block of ``CHUNK_ROWS`` rows
(``4 * CHUNK_ROWS * F`` bytes) is held whatever the budget, and so are the split index arrays and
one byte per node (the split overlap check). ``reorder`` (a whole-graph METIS or RCM ordering) is
refused.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.cache import EntryBuilder
from pipeline.canonicalize import edge_keys
from pipeline.errors import DatasetError
from pipeline.external_csr import ExternalCsr
from pipeline.feature_prep import (CHUNK_ROWS, ColumnStats, resolved_normalization, row_normalize_block,
                                   standardize_block)
from pipeline.graph import SPLITS, check_splits
from pipeline.options import PreprocessOptions
from pipeline.progress import log, rss_mb
from pipeline.raw_chunks import RawNodeChunks
from pipeline.temp_paths import scratch_folder

#: Bytes per edge while a chunk of edges is read, checked and distributed (both directions).
EDGE_BYTES = 160
#: Bytes per key while a load is sorted and de-duplicated.
SORT_BYTES = 20
#: Bytes per row of a label or extra-array chunk (a few columns, several temporaries).
ROW_BYTES = 256
#: Part of the budget kept free for the allocator and the libraries' own buffers.
HEADROOM = 0.15
#: The smallest chunk or load, whatever the budget.
MIN_ITEMS = 1024
#: Bytes per feature value while a chunk of rows is parsed (CSV text through pandas, then float32).
PARSE_BYTES = 25


@dataclass(frozen=True)
class Plan:
    """Chunk sizes for a memory budget.

    Attributes:
        budget_mb: The budget.
        resident_mb: What the process held when the build started.
        edge_chunk: Edges read, checked and distributed at a time.
        sort_keys: Keys sorted at once.
        row_chunk: Rows of labels, extra arrays and split files read at a time.
    """

    budget_mb: int
    resident_mb: float
    edge_chunk: int
    sort_keys: int
    row_chunk: int

    @classmethod
    def for_budget(cls, budget_mb: int, resident_mb: float) -> Plan:
        """Sizes that keep each stage's working set within ``budget - resident - headroom``."""
        free = cls._free(budget_mb, resident_mb)
        return cls(budget_mb, round(resident_mb, 1), max(MIN_ITEMS, int(free // EDGE_BYTES)),
                   max(MIN_ITEMS, int(free // SORT_BYTES)), max(MIN_ITEMS, int(free // ROW_BYTES)))

    @staticmethod
    def _free(budget_mb: int, resident_mb: float) -> float:
        return max(0.0, budget_mb * (1 - HEADROOM) - resident_mb) * 2**20

    def feature_rows(self, width: int) -> int:
        """Feature rows parsed at a time: what the budget leaves beside one ``CHUNK_ROWS`` block of
        ``width`` float32 values (the blocks the statistics are taken over), at most a block."""
        free = self._free(self.budget_mb, self.resident_mb) - CHUNK_ROWS * width * 4
        return max(MIN_ITEMS, min(CHUNK_ROWS, int(free // (PARSE_BYTES * max(width, 1)))))


@dataclass
class _EdgeCounts:
    """What the edge pass saw."""

    raw_edges: int = 0
    raw_self_loops: int = 0
    lo: int | None = None
    hi: int | None = None

    def bad_id(self, num_nodes: int) -> int | None:
        """The id ``check_edges`` names (smallest if negative, else largest), or ``None`` when all are in range."""
        if self.lo is None or self.hi is None or (self.lo >= 0 and self.hi < num_nodes):
            return None
        return self.lo if self.lo < 0 else self.hi


def _distribute_edges(raw: RawNodeChunks, options: PreprocessOptions, csr: ExternalCsr, plan: Plan,
                      say: Callable[[str], None]) -> _EdgeCounts:
    """Read every edge once: check ids, count raw edges and self loops, distribute the CSR keys."""
    both = options.undirected or raw.add_inverse_edge  # OGB's inverse edges: the reverse of each
    copies = 2 if raw.add_inverse_edge else 1
    seen = _EdgeCounts()
    every = max(1, -(-raw.num_edges // plan.edge_chunk) // 10)  # a progress line per ~10% of the chunks
    for i, (src, dst) in enumerate(raw.edges(plan.edge_chunk), 1):
        seen.raw_edges += copies * src.size
        if src.size:
            lo, hi = int(min(src.min(), dst.min())), int(max(src.max(), dst.max()))
            seen.lo = lo if seen.lo is None else min(seen.lo, lo)
            seen.hi = hi if seen.hi is None else max(seen.hi, hi)
        loops = src == dst
        seen.raw_self_loops += copies * int(np.count_nonzero(loops))
        if seen.bad_id(raw.num_nodes) is not None:
            continue  # keep scanning for the extreme ids; the pass ends in an error
        if options.self_loops == "remove":
            src, dst = src[~loops], dst[~loops]
        del loops
        keys = edge_keys(src, dst, raw.num_nodes, both)
        del src, dst
        csr.add(keys)
        if i % every == 0:
            say(f"edges: {seen.raw_edges // copies:,}/{raw.num_edges:,} read, {csr.stats.keys:,} keys "
                f"in {csr.stats.buckets} buckets ({csr.stats.keys * 8 / 2**20:.0f} MiB on disk)")
    bad = seen.bad_id(raw.num_nodes)
    if bad is not None:
        raise DatasetError(raw.files["edges"], f"edge endpoint {bad} out of range [0, {raw.num_nodes})")
    return seen


def _blocks(chunks: Iterator[np.ndarray], rows: int, width: int) -> Iterator[np.ndarray]:
    """float32 blocks of ``rows`` rows (the last one shorter), filled from ``chunks`` of any size in
    place: parsing a whole block of CSV text at once took about 25 bytes a value, past small budgets."""
    block, held = np.empty((rows, width), dtype=np.float32), 0
    for chunk in chunks:
        done = 0
        while done < chunk.shape[0]:
            take = min(rows - held, chunk.shape[0] - done)
            block[held:held + take] = chunk[done:done + take]
            held, done = held + take, done + take
            if held == rows:
                yield block
                held = 0
    if held:
        yield block[:held]


def _write_features(raw: RawNodeChunks, entry: EntryBuilder, how: str, plan: Plan,
                    say: Callable[[str], None]) -> tuple[int, str]:
    """Check and write ``x`` (float32), normalised as ``how`` says, parsing ``plan.feature_rows``
    rows at a time into :data:`~pipeline.feature_prep.CHUNK_ROWS`-row blocks; returns F and the
    transform applied (``"auto"`` resolved)."""
    n, where = raw.num_nodes, raw.files["features"]
    shape = raw.feature_shape
    assert shape is not None
    if len(shape) != 2 or shape[0] != n:
        raise DatasetError(where, f"expected {n} rows of features, got shape {list(shape)}")
    f = int(shape[1])
    transform = how if n * f else "none"  # an empty matrix is left as it is
    read = plan.feature_rows(f)
    say(f"features: {n:,} x {f} float32 ({n * f * 4 / 2**20:.0f} MiB) in blocks of {CHUNK_ROWS:,} rows, read "
        f"{read:,} at a time" + ("" if transform == "none" else f", then {transform} normalisation in a second pass"))
    stats, minimum = ColumnStats(f), None
    with entry.stream("x", (n, f), np.float32) as out:
        start = 0
        for block in _blocks(raw.features(read), CHUNK_ROWS, f):
            finite = np.isfinite(block).all(axis=1)
            if not finite.all():
                raise DatasetError(where, f"non-finite feature value in row {start + int(np.flatnonzero(~finite)[0])}")
            if transform == "column":
                stats.add(block)
            elif transform in ("row", "auto") and block.size:
                low = block.min()
                minimum = low if minimum is None else min(minimum, low)
            out.write(block)
            start += block.shape[0]
        if transform in ("row", "auto"):
            transform = resolved_normalization(transform, minimum, say)
        if transform == "none":
            return f, transform
        mean, scale = stats.mean_scale()
        out.restart()
        for start in range(0, n, CHUNK_ROWS):
            rows = min(CHUNK_ROWS, n - start)
            block = out.read(start * f, rows * f).reshape(rows, f)
            out.write(row_normalize_block(block, np.float32(minimum)) if transform == "row"
                      else standardize_block(block, mean, scale))
    return f, transform


class _SplitLabels:
    """Counts split nodes without a label, chunk by chunk of labels (``check_split_labels``)."""

    def __init__(self, split: dict[str, np.ndarray]) -> None:
        self.sorted = {name: np.sort(split[name]) for name in SPLITS}
        self.missing = dict.fromkeys(SPLITS, 0)

    def add(self, start: int, y: np.ndarray) -> None:
        for name, idx in self.sorted.items():
            a, b = np.searchsorted(idx, [start, start + y.shape[0]])
            lab = y[idx[a:b] - start]
            missing = (lab < 0) if y.ndim == 1 else np.isnan(lab).all(axis=1)
            self.missing[name] += int(np.count_nonzero(missing))

    def check(self, where: str) -> None:
        for name in SPLITS:
            if self.missing[name]:
                raise DatasetError(where, f"{self.missing[name]} nodes of the '{name}' split have no label")


def _class_labels(block: np.ndarray, where: str) -> np.ndarray:
    """One chunk of single-task class labels as int64 (-1 = unlabelled), as ``canonicalize`` converts them."""
    col = block[:, 0]
    if col.dtype.kind == "f":
        if np.any(np.isfinite(col) & (col != np.round(col))):
            raise DatasetError(where, "class labels must be whole numbers")
        col = np.where(np.isnan(col), -1, col)
    return col.astype(np.int64)


def _write_labels(raw: RawNodeChunks, entry: EntryBuilder, split: dict[str, np.ndarray], plan: Plan,
                  say: Callable[[str], None]) -> None:
    """Check and write ``y``; then check the splits and their labels (errors in canonicalize's order)."""
    meta, n, where = raw.meta, raw.num_nodes, raw.files["labels"]
    shape = raw.label_shape if len(raw.label_shape) != 1 else (raw.label_shape[0], 1)
    tasks, classes = meta["num_tasks"], meta["num_classes"]
    if len(shape) != 2 or shape[1] != tasks:
        raise DatasetError(where, f"expected {tasks} label column(s), got shape {list(shape)}")
    split_files = {s: raw.files[f"split.{s}"] for s in SPLITS}
    try:
        check_splits(split, n, split_files)
        split_error = None
    except DatasetError as err:
        split_error = err
    classify = tasks == 1 and meta["task_type"] == "multiclass classification"
    rows = int(shape[0])
    say(f"labels: {rows:,} x {tasks} in chunks of {plan.row_chunk:,} rows")
    counter = _SplitLabels(split) if split_error is None and rows == n else None
    low = high = None
    with entry.stream("y", (rows,) if classify else (rows, tasks), np.int64 if classify else np.float32) as out:
        start = 0
        for block in raw.labels(plan.row_chunk):
            block = block.reshape(block.shape[0], -1)
            y = _class_labels(block, where) if classify else block.astype(np.float32)
            if classify and y.size:
                low = int(y.min()) if low is None else min(low, int(y.min()))
                labelled = y[y >= 0]
                if labelled.size:
                    high = int(labelled.max()) if high is None else max(high, int(labelled.max()))
            if counter is not None:
                counter.add(start, y)
            out.write(y)
            start += y.shape[0]
        if low is not None and low < -1:
            raise DatasetError(where, f"negative class label {low}")
        if rows != n:
            raise DatasetError(where, f"expected {n} labels (one per node), got {rows}")
        if high is not None and high >= classes:
            raise DatasetError(where, f"label {high} out of range [0, {classes})")
        if split_error is not None:
            raise split_error
        assert counter is not None
        counter.check(where)


def _write_extras(raw: RawNodeChunks, entry: EntryBuilder, plan: Plan, say: Callable[[str], None]) -> list[str]:
    """Stream the additional node arrays (``extra.node_year``, ...); returns their cache names."""
    n, names = raw.num_nodes, []
    for name, shape in raw.extras.items():
        if shape[0] != n:
            raise DatasetError(f"raw/{name}", f"expected {n} rows, got {shape[0]}")
        out_shape = (n,) if len(shape) == 2 and shape[1] == 1 else tuple(shape)
        dtype = raw.extra_dtype(name)
        say(f"extra array {name}: {list(out_shape)} {dtype}")
        with entry.stream(f"extra.{name}", out_shape, dtype) as out:
            for block in raw.extra(name, plan.row_chunk):
                out.write(block)
        names.append(f"extra.{name}")
    return names


def _write_csr(csr: ExternalCsr, entry: EntryBuilder, num_nodes: int, work: Path, say: Callable[[str], None]) -> None:
    """Sort the distributed keys into ``indptr`` and ``indices``."""
    say(f"CSR: sorting {csr.stats.keys:,} keys in loads of up to {csr.sort_keys:,}")
    indices = work / "indices.raw"
    with entry.stream("indptr", (num_nodes + 1,), np.int64) as indptr:
        sha256 = csr.write(indptr, indices, say)
    say(f"CSR: {csr.stats.nnz:,} entries, {csr.stats.loads} sort loads, {csr.stats.redistributed} bucket(s) "
        "distributed again")
    with entry.stream("indices", (csr.stats.nnz,), np.int64) as out:
        out.copy_from(indices, sha256)
    indices.unlink()


def build(entry: EntryBuilder, folder: Path, meta: dict[str, Any], options: PreprocessOptions,
          say: Callable[[str], None]) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """Read, check and write a node dataset's entry within ``options.memory_budget_mb``.

    Args:
        entry: The entry being written (:func:`pipeline.cache.building`); its arrays are streamed into it.
        folder: The dataset folder in OGB's raw layout.
        meta: Normalised meta (:func:`pipeline.ogb_layout.normalise_meta`).
        options: Preprocessing options; ``memory_budget_mb`` is set, ``reorder`` is ``"none"``.
        say: Progress callback.

    Returns:
        ``(meta, order, stats)``: the meta canonicalisation records, the arrays in the in-memory
        entry's manifest order, and what the out-of-core build did (for the manifest's ``stats``).

    Raises:
        DatasetError: As the in-memory build raises it, or ``preprocess.reorder`` when one is asked for.
    """
    importlib.import_module("pandas")  # the CSV reader: loaded before the resident memory is measured
    if options.reorder != "none":
        raise DatasetError("preprocess.reorder", f"'{options.reorder}' orders the whole graph in memory; expected "
                           "'none' with preprocess.memory_budget_mb (or leave the budget unset)")
    plan = Plan.for_budget(int(options.memory_budget_mb or 0), rss_mb())
    say(f"out of core within {plan.budget_mb:,} MiB ({plan.resident_mb:.0f} MiB resident): edges in chunks of "
        f"{plan.edge_chunk:,}, sort loads of {plan.sort_keys:,} keys, rows in chunks of {plan.row_chunk:,}")
    if plan.budget_mb * (1 - HEADROOM) <= plan.resident_mb:
        log.warning("preprocess.memory_budget_mb %d: below what the process already holds (%.0f MiB); the build "
                    "works in the smallest pieces, and its peak will be above the budget", plan.budget_mb,
                    plan.resident_mb)
    raw = RawNodeChunks(folder, meta)
    n = raw.num_nodes
    split = raw.split(plan.row_chunk)
    both = options.undirected or raw.add_inverse_edge
    with scratch_folder(entry.final.parent / f"{entry.key}.sort") as work, \
            ExternalCsr(n, work, plan.sort_keys, raw.num_edges * (2 if both else 1), options.undirected) as csr:
        say(f"edges: {raw.num_edges:,} from {Path(raw.files['edges']).name} into {csr.stats.buckets} buckets")
        edges = _distribute_edges(raw, options, csr, plan, say)
        f, normalized = (_write_features(raw, entry, options.normalize_features, plan, say) if raw.feature_shape
                         else (None, "none"))
        _write_labels(raw, entry, split, plan, say)
        _write_csr(csr, entry, n, work, say)
    for name in SPLITS:
        entry.add(f"split.{name}", split[name].astype(np.int64))
    extras = _write_extras(raw, entry, plan, say)
    order = ["indptr", "indices", "y", *(["x"] if f is not None else []), *(f"split.{s}" for s in SPLITS), *extras]
    out_meta = {
        "num_nodes": n,
        "num_edges": csr.stats.nnz,
        "num_raw_edges": edges.raw_edges,
        "num_raw_self_loops": edges.raw_self_loops,
        "num_features": 0 if f is None else f,
        "features_normalized": normalized,
        "num_classes": meta["num_classes"],
        "num_tasks": meta["num_tasks"],
        "task_type": meta["task_type"],
        "eval_metric": meta["eval_metric"],
    }
    stats = {**dataclasses.asdict(plan), **dataclasses.asdict(csr.stats)}
    return out_meta, order, stats

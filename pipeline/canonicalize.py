"""Raw OGB arrays -> the canonical graph's arrays, validated against the contract in DESIGN.md."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pipeline.errors import DatasetError
from pipeline.feature_prep import normalize_features
from pipeline.graph import (
    SPLITS,
    check_edges,
    check_features,
    check_labels,
    check_node_count_fits,
    check_split_labels,
    check_splits,
)
from pipeline.ogb_layout import RawGraph, numeric
from pipeline.options import PreprocessOptions
from pipeline.reorder import node_order


def edge_keys(src: np.ndarray, dst: np.ndarray, num_nodes: int, both: bool) -> np.ndarray:
    """The CSR sort keys of edges: int64 ``dst * N + src``, followed by ``src * N + dst`` with ``both``
    (the reverse edges), so sorted keys are the CSR's entries in order."""
    n, m = np.int64(num_nodes), src.size
    key = np.empty(m * (2 if both else 1), dtype=np.int64)
    np.multiply(dst, n, out=key[:m])
    key[:m] += src
    if both:
        np.multiply(src, n, out=key[m:])
        key[m:] += dst
    return key


def drop_repeats(keys: np.ndarray) -> np.ndarray:
    """Sorted ``keys`` without repeated values (the first of each run kept)."""
    if keys.size == 0:
        return keys
    keep = np.empty(keys.size, dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def build_csr(
    edge_index: np.ndarray, num_nodes: int, options: PreprocessOptions
) -> tuple[np.ndarray, np.ndarray]:
    """CSR with rows = destinations, sources sorted within a row.

    Edges are packed into one int64 key ``dst * N + src`` and sorted, which needs far less memory
    and time than a lexsort; with ``undirected`` the reverse edges are appended first and duplicate
    edges dropped. At most the key array and one edge-sized temporary are alive at a time.

    Args:
        edge_index: ``[2, E]`` (source, destination).
        num_nodes: N.
        options: Preprocessing options.

    Returns:
        ``(indptr [N+1], indices [nnz])`` int64.
    """
    n = np.int64(num_nodes)
    src, dst = edge_index[0], edge_index[1]
    if options.self_loops == "remove":
        keep = src != dst
        src, dst = src[keep], dst[keep]
    key = edge_keys(src, dst, num_nodes, both=options.undirected)
    key.sort()
    if options.undirected:
        key = drop_repeats(key)
    rows = key // n
    counts = np.bincount(rows, minlength=num_nodes)
    del rows
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    np.remainder(key, n, out=key)
    return indptr, key


def _labels(raw: RawGraph) -> np.ndarray:
    meta, where = raw.meta, raw.files["labels"]
    labels = numeric(raw.labels, where, "labels")
    if labels.ndim == 1:
        labels = labels.reshape(-1, 1)
    if labels.ndim != 2 or labels.shape[1] != meta["num_tasks"]:
        raise DatasetError(where, f"expected {meta['num_tasks']} label column(s), got shape {list(labels.shape)}")
    if meta["num_tasks"] == 1 and meta["task_type"] == "multiclass classification":
        col = labels[:, 0]
        if col.dtype.kind == "f":
            if np.any(np.isfinite(col) & (col != np.round(col))):
                raise DatasetError(where, "class labels must be whole numbers")
            col = np.where(np.isnan(col), -1, col)
        y = col.astype(np.int64)
        if y.size and int(y.min()) < -1:
            raise DatasetError(where, f"negative class label {int(y.min())}")
    else:
        y = labels.astype(np.float32)
    check_labels(y, raw.num_nodes, meta["num_classes"], where)
    return y


def canonicalize(
    raw: RawGraph, options: PreprocessOptions, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Validate a raw graph and convert it to the canonical arrays.

    Args:
        raw: What :func:`pipeline.ogb_layout.read_ogb_folder` read.
        options: Preprocessing options.
        progress: Called with a line at each stage.

    Returns:
        ``(arrays, meta)``: arrays named as the cache stores them (``indptr``, ``indices``, ``x``,
        ``y``, ``split.<name>``, ``extra.<name>``; ``extra.node_order`` with ``options.reorder``)
        and the meta: the task, the sizes, and the raw edge and self-loop counts (before
        ``undirected``/``self_loops`` changed them).

    Raises:
        DatasetError: Anything that breaks the canonical-graph contract, naming the file.
    """
    say = progress or (lambda _msg: None)
    n = raw.num_nodes
    say("validating edges, features, labels and splits")
    check_node_count_fits(n, raw.files["nodes"])
    check_edges(raw.edge_index, n, raw.files["edges"])
    x = raw.node_feat
    if x is not None:
        x = x.astype(np.float32, copy=False)
        check_features(x, n, raw.files["features"])
    y = _labels(raw)
    split_files = {s: raw.files[f"split.{s}"] for s in SPLITS}
    check_splits(raw.split, n, split_files)
    check_split_labels(y, raw.split, raw.files["labels"])
    say(f"building CSR from {raw.edge_index.shape[1]:,} edges")
    indptr, indices = build_csr(raw.edge_index, n, options)
    arrays: dict[str, np.ndarray] = {"indptr": indptr, "indices": indices, "y": y}
    normalized = "none"
    if x is not None:
        x, normalized = normalize_features(x, options.normalize_features, say)
        arrays["x"] = x
    arrays.update({f"split.{s}": raw.split[s].astype(np.int64) for s in SPLITS})
    for name, values in raw.extra.items():
        if values.shape[0] != n:
            raise DatasetError(f"raw/{name}", f"expected {n} rows, got {values.shape[0]}")
        arrays[f"extra.{name}"] = np.ascontiguousarray(values.reshape(n, -1)[:, 0] if values.ndim == 2 and values.shape[1] == 1 else values)
    if options.reorder != "none":
        say(f"ordering nodes ({options.reorder})")
        arrays["extra.node_order"] = node_order(indptr, indices, options.reorder, progress=say)
    meta = {
        "num_nodes": n,
        "num_edges": int(indices.size),
        "num_raw_edges": int(raw.edge_index.shape[1]),
        "num_raw_self_loops": int(np.count_nonzero(raw.edge_index[0] == raw.edge_index[1])),
        "num_features": 0 if x is None else int(x.shape[1]),
        "features_normalized": normalized,
        "num_classes": raw.meta["num_classes"],
        "num_tasks": raw.meta["num_tasks"],
        "task_type": raw.meta["task_type"],
        "eval_metric": raw.meta["eval_metric"],
    }
    return arrays, meta

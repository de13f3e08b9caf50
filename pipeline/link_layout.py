"""OGB's raw on-disk layout for link-property datasets (``ogbl-*``): read, validate, canonicalise.

Layout (as OGB's downloads hold it)::

    <folder>/meta.json                          OGB's meta_dict keys (folders given by path, twins)
    <folder>/raw/edge.csv.gz, num-node-list.csv.gz, num-edge-list.csv.gz, node-feat.csv.gz
    <folder>/raw/edge_weight.csv.gz, edge_year.csv.gz     'additional edge files' (ogbl-collab)
    <folder>/raw/data.npz                       binary layout instead of the CSV files
    <folder>/split/<split>/{train,valid,test}.pt          (or split_dict.pt)

The raw graph holds the training edges only (OGB removes the validation and test edges), so it is
the message-passing graph. The split files are torch pickles of dicts, loaded with
``torch.load(path, weights_only=True)`` (never OGB's dataset classes, which prompt on stdin and
unpickle arbitrary objects). Two shapes exist:

* pairs (ogbl-collab, -ddi, -ppa): ``edge [E, 2]``; valid/test also ``edge_neg [M, 2]``;
  ogbl-collab adds ``weight [E]`` and ``year [E]``;
* per-source (ogbl-citation2): ``source_node [n]``, ``target_node [n]``; valid/test also
  ``target_node_neg [n, K]`` (K negative targets of each source, scored with MRR).

:func:`build` validates them (ids in range, shapes, non-empty positives, no positive edge in two
splits; a :class:`DatasetError` names the file and what was expected) and returns the arrays the
cache stores: the message-passing CSR (``indptr``, ``indices``; rows = destinations), ``x``, and
per split ``split.<s>.edge [E, 2]``, ``split.<s>.edge_neg [M, 2]`` or
``split.<s>.target_node_neg [n, K]``, ``split.<s>.weight``, ``split.<s>.year``.
:func:`open_entry` maps a cache entry back as a :class:`LinkGraph`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from pipeline.errors import DatasetError
from pipeline.graph import SPLITS, check_edges, check_features, check_node_count_fits
# raw_files is this layout's too (pipeline.family)
from pipeline.ogb_layout import (as_bool, as_list, raw_file, raw_files, read_raw_graphs, split_name,  # noqa: F401
                                 write_raw_graph)
from pipeline.safe_pt import as_array, load_pt
from pipeline.temp_paths import published_folder

if TYPE_CHECKING:
    from torch import Tensor

    from pipeline.cache import CacheEntry
    from pipeline.options import PreprocessOptions

FAMILY = "link"
REQUIRED_META = ("task type", "eval metric", "add_inverse_edge", "split", "binary")
TASK_TYPE = "link prediction"
#: Metrics OGB's link Evaluator computes from positive and negative scores.
EVAL_METRICS = ("hits@K", "mrr", "rocauc")
#: Split-file keys of the per-split arrays besides the positive edges.
OPTIONAL_KEYS = ("weight", "year")
#: Negatives: pairs (Hits@K: the positive must beat the K-th best negative) or per-source targets (MRR).
NEGATIVE_KEYS = ("edge_neg", "target_node_neg")


def hits_at(metric: str) -> int | None:
    """K of a ``hits@K`` metric (K > 0), ``None`` for any other string."""
    if metric.startswith("hits@") and metric[5:].isdecimal() and int(metric[5:]) > 0:
        return int(metric[5:])
    return None


def _eval_metric(value: Any, where: str) -> str:
    metric = str(value)
    if metric in ("mrr", "rocauc") or hits_at(metric) is not None:
        return metric
    raise DatasetError(where, f"'eval metric' must be hits@K (K > 0), mrr or rocauc, got {metric!r}")


def normalise_meta(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Check an OGB link meta_dict (master.csv column or meta.json) and type its values.

    Args:
        raw: The meta dict as OGB writes it (``'True'``/``'False'`` strings, ``"None"`` lists).
        where: File name for error messages.

    Returns:
        ``family`` ("link"), ``task_type``, ``eval_metric``, ``add_inverse_edge``,
        ``has_node_attr``, ``split``, ``binary``, ``additional_node_files``,
        ``additional_edge_files``, ``is_hetero`` and the original dict under ``ogb_meta``.
    """
    for key in REQUIRED_META:
        if key not in raw:
            raise DatasetError(where, f"missing meta key '{key}'")
    if str(raw["task type"]) != TASK_TYPE:
        raise DatasetError(where, f"'task type' must be {TASK_TYPE!r} for a link dataset, got {raw['task type']!r}")
    meta = {
        "family": FAMILY,
        "task_type": TASK_TYPE,
        "eval_metric": _eval_metric(raw["eval metric"], where),
        "add_inverse_edge": as_bool(raw["add_inverse_edge"], f"{where}: 'add_inverse_edge'"),
        "has_node_attr": as_bool(raw.get("has_node_attr", True), f"{where}: 'has_node_attr'"),
        "split": split_name(raw, where),
        "binary": as_bool(raw["binary"], f"{where}: 'binary'"),
        "additional_node_files": as_list(raw.get("additional node files")),
        "additional_edge_files": as_list(raw.get("additional edge files")),
        "is_hetero": as_bool(raw.get("is hetero", False), f"{where}: 'is hetero'"),
        "ogb_meta": {k: (v if isinstance(v, (int, float, bool)) else str(v)) for k, v in raw.items()},
    }
    if meta["is_hetero"]:
        raise DatasetError(where, "heterogeneous graphs ('is hetero': True) are not supported")
    return meta


# -- reading --------------------------------------------------------------------------------------


def _read_graph(raw_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """The training graph through OGB's raw readers, after checking every file's row count
    (:func:`pipeline.ogb_layout.check_row_counts`, the additional edge files' too)."""
    return read_raw_graphs(raw_dir, meta, additional_node_files=meta["additional_node_files"],
                           additional_edge_files=meta["additional_edge_files"])[0]


def _ids(value: Any, where: str, key: str, shape: str, num_nodes: int) -> np.ndarray:
    """An integer node-id array, in range."""
    array = as_array(value)
    if array.dtype.kind not in "iu":
        raise DatasetError(where, f"'{key}' must hold integer node ids {shape}, got dtype {array.dtype}")
    array = array.astype(np.int64, copy=False)
    if array.size and (int(array.min()) < 0 or int(array.max()) >= num_nodes):
        bad = int(array.min()) if int(array.min()) < 0 else int(array.max())
        raise DatasetError(where, f"'{key}' names node {bad}, out of range [0, {num_nodes})")
    return array


def _pairs(value: Any, where: str, key: str, num_nodes: int) -> np.ndarray:
    array = _ids(value, where, key, "[E, 2]", num_nodes)
    if array.ndim != 2 or array.shape[1] != 2:
        raise DatasetError(where, f"'{key}' expected shape [E, 2], got {list(array.shape)}")
    return array


def split_arrays(record: Any, name: str, where: str, num_nodes: int) -> dict[str, np.ndarray]:
    """One split's dict as the cache stores it: ``edge [E, 2]``, negatives, ``weight``, ``year``.

    Args:
        record: The loaded split dict (pairs or per-source shape, see the module docstring).
        name: ``train``, ``valid`` or ``test``.
        where: The file, for errors.
        num_nodes: N.

    Raises:
        DatasetError: Wrong keys, shapes or dtypes, ids out of range, no positive edge, or a
            valid/test split without negatives.
    """
    if not isinstance(record, dict):
        raise DatasetError(where, f"expected a dict of arrays, got {type(record).__name__}")
    out: dict[str, np.ndarray] = {}
    if "edge" in record:
        out["edge"] = _pairs(record["edge"], where, "edge", num_nodes)
    elif "source_node" in record and "target_node" in record:
        src = _ids(record["source_node"], where, "source_node", "[n]", num_nodes).reshape(-1)
        dst = _ids(record["target_node"], where, "target_node", "[n]", num_nodes).reshape(-1)
        if src.size != dst.size:
            raise DatasetError(where, f"'source_node' has {src.size} entries, 'target_node' {dst.size} "
                                      "(expected equal)")
        out["edge"] = np.stack([src, dst], axis=1)
    else:
        raise DatasetError(where, "expected 'edge' [E, 2] or 'source_node'/'target_node' [n], "
                                  f"got keys {sorted(record)}")
    edges = out["edge"].shape[0]
    if edges == 0:
        raise DatasetError(where, f"the '{name}' split has no positive edges")
    if "edge_neg" in record:
        out["edge_neg"] = _pairs(record["edge_neg"], where, "edge_neg", num_nodes)
        if out["edge_neg"].shape[0] == 0:
            raise DatasetError(where, "'edge_neg' holds no negative edges")
    elif "target_node_neg" in record:
        neg = _ids(record["target_node_neg"], where, "target_node_neg", "[n, K]", num_nodes)
        if neg.ndim != 2 or neg.shape[0] != edges or neg.shape[1] == 0:
            raise DatasetError(where, f"'target_node_neg' expected shape [{edges}, K >= 1], got {list(neg.shape)}")
        out["target_node_neg"] = neg
    elif name != "train":
        raise DatasetError(where, f"the '{name}' split needs negatives: 'edge_neg' [M, 2] or 'target_node_neg' [n, K]")
    for key in OPTIONAL_KEYS:
        if key in record:
            values = as_array(record[key]).reshape(-1)
            if values.size != edges:
                raise DatasetError(where, f"'{key}' has {values.size} entries, expected {edges} (one per edge)")
            out[key] = values.astype(np.float32 if key == "weight" else np.int64)
    return out


def read_splits(
    split_dir: Path, num_nodes: int
) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, str]]:
    """The train/valid/test edge splits of ``split_dir`` (``<s>.pt`` files or ``split_dict.pt``)."""
    whole = split_dir / "split_dict.pt"
    if not (split_dir / "train.pt").exists() and whole.is_file():
        loaded = load_pt(whole)
        if not isinstance(loaded, dict) or any(s not in loaded for s in SPLITS):
            raise DatasetError(whole, f"expected a dict with keys {list(SPLITS)}")
        records, files = {s: loaded[s] for s in SPLITS}, {s: str(whole) for s in SPLITS}
    else:
        records, files = {}, {}
        for name in SPLITS:
            path = split_dir / f"{name}.pt"
            records[name], files[name] = load_pt(path), str(path)
    splits = {s: split_arrays(records[s], s, files[s], num_nodes) for s in SPLITS}
    return splits, files


def edge_keys(edges: np.ndarray, num_nodes: int, undirected: bool) -> np.ndarray:
    """One int64 key per edge (``min * N + max`` when direction does not matter)."""
    src, dst = edges[:, 0], edges[:, 1]
    if undirected:
        src, dst = np.minimum(src, dst), np.maximum(src, dst)
    return src * np.int64(num_nodes) + dst


def check_disjoint(
    splits: dict[str, dict[str, np.ndarray]], files: dict[str, str], num_nodes: int, undirected: bool
) -> None:
    """No positive edge of valid/test may also be a positive edge of an earlier split.

    Raises:
        DatasetError: Naming the later split's file and the first shared edge.
    """
    seen = np.unique(edge_keys(splits["train"]["edge"], num_nodes, undirected))
    for name in ("valid", "test"):
        keys = edge_keys(splits[name]["edge"], num_nodes, undirected)
        shared = np.isin(keys, seen)
        if shared.any():
            u, v = splits[name]["edge"][int(np.flatnonzero(shared)[0])]
            earlier = "train" if name == "valid" else "train or valid"
            raise DatasetError(files[name], f"positive edge ({u}, {v}) is also a {earlier} edge "
                                            f"({int(shared.sum())} shared; expected disjoint positive edges)")
        seen = np.union1d(seen, keys)


def build(
    folder: Path,
    meta: dict[str, Any],
    options: PreprocessOptions,
    say: Callable[[str], None] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a link folder with OGB's readers, validate it and return the arrays to cache.

    Positive edges shared between splits are refused, except with a ``time`` split, where a pair
    linked again later (a repeated collaboration in ogbl-collab) is a genuine new event.

    Args:
        folder: The dataset folder (``raw/``, ``split/``).
        meta: Normalised meta (:func:`normalise_meta`).
        options: Preprocessing options: ``undirected`` symmetrises the message-passing graph
            (dropping duplicate edges), ``self_loops``, ``normalize_features``, ``reorder``.
        say: Called with a line per stage.

    Returns:
        ``(arrays, meta)``: ``indptr``, ``indices``, optional ``x``, ``split.<s>.<key>`` arrays
        (see the module docstring), ``extra.<name>`` per additional node file (``node_year``),
        ``extra.node_order`` with ``options.reorder``; and the meta
        (family, task, sizes, the negatives' kind).

    Raises:
        DatasetError: Anything that breaks the contract, naming the file.
    """
    from pipeline.canonicalize import build_csr
    from pipeline.feature_prep import normalize_features
    from pipeline.reorder import node_order

    say = say or (lambda _msg: None)
    raw_dir = folder / "raw"
    say(f"reading the training graph from {raw_dir}")
    graph = _read_graph(raw_dir, meta)
    n = int(graph["num_nodes"])
    check_node_count_fits(n, raw_file(raw_dir, meta, "num-node-list.csv.gz"))
    edge_file = raw_file(raw_dir, meta, "edge.csv.gz")
    edge_index = np.asarray(graph["edge_index"], dtype=np.int64)
    check_edges(edge_index, n, edge_file)
    say("reading and validating the edge splits")
    splits, files = read_splits(folder / "split" / meta["split"], n)
    undirected = meta["add_inverse_edge"] or options.undirected
    if meta["split"] != "time":
        check_disjoint(splits, files, n, undirected)
    kinds = {"edge_neg" if "edge_neg" in splits[s] else "target_node_neg" for s in ("valid", "test")}
    if len(kinds) != 1:
        raise DatasetError(files["test"], "valid and test hold different kinds of negatives (expected the same)")
    say(f"building the message-passing CSR from {edge_index.shape[1]:,} training-graph edges")
    indptr, indices = build_csr(edge_index, n, options)
    arrays: dict[str, np.ndarray] = {"indptr": indptr, "indices": indices}
    x, normalized = graph.get("node_feat"), "none"
    if x is not None:
        x = np.asarray(x).astype(np.float32, copy=False)
        check_features(x, n, raw_file(raw_dir, meta, "node-feat.csv.gz"))
        arrays["x"], normalized = normalize_features(x, options.normalize_features, say)
    for s in SPLITS:
        arrays.update({f"split.{s}.{key}": np.ascontiguousarray(v) for key, v in splits[s].items()})
    for name in meta["additional_node_files"]:  # e.g. ogbl-citation2's node_year
        values = np.asarray(graph[name])
        if values.shape[0] != n:
            raise DatasetError(raw_dir / f"{name}.csv.gz", f"expected {n} rows (one per node), got {values.shape[0]}")
        column = values.ndim == 2 and values.shape[1] == 1
        arrays[f"extra.{name}"] = np.ascontiguousarray(values[:, 0] if column else values)
    if options.reorder != "none":
        arrays["extra.node_order"] = node_order(indptr, indices, options.reorder, progress=say)
    out_meta = {
        "family": FAMILY,
        "num_nodes": n,
        "num_edges": int(indices.size),
        "num_raw_edges": int(edge_index.shape[1]),
        "num_raw_self_loops": int(np.count_nonzero(edge_index[0] == edge_index[1])),
        "num_features": 0 if x is None else int(x.shape[1]),
        "features_normalized": normalized,
        "task_type": TASK_TYPE,
        "eval_metric": meta["eval_metric"],
        "negatives": kinds.pop(),
        "split": meta["split"],
        "num_split_edges": {s: int(splits[s]["edge"].shape[0]) for s in SPLITS},
    }
    return arrays, out_meta


# -- writing --------------------------------------------------------------------------------------


def _save_split(path: Path, record: dict[str, np.ndarray]) -> None:
    """One split's dict of arrays as a torch file of tensors (what OGB's split files hold)."""
    import torch

    torch.save({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in record.items()}, path)


def write_link_folder(
    folder: Path,
    *,
    edges: np.ndarray,
    num_nodes: int,
    splits: dict[str, dict[str, np.ndarray]],
    meta: dict[str, Any],
    node_feat: np.ndarray | None = None,
    binary: bool = False,
    extra: dict[str, np.ndarray] | None = None,
    float_format: str = "%.6g",
) -> Path:
    """Write a link dataset in OGB's raw layout, atomically (owned temp folder, then rename).

    Args:
        folder: Destination; must not exist yet.
        edges: ``[E, 2]`` training edges, the message-passing graph as stored (OGB adds the inverse
            edges on read when ``meta['add_inverse_edge']`` says so).
        num_nodes: N.
        splits: ``train``/``valid``/``test`` dicts of arrays (``edge``, ``edge_neg``, ...), written as
            ``split/<meta['split']>/<s>.pt``.
        meta: OGB's link meta_dict; ``binary`` and ``has_node_attr`` are filled in from the arguments.
        node_feat: Optional ``[N, F]`` features.
        binary: ``raw/data.npz`` instead of CSV files.
        extra: Additional edge files (``edge_weight``, ``edge_year``; ``meta`` should name them).
        float_format: How CSV features are printed.

    Returns:
        ``folder``.

    Raises:
        FileExistsError: ``folder`` exists or was created meanwhile (nothing is written there).
    """
    folder = Path(folder)
    with published_folder(folder) as tmp:
        write_raw_graph(tmp, np.asarray(edges).T, num_nodes, node_feat, binary, extra, float_format)
        split_dir = tmp / "split" / str(meta["split"])
        split_dir.mkdir(parents=True)
        for name, record in splits.items():
            _save_split(split_dir / f"{name}.pt", record)
        full_meta = {**meta, "binary": str(binary), "has_node_attr": str(node_feat is not None)}
        (tmp / "meta.json").write_text(json.dumps(full_meta, indent=2) + "\n")
    return folder


# -- the cached graph -----------------------------------------------------------------------------


@dataclass
class LinkGraph:
    """A cached link dataset: the message-passing graph and the edge splits.

    Attributes:
        indptr: ``int64 [N+1]`` CSR row pointer of the training graph (rows = destinations).
        indices: ``int64 [nnz]`` source of each edge.
        x: ``float32 [N, F]`` node features or ``None``.
        splits: ``{"train", "valid", "test"}`` -> ``{"edge": [E, 2], "edge_neg": [M, 2] |
            "target_node_neg": [n, K], "weight", "year"}`` tensors (those present).
        meta: ``family``, ``name``, ``eval_metric``, ``negatives``, sizes.
        extra: Further node arrays (``node_order``).
    """

    indptr: Tensor
    indices: Tensor
    x: Tensor | None
    splits: dict[str, dict[str, Tensor]]
    meta: dict[str, Any]
    extra: dict[str, Tensor] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.numel() - 1)

    @property
    def num_edges(self) -> int:
        return int(self.indices.numel())

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    def edge_index(self) -> Tensor:
        """The training graph as a PyG ``[2, nnz]`` tensor ``(source, destination)``."""
        import torch

        dst = torch.repeat_interleave(torch.arange(self.num_nodes, dtype=torch.int64), self.indptr.diff())
        return torch.stack([self.indices.to(torch.int64), dst])

    def degree(self) -> Tensor:
        """In-degree of every node in the training graph."""
        return self.indptr.diff()


def open_entry(entry: CacheEntry) -> LinkGraph:
    """A link cache entry as a :class:`LinkGraph`, every array memory-mapped.

    Raises:
        DatasetError: The entry is not a link entry.
    """
    meta = dict(entry.manifest["meta"])
    if meta.get("family") != FAMILY:
        raise DatasetError(entry.path / "manifest.json", f"not a link entry (family {meta.get('family')!r})")
    names = entry.manifest["arrays"]
    splits: dict[str, dict[str, Tensor]] = {s: {} for s in SPLITS}
    for name in names:
        if name.startswith("split."):
            _, s, key = name.split(".", 2)
            splits[s][key] = entry.array(name)
    return LinkGraph(
        indptr=entry.array("indptr"),
        indices=entry.array("indices"),
        x=entry.array("x") if "x" in names else None,
        splits=splits,
        meta=meta,
        extra={n.removeprefix("extra."): entry.array(n) for n in names if n.startswith("extra.")},
    )

"""OGB's raw layout for graph-property datasets (``ogbg-*``): read, validate, cache, open.

Layout (as OGB's downloads and ``ogb.io.DatasetSaver`` write it)::

    <folder>/meta.json                       OGB's meta_dict keys (synthetic twins, folders by path)
    <folder>/raw/edge.csv.gz                 every graph's bonds, "src,dst" with per-graph node ids
    <folder>/raw/num-node-list.csv.gz        nodes per graph
    <folder>/raw/num-edge-list.csv.gz        edges per graph (as stored, before inverse edges)
    <folder>/raw/node-feat.csv.gz, edge-feat.csv.gz   optional
    <folder>/raw/graph-label.csv.gz          one row of T labels per graph (empty = missing)
    <folder>/raw/data.npz, graph-label.npz   binary layout instead of the CSV files
    <folder>/split/<scheme>/{train,valid,test}.csv.gz   graph ids

Graphs are read with ``ogb.io.read_graph_raw`` (a list of per-graph dicts), validated (edge ids
in each graph's node range, no graph without nodes, one label row per graph, split ids in range
and disjoint) and cached as one concatenated CSR over all graphs (rows = destination nodes):
``graph_ptr [G+1]`` node offsets, ``indptr [N+1]``/``indices [E]`` with global node ids,
``edge_ptr [G+1]`` edge offsets (``indptr[graph_ptr]``), ``x`` node features (int64 ``[N, 9]``
atom features for molecules, as OGB stores them), ``edge_attr`` aligned with the CSR order,
``y [G, T]`` (float32 with NaN for missing binary labels, int64 class ids for multi-class) and
``split.*``. :func:`open_entry` maps them back as a :class:`GraphSet`, which cuts PyG batches of
graphs with a few vectorised gathers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from pipeline.errors import DatasetError
from pipeline.graph import SPLITS, whole
from pipeline.npz_stream import save_npz
# raw_files is this layout's too (pipeline.family)
from pipeline.ogb_layout import (as_bool, meta_counts, numeric, raw_files, read_csv, read_raw_graphs,  # noqa: F401
                                 read_split, split_name, write_raw_graph, write_split_and_meta)
from pipeline.temp_paths import published_folder

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from torch_geometric.data import Data

    from pipeline.cache import CacheEntry
    from pipeline.options import PreprocessOptions

FAMILY = "graph"
#: meta.json keys a graph folder must provide (OGB's meta_dict names, ``ogb.graphproppred/master.csv``).
REQUIRED_META = (
    "num tasks",
    "num classes",
    "task type",
    "eval metric",
    "add_inverse_edge",
    "has_node_attr",
    "has_edge_attr",
    "split",
    "binary",
)
TASK_TYPES = ("binary classification", "multiclass classification")
#: OGB's graph metrics gnnkit trains for (code2's F1 over token sequences is not one of them).
EVAL_METRICS = ("rocauc", "ap", "acc")


def normalise_meta(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Check OGB's graph meta_dict keys and convert them to typed values.

    Args:
        raw: The meta dict as OGB writes it (``'True'``/``'False'`` strings, ints or strings).
        where: File name (or master.csv column) for error messages.

    Returns:
        ``family`` ("graph"), ``num_tasks``, ``num_classes``, ``task_type``, ``eval_metric``,
        ``add_inverse_edge``, ``has_node_attr``, ``has_edge_attr``, ``split``, ``binary``,
        ``molecular`` (OGB's ``data type`` is ``mol``), ``additional_node_files`` (always empty:
        :func:`pipeline.ogb_layout.check_row_counts` reads it) and the raw dict as ``ogb_meta``.

    Raises:
        DatasetError: A missing key or a value outside what OGB writes.
    """
    for key in REQUIRED_META:
        if key not in raw:
            raise DatasetError(where, f"missing meta key '{key}' (graph datasets need {list(REQUIRED_META)})")
    if str(raw["task type"]) not in TASK_TYPES:
        raise DatasetError(where, f"'task type' must be one of {list(TASK_TYPES)}, got {raw['task type']!r}")
    if str(raw["eval metric"]) not in EVAL_METRICS:
        raise DatasetError(where, f"'eval metric' must be one of {list(EVAL_METRICS)}, got {raw['eval metric']!r}")
    num_tasks, num_classes = meta_counts(raw, where)
    if str(raw["task type"]) == "multiclass classification" and num_tasks != 1:
        raise DatasetError(where, f"multiclass classification needs 'num tasks' 1, got {num_tasks}")
    return {
        "family": FAMILY,
        "num_tasks": num_tasks,
        "num_classes": num_classes,
        "task_type": str(raw["task type"]),
        "eval_metric": str(raw["eval metric"]),
        "add_inverse_edge": as_bool(raw["add_inverse_edge"], f"{where}: 'add_inverse_edge'"),
        "has_node_attr": as_bool(raw["has_node_attr"], f"{where}: 'has_node_attr'"),
        "has_edge_attr": as_bool(raw["has_edge_attr"], f"{where}: 'has_edge_attr'"),
        "split": split_name(raw, where),
        "binary": as_bool(raw["binary"], f"{where}: 'binary'"),
        "molecular": str(raw.get("data type", "")) == "mol",
        "additional_node_files": [],
        "ogb_meta": {k: (v if isinstance(v, (int, float, bool)) else str(v)) for k, v in raw.items()},
    }


def _read_labels(raw_dir: Path, meta: dict[str, Any], num_graphs: int) -> tuple[np.ndarray, Path]:
    """``[G, T]`` labels: float32 with NaN for missing binary labels, int64 class ids otherwise."""
    if meta["binary"]:
        path = raw_dir / "graph-label.npz"
        if not path.is_file():
            raise DatasetError(path, "missing")
        with np.load(path, allow_pickle=False) as npz:
            if "graph_label" not in npz:
                raise DatasetError(path, "expected an array named 'graph_label'")
            labels = np.asarray(npz["graph_label"])
    else:
        path = raw_dir / "graph-label.csv.gz"
        labels = read_csv(path, blank_is_missing=True)
    labels = numeric(labels, path, "graph labels")
    labels = labels.reshape(labels.shape[0], -1) if labels.ndim else labels.reshape(1, 1)
    if labels.shape[0] != num_graphs:
        raise DatasetError(path, f"has {labels.shape[0]} label rows, expected one per graph ({num_graphs})")
    if labels.shape[1] != meta["num_tasks"]:
        raise DatasetError(path, f"has {labels.shape[1]} label columns, expected 'num tasks' = {meta['num_tasks']}")
    if meta["task_type"] == "multiclass classification":
        return _class_ids(labels, path, meta["num_classes"]), path
    values = labels.astype(np.float32)
    known = values[~np.isnan(values)]
    if not np.isin(known, (0.0, 1.0)).all():
        raise DatasetError(path, "expected binary labels 0 or 1 (empty = missing)")
    return values, path


def _check_vocabularies(arrays: dict[str, np.ndarray], node_feat_file: Path, edge_feat_file: Path) -> None:
    """Molecules' features (``'data type': 'mol'``) as OGB's ``AtomEncoder``/``BondEncoder`` embed them:
    integer columns, at most 9 atom and 3 bond ones, each value inside its vocabulary
    (:func:`ogb.utils.features.get_atom_feature_dims`); they failed only in training, in a lookup.

    Raises:
        DatasetError: Naming the file, the column, the vocabulary and the first value outside it.
    """
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

    for name, file, what, sizes in (("x", node_feat_file, "atom", get_atom_feature_dims()),
                                    ("edge_attr", edge_feat_file, "bond", get_bond_feature_dims())):
        values = arrays.get(name)
        if values is None:
            continue
        if values.dtype.kind not in "iu" or values.ndim != 2 or values.shape[1] > len(sizes):
            raise DatasetError(file, f"expected at most {len(sizes)} integer {what} feature columns ('data type': "
                                     f"'mol', OGB's encoders), got dtype {values.dtype} and shape {list(values.shape)}")
        outside = (values < 0) | (values >= np.array(sizes[: values.shape[1]]))
        if outside.any():
            column = int(np.flatnonzero(outside.any(axis=0))[0])
            value = int(values[outside[:, column], column][0])
            raise DatasetError(file, f"{what} feature {column} must lie in [0, {sizes[column]}) (OGB's vocabulary for "
                                     f"'data type': 'mol'), found {value}")


def _class_ids(labels: np.ndarray, path: Path, num_classes: int) -> np.ndarray:
    """Multi-class labels as int64 class ids: whole numbers (``2.0`` too, as pandas writes a column
    that held a NaN) in ``[0, num_classes)``, one for every graph.

    Raises:
        DatasetError: Naming the file, the first bad graph and its value.
    """
    good = whole(labels) & (labels >= 0) & (labels < num_classes)
    if not good.all():
        graph = int(np.flatnonzero(~good.all(axis=1))[0])
        value = labels[graph][~good[graph]][0].item()
        raise DatasetError(path, f"graph {graph} has label {value!r}; expected an integer class id in "
                                 f"[0, {num_classes}) for every graph (multi-class labels cannot be missing)")
    return labels.astype(np.int64)


def _check_split(split: dict[str, np.ndarray], files: dict[str, str], num_graphs: int) -> None:
    """Split graph ids in ``[0, G)``, without repeats, and disjoint across splits."""
    seen = np.zeros(num_graphs, dtype=np.int8)
    for name in SPLITS:
        ids = split[name]
        if ids.size and (ids.min() < 0 or ids.max() >= num_graphs):
            bad = int(ids[(ids < 0) | (ids >= num_graphs)][0])
            raise DatasetError(files[name], f"graph id {bad} out of range; expected ids in [0, {num_graphs})")
        if np.unique(ids).size != ids.size:
            raise DatasetError(files[name], "lists a graph id more than once")
        if seen[ids].any():
            other = int(ids[seen[ids] > 0][0])
            raise DatasetError(files[name], f"graph id {other} is also in an earlier split; expected disjoint splits")
        seen[ids] = 1


def edge_owners(edge_index: np.ndarray, num_nodes: np.ndarray, num_edges: np.ndarray) -> tuple[np.ndarray, int | None]:
    """The graph of every edge of graphs stored in turn (each with its own node ids), and the first
    edge whose ids fall outside its graph's ``0..n-1`` (``None``: none does)."""
    owner = np.repeat(np.arange(len(num_nodes)), num_edges)
    bad = (edge_index < 0).any(axis=0) | (edge_index >= num_nodes[owner]).any(axis=0)
    return owner, (int(np.flatnonzero(bad)[0]) if bad.any() else None)


def _concatenate(graphs: list[dict[str, Any]], edge_file: Path, node_file: Path, node_feat_file: Path,
                 edge_feat_file: Path) -> dict[str, np.ndarray]:
    """One CSR (rows = destinations) over all graphs, validated, with features in CSR order; an error
    names the file it is about (the node counts', the edges', a feature file)."""
    counts = np.array([int(g["num_nodes"]) for g in graphs], dtype=np.int64)
    if (counts <= 0).any():
        raise DatasetError(node_file, f"graph {int(np.flatnonzero(counts <= 0)[0])} has no nodes; "
                           "expected at least one node per graph")
    edge_counts = np.array([g["edge_index"].shape[1] for g in graphs], dtype=np.int64)
    graph_ptr = np.zeros(len(graphs) + 1, dtype=np.int64)
    np.cumsum(counts, out=graph_ptr[1:])
    edge_index = (np.concatenate([g["edge_index"] for g in graphs], axis=1).astype(np.int64)
                  if graphs else np.zeros((2, 0), dtype=np.int64))
    owner, e = edge_owners(edge_index, counts, edge_counts)
    if e is not None:
        g = int(owner[e])
        raise DatasetError(edge_file, f"graph {g} has edge ({int(edge_index[0, e])}, {int(edge_index[1, e])}); "
                           f"expected node ids in [0, {int(counts[g])})")
    src, dst = edge_index + graph_ptr[owner]
    num_nodes = int(graph_ptr[-1])
    order = np.argsort(dst, kind="stable")  # edges of one graph stay together: node ranges are contiguous
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=num_nodes), out=indptr[1:])
    arrays = {"graph_ptr": graph_ptr, "edge_ptr": indptr[graph_ptr], "indptr": indptr, "indices": src[order]}
    if graphs and graphs[0].get("node_feat") is not None:
        arrays["x"] = np.concatenate([g["node_feat"] for g in graphs])
    if graphs and graphs[0].get("edge_feat") is not None:
        arrays["edge_attr"] = np.concatenate([g["edge_feat"] for g in graphs])[order]
    for name, file in (("x", node_feat_file), ("edge_attr", edge_feat_file)):
        if name in arrays and arrays[name].dtype.kind == "f":
            arrays[name] = arrays[name].astype(np.float32)
            finite = np.isfinite(arrays[name]).all(axis=1)
            if not finite.all():
                row = int(np.flatnonzero(~finite)[0])
                row = row if name == "x" else int(order[row])  # edge features are in CSR order by now
                raise DatasetError(file, f"{name}: expected finite features, found a missing or non-finite "
                                         f"value in row {row}")
        elif name in arrays:
            arrays[name] = arrays[name].astype(np.int64)
    return arrays


def write_graph_folder(
    folder: Path,
    *,
    edge_index: np.ndarray,
    num_nodes: np.ndarray,
    num_edges: np.ndarray,
    labels: np.ndarray,
    split: dict[str, np.ndarray],
    meta: dict[str, Any],
    node_feat: np.ndarray | None = None,
    edge_feat: np.ndarray | None = None,
) -> Path:
    """Write a set of graphs in OGB's binary raw layout (``data.npz``, ``graph-label.npz``),
    atomically (owned temp folder, then rename).

    Args:
        folder: Destination; must not exist yet.
        edge_index: ``[2, E]`` every graph's edges in turn, each with its own node ids ``0..n-1``.
        num_nodes: ``[G]`` nodes per graph.
        num_edges: ``[G]`` edges per graph.
        labels: ``[G, T]`` labels (NaN: a missing binary label).
        split: ``train``/``valid``/``test`` graph ids; written to ``split/<meta['split']>/``.
        meta: OGB's graph meta_dict; ``binary``, ``has_node_attr`` and ``has_edge_attr`` are filled in.
        node_feat: Optional ``[N, F]`` features of all graphs' nodes in turn.
        edge_feat: Optional ``[E, D]`` features of the edges, in ``edge_index``'s order.

    Raises:
        FileExistsError: ``folder`` exists or was created meanwhile (nothing is written there).
    """
    folder = Path(folder)
    with published_folder(folder) as tmp:
        raw = write_raw_graph(tmp, edge_index, num_nodes, node_feat, binary=True, num_edges=num_edges,
                              edge_feat=edge_feat, compressed=True)
        save_npz(raw / "graph-label.npz", {"graph_label": np.asarray(labels).reshape(len(num_nodes), -1)})
        write_split_and_meta(tmp, split, {**meta, "has_edge_attr": str(edge_feat is not None)}, True,
                             node_feat is not None)
    return folder


def build(
    folder: Path, meta: dict[str, Any], options: PreprocessOptions, say: Callable[[str], None]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a graph-property folder with OGB's raw readers and return the arrays to cache.

    Args:
        folder: The dataset folder (``raw/``, ``split/``).
        meta: Its normalised meta (:func:`normalise_meta`).
        options: Preprocessing options; graph datasets keep their edges as stored (molecules carry
            both directions already), so only the defaults are accepted.
        say: Progress callback.

    Returns:
        ``(arrays, meta)``: the arrays of the module docstring and the meta to store (``meta`` plus
        ``num_graphs``, ``num_nodes``, ``num_edges``, feature widths).

    Raises:
        DatasetError: Naming the file and what was expected.
    """
    from pipeline.options import PreprocessOptions

    for name, value in options.key_fields().items():
        if value != PreprocessOptions().key_fields().get(name):
            raise DatasetError(f"preprocess.{name}", f"graph datasets take no preprocessing option; "
                               f"expected the default {PreprocessOptions().key_fields().get(name)!r}, got {value!r}")
    raw_dir = folder / "raw"
    say(f"reading graphs from {raw_dir}")
    graphs = read_raw_graphs(raw_dir, meta)
    if not graphs:
        raise DatasetError(raw_dir / "num-node-list.csv.gz", "holds no graph; expected at least one")
    names = ("edge.csv.gz", "num-node-list.csv.gz", "node-feat.csv.gz", "edge-feat.csv.gz")
    files = [raw_dir / ("data.npz" if meta["binary"] else name) for name in names]
    arrays = _concatenate(graphs, *files)
    if meta["molecular"]:
        _check_vocabularies(arrays, *files[2:])
    num_graphs = len(graphs)
    del graphs
    labels, _ = _read_labels(raw_dir, meta, num_graphs)
    arrays["y"] = labels
    split, files = read_split(folder / "split" / meta["split"])
    _check_split(split, files, num_graphs)
    arrays.update({f"split.{k}": v for k, v in split.items()})
    say(f"{num_graphs:,} graphs, {arrays['indptr'].size - 1:,} nodes, {arrays['indices'].size:,} edges")
    stored = dict(meta)
    stored.update(
        num_graphs=num_graphs,
        num_nodes=int(arrays["indptr"].size - 1),
        num_edges=int(arrays["indices"].size),
        num_node_features=int(arrays["x"].shape[1]) if "x" in arrays else 0,
        num_edge_features=int(arrays["edge_attr"].shape[1]) if "edge_attr" in arrays else 0,
    )
    return arrays, stored


@dataclass
class GraphSet:
    """Many small graphs in one CSR (rows = destinations), as cached; every tensor memory-mapped.

    Attributes:
        graph_ptr: ``int64 [G+1]`` first node of each graph.
        indptr: ``int64 [N+1]`` CSR row pointer over all nodes.
        indices: ``int64 [E]`` global source node of each edge, grouped by destination row.
        x: ``[N, F]`` node features (int64 categorical for molecules, float32 otherwise) or ``None``.
        edge_attr: ``[E, F_e]`` edge features in CSR order, or ``None``.
        y: ``[G, T]`` labels (float32 with NaN = missing, or int64 class ids).
        split: ``train``/``valid``/``test`` graph ids.
        meta: The stored meta (:func:`build`).
    """

    graph_ptr: Tensor
    indptr: Tensor
    indices: Tensor
    x: Tensor | None
    edge_attr: Tensor | None
    y: Tensor
    split: dict[str, Tensor]
    meta: dict[str, Any]

    @property
    def num_graphs(self) -> int:
        return int(self.graph_ptr.numel() - 1)

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.numel() - 1)

    @property
    def num_edges(self) -> int:
        return int(self.indices.numel())

    def graph(self, i: int) -> Data:
        """Graph ``i`` alone as a PyG ``Data`` (``edge_index`` in CSR order, local node ids)."""
        import torch

        return self.batch(torch.tensor([int(i)]))

    def batch(self, ids: Tensor) -> Data:
        """The graphs ``ids`` as one PyG batch: a block-diagonal graph in a few vectorised gathers.

        Returns a ``Data`` with ``x``, ``edge_index`` (``[2, E_b]`` source/destination, rows of the
        batch CSR in order), ``edge_attr``, ``y [B, T]``, ``batch [N_b]`` (graph of each node),
        ``ptr [B+1]``, ``num_graphs``, and the batch CSR ``indptr``/``indices`` (for a gnnkit
        :class:`~gnnkit.sparse.Adjacency`).
        """
        import torch
        from torch_geometric.data import Data

        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
        first, last = self.graph_ptr[ids], self.graph_ptr[ids + 1]
        sizes = last - first
        ptr = torch.zeros(ids.numel() + 1, dtype=torch.int64)
        torch.cumsum(sizes, 0, out=ptr[1:])
        num_nodes = int(ptr[-1])
        graph_of_node = torch.repeat_interleave(torch.arange(ids.numel()), sizes, output_size=num_nodes)
        shift = first - ptr[:-1]  # global id - batch id, per graph
        nodes = torch.arange(num_nodes) + shift[graph_of_node]
        degree = self.indptr[nodes + 1] - self.indptr[nodes]
        indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
        torch.cumsum(degree, 0, out=indptr[1:])
        num_edges = int(indptr[-1])
        row = torch.repeat_interleave(torch.arange(num_nodes), degree, output_size=num_edges)
        edges = torch.arange(num_edges) + (self.indptr[nodes] - indptr[:-1])[row]
        indices = self.indices[edges] - shift[graph_of_node[row]]
        return Data(
            x=None if self.x is None else self.x[nodes],
            edge_index=torch.stack([indices, row]),
            edge_attr=None if self.edge_attr is None else self.edge_attr[edges],
            y=self.y[ids],
            batch=graph_of_node,
            ptr=ptr,
            num_graphs=ids.numel(),
            num_nodes=num_nodes,
            indptr=indptr,
            indices=indices,
        )


def open_entry(entry: CacheEntry) -> GraphSet:
    """The cached graphs of ``entry`` (built by :func:`build`), every array memory-mapped."""
    arrays = entry.manifest["arrays"]
    if "graph_ptr" not in arrays:
        raise DatasetError(entry.path, "not a graph-property cache entry (no 'graph_ptr' array)")
    return GraphSet(
        graph_ptr=entry.array("graph_ptr"),
        indptr=entry.array("indptr"),
        indices=entry.array("indices"),
        x=entry.array("x") if "x" in arrays else None,
        edge_attr=entry.array("edge_attr") if "edge_attr" in arrays else None,
        y=entry.array("y"),
        split={s: entry.array(f"split.{s}") for s in SPLITS},
        meta=dict(entry.manifest["meta"]),
    )


def graph_set_from_arrays(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> GraphSet:
    """A :class:`GraphSet` over in-memory :func:`build` arrays (tests, benchmarks without a cache)."""
    import torch

    def t(name: str) -> torch.Tensor | None:
        return torch.from_numpy(np.ascontiguousarray(arrays[name])) if name in arrays else None

    return GraphSet(graph_ptr=t("graph_ptr"), indptr=t("indptr"), indices=t("indices"), x=t("x"),
                    edge_attr=t("edge_attr"), y=t("y"), split={s: t(f"split.{s}") for s in SPLITS}, meta=meta)

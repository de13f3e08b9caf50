"""A dataset of many graphs of the user's own, written as an OGB-layout folder for graph property
prediction (``gnnkit import --task graph``), as :mod:`pipeline.graph_layout` reads ``ogbg-*``.

Sources:

* the processed file of a PyG ``InMemoryDataset``: ``TUDataset(root, "MUTAG")`` keeps its graphs at
  ``root/MUTAG/processed/data.pt`` (the arrays of all graphs and where each graph's begin), loaded
  weights-only (PyG's ``Data`` class allowed, nothing else unpickled);
* a ``.pt`` of a list of graphs, ``torch.save([data.to_dict() for data in dataset], path)``;
* in Python, a PyG dataset or any sequence of ``Data`` (or of dicts), read graph by graph (so a
  dataset's transforms and index selections apply). TUDataset's processed file holds a dataset's
  continuous node and edge attributes beside its one-hot labels, and TUDataset drops them as it
  loads unless ``use_node_attr``/``use_edge_attr``: the file gives all columns, the dataset object
  what it was opened with.

Per graph: ``x`` (node features, or none), ``edge_index`` (the graph's own node ids; PyG's
collated datasets store them so), ``edge_attr`` (or none), ``y`` (one row per graph). Written as:

* labels: integer classes (one per graph) are a multi-class task scored by accuracy, as the graph
  classification literature reports the TU datasets (Xu et al., https://arxiv.org/abs/1810.00826);
  ``--metric rocauc`` (or ``ap``) makes two classes a binary task, as OGB scores ogbg-molhiv.
  One-hot rows are classes; a ``[G, T]`` matrix of 0/1 (NaN unknown) is T binary tasks by ROC-AUC
  (or AP), as ogbg-moltox21's. Real-valued targets (regression) are refused;
* split: a seeded random 80/10/10 of the labelled graphs, the proportions of OGB's molecule datasets
  (Hu et al., https://arxiv.org/abs/2005.00687); every part non-empty and, under ROC-AUC or AP,
  holding both classes;
* features: node and edge features as float32 (categorical columns, such as the TU datasets'
  one-hot node labels, are numbers too: the model reads them through a linear layer, not OGB's
  molecule vocabularies), finite; ``data.npz``, OGB's binary layout, with edges as stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.array_source import graph_count, load_weights_only, named_arrays
from pipeline.errors import DatasetError
from pipeline.graph import whole
from pipeline.graph_import import Imported, import_graph, shuffled_split
from pipeline.graph_layout import EVAL_METRICS, edge_owners, write_graph_folder
from pipeline.node_graph_import import (Labels, binary_task, empty_class_note, first_few, first_found,
                                       holds_both_classes, multiclass_task)

#: The per-graph arrays read (others, such as a TU dataset's ``sizes``, are left out).
NAMES = ("x", "edge_index", "edge_attr", "y", "num_nodes", "pos")

#: Per-node arrays whose rows count a graph's nodes, in the order PyG's ``Data.num_nodes`` asks them.
NODE_ROWS = ("x", "pos")

#: Shares of the labelled graphs in the split made here (OGB's molecule datasets' 80/10/10).
RANDOM_SPLIT = {"train": 0.8, "valid": 0.1, "test": 0.1}

#: Fewest graphs a split is made of (10% of them is one validation graph).
MIN_GRAPHS = 10


@dataclass(frozen=True)
class GraphSetImportOptions:
    """How :func:`graph_set_parts` makes the task.

    Attributes:
        metric: ``acc``, ``rocauc`` or ``ap``; ``None``: accuracy for integer classes, ROC-AUC for
            binary tasks.
        seed: Seed of the random split.

    Raises:
        DatasetError: Another metric (before a large source is read).
    """

    metric: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.metric is not None and self.metric not in EVAL_METRICS:
            raise DatasetError("metric", f"expected one of {list(EVAL_METRICS)} for a graph task, got {self.metric!r}")


@dataclass(frozen=True)
class Graphs:
    """Graphs as concatenated arrays.

    Attributes:
        num_nodes: ``[G]`` nodes per graph.
        edge_index: ``[2, E]`` every graph's edges in turn, in its own node ids.
        num_edges: ``[G]`` edges per graph.
        x: ``[N, F]`` node features of every graph in turn, or ``None``.
        edge_attr: ``[E, D]`` edge features, or ``None``.
        y: ``[G, ...]`` one label row per graph.
    """

    num_nodes: np.ndarray
    edge_index: np.ndarray
    num_edges: np.ndarray
    x: np.ndarray | None
    edge_attr: np.ndarray | None
    y: np.ndarray


# -- reading --------------------------------------------------------------------------------------


#: How a list of graphs is saved for ``gnnkit import --task graph``.
SAVE_AS = "torch.save([data.to_dict() for data in dataset], path)"


def read_graph_set(source: Path | str | Any) -> tuple[str, Graphs]:
    """A source's name (for errors) and its graphs: a ``.pt`` file (a PyG processed dataset, or a
    list of ``to_dict()`` graphs), a PyG dataset, a ``Batch`` or a sequence of graphs.

    Raises:
        DatasetError: A file or object that holds no set of graphs, or a malformed array, naming it.
    """
    if not isinstance(source, (str, Path)):
        where = type(source).__name__
        if hasattr(source, "to_data_list"):  # a PyG Batch
            source = source.to_data_list()
        elif isinstance(source, Mapping) or hasattr(source, "stores"):  # a dict, or a PyG Data
            raise DatasetError(where, "one graph: expected a PyG dataset or a list of graphs (one graph: --task node "
                                      "or --task link)")
        if not isinstance(source, Sequence) and not (hasattr(source, "__getitem__") and hasattr(source, "__len__")):
            raise DatasetError(where, "expected a PyG dataset or a list of graphs")
        return where, _from_list([source[i] for i in range(len(source))], where)
    path = Path(source)
    if not path.exists():
        raise DatasetError(path, "no such file")
    if path.suffix.lower() not in (".pt", ".pth") or not path.is_file():
        raise DatasetError(path, f"expected a .pt file: a PyG dataset's processed/data.pt, or {SAVE_AS}")
    content = load_weights_only(path, SAVE_AS)
    if isinstance(content, (tuple, list)) and len(content) in (3, 4) and isinstance(content[0], Mapping) \
            and isinstance(content[1], Mapping):  # InMemoryDataset.save / TUDataset: (arrays, slices, [sizes,] cls)
        return str(path), _from_collated(content[0], content[1], str(path))
    if isinstance(content, (tuple, list)) and content and all(isinstance(g, Mapping) for g in content):
        return str(path), _from_list(list(content), str(path))
    raise DatasetError(path, f"a {type(content).__name__}: expected a PyG dataset's processed file or a list of "
                             f"graphs ({SAVE_AS})")


def _from_collated(data: Mapping[str, Any], slices: Mapping[str, Any], where: str) -> Graphs:
    """Graphs from a PyG collated dataset: the arrays of all graphs, cut by ``slices``."""
    arrays = named_arrays(data, (*NAMES, "_num_nodes"), where)
    cuts = {name: np.asarray(named_arrays(slices, (name,), f"{where}: slices")[name], dtype=np.int64)
            for name in NAMES if name in slices}
    if "edge_index" not in arrays or "edge_index" not in cuts:
        raise DatasetError(where, "holds no edge_index: expected a PyG dataset of graphs")
    graphs = graph_count(slices)
    if (rows := first_found(cuts, NODE_ROWS)) is not None:
        num_nodes = np.diff(rows[1])
    elif "_num_nodes" in arrays and arrays["_num_nodes"].size == graphs:  # featureless graphs (PyG's collate)
        num_nodes = arrays["_num_nodes"].astype(np.int64).reshape(-1)
    else:
        raise DatasetError(where, "holds neither per-node arrays (x, pos) nor the node count of each graph: "
                                  "expected a PyG dataset's processed file")
    y = arrays.get("y")
    if y is None or "y" not in cuts:
        raise DatasetError(where, "holds no labels (y): expected one per graph")
    if not (np.diff(cuts["y"]) == 1).all():
        raise DatasetError(f"{where}: y", "labels of nodes, not of graphs: import a single graph with --task node")
    return Graphs(num_nodes, arrays["edge_index"], np.diff(cuts["edge_index"]), arrays.get("x"),
                  arrays.get("edge_attr"), y)


def _from_list(graphs: list[Any], where: str) -> Graphs:
    """Graphs given one by one (``Data`` objects or dicts)."""
    if not graphs:
        raise DatasetError(where, "holds no graph")
    read = [named_arrays(g, NAMES, f"{where}: graph {i}") for i, g in enumerate(graphs)]
    for name in ("edge_index", "y"):
        if (missing := next((i for i, g in enumerate(read) if name not in g), None)) is not None:
            raise DatasetError(f"{where}: graph {missing}", f"has no {name}: expected it in every graph")
    for name in ("x", "edge_attr"):
        if len({name in g for g in read}) > 1:
            first = next(i for i, g in enumerate(read) if name not in g)
            raise DatasetError(f"{where}: graph {first}", f"has no {name}, unlike others: expected it in all or none")
    for i, g in enumerate(read):
        if "y" in g and g["y"].ndim == 0:  # y=torch.tensor(label): the graph's one label
            g["y"] = g["y"].reshape(1)
        y = g["y"]
        if not y.size or (y.ndim == 1 and y.size != 1) or (y.ndim > 1 and y.shape[0] != 1):
            raise DatasetError(f"{where}: graph {i}: y", f"expected one label row per graph, got shape "
                                                         f"{list(g['y'].shape)} (node labels: --task node)")
        if g["edge_index"].ndim != 2 or g["edge_index"].shape[0] != 2:
            raise DatasetError(f"{where}: graph {i}: edge_index", f"expected shape [2, E], got "
                                                                  f"{list(g['edge_index'].shape)}")
    _same_width([g["y"] for g in read], "y", where)
    counts = [g.num_nodes if hasattr(g, "stores") else _node_count(read[i]) for i, g in enumerate(graphs)]
    _check_rows(read, counts, where)
    joined = {name: _joined_rows([g[name] for g in read], name, where) for name in ("x", "edge_attr")
              if name in read[0]}
    return Graphs(np.array(counts, dtype=np.int64), np.concatenate([g["edge_index"] for g in read], axis=1),
                  np.array([g["edge_index"].shape[1] for g in read], dtype=np.int64), joined.get("x"),
                  joined.get("edge_attr"), np.concatenate([g["y"].reshape(1, -1) for g in read]))


def _same_width(values: list[np.ndarray], name: str, where: str) -> int:
    """The columns of every graph's ``name``: those of the first graph with rows (an edgeless graph's
    ``[0, D]`` edge_attr has D columns, a 1-D ``[0]`` any number).

    Returns:
        The width (``y``: the size of each graph's label row).

    Raises:
        DatasetError: A graph of another width, in one line naming the first that differs.
    """
    widths = [int(np.prod(v.shape[1:])) if name != "y" else v.size for v in values]
    telling = [i for i, v in enumerate(values) if len(v) or v.ndim > 1]  # those whose width is known
    first = next((i for i in telling if len(values[i])), telling[0] if telling else 0)
    other = next((i for i in telling if widths[i] != widths[first]), None)
    if other is not None:
        reference = "the first graph" if first == 0 else f"graph {first}"
        raise DatasetError(f"{where}: graph {other}: {name}", f"{widths[other]} columns, expected {widths[first]} as "
                                                              f"in {reference}")
    return widths[first]


def _check_rows(read: list[dict[str, np.ndarray]], counts: list[int], where: str) -> None:
    """Each graph's ``x`` has a row per node and its ``edge_attr`` one per edge (so a row of the joined
    arrays names its graph)."""
    for i, g in enumerate(read):
        for name, rows, what in (("x", counts[i], "node"), ("edge_attr", g["edge_index"].shape[1], "edge")):
            if name in g and len(g[name]) != rows:
                raise DatasetError(f"{where}: graph {i}: {name}", f"{len(g[name]):,} rows, expected one per {what} "
                                                                  f"({rows:,})")


def _joined_rows(values: list[np.ndarray], name: str, where: str) -> np.ndarray:
    """Every graph's ``name`` (``[n]`` and ``[n, 1]`` alike) as one ``[rows, width]`` array, empty ones too."""
    width = _same_width(values, name, where)
    return np.concatenate([v.reshape(len(v), width) for v in values])


def _node_count(graph: Mapping[str, np.ndarray]) -> int:
    """A graph's node count as PyG's ``Data.num_nodes`` finds it: stated, else the rows of a per-node
    array, else one past its largest node id."""
    if "num_nodes" in graph:
        return int(graph["num_nodes"].reshape(-1)[0])
    if (rows := first_found(graph, NODE_ROWS)) is not None:
        return len(rows[1])
    edges = graph["edge_index"]
    return int(edges.max()) + 1 if edges.size else 0


# -- checking and writing -------------------------------------------------------------------------


def _check_structure(graphs: Graphs, where: str) -> None:
    """Node ids within each graph, node and edge counts that add up."""
    g = len(graphs.num_nodes)
    if (graphs.num_nodes <= 0).any():
        raise DatasetError(where, f"graph {int(np.flatnonzero(graphs.num_nodes <= 0)[0])} has no nodes: expected "
                                  "at least one node per graph")
    if graphs.num_edges.sum() != graphs.edge_index.shape[1] or len(graphs.num_edges) != g or len(graphs.y) != g:
        raise DatasetError(where, f"{g:,} graphs but {len(graphs.y):,} label rows and "
                                  f"{len(graphs.num_edges):,} edge counts: expected one per graph")
    edges = graphs.edge_index
    if edges.ndim != 2 or edges.shape[0] != 2 or edges.dtype.kind not in "iu":
        raise DatasetError(f"{where}: edge_index", f"expected [2, E] integer node ids, got {edges.dtype} of shape "
                                                   f"{list(edges.shape)}")
    owner, e = edge_owners(edges, graphs.num_nodes, graphs.num_edges)
    if e is not None:
        u, v = edges[:, e]
        raise DatasetError(f"{where}: edge_index", f"graph {int(owner[e])} has edge ({u}, {v}): expected node ids "
                                                   f"in [0, {int(graphs.num_nodes[owner[e]])}) (each graph's own)")


def _task(y: np.ndarray, metric: str | None, where: str) -> Labels:
    """The task ``y`` and ``metric`` make (module docstring)."""
    y = y.reshape(len(y), -1)
    if y.dtype.kind == "b":
        y = y.astype(np.int64)
    if y.dtype.kind not in "iuf":
        raise DatasetError(f"{where}: y", f"expected class ids or 0/1 labels, got {y.dtype}")
    known = ~np.isnan(y) if y.dtype.kind == "f" else np.ones(y.shape, bool)
    binary = bool(np.isin(y[known], (0, 1)).all())
    if binary and known.all() and y.shape[1] > 1 and (y.sum(axis=1) == 1).all() and \
            (metric in (None, "acc") or y.shape[1] == 2):  # one-hot rows: classes
        return _classes(y.argmax(axis=1), metric, where, "; one-hot y read as classes")
    if y.shape[1] == 1 and known.all():
        return _classes(y[:, 0], metric, where)
    if not binary:
        found = y[known][~np.isin(y[known], (0, 1))][0].item()
        what = ("multi-class labels cannot be missing" if y.shape[1] == 1 else
                f"[G, {y.shape[1]}] labels are {y.shape[1]} binary tasks: expected 0/1 (NaN unknown)")
        raise DatasetError(f"{where}: y", f"{what}, found {found!r}" + ("" if whole(np.array([found])).all() else
                                                                        " (regression is not a gnnkit graph task)"))
    if metric == "acc":
        raise DatasetError(f"{where}: metric", f"binary tasks with missing labels ({y.shape[1]} of them) are scored "
                                               "by rocauc or ap, not acc")
    values = np.where(known, y, np.nan).astype(np.float32)
    empty = np.flatnonzero(~known.any(axis=0))  # the evaluators score no such task
    note = f"; y column {first_few(empty)} has no labelled graph (that task is never scored)" if empty.size else ""
    return Labels(values, binary_task(y.shape[1], metric or "rocauc"), known.any(axis=1), note)


def _classes(y: np.ndarray, metric: str | None, where: str, note: str = "") -> Labels:
    """One class id per graph: multi-class by accuracy, or (``rocauc``/``ap``) two classes as one binary task."""
    if not whole(y).all():
        raise DatasetError(f"{where}: y", f"expected a class id 0, 1, ... per graph, found {y[~whole(y)][0].item()!r}:"
                                          " real-valued targets (regression) are not a gnnkit graph task")
    if (y < 0).any():
        raise DatasetError(f"{where}: y", f"expected classes 0, 1, ..., C-1 for every graph, found {int(y.min())}")
    classes = int(y.max()) + 1
    if classes < 2 or classes > len(y):
        raise DatasetError(f"{where}: y", f"class {classes - 1} among {len(y):,} graphs: expected at least two "
                                          "classes numbered 0, 1, ..., C-1")
    note += empty_class_note(y, classes, "graph")
    labelled = np.ones(len(y), bool)
    if metric in ("rocauc", "ap"):
        if classes != 2:
            raise DatasetError(f"{where}: metric", f"{metric} scores two classes (or [G, T] 0/1 tasks); y has "
                                                   f"{classes}")
        return Labels(y.astype(np.float32).reshape(-1, 1), binary_task(1, metric), labelled, note)
    return Labels(y.astype(np.int64).reshape(-1, 1), multiclass_task(classes), labelled, note)


def _split(labels: np.ndarray, task: dict[str, Any], labelled: np.ndarray, seed: int,
           where: str) -> dict[str, np.ndarray]:
    """OGB's 80/10/10 of the labelled graphs, seeded; each part scorable by the task's metric."""
    ids = np.flatnonzero(labelled)
    if len(ids) < MIN_GRAPHS:
        raise DatasetError(where, f"{len(ids)} labelled graphs: expected at least {MIN_GRAPHS} to hold 10% out for "
                                  "validation and 10% for testing")
    split = shuffled_split(ids, RANDOM_SPLIT, seed, at_least=1)
    if task["task type"] == "binary classification":
        for part, members in split.items():
            if not holds_both_classes(labels[members]):
                raise DatasetError(f"{where}: split", f"the {part} part holds one class only in every task: "
                                                      f"{task['eval metric']} needs both (another --seed)")
    return split


def _float_rows(values: np.ndarray | None, counts: np.ndarray, name: str, where: str) -> np.ndarray | None:
    """Features as finite float32 rows, ``counts[g]`` of them for graph g in turn (``None`` for none,
    or zero-width ones)."""
    if values is None:
        return None
    rows = int(counts.sum())
    if values.dtype.kind not in "biuf" or len(values) != rows:
        raise DatasetError(f"{where}: {name}", f"expected {rows:,} rows of numbers, got {values.dtype} of "
                                               f"shape {list(values.shape)}")
    with np.errstate(over="ignore"):  # beyond float32's range becomes inf, refused here
        floats = values.reshape(rows, -1).astype(np.float32)
    _check_finite(floats, counts, f"{name} (in float32)", where)
    return floats if floats.shape[1] else None


def _check_finite(floats: np.ndarray, counts: np.ndarray, name: str, where: str) -> None:
    """Every value finite (else one line naming the first graph with NaN/inf and the row within it)."""
    finite = np.isfinite(floats).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        ends = np.cumsum(counts)
        graph = int(np.searchsorted(ends, row, side="right"))
        raise DatasetError(f"{where}: graph {graph}: {name}", f"non-finite feature value in row "
                                                              f"{row - int(ends[graph] - counts[graph])}")


def graph_set_parts(graphs: Graphs, options: GraphSetImportOptions = GraphSetImportOptions(),
                    where: str = "graphs") -> dict[str, Any]:
    """:func:`~pipeline.graph_layout.write_graph_folder`'s arguments for a set of graphs.

    Returns:
        ``edge_index``, ``num_nodes``, ``num_edges``, ``labels``, ``split``, ``meta``, ``node_feat``
        and ``edge_feat``, with ``summary``: a line on what was read.

    Raises:
        DatasetError: A malformed set, in one line naming the array.
    """
    _check_structure(graphs, where)
    x = _float_rows(graphs.x, graphs.num_nodes, "x", where)
    edge_attr = _float_rows(graphs.edge_attr, graphs.num_edges, "edge_attr", where)
    task = _task(graphs.y, options.metric, where)
    labels, labelled = task.values, task.labelled
    split = _split(labels, task.task, labelled, options.seed, where)
    meta = {**task.task, "family": "graph", "add_inverse_edge": "False", "split": f"random{options.seed}",
            "additional node files": "None", "additional edge files": "None", "is hetero": "False", "version": 1}
    kind = (f"{task.task['num tasks']} binary tasks" if task.task["num tasks"] > 1 else
            f"{task.task['num classes']} classes")
    unlabelled = int((~labelled).sum())
    left = f", {unlabelled:,} unlabelled graphs left out" if unlabelled else ""
    widths = ", ".join(f"no {what} features" if v is None else f"{v.shape[1]} {what} feature"
                       + ("" if v.shape[1] == 1 else "s") for what, v in (("node", x), ("edge", edge_attr)))
    sizes = ", ".join(f"{p} {len(ids):,}" for p, ids in split.items())
    summary = (f"{len(graphs.num_nodes):,} graphs, {int(graphs.num_nodes.sum()):,} nodes, "
               f"{int(graphs.num_edges.sum()):,} edges, {widths}, {kind} ({task.task['eval metric']}){task.note}; "
               f"split random 80/10/10 of the labelled graphs (seed {options.seed}{left}): {sizes}")
    return {"edge_index": graphs.edge_index.astype(np.int64), "num_nodes": graphs.num_nodes,
            "num_edges": graphs.num_edges, "labels": labels, "split": split, "meta": meta, "node_feat": x,
            "edge_feat": edge_attr, "summary": summary}


def import_graph_set(source: Path | str | Any, folder: Path,
                     options: GraphSetImportOptions = GraphSetImportOptions()) -> Imported:
    """Write ``source`` (a ``.pt`` path, a PyG dataset or a sequence of graphs) as an OGB-layout
    folder for graph property prediction, atomically. ``Imported.num_nodes`` counts all graphs' nodes.

    Raises:
        DatasetError: A bad source (see :func:`read_graph_set`, :func:`graph_set_parts`) or an
            existing ``folder``; nothing is written then.
    """
    return import_graph(source, folder, read_graph_set, lambda graphs, where: graph_set_parts(graphs, options, where),
                        write_graph_folder)

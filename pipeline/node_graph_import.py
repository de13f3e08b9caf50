"""A graph of the user's own, given as arrays, written as an OGB-layout folder for node prediction.

A PyG user holds a :class:`torch_geometric.data.Data` (``x``, ``edge_index``, ``y`` and
``train_mask``/``val_mask``/``test_mask``); ``gnnkit import`` takes its arrays from a ``.pt`` or
``.npz`` file, and :func:`import_node_graph` from the ``Data`` itself (:mod:`pipeline.array_source`),
under PyG's names, OGB's or those of Platonov et al.'s heterophilous graphs (``node_features``,
``node_labels``, ``edges``, ``train_masks``, ...).

The folder is what ``gnnkit run RECIPE --data.dataset PATH`` reads (:func:`write_ogb_folder`):

* labels: integer classes (``-1`` unlabelled) are a multi-class task scored by accuracy, two classes
  a binary one scored by ROC-AUC as OGB and Platonov et al. score theirs (``metric`` picks); one-hot
  rows are classes; an ``[N, T]`` matrix of 0/1 (NaN unlabelled) is T binary tasks scored by ROC-AUC;
* split: the masks (one column of 2-D masks, as PyG's ``WikipediaNetwork`` keeps ten) or index
  arrays (``train_idx``/``valid_idx``/``test_idx``, as OGB's ``get_idx_split`` gives); without
  either, a seeded random 50/25/25 split of the labelled nodes, the proportions of Platonov et al.
  (ICLR 2023, https://arxiv.org/abs/2302.11640). The three parts must be disjoint, non-empty and
  labelled, and under ROC-AUC hold both classes, so that every run on the folder can score them;
* features: finite in float32 (what training reads);
* edges as stored (both directions of an undirected PyG graph are there already; the recipes
  symmetrise what is not); edge features (:data:`pipeline.graph_import.UNKEPT_EDGE_DATA`) are not
  kept, and the summary line says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.array_source import EDGE_NAMES
from pipeline.errors import DatasetError
from pipeline.graph import check_edges, check_features, check_split_labels, check_splits, whole
from pipeline.graph_import import (
    UNKEPT_EDGE_DATA,
    Imported,
    import_graph,
    named_source,
    shuffled_split,
    unkept_note,
)
from pipeline.homophily import of_edge_list
from pipeline.ogb_layout import EVAL_METRICS, SPLITS, write_ogb_folder
from pipeline.safe_pt import as_ids

#: Field -> the names it is read under, first found wins (PyG's, OGB's, Platonov et al.'s).
ALIASES: dict[str, tuple[str, ...]] = {
    "edge_index": EDGE_NAMES,
    "x": ("x", "node_features", "node_feat"),
    "y": ("y", "node_labels", "node_label", "labels"),
    "num_nodes": ("num_nodes",),
    "train": ("train_mask", "train_masks", "train_idx"),
    "valid": ("val_mask", "val_masks", "valid_mask", "valid_idx", "val_idx"),
    "test": ("test_mask", "test_masks", "test_idx"),
}

#: Shares of the labelled nodes in a split made here (Platonov et al.'s 50/25/25).
RANDOM_SPLIT = {"train": 0.5, "valid": 0.25, "test": 0.25}

#: The metrics a node task written here is scored by.
METRICS = EVAL_METRICS

#: Edge arrays stored as ``[E, 2]`` rows (Platonov et al.'s); the others are ``[2, E]``, as PyG's.
ROW_EDGES = ("edges",)

#: Every name :data:`ALIASES` reads.
NAMES = tuple(name for names in ALIASES.values() for name in names)


@dataclass(frozen=True)
class ImportOptions:
    """How :func:`node_graph_parts` reads a source's arrays.

    Attributes:
        split: Which split of 2-D masks (a column of PyG's ``[N, K]``, a row of ``[K, N]``).
        metric: ``acc`` or ``rocauc``; ``None``: ROC-AUC for two classes or several binary tasks,
            accuracy otherwise. ``acc`` keeps two classes a two-class multi-class task.
        seed: Seed of the random split made when the source has none.
        add_inverse_edge: The edges are stored once per pair and OGB's reader adds their reverses
            (``meta.json``'s ``add_inverse_edge``; written as CSV, which OGB's reader takes so); off:
            the edges as stored are the graph, written as ``data.npz``.
    """

    split: int = 0
    metric: str | None = None
    seed: int = 0
    add_inverse_edge: bool = False


def first_found(arrays: Mapping[str, np.ndarray], names: tuple[str, ...]) -> tuple[str, np.ndarray] | None:
    """The first of ``names`` that ``arrays`` has, with its array."""
    return next(((name, arrays[name]) for name in names if name in arrays), None)


def _field(arrays: Mapping[str, np.ndarray], field: str) -> tuple[str, np.ndarray] | None:
    """The first of ``field``'s names that ``arrays`` has, with its array."""
    return first_found(arrays, ALIASES[field])


def stated_count(found: tuple[str, np.ndarray], where: str) -> int:
    """A node count given as an array (``num_nodes``): one non-negative integer."""
    name, value = found
    if value.size != 1 or value.dtype.kind not in "iu" or int(value.reshape(-1)[0]) < 0:
        raise DatasetError(f"{where}: {name}", f"expected a node count, got {value.dtype} of shape "
                                               f"{list(value.shape)}" + (f": {int(value.reshape(-1)[0])}"
                                                                         if value.size == 1 else ""))
    return int(value.reshape(-1)[0])


def edge_array(found: tuple[str, np.ndarray] | None, where: str) -> np.ndarray:
    """``[2, E]`` int64 edges from ``[2, E]`` or ``[E, 2]`` node ids; the array's name decides a
    ``2 x 2`` one (:data:`ROW_EDGES`)."""
    if found is None:
        raise DatasetError(where, f"no edges: expected an array named one of {list(ALIASES['edge_index'])}")
    name, edges = found
    if edges.ndim != 2 or 2 not in edges.shape or edges.dtype.kind not in "iu":
        raise DatasetError(f"{where}: {name}", f"expected [2, E] or [E, 2] integer node ids, got "
                                               f"{edges.dtype} of shape {list(edges.shape)}")
    if edges.dtype == np.uint64 and edges.size and int(edges.max()) > np.iinfo(np.int64).max:
        raise DatasetError(f"{where}: {name}", f"node id {int(edges.max())} beyond int64: expected ids 0..N-1")
    rows = edges.shape[1] == 2 and (name in ROW_EDGES or edges.shape[0] != 2)
    return (edges.T if rows else edges).astype(np.int64)


def _num_nodes(arrays: Mapping[str, np.ndarray], edges: np.ndarray, where: str) -> int:
    """N: stated (``num_nodes``), else the rows of the features, else of the labels."""
    if (found := _field(arrays, "num_nodes")) is not None:
        name, n = found[0], stated_count(found, where)
    elif (found := _field(arrays, "x") or _field(arrays, "y")) is not None:
        name, value = found
        if value.ndim == 0:
            raise DatasetError(f"{where}: {name}", f"expected a row per node, got {value.dtype} of shape []")
        n = len(value)
    else:
        raise DatasetError(where, "no labels: expected an array named one of " + str(list(ALIASES["y"])))
    check_edges(edges, n, f"{where}: {_field(arrays, 'edge_index')[0]} (with {n:,} nodes from {name})")
    return n


def row_array(found: tuple[str, np.ndarray], n: int, where: str) -> np.ndarray:
    """An array with one row per node, checked."""
    name, value = found
    if value.ndim == 0 or len(value) != n:
        raise DatasetError(f"{where}: {name}", f"expected one row per node ({n:,}), got shape {list(value.shape)}")
    return value


def binary_task(num_tasks: int, metric: str = "rocauc") -> dict[str, Any]:
    """The meta keys of ``num_tasks`` binary tasks scored by ``metric`` (ROC-AUC, or AP for graphs)."""
    return {"num tasks": num_tasks, "num classes": 2, "task type": "binary classification", "eval metric": metric}


def multiclass_task(classes: int) -> dict[str, Any]:
    """The meta keys of one multi-class task of ``classes`` classes, scored by accuracy."""
    return {"num tasks": 1, "num classes": classes, "task type": "multiclass classification", "eval metric": "acc"}


def first_few(values: np.ndarray, few: int = 5) -> str:
    """``"3, 5, 8"``: the first ``few`` of ``values``, with ``", ..."`` after them when there are more."""
    return ", ".join(map(str, values[:few])) + (", ..." if values.size > few else "")


def empty_class_note(y: np.ndarray, classes: int, what: str) -> str:
    """``"; no node of class 3, 5"`` for the classes below ``classes`` no ``what`` has, or ``""``."""
    empty = np.flatnonzero(np.bincount(y.astype(np.int64), minlength=classes) == 0)
    return f"; no {what} of class {first_few(empty)}" if empty.size else ""


def holds_both_classes(values: np.ndarray) -> bool:
    """Whether some task (column) of 0/1 labels (NaN unknown) holds both classes: ROC-AUC can score it."""
    return any(np.isin([0, 1], column[~np.isnan(column)]).all() for column in values.T)


@dataclass(frozen=True)
class Labels:
    """Labels as written, the task's meta keys, which nodes (or graphs) are labelled, and a note for
    the summary."""

    values: np.ndarray
    task: dict[str, Any]
    labelled: np.ndarray
    note: str = ""


def _labels(y: np.ndarray, metric: str | None, where: str) -> Labels:
    """The task ``y`` and ``metric`` make (see the module docstring)."""
    if metric is not None and metric not in METRICS:
        raise DatasetError(f"{where}: metric", f"expected one of {list(METRICS)}, got {metric!r}")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.dtype.kind == "b":
        y = y.astype(np.int64)
    if y.ndim == 2 and y.dtype.kind in "iuf":
        return _matrix_labels(y, metric, where)
    if y.ndim != 1 or y.dtype.kind not in "iuf":
        raise DatasetError(f"{where}: y", f"expected integer classes per node (-1 unlabelled), got {y.dtype} of "
                                          f"shape {list(y.shape)}")
    if y.dtype.kind == "f" and not np.all(np.isnan(y) | whole(y)):
        raise DatasetError(f"{where}: y", "expected integer classes per node (-1 or NaN unlabelled), got fractions; "
                                          "regression is not a gnnkit node task")
    return _class_labels(y, metric, where)


def _class_labels(y: np.ndarray, metric: str | None, where: str, note: str = "", width: int = 0) -> Labels:
    """Integer classes (``-1``/NaN unlabelled), at least ``width`` of them (one-hot columns):
    multi-class by accuracy, or binary by ROC-AUC."""
    labelled = ~np.isnan(y) & (y >= 0) if y.dtype.kind == "f" else y >= 0
    if (y[~labelled] < -1).any():
        raise DatasetError(f"{where}: y", f"expected classes 0, 1, ... and -1 for unlabelled nodes, found "
                                          f"{int(np.nanmin(y))}")
    classes = max(int(y[labelled].max()) + 1 if labelled.any() else 0, width)
    if classes < 2:
        raise DatasetError(f"{where}: y", f"expected at least two classes among the labelled nodes, got {classes}")
    if classes > labelled.sum():
        raise DatasetError(f"{where}: y", f"class {classes - 1} among {int(labelled.sum()):,} labelled nodes: "
                                          "expected classes numbered 0, 1, ..., C-1")
    note += empty_class_note(y[labelled], classes, "node")
    metric = metric or ("rocauc" if classes == 2 else "acc")
    if metric == "rocauc" and classes != 2:
        raise DatasetError(f"{where}: metric", f"rocauc scores two classes (or [N, T] binary tasks); y has {classes}")
    if metric == "rocauc":
        return Labels(np.where(labelled, y, np.nan).astype(np.float32).reshape(-1, 1), binary_task(1), labelled,
                       note)
    return Labels(np.where(labelled, y, -1).astype(np.int64), multiclass_task(classes), labelled, note)


def _matrix_labels(y: np.ndarray, metric: str | None, where: str) -> Labels:
    """An ``[N, T]`` matrix: one-hot rows are classes (unless ``metric`` is ``rocauc``), 0/1 with
    NaN unknown T binary tasks by ROC-AUC."""
    known = ~np.isnan(y) if y.dtype.kind == "f" else np.ones(y.shape, bool)
    if not np.isin(y[known], (0, 1)).all():
        raise DatasetError(f"{where}: y", f"an [N, {y.shape[1]}] label matrix is one-hot classes or {y.shape[1]} "
                                          "binary tasks: expected values 0, 1 (NaN unknown)")
    if known.all() and (y.sum(axis=1) == 1).all() and (metric != "rocauc" or y.shape[1] == 2):
        note = "; one-hot y read as classes" + (f" (--metric rocauc: {y.shape[1]} binary tasks)" if y.shape[1] > 2
                                                 else "")
        return _class_labels(y.argmax(axis=1), metric, where, note, width=y.shape[1])
    if metric == "acc":
        raise DatasetError(f"{where}: metric", f"an [N, {y.shape[1]}] label matrix that is not one-hot is "
                                               f"{y.shape[1]} binary tasks, scored by rocauc, not acc")
    return Labels(np.where(known, y, np.nan).astype(np.float32), binary_task(y.shape[1]), known.any(axis=1))


def feature_array(found: tuple[str, np.ndarray], n: int, where: str) -> np.ndarray | None:
    """``[N, F]`` float32 features, finite (``None`` for ``F = 0``: no features)."""
    name, x = found
    if x.dtype.kind not in "biuf":
        raise DatasetError(f"{where}: {name}", f"expected real numbers, got {x.dtype}")
    with np.errstate(over="ignore"):  # beyond float32's range becomes inf, refused below
        x = row_array(found, n, where).reshape(n, -1).astype(np.float32)
    check_features(x, n, f"{where}: {name} (in float32)")
    return x if x.shape[1] else None


def _one_split(name: str, value: np.ndarray, n: int, column: int, where: str) -> tuple[np.ndarray, int]:
    """The node ids of one split array (a mask, a column or row of 2-D masks, or ids), with how many
    splits the array holds."""
    if name.endswith("_idx"):  # ids, checked with the other parts by check_splits
        return as_ids(value.reshape(-1), f"{where}: {name}", name), 1
    if value.ndim == 2 and n in value.shape:
        masks = value if value.shape[0] == n else value.T  # [N, K]: PyG's; [K, N]: Platonov et al.'s
        if not 0 <= column < masks.shape[1]:
            raise DatasetError(f"{where}: {name}", f"expected a split in 0..{masks.shape[1] - 1}, got {column}")
        return _mask_ids(name, masks[:, column], where), masks.shape[1]
    if value.ndim == 1 and len(value) == n:
        return _mask_ids(name, value, where), 1
    raise DatasetError(f"{where}: {name}", f"expected a mask of {n:,} nodes ([N] or [N, K]), got shape "
                                           f"{list(value.shape)}")


def _mask_ids(name: str, mask: np.ndarray, where: str) -> np.ndarray:
    """The node ids a boolean (or 0/1) mask selects."""
    if mask.dtype.kind != "b" and not np.isin(mask, (0, 1)).all():
        raise DatasetError(f"{where}: {name}", "expected a mask of booleans (or 0/1)")
    return np.flatnonzero(mask.astype(bool))


def _random_split(labelled: np.ndarray, options: ImportOptions, where: str) -> dict[str, np.ndarray]:
    """Platonov et al.'s 50/25/25 of the labelled nodes, seeded."""
    if options.split != 0:
        raise DatasetError(f"{where}: split", f"split {options.split} asked for, but there are no masks (a random "
                                              "split is made; --seed picks it)")
    return shuffled_split(np.flatnonzero(labelled), RANDOM_SPLIT, options.seed)


def _given_split(arrays: Mapping[str, np.ndarray], n: int, options: ImportOptions,
                 where: str) -> tuple[dict[str, np.ndarray], dict[str, str], int]:
    """The split the arrays give, the name each part came from, and how many splits they hold."""
    names = {part: [name for name in ALIASES[part] if name in arrays] for part in SPLITS}
    twice = next((found for found in names.values() if len(found) > 1), None)
    if twice:
        raise DatasetError(where, f"has both {twice[0]} and {twice[1]}: expected one of them")
    missing = [ALIASES[p][0] for p in SPLITS if not names[p]]
    if missing:
        given = [found[0] for found in names.values() if found]
        raise DatasetError(where, f"has {given} but not {missing}: expected all three splits or none (a random one "
                                  "is made)")
    split, count = {}, 1
    for part in SPLITS:
        split[part], held = _one_split(names[part][0], arrays[names[part][0]], n, options.split, where)
        count = max(count, held)
    if count == 1 and options.split != 0:
        raise DatasetError(f"{where}: split", f"split {options.split} asked for, but the masks hold one split")
    return split, {part: found[0] for part, found in names.items()}, count


def _check_split(split: dict[str, np.ndarray], names: dict[str, str], labels: Labels, made: bool,
                 where: str) -> None:
    """Every part non-empty, within the graph, disjoint, labelled, and scorable by its metric."""
    for part, ids in split.items():
        if not len(ids):
            raise DatasetError(f"{where}: {names[part]}", "selects no node: expected some")
    check_splits(split, len(labels.labelled), {part: f"{where}: {name}" for part, name in names.items()})
    check_split_labels(labels.values, split, where)
    if labels.task["eval metric"] != "rocauc":
        return
    for part, ids in split.items():
        if not holds_both_classes(labels.values[ids]):
            fix = ("another --seed" if made else
                   "--metric acc for accuracy" if labels.task["num tasks"] == 1 else "another split")
            raise DatasetError(f"{where}: {names[part]}", f"holds one class only in every task: ROC-AUC needs both "
                                                          f"({fix})")


def node_graph_parts(arrays: Mapping[str, np.ndarray], options: ImportOptions = ImportOptions(),
                     where: str = "graph") -> dict[str, Any]:
    """:func:`write_ogb_folder`'s arguments for a node-prediction graph given as named arrays.

    Args:
        arrays: Arrays under the names of :data:`ALIASES` (others are left out).
        options: Split, metric and seed.
        where: The source's name, for errors.

    Returns:
        ``edge_index``, ``num_nodes``, ``labels``, ``split``, ``meta``, ``node_feat`` and ``binary``,
        with ``summary``: a line on what was read, and ``homophily``: the adjusted homophily of the
        training labels (:func:`pipeline.homophily.of_edge_list`), for the recipe to suggest.

    Raises:
        DatasetError: A missing or malformed array, in one line naming it.
    """
    edges = edge_array(_field(arrays, "edge_index"), where)
    n = _num_nodes(arrays, edges, where)
    if (found_y := _field(arrays, "y")) is None:
        raise DatasetError(where, "no labels: expected an array named one of " + str(list(ALIASES["y"])))
    labels = _labels(row_array(found_y, n, where), options.metric, where)
    x = feature_array(found_x, n, where) if (found_x := _field(arrays, "x")) is not None else None
    if given := any(_field(arrays, part) for part in SPLITS):
        split, names, count = _given_split(arrays, n, options, where)
        split_name = f"masks{options.split}" if count > 1 else "given"
        source = "/".join(names.values()) + (f" (split {options.split} of {count})" if count > 1 else "")
    else:
        split, split_name = _random_split(labels.labelled, options, where), f"random{options.seed}"
        names = {part: f"random split (seed {options.seed}) {part}" for part in SPLITS}
        source = f"random 50/25/25 of the labelled nodes (seed {options.seed})"
    _check_split(split, names, labels, made=not given, where=where)
    task = labels.task
    meta = {**task, "add_inverse_edge": str(options.add_inverse_edge), "split": split_name,
            "additional node files": "None", "additional edge files": "None", "is hetero": "False", "version": 1}
    kind = (f"{task['num tasks']} binary tasks" if task["num tasks"] > 1 else f"{task['num classes']} classes")
    features = f"{x.shape[1]:,} features" if x is not None else "no features"
    sizes = ", ".join(f"{p} {len(ids):,}" for p, ids in split.items())
    summary = (f"{n:,} nodes, {edges.shape[1]:,} edges, {features}, {kind} ({task['eval metric']}){labels.note}; "
               f"split {source}: {sizes}{unkept_note(arrays, 'node')}")
    homophily = of_edge_list(edges, labels.values, split["train"], undirected=options.add_inverse_edge)
    return {"edge_index": edges, "num_nodes": n, "labels": labels.values, "split": split, "meta": meta,
            "homophily": homophily,
            "node_feat": x, "binary": not options.add_inverse_edge,  # OGB's binary reader adds no reverses
            "summary": summary}


def import_node_graph(source: Path | str | Any, folder: Path, options: ImportOptions = ImportOptions()) -> Imported:
    """Write ``source`` (a ``.pt``/``.npz`` path, a PyG ``Data`` or a mapping of arrays) as an
    OGB-layout folder for node prediction, atomically.

    Raises:
        DatasetError: A bad source (see :func:`pipeline.array_source.read_arrays`,
            :func:`node_graph_parts`) or an existing ``folder``; nothing is written then.
    """
    return import_graph(source, folder, lambda graph: named_source(graph, (*NAMES, *UNKEPT_EDGE_DATA)),
                        lambda arrays, where: node_graph_parts(arrays, options, where),
                        write_ogb_folder)

"""A graph of the user's own, given as arrays, written as an OGB-layout folder for node prediction.

A PyG user holds a :class:`torch_geometric.data.Data` (``x``, ``edge_index``, ``y`` and
``train_mask``/``val_mask``/``test_mask``); ``gnnkit import`` takes its arrays from

* a ``.pt`` file: ``torch.save(data.to_dict(), path)``, or the ``processed/data.pt`` of a one-graph
  PyG ``InMemoryDataset`` (both read with ``torch.load(weights_only=True)``: a pickled ``Data``
  object is refused, never unpickled);
* an ``.npz`` file of plain arrays (``numpy.load(allow_pickle=False)``), under PyG's names or those
  of Platonov et al.'s heterophilous graphs (``node_features``, ``node_labels``, ``edges``,
  ``train_masks``, ...);
* in Python, the ``Data`` itself or any mapping of names to tensors or arrays
  (:func:`import_node_graph`).

The folder is what ``gnnkit run RECIPE --data.dataset PATH`` reads (:func:`write_ogb_folder`):

* labels: integer classes (``-1`` unlabelled) are a multi-class task scored by accuracy, two classes
  a binary one scored by ROC-AUC as OGB and Platonov et al. score theirs (``metric`` picks), an
  ``[N, T]`` matrix of 0/1 (NaN unlabelled) T binary tasks scored by ROC-AUC;
* split: the masks (one column of 2-D masks, as PyG's ``WikipediaNetwork`` keeps ten) or index
  arrays (``train_idx``/``valid_idx``/``test_idx``, as OGB's ``get_idx_split`` gives); without
  either, a seeded random 50/25/25 split of the labelled nodes, the proportions of Platonov et al.
  (ICLR 2023, https://arxiv.org/abs/2302.11640);
* edges as stored (both directions of an undirected PyG graph are there already; the recipes
  symmetrise what is not).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import DatasetError
from pipeline.graph import whole
from pipeline.ogb_layout import SPLITS, write_ogb_folder
from pipeline.safe_pt import as_array, load_pt

#: Field -> the names it is read under, first found wins (PyG's, OGB's, Platonov et al.'s).
ALIASES: dict[str, tuple[str, ...]] = {
    "edge_index": ("edge_index", "edges"),
    "x": ("x", "node_features", "node_feat"),
    "y": ("y", "node_labels", "node_label", "labels"),
    "num_nodes": ("num_nodes",),
    "train": ("train_mask", "train_masks", "train_idx"),
    "valid": ("val_mask", "val_masks", "valid_mask", "valid_idx", "val_idx"),
    "test": ("test_mask", "test_masks", "test_idx"),
}

#: Shares of the labelled nodes in a split made here (Platonov et al.'s 50/25/25).
RANDOM_SPLIT = {"train": 0.5, "valid": 0.25, "test": 0.25}

METRICS = ("acc", "rocauc")


@dataclass(frozen=True)
class ImportOptions:
    """How :func:`node_graph_parts` reads a source's arrays.

    Args:
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


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """A ``.pt`` or ``.npz`` file's arrays by name.

    Raises:
        DatasetError: A missing or unreadable file, another suffix, a pickled object, a file that
            holds several graphs or a heterogeneous one.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(path, "no such file")
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as data:
                return {name: data[name] for name in data.files}
        except (OSError, ValueError, EOFError) as err:  # empty, cut short, not an npz, or arrays of objects
            raise DatasetError(path, f"not a readable npz file of plain arrays ({err})") from None
    if path.suffix in (".pt", ".pth"):
        return _arrays_of(_read_pt(path), path)
    raise DatasetError(path, "expected a .pt file (torch.save(data.to_dict(), path)) or an .npz file of arrays")


def _read_pt(path: Path) -> Any:
    """A torch file's content, loaded weights-only (:func:`load_pt`); a PyG processed file's dict."""
    import torch_geometric.data  # noqa: F401  (allows PyG's Data class, named in its processed files)

    try:
        content = load_pt(path)
    except DatasetError as err:
        raise DatasetError(path, f"{err.problem}: a pickled Data? save the graph with "
                                 f"torch.save(data.to_dict(), path)") from None
    if isinstance(content, (tuple, list)) and content and isinstance(content[0], Mapping):  # InMemoryDataset.save
        slices = content[1] if len(content) > 2 else None
        if isinstance(slices, Mapping) and any(len(s) > 2 for s in slices.values()):
            graphs = max(len(s) for s in slices.values()) - 1
            raise DatasetError(path, f"a dataset of {graphs} graphs; gnnkit import takes one graph for node "
                                     f"prediction (graph datasets: recipes/gin_molhiv.yaml)")
        content = content[0]
    return content


def _arrays_of(source: Any, where: str | Path) -> dict[str, np.ndarray]:
    """``source``'s tensors and arrays (a PyG ``Data``, a mapping) as numpy arrays by name."""
    if hasattr(source, "to_dict") and not isinstance(source, Mapping):
        source = source.to_dict()
    if not isinstance(source, Mapping):
        raise DatasetError(where, f"expected a dict of tensors (torch.save(data.to_dict(), path)), "
                                  f"got {type(source).__name__}")
    nested = sorted(str(k) for k, v in source.items() if isinstance(v, Mapping))
    if nested:
        raise DatasetError(where, f"a heterogeneous graph (types {nested}); convert it with "
                                  f"HeteroData.to_homogeneous() first")
    arrays = {}
    for name, value in source.items():
        if hasattr(value, "detach"):  # a torch tensor, maybe on a GPU or needing grad
            value = value.detach().cpu()
        if hasattr(value, "numpy") or isinstance(value, (np.ndarray, np.generic, int, float)):
            arrays[str(name)] = as_array(value)
    return arrays


def _field(arrays: Mapping[str, np.ndarray], field: str) -> tuple[str, np.ndarray] | None:
    """The first of ``field``'s names that ``arrays`` has, with its array."""
    return next(((name, arrays[name]) for name in ALIASES[field] if name in arrays), None)


def _edges(found: tuple[str, np.ndarray] | None, where: str) -> np.ndarray:
    """``[2, E]`` int64 edges from ``[2, E]`` or ``[E, 2]`` node ids."""
    if found is None:
        raise DatasetError(where, f"no edges: expected an array named one of {list(ALIASES['edge_index'])}")
    name, edges = found
    if edges.ndim != 2 or 2 not in edges.shape or edges.dtype.kind not in "iu":
        raise DatasetError(f"{where}: {name}", f"expected [2, E] or [E, 2] integer node ids, got "
                                               f"{edges.dtype} of shape {list(edges.shape)}")
    return (edges if edges.shape[0] == 2 else edges.T).astype(np.int64)


def _num_nodes(arrays: Mapping[str, np.ndarray], edges: np.ndarray, where: str) -> int:
    """N: stated (``num_nodes``), else the rows of the features, else of the labels."""
    for field in ("num_nodes", "x", "y"):
        if (found := _field(arrays, field)) is not None:
            name, value = found
            count = field == "num_nodes"
            if (value.size != 1 or value.dtype.kind not in "iu") if count else value.ndim == 0:
                raise DatasetError(f"{where}: {name}", f"expected {'a node count' if count else 'a row per node'}, "
                                                       f"got {value.dtype} of shape {list(value.shape)}")
            n = int(value.reshape(-1)[0]) if count else len(value)
            break
    else:
        raise DatasetError(where, "no labels: expected an array named one of " + str(list(ALIASES["y"])))
    if edges.size and not 0 <= int(edges.min()) <= int(edges.max()) < n:
        raise DatasetError(f"{where}: {_field(arrays, 'edge_index')[0]}",
                           f"node ids must lie in [0, {n}) ({name} gives {n:,} nodes), found "
                           f"{int(edges.min())}..{int(edges.max())}")
    return n


def _rows(found: tuple[str, np.ndarray], n: int, where: str) -> np.ndarray:
    """An array with one row per node, checked."""
    name, value = found
    if value.ndim == 0 or len(value) != n:
        raise DatasetError(f"{where}: {name}", f"expected one row per node ({n:,}), got shape {list(value.shape)}")
    return value


def _labels(y: np.ndarray, metric: str | None, where: str) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
    """Labels as written, the task's meta keys, and which nodes are labelled."""
    if metric is not None and metric not in METRICS:
        raise DatasetError(f"{where}: metric", f"expected one of {list(METRICS)}, got {metric!r}")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.dtype.kind == "b":
        y = y.astype(np.int64)
    if y.ndim == 2:  # several binary tasks, NaN where unknown
        values = y[~np.isnan(y)] if y.dtype.kind == "f" else y
        if not np.isin(values, (0, 1)).all() or metric == "acc":
            raise DatasetError(f"{where}: y", f"an [N, {y.shape[1]}] label matrix is read as {y.shape[1]} binary "
                                              "tasks scored by rocauc: expected values 0, 1 (NaN unknown)")
        meta = {"num tasks": y.shape[1], "num classes": 2, "task type": "binary classification",
                "eval metric": "rocauc"}
        return y.astype(np.float32), meta, ~np.isnan(y.astype(np.float32)).all(axis=1)
    if y.ndim != 1 or y.dtype.kind not in "iuf" or (y.dtype.kind == "f" and not np.all(np.isnan(y) | whole(y))):
        raise DatasetError(f"{where}: y", f"expected integer classes per node (-1 unlabelled), got {y.dtype} of "
                                          f"shape {list(y.shape)}; regression is not a gnnkit node task")
    labelled = (y >= 0) if y.dtype.kind != "f" else (~np.isnan(y) & (y >= 0))
    classes = int(y[labelled].max()) + 1 if labelled.any() else 0
    if classes < 2:
        raise DatasetError(f"{where}: y", f"expected at least two classes among the labelled nodes, got {classes}")
    if metric is None:
        metric = "rocauc" if classes == 2 else "acc"
    if metric == "rocauc" and classes != 2:
        raise DatasetError(f"{where}: metric", f"rocauc scores two classes (or [N, T] binary tasks); y has {classes}")
    if metric == "rocauc":
        meta = {"num tasks": 1, "num classes": 2, "task type": "binary classification", "eval metric": "rocauc"}
        return np.where(labelled, y, np.nan).astype(np.float32).reshape(-1, 1), meta, labelled
    meta = {"num tasks": 1, "num classes": classes, "task type": "multiclass classification", "eval metric": "acc"}
    return np.where(labelled, y, -1).astype(np.int64), meta, labelled


def _one_split(name: str, value: np.ndarray, n: int, column: int, where: str) -> tuple[np.ndarray, int]:
    """The node ids of one split array (a mask, a column or row of 2-D masks, or ids), with how many
    splits the array holds."""
    if name.endswith("_idx"):
        ids = value.reshape(-1)
        if ids.dtype.kind not in "iu" or (ids.size and not 0 <= int(ids.min()) <= int(ids.max()) < n):
            raise DatasetError(f"{where}: {name}", f"expected node ids in [0, {n:,})")
        return ids.astype(np.int64), 1
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
    if mask.dtype.kind != "b" and not np.isin(mask, (0, 1)).all():
        raise DatasetError(f"{where}: {name}", "expected a mask of booleans (or 0/1)")
    return np.flatnonzero(mask.astype(bool))


def _split(arrays: Mapping[str, np.ndarray], n: int, labelled: np.ndarray, options: ImportOptions,
           where: str) -> tuple[dict[str, np.ndarray], str, str]:
    """The split's node ids, its name in ``split/``, and where it came from (for the summary)."""
    found = {part: _field(arrays, part) for part in SPLITS}
    given = [part for part in SPLITS if found[part] is not None]
    if not given:
        order = np.random.default_rng(options.seed).permutation(np.flatnonzero(labelled))
        ends = np.cumsum([round(RANDOM_SPLIT[p] * len(order)) for p in SPLITS[:-1]])
        split = dict(zip(SPLITS, np.split(order, ends)))
        return ({p: np.sort(ids) for p, ids in split.items()}, f"random{options.seed}",
                f"random 50/25/25 of the labelled nodes (seed {options.seed})")
    if len(given) < len(SPLITS):
        missing = [ALIASES[p][0] for p in SPLITS if found[p] is None]
        raise DatasetError(where, f"has {[found[p][0] for p in given]} but not {missing}: expected all three "
                                  "splits or none (a random one is made)")
    split, count = {}, 1
    for part in SPLITS:
        split[part], held = _one_split(*found[part], n, options.split, where)
        count = max(count, held)
    if not len(split["train"]):
        raise DatasetError(f"{where}: {found['train'][0]}", "selects no node: expected training nodes")
    for part, ids in split.items():
        if not labelled[ids].all():
            raise DatasetError(f"{where}: {found[part][0]}", f"selects {int((~labelled[ids]).sum()):,} unlabelled "
                                                             f"nodes: expected labelled ones")
    source = "/".join(found[p][0] for p in SPLITS) + (f" (split {options.split} of {count})" if count > 1 else "")
    return split, (f"masks{options.split}" if count > 1 else "given"), source


def node_graph_parts(arrays: Mapping[str, np.ndarray], options: ImportOptions = ImportOptions(),
                     where: str = "graph") -> dict[str, Any]:
    """:func:`write_ogb_folder`'s arguments for a node-prediction graph given as named arrays.

    Args:
        arrays: Arrays under the names of :data:`ALIASES` (others are left out).
        options: Split, metric and seed.
        where: The source's name, for errors.

    Returns:
        ``edge_index``, ``num_nodes``, ``labels``, ``split``, ``meta``, ``node_feat`` and ``binary``,
        with ``summary``: a line on what was read.

    Raises:
        DatasetError: A missing or malformed array, in one line naming it.
    """
    edges = _edges(_field(arrays, "edge_index"), where)
    n = _num_nodes(arrays, edges, where)
    if (found_y := _field(arrays, "y")) is None:
        raise DatasetError(where, "no labels: expected an array named one of " + str(list(ALIASES["y"])))
    labels, task, labelled = _labels(_rows(found_y, n, where), options.metric, where)
    x = None
    if (found_x := _field(arrays, "x")) is not None:
        x = _rows(found_x, n, where).reshape(n, -1).astype(np.float32)
    split, split_name, split_source = _split(arrays, n, labelled, options, where)
    meta = {**task, "add_inverse_edge": str(options.add_inverse_edge), "split": split_name,
            "additional node files": "None", "additional edge files": "None", "is hetero": "False", "version": 1}
    kind = (f"{task['num tasks']} binary tasks" if task["num tasks"] > 1 else f"{task['num classes']} classes")
    features = f"{x.shape[1]:,} features" if x is not None else "no features"
    sizes = ", ".join(f"{p} {len(ids):,}" for p, ids in split.items())
    summary = (f"{n:,} nodes, {edges.shape[1]:,} edges, {features}, {kind} ({task['eval metric']}); "
               f"split {split_source}: {sizes}")
    return {"edge_index": edges, "num_nodes": n, "labels": labels, "split": split, "meta": meta, "node_feat": x,
            "binary": not options.add_inverse_edge, "summary": summary}  # OGB's binary reader adds no reverses


@dataclass(frozen=True)
class Imported:
    """What :func:`import_node_graph` wrote.

    Args:
        folder: The dataset folder.
        summary: A line on what was read (nodes, edges, features, task, split).
        num_nodes: N.
    """

    folder: Path
    summary: str
    num_nodes: int


def import_node_graph(source: Path | str | Any, folder: Path, options: ImportOptions = ImportOptions()) -> Imported:
    """Write ``source`` (a ``.pt``/``.npz`` path, a PyG ``Data`` or a mapping of arrays) as an
    OGB-layout folder, atomically.

    Raises:
        DatasetError: A bad source (see :func:`read_arrays`, :func:`node_graph_parts`) or an existing
            ``folder``; nothing is written then.
    """
    folder = Path(folder)
    if isinstance(source, (str, Path)):
        where, arrays = str(source), read_arrays(Path(source))
    else:
        where, arrays = type(source).__name__, _arrays_of(source, type(source).__name__)
    parts = node_graph_parts(arrays, options, where)
    if folder.exists():
        raise DatasetError(folder, "exists: expected a new folder to write the dataset into")
    summary = parts.pop("summary")
    return Imported(write_ogb_folder(folder, **parts), summary, parts["num_nodes"])

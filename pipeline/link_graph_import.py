"""A graph of the user's own, given as arrays, written as an OGB-layout folder for link prediction.

``gnnkit import --task link`` reads the arrays as :mod:`pipeline.node_graph_import` does (a ``.pt``
of ``data.to_dict()``, an ``.npz``, a PyG ``Data``; :mod:`pipeline.array_source`) and writes what
:mod:`pipeline.link_layout` reads, as OGB lays out ``ogbl-collab``:

* edges: ``edge_index`` (``[2, E]``, or ``[E, 2]`` named ``edges``); self loops are left out (a node
  linked to itself is nothing to predict). A graph that holds every edge in both directions, as PyG
  stores an undirected one, is undirected: each pair is one positive, stored once, and OGB's reader
  adds the reverse (``add_inverse_edge``). Any other graph is directed: its edges as given (repeats
  dropped), the two directions of a pair always in the same part of the split, so that no part
  leaks into another once the recipes symmetrise the training graph;
* split: the positives PyG's ``train_test_split_edges`` leaves (``train_pos_edge_index``,
  ``val_pos_edge_index``, ``test_pos_edge_index``, with ``val_neg_edge_index`` and
  ``test_neg_edge_index``), or, without them, a seeded random 85/5/10 split of the pairs, the
  proportions of GAE (Kipf and Welling, https://arxiv.org/abs/1611.07308) and of PyG's link
  prediction example. The training positives are the message-passing graph (validation and test
  edges are not in it, as in OGB's link datasets);
* negatives: per validation and test positive one uniformly random pair of distinct nodes that is
  no edge of the graph in either direction (GAE's and PyG's ratio), unless given;
* metric: ROC-AUC (GAE's, PyG's example's), or Hits@K against the shared negatives (OGB's
  ``ogbl-collab``); MRR needs per-source negatives, which this layout does not write;
* features: ``x`` finite in float32, or none (the recipes then learn a vector per node).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import DatasetError
from pipeline.graph import SPLITS, check_edges
from pipeline.graph_import import Imported, import_graph
from pipeline.link_layout import TASK_TYPE, write_link_folder
from pipeline.node_graph_import import ALIASES as NODE_ALIASES
from pipeline.node_graph_import import edge_array, feature_array

#: Field -> the names it is read under (PyG's, and those of PyG's ``train_test_split_edges``).
ALIASES: dict[str, tuple[str, ...]] = {
    "edge_index": NODE_ALIASES["edge_index"],
    "x": NODE_ALIASES["x"],
    "num_nodes": NODE_ALIASES["num_nodes"],
    "train": ("train_pos_edge_index",),
    "valid": ("val_pos_edge_index",),
    "test": ("test_pos_edge_index",),
    "valid_neg": ("val_neg_edge_index",),
    "test_neg": ("test_neg_edge_index",),
}

#: Every name :data:`ALIASES` reads.
NAMES = tuple(name for names in ALIASES.values() for name in names)

#: Shares of the pairs held out in a split made here (GAE's 5% validation, 10% test).
RANDOM_SPLIT = {"valid": 0.05, "test": 0.1}

#: Fewest pairs a random split is made of (5% of them is one validation pair).
MIN_PAIRS = 20

#: Negatives drawn per validation and test positive (GAE's and PyG's example's one).
NEGATIVES_PER_POSITIVE = 1


@dataclass(frozen=True)
class LinkImportOptions:
    """How :func:`link_graph_parts` makes the task.

    Attributes:
        metric: ``rocauc`` or ``hits@K``.
        seed: Seed of the random split and of the negatives drawn here.
    """

    metric: str = "rocauc"
    seed: int = 0


def _field(arrays: Mapping[str, np.ndarray], field: str) -> tuple[str, np.ndarray] | None:
    """The first of ``field``'s names that ``arrays`` has, with its array."""
    return next(((name, arrays[name]) for name in ALIASES[field] if name in arrays), None)


def _metric(metric: str, where: str) -> str:
    """``metric`` if a split of shared negative pairs can be scored by it."""
    if metric == "rocauc" or (metric.startswith("hits@") and metric[5:].isdigit() and int(metric[5:]) > 0):
        return metric
    mrr = " (mrr scores each source's own negatives, ogbl-citation2's layout)" if metric == "mrr" else ""
    raise DatasetError(f"{where}: metric", f"expected rocauc or hits@K (K > 0) for a link import, got {metric!r}{mrr}")


def _num_nodes(arrays: Mapping[str, np.ndarray], edges: list[tuple[str, np.ndarray]], where: str) -> int:
    """N: stated (``num_nodes``), else the rows of the features, else one past the largest id."""
    if (found := _field(arrays, "num_nodes")) is not None:
        name, value = found
        if value.size != 1 or value.dtype.kind not in "iu":
            raise DatasetError(f"{where}: {name}", f"expected a node count, got {value.dtype} of shape "
                                                   f"{list(value.shape)}")
        n, source = int(value.reshape(-1)[0]), name
    elif (found := _field(arrays, "x")) is not None and found[1].ndim > 0:
        n, source = len(found[1]), found[0]
    else:
        n, source = 1 + max((int(e.max()) for _, e in edges if e.size), default=-1), "the largest node id"
    for name, array in edges:
        check_edges(array, n, f"{where}: {name} (with {n:,} nodes from {source})")
    return n


def _keys(edges: np.ndarray, n: int, undirected: bool = True) -> np.ndarray:
    """One int64 key per ``[2, E]`` edge: ``min * N + max`` (``src * N + dst`` when directed)."""
    src, dst = edges
    if undirected:
        src, dst = np.minimum(src, dst), np.maximum(src, dst)
    return src * np.int64(n) + dst


def _is_symmetric(edges: np.ndarray, n: int) -> bool:
    """Whether every edge's reverse is an edge too (PyG's undirected graphs)."""
    return bool(np.isin(edges[1] * np.int64(n) + edges[0], _keys(edges, n, undirected=False)).all())


def _positives(edges: np.ndarray, n: int, undirected: bool) -> np.ndarray:
    """``[E, 2]`` distinct positives, self loops left out: each pair once as ``(min, max)`` when
    undirected, else each directed edge once."""
    edges = edges[:, edges[0] != edges[1]]
    keys = np.unique(_keys(edges, n, undirected))
    return np.stack([keys // n, keys % n], axis=1)


def _random_split(positives: np.ndarray, n: int, seed: int, where: str) -> dict[str, np.ndarray]:
    """GAE's 85/5/10 split of the positives, by pair (a directed pair's two edges go together)."""
    pairs, part_of = np.unique(_keys(positives.T, n), return_inverse=True)
    if len(pairs) < MIN_PAIRS:
        raise DatasetError(where, f"{len(pairs)} linked node pairs (self loops left out): expected at least "
                                  f"{MIN_PAIRS} to hold 5% out for validation and 10% for testing")
    order = np.random.default_rng(seed).permutation(len(pairs))
    valid, test = (max(1, round(share * len(pairs))) for share in RANDOM_SPLIT.values())
    part = np.zeros(len(pairs), np.int8)
    part[order[:valid]], part[order[valid:valid + test]] = 1, 2
    return {name: positives[part[part_of.reshape(-1)] == k] for k, name in enumerate(SPLITS)}


def _negatives(n: int, counts: dict[str, int], taken: np.ndarray, seed: int, where: str) -> dict[str, np.ndarray]:
    """Per split, ``counts[split]`` distinct uniformly random pairs of distinct nodes that are no
    pair of ``taken`` (sorted unordered keys); one pair is never a negative of two splits."""
    need = sum(counts.values())
    free = n * (n - 1) // 2 - len(taken)
    if free < 2 * need:  # rejection sampling would crawl; the graph is nearly complete
        raise DatasetError(where, f"{free:,} unlinked node pairs for {need:,} negatives: expected a graph with "
                                  "at least twice as many unlinked pairs as held-out edges")
    rng = np.random.default_rng([seed, 1])
    found = np.empty(0, np.int64)
    while len(found) < need:
        candidates = rng.integers(0, n, (2, 2 * (need - len(found)) + 64))
        keys = _keys(candidates[:, candidates[0] != candidates[1]], n)
        keys = keys[~np.isin(keys, taken) & ~np.isin(keys, found)]
        found = np.concatenate([found, keys[np.sort(np.unique(keys, return_index=True)[1])]])
    pairs = np.stack([found[:need] // n, found[:need] % n], axis=1)
    ends = np.cumsum(list(counts.values()))[:-1]
    return dict(zip(counts, np.split(pairs, ends)))


def _given(arrays: Mapping[str, np.ndarray], where: str) -> dict[str, tuple[str, np.ndarray]]:
    """The split arrays the source holds (positives of all three parts, negatives of both or none)."""
    found = {field: got for field in (*SPLITS, "valid_neg", "test_neg") if (got := _field(arrays, field))}
    positives = [ALIASES[p][0] for p in SPLITS if p in found]
    negatives = [ALIASES[p][0] for p in ("valid_neg", "test_neg") if p in found]
    if (negatives or positives) and len(positives) < len(SPLITS):
        missing = [ALIASES[p][0] for p in SPLITS if p not in found]
        raise DatasetError(where, f"has {positives + negatives} but not {missing}: expected the positives of "
                                  "all three parts, or none (a random split is made)")
    if len(negatives) == 1:
        missing = "test_neg_edge_index" if "valid_neg" in found else "val_neg_edge_index"
        raise DatasetError(where, f"has {negatives[0]} but not {missing}: expected both or neither (drawn here)")
    return {field: (name, edge_array((name, array), where)) for field, (name, array) in found.items()}


def _given_negatives(found: tuple[str, np.ndarray], where: str) -> np.ndarray:
    """Given negatives as ``[M, 2]`` pairs, as they are (a repeat or a loop is the user's choice)."""
    name, edges = found
    if not edges.shape[1]:
        raise DatasetError(f"{where}: {name}", "holds no pair: expected some negatives")
    return edges.T


def _check_disjoint(split: dict[str, np.ndarray], names: dict[str, str], n: int) -> None:
    """No pair is a positive of two parts (the recipes symmetrise the training graph, so a reversed
    edge counts as the same pair)."""
    seen = np.unique(_keys(split["train"].T, n))
    for part in ("valid", "test"):
        keys = _keys(split[part].T, n)
        shared = np.isin(keys, seen)
        if shared.any():
            u, v = split[part][int(np.flatnonzero(shared)[0])]
            raise DatasetError(names[part], f"edge ({u}, {v}) is also an edge of an earlier part ({int(shared.sum()):,}"
                                            f" shared): expected disjoint train, validation and test edges")
        seen = np.union1d(seen, keys)


def link_graph_parts(arrays: Mapping[str, np.ndarray], options: LinkImportOptions = LinkImportOptions(),
                     where: str = "graph") -> dict[str, Any]:
    """:func:`~pipeline.link_layout.write_link_folder`'s arguments for a graph given as named arrays.

    Args:
        arrays: Arrays under the names of :data:`ALIASES` (others are left out).
        options: Metric and seed.
        where: The source's name, for errors.

    Returns:
        ``edges``, ``num_nodes``, ``splits``, ``meta``, ``node_feat`` and ``binary``, with
        ``summary``: a line on what was read.

    Raises:
        DatasetError: A missing or malformed array, in one line naming it.
    """
    metric = _metric(options.metric, where)
    given = _given(arrays, where)
    if given:
        graph = given["train"]
    else:
        found = _field(arrays, "edge_index")
        edges = edge_array(found, where)  # no edges: raises
        graph = (found[0], edges)
    n = _num_nodes(arrays, [graph, *given.values()], where)
    x = feature_array(found_x, n, where) if (found_x := _field(arrays, "x")) is not None else None
    undirected = _is_symmetric(graph[1], n)
    loops = int((graph[1][0] == graph[1][1]).sum())
    if given:
        split = {part: _positives(given[part][1], n, undirected) for part in SPLITS}
        for part, edges in split.items():
            if not len(edges):
                raise DatasetError(f"{where}: {given[part][0]}", "holds no edge but self loops: expected some")
        _check_disjoint(split, {part: f"{where}: {given[part][0]}" for part in SPLITS}, n)
        source = "/".join(given[part][0] for part in SPLITS)
    else:
        split = _random_split(_positives(graph[1], n, undirected), n, options.seed, where)
        source = f"random 85/5/10 of the pairs (seed {options.seed})"
    if "valid_neg" in given:
        negatives, drawn = {part: _given_negatives(given[f"{part}_neg"], where) for part in ("valid", "test")}, "given"
    else:
        taken = np.unique(np.concatenate([_keys(split[part].T, n) for part in SPLITS]))
        counts = {part: NEGATIVES_PER_POSITIVE * len(split[part]) for part in ("valid", "test")}
        negatives, drawn = _negatives(n, counts, taken, options.seed, where), "drawn"
    splits = {"train": {"edge": split["train"]},
              **{part: {"edge": split[part], "edge_neg": negatives[part]} for part in ("valid", "test")}}
    meta = {"family": "link", "task type": TASK_TYPE, "eval metric": metric, "add_inverse_edge": str(undirected),
            "split": "given" if given else f"random{options.seed}", "additional node files": "None",
            "additional edge files": "None", "is hetero": "False", "version": 1}
    features = f"{x.shape[1]:,} features" if x is not None else "no features"
    kind = "undirected" if undirected else "directed"
    left = f" ({loops:,} self loops left out)" if loops else ""
    sizes = ", ".join(f"{p} {len(split[p]):,}" + (f" (+{len(negatives[p]):,} {drawn} negatives)" if p in negatives
                                                   else "") for p in SPLITS)
    summary = (f"{n:,} nodes, {sum(map(len, split.values())):,} {kind} edges{left}, {features}; link prediction "
               f"({metric}); split {source}: {sizes}")
    return {"edges": split["train"], "num_nodes": n, "splits": splits, "meta": meta, "node_feat": x,
            "binary": not undirected,  # OGB's binary reader adds no reverses
            "summary": summary}


def import_link_graph(source: Path | str | Any, folder: Path,
                      options: LinkImportOptions = LinkImportOptions()) -> Imported:
    """Write ``source`` (a ``.pt``/``.npz`` path, a PyG ``Data`` or a mapping of arrays) as an
    OGB-layout folder for link prediction, atomically.

    Raises:
        DatasetError: A bad source (see :func:`pipeline.array_source.read_arrays`,
            :func:`link_graph_parts`) or an existing ``folder``; nothing is written then.
    """
    return import_graph(source, folder, NAMES, lambda arrays, where: link_graph_parts(arrays, options, where),
                        write_link_folder)

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
* split: the parts PyG's ``train_test_split_edges`` leaves (``train_pos_edge_index``,
  ``val_pos_edge_index``, ``test_pos_edge_index``, with ``val_neg_edge_index`` and
  ``test_neg_edge_index``), their positives taken as pairs as above, ``edge_index`` then unread
  (it may hold the held-out edges); or, without them, a seeded random 85/5/10 split of the pairs,
  the proportions of GAE (Kipf and Welling, https://arxiv.org/abs/1611.07308) and of PyG's link
  prediction example. The training positives are the message-passing graph (validation and test
  edges are not in it, as in OGB's link datasets). One part of ``RandomLinkSplit``'s output
  (``edge_label_index``) is refused: its other parts are not in it;
* negatives: per validation and test positive one uniformly random pair of distinct nodes that is
  no edge of the graph in either direction (GAE's and PyG's ratio); given ones must be such pairs;
* metric: ROC-AUC (GAE's, PyG's example's), or Hits@K against the shared negatives (OGB's
  ``ogbl-collab``; K below the negatives of each part, or every positive scores 1); MRR needs
  per-source negatives, which this layout does not write;
* features: ``x`` finite in float32, or none (the recipes then learn a vector per node); edge
  features (:data:`pipeline.graph_import.UNKEPT_EDGE_DATA`) are not kept, and the summary line
  says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import DatasetError
from pipeline.graph import SPLITS, check_edges
from pipeline.graph_import import UNKEPT_EDGE_DATA, Imported, import_graph, named_source, unkept_note
from pipeline.link_layout import TASK_TYPE, check_disjoint, edge_keys, hits_at, write_link_folder
from pipeline.node_graph_import import ALIASES as NODE_ALIASES
from pipeline.node_graph_import import edge_array, feature_array, first_found, stated_count

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

#: What one part of PyG's ``RandomLinkSplit`` output holds (refused: the other parts are elsewhere).
LINK_SPLIT_PART = ("edge_label_index", "pos_edge_label_index")

#: Every name read.
NAMES = (*(name for names in ALIASES.values() for name in names), *LINK_SPLIT_PART)

#: Shares of the pairs held out for validation and testing in a split made here (GAE's 5% and 10%).
HELD_OUT = {"valid": 0.05, "test": 0.1}

#: Fewest pairs a random split is made of (5% of them is one validation pair).
MIN_PAIRS = 20

#: Negatives drawn per validation and test positive (GAE's and PyG's example's one).
NEGATIVES_PER_POSITIVE = 1

#: Most nodes: a pair's key ``min * N + max`` must fit in int64.
MAX_NODES = 3_037_000_499


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
    return first_found(arrays, ALIASES[field])


def _plural(count: int, what: str) -> str:
    return f"{count:,} {what}{'' if count == 1 else 's'}"


def _metric(metric: str, where: str) -> str:
    """``metric`` if a split of shared negative pairs can be scored by it."""
    if metric == "rocauc" or hits_at(metric) is not None:
        return metric
    mrr = " (mrr scores each source's own negatives, ogbl-citation2's layout)" if metric == "mrr" else ""
    raise DatasetError(f"{where}: metric", f"expected rocauc or hits@K (K > 0) for a link import, got {metric!r}{mrr}")


def _num_nodes(arrays: Mapping[str, np.ndarray], edges: list[tuple[str, np.ndarray]], where: str) -> int:
    """N: stated (``num_nodes``), else the rows of the features, else one past the largest id."""
    if (found := _field(arrays, "num_nodes")) is not None:
        n, source = stated_count(found, where), found[0]
    elif (found := _field(arrays, "x")) is not None and found[1].ndim > 0:
        n, source = len(found[1]), found[0]
    else:
        n, source = 1 + max((int(e.max()) for _, e in edges if e.size), default=-1), "the largest node id"
    if n > MAX_NODES:
        raise DatasetError(f"{where}: {source}", f"{n:,} nodes: expected at most {MAX_NODES:,} (ids 0..N-1; "
                                                 "relabel sparse ids)")
    for name, array in edges:
        check_edges(array, n, f"{where}: {name} (with {n:,} nodes from {source})")
    return n


def _unpaired(edges: np.ndarray, n: int) -> int:
    """How many distinct ``[2, E]`` edges (self loops aside) lack their reverse; 0: an undirected
    graph (a repeated edge counted once: with repeats the count exceeded the edges kept)."""
    keys = np.unique(edge_keys(edges[:, edges[0] != edges[1]].T, n, undirected=False))
    return int((~np.isin(keys % n * n + keys // n, keys)).sum())


def _positives(edges: np.ndarray, n: int, undirected: bool) -> np.ndarray:
    """``[E, 2]`` distinct positives, self loops left out: each pair once as ``(min, max)`` when
    undirected, else each directed edge once."""
    edges = edges[:, edges[0] != edges[1]]
    keys = np.unique(edge_keys(edges.T, n, undirected))
    return np.stack([keys // n, keys % n], axis=1)


def _random_split(positives: np.ndarray, n: int, seed: int, where: str) -> dict[str, np.ndarray]:
    """GAE's 85/5/10 split of the positives, by pair (a directed pair's two edges go together)."""
    pairs, part_of = np.unique(edge_keys(positives, n, undirected=True), return_inverse=True)
    if len(pairs) < MIN_PAIRS:
        raise DatasetError(where, f"{len(pairs)} linked node pairs (self loops left out): expected at least "
                                  f"{MIN_PAIRS} to hold 5% out for validation and 10% for testing")
    order = np.random.default_rng(seed).permutation(len(pairs))
    valid, test = (max(1, round(share * len(pairs))) for share in HELD_OUT.values())
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
        keys = edge_keys(candidates[:, candidates[0] != candidates[1]].T, n, undirected=True)
        keys = keys[~np.isin(keys, taken) & ~np.isin(keys, found)]
        found = np.concatenate([found, keys[np.sort(np.unique(keys, return_index=True)[1])]])
    pairs = np.stack([found[:need] // n, found[:need] % n], axis=1)
    ends = np.cumsum(list(counts.values()))[:-1]
    return dict(zip(counts, np.split(pairs, ends)))


def _given(arrays: Mapping[str, np.ndarray], where: str) -> dict[str, tuple[str, np.ndarray]]:
    """The split arrays the source holds (positives of all three parts, negatives of both or none)."""
    if (part := first_found(arrays, LINK_SPLIT_PART)) is not None:
        raise DatasetError(f"{where}: {part[0]}", "one part of RandomLinkSplit's output, without the others: save "
                                                  "the graph before the split (gnnkit import splits it, --seed)")
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


def _given_negatives(found: tuple[str, np.ndarray], taken: np.ndarray, n: int, where: str) -> np.ndarray:
    """Given negatives as ``[M, 2]`` pairs, each two distinct nodes that are no positive pair."""
    name, edges = found
    pairs = edges.T
    if not len(pairs):
        raise DatasetError(f"{where}: {name}", "holds no pair: expected some negatives")
    bad = (pairs[:, 0] == pairs[:, 1]) | np.isin(edge_keys(pairs, n, undirected=True), taken)
    if bad.any():
        u, v = pairs[int(np.flatnonzero(bad)[0])]
        what = "a self loop" if u == v else "a positive edge"
        raise DatasetError(f"{where}: {name}", f"pair ({u}, {v}) is {what} ({int(bad.sum()):,} such): expected "
                                               "negatives that are no edge")
    return pairs


def _check_hits(metric: str, negatives: dict[str, np.ndarray], names: dict[str, str]) -> None:
    """Hits@K ranks each positive against the K-th best negative: a part needs more than K."""
    k = hits_at(metric)
    for part, pairs in negatives.items():
        if k is not None and len(pairs) <= k:
            raise DatasetError(names[part], f"{len(pairs):,} negatives: {metric} needs more than {k} (every "
                                            "positive would score 1); a smaller K, or rocauc")


def _parts(given: dict[str, tuple[str, np.ndarray]], edges: np.ndarray, n: int, undirected: bool, seed: int,
           where: str) -> tuple[dict[str, np.ndarray], dict[str, str], int, str]:
    """The positives of each part (given, or a random split of ``edges``), each part's name for
    errors, how many positives the graph's own edges make, and where the split came from."""
    if not given:
        positives = _positives(edges, n, undirected)
        names = {part: f"{where}: random split {part}" for part in SPLITS}
        return (_random_split(positives, n, seed, where), names, len(positives),
                f"random 85/5/10 of the pairs (seed {seed})")
    split = {part: _positives(given[part][1], n, undirected) for part in SPLITS}
    names = {part: f"{where}: {given[part][0]}" for part in SPLITS}
    for part, pairs in split.items():
        if not len(pairs):
            raise DatasetError(names[part], "holds no edge but self loops: expected some")
    check_disjoint({part: {"edge": pairs} for part, pairs in split.items()}, names, n, undirected=True)
    return split, names, len(split["train"]), "/".join(given[part][0] for part in SPLITS)


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
        name, edges = given["train"]
    else:
        found = _field(arrays, "edge_index")
        edges = edge_array(found, where)  # no edges: raises
        name = found[0]
    n = _num_nodes(arrays, [(name, edges), *given.values()], where)
    x = feature_array(found_x, n, where) if (found_x := _field(arrays, "x")) is not None else None
    unpaired = _unpaired(edges, n)
    undirected = not unpaired
    split, names, pairs, source = _parts(given, edges, n, undirected, options.seed, where)
    taken = np.unique(np.concatenate([edge_keys(split[part], n, undirected=True) for part in SPLITS]))
    if "valid_neg" in given:
        negatives = {part: _given_negatives(given[f"{part}_neg"], taken, n, where) for part in ("valid", "test")}
        drawn = "given"
    else:
        counts = {part: NEGATIVES_PER_POSITIVE * len(split[part]) for part in ("valid", "test")}
        if hits_at(metric):  # ranked against the K-th best negative: as many in both parts (OGB's collab: 100,000)
            counts = dict.fromkeys(counts, max(counts.values()))
        negatives, drawn = _negatives(n, counts, taken, options.seed, where), "drawn"
    _check_hits(metric, negatives, names)
    splits = {"train": {"edge": split["train"]},
              **{part: {"edge": split[part], "edge_neg": negatives[part]} for part in ("valid", "test")}}
    meta = {"family": "link", "task type": TASK_TYPE, "eval metric": metric, "add_inverse_edge": str(undirected),
            "split": "given" if given else f"random{options.seed}", "additional node files": "None",
            "additional edge files": "None", "is hetero": "False", "version": 1}
    summary = (_summary(n, split, negatives, x, edges, pairs, unpaired, source, drawn, metric)
               + unkept_note(arrays, "link"))
    return {"edges": split["train"], "num_nodes": n, "splits": splits, "meta": meta, "node_feat": x,
            "binary": not undirected,  # OGB's binary reader adds no reverses
            "summary": summary}


def _summary(n: int, split: dict[str, np.ndarray], negatives: dict[str, np.ndarray], x: np.ndarray | None,
             edges: np.ndarray, pairs: int, unpaired: int, source: str, drawn: str, metric: str) -> str:
    """The line on what was read: sizes, the directed edges of them without their reverse
    (``unpaired``; none: undirected), what was left out of the graph's ``edges`` (which make
    ``pairs`` positives), the task and the parts, with their negatives ``drawn`` or ``given``
    (training has none: they are drawn anew each epoch)."""
    kind = "directed" if unpaired else "undirected"
    loops = int((edges[0] == edges[1]).sum())
    left = [_plural(loops, "self loop")] if loops else []
    repeats = edges.shape[1] - loops - pairs * (1 if unpaired else 2)
    left += [_plural(repeats, "repeated edge")] if repeats > 0 else []
    notes = [f"{unpaired:,} without their reverse"] if unpaired else []
    notes += [f"{' and '.join(left)} left out"] if left else []
    dropped = f" ({'; '.join(notes)})" if notes else ""
    features = _plural(x.shape[1], "feature") if x is not None else "no features"
    sizes = ", ".join(f"{p} {len(split[p]):,}" + (f" (+{_plural(len(negatives[p]), f'{drawn} negative')})"
                                                   if p in negatives else "") for p in SPLITS)
    return (f"{n:,} nodes, {sum(map(len, split.values())):,} {kind} edges{dropped}, {features}; link prediction "
            f"({metric}); split {source}: {sizes}")


def import_link_graph(source: Path | str | Any, folder: Path,
                      options: LinkImportOptions = LinkImportOptions()) -> Imported:
    """Write ``source`` (a ``.pt``/``.npz`` path, a PyG ``Data`` or a mapping of arrays) as an
    OGB-layout folder for link prediction, atomically.

    Raises:
        DatasetError: A bad source (see :func:`pipeline.array_source.read_arrays`,
            :func:`link_graph_parts`) or an existing ``folder``; nothing is written then.
    """
    return import_graph(source, folder, lambda graph: named_source(graph, (*NAMES, *UNKEPT_EDGE_DATA)),
                        lambda arrays, where: link_graph_parts(arrays, options, where), write_link_folder)

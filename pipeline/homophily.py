"""Adjusted homophily of labelled edges (Platonov et al., NeurIPS 2023,
<https://arxiv.org/abs/2209.06177>), in numpy: the measure itself, and that of a graph given as an
edge list (``gnnkit import``'s arrays, before any cache entry). :mod:`gnnkit.homophily` measures
a cached graph with it and says what the values mean for a run.
"""

from __future__ import annotations

import numpy as np

#: Below this adjusted homophily a graph counts as heterophilous (the graphs of README's
#: heterophilous table: 0.10 at most, against 0.5 and more for gnnkit's twins).
HETEROPHILOUS_BELOW = 0.3
#: Fewer edges between labelled training nodes than this give no measure: on Cora's 140 training
#: nodes a few dozen such edges put a graph of homophily 0.5 anywhere from 0.0 to 0.7.
MIN_EDGES = 500


def is_heterophilous(homophily: float | None) -> bool | None:
    """Whether an adjusted homophily is below :data:`HETEROPHILOUS_BELOW` (``None``: not measured)."""
    return None if homophily is None else homophily < HETEROPHILOUS_BELOW


def homophily_text(homophily: float) -> str:
    """The measure as the hints print it, two places (-0.0046 is "0.00", not "-0.00")."""
    return f"{round(homophily, 2) + 0.0:.2f}"


def of_label_pairs(first: np.ndarray, second: np.ndarray, min_edges: int = MIN_EDGES) -> tuple[float | None, int]:
    """The adjusted homophily of edges whose ends have the classes ``first[i]`` and ``second[i]``
    (each direction of an undirected edge given once), and their count; ``None`` below
    ``min_edges`` edges or with one class."""
    edges = int(len(first))
    if edges < max(min_edges, 1):
        return None, edges
    same = float(np.mean(first == second))
    share = np.bincount(np.concatenate([first, second])) / (2 * edges)
    chance = float((share**2).sum())
    return (None if chance >= 1.0 else (same - chance) / (1.0 - chance)), edges


def class_ids(labels: np.ndarray) -> np.ndarray | None:
    """``int64 [N]`` class ids of ``[N]`` or ``[N, 1]`` labels, -1 for unlabelled nodes (NaN in float
    labels, OGB's binary tasks), or ``None`` when they hold no classes (several tasks, real values)."""
    labels = np.asarray(labels).reshape(len(labels), -1)
    if labels.shape[1] != 1:
        return None  # several tasks: no classes
    y = labels[:, 0]
    if y.dtype.kind == "f":  # class ids as floats, NaN unlabelled
        known = ~np.isnan(y)
        if not np.array_equal(y[known], np.round(y[known])):
            return None  # real values: no classes
        y = np.where(known, y, -1)
    return y.astype(np.int64)


def of_edge_list(edge_index: np.ndarray, labels: np.ndarray, train: np.ndarray,
                 undirected: bool) -> float | None:
    """The adjusted homophily of a graph given as an edge list (``gnnkit import``'s arrays, before
    any cache entry), as :mod:`gnnkit.homophily` measures a cached one: the edges between labelled
    ``train`` nodes, self loops left out, both directions of each when ``undirected``."""
    y = class_ids(labels)
    if y is None:
        return None
    labelled = np.zeros(len(y), dtype=bool)
    labelled[train[y[train] >= 0]] = True
    src, dst = (np.asarray(a, dtype=np.int64) for a in edge_index)
    keep = labelled[src] & labelled[dst] & (src != dst)
    first, second = y[src[keep]], y[dst[keep]]
    if undirected:
        first, second = np.concatenate([first, second]), np.concatenate([second, first])
    return of_label_pairs(first, second)[0]

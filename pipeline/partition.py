"""Multi-level graph partition by size-constrained label propagation, vectorised with numpy.

Label propagation (Raghavan, Albert and Kumara, "Near linear time algorithm to detect community
structures in large-scale networks", Phys. Rev. E 2007, <https://arxiv.org/abs/0709.2938>) moves
every node to the label most of its edge weight points to. With a cap on the total node weight a
label may hold, it becomes the coarsening step of multi-level partitioners for complex networks
(Meyerhenke, Sanders and Schulz, "Partitioning Complex Networks via Size-constrained
Clustering", SEA 2014, <https://arxiv.org/abs/1402.3281>): cluster under a cap, contract each
cluster to one weighted node, cluster the contracted graph under a larger cap, and so on.

gnnkit uses the resulting hierarchy to number nodes (:func:`pipeline.reorder.node_order` with
``"partition"``): nodes of one cluster get consecutive numbers, clusters of one parent cluster get
consecutive ranges, so graph neighbours share the leading digits of their TT row (Yin et al.,
"Nimble GNN Embedding with Tensor-Train Decomposition", KDD 2022,
<https://arxiv.org/abs/2206.10581>, order nodes with METIS for the same reason).

Each sweep is synchronous but lets a random half of the nodes move, which stops two neighbours
from swapping labels forever; moves into a label are admitted in random order until its cap is
reached. Everything is seeded, so the partition is deterministic.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

#: Label-propagation sweeps per level (fewer if the labels settle first).
ITERATIONS = 30
#: A level stops early once fewer than this fraction of its nodes moved in a sweep.
SETTLED = 1e-3


@dataclass(frozen=True)
class WeightedGraph:
    """A CSR graph with edge and node weights (``weights is None`` means every edge weighs 1)."""

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray | None
    node_weights: np.ndarray

    @property
    def num_nodes(self) -> int:
        return self.indptr.size - 1

    def rows(self) -> np.ndarray:
        """Source node of every edge, ``int64 [nnz]``."""
        return np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.indptr))


def default_caps(num_nodes: int, levels: int = 3) -> list[int]:
    """Cluster-size caps ``[b, b^2, 8 b^2][:levels]`` with ``b = ceil(num_nodes ** (1/3))``: the
    block sizes of a three-core TT table's digits, topped by a coarser level for the ordering."""
    b = max(2, math.ceil(num_nodes ** (1.0 / 3.0) - 1e-9))
    caps = [b, b * b, 8 * b * b]
    return caps[:levels]


def label_weights(graph: WeightedGraph, label: np.ndarray, rows: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edge weight from every node to every label among its neighbours (``rows``: the graph's
    :meth:`~WeightedGraph.rows`, computed once per level by the caller).

    Returns:
        ``(node, label, weight)``, one entry per distinct (node, neighbour label) pair, sorted by
        node then label.
    """
    n = graph.num_nodes
    key = rows * n + label[graph.indices]
    if graph.weights is None:  # unit weights: counts are run lengths of the sorted keys
        key.sort()
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1]))) if key.size else key
        weight = np.diff(np.append(starts, key.size)).astype(np.float64)
        key = key[starts]
    else:
        key, inverse = np.unique(key, return_inverse=True)
        weight = np.bincount(inverse.reshape(-1), weights=graph.weights, minlength=key.size)
    return key // n, key % n, weight


def _first_per_group(group: np.ndarray) -> np.ndarray:
    """Positions where a sorted ``group`` array starts a new value."""
    first = np.ones(group.size, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    return np.flatnonzero(first)


def _runs(group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, run)`` of a sorted ``group`` array: where each run of equal values starts, and
    the run number of every position."""
    starts = _first_per_group(group)
    return starts, np.repeat(np.arange(starts.size), np.diff(np.append(starts, group.size)))


def _best_per_node(node: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Position of the highest ``score`` of every run of equal ``node`` (sorted), the first on a
    tie; linear time, no sort."""
    starts, run = _runs(node)
    best = np.maximum.reduceat(score, starts) if starts.size else score
    top = np.flatnonzero(score == best[run])
    return top[_first_per_group(node[top])]


def _admit(nodes: np.ndarray, targets: np.ndarray, graph: WeightedGraph, size: np.ndarray, cap: float,
           rng: np.random.Generator) -> np.ndarray:
    """Mask of the moves ``nodes -> targets`` admitted, in random order per target, until the
    target's total node weight would exceed ``cap``."""
    order = np.lexsort((rng.random(nodes.size), targets))
    weight = graph.node_weights[nodes[order]]
    cum = np.cumsum(weight)
    starts, run = _runs(targets[order])
    incoming = cum - (cum[starts] - weight[starts])[run]
    admitted = np.empty(nodes.size, dtype=bool)
    admitted[order] = size[targets[order]] + incoming <= cap
    return admitted


def label_propagation(graph: WeightedGraph, cap: float, iterations: int = ITERATIONS, seed: int = 0) -> np.ndarray:
    """Size-constrained label propagation: clusters whose node weight stays within ``cap``.

    Args:
        graph: The graph (symmetric for the usual meaning of a cluster).
        cap: Largest total node weight of a cluster.
        iterations: Most sweeps.
        seed: Seed of the tie-breaking and move order.

    Returns:
        ``int64 [num_nodes]`` cluster ids ``0..k-1``.
    """
    n = graph.num_nodes
    rng = np.random.default_rng(seed)
    label = np.arange(n, dtype=np.int64)
    size = graph.node_weights.astype(np.float64).copy()
    rows = graph.rows()
    for _ in range(iterations):
        node, lab, weight = label_weights(graph, label, rows)
        score = weight + rng.random(weight.size) * 1e-6  # random tie-break
        own = np.zeros(n)
        mine = lab == label[node]
        own[node[mine]] = score[mine]
        room = mine | (size[lab] + graph.node_weights[node] <= cap)
        best = _best_per_node(node, np.where(room, score, -np.inf))
        best = best[room[best]]  # the best label with room, for nodes that have one
        moving = ((lab[best] != label[node[best]]) & (score[best] > own[node[best]])
                  & (rng.random(best.size) < 0.5))  # a random half moves: no endless swaps
        movers, targets = node[best[moving]], lab[best[moving]]
        admitted = _admit(movers, targets, graph, size, cap, rng)
        movers, targets = movers[admitted], targets[admitted]
        moved = graph.node_weights[movers]
        size += np.bincount(targets, weights=moved, minlength=n)
        size -= np.bincount(label[movers], weights=moved, minlength=n)
        label[movers] = targets
        if movers.size < SETTLED * n:
            break
    return np.unique(label, return_inverse=True)[1].reshape(-1).astype(np.int64)


def coarsen(graph: WeightedGraph, clusters: np.ndarray) -> WeightedGraph:
    """Contract every cluster to one node; edge weights between clusters add up, edges inside a
    cluster vanish, node weights add up."""
    k = int(clusters.max()) + 1 if clusters.size else 0
    a, b = clusters[graph.rows()], clusters[graph.indices]
    between = a != b
    weights = np.ones(int(between.sum())) if graph.weights is None else graph.weights[between]
    key, inverse = np.unique(a[between] * k + b[between], return_inverse=True)
    indptr = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(np.bincount(key // k, minlength=k), out=indptr[1:])
    return WeightedGraph(indptr, key % k, np.bincount(inverse.reshape(-1), weights=weights, minlength=key.size),
                         np.bincount(clusters, weights=graph.node_weights, minlength=k))


def multilevel_clusters(
    indptr: np.ndarray, indices: np.ndarray, caps: list[int], iterations: int = ITERATIONS, seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[np.ndarray], WeightedGraph]:
    """Cluster, contract, repeat: one clustering per cap, finest first.

    Args:
        indptr: CSR row pointer ``int64 [N+1]``.
        indices: CSR column ids ``int64 [nnz]``.
        caps: Cluster-size caps, finest first.
        iterations: Most label-propagation sweeps per level.
        seed: Seed of the first level (level ``l`` uses ``seed + l``).
        progress: Called with a line after each level.

    Returns:
        ``(levels, top)``: per level, the cluster of every *node* of the input graph; and the graph
        of the coarsest clusters.
    """
    n = indptr.size - 1
    graph = WeightedGraph(np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64), None,
                          np.ones(n))
    levels, of_node = [], np.arange(n, dtype=np.int64)
    for level, cap in enumerate(caps):
        start = time.perf_counter()
        clusters = label_propagation(graph, cap, iterations, seed + level)
        of_node = clusters[of_node]
        levels.append(of_node)
        graph = coarsen(graph, clusters)
        if progress is not None:
            progress(f"partition level {level + 1}/{len(caps)}: {graph.num_nodes:,} clusters of at most {cap:,} "
                     f"nodes ({time.perf_counter() - start:.1f}s)")
    return levels, graph

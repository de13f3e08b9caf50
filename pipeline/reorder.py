"""Graph-aware node numbering for TT embeddings: reverse Cuthill-McKee, or a multi-level partition.

A TT table stores row ``i`` under its mixed-radix digits, so rows with close numbers share digit
prefixes and hence core slices (and, in a lookup, partial products). Numbering nodes so that graph
neighbours get close numbers makes neighbours share parameters (the homophily argument of Yin et
al., "Nimble GNN Embedding with Tensor-Train Decomposition", KDD 2022,
<https://arxiv.org/abs/2206.10581>) and makes a mini-batch's rows share prefixes.

Two methods: ``"rcm"``, reverse Cuthill-McKee computed level by level (a bandwidth-reducing
breadth-first order), and ``"partition"``, the nested METIS clusters of :mod:`pipeline.partition`
(cluster sizes matched to a three-core TT's digit blocks), which groups communities far better on
graphs with hubs.

The ordering is a permutation stored beside the graph (``extra.order.<method>``); the graph itself
keeps its node ids, so users never see renumbered nodes.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from pipeline.partition import default_caps, nested_parts

REORDER_METHODS = ("none", "rcm", "partition")


def _stable_sort_by(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    return values[np.argsort(keys, kind="stable")]


def cuthill_mckee(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Cuthill-McKee visiting sequence (E. Cuthill and J. McKee, "Reducing the bandwidth of sparse
    symmetric matrices", ACM 1969, <https://doi.org/10.1145/800195.805928>).

    Each connected component is traversed breadth-first from its node of least degree (ties: lowest
    id); the unvisited neighbours of the nodes of one level enter the next level ordered by their
    first-visited neighbour, then degree, then id, exactly as the queue-based algorithm does, but a
    whole level at a time with numpy. Components come in order of their start node's (degree, id);
    isolated nodes are placed first in id order without a traversal. Neighbours are the CSR row
    (symmetrise the graph, ``undirected: true``, for the classic algorithm).

    Args:
        indptr: ``int64 [N+1]``.
        indices: ``int64 [nnz]``.

    Returns:
        ``int64 [N]``: node ids in visiting order.
    """
    n = indptr.size - 1
    degree = np.diff(indptr)
    visited = np.zeros(n, dtype=bool)
    isolated = np.flatnonzero(degree == 0)
    visited[isolated] = True
    sequence = [isolated]
    by_degree = np.lexsort((np.arange(n), degree))  # candidate starts, (degree, id) order
    cursor = 0
    while True:
        while cursor < n and visited[by_degree[cursor]]:
            cursor += 1
        if cursor == n:
            break
        frontier = by_degree[cursor : cursor + 1]
        visited[frontier] = True
        while frontier.size:
            sequence.append(frontier)
            counts = degree[frontier]
            starts = np.repeat(indptr[frontier] - np.cumsum(counts) + counts, counts)
            neighbours = indices[starts + np.arange(counts.sum())]
            parent = np.repeat(np.arange(frontier.size), counts)
            fresh = ~visited[neighbours]
            neighbours, parent = neighbours[fresh], parent[fresh]
            if neighbours.size == 0:
                break
            # first-visited parent of each new node: sort by (node, parent), keep the first
            order = np.lexsort((parent, neighbours))
            neighbours, parent = neighbours[order], parent[order]
            first = np.empty(neighbours.size, dtype=bool)
            first[0] = True
            np.not_equal(neighbours[1:], neighbours[:-1], out=first[1:])
            nodes, parent = neighbours[first], parent[first]  # nodes sorted by id
            frontier = nodes[np.lexsort((nodes, degree[nodes], parent))]
            visited[frontier] = True
    return np.concatenate(sequence).astype(np.int64)


def partition_sequence(indptr: np.ndarray, indices: np.ndarray, caps: list[int] | None = None, seed: int = 0,
                       progress: Callable[[str], None] | None = None) -> np.ndarray:
    """Nodes in nested-partition order: by coarsest cluster, then by each finer cluster, then by id
    (:func:`pipeline.partition.nested_parts`).

    Args:
        indptr: CSR row pointer ``int64 [N+1]``.
        indices: CSR column ids ``int64 [nnz]``.
        caps: Cluster sizes, finest first (default :func:`pipeline.partition.default_caps`).
        seed: METIS's seed.
        progress: Called with a line after each level.

    Returns:
        ``int64 [N]``: node ids in order.
    """
    n = indptr.size - 1
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    levels = nested_parts(indptr, indices, caps or default_caps(n), seed=seed, progress=progress)
    return np.lexsort([np.arange(n)] + levels).astype(np.int64)


def node_order(indptr: np.ndarray, indices: np.ndarray, method: str = "rcm",
               progress: Callable[[str], None] | None = None) -> np.ndarray:
    """New number of every node: ``order[v]`` is node ``v``'s position.

    Args:
        indptr: CSR row pointer ``int64 [N+1]``.
        indices: CSR column ids ``int64 [nnz]``.
        method: ``"rcm"`` (reverse Cuthill-McKee), ``"partition"`` (multi-level partition) or
            ``"none"`` (identity).
        progress: Called with a line per stage of long methods (``"partition"``).

    Returns:
        ``int64 [N]``, a permutation of ``0..N-1``.
    """
    n = indptr.size - 1
    if method == "none":
        return np.arange(n, dtype=np.int64)
    indptr, indices = np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64)
    if method == "rcm":
        sequence = cuthill_mckee(indptr, indices)[::-1]
    elif method == "partition":
        sequence = partition_sequence(indptr, indices, progress=progress)
    else:
        raise ValueError(f"reorder: expected one of {list(REORDER_METHODS)}, got {method!r}")
    order = np.empty(n, dtype=np.int64)
    order[sequence] = np.arange(n, dtype=np.int64)
    return order


def bandwidth(indptr: np.ndarray, indices: np.ndarray, order: np.ndarray | None = None) -> int:
    """Largest ``|order[u] - order[v]|`` over the edges (the matrix bandwidth after renumbering)."""
    rows = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    if order is None:
        return int(np.abs(rows - indices).max(initial=0))
    return int(np.abs(order[rows] - order[indices]).max(initial=0))


def prefix_sharing(indptr: np.ndarray, indices: np.ndarray, block: int, order: np.ndarray | None = None) -> float:
    """Fraction of edges whose endpoints fall in the same block of ``block`` consecutive numbers
    (for a TT table with ``p = (p_1, ..., p_d)``, ``block = p_d`` means they share all digits but
    the last)."""
    rows = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    a, b = (rows, indices) if order is None else (order[rows], order[indices])
    return float(np.mean(a // block == b // block)) if a.size else 0.0

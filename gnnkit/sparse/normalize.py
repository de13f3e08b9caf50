"""GCN's symmetric normalisation ``D^-1/2 (A + I) D^-1/2`` of an :class:`Adjacency`, cached on it."""

from __future__ import annotations

import torch

from gnnkit.sparse.adjacency import Adjacency, indptr_of


def gcn_normalized(adj: Adjacency, add_self_loops: bool = True, dtype: torch.dtype = torch.float32) -> Adjacency:
    r"""The propagation matrix of Kipf & Welling's GCN <https://arxiv.org/abs/1609.02907>.

    ``\hat A = D^{-1/2} (A + I) D^{-1/2}`` with ``D`` the row sums (in-degrees) of ``A + I``,
    exactly as PyG's ``gcn_norm``: existing self-loops are replaced by one loop per node (keeping
    an existing loop's weight), duplicates stay and add up. The result is cached on ``adj``, so a
    full-batch training run normalises once.

    Args:
        adj: Square adjacency.
        add_self_loops: Add the identity (otherwise only the degree scaling is applied).
        dtype: The weights' dtype, in which the degrees and scales are computed too: float32, or
            float64 for float64 features (float32's weights rounded up are 1e-7 off PyG's there).

    Returns:
        A weighted :class:`Adjacency` with the same rows and columns.
    """
    if add_self_loops and adj.num_rows != adj.num_cols:
        raise ValueError(f"gcn_normalized: self-loops need a square adjacency, got {adj}")

    def build() -> Adjacency:
        n = adj.num_rows
        rows, cols, weights = adj.rows(), adj.indices, adj.weights().to(dtype)
        if add_self_loops:
            loops = rows == cols
            loop_weight = torch.ones(n + 1, dtype=weights.dtype, device=adj.device)  # [n]: a slot for the rest
            if adj.values is not None:  # an existing loop keeps its weight (no count of them read back)
                loop_weight.scatter_(0, torch.where(loops, rows, n), weights)
            loop_weight = loop_weight[:n]
            kept = (~loops).nonzero().squeeze(1)  # the one host sync on a GPU (how many entries stay)
            nodes = torch.arange(n, dtype=torch.int64, device=adj.device)
            rows = torch.cat([rows.index_select(0, kept), nodes])
            cols = torch.cat([cols.index_select(0, kept), nodes])
            weights = torch.cat([weights.index_select(0, kept), loop_weight])
            order = torch.argsort(rows, stable=True)  # each row: its other entries, then its loop
            rows, cols, weights = rows[order], cols[order], weights[order]
        degree = torch.zeros(n, dtype=weights.dtype, device=adj.device).index_add_(0, rows, weights)
        inv_sqrt = degree.pow(-0.5)
        inv_sqrt.masked_fill_(inv_sqrt == float("inf"), 0.0)
        return Adjacency(indptr_of(rows, n), cols, num_cols=n, values=inv_sqrt[rows] * weights * inv_sqrt[cols],
                         validate=False, single_use=adj.single_use)

    key = f"gcn_normalized:{add_self_loops}" + ("" if dtype == torch.float32 else f":{dtype}")
    return adj.cached(key, build)

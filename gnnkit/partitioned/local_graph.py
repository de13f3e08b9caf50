"""A partition's graph in local numbering: rows = owned nodes, columns = owned nodes then halo.

The rectangular ``[num_owned, num_owned + num_halo]`` adjacency is what a layer aggregates over on
one rank, with the layer's input laid out as ``[owned rows; halo rows]``
(:func:`gnnkit.partitioned.halo.with_halo`). Rows hold every in-edge of their node (the partition
stores whole CSR rows), so sum and mean aggregation equal the whole graph's. GCN's normalisation
``D^-1/2 (A + I) D^-1/2`` (Kipf and Welling, <https://arxiv.org/abs/1609.02907>) also needs the
degrees of the halo nodes, which their owners send once through the halo plan.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gnnkit.partitioned.halo import HaloPlan, halo_exchange, sorted_positions
from gnnkit.sparse import Adjacency


def local_columns(indices: Tensor, owned: Tensor, halo: Tensor) -> Tensor:
    """Global source ids -> local columns (owned nodes ``0..n-1``, halo nodes ``n..n+h-1``).

    Raises:
        ValueError: A source that is neither owned nor in the halo.
    """
    indices = indices.to(torch.int64)
    in_owned, is_owned = sorted_positions(owned.to(torch.int64), indices)
    in_halo, is_halo = sorted_positions(halo.to(torch.int64), indices)
    outside = ~(is_owned | is_halo)
    if bool(outside.any()):
        raise ValueError(f"indices: source {int(indices[outside][0])} is neither owned nor in the halo")
    return torch.where(is_owned, in_owned, owned.numel() + in_halo)


def local_adjacency(indptr: Tensor, indices: Tensor, owned: Tensor, halo: Tensor) -> Adjacency:
    """The partition's rows as an ``[num_owned, num_owned + num_halo]`` :class:`Adjacency`."""
    columns = local_columns(indices, owned, halo)
    return Adjacency(indptr.to(torch.int64), columns, num_cols=owned.numel() + halo.numel())


def whole_graph_degrees(adj: Adjacency, plan: HaloPlan) -> Tensor:
    """GCN's degree (in-degree without self loops, plus one) of every column: owned nodes from
    their rows, halo nodes from their owners. A collective the first time (every rank calls it);
    cached on ``adj``, so a sampled step later needs no exchange."""

    def build() -> Tensor:
        rows, cols = adj.rows(), adj.indices
        degree = torch.bincount(rows[rows != cols], minlength=adj.num_rows).to(torch.float32) + 1.0
        return torch.cat([degree, halo_exchange(degree.unsqueeze(1), plan.exact).squeeze(1)])

    return adj.cached("whole_graph_degrees", build)


def gcn_local_normalized(adj: Adjacency, plan: HaloPlan) -> Adjacency:
    """GCN's ``D^-1/2 (A + I) D^-1/2`` restricted to a partition's rows, with whole-graph degrees
    (:func:`whole_graph_degrees`); cached on ``adj``."""

    def build() -> Adjacency:
        n = adj.num_rows
        inv_sqrt = whole_graph_degrees(adj, plan).pow(-0.5)
        rows, cols = adj.rows(), adj.indices
        keep = rows != cols
        nodes = torch.arange(n, dtype=torch.int64)
        rows, cols = torch.cat([rows[keep], nodes]), torch.cat([cols[keep], nodes])
        order = torch.argsort(rows, stable=True)  # each row: its other entries, then its loop
        rows, cols = rows[order], cols[order]
        indptr = torch.zeros(n + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(rows, minlength=n), 0, out=indptr[1:])
        return Adjacency(indptr, cols, num_cols=adj.num_cols, values=inv_sqrt[rows] * inv_sqrt[cols], validate=False)

    return adj.cached("gcn_local_normalized", build)


def weighted_halo(adj: Adjacency, halo_weight: Tensor) -> Adjacency:
    """``adj`` with the entries of halo column ``j`` multiplied by ``halo_weight[j]`` (a new,
    single-use matrix: a sampled step's graph)."""
    column_weight = torch.cat([torch.ones(adj.num_rows, dtype=halo_weight.dtype), halo_weight])
    return Adjacency(adj.indptr, adj.indices, num_cols=adj.num_cols, values=adj.weights() * column_weight[adj.indices],
                     validate=False, single_use=True)

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


def gcn_local_normalized(adj: Adjacency, plan: HaloPlan) -> Adjacency:
    """GCN's ``D^-1/2 (A + I) D^-1/2`` restricted to a partition's rows, with whole-graph degrees.

    Each owned node's degree is its row length without self loops plus one (its loop), as
    :func:`gnnkit.sparse.normalize.gcn_normalized` counts; halo degrees come from their owners
    (a collective: every rank calls it).
    """
    return adj.cached("gcn_local_normalized", lambda: _gcn_local_normalized(adj, plan))


def _gcn_local_normalized(adj: Adjacency, plan: HaloPlan) -> Adjacency:
    n = adj.num_rows
    rows, cols = adj.rows(), adj.indices
    keep = rows != cols
    degree = torch.bincount(rows[keep], minlength=n).to(torch.float32) + 1.0
    all_degrees = torch.cat([degree, halo_exchange(degree.unsqueeze(1), plan).squeeze(1)])
    inv_sqrt = all_degrees.pow(-0.5)
    nodes = torch.arange(n, dtype=torch.int64)
    rows, cols = torch.cat([rows[keep], nodes]), torch.cat([cols[keep], nodes])
    order = torch.argsort(rows, stable=True)  # each row: its other entries, then its loop
    rows, cols = rows[order], cols[order]
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(rows, minlength=n), 0, out=indptr[1:])
    return Adjacency(indptr, cols, num_cols=adj.num_cols, values=inv_sqrt[rows] * inv_sqrt[cols], validate=False)

"""Gather-scatter over the edge list: PyG's default message passing path."""

from __future__ import annotations

import torch
from torch import Tensor

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats.base import SpmmFormat, register, weights_as


@register("gather_scatter")
class GatherScatterFormat(SpmmFormat):
    """Gather ``x[col]`` per edge, scale, and scatter-add into the rows (``index_add_``).

    Needs only the edge list (no conversion beyond the COO row array), but materialises an
    ``[nnz, F]`` message tensor. ``A^T @ x`` is the same walk the other way (gather ``x[row]``,
    scatter into the columns): PyG's backward, with no transpose built.
    """

    conversion_free = True
    transpose_free = True

    def convert(self, adj: Adjacency, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
        weights = None if adj.values is None else weights_as(adj, dtype).unsqueeze(1)
        return adj.rows(), weights

    def multiply(self, state: tuple[Tensor, Tensor | None], adj: Adjacency, x: Tensor) -> Tensor:
        rows, weights = state
        messages = x.index_select(0, adj.indices)
        if weights is not None:
            messages = messages * weights
        return x.new_zeros(adj.num_rows, x.size(1)).index_add_(0, rows, messages)

    def multiply_transposed(self, state: tuple[Tensor, Tensor | None], adj: Adjacency, x: Tensor) -> Tensor:
        rows, weights = state
        messages = x.index_select(0, rows)
        if weights is not None:
            messages = messages * weights
        return x.new_zeros(adj.num_cols, x.size(1)).index_add_(0, adj.indices, messages)

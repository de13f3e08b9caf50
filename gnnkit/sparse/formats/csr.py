"""torch's CSR layout: ``torch.sparse.mm`` on a ``sparse_csr_tensor`` sharing the adjacency's arrays."""

from __future__ import annotations

import torch
from torch import Tensor

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats.base import SpmmFormat, register, weights_as


def csr_tensor(adj: Adjacency, dtype: torch.dtype) -> Tensor:
    """``adj`` as a torch ``sparse_csr`` tensor (no copy of ``indptr``/``indices``)."""
    return torch.sparse_csr_tensor(adj.indptr, adj.indices, weights_as(adj, dtype), adj.shape,
                                   check_invariants=False)


@register("csr")
class CSRFormat(SpmmFormat):
    """Compressed sparse rows, torch's row-parallel CSR kernel.

    With :func:`~gnnkit.sparse.spmm`'s backward through the cached transpose (itself CSR), this
    is "CSR with cached transpose", the strong always-CSR baseline.
    """

    conversion_free = True
    narrow_on = ("cuda",)  # cuSPARSE multiplies half/bfloat16; torch's CPU (MKL) path does not

    def convert(self, adj: Adjacency, dtype: torch.dtype) -> Tensor:
        return csr_tensor(adj, dtype)

    def multiply(self, state: Tensor, adj: Adjacency, x: Tensor) -> Tensor:
        return torch.sparse.mm(state, x)

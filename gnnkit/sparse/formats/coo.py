"""torch's COO layout: ``torch.sparse.mm`` on a coalesced ``sparse_coo_tensor``."""

from __future__ import annotations

import torch
from torch import Tensor

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats.base import SpmmFormat, register, weights_as


@register("coo")
class COOFormat(SpmmFormat):
    """Coordinate list ``(row, col, value)``, rows sorted: torch's COO ``sparse.mm`` kernel."""

    # torch's CUDA COO product has no half/bfloat16 kernel (pytorch#144040), and its CPU one adds in 16 bits
    # (12x csr's error on a 2,000-entry row)
    narrow_on = ()

    def convert(self, adj: Adjacency, dtype: torch.dtype) -> Tensor:
        index = torch.stack([adj.rows(), adj.indices])
        coo = torch.sparse_coo_tensor(index, weights_as(adj, dtype), adj.shape, check_invariants=False)
        return coo.coalesce()  # sums duplicates; the CSR is row-sorted, so this is a cheap pass

    def multiply(self, state: Tensor, adj: Adjacency, x: Tensor) -> Tensor:
        return torch.sparse.mm(state, x)

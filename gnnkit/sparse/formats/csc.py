"""torch's CSC layout: the CSR arrays of the transpose read as compressed columns of ``A``."""

from __future__ import annotations

import torch
from torch import Tensor

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats.base import SpmmFormat, register, weights_as


@register("csc")
class CSCFormat(SpmmFormat):
    """Compressed sparse columns (built from the cached transpose), torch's CSC ``sparse.mm``."""

    devices = ("cpu",)  # CUDA: cuSPARSE serves CSR (format 'csr'), not a CSC product
    narrow_on = ()  # MKL: float32/float64 only

    def convert(self, adj: Adjacency, dtype: torch.dtype) -> Tensor:
        t = adj.t()
        return torch.sparse_csc_tensor(t.indptr, t.indices, weights_as(t, dtype), adj.shape,
                                       check_invariants=False)

    def multiply(self, state: Tensor, adj: Adjacency, x: Tensor) -> Tensor:
        return torch.sparse.mm(state, x)

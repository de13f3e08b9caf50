"""Dense matrix product, for small or dense-ish adjacencies."""

from __future__ import annotations

import torch
from torch import Tensor

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats.base import SpmmFormat, register

#: Largest ``num_rows * num_cols`` held densely (float32: 64 MiB).
MAX_DENSE_ELEMENTS = 1 << 24
#: Matrices up to this many elements are always eligible; larger ones need density >= 1/64.
SMALL_DENSE_ELEMENTS = 1 << 20
MIN_DENSITY = 1 / 64


@register("dense")
class DenseFormat(SpmmFormat):
    """The adjacency as a dense matrix and a BLAS ``mm``.

    Only for small matrices (``rows * cols <= 2**20``) or dense-ish ones (up to ``2**24``
    elements with density >= 1/64): otherwise BLAS multiplies mostly zeros.
    """

    def applicable(self, adj: Adjacency) -> bool:
        elements = adj.num_rows * adj.num_cols
        return elements <= SMALL_DENSE_ELEMENTS or (
            elements <= MAX_DENSE_ELEMENTS and adj.nnz >= MIN_DENSITY * elements)

    def convert(self, adj: Adjacency, dtype: torch.dtype) -> Tensor:
        return adj.to_dense(dtype)

    def multiply(self, state: Tensor, adj: Adjacency, x: Tensor) -> Tensor:
        return state @ x

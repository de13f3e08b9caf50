"""torch's block-sparse-row layout with ``b x b`` dense blocks, converted by gnnkit's own code.

torch's ``Tensor.to_sparse_bsr`` is far too slow for graph-sized matrices (minutes for 1M
entries), so :func:`csr_to_bsr` builds the blocks with one sort and one scatter.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats.base import SpmmFormat, register, weights_as

#: Most dense block values a BSR conversion may allocate (float32: 256 MiB).
MAX_BLOCK_VALUES = 1 << 26
#: Least share of a stored block's slots holding entries for BSR to be considered at all...
MIN_BLOCK_FILL = 1 / 8
#: ...unless the blocks are this small anyway (float32: 256 KiB).
SMALL_BLOCK_VALUES = 1 << 16


def block_keys(adj: Adjacency, block: int) -> tuple[Tensor, int]:
    """Row-major block id of every entry and the number of block columns."""
    block_cols = -(-adj.num_cols // block)
    return (adj.rows() // block) * block_cols + adj.indices // block, block_cols


def count_blocks(adj: Adjacency, block: int) -> int:
    """Number of non-empty ``block x block`` blocks (one sort of the block ids, cached on ``adj``)."""
    return adj.cached(f"blocks:{block}", lambda: int(torch.unique(block_keys(adj, block)[0]).numel()))


def csr_to_bsr(adj: Adjacency, block: int, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor, Tensor]:
    """Vectorised CSR -> BSR conversion (duplicates summed), padding the shape to whole blocks.

    Args:
        adj: The matrix.
        block: Block edge ``b``.
        dtype: Value dtype.

    Returns:
        ``(crow_indices [R_b + 1], col_indices [nblocks], values [nblocks, b, b])`` where
        ``R_b = ceil(num_rows / b)``; block columns are sorted within each block row.
    """
    keys, block_cols = block_keys(adj, block)
    unique, inverse = torch.unique(keys, sorted=True, return_inverse=True)
    values = torch.zeros(unique.numel(), block, block, dtype=dtype, device=adj.device)
    values.index_put_((inverse, adj.rows() % block, adj.indices % block), weights_as(adj, dtype),
                      accumulate=True)
    block_rows = -(-adj.num_rows // block)
    counts = torch.bincount(unique // block_cols, minlength=block_rows)
    crow = torch.zeros(block_rows + 1, dtype=torch.int64, device=adj.device)
    torch.cumsum(counts, 0, out=crow[1:])
    return crow, unique % block_cols, values


class BSRFormat(SpmmFormat):
    """Block sparse rows with ``block x block`` dense blocks, torch's BSR ``matmul``.

    Pays off when entries cluster into dense blocks (banded matrices, communities after
    reordering). Refuses matrices whose blocks would hold more than ``2**26`` values, or more
    than ``2**16`` values while less than :data:`MIN_BLOCK_FILL` full (BSR then multiplies
    mostly zeros); deciding this counts the blocks once (cached).
    """

    #: CPU only: on CUDA, cuSPARSE's CSR ('csr') and the native kernels serve these matrices.
    devices = ("cpu",)
    narrow_on = ()  # torch's BSR product runs through MKL: float32/float64 only

    block: int = 4

    def applicable(self, adj: Adjacency) -> bool:
        if adj.nnz * self.block * self.block * MIN_BLOCK_FILL <= MAX_BLOCK_VALUES:
            values = count_blocks(adj, self.block) * self.block * self.block
        else:  # even a perfectly packed matrix would be too large: skip the count
            return False
        return values <= SMALL_BLOCK_VALUES or (values <= MAX_BLOCK_VALUES and adj.nnz >= MIN_BLOCK_FILL * values)

    def convert(self, adj: Adjacency, dtype: torch.dtype) -> Tensor:
        b = self.block
        crow, col, values = csr_to_bsr(adj, b, dtype)
        padded = (-(-adj.num_rows // b) * b, -(-adj.num_cols // b) * b)
        return torch.sparse_bsr_tensor(crow, col, values, padded, check_invariants=False)

    def multiply(self, state: Tensor, adj: Adjacency, x: Tensor) -> Tensor:
        pad = state.shape[1] - adj.num_cols
        if pad:
            x = torch.cat([x, x.new_zeros(pad, x.size(1))])
        out = state @ x
        return out[: adj.num_rows] if state.shape[0] != adj.num_rows else out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(block={self.block})"


@register("bsr4")
class BSR4Format(BSRFormat):
    """BSR with 4 x 4 blocks."""

    block = 4


@register("bsr16")
class BSR16Format(BSRFormat):
    """BSR with 16 x 16 blocks."""

    block = 16

"""The bipartite blocks of one neighbour-sampled batch, cut from one row pointer.

gnnkit's sampler emits a batch's edges hop by hop, each hop's by destination in node order, so every
layer's block (DGL's term: the ``[N_dst, N_src]`` matrix one layer aggregates over) is a prefix of
the batch: its rows are the first ``N_dst`` nodes and its entries the first ``nnz`` edges. The
per-row entry counts, the mean's row scale and the unit entry weights of every block are then
prefixes of the batch's own, made once a step (when a layer first asks for them) instead of once a
block: fewer kernels on a GPU, where a sampled step is bound by the host issuing them.
"""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

from gnnkit.sparse import Adjacency
from gnnkit.sparse.adjacency import indptr_of


class SampledBlocks:
    """A batch's row pointer and the arrays its blocks share (each made on first use).

    Args:
        edge_index: ``[2, E]`` (source, destination) edges, destinations non-decreasing.
        num_nodes: Nodes of the batch (rows of the row pointer).
    """

    def __init__(self, edge_index: Tensor, num_nodes: int) -> None:
        self.sources, self.destinations = edge_index[0], edge_index[1]
        self.row_ptr = indptr_of(self.destinations, num_nodes)

    @cached_property
    def counts(self) -> Tensor:
        """Entries per row of the batch (a block's are its first rows')."""
        return self.row_ptr.diff()

    @cached_property
    def inv_counts(self) -> Tensor:
        """``1 / max(count, 1)`` as float32 ``[num_nodes, 1]``."""
        return self.counts.clamp(min=1).to(torch.float32).reciprocal_().unsqueeze(1)

    @cached_property
    def ones(self) -> Tensor:
        """A unit weight per edge, float32."""
        return torch.ones(self.sources.numel(), dtype=torch.float32, device=self.sources.device)

    def block(self, num_dst: int, nnz: int, num_src: int) -> Adjacency:
        """The block of the first ``num_dst`` rows and ``nnz`` entries over ``num_src`` source nodes."""
        return _Block(self, num_dst, nnz, num_src)


class _Block(Adjacency):
    """A single-use :class:`~gnnkit.sparse.Adjacency` whose per-row arrays are views of its batch's."""

    def __init__(self, batch: SampledBlocks, num_dst: int, nnz: int, num_src: int) -> None:
        super().__init__(batch.row_ptr[: num_dst + 1], batch.sources[:nnz], num_cols=num_src, validate=False,
                         single_use=True)
        self._batch = batch
        self._cache["rows"] = batch.destinations[:nnz]  # its entries' rows, in order

    def row_counts(self) -> Tensor:
        return self.cached("row_counts", lambda: self._batch.counts[: self.num_rows])

    def inv_row_counts(self) -> Tensor:
        return self.cached("inv_row_counts", lambda: self._batch.inv_counts[: self.num_rows])

    def weights(self) -> Tensor:
        if self.values is not None:
            return self.values
        return self.cached("ones", lambda: self._batch.ones[: self.nnz])

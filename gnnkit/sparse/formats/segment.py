"""Segment reduction over CSR: gather per edge, then ``torch.segment_reduce`` per row."""

from __future__ import annotations

import torch
from torch import Tensor

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats.base import SpmmFormat, register, weights_as


@register("segment")
class SegmentFormat(SpmmFormat):
    """Gather ``x[col]`` per edge and sum contiguous row segments given by ``indptr``.

    No scatter (no atomics or sorting): every row's messages are contiguous in CSR order.
    """

    conversion_free = True
    narrow_on = ()  # torch.segment_reduce adds 16-bit values in 16 bits: 42x csr's error on a 2,000-entry row

    def convert(self, adj: Adjacency, dtype: torch.dtype) -> Tensor | None:
        return None if adj.values is None else weights_as(adj, dtype).unsqueeze(1)

    def multiply(self, state: Tensor | None, adj: Adjacency, x: Tensor) -> Tensor:
        messages = x.index_select(0, adj.indices)
        if state is not None:
            messages = messages * state
        return torch.segment_reduce(messages, "sum", offsets=adj.indptr, axis=0)

"""All-gather top-k sparsification with error feedback, the baseline TopKA2A improves on."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.futures import Future

from gnnkit.comm.base import Slot, all_gather_single, read_on_this_stream
from gnnkit.comm.residuals import ErrorFeedback
from gnnkit.comm.sparse import pack, reusable_output, scratch_of, topk_count, topk_indices, unpack


class TopKAllGather(ErrorFeedback):
    """Each rank sends its top-k gradients (values and indices packed in one tensor) to all others
    with one all-gather; every rank sums what it received.

    Top-k sparsification with error feedback as in "Sparsified SGD with Memory" (Stich et al.,
    NeurIPS 2018, <https://arxiv.org/abs/1809.07599>) and Deep Gradient Compression (Lin et al.,
    ICLR 2018, <https://arxiv.org/abs/1712.01887>). Per rank it receives ``2k(P-1)`` values, growing
    with the number of ranks ``P``; :class:`~gnnkit.comm.topk_a2a.TopKA2A` does not.

    Args:
        density: Fraction of each bucket sent (0 < density <= 1).
    """

    name = "topk_allgather"
    bucket_dependent = True

    def __init__(self, density: float = 0.01) -> None:
        super().__init__()
        if not 0.0 < density <= 1.0:
            raise ValueError(f"density must be in (0, 1], got {density}")
        self.density = density

    def launch(self, flat: Tensor, layout: list[Slot]) -> Future[Tensor]:
        p, n = self.world_size, flat.numel()
        acc = self.residuals.add_to(flat, layout)
        k = topk_count(n, self.density)
        idx = topk_indices(acc, k, scratch=scratch_of(flat))  # flat's values now live in acc
        payload = pack(acc[idx], idx)
        acc[idx] = 0.0
        self.residuals.store(acc, layout)
        gathered = torch.empty(p * payload.numel(), dtype=payload.dtype, device=payload.device)
        self.bytes_sent += payload.numel() * 4 * (p - 1)
        work = all_gather_single(gathered, payload, group=self.group, async_op=True)

        def reduce(_: Future) -> Tensor:
            read_on_this_stream(gathered)
            values, indices = unpack(gathered.view(p, -1))
            out = reusable_output(flat)
            out.index_add_(0, indices.flatten(), values.flatten())
            return out.div_(p).to(flat.dtype)

        return work.get_future().then(reduce)

    def info(self) -> dict[str, Any]:
        return {**super().info(), "density": self.density}

    def extra_repr(self) -> str:
        return f"density={self.density}"

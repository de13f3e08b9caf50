"""DeAR: reduce-scatter during backward, all-gather before the next forward."""

from __future__ import annotations

import math
from typing import Any

import torch.distributed as dist
import torch
from torch import Tensor, nn
from torch.futures import Future

from gnnkit.comm.base import Communicator, Slot, all_gather_single, completed, reduce_scatter_single


class DeAR(Communicator):
    """All-reduce decoupled into reduce-scatter and all-gather, from "DeAR: Accelerating
    Distributed Deep Learning with Fine-Grained All-Reduce Pipelining" (Zhang, Shi, Tang, Chu, Li,
    ICDCS 2023, <https://arxiv.org/abs/2302.12445>).

    :meth:`launch` (called from DDP's gradient hook as each bucket becomes ready during backward)
    starts the bucket's reduce-scatter and hands DDP the local gradient unchanged. After backward
    (:meth:`finish_backward`) each reduce-scatter is awaited and its all-gather started; the
    all-gathers run while the training loop moves on (callbacks, logging, the next batch) and are
    awaited only by :meth:`apply`, right before the next forward, which writes the averaged
    gradients into ``.grad``. :class:`~gnnkit.comm.strategy.GnnkitStrategy` defers the optimizer
    step to that point and replays it with the optimizer settings (learning rate, ...) of the step
    it belongs to, so updates are exactly DDP's, one loop iteration later in wall time. The paper
    also overlaps the all-gather layer by layer with the forward pass, which needs a per-layer
    optimizer; here it overlaps with everything between two forwards.
    """

    name = "dear"

    def __init__(self) -> None:
        super().__init__()
        self.scatter_by_alltoall = False
        self._scatters: list[tuple[Any, Tensor, int, list[Slot]]] = []
        self._gathers: list[tuple[Any, Tensor, int, list[Slot]]] = []

    def setup(self, group: dist.ProcessGroup | None) -> None:
        """Bind to ``group``; on gloo, reduce-scatter runs as AlltoAll plus a local sum (gloo's own
        reduce-scatter takes about twice as long as its all-reduce of the whole tensor)."""
        super().setup(group)
        self.scatter_by_alltoall = dist.get_backend(group) == "gloo"

    def launch(self, flat: Tensor, layout: list[Slot]) -> Future[Tensor]:
        p, n = self.world_size, flat.numel()
        shard = math.ceil(n / p)
        padded = flat.new_zeros(shard * p)
        torch.div(flat, p, out=padded[:n])
        if self.scatter_by_alltoall:  # row i of `out`: rank i's contribution to my shard
            out = flat.new_empty(p, shard)
            work = dist.all_to_all_single(out, padded, group=self.group, async_op=True)
        else:
            out = flat.new_empty(shard)
            work = reduce_scatter_single(out, padded, group=self.group, async_op=True)
        self._scatters.append((work, out, n, layout))
        self.bytes_sent += 2 * shard * (p - 1) * flat.element_size()
        return completed(flat)

    def finish_backward(self) -> None:
        """Wait for this step's reduce-scatters and start their all-gathers."""
        scatters, self._scatters = self._scatters, []
        for work, out, n, layout in scatters:
            work.wait()
            if out.dim() == 2:
                out = out.sum(dim=0)
            full = out.new_empty(out.numel() * self.world_size)
            gather = all_gather_single(full, out, group=self.group, async_op=True)
            self._gathers.append((gather, full, n, layout))

    @property
    def pending(self) -> bool:
        """Whether averaged gradients are in flight (launched and not yet applied)."""
        return bool(self._scatters or self._gathers)

    def apply(self, module: nn.Module) -> None:
        """Wait for the all-gathers and write the averaged gradients into ``module``'s ``.grad``."""
        self.finish_backward()
        params = dict(module.named_parameters())
        gathers, self._gathers = self._gathers, []
        for work, full, n, layout in gathers:
            work.wait()
            for slot in layout:
                param = params[slot.name]
                value = full[slot.offset:slot.offset + slot.numel].view(slot.shape)
                if param.grad is None:
                    param.grad = value.to(param.dtype).clone()
                else:
                    param.grad.copy_(value)

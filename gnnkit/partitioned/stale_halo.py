"""Stale halo exchange (PipeGCN): each layer trains on the halo rows of the previous step.

Wan et al., "PipeGCN: Efficient Full-Graph Training of Graph Convolutional Networks with Pipelined
Feature Communication", ICLR 2022 (<https://arxiv.org/abs/2203.10428>): a step sends its halo rows
(forward) and halo gradients (backward) without waiting for them, and uses those that the previous
step sent, so communication overlaps computation; the features and gradients are one step stale,
which the paper bounds and finds harmless for convergence. The first step exchanges synchronously
(there is nothing older to use); evaluation always exchanges exactly
(:func:`gnnkit.partitioned.halo.halo_exchange`). The stale buffers are not checkpointed: a resumed
run starts with one synchronous step again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor

from gnnkit.partitioned.halo import HaloPlan


@dataclass
class _InFlight:
    """An all-to-all sent without waiting, and the buffer it fills."""

    work: dist.Work | None
    buffer: Tensor

    def result(self) -> Tensor:
        if self.work is not None:
            self.work.wait()
        return self.buffer


def _start(rows: Tensor, out_counts: list[int], in_counts: list[int], group: dist.ProcessGroup | None) -> _InFlight:
    buffer = rows.new_empty((sum(out_counts), *rows.shape[1:]))
    if len(out_counts) == 1:
        return _InFlight(None, buffer)
    work = dist.all_to_all_single(buffer, rows.contiguous(), out_counts, in_counts, group=group, async_op=True)
    return _InFlight(work, buffer)


@dataclass
class _LayerState:
    halo: Tensor | None = None  # halo rows received for the previous step
    grad: Tensor | None = None  # gradients of owned rows that other ranks sent for the previous step
    forward: _InFlight | None = None
    backward: _InFlight | None = None


@dataclass
class StaleHalo:
    """Per-layer buffers of a PipeGCN run (one object for the whole run; training steps only)."""

    plan: HaloPlan
    layers: dict[int, _LayerState] = field(default_factory=dict)

    def exchange(self, owned_rows: Tensor, layer: int) -> Tensor:
        """Layer ``layer``'s halo rows: last step's, while this step's are sent (a collective)."""
        return _StaleExchange.apply(owned_rows, self, self.layers.setdefault(layer, _LayerState()))

    def drain(self) -> None:
        """Wait for the exchanges still in flight, keeping what they bring for the next step."""
        for state in self.layers.values():
            if state.forward is not None:
                state.halo, state.forward = self._halo(state.forward.result()), None
            if state.backward is not None:
                state.grad, state.backward = self._owned_grad(state.backward.result()), None

    def _halo(self, received: Tensor) -> Tensor:
        halo = received.new_empty((self.plan.num_halo, *received.shape[1:]))
        halo[self.plan.recv_positions] = received
        return halo

    def _owned_grad(self, returned: Tensor) -> Tensor:
        grad = returned.new_zeros((self.plan.num_owned, *returned.shape[1:]))
        return grad.index_add_(0, self.plan.send_index, returned)


class _StaleExchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, owned_rows: Tensor, stale: StaleHalo, state: _LayerState) -> Tensor:  # type: ignore[override]
        plan = stale.plan
        ctx.stale, ctx.state = stale, state
        if state.forward is not None:
            state.halo = stale._halo(state.forward.result())
        state.forward = _start(owned_rows.detach()[plan.send_index], plan.recv_counts, plan.send_counts, plan.group)
        if state.halo is None:  # the first step: wait for this one
            state.halo = stale._halo(state.forward.result())
            state.forward = None
        return state.halo.clone()

    @staticmethod
    def backward(ctx, grad_halo: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        stale, state = ctx.stale, ctx.state
        plan = stale.plan
        if state.backward is not None:
            state.grad = stale._owned_grad(state.backward.result())
        state.backward = _start(grad_halo[plan.recv_positions], plan.send_counts, plan.recv_counts, plan.group)
        if state.grad is None:
            state.grad = stale._owned_grad(state.backward.result())
            state.backward = None
        return state.grad.clone(), None, None

r"""A cache of decompressed hot rows that is exact after every optimizer step.

TT-Rec (<https://arxiv.org/abs/2101.11714>) keeps the most frequently used rows decompressed, and
FALCON (Qiu, Xia and Wang, IPDPS 2025) caches the intermediate results of high-degree nodes.
:class:`HotRowCache` does both for a fixed set of hot rows (e.g. the highest-degree nodes): it
keeps every level of their prefix contraction, computed once per version of the cores, and serves
them to the forward pass; the backward pass reuses the cached levels (:func:`contract_backward`) to
give the cores their exact dense gradients.

Consistency: before serving, the cache compares the cores with the snapshot it was built from
(``torch.equal``, ``O(num_params)``, negligible next to a lookup) and rebuilds when anything
differs. Any optimizer (including fused kernels that do not bump tensor version counters),
``load_state_dict`` or manual edits are therefore caught: a stale row is never served.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from gnnkit.tt.lookup import PrefixPlan, contract, contract_backward, prefix_plan


class _CachedRows(torch.autograd.Function):
    """Returns the cached hot rows; backward runs the TT chain rule on the cached levels."""

    @staticmethod
    def forward(ctx: Any, plan: PrefixPlan, levels: list[Tensor], *cores: Tensor) -> Tensor:
        ctx.plan, ctx.levels = plan, levels
        ctx.save_for_backward(*cores)  # autograd then rejects cores modified before backward
        return levels[-1].reshape(levels[-1].shape[0], levels[-1].shape[1]).clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        cores = ctx.saved_tensors
        grads = contract_backward(cores, ctx.plan, ctx.levels, grad.contiguous())
        return (None, None, *grads)


class HotRowCache:
    """Decompressed rows (and their partial products) of a fixed set of TT rows.

    Args:
        rows: TT row ids to keep, int64 ``[H]`` (deduplicated and sorted here).
        p_shapes: Row factorisation of the table.

    Attributes:
        rows: The cached row ids, sorted.
        refreshes: How many times the levels were (re)computed.
    """

    def __init__(self, rows: Tensor, p_shapes: Sequence[int]) -> None:
        self.rows = torch.unique(rows.to(torch.int64))
        self.p_shapes = tuple(p_shapes)
        self.plan = prefix_plan(self.rows, self.p_shapes)
        self.refreshes = 0
        self._snapshot: list[Tensor] | None = None
        self._levels: list[Tensor] | None = None

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(rows={self.rows.numel()}, p_shapes={self.p_shapes})"

    def __len__(self) -> int:
        return int(self.rows.numel())

    def to(self, device: torch.device) -> HotRowCache:
        """Move the row ids and plan to ``device`` (drops the cached values)."""
        self.rows = self.rows.to(device)
        self.plan = PrefixPlan([d.to(device) for d in self.plan.digits],
                               [None if p is None else p.to(device) for p in self.plan.parents])
        self.invalidate()
        return self

    def invalidate(self) -> None:
        """Drop the cached values; the next use recomputes them."""
        self._snapshot, self._levels = None, None

    def is_fresh(self, cores: Sequence[Tensor]) -> bool:
        """Whether the cached values were computed from exactly these core values."""
        snap = self._snapshot
        return snap is not None and len(snap) == len(cores) and all(
            s.dtype == c.dtype and s.device == c.device and torch.equal(s, c.detach()) for s, c in zip(snap, cores)
        )

    def levels(self, cores: Sequence[Tensor]) -> list[Tensor]:
        """Every level's partial products of the hot rows, recomputed if the cores changed."""
        if self._levels is None or not self.is_fresh(cores):
            with torch.no_grad():
                detached = [c.detach() for c in cores]
                self._levels = contract(detached, self.plan, keep_levels=True)  # type: ignore[assignment]
                self._snapshot = [c.clone() for c in detached]
            self.refreshes += 1
        return self._levels  # type: ignore[return-value]

    def values(self, cores: Sequence[Tensor]) -> Tensor:
        """The hot rows ``[H, embedding_dim]``, differentiable with respect to ``cores``."""
        levels = self.levels(cores)
        if torch.is_grad_enabled() and any(c.requires_grad for c in cores):
            return _CachedRows.apply(self.plan, levels, *cores)
        return levels[-1].reshape(len(self), levels[-1].shape[1])

    def match(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        """``(is_hot [B] bool, slot [B] int64)``: which of ``rows`` are cached, and where."""
        if len(self) == 0:
            return torch.zeros_like(rows, dtype=torch.bool), torch.zeros_like(rows)
        slot = torch.searchsorted(self.rows, rows).clamp_(max=len(self) - 1)
        return self.rows.index_select(0, slot) == rows, slot

    def memory_bytes(self) -> int:
        """Bytes held: row ids, plan, cached levels and the core snapshot."""
        tensors = [self.rows, *self.plan.digits, *(p for p in self.plan.parents if p is not None)]
        tensors += list(self._levels or []) + list(self._snapshot or [])
        return sum(t.numel() * t.element_size() for t in tensors)

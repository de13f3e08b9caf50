"""Evaluation loaders' shares of a split on several ranks, none of its items twice.

Lightning gives every loader of a distributed run a ``DistributedSampler``, which pads the split
with repeated items until every rank holds as many: the gathered predictions then held up to
``ranks - 1`` items twice (a graph of molhiv's test split on 2 ranks), and ``trainer.test`` warned
so. Evaluation needs no equal shares: gnnkit logs its losses and metrics at the epoch's end, and
Lightning's own ``UnrepeatedDistributedSampler`` (its prediction sampler) deals rank ``r`` the
items ``r, r + ranks, ...``.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler


def eval_shards(num_items: int, limit: float | int = 1.0) -> UnrepeatedDistributedSampler | None:
    """This rank's share of ``num_items`` evaluation items (positions), every item on one rank; ``None``
    outside a distributed run, when the split has fewer items than ranks (each rank needs a batch:
    DDP syncs buffers at the first evaluation step), and under a fractional batch ``limit`` (the
    trainer's ``limit_val_batches``/``limit_test_batches``), which could leave one rank no batch."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    if num_items < dist.get_world_size() or (isinstance(limit, float) and limit != 1.0):
        return None
    return UnrepeatedDistributedSampler(range(num_items), shuffle=False)


def eval_limit(trainer: Any, stage: str) -> float | int:
    """The trainer's batch limit of an evaluation ``stage`` (``"val"``, ``"test"``; 1.0 without one)."""
    return getattr(trainer, f"limit_{stage}_batches", 1.0) if trainer is not None else 1.0

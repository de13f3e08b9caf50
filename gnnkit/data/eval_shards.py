"""Evaluation loaders' shares of a split on several ranks, none of its items twice.

Lightning gives every loader of a distributed run a ``DistributedSampler``, which pads the split
with repeated items until every rank holds as many: the gathered predictions then held up to
``ranks - 1`` items twice (a graph of molhiv's test split on 2 ranks), and ``trainer.test`` warned
so. Evaluation needs no equal shares: gnnkit logs its losses and metrics at the epoch's end, and
Lightning's own ``UnrepeatedDistributedSampler`` (its prediction sampler) deals rank ``r`` the
items ``r, r + ranks, ...``.
"""

from __future__ import annotations

import torch.distributed as dist
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler


def eval_shards(num_items: int) -> UnrepeatedDistributedSampler | None:
    """This rank's share of ``num_items`` evaluation items (positions), every item on one rank; ``None``
    outside a distributed run, and when the split has fewer items than ranks (each rank needs a
    batch: DDP syncs buffers at the first evaluation step)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    if num_items < dist.get_world_size():
        return None
    return UnrepeatedDistributedSampler(range(num_items), shuffle=False)

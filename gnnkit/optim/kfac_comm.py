"""K-FAC's communication on 2+ ranks: D-KFAC and SPD-KFAC.

Shi, Zhang, Li, "Accelerating Distributed K-FAC with Smart Parallelism of Computing and
Communication Tasks", ICDCS 2021, <https://arxiv.org/abs/2107.06533> (reference code
lzhangbv/kfac_pytorch). Every rank computes its factors on its own rows; the factors are averaged by
all-reduce (so the ranks hold the global batch's factors), each layer's inverse is computed on one
owner rank and broadcast from it. Owners are placed by cost: layers sorted by ``d_A^3 + d_G^3``
(descending), each given to the rank with the least work so far (greedy longest processing time).
With ``kfac_pipeline`` the optimizer launches each factor's all-reduce from its hook as soon as it is
ready (``A`` after the layer's forward, ``G`` in its backward), overlapping the rest of the
backward pass (SPD-KFAC's pipelining), and on steps that invert nothing it waits for them only at the
start of the next step, so they also overlap the preconditioning and the parameter update; otherwise
all are launched after backward and waited for at once (D-KFAC).

The factors travel on their own process group so that their asynchronous collectives never
interleave with DDP's gradient buckets on the default group.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch.distributed as dist
from torch import Tensor


def distributed_world() -> int:
    """World size of the initialised default process group (1 outside distributed runs)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def owner_ranks(costs: Sequence[float], world: int) -> list[int]:
    """Owner rank of each item by greedy longest processing time: the costliest first, each to the
    least loaded rank (the lowest rank on ties)."""
    if world < 1:
        raise ValueError(f"owner_ranks.world: expected >= 1, got {world}")
    load = [0.0] * world
    owners = [0] * len(costs)
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        rank = min(range(world), key=lambda r: (load[r], r))
        owners[index] = rank
        load[rank] += costs[index]
    return owners


class FactorComm:
    """Averaging and broadcasting of K-FAC state across the ranks of a process group.

    Args:
        owners: Owner rank of each layer's inverse.
        group: Process group the factors travel on.
    """

    def __init__(self, owners: list[int], group: Any) -> None:
        self.owners = owners
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self._pending: list[Any] = []

    @classmethod
    def create(cls, costs: Sequence[float]) -> "FactorComm | None":
        """The communicator for layers of inversion ``costs``, or ``None`` on one rank (collective:
        every rank must call it, in the same order relative to other group creations)."""
        world = distributed_world()
        if world < 2:
            return None
        group = dist.new_group(ranks=list(range(world)))
        return cls(owner_ranks(costs, world), group)

    def owns(self, index: int) -> bool:
        """Whether this rank inverts layer ``index``."""
        return self.owners[index] == self.rank

    def reduce_async(self, tensor: Tensor) -> None:
        """Start averaging ``tensor`` in place across the ranks (complete after :meth:`wait`)."""
        tensor.div_(self.world)
        self._pending.append(dist.all_reduce(tensor, group=self.group, async_op=True))

    def broadcast_async(self, tensors: list[Tensor], index: int) -> None:
        """Start broadcasting layer ``index``'s ``tensors`` from its owner (complete after :meth:`wait`)."""
        src = dist.get_global_rank(self.group, self.owners[index])
        for tensor in tensors:
            self._pending.append(dist.broadcast(tensor, src=src, group=self.group, async_op=True))

    def detach(self) -> list[Any]:
        """The collectives started since the last :meth:`wait` or :meth:`detach`, handed to the
        caller to wait for later (:meth:`wait` no longer waits for them)."""
        works, self._pending = self._pending, []
        return works

    def wait(self, works: list[Any] | None = None) -> None:
        """Wait for ``works`` (from :meth:`detach`), or else every collective started since the last
        wait or detach."""
        if works is None:
            works, self._pending = self._pending, []
        for work in works:
            work.wait()

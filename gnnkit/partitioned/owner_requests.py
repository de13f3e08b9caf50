"""Asking the owners of remote nodes: ids out to their owner ranks, answers back, with all-to-alls.

Distributed sampling (DistDGL, Zheng et al., <https://arxiv.org/abs/2010.05337>) keeps each node's
neighbour list and features on the rank that owns it; a rank that needs them for nodes it does not
own sends the ids, grouped by owner, and the owners send back their answers. :class:`OwnerRequests`
is one such round: :meth:`OwnerRequests.exchange` delivers the ids (two ``all_to_all_single``: the
counts, then the ids), :meth:`~OwnerRequests.received_rows` returns one row per id and
:meth:`~OwnerRequests.answer_lists` a list of any length per id (two more: the lengths, then the
values). Every rank of the group takes part in every call, asking or not.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from gnnkit.partitioned.halo import all_to_all_rows


def world_and_rank(group: dist.ProcessGroup | None = None) -> tuple[int, int]:
    """``(world size, rank)`` of ``group``, ``(1, 0)`` outside a distributed run."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(group), dist.get_rank(group)
    return 1, 0


@dataclass
class OwnerRequests:
    """One round of questions to owner ranks, agreed by all ranks of the group.

    Attributes:
        order: Positions of the asked ids, grouped by owner (the order they travel in).
        asked_counts: Ids this rank asks each rank.
        requested: Global ids the ranks ask this rank about, grouped by asking rank.
        requested_counts: Ids each rank asks this rank.
        group: The process group (``None``: the default group).
    """

    order: Tensor
    asked_counts: list[int]
    requested: Tensor
    requested_counts: list[int]
    group: dist.ProcessGroup | None = None

    @classmethod
    def exchange(cls, ids: Tensor, owners: Tensor, group: dist.ProcessGroup | None = None,
                 wire: torch.dtype = torch.int64) -> OwnerRequests:
        """Send ``ids`` to their ``owners`` and receive what the others ask (a collective).

        Args:
            ids: Global ids this rank asks about, int64 ``[K]`` (none of its own).
            owners: The owner rank of each id.
            group: Process group (default: the default group).
            wire: The integer dtype the ids travel in (int32 halves the bytes when every id fits,
                :attr:`NodeDirectory.id_dtype <gnnkit.partitioned.node_directory.NodeDirectory.id_dtype>`);
                :attr:`requested` is int64 either way.

        Raises:
            ValueError: An owner outside the group, or this rank itself.
        """
        world, rank = world_and_rank(group)
        owners = owners.to(torch.int64)
        if owners.numel() and (int(owners.min()) < 0 or int(owners.max()) >= world or bool((owners == rank).any())):
            raise ValueError(f"owners: expected other ranks of a world of {world}, got "
                             f"{sorted(set(owners.tolist()))[:5]} on rank {rank}")
        order = torch.argsort(owners, stable=True)
        asked = torch.bincount(owners, minlength=world)
        requested = torch.zeros_like(asked)
        if world > 1:
            dist.all_to_all_single(requested, asked, group=group)
        asked_counts, requested_counts = asked.tolist(), requested.tolist()
        received = all_to_all_rows(ids.to(wire)[order], requested_counts, asked_counts, group)
        return cls(order, asked_counts, received.to(torch.int64), requested_counts, group)

    @property
    def num_asked(self) -> int:
        return int(self.order.numel())

    def received_rows(self, rows: Tensor) -> Tensor:
        """Send one row per requested id back (a collective).

        Args:
            rows: ``[len(requested), ...]``: the answer to each id of :attr:`requested`.

        Returns:
            ``[K, ...]``: the answers to this rank's ids in the order they travelled: row ``i``
            answers the id at position ``order[i]`` of those it asked.
        """
        return all_to_all_rows(rows, self.asked_counts, self.requested_counts, self.group)

    def answer_lists(self, counts: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Send a list of any length per requested id back (a collective).

        Args:
            counts: int64 ``[len(requested)]``: the length of each id's answer.
            values: ``[counts.sum(), ...]``: the answers, one id's after the other.

        Returns:
            ``(lengths, values)``: this rank's answers in the order its ids travelled (by owner, then
            in the order asked), each list as its owner sent it; ``lengths[i]`` is the length of the
            list answering the id at position ``order[i]`` of those it asked.
        """
        lengths = all_to_all_rows(counts.to(torch.int64), self.asked_counts, self.requested_counts, self.group)
        sent_per_rank = _sums(counts, self.requested_counts)
        got_per_rank = _sums(lengths, self.asked_counts)
        return lengths, all_to_all_rows(values, got_per_rank, sent_per_rank, self.group)


def _sums(counts: Tensor, sizes: list[int]) -> list[int]:
    """Sums of consecutive runs of ``counts`` of the given ``sizes``."""
    return [int(part.sum()) for part in torch.split(counts, sizes)]

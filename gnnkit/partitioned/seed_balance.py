"""Even seed counts across partitions: ranks holding more than their share hand the surplus over.

Sampled partition-parallel ranks step in lockstep (:mod:`gnnkit.partitioned.sampled_loader`), so a
step lasts as long as the rank with the most seeds takes. METIS balances the nodes of each part, not
the training nodes among them (on the products twin at 4 parts, one part holds 8 % more than the
mean), so one rank straggles every step. DistDGL (Zheng et al., <https://arxiv.org/abs/2010.05337>)
splits the seeds evenly instead (``node_split(..., force_even=True)``), most of each rank's seeds
being its own. :func:`balance_seeds` does the same: every rank ends with ``total // P`` seeds (or
one more), a rank above that hands its surplus to the ranks below it, and the seeds it hands over
are those with the largest share of in-neighbours on the receiving rank (their sampled neighbours
are then mostly the receiver's own). A received seed is remote: the sampler asks its owner for its
neighbours like for any remote node, its label travels once, here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from gnnkit.partitioned.halo import all_to_all_rows
from gnnkit.partitioned.node_directory import NodeDirectory
from gnnkit.rank_state import gather_ranks
from pipeline.partitioned import Partition


def even_targets(counts: list[int]) -> list[int]:
    """Seeds each rank should hold: ``total // P``, one more for the ``total % P`` ranks holding the
    most (ties: lower rank first), so that as few seeds as possible move."""
    total, world = sum(counts), len(counts)
    targets = [total // world] * world
    for rank in sorted(range(world), key=lambda r: (-counts[r], r))[:total % world]:
        targets[rank] += 1
    return targets


def transfer_plan(counts: list[int]) -> list[list[int]]:
    """``plan[a][b]``: seeds rank ``a`` hands to rank ``b`` so that every rank reaches
    :func:`even_targets` (surplus ranks in rank order fill deficit ranks in rank order)."""
    targets = even_targets(counts)
    world = len(counts)
    plan = [[0] * world for _ in range(world)]
    givers = [[r, counts[r] - targets[r]] for r in range(world) if counts[r] > targets[r]]
    takers = [[r, targets[r] - counts[r]] for r in range(world) if counts[r] < targets[r]]
    g = t = 0
    while g < len(givers) and t < len(takers):
        moved = min(givers[g][1], takers[t][1])
        plan[givers[g][0]][takers[t][0]] += moved
        givers[g][1] -= moved
        takers[t][1] -= moved
        g += givers[g][1] == 0
        t += takers[t][1] == 0
    return plan


def share_owned_by(part: Partition, directory: NodeDirectory, seeds: Tensor, rank: int) -> Tensor:
    """Fraction of each seed's in-neighbours (its CSR row) that ``rank`` owns (0 for no neighbours).

    Args:
        part: This rank's partition (CSR rows of its owned nodes, global neighbour ids).
        directory: Its node directory (owned rows and owners).
        seeds: Global ids of nodes this rank owns.
        rank: The rank whose neighbours are counted.
    """
    rows = directory.owned_rows(seeds)
    start = part.indptr[rows].to(torch.int64)
    degree = part.indptr[rows + 1].to(torch.int64) - start
    first = torch.cumsum(degree, 0) - degree
    edge = torch.arange(int(degree.sum())) - torch.repeat_interleave(first - start, degree)
    on_rank = directory.owners(torch.index_select(part.indices, 0, edge).to(torch.int64)) == rank
    row_of_edge = torch.repeat_interleave(torch.arange(seeds.numel()), degree)
    hits = torch.zeros(seeds.numel()).index_add_(0, row_of_edge, on_rank.to(torch.float32))
    return hits / degree.clamp(min=1)


def balance_seeds(part: Partition, directory: NodeDirectory, seeds: Tensor, labels: Tensor,
                  group: dist.ProcessGroup | None = None) -> tuple[Tensor, Tensor]:
    """This rank's seeds after evening out the counts of all ranks (a collective).

    Args:
        part: This rank's partition.
        directory: Its node directory.
        seeds: Global ids of this rank's seeds (nodes it owns), int64 ``[S]``.
        labels: Their labels, ``[S, ...]``.
        group: Process group (default: the default group; must span the same ranks as
            :func:`~gnnkit.rank_state.gather_ranks`'s).

    Returns:
        ``(seeds, labels)``: the seeds it keeps, in their order, then those received, by giving rank
        (global ids; the received ones are owned elsewhere) and their labels.
    """
    seeds = seeds.to(torch.int64)
    counts = gather_ranks(int(seeds.numel()))
    if len(counts) == 1:
        return seeds, labels
    rank = part.part
    plan = transfer_plan(counts)
    keep = torch.ones(seeds.numel(), dtype=torch.bool)
    given = []
    for taker, count in enumerate(plan[rank]):
        if count:
            candidates = torch.nonzero(keep).view(-1)
            share = share_owned_by(part, directory, seeds[candidates], taker)
            picked = candidates[torch.argsort(share, descending=True, stable=True)[:count]]
            keep[picked] = False
            given.append(picked)
    order = torch.cat(given) if given else seeds.new_zeros(0)
    sent, received = plan[rank], [plan[giver][rank] for giver in range(len(counts))]
    new_seeds = all_to_all_rows(seeds[order], received, sent, group)
    new_labels = all_to_all_rows(labels[order], received, sent, group)
    return torch.cat([seeds[keep], new_seeds]), torch.cat([labels[keep], new_labels])

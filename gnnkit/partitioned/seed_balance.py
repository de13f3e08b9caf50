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
from pipeline import EVERY_RANK, log
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


def neighbour_shares(part: Partition, directory: NodeDirectory, seeds: Tensor, world: int) -> Tensor:
    """``[S, world]``: the fraction of each seed's in-neighbours (its CSR row) that each rank owns (0
    for no neighbours).

    Args:
        part: This rank's partition (CSR rows of its owned nodes, global neighbour ids).
        directory: Its node directory (owned rows and owners).
        seeds: Global ids of nodes this rank owns.
        world: Ranks in the group.
    """
    rows = directory.owned_rows(seeds)
    start = part.indptr[rows].to(torch.int64)
    degree = part.indptr[rows + 1].to(torch.int64) - start
    first = torch.cumsum(degree, 0) - degree
    edge = torch.arange(int(degree.sum())) - torch.repeat_interleave(first - start, degree)
    owners = directory.owners(torch.index_select(part.indices, 0, edge).to(torch.int64))
    cell = torch.repeat_interleave(torch.arange(seeds.numel()), degree) * world + owners
    hits = torch.bincount(cell, minlength=seeds.numel() * world).view(seeds.numel(), world)
    return hits.to(torch.float32) / degree.clamp(min=1).unsqueeze(1)


def balance_seeds(part: Partition, directory: NodeDirectory, seeds: Tensor, labels: Tensor,
                  group: dist.ProcessGroup | None = None, stage: str = "seeds") -> tuple[Tensor, Tensor]:
    """This rank's seeds after evening out the counts of all ranks (a collective; logs what moved).

    Args:
        part: This rank's partition.
        directory: Its node directory.
        seeds: Global ids of this rank's seeds (nodes it owns), int64 ``[S]``.
        labels: Their labels, ``[S, ...]``.
        group: Process group (default: the default group; must span the same ranks as
            :func:`~gnnkit.rank_state.gather_ranks`'s).
        stage: What the seeds are for, in the log line (e.g. ``train``).

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
    sent, received = plan[rank], [plan[giver][rank] for giver in range(len(counts))]
    keep = torch.ones(seeds.numel(), dtype=torch.bool)
    given = []
    shares = neighbour_shares(part, directory, seeds, len(counts)) if sum(sent) else None
    for taker, count in enumerate(sent):
        if count:
            candidates = torch.nonzero(keep).view(-1)
            picked = candidates[torch.argsort(shares[candidates, taker], descending=True, stable=True)[:count]]
            keep[picked] = False
            given.append(picked)
    order = torch.cat(given) if given else seeds.new_zeros(0)
    new_seeds = all_to_all_rows(seeds[order], received, sent, group)
    new_labels = all_to_all_rows(labels[order], received, sent, group)
    log.info("partition %d of %d, %s: %d seeds (%d of its own handed over, %d received)", rank, len(counts), stage,
             counts[rank] - sum(sent) + sum(received), sum(sent), sum(received), extra=EVERY_RANK)
    return torch.cat([seeds[keep], new_seeds]), torch.cat([labels[keep], new_labels])


def rank_seeds(part: Partition, directory: NodeDirectory, positions: Tensor, balance: bool,
               stage: str = "seeds") -> tuple[Tensor, Tensor]:
    """Global ids and labels of this rank's seeds of a split (``positions`` in its owned nodes),
    evened out across the ranks by :func:`balance_seeds` when ``balance`` (a collective then)."""
    seeds, labels = part.owned[positions].to(torch.int64), part.y[positions]
    return balance_seeds(part, directory, seeds, labels, stage=stage) if balance else (seeds, labels)

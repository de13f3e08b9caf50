"""Sampled mini-batches of a rank's seeds, every rank taking the same steps in lockstep.

Sampling across partitions (:mod:`gnnkit.partitioned.remote_sampler`) and fetching remote features
(:mod:`gnnkit.partitioned.remote_features`) are collectives, so every rank must build the same number
of batches in the same order; PyG's deprecated ``torch_geometric.distributed`` asked the same of its
ranks (pyg-team/pytorch_geometric#9959). :class:`PartitionNodeLoader` deals a rank's seeds into a
number of steps agreed by all ranks (:func:`lockstep_steps`); a step whose share is empty on some rank
gets a *padding* batch there (two of its nodes, ``padding=True``), which trains with weight 0 and is
left out of the metrics. Batches are built in the main process (collectives cannot run in
``DataLoader`` workers) and look like :class:`~gnnkit.data.sampler.CSRNodeLoader` batches (``x``,
``edge_index``, ``n_id``, ``e_id``, ``batch_size``, ``input_id``, ``num_sampled_nodes``,
``num_sampled_edges``, seeds first), except that ``y`` holds the labels of the seeds only (the rank
holds them; other nodes' labels would travel for nothing, see
:mod:`~gnnkit.partitioned.remote_features`), plus ``loss_scale`` (this rank's share of the step's
seeds times the world size, so averaged gradients are those of the whole step's mean loss) and
``padding``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.sampler import NodeSamplerInput

from gnnkit.partitioned.remote_features import RemoteFeatures
from gnnkit.partitioned.remote_sampler import PartitionNeighborSampler


def lockstep_steps(counts: list[int], batch_size: int, train: bool) -> int:
    """Steps per epoch for ranks holding ``counts`` seeds each.

    Training takes as many steps as replicated DDP would (``DistributedSampler``: ``ceil(total / P)``
    seeds per rank, in batches of ``batch_size``), so the global batch is ``P x batch_size`` seeds,
    dealt to the ranks in proportion to their seeds. Evaluation takes as many as the rank with the
    most seeds needs in batches of ``batch_size``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size: expected >= 1, got {batch_size}")
    most = math.ceil(sum(counts) / len(counts)) if train else max(counts)
    return max(1, math.ceil(most / batch_size))


def share(count: int, steps: int, step: int) -> int:
    """Seeds at ``step`` of a rank holding ``count`` (``torch.tensor_split``'s sizes)."""
    return count // steps + (1 if step < count % steps else 0)


class PartitionNodeLoader:
    """One rank's sampled batches of a split, in lockstep with the other ranks.

    Args:
        sampler: The rank's :class:`~gnnkit.partitioned.remote_sampler.PartitionNeighborSampler`
            (its generator also shuffles).
        features: The rank's :class:`~gnnkit.partitioned.remote_features.RemoteFeatures`.
        labels: The labels of ``seeds``, ``[S, ...]``.
        seeds: Global ids of this rank's seeds, int64 ``[S]``: its share of the split (the partition's
            ``owned[split]``, evened out by :func:`~gnnkit.partitioned.seed_balance.balance_seeds`).
        counts: Every rank's seed count (:func:`gnnkit.rank_state.gather_ranks` of each rank's).
        batch_size: See :func:`lockstep_steps`.
        shuffle: Shuffle the seeds every epoch (training), drawn when the epoch's first batch is.

    Attributes:
        node_sampler: ``sampler`` (the name PyG's ``NodeLoader`` gives its sampler).

    Raises:
        ValueError: A partition without nodes (nothing to pad with).
    """

    def __init__(self, sampler: PartitionNeighborSampler, features: RemoteFeatures, labels: Tensor,
                 seeds: Tensor, counts: list[int], batch_size: int, shuffle: bool) -> None:
        if sampler.owned.numel() == 0:
            raise ValueError(f"partition {sampler.rank}: no owned nodes to sample from")
        if counts[sampler.rank] != seeds.numel() or labels.size(0) != seeds.numel():
            raise ValueError(f"counts: rank {sampler.rank} holds {seeds.numel()} seeds and {labels.size(0)} labels, "
                             f"counts say {counts[sampler.rank]}")
        self.node_sampler, self.features = sampler, features
        self.labels = labels
        self.seeds = seeds.to(torch.int64)
        self.counts = counts
        self.shuffle = shuffle
        self.steps = lockstep_steps(counts, batch_size, shuffle)
        self._totals = [sum(share(c, self.steps, step) for c in counts) for step in range(self.steps)]
        pool = self.seeds if self.seeds.numel() else sampler.owned[:2].to(torch.int64)
        self.padding_seeds = pool[torch.arange(2) % min(2, pool.numel())]
        self.padding_labels = labels.new_zeros((2, *labels.shape[1:]))  # weigh nothing

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[Data]:
        # a generator: the order is drawn at the first batch, so a checkpoint taken before the epoch
        # sees the generator before it
        n = self.seeds.numel()
        order = torch.randperm(n, generator=self.node_sampler.generator) if self.shuffle else torch.arange(n)
        for step, positions in enumerate(torch.tensor_split(order, self.steps)):
            yield self.batch(positions, step)

    def batch(self, positions: Tensor, step: int) -> Data:
        """The batch of the seeds at ``positions`` of :attr:`seeds` (a padding batch when empty), as
        step ``step`` (a collective)."""
        padding = positions.numel() == 0
        seeds = self.padding_seeds if padding else self.seeds[positions]
        hops = self.node_sampler.sample(seeds)
        out = hops.output(NodeSamplerInput(input_id=positions, node=seeds))
        total = self._totals[step]
        y = self.padding_labels if padding else self.labels[positions]
        data = Data(x=self.features.gather(out.node), y=y, edge_index=torch.stack([out.row, out.col]),
                    n_id=out.node, e_id=out.edge, batch_size=int(seeds.numel()), input_id=positions,
                    num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges,
                    num_nodes=int(out.node.numel()))
        data.loss_scale = 0.0 if padding else positions.numel() * len(self.counts) / max(total, 1)
        data.padding = padding
        return data

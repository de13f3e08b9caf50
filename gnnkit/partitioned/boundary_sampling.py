"""Boundary-node sampling (BNS-GCN): each training step exchanges a random share of the halo.

Wan et al., "BNS-GCN: Efficient Full-Graph Training of Graph Convolutional Networks with
Partition-Parallelism and Random Boundary Node Sampling", MLSys 2022
(<https://arxiv.org/abs/2203.10983>): keeping every boundary node with probability ``rate`` cuts the
halo traffic and memory by about ``1 - rate`` at little cost in accuracy. Here a kept halo node's
edges weigh ``1 / rate`` and a dropped one's 0, so every sampled aggregation is an unbiased estimate
of the exact one (sum, mean and GCN's normalised sum alike); evaluation always exchanges the whole
halo.

Whether node ``v`` is kept at step ``t`` is a counter-based random number of ``(seed, t, v)``
(:mod:`pipeline.counter_random`), so its owner and every rank that reads it decide alike without
talking, and a resumed run draws the same samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gnnkit.partitioned.halo import HaloPlan
from pipeline.counter_random import stream_key, uniform_at


@dataclass(frozen=True)
class BoundarySampler:
    """Keep each boundary node with probability ``rate`` at every training step.

    Args:
        rate: Probability in ``(0, 1]`` of keeping a boundary node (1: exact exchange).
        seed: Seed of the samples.
    """

    rate: float
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.rate <= 1.0:
            raise ValueError(f"boundary_sampling: expected a rate in (0, 1], got {self.rate!r}")

    def kept(self, ids: Tensor, step: int) -> Tensor:
        """Which of the global node ``ids`` are kept at ``step`` (the same answer on every rank)."""
        u = uniform_at(stream_key(self.seed, step), ids.numpy().astype(np.uint64))
        return torch.from_numpy(u < self.rate)

    def plan(self, plan: HaloPlan, step: int) -> HaloPlan:
        """The exchange of ``step``: the kept rows of ``plan``, with the halo's edge weights."""
        if self.rate == 1.0:
            return plan
        assert plan.send_ids is not None and plan.recv_ids is not None
        keep_recv = self.kept(plan.recv_ids, step)
        weight = torch.zeros(plan.num_halo)
        weight[plan.recv_positions[keep_recv]] = 1.0 / self.rate
        return plan.subset(self.kept(plan.send_ids, step), keep_recv, weight)

"""Neighbour sampling across partitions: each rank samples the rows it owns, owners sample the rest.

DistDGL (Zheng et al., "DistDGL: Distributed Graph Neural Network Training for Billion-Scale
Graphs", <https://arxiv.org/abs/2010.05337>) keeps every node's in-edges on the rank that owns it.
Here, at each hop, a rank samples the frontier nodes it owns from its own CSR rows and sends the
others, grouped by owner, to their owners (:class:`~gnnkit.partitioned.owner_requests.OwnerRequests`),
which sample them with the same fan-out rules (:meth:`CSRNeighborSampler.sample_rows
<gnnkit.data.sampler.CSRNeighborSampler.sample_rows>`: uniform, without replacement, ``-1`` = the
whole row) and send the sampled neighbour lists back. The hops are numbered as PyG numbers them
(:func:`~gnnkit.data.sampler.sample_hops`: seeds first, then nodes in order of first discovery, edges
by destination in node order), and edge ids are positions in the whole graph's ``indices``; with
fan-out ``-1`` the sample is the single-process sample of the same seeds, node for node and edge for
edge.

Every rank calls :meth:`PartitionNeighborSampler.sample` in lockstep (four all-to-alls per hop, asking
or not). Randomness comes from a private generator seeded by ``(seed, rank)``; a rank draws for its own
rows first, then for the rows the others asked about, in rank order, so a run repeats under its seed
and a checkpointed generator (:meth:`~PartitionNeighborSampler.state_dict`) continues exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from gnnkit.data.sampler import CSRNeighborSampler, SampledHops, sample_hops
from gnnkit.partitioned.node_directory import NodeDirectory
from gnnkit.partitioned.owner_requests import OwnerRequests, world_and_rank
from pipeline.partitioned import Partition


def rank_seed(seed: int, rank: int) -> int:
    """The generator seed of ``rank`` under a run's ``seed`` (different on every rank)."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1, np.uint64)[0] % 2**63)


class PartitionNeighborSampler:
    """Uniform multi-hop neighbour sampling of a rank's seeds, across all partitions.

    Args:
        part: This rank's partition (:func:`~gnnkit.partitioned.rank_data.open_rank_partition`), with
            the whole graph's ``owner`` map.
        num_neighbors: Fan-out per hop (``-1``: all neighbours).
        seed: Seed of the sampling (combined with the rank).
        group: Process group (default: the default group).
        directory: The rank's :class:`~gnnkit.partitioned.node_directory.NodeDirectory` (shared with
            its :class:`~gnnkit.partitioned.remote_features.RemoteFeatures`; made here if not given).

    Raises:
        ValueError: Bad fan-outs (as :class:`~gnnkit.data.sampler.CSRNeighborSampler`), or a rank
            that is not the partition's part.
    """

    def __init__(self, part: Partition, num_neighbors: Sequence[int], seed: int = 0,
                 group: dist.ProcessGroup | None = None, directory: NodeDirectory | None = None) -> None:
        self.world, self.rank = world_and_rank(group)
        if part.part != self.rank or part.parts != self.world:
            raise ValueError(f"partition: part {part.part} of {part.parts} opened on rank {self.rank} of {self.world}")
        self.rows = CSRNeighborSampler(part.indptr, part.indices, num_neighbors)  # the one-hop rules
        self.num_neighbors = self.rows.num_neighbors
        self.owned = part.owned
        self.directory = directory or NodeDirectory(part)
        self.row_start = part.row_start
        self.group = group
        self.seed = seed
        self.generator = torch.Generator().manual_seed(rank_seed(seed, self.rank))
        num_nodes = int(part.owner.numel())
        self._local: Tensor | None = None  # scratch over global ids, made on first use
        self._scratch = (num_nodes, torch.int32 if num_nodes < 2**31 - 2 else torch.int64)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_neighbors={self.num_neighbors}, seed={self.seed}, "
                f"part={self.rank} of {self.world})")

    @property
    def scratch_bytes(self) -> int:
        """Bytes of the id map over the whole graph's nodes (allocated on first use)."""
        return self._scratch[0] * torch.empty(0, dtype=self._scratch[1]).element_size()

    def state_dict(self) -> dict[str, Any]:
        """The generator's state, for checkpoints."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict`."""
        if "generator" in state:
            self.generator.set_state(state["generator"])

    def sample(self, seeds: Tensor) -> SampledHops:
        """The multi-hop sample of ``seeds`` (a collective: every rank calls it, with its own seeds).

        Args:
            seeds: Global ids of seeds, int64 ``[B]`` (may be empty); mostly this rank's own, others'
                neighbours are sampled by their owners (:mod:`~gnnkit.partitioned.seed_balance`).

        Returns:
            The :class:`~gnnkit.data.sampler.SampledHops` (global ids in ``nodes``, edge ids in the
            whole graph's CSR).
        """
        seeds = seeds.to(torch.int64)
        if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= self._scratch[0]):
            raise ValueError(f"seeds: expected node ids in [0, {self._scratch[0]}), got "
                             f"{int(seeds.min())}..{int(seeds.max())}")
        if self._local is None:
            self._local = torch.full((self._scratch[0],), -1, dtype=self._scratch[1])
        try:
            return sample_hops(seeds, self.num_neighbors, self._expand, self._local)
        except BaseException:
            self._local = None  # it may hold stale entries
            raise

    def _expand(self, frontier: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
        """One hop (see :data:`gnnkit.data.sampler.Expand`): own rows sampled here, the others by their
        owners."""
        slots = self.directory.slots(frontier)
        mine = slots >= 0
        mine_at, remote_at = torch.nonzero(mine).view(-1), torch.nonzero(~mine).view(-1)
        remote = frontier[remote_at]
        requests = OwnerRequests.exchange(remote, self.directory.owners(remote), self.group)
        rows = torch.cat([slots[mine_at], self.directory.owned_rows(requests.requested)])
        edge, segment, count = self.rows.sample_rows(rows, k, self.generator)
        src = torch.index_select(self.rows.indices, 0, edge)
        row = torch.index_select(rows, 0, segment)
        edge_id = self.row_start[row] + (edge - self.rows.indptr[row])  # position in the whole graph
        own = int(count[:mine_at.numel()].sum())
        asker, answers = requests.answer_lists(count[mine_at.numel():], torch.stack([src[own:], edge_id[own:]], 1))
        position = torch.cat([mine_at[segment[:own]], remote_at[asker]])
        order = torch.argsort(position, stable=True)  # by frontier position; each row keeps its order
        return (torch.cat([src[:own], answers[:, 0]])[order], position[order],
                torch.cat([edge_id[:own], answers[:, 1]])[order])

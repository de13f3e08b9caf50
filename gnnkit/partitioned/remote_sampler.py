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
or not). Randomness comes from a private generator seeded by ``(seed, rank)``; a rank samples its own
rows and then the rows the others asked about, in rank order, in one call per hop
(:meth:`CSRNeighborSampler.sample_row_edges <gnnkit.data.sampler.CSRNeighborSampler.sample_row_edges>`:
the native kernel draws the hop's seed from that generator), so a run repeats under its seed and a
checkpointed generator (:meth:`~PartitionNeighborSampler.state_dict`) continues exactly. The lists
that come back are put in frontier order by a scatter to each node's place (:class:`_FrontierLists`).
Node and edge ids travel as int32 when every one fits (agreed by one all-reduce at the first sample),
halving the bytes of the lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from gnnkit.data.sampler import CSRNeighborSampler, SampledHops, exclusive_cumsum, sample_hops
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
        self._wire: torch.dtype | None = None  # how ids and edge ids travel, agreed on first use
        self._scratch = (num_nodes, self.directory.id_dtype)  # the narrowest dtype of every node id

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
        if self._wire is None:
            self._wire = self._agree_wire()
        try:
            return sample_hops(seeds, self.num_neighbors, self._expand, self._local)
        except BaseException:
            self._local = None  # it may hold stale entries
            raise

    def _agree_wire(self) -> torch.dtype:
        """int32 when every node id and the whole graph's edge ids fit in it (a collective: the ranks
        agree on the largest edge id), else int64."""
        ends = self.row_start + (self.rows.indptr[1:] - self.rows.indptr[:-1])  # one past each row's last edge id
        largest = torch.tensor([max(self._scratch[0], int(ends.max()) if ends.numel() else 0)])
        if self.world > 1:
            dist.all_reduce(largest, op=dist.ReduceOp.MAX, group=self.group)
        return torch.int32 if int(largest) <= torch.iinfo(torch.int32).max else torch.int64

    def _expand(self, frontier: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
        """One hop (see :data:`gnnkit.data.sampler.Expand`): own rows sampled here, the others by their
        owners."""
        slots = self.directory.slots(frontier)
        mine = slots >= 0
        mine_at, remote_at = torch.nonzero(mine).view(-1), torch.nonzero(~mine).view(-1)
        remote = frontier[remote_at]
        requests = OwnerRequests.exchange(remote, self.directory.owners(remote), self.group, self._wire)
        rows = torch.cat([slots[mine_at], self.directory.owned_rows(requests.requested)])
        src, edge_id, count = self.rows.sample_row_edges(rows, k, self.generator, self.row_start)
        own = int(count[:mine_at.numel()].sum())
        lengths, answers = requests.answer_lists(count[mine_at.numel():],
                                                 torch.stack([src[own:], edge_id[own:]], 1).to(self._wire))
        answers = answers.to(torch.int64)
        lists = _FrontierLists(frontier.numel(), torch.cat([mine_at, remote_at[requests.order]]),
                               torch.cat([count[:mine_at.numel()], lengths]))
        return (lists.place(src[:own], answers[:, 0]), lists.segment(),
                lists.place(edge_id[:own], answers[:, 1]))


class _FrontierLists:
    """Edge lists that arrive as blocks, one per frontier node in any order, put in frontier order
    (each block keeps its own order): a scatter to each block's place, not a sort.

    Args:
        size: Frontier nodes.
        at: Frontier position of each block, in arrival order (each position once).
        lengths: Each block's length, in arrival order.
    """

    def __init__(self, size: int, at: Tensor, lengths: Tensor) -> None:
        counts = torch.zeros(size, dtype=torch.int64).index_copy_(0, at, lengths)
        self.counts, total = counts, int(lengths.sum())
        start = exclusive_cumsum(counts)  # where each frontier node's list goes
        arrived = exclusive_cumsum(lengths)  # where each block is in the arrival order
        shift = torch.repeat_interleave(torch.index_select(start, 0, at) - arrived, lengths, output_size=total)
        self.destination = torch.arange(total) + shift

    def place(self, *blocks: Tensor) -> Tensor:
        """The values of the blocks (concatenated in arrival order) in frontier order."""
        values = torch.cat(blocks)
        return torch.empty_like(values).index_copy_(0, self.destination, values)

    def segment(self) -> Tensor:
        """The frontier position of each value in frontier order."""
        return torch.repeat_interleave(torch.arange(self.counts.numel()), self.counts,
                                       output_size=self.destination.numel())

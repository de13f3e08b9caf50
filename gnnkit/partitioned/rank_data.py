"""This rank's partition as a full-batch ``Data``: owned nodes, their rows, and the halo plan."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
from torch_geometric.data import Data

from gnnkit.partitioned.halo import HaloPlan
from gnnkit.partitioned.local_graph import local_adjacency
from pipeline import CacheEntry
from pipeline.partitioned import Partition, open_partition, partition_entry


def _rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def open_rank_partition(entry: CacheEntry, parts: int, seed: int = 0) -> Partition:
    """Rank 0 builds (or finds) the ``parts`` partition entries while the others wait; then every
    rank opens its own, and only its own (a collective in distributed runs).

    Raises:
        ValueError: ``parts`` differs from the number of ranks.
    """
    rank, world = _rank_and_world()
    if parts != world:
        raise ValueError(f"data.partitions: {parts} partitions need {parts} ranks (one each), "
                         f"but this run has {world}; set trainer.devices x trainer.num_nodes to {parts}")
    if rank == 0:
        partition_entry(entry, parts, seed=seed)
    if world > 1:
        dist.barrier()
    return open_partition(partition_entry(entry, parts, seed=seed)[rank])  # a cache hit: manifests only


def partition_data(part: Partition) -> Data:
    """The partition as one full-batch graph: ``x``, ``y`` and ``n_id`` (global ids) of the owned
    nodes, ``adj`` over ``[owned; halo]`` columns and ``halo``, the agreed :class:`HaloPlan`
    (agreeing is a collective)."""
    plan = HaloPlan.build(part.owned, part.halo, part.halo_owner)
    return Data(x=part.x, y=part.y, n_id=part.owned, num_nodes=int(part.owned.numel()),
                adj=local_adjacency(part.indptr, part.indices, part.owned, part.halo), halo=plan)


def partition_facts(part: Partition, plan: HaloPlan, row_bytes: int, boundary_sampling: float | None,
                    stale_halo: bool) -> dict[str, Any]:
    """What report.json says about this rank's partition (rank 0's, in a distributed run); the rows
    sent are those of an exact exchange (about ``boundary_sampling`` times as many when sampled)."""
    return {"parts": part.parts, "part": part.part, "owned_nodes": int(part.owned.numel()),
            "halo_nodes": int(part.halo.numel()), "edge_cut": part.meta["edge_cut"],
            "rows_sent_per_exchange": plan.send_rows, "input_bytes_sent_per_exchange": plan.send_rows * row_bytes,
            "boundary_sampling": boundary_sampling, "stale_halo": stale_halo}

"""This rank's partition: opened, as a full-batch ``Data`` (owned nodes, their rows, the halo plan),
and what report.json says about it."""

from __future__ import annotations

import datetime
from typing import Any

import torch.distributed as dist
from torch_geometric.data import Data

from gnnkit.optim.state import tensor_bytes
from gnnkit.partitioned.halo import HaloPlan
from gnnkit.partitioned.input_aggregation import first_layer_input
from gnnkit.partitioned.local_graph import local_adjacency
from gnnkit.partitioned.owner_requests import world_and_rank
from gnnkit.partitioned.remote_features import FetchStats
from pipeline import CacheEntry
from pipeline.partitioned import Partition, open_partition, partition_entry


#: How long the other ranks wait for rank 0 to partition the graph (METIS on a large graph takes
#: longer than the collective timeout of a training step).
PARTITIONING_TIMEOUT = datetime.timedelta(hours=6)


def check_rank_count(parts: int, world: int) -> None:
    """Refuse ``parts`` partitions on ``world`` ranks (one each is needed).

    Raises:
        ValueError: ``parts`` differs from ``world``.
    """
    if parts != world:
        raise ValueError(f"data.partitions: {parts} partitions need {parts} ranks (one each), "
                         f"but this run has {world}; set trainer.devices x trainer.num_nodes to {parts}")


def open_rank_partition(entry: CacheEntry, parts: int, seed: int = 0) -> Partition:
    """Rank 0 builds (or finds) the ``parts`` partition entries while the others wait (up to
    :data:`PARTITIONING_TIMEOUT`, in a group of their own: the default group's timeout is a step's);
    then every rank opens its own, and only its own (a collective in distributed runs).

    Raises:
        ValueError: ``parts`` differs from the number of ranks.
    """
    world, rank = world_and_rank()
    check_rank_count(parts, world)
    waiting = dist.new_group(backend="gloo", timeout=PARTITIONING_TIMEOUT) if world > 1 else None  # a dead rank 0
    # closes its connections, which ends the wait at once; only a hung one is waited for this long
    if rank == 0:
        partition_entry(entry, parts, seed=seed)
    if waiting is not None:
        dist.barrier(group=waiting)
        dist.destroy_process_group(waiting)
    return open_partition(partition_entry(entry, parts, seed=seed)[rank])  # a cache hit: manifests only


def partition_data(part: Partition, input_aggregation: str | None = None) -> Data:
    """The partition as one full-batch graph: ``x``, ``y`` and ``n_id`` (global ids) of the owned
    nodes, ``adj`` over ``[owned; halo]`` columns and ``halo``, the agreed :class:`HaloPlan`
    (agreeing is a collective).

    Args:
        part: This rank's partition.
        input_aggregation: ``None``, or what the model's first layer aggregates (``"gcn"`` or
            ``"mean"``, :meth:`~gnnkit.models.node_gnn.NodeGNN.input_aggregation`): ``x`` is then that
            aggregate, computed once by streaming the halo (a collective), and ``input_aggregated``
            is ``True`` (:mod:`gnnkit.partitioned.input_aggregation`).
    """
    plan = HaloPlan.build(part.owned, part.halo, part.halo_owner)
    adj = local_adjacency(part.indptr, part.indices, part.owned, part.halo)
    x = part.x if input_aggregation is None else first_layer_input(part.x, adj, plan, input_aggregation)
    return Data(x=x, y=part.y, n_id=part.owned, num_nodes=int(part.owned.numel()), adj=adj, halo=plan,
                input_aggregated=input_aggregation is not None)


def partition_facts(part: Partition, plan: HaloPlan, row_bytes: int, boundary_sampling: float | None,
                    stale_halo: bool, input_aggregated: bool = False) -> dict[str, Any]:
    """What report.json says about this rank's partition (rank 0's, in a distributed run); the rows
    sent are those of an exact exchange (about ``boundary_sampling`` times as many when sampled),
    and with the input aggregated once the first layer exchanges nothing."""
    input_bytes = 0 if input_aggregated else plan.send_rows * row_bytes
    return {**_facts(part),
            "rows_sent_per_exchange": plan.send_rows, "input_bytes_sent_per_exchange": input_bytes,
            "boundary_sampling": boundary_sampling, "stale_halo": stale_halo, "input_aggregated": input_aggregated}


def _facts(part: Partition) -> dict[str, Any]:
    return {"parts": part.parts, "part": part.part, "owned_nodes": int(part.owned.numel()),
            "halo_nodes": int(part.halo.numel()), "edge_cut": part.meta["edge_cut"]}


def held_bytes(part: Partition, sampled: bool) -> int:
    """Bytes of the partition's graph and features a rank reads: its rows, features and labels, its
    halo; sampled training adds the whole graph's ``owner`` map and the rows' ``row_start``."""
    names = ["owned", "indptr", "indices", "x", "y", "halo", "halo_owner"]
    names += ["halo_refs", "row_start", "owner"] if sampled else []
    return tensor_bytes([getattr(part, name) for name in names])


def sampled_partition_facts(part: Partition, stats: FetchStats, every_rank: FetchStats,
                            sampler: Any = None) -> dict[str, Any]:
    """What report.json says about this rank's partition in sampled training (rank 0's, in a
    distributed run): the partition, the bytes it holds (its arrays, the sampler's node directory and
    scratch), what its remote feature fetches did, and under ``all_ranks`` the fetch counts summed
    over the ranks (``every_rank``)."""
    directory = getattr(sampler, "directory", None)
    return {**_facts(part), "sampled": True, "graph_feature_bytes": held_bytes(part, sampled=True),
            "directory_bytes": None if directory is None else directory.nbytes,
            "sampler_scratch_bytes": getattr(sampler, "scratch_bytes", None), **_fetch_facts(stats),
            "all_ranks": _fetch_facts(every_rank)}


def _fetch_facts(stats: FetchStats) -> dict[str, Any]:
    return {**stats.state_dict(),
            "cache_hit_rate": round(stats.cache_hits / stats.remote_rows, 4) if stats.remote_rows else None}


def describe_fetches(stats: FetchStats) -> str:
    """One log line about the remote feature fetches."""
    rate = f"{100 * stats.cache_hits / stats.remote_rows:.1f}%" if stats.remote_rows else "n/a"
    return (f"{stats.remote_rows:,} remote rows needed, {stats.cache_hits:,} from the cache ({rate}), "
            f"{stats.fetched_rows:,} fetched ({stats.fetched_bytes / 2**20:.1f} MB), {stats.served_rows:,} served; "
            f"cache {stats.cache_rows:,} rows ({stats.cache_bytes / 2**20:.1f} MB)")

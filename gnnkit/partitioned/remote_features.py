"""Features and labels of any node for a partition's sampled batches: owned rows from the partition,
hot remote rows from a cache filled once, the rest fetched from their owners per batch.

DistDGL (<https://arxiv.org/abs/2010.05337>) reads remote features from the owners' key-value
stores; caching the rows of the most-referenced remote nodes cuts that traffic (PaGraph,
<https://dl.acm.org/doi/10.1145/3419111.3421281>, and GNNLab cache by degree the same way). The
cache here holds the halo nodes with the most edges into this rank's rows (``halo_refs`` of the
partition entry; ties by id), as many as ``cache_fraction`` x the rank's owned nodes, fetched in one
exchange at setup; a cached row is never fetched again. :class:`FetchStats` counts what was fetched,
served and found in the cache.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from gnnkit.partitioned.halo import sorted_positions
from gnnkit.partitioned.owner_requests import OwnerRequests, world_and_rank
from pipeline.partitioned import Partition


@dataclass
class FetchStats:
    """What a rank's feature fetches did (batches since setup; the cache fill apart).

    Attributes:
        remote_rows: Rows of remote nodes the batches needed.
        cache_hits: Of those, rows found in the cache.
        fetched_rows: Rows fetched from their owners (``remote_rows - cache_hits``).
        fetched_bytes: Their bytes (features and labels).
        served_rows: Rows this rank sent to others.
        cache_rows: Rows in the cache.
        cache_bytes: Its bytes.
        cache_fill_bytes: Bytes received to fill it.
    """

    remote_rows: int = 0
    cache_hits: int = 0
    fetched_rows: int = 0
    fetched_bytes: int = 0
    served_rows: int = 0
    cache_rows: int = 0
    cache_bytes: int = 0
    cache_fill_bytes: int = 0

    def state_dict(self) -> dict[str, int]:
        return asdict(self)

    def summed(self, group: dist.ProcessGroup | None = None) -> FetchStats:
        """These counts summed over the ranks (a collective; themselves outside distributed runs)."""
        world, _ = world_and_rank(group)
        if world == 1:
            return FetchStats(**self.state_dict())
        counts = torch.tensor(list(self.state_dict().values()), dtype=torch.int64)
        dist.all_reduce(counts, group=group)
        return FetchStats(*counts.tolist())


def hot_halo(part: Partition, count: int) -> Tensor:
    """The ``count`` halo nodes with the most edges into the partition's rows (ties: lower id first),
    ascending."""
    count = min(max(count, 0), int(part.halo.numel()))
    refs = part.halo_refs.to(torch.int64)
    order = torch.argsort(-refs, stable=True)[:count]
    return torch.sort(part.halo.to(torch.int64)[order]).values


class RemoteFeatures:
    """Rows of ``x`` and ``y`` for global node ids, wherever they live (a collective per call).

    Args:
        part: This rank's partition.
        cache_fraction: Cache size as a fraction of the rank's owned nodes (0: no cache; capped at
            the halo). The cache is filled here, with one exchange: every rank must construct its
            :class:`RemoteFeatures` at the same point.
        group: Process group (default: the default group).
    """

    def __init__(self, part: Partition, cache_fraction: float = 0.0, group: dist.ProcessGroup | None = None) -> None:
        if cache_fraction < 0:
            raise ValueError(f"data.remote_cache: expected a fraction >= 0 of the owned nodes, got {cache_fraction}")
        self.rank = world_and_rank(group)[1]
        self.x, self.y = part.x, part.y
        self.owned, self.owner = part.owned, part.owner
        self.group = group
        self.stats = FetchStats()
        self.cache_ids = hot_halo(part, int(cache_fraction * part.owned.numel()))
        owners = self.owner[self.cache_ids].to(torch.int64)
        requests = OwnerRequests.exchange(self.cache_ids, owners, group)
        self.cache_x, self.cache_y = self._answer(requests)
        self.stats.cache_rows = int(self.cache_ids.numel())
        self.stats.cache_bytes = self.stats.cache_fill_bytes = self.stats.cache_rows * self.row_bytes
        self.stats.served_rows = 0

    @property
    def row_bytes(self) -> int:
        """Bytes of one node's features and label."""
        x = 0 if self.x is None else self.x[0].numel() * self.x.element_size()
        return x + self.y[0].numel() * self.y.element_size()

    def _answer(self, requests: OwnerRequests) -> tuple[Tensor | None, Tensor]:
        """The owners' rows for the requested ids (a collective)."""
        rows = sorted_positions(self.owned, requests.requested)[0]
        self.stats.served_rows += int(rows.numel())
        x = None if self.x is None else requests.answer_rows(self.x[rows])
        return x, requests.answer_rows(self.y[rows])

    def gather(self, ids: Tensor) -> tuple[Tensor | None, Tensor]:
        """``(x, y)`` rows of the global node ``ids`` (``x`` ``None`` for a featureless graph).

        Args:
            ids: Global node ids, int64 ``[K]``.
        """
        owners = self.owner[ids].to(torch.int64)
        mine = owners == self.rank
        cached_at, cached = sorted_positions(self.cache_ids, ids)
        cached &= ~mine
        mine_at, hit_at, fetch_at = (torch.nonzero(m).view(-1) for m in (mine, cached, ~(mine | cached)))
        requests = OwnerRequests.exchange(ids[fetch_at], owners[fetch_at], self.group)
        fetched_x, fetched_y = self._answer(requests)
        # (where the rows go, which rows of their table): owned rows, cached rows, fetched rows
        owned_rows = sorted_positions(self.owned, ids[mine_at])[0]
        parts = [(mine_at, owned_rows), (hit_at, cached_at[hit_at]), (fetch_at, None)]
        x = None if self.x is None else _fill((self.x, self.cache_x, fetched_x), parts, ids.numel())
        y = _fill((self.y, self.cache_y, fetched_y), parts, ids.numel())
        remote, hits = int(ids.numel() - mine_at.numel()), int(hit_at.numel())
        self.stats.remote_rows += remote
        self.stats.cache_hits += hits
        self.stats.fetched_rows += remote - hits
        self.stats.fetched_bytes += (remote - hits) * self.row_bytes
        return x, y


def _fill(tables: tuple[Any, ...], parts: list[tuple[Tensor, Tensor | None]], size: int) -> Tensor:
    """``size`` rows gathered from ``tables`` (owned, cached, fetched): part ``i`` puts rows
    ``parts[i][1]`` of ``tables[i]`` (all of it for ``None``) at positions ``parts[i][0]``."""
    out = tables[0].new_empty((size, *tables[0].shape[1:]))
    for table, (at, rows) in zip(tables, parts):
        if at.numel():
            out.index_copy_(0, at, table if rows is None else torch.index_select(table, 0, rows))
    return out

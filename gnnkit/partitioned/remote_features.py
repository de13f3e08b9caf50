"""Features of any node for a partition's sampled batches: owned rows from the partition, hot remote
rows from a cache filled once, the rest fetched from their owners per batch.

DistDGL (<https://arxiv.org/abs/2010.05337>) reads remote features from the owners' key-value
stores; caching the rows of the most-referenced remote nodes cuts that traffic (PaGraph,
<https://dl.acm.org/doi/10.1145/3419111.3421281>, and GNNLab cache by degree the same way). The
cache here holds the halo nodes with the most edges into this rank's rows (``halo_refs`` of the
partition entry; ties by id), as many as ``cache_fraction`` x the rank's owned nodes, fetched in one
exchange at setup; a cached row is never fetched again. With ``dtype`` ``float16`` (or ``bfloat16``)
the fetched and cached rows travel and stay in 16 bits: half the bytes on the wire and in the cache,
so twice the rows fit in the same memory; with ``int8``, 8-bit integers with a per-row scale, about
a quarter (quantised messages between partitions, as AdaQP does for full-graph training,
<https://arxiv.org/abs/2306.01381>; owned rows stay exact). Labels are not
fetched: a batch's loss needs only its seeds', which the rank holds (its own, and those handed over
with seeds by :mod:`~gnnkit.partitioned.seed_balance`; DistDGL's training loop reads them the same
way).
:class:`FetchStats` counts what was fetched, served and found in the cache.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from gnnkit.partitioned.node_directory import REMOTE, NodeDirectory
from gnnkit.partitioned.owner_requests import OwnerRequests, world_and_rank
from pipeline.partitioned import Partition


#: The :class:`FetchStats` that count what the batches did (a checkpoint carries them across a resume).
BATCH_COUNTS = ("remote_rows", "cache_hits", "fetched_rows", "fetched_bytes", "served_rows")


@dataclass
class FetchStats:
    """What a rank's feature fetches did (batches since setup; the cache fill apart).

    Attributes:
        remote_rows: Rows of remote nodes the batches needed.
        cache_hits: Of those, rows found in the cache.
        fetched_rows: Rows fetched from their owners (``remote_rows - cache_hits``).
        fetched_bytes: Their bytes.
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

    def batch_counts(self) -> dict[str, int]:
        """The counts that add up over the batches (:data:`BATCH_COUNTS`; not the cache's size or fill)."""
        return {name: getattr(self, name) for name in BATCH_COUNTS}

    def add_batch_counts(self, counts: dict[str, int]) -> None:
        """Add an earlier process's :meth:`batch_counts` (a resumed run's report covers every batch)."""
        for name in BATCH_COUNTS:
            setattr(self, name, getattr(self, name) + int(counts.get(name, 0)))

    def summed(self, group: dist.ProcessGroup | None = None) -> FetchStats:
        """These counts summed over the ranks (a collective; themselves outside distributed runs)."""
        world, _ = world_and_rank(group)
        if world == 1:
            return FetchStats(**self.state_dict())
        counts = torch.tensor(list(self.state_dict().values()), dtype=torch.int64)
        dist.all_reduce(counts, group=group)
        return FetchStats(*counts.tolist())


WIRE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int8": torch.int8}

#: Bytes of the per-row scale an ``int8`` row carries after its values.
_SCALE_BYTES = 4


def wire_dtype(name: str | None) -> torch.dtype | None:
    """The dtype named by ``data.remote_dtype`` (``None``: the features' own).

    Raises:
        ValueError: Another name.
    """
    if name is not None and name not in WIRE_DTYPES:
        raise ValueError(f"data.remote_dtype: expected one of {', '.join(WIRE_DTYPES)} or null, got {name!r}")
    return None if name is None else WIRE_DTYPES[name]


def encode_rows(rows: Tensor, wire: torch.dtype) -> Tensor:
    """Feature rows as they travel and are cached: cast to ``wire``, or for ``int8`` rounded to
    ``round(x / s)`` with the row's scale ``s = max |x| / 127``, the scale's 4 bytes after the values
    (``[K, F + 4]`` int8; AdaQP's per-row integer quantisation, <https://arxiv.org/abs/2306.01381>,
    rounded to nearest, so a node's features are the same in every batch)."""
    if wire != torch.int8:
        return rows.to(wire)
    rows = rows.float()
    scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny) / 127
    values = torch.round(rows / scale).clamp(-127, 127).to(torch.int8)
    return torch.cat([values, scale.view(torch.int8)], dim=1)


def decode_rows(rows: Tensor, dtype: torch.dtype) -> Tensor:
    """:func:`encode_rows`'s rows back as ``dtype`` features."""
    if rows.dtype != torch.int8:
        return rows.to(dtype)
    values, scale = rows[:, :-_SCALE_BYTES], rows[:, -_SCALE_BYTES:].contiguous().view(torch.float32)
    return (values.float() * scale).to(dtype)


def hot_halo(part: Partition, count: int) -> Tensor:
    """The ``count`` halo nodes with the most edges into the partition's rows (ties: lower id first),
    ascending."""
    count = min(max(count, 0), int(part.halo.numel()))
    refs = part.halo_refs.to(torch.int64)
    order = torch.argsort(-refs, stable=True)[:count]
    return torch.sort(part.halo.to(torch.int64)[order]).values


class RemoteFeatures:
    """Rows of ``x`` for global node ids, wherever they live (a collective per call).

    Args:
        part: This rank's partition.
        cache_fraction: Cache size as a fraction of the rank's owned nodes (0: no cache; capped at
            the halo). The cache is filled here, with one exchange: every rank must construct its
            :class:`RemoteFeatures` at the same point.
        group: Process group (default: the default group).
        directory: The rank's :class:`~gnnkit.partitioned.node_directory.NodeDirectory` (made here if
            not given); the cache's rows are recorded in it.
        dtype: Name of the dtype remote rows travel and are cached in (see :func:`wire_dtype`; ``None``:
            the features' own, exact).
    """

    def __init__(self, part: Partition, cache_fraction: float = 0.0, group: dist.ProcessGroup | None = None,
                 directory: NodeDirectory | None = None, dtype: str | None = None) -> None:
        if cache_fraction < 0:
            raise ValueError(f"data.remote_cache: expected a fraction >= 0 of the owned nodes, got {cache_fraction}")
        self.x = part.x
        self.wire = wire_dtype(dtype) or (None if self.x is None else self.x.dtype)
        self.directory = directory or NodeDirectory(part)
        self.group = group
        self.stats = FetchStats()
        self.cache_ids = hot_halo(part, int(cache_fraction * part.owned.numel()))
        self.cache_x = None if self.x is None else self._fetch(self.cache_ids)
        self.directory.add_cached(self.cache_ids)
        self.stats.cache_rows = int(self.cache_ids.numel())
        self.stats.cache_bytes = self.stats.cache_fill_bytes = self.stats.cache_rows * self.row_bytes
        self.stats.served_rows = 0

    @property
    def row_bytes(self) -> int:
        """Bytes of one node's features as they travel and are cached."""
        if self.x is None:
            return 0
        return self.x[0].numel() * torch.empty(0, dtype=self.wire).element_size() + (
            _SCALE_BYTES if self.wire == torch.int8 else 0)

    def _fetch(self, ids: Tensor, out: Tensor | None = None, at: Tensor | None = None) -> Tensor:
        """Rows of remote ``ids`` from their owners, answering the others' asks (a collective); put at
        positions ``at`` of ``out`` when given, else returned in the order of ``ids``."""
        requests = OwnerRequests.exchange(ids, self.directory.owners(ids), self.group, self.directory.id_dtype)
        rows = self.directory.owned_rows(requests.requested)
        self.stats.served_rows += int(rows.numel())
        received = requests.received_rows(encode_rows(torch.index_select(self.x, 0, rows), self.wire))
        if out is None:  # kept as they travelled (the cache)
            out, at = received.new_empty(received.shape), torch.arange(received.size(0))
        else:
            received = decode_rows(received, out.dtype)
        out.index_copy_(0, at[requests.order], received)
        return out

    def gather(self, ids: Tensor) -> Tensor | None:
        """``x`` rows of the global node ``ids`` (``None`` for a featureless graph, without asking).

        Args:
            ids: Global node ids, int64 ``[K]``.
        """
        if self.x is None:
            return None
        slots = self.directory.slots(ids)
        # Most rows are the rank's own: gather every row in one pass (a remote node's row 0 for now),
        # then overwrite the remote nodes' rows from the cache and the owners.
        out = torch.index_select(self.x, 0, slots.clamp(min=0)) if self.x.size(0) else (
            self.x.new_empty((ids.numel(), *self.x.shape[1:])))
        hit_at, fetch_at = torch.nonzero(slots <= -2).view(-1), torch.nonzero(slots == REMOTE).view(-1)
        out.index_copy_(0, hit_at, decode_rows(torch.index_select(self.cache_x, 0, -2 - slots[hit_at]), out.dtype))
        self._fetch(ids[fetch_at], out, fetch_at)
        hits = int(hit_at.numel())
        remote = hits + int(fetch_at.numel())
        self.stats.remote_rows += remote
        self.stats.cache_hits += hits
        self.stats.fetched_rows += remote - hits
        self.stats.fetched_bytes += (remote - hits) * self.row_bytes
        return out

"""Where every node of the whole graph lives, as one rank sees it: a row of its own, a row of its
cache of remote features, or only its owner.

A sampled batch looks up hundreds of thousands of global ids several times (which are mine, which
rows, which are cached). :class:`NodeDirectory` answers each lookup with one gather from an array
over the whole graph's nodes (4 bytes a node, like the ``owner`` map DistDGL keeps,
<https://arxiv.org/abs/2010.05337>) instead of a binary search of the owned and cached ids.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pipeline.partitioned import Partition

REMOTE = -1
"""The slot of a node owned elsewhere and not cached; owned rows are ``>= 0``, cache row ``c`` is
``-2 - c``."""


class NodeDirectory:
    """One slot per global node id: its owned row (``>= 0``), its cache row ``c`` (``-2 - c``), or
    :data:`REMOTE`.

    Args:
        part: This rank's partition (its ``owned`` ids and the whole graph's ``owner`` map).
    """

    def __init__(self, part: Partition) -> None:
        self.rank = part.part
        self.owner = part.owner
        num_nodes = int(part.owner.numel())
        dtype = torch.int32 if num_nodes < 2**31 - 2 else torch.int64
        self.slot = torch.full((num_nodes,), REMOTE, dtype=dtype)
        owned = part.owned.to(torch.int64)
        self.slot[owned] = torch.arange(owned.numel(), dtype=dtype)

    @property
    def id_dtype(self) -> torch.dtype:
        """The narrowest of int32/int64 that holds every node id (how ids travel between ranks)."""
        return self.slot.dtype

    @property
    def nbytes(self) -> int:
        return self.slot.numel() * self.slot.element_size()

    def slots(self, ids: Tensor) -> Tensor:
        """The int64 slots of global ``ids``."""
        return torch.index_select(self.slot, 0, ids).to(torch.int64)

    def owned_rows(self, ids: Tensor) -> Tensor:
        """Rows among this rank's owned nodes of global ``ids``.

        Raises:
            ValueError: An id this rank does not own (or no node's).
        """
        outside = (ids < 0) | (ids >= self.slot.numel())
        rows = self.slots(ids.masked_fill(outside, 0)).masked_fill_(outside, REMOTE)
        if rows.numel() and int(rows.min()) < 0:
            raise ValueError(f"rank {self.rank} was asked for node {int(ids[rows < 0][0])}, which it does not own")
        return rows

    def owners(self, ids: Tensor) -> Tensor:
        """The int64 owner ranks of global ``ids``."""
        return torch.index_select(self.owner, 0, ids).to(torch.int64)

    def add_cached(self, ids: Tensor) -> None:
        """Record remote ``ids`` as cache rows ``0..len(ids)-1``, in order (replacing earlier ones).

        Raises:
            ValueError: An id this rank owns.
        """
        self.slot[self.slot <= -2] = REMOTE
        if ids.numel() and int(self.slots(ids).max()) >= 0:
            raise ValueError(f"rank {self.rank}: a cache of remote rows cannot hold its own nodes")
        self.slot[ids] = -2 - torch.arange(ids.numel(), dtype=self.slot.dtype)

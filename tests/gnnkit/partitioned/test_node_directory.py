"""The node directory: owned rows, cache rows and owners of global ids, as gathers."""

from __future__ import annotations

import pytest
import torch

from gnnkit.partitioned.node_directory import REMOTE, NodeDirectory
from pipeline.partitioned import Partition


def _part() -> Partition:
    """Part 1 of 2 of a 7-node graph: it owns nodes 1, 4 and 6."""
    owner = torch.tensor([0, 1, 0, 0, 1, 0, 1], dtype=torch.int16)
    return Partition(owned=torch.tensor([1, 4, 6]), indptr=None, indices=None, x=None, y=None, split={},
                     halo=None, halo_owner=None, halo_refs=None, row_start=None, owner=owner,
                     meta={"part": 1, "parts": 2})


def test_owned_rows_and_owners_are_those_of_a_search():
    part = _part()
    directory = NodeDirectory(part)
    ids = torch.randint(0, 7, (50,), generator=torch.Generator().manual_seed(0))
    mine = part.owner[ids] == 1
    assert torch.equal(directory.slots(ids) >= 0, mine)
    assert torch.equal(directory.owned_rows(ids[mine]), torch.searchsorted(part.owned, ids[mine]))
    assert torch.equal(directory.owners(ids), part.owner[ids].to(torch.int64))
    assert directory.nbytes == 7 * 4 and directory.owned_rows(torch.zeros(0, dtype=torch.int64)).numel() == 0
    with pytest.raises(ValueError, match="rank 1 was asked for node 2, which it does not own"):
        directory.owned_rows(torch.tensor([4, 2]))
    with pytest.raises(ValueError, match="rank 1 was asked for node 9, which it does not own"):
        directory.owned_rows(torch.tensor([9]))


def test_cache_rows_are_recorded_and_replaced():
    directory = NodeDirectory(_part())
    directory.add_cached(torch.tensor([5, 0]))
    assert directory.slots(torch.tensor([5, 0, 2, 4])).tolist() == [-2, -3, REMOTE, 1]
    directory.add_cached(torch.tensor([2]))  # a new cache forgets the old one
    assert directory.slots(torch.tensor([5, 0, 2])).tolist() == [REMOTE, REMOTE, -2]
    with pytest.raises(ValueError, match="rank 1: a cache of remote rows cannot hold its own nodes"):
        directory.add_cached(torch.tensor([3, 6]))

"""Even seed counts across ranks: the targets, the transfers that reach them, which seeds go, and on
2 gloo ranks (``sampled_worker.py``) the balanced seeds' batches and labels."""

from __future__ import annotations

import random

import torch

from gnnkit.partitioned.node_directory import NodeDirectory
from gnnkit.partitioned.seed_balance import balance_seeds, even_targets, neighbour_shares, transfer_plan
from pipeline.partitioned import Partition


def test_targets_are_even_and_the_extra_seeds_stay_with_the_largest_ranks():
    assert even_targets([10, 3, 5]) == [6, 6, 6]
    assert even_targets([3, 10, 6]) == [6, 7, 6]  # 19 seeds: the rank with the most keeps the extra one
    assert even_targets([5, 5, 3]) == [5, 4, 4]  # ties: the lower rank first
    assert even_targets([0, 0]) == [0, 0] and even_targets([7]) == [7]


def test_the_plan_reaches_the_targets_moving_only_the_surplus():
    rng = random.Random(0)
    for _ in range(200):
        counts = [rng.randrange(0, 50) for _ in range(rng.randrange(1, 7))]
        plan, targets = transfer_plan(counts), even_targets(counts)
        world = len(counts)
        after = [counts[r] - sum(plan[r]) + sum(plan[g][r] for g in range(world)) for r in range(world)]
        assert after == targets
        assert all(plan[r][r] == 0 for r in range(world))
        for r in range(world):  # a rank gives or takes, never both, and never more than it must
            gives, takes = sum(plan[r]), sum(plan[g][r] for g in range(world))
            assert gives == max(0, counts[r] - targets[r]) and takes == max(0, targets[r] - counts[r])


def _part() -> Partition:
    """Part 0 of 3 of a 6-node graph: it owns nodes 0, 1 and 2; nodes 3, 4 belong to rank 1, 5 to rank 2."""
    # in-neighbour rows of nodes 0, 1, 2: [3, 4, 1], [5], []
    return Partition(owned=torch.tensor([0, 1, 2]), indptr=torch.tensor([0, 3, 4, 4]),
                     indices=torch.tensor([3, 4, 1, 5]), x=None, y=None, split={}, halo=None, halo_owner=None,
                     halo_refs=None, row_start=None, owner=torch.tensor([0, 0, 0, 1, 1, 2], dtype=torch.int16),
                     meta={"part": 0, "parts": 3})


def test_the_share_of_neighbours_on_a_rank_is_counted_per_row():
    part = _part()
    directory = NodeDirectory(part)
    seeds = torch.tensor([2, 0, 1])
    for rank in range(3):
        expected = []
        for seed in seeds.tolist():
            row = part.indices[part.indptr[seed]:part.indptr[seed + 1]]  # owned row = node id here
            expected.append(float((part.owner[row] == rank).sum()) / max(1, row.numel()))
        assert torch.allclose(neighbour_shares(part, directory, seeds, 3)[:, rank], torch.tensor(expected))


def test_one_rank_keeps_its_seeds():
    part = Partition(**{**_part().__dict__, "meta": {"part": 0, "parts": 1}})
    seeds, labels = torch.tensor([2, 0]), torch.tensor([5, 6])
    got = balance_seeds(part, NodeDirectory(part), seeds, labels)
    assert torch.equal(got[0], seeds) and torch.equal(got[1], labels)


def test_two_ranks_even_out_and_the_moved_seeds_train_on_the_whole_graphs_batches(sampled_ranks):
    before = [r["balanced"]["before"] for r in sampled_ranks]
    after = [r["balanced"]["after"] for r in sampled_ranks]
    assert len(before[1]) == 3 and len(before[0]) > 5  # rank 1 kept 3 of its seeds
    assert [len(a) for a in after] == even_targets([len(b) for b in before])
    assert sorted(after[0] + after[1]) == sorted(before[0] + before[1])  # every seed once
    assert after[1][:3] == before[1] and set(after[0]) <= set(before[0])  # rank 1 only received
    for result in sampled_ranks:
        balanced = result["balanced"]
        assert balanced["labels"] and balanced["batches"] and balanced["padding"] == 0
        assert balanced["covered"] == sorted(balanced["after"])

"""Neighbour sampling across partitions on 2 gloo ranks (``sampled_worker.py``): remote neighbour
lists are real edges of the whole graph, fan-out and no replacement hold, the seed decides the
batches, and with all neighbours the batches and logits are those of one process on the whole graph."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.sampler import NodeSamplerInput

from gnnkit.partitioned.remote_sampler import PartitionNeighborSampler, _FrontierLists, rank_seed
from pipeline.partitioned import Partition


def test_remote_neighbour_lists_are_the_whole_graphs(sampled_ranks):
    for result in sampled_ranks:
        assert result["batches"] == {"real_edges": True, "fanout": True, "without_replacement": True,
                                     "nodes_unique": True, "x": True}
        assert result["remote_nodes"] > 0  # the batches do reach into the other partition
    assert sampled_ranks[0]["steps"] == sampled_ranks[1]["steps"]


def test_the_seed_decides_the_batches(sampled_ranks):
    for result in sampled_ranks:
        assert result["determinism"] == {"same_seed": True, "epochs_differ": True, "restored": True,
                                         "other_seed_differs": True}


def test_all_neighbours_give_the_single_process_batches_and_logits(sampled_ranks):
    for result in sampled_ranks:
        exact = result["exact"]
        assert exact["batches"] > 0 and exact["same_batches"]
        for key in ("sage_pyg", "sage_gnnkit", "gcn_pyg", "gcn_gnnkit"):
            assert exact[key] < 1e-5, (key, exact[key])


def _one_part(num_nodes: int = 4) -> Partition:
    """The whole of a 4-node path graph as part 0 of 1."""
    indptr, indices = torch.tensor([0, 1, 3, 5, 6]), torch.tensor([1, 0, 2, 1, 3, 2])
    return Partition(owned=torch.arange(num_nodes), indptr=indptr, indices=indices, x=None,
                     y=torch.zeros(num_nodes, dtype=torch.int64), split={}, halo=torch.zeros(0, dtype=torch.int64),
                     halo_owner=torch.zeros(0, dtype=torch.int32), halo_refs=torch.zeros(0, dtype=torch.int64),
                     row_start=indptr[:-1], owner=torch.zeros(num_nodes, dtype=torch.int16),
                     meta={"part": 0, "parts": 1})


def test_one_partition_samples_like_one_process():
    sampler = PartitionNeighborSampler(_one_part(), [-1, 1], seed=0)
    out = sampler.sample(torch.tensor([1])).output(NodeSamplerInput(input_id=None, node=torch.tensor([1])))
    assert out.node[:3].tolist() == [1, 0, 2] and out.num_sampled_edges[0] == 2
    assert out.edge[:2].tolist() == [1, 2]  # positions in the whole graph's indices
    assert repr(sampler) == "PartitionNeighborSampler(num_neighbors=[-1, 1], seed=0, part=0 of 1)"
    assert rank_seed(0, 0) != rank_seed(0, 1) and rank_seed(3, 1) == rank_seed(3, 1)
    with pytest.raises(ValueError, match=r"seeds: expected node ids in \[0, 4\), got 7..7"):
        sampler.sample(torch.tensor([7]))
    wrong = _one_part()
    wrong.meta = {"part": 1, "parts": 2}
    with pytest.raises(ValueError, match="partition: part 1 of 2 opened on rank 0 of 1"):
        PartitionNeighborSampler(wrong, [2])


def test_lists_arriving_in_any_order_are_put_in_frontier_order():
    # blocks arrive for frontier nodes 2, 0, 3 (empty), 1; each keeps its own order
    lists = _FrontierLists(4, torch.tensor([2, 0, 3, 1]), torch.tensor([1, 2, 0, 3]))
    assert lists.place(torch.tensor([20, 0, 1]), torch.tensor([10, 11, 12])).tolist() == [0, 1, 10, 11, 12, 20]
    assert lists.segment().tolist() == [0, 0, 1, 1, 1, 2]


def test_edge_ids_past_int32_travel_as_int64():
    part = _one_part()
    part.row_start = part.row_start + 2**31  # as if the whole graph had more than 2^31 edges before these
    sampler = PartitionNeighborSampler(part, [-1], seed=0)
    out = sampler.sample(torch.tensor([1])).output(NodeSamplerInput(input_id=None, node=torch.tensor([1])))
    assert sampler._wire == torch.int64 and out.edge.tolist() == [2**31 + 1, 2**31 + 2]
    small = PartitionNeighborSampler(_one_part(), [-1], seed=0)
    small.sample(torch.tensor([1]))
    assert small._wire == torch.int32

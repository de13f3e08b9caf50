"""Adjacency across devices: it moves with the batch (PyG's ``Data.to`` reaches it), once per
device, and everything derived from it stays on its device. CUDA cases skip without a GPU."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from gnnkit.models.node_gnn import NodeGNN
from gnnkit.sparse import FORMATS, Adjacency, spmm
from gnnkit.sparse.normalize import gcn_normalized

def graph(weighted: bool = False) -> Adjacency:
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 40, (2, 300), generator=g)
    values = torch.rand(300, generator=g) if weighted else None
    return Adjacency.from_edge_index(edge_index, 40, values=values)


def test_same_device_is_identity_and_other_devices_are_cached_copies():
    adj = graph(weighted=True)
    assert adj.to("cpu") is adj and adj.cpu() is adj and adj.to(None) is adj
    moved = adj.to("meta")
    assert moved is adj.to(torch.device("meta"))  # built once, then cached
    assert moved.device.type == "meta" and moved.shape == adj.shape and moved.nnz == adj.nnz
    assert moved.values is not None and moved.values.device.type == "meta"


def test_derived_arrays_stay_on_the_matrix_device():
    moved = graph().to("meta")  # meta: shapes and devices only (no data-dependent ops)
    for derived in (moved.rows(), moved.weights(), moved.inv_row_counts(), moved.to_dense()):
        assert derived.device.type == "meta"


def test_pyg_data_to_carries_the_adjacency():
    adj = graph()
    data = Data(x=torch.randn(40, 3), adj=adj).to("meta")
    assert data.x.device.type == "meta" and data.adj.device.type == "meta"
    assert data.adj is adj.to("meta")  # a second run over the same graph reuses the copy


@pytest.mark.gpu
def test_conversions_built_on_cuda_stay_there():
    adj = Adjacency.from_edge_index(torch.tensor([[0, 1, 2], [1, 0, 0]], device="cuda"), 3)
    assert adj.device.type == "cuda"
    for derived in (adj.t().indptr, adj.t().indices, gcn_normalized(adj).indptr, gcn_normalized(adj).values):
        assert derived.device.type == "cuda"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_format_on_cuda_matches_the_cpu(name, dtype):
    """Formats with CUDA code give the CPU's values (also for mixed precision's 16-bit features);
    the CPU-only ones refuse CUDA in one line naming the format and the device."""
    adj = graph(weighted=True)
    x = torch.randn(40, 8, generator=torch.Generator().manual_seed(1)).to(dtype)
    fmt = FORMATS[name]
    if not fmt.runs_on(torch.device("cuda")):
        with pytest.raises(ValueError, match=f"format '{name}' has no implementation on cuda"):
            spmm(adj.to("cuda"), x.cuda(), format=name)
        return
    if not fmt.applicable(adj):
        pytest.skip(f"{name} cannot hold this matrix")
    expected = spmm(adj, x.float(), format=name)
    got = spmm(adj.to("cuda"), x.cuda(), format=name)
    assert got.dtype == dtype
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(got.float().cpu(), expected, **tol)


@pytest.mark.gpu
def test_gnnkit_aggregation_trains_on_cuda():
    adj = graph()
    data = Data(x=torch.randn(40, 5), adj=adj, edge_index=torch.stack([adj.rows(), adj.indices]).flip(0)).to("cuda")
    model = NodeGNN("gcn", 5, 8, 3, num_layers=2, aggregation="gnnkit").cuda()
    out = model(data.x, data.edge_index, adj=data.adj)
    out.sum().backward()
    assert out.device.type == "cuda" and out.shape == (40, 3)


def test_indptr_of_sorted_ids_counts_like_bincount():
    from gnnkit.sparse.adjacency import indptr_of

    ids = torch.tensor([0, 0, 2, 2, 2, 5])  # rows 1, 3, 4 and 6 empty
    expected = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(ids, minlength=7).cumsum(0)])
    assert torch.equal(indptr_of(ids, 7), expected) and indptr_of(ids[:0], 3).tolist() == [0, 0, 0, 0]


def test_from_edge_index_of_int32_unsorted_edges():
    edges = torch.tensor([[0, 2, 1], [2, 0, 1]], dtype=torch.int32)
    adj = Adjacency.from_edge_index(edges, 3)
    assert adj.indptr.tolist() == [0, 1, 2, 3] and adj.indices.tolist() == [2, 1, 0]


def test_from_edge_index_checks_ids_in_one_pass_and_builds_a_valid_matrix():
    edges = torch.tensor([[2, 0, 1, 2], [1, 0, 1, 0]])
    adj = Adjacency.from_edge_index(edges, 3, num_dst=2)
    assert adj.shape == (2, 3) and adj.indptr.tolist() == [0, 2, 4] and adj.indices.tolist() == [0, 2, 2, 1]
    Adjacency(adj.indptr, adj.indices, num_cols=3)  # what validation would have said
    empty = Adjacency.from_edge_index(torch.zeros(2, 0, dtype=torch.long), 3)
    assert empty.shape == (3, 3) and empty.nnz == 0
    assert Adjacency.from_edge_index(edges).shape == (3, 3)
    for bad, match in [(torch.tensor([[3], [0]]), r"source ids must lie in \[0, 3\) .* got 3..3"),
                       (torch.tensor([[0], [2]]), r"destination ids in \[0, 2\), got 0..0 and 2..2"),
                       (torch.tensor([[-1], [0]]), "got -1..-1")]:
        with pytest.raises(ValueError, match=match):
            Adjacency.from_edge_index(bad, 3, num_dst=2)
    with pytest.raises(ValueError, match=r"values must have shape \(4,\)"):
        Adjacency.from_edge_index(edges, 3, values=torch.ones(3))


def test_a_single_use_matrixs_transpose_keeps_no_link_back():
    """A single-use matrix and its transpose go with their last reference, not with Python's cycle
    collector (on a GPU, device memory held across steps); a lasting matrix's transpose leads back."""
    import gc
    import weakref

    edges = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    lasting = Adjacency.from_edge_index(edges, 3)
    assert lasting.t().t() is lasting
    block = Adjacency.from_edge_index(edges, 3, single_use=True)
    transposed = weakref.ref(block.t())
    torch.testing.assert_close(transposed().to_dense(), block.to_dense().t())
    gc.disable()
    try:
        gone = weakref.ref(block)
        del block
        assert gone() is None and transposed() is None
    finally:
        gc.enable()


@pytest.mark.parametrize(("build", "message"), [
    (lambda: Adjacency(torch.tensor([0.0, 1.5, 3.0]), torch.tensor([0, 1, 1])), "indptr must be an integer tensor"),
    (lambda: Adjacency.from_edge_index(torch.tensor([[0.6, 1.2], [1.5, 0.2]])), "edge_index must be an integer"),
    (lambda: Adjacency.from_edge_index(torch.tensor([[True], [False]])), "edge_index must be an integer"),
    (lambda: Adjacency(torch.tensor([0, 1]), torch.tensor([0]), num_cols=2.9), "num_cols must be an integer"),
    (lambda: Adjacency.from_edge_index([[0, 1], [1, 0]]), "edge_index must be a torch.Tensor, got list"),
    (lambda: Adjacency.from_edge_index(torch.tensor([[0], [1]]), num_nodes=2.5), "num_nodes must be an integer >= 0"),
    (lambda: spmm(Adjacency.from_edge_index(torch.tensor([[0], [1]])), torch.ones(2, 3, dtype=torch.long)),
     "spmm: x must be a floating-point tensor"),
], ids=["float indptr", "float edges", "bool edges", "float num_cols", "a list", "float num_nodes", "integer x"])
def test_ids_and_features_of_the_wrong_kind_are_refused(build, message):
    """Float ids were cast without a word (1.5 -> 1: another graph); an integer x made `auto` time
    formats on random integers and fail inside torch."""
    with pytest.raises((TypeError, ValueError), match=message):
        build()


def test_weights_that_are_no_tensor_and_ids_too_large_to_hold_are_one_line():
    """A list of weights was an AttributeError; an id of 2**40 without num_nodes asked the allocator
    for 8.8 TB and said only that."""
    edges = torch.tensor([[0, 1, 2], [1, 2, 0]])
    with pytest.raises(TypeError, match="values must be a torch.Tensor of edge weights, got list"):
        Adjacency.from_edge_index(edges, values=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"the largest node id, 1,099,511,627,776, makes a row pointer .* pass "
                                         r"num_nodes, or relabel the ids"):
        Adjacency.from_edge_index(torch.tensor([[0], [2**40]]))

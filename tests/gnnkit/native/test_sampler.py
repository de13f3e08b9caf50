"""Native neighbour sampler: structural invariants, determinism, and the CSRNeighborSampler hook."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch_geometric.sampler import NodeSamplerInput

from gnnkit import native
from gnnkit.data.sampler import CSRNeighborSampler
from gnnkit.native import ops

from .conftest import powerlaw_csr


def check_sample(indptr, indices, seeds, fanouts, replace, node, row, col, edge, num_nodes, num_edges):
    """Every invariant of the CSRNeighborSampler output layout, replayed hop by hop."""
    ip, ix, seeds = indptr.tolist(), indices.tolist(), seeds.tolist()
    node, row, col, edge = node.tolist(), row.tolist(), col.tolist(), edge.tolist()
    assert len(num_nodes) == len(fanouts) + 1 and len(num_edges) == len(fanouts)
    assert sum(num_nodes) == len(node) and sum(num_edges) == len(edge) == len(row) == len(col)
    assert node[: len(seeds)] == seeds  # seeds first, verbatim
    later = node[len(seeds):]
    assert len(set(later)) == len(later) and not set(later) & set(seeds)
    first: dict[int, int] = {}
    for i, v in enumerate(seeds):
        first.setdefault(v, i)
    known, lo, hi, e0 = list(seeds), 0, len(seeds), 0
    for hop, k in enumerate(fanouts):
        hop_slice = slice(e0, e0 + num_edges[hop])
        hop_col, hop_edge, hop_row = col[hop_slice], edge[hop_slice], row[hop_slice]
        assert hop_col == sorted(hop_col) and set(hop_col) <= set(range(lo, hi))
        per_dst: dict[int, list[int]] = {}
        for c, e in zip(hop_col, hop_edge):
            per_dst.setdefault(c, []).append(e)
        for pos in range(lo, hi):
            v = known[pos]
            deg, got = ip[v + 1] - ip[v], per_dst.get(pos, [])
            assert all(ip[v] <= e < ip[v + 1] for e in got)  # every sampled edge is in the row
            if k < 0:
                assert got == list(range(ip[v], ip[v + 1]))
            elif replace:
                assert len(got) == (k if deg else 0)
            else:
                assert len(got) == min(deg, k) and len(set(got)) == len(got)
        for r, e in zip(hop_row, hop_edge):  # discovery order and local ids
            u = ix[e]
            if u not in first:
                first[u] = len(known)
                known.append(u)
            assert r == first[u]
        assert len(known) - hi == num_nodes[hop + 1]
        lo, hi, e0 = hi, len(known), e0 + num_edges[hop]
    assert known == node


@pytest.fixture(scope="module")
def graph():
    return powerlaw_csr(500, seed=4, avg=30)


@pytest.mark.parametrize("fanouts", [[5], [3, 2], [-1], [2, -1], [0, 3], [40, 70], [150]])
@pytest.mark.parametrize("replace", [False, True])
def test_invariants(ext, graph, fanouts, replace):
    indptr, indices = graph
    seeds = torch.tensor([3, 0, 7, 7, 499, 12, 3, 250])  # repeated seeds, hub (node 0), empty rows likely
    out = ops.sample_neighbors(indptr, indices, seeds, fanouts, replace, seed=11)
    check_sample(indptr, indices, seeds, fanouts, replace, *out)


def test_empty_graph_and_isolated_seeds(ext):
    indptr, indices = torch.zeros(6, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    seeds = torch.tensor([4, 1, 1])
    for replace in (False, True):
        out = ops.sample_neighbors(indptr, indices, seeds, [3, 2], replace, seed=0)
        check_sample(indptr, indices, seeds, [3, 2], replace, *out)
        assert out[4] == [3, 0, 0] and out[5] == [0, 0]
    out = ops.sample_neighbors(indptr, indices, torch.zeros(0, dtype=torch.long), [3], False, seed=0)
    assert out[0].numel() == 0 and out[4] == [0, 0]


def test_deterministic_under_seed_and_thread_count(ext, graph):
    indptr, indices = graph
    seeds = torch.arange(0, 500, 3)
    old = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 1):
            torch.set_num_threads(threads)
            results.append(ops.sample_neighbors(indptr, indices, seeds, [10, 5], False, seed=5))
    finally:
        torch.set_num_threads(old)
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0][:4], other[:4])) and results[0][4:] == other[4:]
    different = ops.sample_neighbors(indptr, indices, seeds, [10, 5], False, seed=6)
    assert not torch.equal(different[3], results[0][3])


def test_uniform_choices(ext):
    """One row of 10 edges sampled 20000 times (fixed seed): every edge about equally often."""
    indptr, indices = torch.tensor([0, 10] + [10] * 10), torch.arange(1, 11)
    seeds = torch.zeros(20000, dtype=torch.long)
    for replace, k in ((False, 3), (True, 1), (False, 1)):
        edge = ops.sample_neighbors(indptr, indices, seeds, [k], replace, seed=1)[3]
        counts = Counter(edge.tolist())
        expected = 20000 * k / 10
        assert set(counts) == set(range(10)) and all(abs(c - expected) < 0.06 * expected for c in counts.values())


def test_scratch_map_is_left_clean(ext, graph):
    indptr, indices = graph
    local = torch.full((500,), -1, dtype=torch.int32)
    ops.sample_neighbors(indptr, indices, torch.tensor([1, 2, 3]), [4, 4], False, seed=3, local=local)
    assert bool((local == -1).all())


def test_whole_rows_equal_the_python_sampler(ext, graph):
    """With fan-out -1 there is no randomness: native and pure-PyTorch outputs are identical."""
    indptr, indices = graph
    sampler = CSRNeighborSampler(indptr, indices, [-1, 2], seed=0)
    index = NodeSamplerInput(input_id=None, node=torch.tensor([5, 9, 5, 100]))
    sampler.num_neighbors = [-1, -1]
    native_out = sampler.sample_from_nodes(index)
    with native.disabled():
        python_out = sampler.sample_from_nodes(index)
    for key in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(native_out, key), getattr(python_out, key)), key
    assert native_out.num_sampled_nodes == python_out.num_sampled_nodes
    assert native_out.num_sampled_edges == python_out.num_sampled_edges


@pytest.mark.parametrize("forced_off", [False, True])
def test_csr_neighbor_sampler_hook(ext, graph, forced_off, monkeypatch):
    """The sampler uses the native kernel when built, the pure-PyTorch path when forced off; both
    satisfy the layout and repeat under the sampler's seed."""
    if forced_off:
        monkeypatch.setenv("GNNKIT_NATIVE", "0")
    indptr, indices = graph
    seeds = torch.tensor([8, 2, 2, 77])
    outs = []
    for _ in range(2):
        sampler = CSRNeighborSampler(indptr, indices, [6, 3], replace=False, seed=42)
        out = sampler.sample_from_nodes(NodeSamplerInput(input_id=torch.arange(4), node=seeds))
        check_sample(indptr, indices, seeds, [6, 3], False, out.node, out.row, out.col, out.edge,
                     out.num_sampled_nodes, out.num_sampled_edges)
        assert torch.equal(out.metadata[0], torch.arange(4))
        outs.append(out)
    assert torch.equal(outs[0].edge, outs[1].edge)
    assert native.available() is not forced_off

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


@pytest.mark.parametrize("k", [-1, 0, 3, 40, 150])
@pytest.mark.parametrize("replace", [False, True])
def test_sample_rows_keeps_the_fanout_rules(ext, graph, k, replace):
    """One hop over given rows (repeats included): each row's edges lie in the row, with its sources,
    as many as the rules say, distinct without replacement; renumbered edges shift by the row's base."""
    indptr, indices = graph
    sampler = CSRNeighborSampler(indptr, indices, [k], replace=replace)
    rows = torch.tensor([0, 7, 499, 7, 12, 250, 3])
    base = torch.randint(0, 10**9, (500,), generator=torch.Generator().manual_seed(1))
    src, edge, count = ops.sample_rows(sampler, rows, k, torch.Generator().manual_seed(2))
    _, shifted, again = ops.sample_rows(sampler, rows, k, torch.Generator().manual_seed(2), edge_base=base)
    assert torch.equal(count, again) and torch.equal(src, indices[edge])
    segment = torch.repeat_interleave(torch.arange(rows.numel()), count)
    row = rows[segment]
    assert torch.equal(shifted, base[row] + edge - indptr[row])
    deg = indptr[rows + 1] - indptr[rows]
    expected = deg if k < 0 else torch.where(deg > 0, k, 0) if replace else deg.clamp(max=k)
    assert torch.equal(count, expected)
    assert bool(((indptr[row] <= edge) & (edge < indptr[row + 1])).all())
    if not replace:
        assert all(part.unique().numel() == part.numel() for part in torch.split(edge, count.tolist()))
    if k < 0:
        assert torch.equal(edge, torch.cat([torch.arange(int(indptr[r]), int(indptr[r + 1])) for r in rows]))


def test_sample_rows_repeats_under_its_generator_and_checks_inputs(ext, graph):
    indptr, indices = graph
    sampler = CSRNeighborSampler(indptr, indices, [5])
    rows = torch.arange(0, 500, 7)
    one, two = (ops.sample_rows(sampler, rows, 5, torch.Generator().manual_seed(s))[1] for s in (3, 3))
    assert torch.equal(one, two)
    assert not torch.equal(one, ops.sample_rows(sampler, rows, 5, torch.Generator().manual_seed(4))[1])
    with pytest.raises(ValueError, match=r"sample_rows: rows out of range: entries must lie in \[0, 500\)"):
        ops.sample_rows(sampler, torch.tensor([500]), 5, None)
    with pytest.raises(ValueError, match="sample_rows: rows must be a 1-D int64 tensor"):
        ops.sample_rows(sampler, torch.tensor([1], dtype=torch.int32), 5, None)
    with pytest.raises(ValueError, match="sample_rows: the fan-out must be >= -1"):
        ops.sample_rows(sampler, rows, -2, None)
    with pytest.raises(ValueError, match="sample_rows: edge_base must hold 500 entries"):
        ops.sample_rows(sampler, rows, 5, None, edge_base=torch.zeros(3, dtype=torch.long))


def test_sample_row_edges_falls_back_to_pytorch(ext, graph, monkeypatch):
    """CSRNeighborSampler.sample_row_edges: the kernel when built, sample_rows when not; with fan-out
    -1 both give the same edges, sources and renumbered ids."""
    indptr, indices = graph
    sampler = CSRNeighborSampler(indptr, indices, [-1])
    rows, base = torch.tensor([3, 0, 3, 42]), torch.arange(500) * 1000
    built = sampler.sample_row_edges(rows, -1, None, base)
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    assert not native.available()
    plain = sampler.sample_row_edges(rows, -1, None, base)
    assert all(torch.equal(a, b) for a, b in zip(built, plain))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_relabel_equals_the_pytorch_relabelling(ext, dtype):
    """The kernel numbers nodes as gnnkit.data.sampler.relabel does, and records them the same way."""
    from gnnkit.data.sampler import relabel as torch_relabel

    gen = torch.Generator().manual_seed(0)
    local = torch.full((300,), -1, dtype=dtype)
    local[torch.tensor([5, 9, 17])] = torch.tensor([0, 1, 2], dtype=dtype)
    src = torch.randint(0, 300, (2000,), generator=gen)
    theirs_local = local.clone()
    ours, ours_new = ops.relabel(src, local, 3)
    theirs, theirs_new = torch_relabel(src, theirs_local, 3)
    assert torch.equal(ours, theirs) and torch.equal(ours_new, theirs_new) and torch.equal(local, theirs_local)
    assert ours.dtype == torch.int64 and torch.equal(ops.relabel(src[:0], local, 3)[1], src[:0])
    with pytest.raises(ValueError, match=r"relabel: src out of range: entries must lie in \[0, 300\)"):
        ops.relabel(torch.tensor([300]), local, 0)
    with pytest.raises(ValueError, match="relabel: local must be a contiguous int32/int64 vector"):
        ops.relabel(src, local.float(), 0)
    with pytest.raises(RuntimeError, match="too many sampled edges"):
        ops.relabel(src, local, torch.iinfo(dtype).max)

"""Tests for gnnkit.data.sampler: CSR neighbour sampling behind PyG's NodeLoader."""

import hashlib
import pickle
import warnings
from collections import Counter
from itertools import combinations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.nn import SAGEConv
from torch_geometric.sampler import NodeSamplerInput
from torch_geometric.utils import trim_to_layer

from gnnkit.data.sampler import CSRNeighborSampler, neighbor_loader

# Graphs ##############################################################


def _csr_from_rows(rows):
    """CSR (rows = destinations) from a list of per-destination source lists."""
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.array([u for r in rows for u in r], dtype=np.int64)
    return torch.from_numpy(indptr), torch.from_numpy(indices)


def _powerlaw_graph(n, seed=0, avg=8, max_deg=None, zero_frac=0.1):
    """Power-law in-degrees and preferential sources, with empty rows, nodes that
    are never a source, self loops and duplicate edges."""
    rng = np.random.default_rng(seed)
    max_deg = max_deg or n // 2
    deg = np.minimum((rng.pareto(1.3, n) + 1) * avg / 3, max_deg).astype(np.int64)
    deg[rng.random(n) < zero_frac] = 0
    weight = rng.pareto(1.3, n) + 1
    weight[rng.random(n) < 0.1] = 0  # never a source (isolated if the row is empty too)
    weight /= weight.sum()
    rows = []
    for v in range(n):
        r = list(rng.choice(n, size=deg[v], p=weight))
        if r and rng.random() < 0.2:
            r[0] = v  # self loop
        if len(r) > 1 and rng.random() < 0.3:
            r[-1] = r[0]  # duplicate edge
        rows.append(r)
    return _csr_from_rows(rows)


TINY = [[1, 1, 2], [], [2, 0, 3, 3, 1], [], [4], []]  # dup edges, empty rows, self loops, isolated node 5


@pytest.fixture(scope="module")
def graph():
    return _powerlaw_graph(600, seed=1)


@pytest.fixture(scope="module")
def dense_graph():
    # Many rows of degree 34..66 and above 66, for the k > 32 paths (random keys, rejection).
    return _powerlaw_graph(300, seed=2, avg=60, max_deg=250, zero_frac=0.05)


# Reference checks #####################################################


def _check_output(out, indptr, indices, seeds, num_neighbors, replace):
    """Checks every invariant of a SamplerOutput against a pure-Python reference."""
    indptr_l, indices_l = indptr.tolist(), indices.tolist()
    node, row, col, edge = out.node.tolist(), out.row.tolist(), out.col.tolist(), out.edge.tolist()
    seeds = seeds.tolist()
    for t in (out.node, out.row, out.col, out.edge):
        assert t.dtype == torch.long and t.dim() == 1
    assert out.batch is None
    assert len(row) == len(col) == len(edge)

    # Counts per hop are plain ints and add up.
    assert all(type(c) is int for c in out.num_sampled_nodes + out.num_sampled_edges)
    assert len(out.num_sampled_nodes) == len(num_neighbors) + 1
    assert len(out.num_sampled_edges) == len(num_neighbors)
    assert sum(out.num_sampled_nodes) == len(node)
    assert sum(out.num_sampled_edges) == len(edge)

    # Seeds first, verbatim; every later node is new and unique.
    assert node[: len(seeds)] == seeds
    assert out.num_sampled_nodes[0] == len(seeds)
    assert len(set(node[len(seeds) :])) == len(node) - len(seeds)
    assert not set(node[len(seeds) :]) & set(seeds)

    # Every edge exists: its id is a position in the destination's row whose source is the row node.
    for r, c, e in zip(row, col, edge):
        v = node[c]
        assert indptr_l[v] <= e < indptr_l[v + 1]
        assert indices_l[e] == node[r]

    # Replay the hops PyG-style (pyg-lib semantics) from the sampled edge ids alone.
    first = {}
    for i, v in enumerate(seeds):
        first.setdefault(v, i)
    ref_node = list(seeds)
    ref_row, ref_col = [], []
    lo, hi, e0 = 0, len(seeds), 0
    for hop, k in enumerate(num_neighbors):
        n_edges = out.num_sampled_edges[hop]
        hop_col, hop_edge = col[e0 : e0 + n_edges], edge[e0 : e0 + n_edges]
        assert hop_col == sorted(hop_col), "edges must be grouped by destination in node order"
        per_dst = {}
        for c, e in zip(hop_col, hop_edge):
            per_dst.setdefault(c, []).append(e)
        assert set(per_dst) <= set(range(lo, hi)), "destinations must be the previous hop's new nodes"
        for pos in range(lo, hi):
            v = ref_node[pos]
            deg = indptr_l[v + 1] - indptr_l[v]
            got = per_dst.get(pos, [])
            if k < 0:
                assert got == list(range(indptr_l[v], indptr_l[v + 1]))  # whole row, in CSR order
            elif replace:
                assert len(got) == (k if deg else 0)
            else:
                assert len(got) == min(deg, k)
                assert len(set(got)) == len(got), "distinct positions without replacement"
                if deg <= k:
                    assert sorted(got) == list(range(indptr_l[v], indptr_l[v + 1]))
        for c, e in zip(hop_col, hop_edge):
            u = indices_l[e]
            if u not in first:
                first[u] = len(ref_node)
                ref_node.append(u)
            ref_row.append(first[u])
            ref_col.append(c)
        assert len(ref_node) - hi == out.num_sampled_nodes[hop + 1]
        lo, hi, e0 = hi, len(ref_node), e0 + n_edges
    assert ref_node == node
    assert ref_row == row and ref_col == col


def _sample(sampler, seeds):
    return sampler.sample_from_nodes(NodeSamplerInput(input_id=torch.arange(len(seeds)), node=seeds))


# Sampler: correctness #################################################


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize(
    "num_neighbors",
    [[3, 2], [1, 1, 1], [40, 5], [33, 33], [-1, 2], [0, 4], [5, -1], [], [100]],
    ids=lambda v: "x".join(map(str, v)) or "none",
)
@pytest.mark.parametrize("graph_name", ["graph", "dense_graph"])
def test_sampler_matches_reference_on_powerlaw_graph(graph_name, num_neighbors, replace, request):
    indptr, indices = request.getfixturevalue(graph_name)
    sampler = CSRNeighborSampler(indptr, indices, num_neighbors, replace=replace, seed=3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        seeds = torch.randint(0, indptr.numel() - 1, (40,), generator=gen)  # may repeat
        seeds[5] = seeds[2]  # a repeated seed for sure
        seeds[7] = int(torch.argmax(indptr.diff()))  # the biggest hub
        out = _sample(sampler, seeds)
        _check_output(out, indptr, indices, seeds, num_neighbors, replace)
        assert out.metadata[0].tolist() == list(range(len(seeds))) and out.metadata[1] is None
    assert bool((sampler._local == -1).all()), "scratch map must be reset after each batch"


@pytest.mark.parametrize("replace", [False, True])
def test_sampler_handles_tiny_and_edgeless_graphs(replace):
    indptr, indices = _csr_from_rows(TINY)
    sampler = CSRNeighborSampler(indptr, indices, [2, 2, 2], replace=replace, seed=0)
    for seeds in ([0], [5], [3, 1], [2, 2, 0], list(range(6)), []):
        seeds = torch.tensor(seeds, dtype=torch.long)
        _check_output(_sample(sampler, seeds), indptr, indices, seeds, [2, 2, 2], replace)

    indptr, indices = _csr_from_rows([[], [], []])
    out = _sample(CSRNeighborSampler(indptr, indices, [5, -1], replace=replace), torch.tensor([2, 0]))
    assert out.node.tolist() == [2, 0] and out.row.numel() == 0
    assert out.num_sampled_nodes == [2, 0, 0] and out.num_sampled_edges == [0, 0]


def test_full_neighbourhood_takes_every_edge(graph):
    indptr, indices = graph
    seeds = torch.arange(0, 600, 7)
    out = _sample(CSRNeighborSampler(indptr, indices, [-1, -1]), seeds)
    _check_output(out, indptr, indices, seeds, [-1, -1], False)
    first_hop = out.edge[: out.num_sampled_edges[0]]
    expected = torch.cat([torch.arange(indptr[v], indptr[v + 1]) for v in seeds.tolist()])
    assert torch.equal(first_hop, expected)


@pytest.mark.parametrize("k,replace", [(10, False), (40, False), (40, True)], ids=["floyd", "rejection", "replace"])
def test_hub_rows_are_never_materialised(k, replace):
    # A destination with 10**12 in-edges (a stride-0 view, no memory): touching its whole row
    # would need terabytes, so this only passes if the cost is O(k) per row.
    n_hub = 10**12
    indptr = torch.tensor([0, n_hub, n_hub, n_hub + 2], dtype=torch.long)
    indices = torch.ones(1, dtype=torch.long).expand(n_hub + 2)
    sampler = CSRNeighborSampler(indptr, indices, [k, k], replace=replace, seed=0)
    out = _sample(sampler, torch.tensor([0, 2, 0]))
    small = k if replace else 2  # node 2 has two in-edges
    assert out.node.tolist() == [0, 2, 0, 1]
    assert out.num_sampled_nodes == [3, 1, 0] and out.num_sampled_edges == [2 * k + small, 0]
    assert out.col.tolist() == [0] * k + [1] * small + [2] * k and out.row.tolist() == [3] * (2 * k + small)
    hub_a, mid, hub_b = out.edge.split([k, small, k])
    assert set(mid.tolist()) <= {n_hub, n_hub + 1}
    for hub in (hub_a, hub_b):
        assert 0 <= int(hub.min()) and int(hub.max()) < n_hub
        assert replace or hub.unique().numel() == k
    assert not torch.equal(hub_a, hub_b)


@pytest.mark.parametrize("pick,deg,k", [("_pick_floyd", 6, 2), ("_pick_dense", 4, 2), ("_pick_sparse", 7, 3)])
def test_pick_helpers_draw_uniform_subsets(pick, deg, k):
    # Every k-subset of a row must be equally likely (joint, not only marginal, uniformity).
    rows = 30_000
    gen = torch.Generator().manual_seed(0)
    picked = getattr(CSRNeighborSampler, pick)(torch.full((rows,), deg), k, gen)
    assert picked.shape == (rows, k) and picked.min() >= 0 and picked.max() < deg
    subsets = Counter(tuple(sorted(r)) for r in picked.tolist())
    assert all(len(set(s)) == k for s in subsets)
    expected = rows / len(list(combinations(range(deg), k)))
    assert len(subsets) == len(list(combinations(range(deg), k)))
    chi2 = sum((c - expected) ** 2 / expected for c in subsets.values())
    assert chi2 < 3 * len(subsets) + 30  # far above the 0.999 quantile for <= 35 dof


def test_pick_helpers_on_varied_and_huge_degrees():
    gen = torch.Generator().manual_seed(1)
    for pick, k, deg in [
        ("_pick_floyd", 5, torch.tensor([6, 7, 50, 10**9, 2**40])),
        ("_pick_dense", 40, torch.tensor([41, 60, 80])),
        ("_pick_sparse", 40, torch.tensor([81, 100, 10**6, 2**40])),
    ]:
        for _ in range(50):
            picked = getattr(CSRNeighborSampler, pick)(deg, k, gen)
            assert bool((picked >= 0).all()) and bool((picked < deg.unsqueeze(1)).all())
            assert all(len(set(r)) == k for r in picked.tolist())


@pytest.mark.parametrize(
    "k,deg,replace",
    [(5, 20, False), (40, 60, False), (40, 200, False), (5, 20, True), (1, 9, False)],
    ids=["floyd", "dense", "sparse", "replace", "k1"],
)
def test_sampling_is_roughly_uniform(k, deg, replace):
    # One node sampled 3000 times at once (a repeated seed is sampled independently at each position).
    indptr = torch.tensor([0, deg], dtype=torch.long)
    indices = torch.zeros(deg, dtype=torch.long)
    sampler = CSRNeighborSampler(indptr, indices, [k], replace=replace, seed=11)
    draws = 3000
    out = _sample(sampler, torch.zeros(draws, dtype=torch.long))
    assert out.edge.numel() == draws * k
    counts = torch.bincount(out.edge, minlength=deg).double()
    expected = draws * k / deg
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # Without replacement counts are less variable than multinomial, so this bound is loose but
    # still catches biased selection (e.g. favouring the start of the row).
    assert chi2 < deg - 1 + 6 * (2 * (deg - 1)) ** 0.5, (chi2, counts)


def test_deterministic_under_seed_and_different_across_seeds(graph):
    indptr, indices = graph
    seeds = [torch.arange(i, 600, 13) for i in range(3)]

    def run(seed):
        sampler = CSRNeighborSampler(indptr, indices, [4, 3], seed=seed)
        return [_sample(sampler, s) for s in seeds]

    a, b, c = run(5), run(5), run(6)
    for x, y in zip(a, b):
        assert torch.equal(x.node, y.node) and torch.equal(x.edge, y.edge) and torch.equal(x.row, y.row)
    assert any(not torch.equal(x.edge, z.edge) for x, z in zip(a, c))
    assert not torch.equal(a[0].edge, a[1].edge[: a[0].edge.numel()])  # the stream moves on

    # seed=None draws from torch's global generator.
    sampler = CSRNeighborSampler(indptr, indices, [4, 3])
    torch.manual_seed(0)
    first = _sample(sampler, seeds[0])
    torch.manual_seed(0)
    assert torch.equal(first.edge, _sample(sampler, seeds[0]).edge)


def test_saved_random_state_continues_only_on_the_same_kind_of_device(graph, caplog):
    """A checkpoint's sampler state continues the stream; one saved by a generator on another
    kind of device (or older, device-less, states on a GPU) is left out with a warning."""
    indptr, indices = graph
    seeds = torch.arange(0, 600, 7)
    sampler = CSRNeighborSampler(indptr, indices, [4, 3], seed=1)
    _sample(sampler, seeds)
    state = sampler.state_dict()
    assert state["device"] == "cpu"
    expected = _sample(sampler, seeds).edge
    for saved in (state, {"generator": state["generator"]}):  # older checkpoints: CPU states
        resumed = CSRNeighborSampler(indptr, indices, [4, 3], seed=1)
        resumed.load_state_dict(saved)
        assert torch.equal(_sample(resumed, seeds).edge, expected)
    resumed = CSRNeighborSampler(indptr, indices, [4, 3], seed=1)
    with caplog.at_level("WARNING", logger="gnnkit"):
        resumed.load_state_dict({**state, "device": "cuda"})
    assert "saved random state is a cuda generator's but it now samples on cpu" in caplog.text
    fresh = CSRNeighborSampler(indptr, indices, [4, 3], seed=1)
    assert torch.equal(_sample(resumed, seeds).edge, _sample(fresh, seeds).edge)


def test_scratch_map_is_rebuilt_after_a_failure(graph, monkeypatch):
    monkeypatch.setenv("GNNKIT_NATIVE", "0")  # the failure is injected into the pure-PyTorch path
    indptr, indices = graph
    sampler = CSRNeighborSampler(indptr, indices, [3, 3], seed=0)
    seeds = torch.arange(0, 600, 5)
    _sample(sampler, seeds)
    calls = {"n": 0}
    original = CSRNeighborSampler.sample_rows

    def flaky(self, *args):
        calls["n"] += 1
        if calls["n"] == 2:  # fail in the second hop, after the map was written
            raise RuntimeError("boom")
        return original(self, *args)

    monkeypatch.setattr(CSRNeighborSampler, "sample_rows", flaky)
    with pytest.raises(RuntimeError, match="boom"):
        _sample(sampler, seeds)
    monkeypatch.undo()
    _check_output(_sample(sampler, seeds), indptr, indices, seeds, [3, 3], False)
    assert bool((sampler._local == -1).all())


def test_pickle_round_trip_drops_scratch(graph):
    indptr, indices = graph
    sampler = CSRNeighborSampler(indptr, indices, [3, 2], seed=4)
    _sample(sampler, torch.arange(10))
    clone = pickle.loads(pickle.dumps(sampler))
    assert clone._local is None and clone.num_neighbors == [3, 2] and clone.seed == 4
    _check_output(_sample(clone, torch.arange(10)), indptr, indices, torch.arange(10), [3, 2], False)


def test_validation_and_repr():
    indptr, indices = _csr_from_rows(TINY)
    sampler = CSRNeighborSampler(indptr, indices, [15, 10])
    assert repr(sampler) == "CSRNeighborSampler(num_neighbors=[15, 10], replace=False)"
    assert repr(CSRNeighborSampler(indptr, indices, (2,), replace=True, seed=7)) == (
        "CSRNeighborSampler(num_neighbors=[2], replace=True, seed=7)"
    )
    assert CSRNeighborSampler(indptr, indices, [1]).edge_permutation is None
    bad = [
        dict(indptr=indptr.int()),
        dict(indices=indices.float()),
        dict(indptr=indptr.view(1, -1)),
        dict(indices=indices[:-1]),  # indptr does not end at len(indices)
        dict(indptr=indptr + 1),  # does not start at 0
        dict(indptr=torch.empty(0, dtype=torch.long)),
        dict(indptr=indptr.numpy()),
        dict(num_neighbors=[3, -2]),
        dict(num_neighbors=[2.5]),
        dict(num_neighbors=[True]),
        dict(num_neighbors="15,10"),
        dict(num_neighbors=5),
        dict(replace="yes"),
        dict(seed=-1),
        dict(seed=1.5),
    ]
    for override in bad:
        kwargs = dict(indptr=indptr, indices=indices, num_neighbors=[2], **{})
        kwargs.update(override)
        with pytest.raises(ValueError):
            CSRNeighborSampler(**kwargs)

    sampler = CSRNeighborSampler(indptr, indices, [2])
    with pytest.raises(ValueError, match="seed node ids"):
        _sample(sampler, torch.tensor([0, 6]))
    with pytest.raises(NotImplementedError, match="temporal"):
        sampler.sample_from_nodes(NodeSamplerInput(None, torch.tensor([0]), time=torch.tensor([1])))
    with pytest.raises(NotImplementedError):
        sampler.sample_from_edges(None)


# NodeLoader end to end ################################################


def _node_data(n, num_features=8, num_classes=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, num_features, generator=gen), y=torch.randint(0, num_classes, (n,), generator=gen))


def _check_batch(batch, data, indptr, indices, num_neighbors):
    assert batch.batch_size == batch.input_id.numel()
    assert torch.equal(batch.n_id[: batch.batch_size], batch.input_id)  # input_nodes = all nodes here
    assert batch.num_nodes == batch.n_id.numel() == sum(batch.num_sampled_nodes)
    assert batch.edge_index.shape == (2, batch.e_id.numel()) and batch.edge_index.dtype == torch.long
    assert batch.num_sampled_edges is not None and sum(batch.num_sampled_edges) == batch.e_id.numel()
    if data.x is not None:
        assert torch.equal(batch.x, data.x[batch.n_id])
    assert torch.equal(batch.y, data.y[batch.n_id])
    src, dst = batch.edge_index
    assert batch.edges_by_destination and bool((dst[1:] >= dst[:-1]).all())  # what the batch says of itself
    assert torch.equal(indices[batch.e_id], batch.n_id[src])
    dst_global = batch.n_id[dst]
    assert bool(((indptr[dst_global] <= batch.e_id) & (batch.e_id < indptr[dst_global + 1])).all())
    # First-hop edges end in the seeds, min(deg, k) of them per seed.
    first_hop = dst[: batch.num_sampled_edges[0]]
    assert bool((first_hop < batch.batch_size).all())
    seed_deg = (indptr[1:] - indptr[:-1])[batch.n_id[: batch.batch_size]]
    assert torch.equal(torch.bincount(first_hop, minlength=batch.batch_size), seed_deg.clamp(max=num_neighbors[0]))


def test_neighbor_loader_end_to_end_with_sage(graph):
    indptr, indices = graph
    n = indptr.numel() - 1
    data = _node_data(n)
    loader = neighbor_loader(data, indptr, indices, [5, 3], input_nodes=None, batch_size=64, shuffle=True, seed=0)
    assert isinstance(loader, NodeLoader)
    assert "edge_index" not in loader.data  # no copy of the edge list
    torch.manual_seed(0)
    seen = []
    conv1, conv2 = SAGEConv(8, 16), SAGEConv(16, 3)
    for i, batch in enumerate(loader):
        _check_batch(batch, data, indptr, indices, [5, 3])
        seen.append(batch.input_id)
        if i == 0:
            h = conv1(batch.x, batch.edge_index).relu()
            out = conv2(h, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y[: batch.batch_size])
            loss.backward()
            assert torch.isfinite(loss) and conv1.lin_l.weight.grad is not None

            # The per-hop counts follow PyG's layout: trimming layer by layer gives the same seed outputs.
            x, ei = batch.x, batch.edge_index
            for layer, conv in enumerate((conv1, conv2)):
                x, ei, _ = trim_to_layer(layer, batch.num_sampled_nodes, batch.num_sampled_edges, x, ei)
                x = conv(x, ei)
                x = x.relu() if layer == 0 else x
            assert torch.allclose(x[: batch.batch_size], out, atol=1e-5)
    assert sorted(torch.cat(seen).tolist()) == list(range(n))  # every seed exactly once per epoch


def test_neighbor_loader_options(graph):
    indptr, indices = graph
    n = indptr.numel() - 1
    data = _node_data(n)
    data.edge_index = torch.stack([indices, torch.repeat_interleave(torch.arange(n), indptr.diff())])
    data.edge_attr = torch.arange(indices.numel(), dtype=torch.float).unsqueeze(1)  # CSR order
    mask = torch.zeros(n, dtype=torch.bool)
    mask[::3] = True
    loader = neighbor_loader(
        data, indptr, indices, [4, 2], input_nodes=mask, batch_size=50, shuffle=False, seed=1, drop_last=True,
        transform=lambda b: b.update({"tag": 1}) or b,
    )
    assert "edge_index" not in loader.data and "edge_index" in data  # caller's object untouched
    batches = list(loader)
    assert len(batches) == mask.sum() // 50
    for batch in batches:
        assert batch.tag == 1 and bool(mask[batch.n_id[: batch.batch_size]].all())
        assert torch.equal(batch.edge_attr.view(-1).long(), batch.e_id)  # edge attributes follow e_id
        assert torch.equal(indices[batch.e_id], batch.n_id[batch.edge_index[0]])

    # x may be absent; ids and labels still come through.
    no_x = Data(y=data.y)
    batch = next(iter(neighbor_loader(no_x, indptr, indices, [2], torch.arange(10), batch_size=10, shuffle=False)))
    assert "x" not in batch and torch.equal(batch.y, data.y[batch.n_id])

    with pytest.raises(ValueError, match="nodes"):
        neighbor_loader(_node_data(n + 1), indptr, indices, [2], None, batch_size=4, shuffle=False)
    with pytest.raises(ValueError, match="CSR edge order"):
        bad = _node_data(n)
        bad.edge_attr = torch.zeros(3, 2)
        neighbor_loader(bad, indptr, indices, [2], None, batch_size=4, shuffle=False)
    # A differently sized edge_index (e.g. the raw, un-canonicalised edges) is simply not used.
    raw = _node_data(n)
    raw.edge_index = torch.zeros(2, 3, dtype=torch.long)
    batch = next(iter(neighbor_loader(raw, indptr, indices, [2], None, batch_size=4, shuffle=False)))
    assert torch.equal(indices[batch.e_id], batch.n_id[batch.edge_index[0]])


def _memmap_graph(tmp_path, indptr, indices):
    np.save(tmp_path / "indptr.npy", indptr.numpy())
    np.save(tmp_path / "indices.npy", indices.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "non-writable tensor"
        mm_indptr = torch.from_numpy(np.load(tmp_path / "indptr.npy", mmap_mode="r"))
        mm_indices = torch.from_numpy(np.load(tmp_path / "indices.npy", mmap_mode="r"))
    return mm_indptr, mm_indices


def _digest(tmp_path):
    return [hashlib.sha256((tmp_path / f).read_bytes()).hexdigest() for f in ("indptr.npy", "indices.npy")]


def test_loader_with_workers_on_readonly_memmap(graph, tmp_path):
    indptr, indices = graph
    n = indptr.numel() - 1
    mm_indptr, mm_indices = _memmap_graph(tmp_path, indptr, indices)
    before = _digest(tmp_path)
    data = _node_data(n)

    def epoch(num_workers):
        loader = neighbor_loader(
            data, mm_indptr, mm_indices, [4, 3], input_nodes=None, batch_size=100, shuffle=True, seed=9,
            num_workers=num_workers,
        )
        torch.manual_seed(123)  # fixes the seed order and the workers' base seed
        return list(loader)

    # In-process sampling straight off the read-only map.
    for batch in epoch(0):
        _check_batch(batch, data, indptr, indices, [4, 3])
    # Filtering (feature gathering) inside the workers works too.
    loader = neighbor_loader(
        data, mm_indptr, mm_indices, [4, 3], torch.arange(200), batch_size=100, shuffle=False, num_workers=2,
        filter_per_worker=True,
    )
    for batch in loader:
        _check_batch(batch, data, indptr, indices, [4, 3])

    first, second = epoch(2), epoch(2)
    assert len(first) == n // 100 + (n % 100 > 0)
    assert sorted(torch.cat([b.input_id for b in first]).tolist()) == list(range(n))
    for a, b in zip(first, second):
        _check_batch(a, data, indptr, indices, [4, 3])
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.e_id, b.e_id)  # reproducible with workers
    # The two workers do not replay the same random stream: batches 0 and 1 (one per worker)
    # have the same seeds, so equal draws would give equal samples.
    twice = torch.arange(50).repeat(2)
    loader = neighbor_loader(
        data, mm_indptr, mm_indices, [4, 3], twice, batch_size=50, shuffle=False, seed=9, num_workers=2
    )
    a, b = list(loader)
    assert torch.equal(a.input_id, b.input_id - 50) and torch.equal(a.n_id[:50], b.n_id[:50])
    assert not torch.equal(a.e_id[: a.num_sampled_edges[0]], b.e_id[: b.num_sampled_edges[0]])
    assert _digest(tmp_path) == before


def test_workers_sample_each_batch_from_its_seeds_so_a_resumed_loader_repeats_the_epoch(graph):
    """Workers seeded once from the loader's base seed (drawn from the global generator when a
    persistent iterator was first built): a resumed run shuffled and sampled other batches."""
    indptr, indices = graph
    data = _node_data(indptr.numel() - 1)

    def loader(workers=2):
        return neighbor_loader(data, indptr, indices, [4, 3], input_nodes=None, batch_size=100, shuffle=True,
                               seed=9, num_workers=workers, persistent_workers=True)

    def same(a, b):
        return len(a) == len(b) and all(torch.equal(x.n_id, y.n_id) and torch.equal(x.e_id, y.e_id)
                                        for x, y in zip(a, b))

    torch.manual_seed(5)
    run = loader()
    first = list(run)
    state = torch.get_rng_state()  # what a checkpoint at the epoch's end restores
    second = list(run)
    torch.set_rng_state(state)
    assert same(list(loader()), second)
    torch.manual_seed(5)
    assert same(list(loader(workers=1)), first)  # and whatever the number of workers
    assert not same(first, second)


def test_workers_of_a_sampler_without_a_seed_follow_torchs_seed(graph):
    """Their base seed came from an unseeded generator of the loader's: every torch seed sampled the same."""
    indptr, indices = graph
    data = _node_data(indptr.numel() - 1)

    def epoch(torch_seed):
        torch.manual_seed(torch_seed)
        return list(neighbor_loader(data, indptr, indices, [4, 3], input_nodes=None, batch_size=200, shuffle=False,
                                    seed=None, num_workers=2))

    assert not all(torch.equal(a.n_id, b.n_id) for a, b in zip(epoch(1), epoch(2)))


# Power-law graphs ######################################################


def test_power_law_graph_with_hubs_samples_valid_hops():
    """A graph shaped like a real one (Pareto degrees capped at 5,000, 5% isolated, popular sources):
    hub rows take the large-row paths. Its speed is bench/native.py's (``sampler_speedup``)."""
    rng = np.random.default_rng(0)
    n = 5_000
    deg = np.minimum((rng.pareto(1.5, n) + 1) * 5, 5_000).astype(np.int64)
    deg[rng.random(n) < 0.05] = 0
    deg[:2] = 5_000  # two hubs among the seeds
    indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(deg)]))
    weight = rng.pareto(1.5, n) + 1
    indices = torch.from_numpy(rng.choice(n, size=int(deg.sum()), p=weight / weight.sum()))
    others = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    seeds = torch.cat([torch.tensor([0, 1]), others[others > 1][:30]])
    for replace in (False, True):
        sampler = CSRNeighborSampler(indptr, indices, [15, 10, 5], replace=replace, seed=0)
        _check_output(_sample(sampler, seeds), indptr, indices, seeds, [15, 10, 5], replace)


def test_the_scratch_map_is_int32_on_the_cpu_and_int64_where_the_cuda_sampler_reads_it():
    """Half the memory on the CPU; on a GPU an int32 map would be widened and copied back whole by the
    CUDA sampler every batch (0.9 GB of traffic a batch on papers100M)."""
    from gnnkit.data.sampler import scratch_dtype

    assert scratch_dtype(10, torch.device("cpu")) == torch.int32
    assert scratch_dtype(2**31, torch.device("cpu")) == torch.int64
    assert scratch_dtype(10, torch.device("cuda", 0)) == torch.int64
    sampler = CSRNeighborSampler(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), [1], seed=0)
    assert sampler._process_state(NodeSamplerInput(input_id=None, node=torch.tensor([0])))[1].dtype == torch.int32


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_relabel_numbers_unseen_nodes_in_order_of_first_occurrence(dtype):
    """The PyTorch relabelling (one read-back) against a dictionary walk, on random maps and id lists."""
    from gnnkit.data.sampler import relabel

    g = torch.Generator().manual_seed(0)
    for _ in range(100):
        n, e = int(torch.randint(1, 50, (1,), generator=g)), int(torch.randint(0, 80, (1,), generator=g))
        local = torch.full((n,), -1, dtype=dtype)
        seen = torch.randperm(n, generator=g)[: int(torch.randint(0, n, (1,), generator=g))]
        local[seen] = torch.arange(seen.numel(), dtype=dtype)
        src = torch.randint(0, n, (e,), generator=g)
        ids, new = {int(s): int(local[s]) for s in seen}, []
        for s in src.tolist():
            if s not in ids:
                ids[s] = seen.numel() + len(new)
                new.append(s)
        out, fresh = relabel(src, local, seen.numel())
        assert out.tolist() == [ids[s] for s in src.tolist()] and fresh.tolist() == new
        assert local.tolist() == [ids.get(i, -1) for i in range(n)]  # no marks left behind


def test_a_device_generator_is_kept_per_gpu_not_per_device_type():
    """A sampler moved from one GPU to another needs a generator of the new one (torch refuses a
    generator of cuda:0 for cuda:1); an index left out is the current device."""
    from gnnkit.data.sampler import _same_device

    cuda = torch.device
    assert _same_device(cuda("cuda", 0), cuda("cuda", 0)) and _same_device(cuda("cuda"), cuda("cuda", 1))
    assert not _same_device(cuda("cuda", 0), cuda("cuda", 1)) and not _same_device(cuda("cpu"), cuda("cuda", 0))
    assert _same_device(cuda("cpu"), cuda("cpu"))

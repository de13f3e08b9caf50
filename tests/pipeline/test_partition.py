import numpy as np
import pytest

from pipeline.graph import edges_to_csr
from pipeline.partition import WeightedGraph, coarsen, default_caps, label_propagation, multilevel_clusters
from pipeline.reorder import node_order, prefix_sharing


def _symmetric_csr(src, dst, n):
    both_src, both_dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    key = np.unique(both_dst.astype(np.int64) * n + both_src)
    return edges_to_csr(key % n, key // n, n)


def _planted(num_communities, size, p_in=0.5, between=0.02, seed=0):
    """Dense communities joined by a few random edges, node ids shuffled; returns CSR + community."""
    rng = np.random.default_rng(seed)
    n = num_communities * size
    community = np.repeat(np.arange(num_communities), size)
    src, dst = [], []
    for c in range(num_communities):
        nodes = np.arange(c * size, (c + 1) * size)
        a, b = np.triu_indices(size, 1)
        keep = rng.random(a.size) < p_in
        src.append(nodes[a[keep]]), dst.append(nodes[b[keep]])
    m = int(between * n)
    src.append(rng.integers(0, n, m)), dst.append(rng.integers(0, n, m))
    perm = rng.permutation(n)  # node v of the construction gets id perm[v]
    indptr, indices = _symmetric_csr(perm[np.concatenate(src)], perm[np.concatenate(dst)], n)
    shuffled = np.empty(n, dtype=np.int64)
    shuffled[perm] = community
    return indptr, indices, shuffled


def _graph(indptr, indices):
    return WeightedGraph(indptr.astype(np.int64), indices.astype(np.int64), None, np.ones(indptr.size - 1))


def _purity(clusters, community):
    """Share of nodes whose cluster's majority community is their own."""
    table = np.zeros((clusters.max() + 1, community.max() + 1))
    np.add.at(table, (clusters, community), 1)
    return table.max(axis=1).sum() / clusters.size


@pytest.mark.parametrize("seed", range(4))
def test_label_propagation_respects_the_cap(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 400))
    indptr, indices = _symmetric_csr(rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n), n)
    cap = int(rng.integers(2, 30))
    clusters = label_propagation(_graph(indptr, indices), cap, seed=seed)
    assert clusters.shape == (n,) and np.array_equal(np.unique(clusters), np.arange(clusters.max() + 1))
    assert np.bincount(clusters).max() <= cap


def test_label_propagation_finds_planted_communities():
    indptr, indices, community = _planted(20, 30)
    clusters = label_propagation(_graph(indptr, indices), cap=30)
    assert _purity(clusters, community) > 0.9
    assert clusters.max() + 1 < 60  # close to the 20 planted, not shattered into singletons


def test_coarsen_keeps_weights():
    indptr, indices, community = _planted(5, 10, seed=1)
    graph = _graph(indptr, indices)
    top = coarsen(graph, community)
    assert top.num_nodes == 5 and np.array_equal(top.node_weights, np.full(5, 10.0))
    rows = graph.rows()
    between = community[rows] != community[indices]
    assert top.weights.sum() == between.sum()  # every edge across clusters, once per direction
    dense = np.zeros((5, 5))
    np.add.at(dense, (community[rows][between], community[indices][between]), 1)
    top_rows = top.rows()
    rebuilt = np.zeros((5, 5))
    rebuilt[top_rows, top.indices] = top.weights
    assert np.array_equal(dense, rebuilt)


def test_multilevel_levels_nest():
    indptr, indices, _ = _planted(12, 20, seed=2)
    lines = []
    levels, top = multilevel_clusters(indptr, indices, [8, 64, 256], progress=lines.append)
    assert len(lines) == 3 and lines[0].startswith("partition level 1/3: ") and "at most 256 nodes" in lines[2]
    for fine, coarse in zip(levels, levels[1:]):  # every fine cluster lies in one coarse cluster
        pairs = np.unique(fine * (coarse.max() + 1) + coarse)
        assert pairs.size == fine.max() + 1
    assert top.num_nodes == levels[-1].max() + 1
    assert default_caps(1000) == [10, 100, 800]


def test_partition_order_groups_communities_better_than_rcm():
    indptr, indices, community = _planted(30, 27, seed=3)
    order = node_order(indptr, indices, "partition")
    assert np.array_equal(np.sort(order), np.arange(order.size))
    assert np.array_equal(order, node_order(indptr, indices, "partition"))  # deterministic
    block = 27
    assert _purity(order // block, community) > 0.85
    assert prefix_sharing(indptr, indices, block, order) > prefix_sharing(indptr, indices, block,
                                                                          node_order(indptr, indices, "rcm"))


@pytest.mark.parametrize("n", [0, 1, 7])
def test_partition_order_of_edgeless_graphs(n):
    indptr, indices = np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    assert np.array_equal(np.sort(node_order(indptr, indices, "partition")), np.arange(n))


def test_preprocess_stores_the_partition_order(make_ogb_folder, tmp_path):
    from pipeline import PreprocessOptions, preprocess

    entry = preprocess(str(make_ogb_folder()), PreprocessOptions(undirected=True, reorder="partition"),
                       cache_root=tmp_path / "cache")
    graph = entry.open()
    order = graph.extra["node_order"].numpy()
    assert np.array_equal(order, node_order(graph.indptr.numpy(), graph.indices.numpy(), "partition"))

import numpy as np
import pytest

from pipeline.graph import edges_to_csr
from pipeline.partition import default_caps, edge_cut, metis_parts, nested_parts, undirected_edges
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


def _purity(clusters, community):
    """Share of nodes whose cluster's majority community is their own."""
    table = np.zeros((clusters.max() + 1, community.max() + 1))
    np.add.at(table, (clusters, community), 1)
    return table.max(axis=1).sum() / clusters.size


def test_undirected_edges_are_symmetric_without_loops():
    indptr, indices = edges_to_csr(np.array([0, 1, 2, 2]), np.array([1, 1, 0, 3]), 4)  # 1->1 is a loop
    src, dst = undirected_edges(indptr, indices)
    assert sorted(zip(src.tolist(), dst.tolist())) == [(0, 1), (0, 2), (1, 0), (2, 0), (2, 3), (3, 2)]


@pytest.mark.parametrize("parts", [2, 4, 5])
def test_metis_parts_are_balanced_and_follow_communities(parts):
    indptr, indices, community = _planted(parts, 40, p_in=0.3, between=0.05, seed=parts)
    part = metis_parts(indptr, indices, parts)
    assert part.shape == (parts * 40,) and set(part.tolist()) == set(range(parts))
    assert np.bincount(part).max() <= 40 * 1.05
    assert _purity(part, community) > 0.95
    random = np.random.default_rng(0).permutation(part)  # same sizes, no structure
    assert edge_cut(indptr, indices, part) < 0.3 * edge_cut(indptr, indices, random)
    assert np.array_equal(part, metis_parts(indptr, indices, parts))  # deterministic


@pytest.mark.parametrize(("n", "parts"), [(0, 3), (5, 1), (3, 8), (7, 2)])
def test_metis_parts_of_tiny_and_edgeless_graphs(n, parts):
    indptr, indices = np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    part = metis_parts(indptr, indices, parts)
    assert part.shape == (n,) and (part < parts).all() and (part >= 0).all()
    with pytest.raises(ValueError, match="parts: expected at least 1, got 0"):
        metis_parts(indptr, indices, 0)


def test_nested_parts_nest_and_follow_the_caps():
    indptr, indices, community = _planted(12, 20, seed=2)
    lines = []
    levels = nested_parts(indptr, indices, [8, 64, 256], progress=lines.append)
    assert len(lines) == 3 and lines[0].startswith("partition level 1/3: ") and "about 256 nodes" in lines[0]
    for fine, coarse in zip(levels, levels[1:]):  # every fine cluster lies in one coarse cluster
        pairs = np.unique(fine * (coarse.max() + 1) + coarse)
        assert pairs.size == fine.max() + 1
        assert np.all(np.diff(coarse[np.argsort(fine, kind="stable")]) >= 0)  # consecutive within coarse
    for level, cap in zip(levels, [8, 64, 256]):
        assert np.bincount(level).max() <= cap * 1.1
    assert _purity(levels[0], community) > 0.9  # clusters of ~8 inside the planted communities of 20
    assert default_caps(1000) == [10, 100, 800]


def test_partition_order_groups_communities_better_than_rcm():
    # Random edges between communities, as real graphs have (0.3 per node): they send RCM's
    # breadth-first sweep across communities (on the arxiv twin, 0.8% of edges share a block of 56
    # numbers under RCM, 25.8% under nested METIS).
    indptr, indices, community = _planted(30, 27, between=0.3, seed=3)
    order = node_order(indptr, indices, "partition")
    assert np.array_equal(np.sort(order), np.arange(order.size))
    assert np.array_equal(order, node_order(indptr, indices, "partition"))  # deterministic
    block = 27
    assert _purity(order // block, community) > 0.8  # 0.84: METIS groups of ~90 cut some communities of 27
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

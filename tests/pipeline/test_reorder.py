from collections import deque

import numpy as np
import pytest

from pipeline import DatasetError, PreprocessOptions, preprocess
from pipeline.graph import edges_to_csr
from pipeline.reorder import bandwidth, cuthill_mckee, node_order, prefix_sharing


def _symmetric_csr(src, dst, n):
    both_src, both_dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    key = np.unique(both_dst.astype(np.int64) * n + both_src)
    return edges_to_csr(key % n, key // n, n)


def _reference_cuthill_mckee(indptr, indices):
    """Queue-based Cuthill-McKee, one node at a time (the textbook algorithm)."""
    n = indptr.size - 1
    degree = np.diff(indptr)
    visited = np.zeros(n, dtype=bool)
    out = [v for v in range(n) if degree[v] == 0]
    visited[out] = True
    for start in sorted(range(n), key=lambda v: (degree[v], v)):
        if visited[start]:
            continue
        visited[start] = True
        queue = deque([start])
        while queue:
            v = queue.popleft()
            out.append(v)
            fresh = sorted({int(u) for u in indices[indptr[v]:indptr[v + 1]] if not visited[u]},
                           key=lambda u: (degree[u], u))
            for u in fresh:
                visited[u] = True
                queue.append(u)
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_level_wise_cuthill_mckee_equals_the_queue_algorithm(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 120))
    m = int(rng.integers(0, 3 * n))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    indptr, indices = _symmetric_csr(src, dst, n)  # several components and isolated nodes
    assert np.array_equal(cuthill_mckee(indptr, indices), _reference_cuthill_mckee(indptr, indices))


def test_rcm_recovers_a_shuffled_path():
    n = 300
    perm = np.random.default_rng(0).permutation(n)
    indptr, indices = _symmetric_csr(perm[:-1], perm[1:], n)  # path perm[0] - perm[1] - ...
    assert bandwidth(indptr, indices) > 100
    order = node_order(indptr, indices, "rcm")
    assert np.array_equal(np.sort(order), np.arange(n))
    assert bandwidth(indptr, indices, order) == 1
    assert prefix_sharing(indptr, indices, 10, order) > 0.85 > prefix_sharing(indptr, indices, 10)


def test_node_order_identity_and_errors():
    indptr, indices = _symmetric_csr(np.array([0, 1]), np.array([1, 2]), 4)
    assert np.array_equal(node_order(indptr, indices, "none"), np.arange(4))
    with pytest.raises(ValueError, match="expected one of"):
        node_order(indptr, indices, "metis")
    with pytest.raises(DatasetError, match="preprocess.reorder"):
        PreprocessOptions(reorder="metis")
    with pytest.raises(DatasetError, match="preprocess.reorder"):
        PreprocessOptions.from_dict({"reorder": "bogus"}, "preprocess")


def test_preprocess_stores_the_order_and_keys_on_it(make_ogb_folder, tmp_path):
    folder = make_ogb_folder()
    root = tmp_path / "cache"
    plain = preprocess(str(folder), PreprocessOptions(undirected=True), cache_root=root)
    ordered = preprocess(str(folder), PreprocessOptions(undirected=True, reorder="rcm"), cache_root=root)
    assert ordered.key != plain.key
    a, b = plain.open(), ordered.open()
    assert "node_order" not in a.extra
    order = b.extra["node_order"].numpy()
    assert np.array_equal(np.sort(order), np.arange(b.num_nodes))
    # the graph keeps its node ids; only the order is added
    assert np.array_equal(a.indices.numpy(), b.indices.numpy()) and np.array_equal(a.y.numpy(), b.y.numpy())
    assert np.array_equal(order, node_order(b.indptr.numpy(), b.indices.numpy(), "rcm"))
    assert bandwidth(b.indptr.numpy(), b.indices.numpy(), order) <= bandwidth(b.indptr.numpy(), b.indices.numpy())

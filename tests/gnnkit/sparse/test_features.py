import numpy as np
import pytest
import torch

from gnnkit.sparse import Adjacency
from gnnkit.sparse.corpus import MatrixSpec
from gnnkit.sparse.features import FEATURE_NAMES, feature_vector, matrix_features, transposed_features


def slow_features(dense: np.ndarray) -> dict[str, float]:
    """Loop-and-numpy reference on the dense matrix (entry counts, diagonals, fills, bounce)."""
    n_rows, n_cols = dense.shape
    rows, cols = (dense != 0).sum(1), (dense != 0).sum(0)
    nnz = int(rows.sum())
    diags = {j - i for i in range(n_rows) for j in range(n_cols) if dense[i, j]}
    out = {"n_rows": n_rows, "n_cols": n_cols, "nnz": nnz, "density": nnz / (n_rows * n_cols),
           "n_diags": len(diags), "dia_fill": nnz / (len(diags) * n_rows), "ell_fill": nnz / (rows.max() * n_rows)}
    for side, c in (("row", rows), ("col", cols)):
        out |= {f"{side}_min": c.min(), f"{side}_mean": c.mean(), f"{side}_max": c.max(), f"{side}_std": c.std(),
                f"{side}_cv": c.std() / c.mean(), f"{side}_max_minus_mean": c.max() - c.mean(),
                f"{side}_bounce": np.abs(np.diff(c)).mean(), f"{side}_empty": (c == 0).mean()}
    return out


@pytest.mark.parametrize("kind", ["erdos_renyi", "banded", "bipartite", "hubs"])
def test_vectorised_features_match_a_slow_reference(kind):
    adj = MatrixSpec(kind, 60, 45 if kind == "bipartite" else 60, 4, 2).build()
    dense = adj.to_dense().numpy()
    adj = Adjacency.from_edge_index(torch.from_numpy(np.stack(np.nonzero(dense.T))), adj.num_cols,
                                    num_dst=adj.num_rows)  # no duplicates: counts = non-zeros
    fast = matrix_features(adj)
    for name, value in slow_features(dense).items():
        assert fast[name] == pytest.approx(float(value), rel=1e-9, abs=1e-12), name


def test_transposed_features_equal_features_of_the_transpose():
    adj = MatrixSpec("bipartite", 70, 150, 6, 4).build()
    swapped = transposed_features(matrix_features(adj))
    direct = matrix_features(adj.t())
    for name in direct:
        if name != "locality":  # |row - col| is symmetric too, but computed on another layout
            assert swapped[name] == pytest.approx(direct[name]), name
    assert swapped["locality"] == pytest.approx(direct["locality"])


def test_feature_vector_order_width_threads_and_empty_graph():
    empty = Adjacency(torch.zeros(5, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    vec = feature_vector(matrix_features(empty), width=32, threads=3)
    assert vec.shape == (len(FEATURE_NAMES),) and np.isfinite(vec).all()
    assert vec[FEATURE_NAMES.index("width")] == 32 and vec[FEATURE_NAMES.index("threads")] == 3
    assert vec[FEATURE_NAMES.index("nnz")] == 0
    nothing = Adjacency(torch.zeros(1, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert np.isfinite(feature_vector(matrix_features(nothing), 8)).all()


def test_features_are_cached_on_the_adjacency():
    adj = MatrixSpec("rmat", 100, 100, 3, 1).build()
    assert matrix_features(adj) is matrix_features(adj)

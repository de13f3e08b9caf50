import pytest
import torch

from gnnkit.sparse.corpus import CORPUS_KINDS, GENERATORS, HOLDOUT_KINDS, MatrixSpec, sample_specs


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_generators_give_valid_deterministic_matrices(kind):
    spec = MatrixSpec(kind, 500, 300 if kind == "bipartite" else 500, 6, 5)
    a, b = spec.build(), spec.build()
    assert a.shape == (spec.n_rows, spec.n_cols) and a.nnz > 0
    assert torch.equal(a.indptr, b.indptr) and torch.equal(a.indices, b.indices)
    counts = a.row_counts()
    for row in (0, 250, 499):  # columns sorted within rows
        cols = a.indices[a.indptr[row]:a.indptr[row + 1]]
        assert bool((cols[1:] >= cols[:-1]).all())
    assert int(counts.sum()) == a.nnz


def test_sample_specs_is_reproducible_covers_kinds_and_respects_caps():
    specs = sample_specs(40, seed=1, max_rows=50_000, max_nnz=100_000)
    assert specs == sample_specs(40, seed=1, max_rows=50_000, max_nnz=100_000)
    assert {s.kind for s in specs} == set(CORPUS_KINDS)
    assert not set(HOLDOUT_KINDS) & {s.kind for s in specs}
    assert all(1_000 <= s.n_rows <= 50_000 and s.n_rows * s.avg_deg <= 100_000 + s.n_rows for s in specs)
    assert len({s.name for s in specs}) == 40


def test_unknown_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="Could not resolve matrix kind 'kron'"):
        MatrixSpec("kron", 10, 10, 2, 0).build()

import pytest
import torch

from gnnkit.tt import TTConfig, TTEmbedding, init_cores_, tt_sq_norm, tt_svd
from gnnkit.tt.lookup import full_table

CONFIG = TTConfig(60, (4, 3, 5), (2, 3, 2), (3, 4))


@pytest.mark.parametrize("method", ["orthogonal", "normal"])
def test_init_matches_nn_embedding_output_statistics(method):
    cores = [torch.empty(s, dtype=torch.float64) for s in CONFIG.core_shapes]
    init_cores_(cores, method, torch.Generator().manual_seed(0))
    table = full_table(cores)
    torch.testing.assert_close(table.pow(2).mean(), torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(tt_sq_norm(cores), table.pow(2).sum())


def test_orthogonal_slices_are_semi_orthogonal_before_scaling():
    cores = [torch.empty(s, dtype=torch.float64) for s in CONFIG.core_shapes]
    init_cores_(cores, "orthogonal", torch.Generator().manual_seed(1))
    for core in cores:
        p, r_in, q, r_out = core.shape
        m = core.reshape(p, r_in * q, r_out)
        gram = m.transpose(1, 2) @ m if r_in * q >= r_out else m @ m.transpose(1, 2)
        scale = gram.diagonal(dim1=1, dim2=2).mean()  # the one common factor of the rescale
        eye = torch.eye(gram.shape[-1], dtype=torch.float64).expand_as(gram)
        torch.testing.assert_close(gram / scale, eye)


def test_tt_svd_is_exact_at_full_rank():
    torch.manual_seed(0)
    config = TTConfig(60, (4, 3, 5), (2, 3, 2), (8, 10))  # unfolding ranks of a 60x12 table
    table = torch.randn(60, 12, dtype=torch.float64)
    torch.testing.assert_close(full_table(tt_svd(table, config), 60), table)


def test_tt_svd_recovers_a_tt_table_at_its_ranks_and_bounds_truncation():
    gen = torch.Generator().manual_seed(2)
    source = [torch.empty(s, dtype=torch.float64) for s in CONFIG.core_shapes]
    init_cores_(source, "normal", gen)
    table = full_table(source)
    torch.testing.assert_close(full_table(tt_svd(table, CONFIG)), table)
    # truncated: Oseledets' bound ||A - B|| <= sqrt(sum_k eps_k^2), eps_k the best rank-r_k error
    # of the k-th unfolding of A
    low = TTConfig(60, (4, 3, 5), (2, 3, 2), (2, 2))
    err = (full_table(tt_svd(table, low)) - table).norm()
    tensor = table.reshape(4, 3, 5, 2, 3, 2).permute(0, 3, 1, 4, 2, 5)  # modes (p_k, q_k)
    eps2 = sum(torch.linalg.svdvals(tensor.reshape(rows, -1))[2:].pow(2).sum() for rows in (8, 72))
    assert 0 < err <= torch.sqrt(eps2) + 1e-9


def test_from_features_reproduces_features_with_an_order():
    torch.manual_seed(3)
    config = TTConfig(50, (4, 3, 5), (2, 3, 2), (8, 10))
    x = torch.randn(50, 12, dtype=torch.float64)
    order = torch.randperm(50)
    emb = TTEmbedding.from_features(x, config, order=order)
    torch.testing.assert_close(emb(torch.arange(50)), x)
    with pytest.raises(ValueError, match=r"table is \[50, 11\]"):
        tt_svd(x[:, :11], config)

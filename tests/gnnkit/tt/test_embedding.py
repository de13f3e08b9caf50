import io

import pytest
import torch
from torch import nn

from gnnkit.tt import TTConfig, TTEmbedding, auto_config


def _emb(**kw):
    return TTEmbedding(TTConfig(50, (4, 3, 5), (2, 3, 2), (3, 4), **kw), generator=torch.Generator().manual_seed(0))


def test_repr_echoes_the_config():
    emb = _emb(hot_rows=8)
    assert str(emb) == (
        "TTEmbedding(50, 12, p_shapes=(4, 3, 5), q_shapes=(2, 3, 2), ranks=(3, 4), init='orthogonal', "
        "dedup=True, prefix_reuse=True, hot_rows=8)"
    )


def test_sizes_and_compression():
    emb = _emb()
    assert emb.num_params == 4 * 1 * 2 * 3 + 3 * 3 * 3 * 4 + 5 * 4 * 2 * 1 == sum(p.numel() for p in emb.parameters())
    assert emb.compression == pytest.approx(50 * 12 / emb.num_params)
    info = emb.describe()
    assert info["kind"] == "tt" and info["num_params"] == emb.num_params and info["memory_bytes"]["cores"] == 4 * emb.num_params


def test_behaves_like_nn_embedding_shapes_and_dense_grads():
    emb = _emb()
    ref = nn.Embedding(50, 12)
    for idx in (torch.tensor(3), torch.tensor([1, 2]), torch.randint(0, 50, (2, 3, 4)), torch.tensor([], dtype=torch.int64)):
        assert emb(idx).shape == ref(idx).shape
    emb(torch.tensor([1, 1, 49], dtype=torch.int32)).sum().backward()
    assert all(p.grad is not None and not p.grad.is_sparse and p.grad.shape == p.shape for p in emb.cores)


@pytest.mark.parametrize("bad", [-1, 50, 1000])
def test_out_of_range_indices_raise_a_clear_error(bad):
    with pytest.raises(IndexError, match=rf"TTEmbedding: index {bad} out of range \[0, 50\)"):
        _emb()(torch.tensor([0, bad, 3]))


def test_non_integer_indices_are_refused():
    with pytest.raises(TypeError, match="integer tensor"):
        _emb()(torch.tensor([0.0, 1.0]))


@pytest.mark.parametrize("ids", [[1, 2], (1,), 3, None, "1"])
def test_ids_that_are_no_tensor_are_named(ids):
    """A list was an AttributeError on 'dtype'; a numpy array 'must be an integer tensor, got int64'."""
    import numpy as np

    with pytest.raises(TypeError, match=rf"indices must be a torch integer tensor, got {type(ids).__name__}"):
        _emb()(ids)
    with pytest.raises(TypeError, match="must be a torch integer tensor, got ndarray"):
        _emb()(np.array([1, 2]))
    with pytest.raises(TypeError, match="set_hot_nodes: nodes must be an integer tensor of node ids, got list"):
        _emb().set_hot_nodes([1, 2])
    with pytest.raises(TypeError, match="set_hot_nodes_by_degree: degree must be a tensor, got list"):
        _emb().set_hot_nodes_by_degree([1] * 50)


def test_one_rank_is_every_inner_rank():
    """TTConfig(ranks=16) was "'int' object is not iterable"."""
    config = TTConfig(num_embeddings=50, p_shapes=(4, 3, 5), q_shapes=(2, 3, 2), ranks=4)
    assert config.ranks == (4, 4)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_embeddings=61), r"prod\(4, 3, 5\) = 60 < num_embeddings = 61"),
        (dict(ranks=(3,)), "expected 2 inner ranks"),
        (dict(q_shapes=(2, 3)), "expected 3 factors"),
        (dict(ranks=(3, 0)), "positive integers"),
        (dict(init="xavier"), "TTConfig.init"),
        (dict(dedup=False), "prefix_reuse"),
        (dict(hot_rows=-1), "hot_rows"),
        (dict(p_shapes=10), "TTConfig.p_shapes: expected a list of positive integers, got 10"),
        (dict(ranks=0), r"TTConfig.ranks: expected positive integers, got \(0, 0\)"),
        (dict(ranks=True), "TTConfig.ranks: expected a list of positive integers, got True"),
        (dict(dedup="no"), "TTConfig.dedup: expected true or false, got 'no'"),
    ],
)
def test_config_errors_name_the_field(kwargs, match):
    args = dict(num_embeddings=50, p_shapes=(4, 3, 5), q_shapes=(2, 3, 2), ranks=(3, 4)) | kwargs
    with pytest.raises(ValueError, match=match):
        TTConfig(**args)


def test_order_is_transparent_to_callers():
    torch.manual_seed(0)
    plain = _emb()
    order = torch.randperm(50)
    ordered = _emb()
    ordered.load_state_dict(plain.state_dict())
    ordered.set_order(order)
    idx = torch.tensor([0, 7, 7, 49, 12])
    # node v lives in TT row order[v]
    torch.testing.assert_close(ordered(idx), plain(order[idx]))
    torch.testing.assert_close(ordered.full_table(), plain.full_table()[order])
    torch.testing.assert_close(ordered(idx), ordered.full_table()[idx])


def test_set_order_refuses_non_permutations():
    emb = _emb()
    with pytest.raises(ValueError, match="not a permutation"):
        emb.set_order(torch.zeros(50, dtype=torch.int64))
    with pytest.raises(ValueError, match="expected 50 integer TT rows"):
        emb.set_order(torch.arange(49))


def test_checkpoint_restores_cores_and_order_exactly():
    torch.manual_seed(0)
    emb = _emb()
    emb.set_order(torch.randperm(50))
    opt = torch.optim.Adam(emb.parameters(), lr=0.1)
    emb(torch.arange(50)).pow(2).sum().backward()
    opt.step()
    buffer = io.BytesIO()
    torch.save(emb.state_dict(), buffer)
    buffer.seek(0)
    fresh = _emb()
    fresh.set_order(torch.arange(50))  # placeholder, as the module builds it before loading
    fresh.load_state_dict(torch.load(buffer))
    assert torch.equal(fresh.order, emb.order)
    assert all(torch.equal(a, b) for a, b in zip(fresh.cores, emb.cores))
    idx = torch.randint(0, 50, (20,))
    assert torch.equal(fresh(idx), emb(idx))


def test_auto_config_embedding_reaches_the_target_on_a_products_sized_table():
    config = auto_config(2_449_029, 100, compression=1000)
    assert config.compression >= 1000
    emb = TTEmbedding(config)
    assert emb.num_params == config.num_params < 2_449_029 * 100 / 1000
    out = emb(torch.tensor([0, 2_449_028]))
    assert out.shape == (2, 100) and torch.isfinite(out).all()

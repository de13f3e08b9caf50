import pytest
import torch

from gnnkit.tt import TTConfig, TTEmbedding

HOT = torch.tensor([0, 3, 7, 11, 12, 13, 30, 49])


def _pair(**kw):
    """A cached embedding and an uncached twin with the same cores."""
    gen = torch.Generator().manual_seed(0)
    cfg = dict(num_embeddings=50, p_shapes=(4, 3, 5), q_shapes=(2, 3, 2), ranks=(3, 4))
    cached = TTEmbedding(TTConfig(**cfg, hot_rows=len(HOT), **kw), generator=gen).double()
    plain = TTEmbedding(TTConfig(**cfg, **kw)).double()
    plain.load_state_dict(cached.state_dict())
    cached.set_hot_nodes(HOT)
    return cached, plain


def _batch(step):
    gen = torch.Generator().manual_seed(step)
    return torch.cat([HOT[torch.randint(0, len(HOT), (10,), generator=gen)], torch.randint(0, 50, (10,), generator=gen)])


@pytest.mark.parametrize("kw", [{}, dict(prefix_reuse=False), dict(dedup=False, prefix_reuse=False)])
def test_cached_lookup_matches_values_and_gradients(kw):
    cached, plain = _pair(**kw)
    idx = _batch(0)
    g = torch.randn(idx.numel(), 12, dtype=torch.float64)
    (cached(idx) * g).sum().backward()
    (plain(idx) * g).sum().backward()
    torch.testing.assert_close(cached(idx), plain(idx))
    for a, b in zip(cached.cores, plain.cores):
        torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        lambda ps: torch.optim.Adam(ps, lr=0.05),
        lambda ps: torch.optim.Adam(ps, lr=0.05, fused=True),  # fused kernels do not bump versions
        lambda ps: torch.optim.AdamW(ps, lr=0.05, foreach=False),
    ],
)
def test_cache_never_serves_a_stale_row_after_optimizer_steps(make_opt):
    cached, plain = _pair()
    opts = [make_opt(list(cached.parameters())), make_opt(list(plain.parameters()))]
    for step in range(4):
        idx = _batch(step)
        for emb, opt in zip((cached, plain), opts):
            opt.zero_grad()
            emb(idx).pow(2).mean().backward()
            opt.step()
        # identical training; and the cache serves exactly what the cores give now
        for a, b in zip(cached.cores, plain.cores):
            torch.testing.assert_close(a, b)
        with torch.no_grad():
            dense = cached.full_table()
            assert torch.equal(cached(HOT), cached.cache.values(list(cached.cores))[torch.arange(len(HOT))])
            torch.testing.assert_close(cached(HOT), dense[HOT], rtol=1e-12, atol=1e-12)


def test_cache_catches_in_place_edits_and_loads():
    cached, _ = _pair()
    cached.eval()
    with torch.no_grad():
        cached(HOT)
        cached.cores[1].data.mul_(2.0)  # .data edits bypass autograd's version checks
        torch.testing.assert_close(cached(HOT), cached.full_table()[HOT])
        other = TTEmbedding(cached.config).double()
        cached.load_state_dict(other.state_dict())
        torch.testing.assert_close(cached(HOT), other.full_table()[HOT])


def test_cache_is_reused_while_cores_are_unchanged():
    cached, _ = _pair()
    with torch.no_grad():
        for step in range(5):
            cached(_batch(step))
    assert cached.cache.refreshes == 1
    opt = torch.optim.SGD(cached.parameters(), lr=0.1)
    cached(_batch(9)).sum().backward()
    opt.step()
    with torch.no_grad():
        cached(_batch(10))
    assert cached.cache.refreshes == 2


def test_hot_nodes_follow_the_order_and_capacity():
    cached, plain = _pair()
    order = torch.randperm(50, generator=torch.Generator().manual_seed(3))
    cached.set_order(order)
    plain.set_order(order)
    assert torch.equal(cached.cache.rows, torch.sort(order[HOT]).values)
    idx = _batch(1)
    torch.testing.assert_close(cached(idx), plain(idx))
    with pytest.raises(ValueError, match="exceed config.hot_rows"):
        cached.set_hot_nodes(torch.arange(20))
    with pytest.raises(TypeError, match="nodes must be an integer tensor of node ids, got torch.float32"):
        cached.set_hot_nodes(torch.tensor([1.7, 2.2]))  # it cached nodes 1 and 2
    cached.set_hot_nodes_by_degree(torch.arange(50).flip(0))
    assert torch.equal(cached.cache.rows, torch.sort(order[torch.arange(len(HOT))]).values)
    cached.set_hot_nodes(None)
    assert cached.cache is None


@pytest.mark.gpu
def test_training_on_a_gpu_runs_the_fused_kernel_and_the_cache_serves_evaluation(monkeypatch):
    """On a GPU the cores change every step, so training lookups take the fused CUDA kernel rather
    than a cache that would rebuild each time; lookups without gradients use the cache."""
    from gnnkit.native import ops

    cached, plain = (emb.cuda() for emb in _pair())
    fused = []
    original = ops.tt_lookup
    monkeypatch.setattr(ops, "tt_lookup", lambda *a, **k: fused.append(1) or original(*a, **k))
    idx = _batch(0).cuda()
    out = cached(idx)
    out.square().sum().backward()
    assert fused and cached.cache.refreshes == 0
    torch.testing.assert_close(out, plain(idx))
    with torch.no_grad():
        torch.testing.assert_close(cached(idx), plain(idx))
        cached(idx)
    assert cached.cache.refreshes == 1

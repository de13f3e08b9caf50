"""Fused native TT lookup against the dense product of the cores and the Python path's gradients."""

from __future__ import annotations

import pytest
import torch

from gnnkit import native
from gnnkit.native import ops
from gnnkit.tt import TTConfig, TTEmbedding
from gnnkit.tt.lookup import full_table, lookup


def make_cores(p, q, r, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    ranks = [1, *r, 1]
    return [torch.randn(p[k], ranks[k], q[k], ranks[k + 1], generator=g, dtype=dtype).requires_grad_(True)
            for k in range(3)]


SHAPES = [((5, 4, 6), (2, 3, 2), (3, 2)), ((7, 3, 9), (4, 5, 5), (16, 16)), ((1, 1, 1), (1, 1, 1), (1, 1)),
          ((2, 1, 13), (3, 1, 2), (4, 5))]


@pytest.mark.parametrize("reuse", [True, False])
@pytest.mark.parametrize("p,q,r", SHAPES)
def test_forward_matches_the_dense_table(ext, p, q, r, reuse):
    cores = make_cores(p, q, r)
    n = p[0] * p[1] * p[2]
    g = torch.Generator().manual_seed(1)
    rows = torch.cat([torch.randint(0, n, (64,), generator=g), torch.tensor([0, n - 1, n - 1])])
    out = ops.tt_lookup(cores, rows, reuse_prefixes=reuse)
    torch.testing.assert_close(out, full_table(cores)[rows])


@pytest.mark.parametrize("reuse", [True, False])
@pytest.mark.parametrize("p,q,r", SHAPES)
def test_gradients_match_the_python_reuse_path(ext, p, q, r, reuse):
    cores = make_cores(p, q, r, seed=2)
    n = p[0] * p[1] * p[2]
    g = torch.Generator().manual_seed(3)
    rows = torch.randint(0, n, (2, 50), generator=g)  # duplicates and any shape
    weight = torch.randn(100, q[0] * q[1] * q[2], generator=g, dtype=torch.float64)
    fused = torch.autograd.grad((ops.tt_lookup(cores, rows, reuse_prefixes=reuse) * weight).sum(), cores)
    with native.disabled():
        expected = torch.autograd.grad((lookup(cores, rows.reshape(-1), p) * weight).sum(), cores)
    for a, b in zip(fused, expected):
        torch.testing.assert_close(a, b)


def test_gradcheck_and_empty_batch(ext):
    cores = make_cores((3, 2, 4), (2, 2, 3), (2, 3), seed=4)
    rows = torch.tensor([0, 5, 5, 23, 7])
    assert torch.autograd.gradcheck(lambda a, b, c: ops.tt_lookup([a, b, c], rows), tuple(cores))
    assert torch.autograd.gradcheck(lambda a, b, c: ops.tt_lookup([a, b, c], rows, reuse_prefixes=False), tuple(cores))
    empty = ops.tt_lookup(cores, torch.zeros(0, dtype=torch.long))
    assert empty.shape == (0, 12)
    grads = torch.autograd.grad(empty.sum(), cores)
    assert all(bool((gr == 0).all()) for gr in grads)


def test_thread_count_does_not_change_results(ext):
    cores = make_cores((7, 3, 9), (4, 5, 5), (16, 16), dtype=torch.float32, seed=5)
    rows = torch.randint(0, 189, (500,), generator=torch.Generator().manual_seed(6))
    old = torch.get_num_threads()
    try:
        runs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out = ops.tt_lookup(cores, rows)
            runs.append((out, torch.autograd.grad(out.square().sum(), cores)))
    finally:
        torch.set_num_threads(old)
    assert torch.equal(runs[0][0], runs[1][0])
    for a, b in zip(runs[0][1], runs[1][1]):
        # per-thread buffers sum in another grouping: equal up to float32 rounding
        torch.testing.assert_close(a, b, atol=1e-5 * float(b.abs().max()), rtol=1e-4)


def test_out_of_range_rows_raise(ext):
    cores = make_cores((2, 2, 2), (1, 1, 1), (1, 1))
    with pytest.raises(ValueError, match="out of range"):
        ops.tt_lookup(cores, torch.tensor([8]))


def test_deterministic_mode_keeps_the_cpu_kernel_and_sends_gpu_cores_to_python(deterministic):
    """The CPU backward sums per thread in a fixed order, so deterministic mode keeps it; the CUDA
    one sums with atomics, so there (decided before any CUDA call) the Python contraction runs."""
    cores = make_cores((2, 2, 2), (1, 2, 1), (2, 2), dtype=torch.float32)
    assert ops.tt_supported(cores)
    assert not ops._cuda_tt_fits(cores)


def test_the_cuda_backwards_alert_is_torchs_raised_in_python(deterministic):
    """In Python, before the native kernel: an error (a warning with warn_only), as torch's own
    operations without a deterministic implementation do."""
    with pytest.raises(RuntimeError, match="^gnnkit tt_lookup backward on CUDA does not have a deterministic"):
        ops.alert_not_deterministic("gnnkit tt_lookup backward on CUDA")
    torch.use_deterministic_algorithms(True, warn_only=True)
    with pytest.warns(UserWarning, match="does not have a deterministic implementation"):
        ops.alert_not_deterministic("x")
    torch.use_deterministic_algorithms(False)
    ops.alert_not_deterministic("x")  # nothing


@pytest.mark.parametrize("forced_off", [False, True])
def test_tt_embedding_uses_either_path_with_equal_results(ext, forced_off, monkeypatch):
    config = TTConfig(num_embeddings=1000, p_shapes=(10, 10, 10), q_shapes=(2, 3, 4), ranks=(4, 4))
    emb = TTEmbedding(config, generator=torch.Generator().manual_seed(7))
    idx = torch.randint(0, 1000, (300,), generator=torch.Generator().manual_seed(8))
    if forced_off:
        monkeypatch.setenv("GNNKIT_NATIVE", "0")
    out = emb(idx)
    grads = torch.autograd.grad(out.square().sum(), list(emb.cores))
    plain = emb.lookup_plain(idx)
    expected = torch.autograd.grad(plain.square().sum(), list(emb.cores))
    torch.testing.assert_close(out, plain, atol=1e-5, rtol=1e-4)
    for a, b in zip(grads, expected):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)

"""Native CSR and SELL-C-sigma SpMM against a dense PyTorch reference (values and gradients)."""

from __future__ import annotations

import pytest
import torch

from gnnkit import native
from gnnkit.native import ops
from gnnkit.sparse import Adjacency, spmm
from gnnkit.sparse.formats import FORMATS
from gnnkit.sparse.selector import usable

from .conftest import GRAPHS, on_device, powerlaw_csr


def dense(indptr: torch.Tensor, indices: torch.Tensor, num_cols: int, values=None, dtype=torch.float64):
    rows = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr.diff())
    out = torch.zeros(indptr.numel() - 1, num_cols, dtype=dtype)
    w = torch.ones(indices.numel(), dtype=dtype) if values is None else values.to(dtype)
    return out.index_put_((rows, indices), w, accumulate=True)


def reference(indptr, indices, num_cols, x, values=None, mean=False):
    out = dense(indptr, indices, num_cols, values, x.dtype) @ x
    if mean:
        out = out / indptr.diff().clamp(min=1).to(x.dtype).unsqueeze(1)
    return out


def num_cols_of(name: str, indices: torch.Tensor, indptr: torch.Tensor) -> int:
    return 90 if name == "rectangular" else indptr.numel() - 1


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("width", [1, 7, 16, 83, 130])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_csr_values_and_gradients_match_dense(ext, graph, weighted, reduce, width, device):
    """The CPU kernel and, on a GPU, the CUDA one (its build must then include it)."""
    indptr, indices = GRAPHS[graph]()
    n_cols = num_cols_of(graph, indices, indptr)
    g = torch.Generator().manual_seed(width)
    values = torch.rand(indices.numel(), generator=g, dtype=torch.float64) if weighted else None
    x = torch.randn(n_cols, width, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(indptr.numel() - 1, width, generator=g, dtype=torch.float64)
    ip, ix, vals = on_device(device, indptr, indices, values)
    out = ops.spmm(ip, ix, x.to(device), values=vals, reduce=reduce)
    assert out.device.type == device
    expected = reference(indptr, indices, n_cols, x, values, reduce == "mean")
    torch.testing.assert_close(out.cpu(), expected)
    (grad,) = torch.autograd.grad((out * w.to(device)).sum(), x)
    (grad_expected,) = torch.autograd.grad((expected * w).sum(), x)
    torch.testing.assert_close(grad, grad_expected)


def test_csr_float32_and_gradcheck(ext):
    indptr, indices = GRAPHS["powerlaw"]()
    x = torch.randn(150, 33)
    out = ops.spmm(indptr, indices, x)
    torch.testing.assert_close(out, reference(indptr, indices, 150, x.double()).float(), atol=1e-4, rtol=1e-4)
    xd = torch.randn(150, 3, dtype=torch.float64, requires_grad=True)
    at = ops.transpose(ops.CSR(indptr, indices, None, 150))
    assert torch.autograd.gradcheck(lambda t: ops.spmm(indptr, indices, t, reduce="mean", transposed=at), (xd,))


@pytest.mark.parametrize("threads", [1, 2])
def test_products_large_enough_to_split_over_threads_match_dense(ext, threads):
    """A product of thousands of rows, split in chunks over one or two threads, CSR and SELL alike
    (the graphs above are small: every chunk of theirs holds a few rows)."""
    indptr, indices = powerlaw_csr(3000, seed=5)
    g = torch.Generator().manual_seed(3)
    values = torch.rand(indices.numel(), generator=g, dtype=torch.float64)
    x = torch.randn(3000, 48, generator=g, dtype=torch.float64)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        csr = ops.spmm(indptr, indices, x, values=values)
        sell = ops.spmm_sell(ops.to_sell(ops.CSR(indptr, indices, values, 3000), torch.float64, 8, 64), x, True)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(csr, reference(indptr, indices, 3000, x, values))
    torch.testing.assert_close(sell, reference(indptr, indices, 3000, x, values, mean=True))


@pytest.mark.parametrize("chunk,sigma", [(1, 1), (4, 1), (8, 256), (32, 64), (3, 1000)])
@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_sell_matches_dense(ext, graph, chunk, sigma):
    indptr, indices = GRAPHS[graph]()
    n_cols = num_cols_of(graph, indices, indptr)
    g = torch.Generator().manual_seed(chunk)
    values = torch.rand(indices.numel(), generator=g, dtype=torch.float64)
    x = torch.randn(n_cols, 21, generator=g, dtype=torch.float64)
    sell = ops.to_sell(ops.CSR(indptr, indices, values, n_cols), torch.float64, chunk, sigma)
    slots_per_chunk = sell.chunk_ptr.diff()
    assert bool((slots_per_chunk % chunk == 0).all()) and int(sell.chunk_ptr[-1]) >= indices.numel()
    assert sorted(sell.perm.tolist()) == list(range(indptr.numel() - 1))  # a permutation of the rows
    for mean in (False, True):
        torch.testing.assert_close(ops.spmm_sell(sell, x, mean), reference(indptr, indices, n_cols, x, values, mean))


@pytest.mark.parametrize("name", ["native_csr", "native_sell"])
@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_formats_in_gnnkit_sparse_match_dense_with_gradients(ext, graph, name):
    indptr, indices = GRAPHS[graph]()
    n_cols = num_cols_of(graph, indices, indptr)
    adj = Adjacency(indptr, indices, num_cols=n_cols)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n_cols, 12, generator=g, requires_grad=True)
    weight = torch.randn(indptr.numel() - 1, 12, generator=g)
    for reduce in ("sum", "mean"):
        out = spmm(adj, x, reduce=reduce, format=name)
        expected = reference(indptr, indices, n_cols, x.double(), None, reduce == "mean")
        torch.testing.assert_close(out, expected.float(), atol=1e-4, rtol=1e-4)
        (grad,) = torch.autograd.grad((out * weight).sum(), x)
        (grad_expected,) = torch.autograd.grad((expected * weight.double()).sum(), x)
        # float32 sums over hub rows: compare with a tolerance relative to the largest entry
        scale = float(grad_expected.abs().max()) if grad_expected.numel() else 1.0
        torch.testing.assert_close(grad, grad_expected.float(), atol=1e-5 * scale, rtol=1e-4)


def test_selector_may_use_native_formats_only_when_built(ext, monkeypatch):
    adj = Adjacency(*GRAPHS["powerlaw"]())
    assert usable(FORMATS["native_csr"], adj) and usable(FORMATS["native_sell"], adj)
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    assert not usable(FORMATS["native_csr"], adj) and not usable(FORMATS["native_sell"], adj)


@pytest.mark.parametrize("name", ["native_csr", "native_sell"])
def test_forced_off_formats_fall_back_to_pytorch(ext, name, monkeypatch):
    """With the build present but GNNKIT_NATIVE=0, the native formats still compute the product."""
    indptr, indices = GRAPHS["powerlaw"]()
    x = torch.randn(150, 5, requires_grad=True)
    expected = reference(indptr, indices, 150, x.double()).float()
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    assert not native.available() and native.get() is None
    out = spmm(Adjacency(indptr, indices), x, format=name)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    (grad,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(grad, torch.autograd.grad(expected.sum(), x)[0], atol=1e-4, rtol=1e-4)


def test_thread_count_does_not_change_results(ext):
    indptr, indices = GRAPHS["powerlaw"]()
    x = torch.randn(150, 40)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ops.spmm(indptr, indices, x)
        torch.set_num_threads(2)
        two = ops.spmm(indptr, indices, x)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(one, two)  # each row is summed by one thread in entry order


def test_rejects_bad_input(ext):
    with pytest.raises(ValueError, match="reduce"):
        ops.spmm(torch.tensor([0, 1]), torch.tensor([0]), torch.randn(1, 2), reduce="max")
    with pytest.raises(RuntimeError, match="int64"):
        ext.spmm_csr(torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0]), None, torch.randn(1, 2), False)


def test_calibration_measures_native_formats_only_when_built(ext, monkeypatch):
    from gnnkit.sparse.measure import measure_formats

    adj = Adjacency(*GRAPHS["powerlaw"]())
    names = ["csr", "native_csr", "native_sell"]
    assert set(measure_formats(adj, 8, formats=names, repeats=1, min_seconds=0.0)) == set(names)
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    assert set(measure_formats(adj, 8, formats=names, repeats=1, min_seconds=0.0)) == {"csr"}


@pytest.mark.parametrize("width", [64, 80])
def test_large_output_streamed_past_the_caches_matches(ext, width):
    """An output above 32 MiB is written with streaming stores where the CPU has AVX-512 (width 64);
    width 80 has a 16-wide tile and so streams too. Both must equal gather-scatter."""
    n = 140_000
    g = torch.Generator().manual_seed(9)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.randint(0, 7, (n,), generator=g).cumsum(0)])
    indices = torch.randint(0, n, (int(indptr[-1]),), generator=g)
    x = torch.randn(n, width, generator=g)
    assert n * width * 4 > 32 * 2**20
    rows = torch.repeat_interleave(torch.arange(n), indptr.diff())
    expected = torch.zeros(n, width).index_add_(0, rows, x[indices])
    for reduce in ("sum", "mean"):
        out = ops.spmm(indptr, indices, x, reduce=reduce)
        ref = expected / indptr.diff().clamp(min=1).unsqueeze(1) if reduce == "mean" else expected
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)

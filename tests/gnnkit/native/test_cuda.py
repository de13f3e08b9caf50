"""The CUDA kernels against the CPU kernels and the dense references (values, gradients, samples).

The CSR product against the dense reference runs on both devices in ``test_spmm.py``. These run
only where torch sees a GPU and the build includes the CUDA kernels; CI (no GPU) compile-checks
the same sources in ``test_nvcc_compile.py``.
"""

from __future__ import annotations

import pytest
import torch

from gnnkit.native import ops

from .conftest import GRAPHS, on_device, powerlaw_csr
from .test_sampler import check_sample
from .test_spmm import num_cols_of, reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: CUDA kernels not run")


@pytest.fixture(scope="module")
def cuda_ext(ext):
    """The native build, which on a GPU machine must include the CUDA kernels."""
    assert "spmm_csr_cuda" in ext.kernels(), f"the build on a CUDA machine lacks CUDA kernels: {ext.kernels()}"
    return ext


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_sell_spmm_on_gpu_matches_cpu_kernel(cuda_ext, graph, reduce, dtype):
    indptr, indices = GRAPHS[graph]()
    n_cols = num_cols_of(graph, indices, indptr)
    values = torch.rand(indices.numel(), generator=torch.Generator().manual_seed(1), dtype=dtype)
    x = torch.randn(n_cols, 45, generator=torch.Generator().manual_seed(2), dtype=dtype)
    cpu = ops.to_sell(ops.CSR(indptr, indices, values, n_cols), dtype=dtype)
    gpu = ops.to_sell(ops.CSR(*on_device("cuda", indptr, indices, values), n_cols), dtype=dtype)
    assert gpu.cols.is_cuda
    out = ops.spmm_sell(gpu, x.cuda(), mean=reduce == "mean")
    tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {}  # summation order differs
    torch.testing.assert_close(out.cpu(), ops.spmm_sell(cpu, x, mean=reduce == "mean"), **tol)
    expected = reference(indptr, indices, n_cols, x.double(), values.double(), reduce == "mean")
    torch.testing.assert_close(out.cpu(), expected.to(dtype), **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width", [16, 64, 256])
def test_16bit_spmm_on_gpu_sums_in_float_and_rounds_once(cuda_ext, dtype, width):
    """CSR and SELL over half and bfloat16 features (vector widths 1, 2 and 8 per lane) against the
    float64 product of the same rounded inputs; a hub row split into segments sums in float too."""
    indptr, indices = powerlaw_csr(3000, seed=9, avg=10)
    assert int(indptr.diff().max()) > 4 * 256
    gen = torch.Generator().manual_seed(3)
    values = torch.rand(indices.numel(), generator=gen).to(dtype)
    x = torch.randn(3000, width, generator=gen).to(dtype)
    expected = reference(indptr, indices, 3000, x.double(), values.double(), True)
    rel = 2.0 ** -10 if dtype == torch.float16 else 2.0 ** -7  # the output's one rounding, and some
    a = ops.CSR(*on_device("cuda", indptr, indices, values), 3000)
    for out in (ops.spmm_csr_raw(a, x.cuda(), mean=True), ops.spmm_sell(ops.to_sell(a, dtype=dtype), x.cuda(), True)):
        assert out.dtype == dtype
        torch.testing.assert_close(out.cpu().double(), expected, rtol=rel, atol=rel)


@pytest.mark.parametrize("width", [32, 64, 128, 256])
def test_vectorised_feature_loads_on_gpu_match_scalar_ones(cuda_ext, width):
    """Widths that take 1, 2 and 4 floats a lane, and an x that is not 16-byte aligned (a view one
    row in), which must fall back to scalar loads: all equal the float64 product."""
    indptr, indices = powerlaw_csr(2000, seed=4, avg=8)
    base = torch.randn(2001 * width + 1, generator=torch.Generator().manual_seed(5))
    for x in (base[:2000 * width].view(2000, width), base[1:2000 * width + 1].view(2000, width)):
        expected = reference(indptr, indices, 2000, x.double(), None, False)
        out = ops.spmm_csr_raw(ops.CSR(*on_device("cuda", indptr, indices), None, 2000), x.cuda())
        torch.testing.assert_close(out.cpu().double(), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_large_skewed_spmm_on_gpu(cuda_ext, reduce):
    """A hub row of 60,000 entries split into many segments (added atomically), rows just below and
    above one segment, many warps, float32; CSR and SELL against the CPU kernel."""
    indptr, indices = powerlaw_csr(20000, seed=5, avg=12)
    deg = indptr.diff()
    assert deg.max() > 100 * 256
    assert bool(((deg > 200) & (deg <= 256)).any()) and bool(((deg > 256) & (deg < 600)).any())
    x = torch.randn(20000, 70)
    mean = reduce == "mean"
    expected = ops.spmm(indptr, indices, x.double(), reduce=reduce)
    tol = {"atol": 1e-2, "rtol": 1e-4}  # float32 sums of up to 60,000 terms of size ~1 (a lost segment: ~10)
    out = ops.spmm(*on_device("cuda", indptr, indices), x.cuda(), reduce=reduce)
    torch.testing.assert_close(out.cpu().double(), expected, **tol)
    sell = ops.to_sell(ops.CSR(*on_device("cuda", indptr, indices), None, 20000))
    torch.testing.assert_close(ops.spmm_sell(sell, x.cuda(), mean=mean).cpu().double(), expected, **tol)


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanouts", [[5, 3], [-1, 2], [0, 4], [40, 70]])
def test_sampler_on_gpu_is_valid_deterministic_and_equals_cpu(cuda_ext, replace, fanouts):
    indptr, indices = powerlaw_csr(500, seed=4, avg=30)
    seeds = torch.tensor([3, 0, 7, 7, 499, 12, 3, 250])  # repeated seeds, hub (node 0), empty rows likely
    cpu = ops.sample_neighbors(indptr, indices, seeds, fanouts, replace, seed=11)
    local = torch.full((500,), -1, dtype=torch.int64, device="cuda")
    gpu = ops.sample_neighbors(*on_device("cuda", indptr, indices, seeds), fanouts, replace, seed=11, local=local)
    again = ops.sample_neighbors(*on_device("cuda", indptr, indices, seeds), fanouts, replace, seed=11, local=local)
    assert bool((local == -1).all()), "the scratch map must be left as found"
    host = [t.cpu() for t in gpu[:4]] + list(gpu[4:])
    check_sample(indptr, indices, seeds, fanouts, replace, *host)
    for a, b in zip(gpu[:4], again[:4]):
        assert torch.equal(a, b)
    # the random streams are keyed by (seed, hop, frontier position) on both devices, and both
    # draw distinct neighbours by Floyd's algorithm up to fan-out 64 (beyond it the CPU takes a
    # partial shuffle on short rows: equally uniform, other draws)
    if replace or max(fanouts) <= 64:
        for a, b in zip(host, cpu):
            assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


@pytest.mark.parametrize("reuse", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tt_lookup_on_gpu_matches_cpu_values_and_gradients(cuda_ext, dtype, reuse):
    g = torch.Generator().manual_seed(3)
    shapes = [(7, 1, 3, 4), (5, 4, 2, 6), (6, 6, 4, 1)]
    cores = [torch.randn(*s, generator=g, dtype=dtype) for s in shapes]
    rows = torch.cat([torch.randint(0, 210, (300,), generator=g), torch.tensor([0, 209, 209, 5])])
    weight = torch.randn(rows.numel(), 24, generator=g, dtype=dtype)
    cpu_cores = [c.clone().requires_grad_() for c in cores]
    gpu_cores = [c.cuda().requires_grad_() for c in cores]
    out_cpu = ops.tt_lookup(cpu_cores, rows)
    out_gpu = ops.tt_lookup(gpu_cores, rows.cuda(), reuse_prefixes=reuse)
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {}
    torch.testing.assert_close(out_gpu.cpu(), out_cpu, **tol)
    grads_cpu = torch.autograd.grad((out_cpu * weight).sum(), cpu_cores)
    grads_gpu = torch.autograd.grad((out_gpu * weight.cuda()).sum(), gpu_cores)
    for a, b in zip(grads_gpu, grads_cpu):
        torch.testing.assert_close(a.cpu(), b, **tol)


def test_tt_lookup_on_gpu_of_no_rows(cuda_ext):
    cores = [torch.randn(3, 1, 2, 2, device="cuda"), torch.randn(3, 2, 2, 2, device="cuda"),
             torch.randn(3, 2, 2, 1, device="cuda")]
    out = ops.tt_lookup(cores, torch.zeros(0, dtype=torch.long, device="cuda"))
    assert out.shape == (0, 8) and out.is_cuda

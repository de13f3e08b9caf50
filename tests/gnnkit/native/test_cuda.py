"""The CUDA kernels against the CPU kernels and the dense references (values, gradients, samples).

The CSR product against the dense reference runs on both devices in ``test_spmm.py``. These run
only where torch sees a GPU and the build includes the CUDA kernels; CI (no GPU) compile-checks
the same sources in ``test_nvcc_compile.py``.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from gnnkit.native import ops
from gnnkit.step_profile import SYNC_WARNING

from .conftest import GRAPHS, on_device, powerlaw_csr
from .test_sampler import check_sample
from .test_spmm import num_cols_of, reference

pytestmark = pytest.mark.gpu


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


def test_spmm_on_gpu_in_deterministic_mode_repeats_bitwise(cuda_ext, deterministic):
    """Under ``torch.use_deterministic_algorithms`` no row is split into atomically added segments:
    the hub of 60,000 entries gives the same bits every run, CSR and SELL, forward and backward,
    float32 and bfloat16, and the CSR product equals the float64 reference."""
    indptr, indices = powerlaw_csr(20000, seed=5, avg=12)
    assert indptr.diff().max() > 100 * 256
    a = ops.CSR(*on_device("cuda", indptr, indices), None, 20000)
    x = torch.randn(20000, 70, generator=torch.Generator().manual_seed(6)).cuda()
    sell = ops.to_sell(a)
    x16 = x.to(torch.bfloat16)
    sell16 = ops.to_sell(a, dtype=torch.bfloat16)

    def run() -> list[torch.Tensor]:
        leaf = x.clone().requires_grad_()
        out = ops.spmm(a.indptr, a.indices, leaf, reduce="mean")
        (grad,) = torch.autograd.grad(out.square().sum(), leaf)
        return [out, grad, ops.spmm_sell(sell, x), ops.spmm_csr_raw(a, x16), ops.spmm_sell(sell16, x16, True)]

    first = run()
    for _ in range(2):
        assert all(torch.equal(p, q) for p, q in zip(run(), first))
    expected = ops.spmm(indptr, indices, x.cpu().double(), reduce="mean")
    torch.testing.assert_close(first[0].cpu().double(), expected, atol=1e-2, rtol=1e-4)


def test_spmm_on_gpu_wider_than_the_grid_spans(cuda_ext):
    """65535 x 32 + 33 features take 65,537 tiles of 32 at one float a lane, more than the grid's
    y dimension holds: the kernels loop over the rest."""
    width = 65535 * 32 + 33
    indptr, indices = torch.tensor([0, 2, 2, 5]), torch.tensor([0, 2, 1, 2, 0])
    values = torch.tensor([0.5, -1.0, 2.0, 1.0, 0.25])
    x = torch.randn(3, width, generator=torch.Generator().manual_seed(7))
    expected = reference(indptr, indices, 3, x.double(), values.double(), False)
    a = ops.CSR(*on_device("cuda", indptr, indices, values), 3)
    torch.testing.assert_close(ops.spmm_csr_raw(a, x.cuda()).cpu().double(), expected, atol=1e-5, rtol=1e-5)
    sell = ops.to_sell(a)
    torch.testing.assert_close(ops.spmm_sell(sell, x.cuda()).cpu().double(), expected, atol=1e-5, rtol=1e-5)


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


def test_the_loaders_sampler_on_a_gpu_graph_runs_the_cuda_kernel(cuda_ext, monkeypatch):
    """CSRNeighborSampler over a CSR in device memory draws with the native CUDA sampler (its seed
    from the sampler's CUDA generator): valid blocks, the same under the same sampler seed."""
    from torch_geometric.sampler import NodeSamplerInput

    from gnnkit.data.sampler import CSRNeighborSampler

    calls = []
    raw = ops._sample_raw
    monkeypatch.setattr(ops, "_sample_raw", lambda *args: calls.append(args[0].device) or raw(*args))
    indptr, indices = powerlaw_csr(500, seed=4, avg=30)
    seeds = torch.tensor([3, 0, 7, 499, 12, 250])
    outs = []
    for _ in range(2):
        sampler = CSRNeighborSampler(*on_device("cuda", indptr, indices), [5, 3], seed=7)
        outs.append(sampler.sample_from_nodes(NodeSamplerInput(input_id=torch.arange(6), node=seeds)))
    assert [d.type for d in calls] == ["cuda", "cuda"]
    assert sampler._local.dtype == torch.int64  # what the CUDA kernel reads without a copy
    out = outs[0]
    assert out.node.is_cuda and out.row.is_cuda
    check_sample(indptr, indices, seeds, [5, 3], False, out.node.cpu(), out.row.cpu(), out.col.cpu(), out.edge.cpu(),
                 out.num_sampled_nodes, out.num_sampled_edges)
    assert torch.equal(outs[0].edge, outs[1].edge)


def test_a_native_kernels_host_syncs_reach_pythons_warnings(cuda_ext):
    """The CUDA sampler reads each hop's sizes back: under torch's sync debug mode those syncs arrive
    as Python warnings in the calling thread (where gnnkit.step_profile counts them), not as lines
    on stderr."""
    indptr, indices = powerlaw_csr(500, seed=4, avg=30)
    local = torch.full((500,), -1, dtype=torch.int64, device="cuda")
    args = (*on_device("cuda", indptr, indices, torch.tensor([3, 0, 7])), [5, 3], False, 1, local)
    cuda_ext.sample_neighbors(*args)  # the binding itself: no Python-side check reads anything back
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            cuda_ext.sample_neighbors(*args)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert sum(SYNC_WARNING in str(w.message) for w in caught) >= 2  # two hops, a size read each at least


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


def _wide_cores(q: tuple[int, int, int], r: tuple[int, int], device: str = "cpu") -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    shapes = [(3, 1, q[0], r[0]), (2, r[0], q[1], r[1]), (2, r[1], q[2], 1)]
    return [(torch.randn(*s, generator=g) / s[1] ** 0.5).to(device) for s in shapes]


@pytest.mark.parametrize("reuse", [True, False])
def test_tt_lookup_on_gpu_above_48k_of_shared_memory(cuda_ext, reuse):
    """A prefix product of 8 x 8 x (200 + 8) floats (53 KB a block) opts into more shared memory."""
    cores = _wide_cores((8, 8, 8), (4, 200))
    assert ops.tt_shared_bytes(cores) > 48 * 1024 and ops.tt_supported([c.cuda() for c in cores])
    rows = torch.tensor([0, 5, 11, 11, 3])
    cpu_cores = [c.clone().requires_grad_() for c in cores]
    gpu_cores = [c.cuda().requires_grad_() for c in cores]
    out_cpu, out_gpu = ops.tt_lookup(cpu_cores, rows), ops.tt_lookup(gpu_cores, rows.cuda(), reuse_prefixes=reuse)
    torch.testing.assert_close(out_gpu.cpu(), out_cpu, atol=1e-4, rtol=1e-4)
    for a, b in zip(torch.autograd.grad(out_gpu.square().sum(), gpu_cores),
                    torch.autograd.grad(out_cpu.square().sum(), cpu_cores)):
        torch.testing.assert_close(a.cpu(), b, atol=1e-3, rtol=1e-4)


def test_tt_cores_beyond_the_gpus_shared_memory_take_the_python_path(cuda_ext):
    """16 x 16 x (1024 + 4) floats (1 MB) fit no block: the fused kernel refuses them in one line
    (checked in Python: a C++ check that throws took the process down on the GPU image's torch) and
    the lookup runs the Python contraction instead."""
    from gnnkit.tt.lookup import lookup

    cores = [c.cuda() for c in _wide_cores((16, 16, 4), (4, 1024))]
    assert not ops.tt_supported(cores)
    rows = torch.tensor([0, 7, 11], device="cuda")
    with pytest.raises(ValueError, match="bytes of shared memory a block"):
        ops.tt_lookup(cores, rows)
    expected = lookup([c.cpu() for c in cores], rows.cpu(), (3, 2, 2), fused=False)
    torch.testing.assert_close(lookup(cores, rows, (3, 2, 2)).cpu(), expected, atol=1e-4, rtol=1e-4)


def test_tt_on_gpu_in_deterministic_mode_takes_the_python_path(cuda_ext, deterministic):
    """The fused kernel's backward sums with atomics: in deterministic mode it raises as torch's own
    nondeterministic operations do, and the lookup runs the deterministic Python contraction."""
    from gnnkit.tt.lookup import lookup

    cpu_cores = _wide_cores((2, 3, 2), (3, 4))
    cores = [c.cuda().requires_grad_() for c in cpu_cores]
    assert not ops.tt_supported(cores)
    rows = torch.tensor([0, 7, 11, 7], device="cuda")
    with pytest.raises(RuntimeError, match="tt_lookup backward on CUDA"):
        ops.tt_lookup(cores, rows).sum().backward()
    out = lookup(cores, rows, (3, 2, 2))
    grads = torch.autograd.grad(out.square().sum(), cores)
    cpu = [c.clone().requires_grad_() for c in cpu_cores]
    expected = ops.tt_lookup(cpu, rows.cpu())
    torch.testing.assert_close(out.detach().cpu(), expected.detach(), atol=1e-5, rtol=1e-5)
    for g, e in zip(grads, torch.autograd.grad(expected.square().sum(), cpu)):
        torch.testing.assert_close(g.cpu(), e, atol=1e-4, rtol=1e-4)

import warnings

import numpy as np
import pytest
import torch

from gnnkit.sparse import FORMATS, Adjacency, plan, resolve_format, spmm, spmm_planned
from gnnkit.sparse.corpus import MatrixSpec
from gnnkit.sparse.formats.bsr import csr_to_bsr

ALL = sorted(FORMATS)


def reference(adj: Adjacency, x: torch.Tensor, reduce: str) -> torch.Tensor:
    """Plain dense product with autograd: the ground truth every format must match."""
    out = adj.to_dense(x.dtype) @ x
    if reduce == "mean":
        out = out / adj.row_counts().clamp(min=1).to(x.dtype).unsqueeze(1)
    return out


def adversarial() -> dict[str, Adjacency]:
    """Empty rows, isolated nodes, self-loops, duplicates, rectangular, empty and tiny graphs."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, 37, (200,), generator=g)
    dst = torch.randint(0, 30, (200,), generator=g)  # rows 30..36 empty, some columns unused
    loops = torch.tensor([[5, 5, 5, 9], [5, 5, 5, 9]])  # repeated self-loop
    dups = torch.tensor([[1, 1, 1], [2, 2, 2]])  # duplicate edge 1 -> 2
    ei = torch.cat([torch.stack([src, dst]), loops, dups], 1)
    return {
        "random-square": Adjacency.from_edge_index(ei, 37),
        "weighted": Adjacency.from_edge_index(ei, 37, values=torch.rand(ei.size(1), generator=g)),
        "rectangular": Adjacency.from_edge_index(torch.stack([src, dst]), 37, num_dst=30),
        "wide": Adjacency.from_edge_index(torch.stack([dst, src % 13]), 30, num_dst=13),
        "empty-graph": Adjacency(torch.zeros(8, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
        "no-nodes": Adjacency(torch.zeros(1, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
        "single-loop": Adjacency(torch.tensor([0, 1]), torch.tensor([0])),
        "hub": MatrixSpec("hubs", 300, 300, 6, 3).build(),
        "banded": MatrixSpec("banded", 257, 257, 9, 4).build(),
        "bipartite": MatrixSpec("bipartite", 120, 500, 5, 5).build(),
    }


CASES = adversarial()


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_format_matches_dense_values_and_gradients(case, reduce):
    adj = CASES[case]
    g = torch.Generator().manual_seed(1)
    x0 = torch.randn(adj.num_cols, 6, generator=g)
    weight = torch.randn(adj.num_rows, 6, generator=g)
    x = x0.clone().requires_grad_(True)
    expected = reference(adj, x, reduce)
    (grad_expected,) = torch.autograd.grad((expected * weight).sum(), x)
    for name in ALL:
        if not FORMATS[name].applicable(adj):
            continue
        x = x0.clone().requires_grad_(True)
        out = spmm(adj, x, reduce=reduce, format=name)
        (grad,) = torch.autograd.grad((out * weight).sum(), x)
        assert out.shape == expected.shape
        torch.testing.assert_close(out, expected.detach(), atol=1e-5, rtol=1e-5, msg=f"{name} values")
        torch.testing.assert_close(grad, grad_expected, atol=1e-5, rtol=1e-5, msg=f"{name} gradients")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ALL)
def test_16bit_features_work_in_every_format(name, dtype):
    """Mixed precision hands 16-bit features to the layers: every format multiplies them (in float32
    where it has no 16-bit kernel), values and gradients close to float64, in the features' dtype."""
    adj = CASES["weighted"]
    g = torch.Generator().manual_seed(3)
    x0 = torch.randn(adj.num_cols, 6, generator=g).to(dtype)
    weight = torch.randn(adj.num_rows, 6, generator=g)
    exact = x0.double().requires_grad_(True)
    expected = reference(adj, exact, "mean")
    (grad_expected,) = torch.autograd.grad((expected * weight.double()).sum(), exact)
    x = x0.clone().requires_grad_(True)
    out = spmm(adj, x, reduce="mean", format=name)
    (grad,) = torch.autograd.grad((out * weight.to(dtype)).sum(), x)
    assert out.dtype == dtype and grad.dtype == dtype
    tol = {"atol": 0.05, "rtol": 0.02}  # the output's rounding to 16 bits, and bfloat16 weights
    torch.testing.assert_close(out.double(), expected.detach(), **tol, msg=f"{name} values")
    torch.testing.assert_close(grad.double(), grad_expected, **tol, msg=f"{name} gradients")


def test_16bit_products_run_in_float32_only_where_a_format_lacks_16bit_kernels():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    widened = {(name, device.type) for name in ALL for device in (cpu, cuda)
               if FORMATS[name].compute_dtype(torch.bfloat16, device) == torch.float32}
    assert widened == {("csr", "cpu"), ("csc", "cpu"), ("csc", "cuda"), ("bsr4", "cpu"), ("bsr4", "cuda"),
                       ("bsr16", "cpu"), ("bsr16", "cuda"), ("coo", "cpu"), ("coo", "cuda"), ("native_csr", "cpu"),
                       ("native_sell", "cpu"), ("segment", "cpu"), ("segment", "cuda")}
    assert all(FORMATS[name].compute_dtype(torch.float64, cpu) == torch.float64 for name in ALL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_hub_row_of_16bit_features_sums_as_accurately_in_every_format(dtype):
    """torch.segment_reduce (and the CPU COO product) added 16-bit messages in 16 bits: on a
    2,000-entry row, segment was 42x and coo 12x csr's error. Every format now adds in float32 and
    rounds once, so all agree with csr."""
    g = torch.Generator().manual_seed(0)
    n = 300
    hub = torch.stack([torch.randint(0, n, (2000,), generator=g), torch.zeros(2000, dtype=torch.long)])
    adj = Adjacency.from_edge_index(hub, num_nodes=n)
    x = torch.randn(n, 8, generator=g).to(dtype)
    exact = reference(adj, x.double(), "sum")
    errors = {name: (spmm(adj, x, format=name).double() - exact).abs().max().item() for name in ALL
              if FORMATS[name].applicable(adj)}
    assert max(errors.values()) <= 1.01 * errors["csr"], errors


def test_float64_means_and_gcn_weights_are_computed_in_float64():
    """The mean's row scale and GCN's normalised weights were float32 values rounded up: 3e-8 and 1e-7
    off in float64, where PyG computes them in x's dtype."""
    from torch_geometric.nn import GCNConv, SAGEConv

    from gnnkit.models.sparse_conv import SparseGCNConv, SparseSAGEConv

    three = Adjacency.from_edge_index(torch.tensor([[0, 1, 2], [0, 0, 0]]), num_nodes=3)
    for name in ALL:
        out = spmm(three, torch.ones(3, 1, dtype=torch.float64), reduce="mean", format=name)
        assert out[0, 0].item() == 1.0, name
    torch.manual_seed(0)
    edges, x = torch.randint(0, 40, (2, 200)), torch.randn(40, 16, dtype=torch.float64)
    adj = Adjacency.from_edge_index(edges, num_nodes=40)
    for ours, theirs in ((SparseGCNConv(16, 8), GCNConv(16, 8)), (SparseSAGEConv(16, 8), SAGEConv(16, 8))):
        ours, theirs = ours.double(), theirs.double()
        theirs.load_state_dict(ours.state_dict())
        torch.testing.assert_close(ours(x, adj), theirs(x, edges), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("name", ALL)
def test_float64_gradcheck(name):
    adj = MatrixSpec("chung_lu", 24, 24, 4, 11).build()
    x = torch.randn(24, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: spmm(adj, t, reduce="mean", format=name), (x,), fast_mode=True)


def test_from_edge_index_keeps_each_weight_with_its_edge():
    g = torch.Generator().manual_seed(5)
    ei = torch.randint(0, 20, (2, 90), generator=g)  # unsorted, with duplicates
    values = torch.rand(90, generator=g)
    expected = torch.zeros(20, 20).index_put_((ei[1], ei[0]), values, accumulate=True)
    adj = Adjacency.from_edge_index(ei, 20, values=values)
    torch.testing.assert_close(adj.to_dense(), expected)
    torch.testing.assert_close(adj.t().to_dense(), expected.t())
    torch.testing.assert_close(spmm(adj, torch.eye(20), format="gather_scatter"), expected)


def test_backward_uses_its_own_format_on_the_cached_transpose():
    adj = MatrixSpec("erdos_renyi", 50, 60, 3, 1).build()
    x = torch.randn(60, 4, requires_grad=True)
    spmm(adj, x, format="csr", backward_format="segment").sum().backward()
    transposed = adj.t()
    assert transposed is adj.t() and transposed.t() is adj
    assert any(k.startswith("format:segment") for k in transposed.cached_keys())
    assert not any(k.startswith("format:segment") for k in adj.cached_keys())
    assert any(k.startswith("format:csr") for k in adj.cached_keys())
    torch.testing.assert_close(x.grad, adj.to_dense().sum(0, keepdim=True).t().expand(60, 4))


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_a_single_use_matrix_with_a_gather_scatter_backward_needs_no_transpose(reduce):
    """Gather-scatter multiplies by A^T walking A's own entries (PyG's backward): for a single-use
    matrix no transpose is built, and the gradient is the one through the transpose, to the bit on
    the CPU."""
    spec = MatrixSpec("hubs", 70, 50, 4, 3)
    x = torch.randn(50, 6, dtype=torch.float64)
    values = torch.rand(spec.build().nnz, dtype=torch.float64)
    grads = []
    for backward in ("gather_scatter", "csr"):
        adj = spec.build()
        adj = Adjacency(adj.indptr, adj.indices, num_cols=adj.num_cols, values=values, single_use=True)
        leaf = x.clone().requires_grad_()
        spmm(adj, leaf, reduce=reduce, format="csr", backward_format=backward).square().sum().backward()
        assert ("t" in adj.cached_keys()) is (backward == "csr")
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[0], grads[1])
    adj = spec.build()
    torch.testing.assert_close(FORMATS["gather_scatter"].transposed(adj, torch.eye(70)), adj.to_dense().t())
    with pytest.raises(ValueError, match="multiplies by A\\^T only through adj.t()"):
        FORMATS["csr"].transposed(adj, torch.eye(70))
    with pytest.raises(ValueError, match="x must be \\[70, F\\] for the transpose of"):
        FORMATS["gather_scatter"].transposed(adj, torch.eye(50))


def test_conversions_are_cached_not_redone():
    adj = MatrixSpec("banded", 64, 64, 4, 2).build()
    x = torch.randn(64, 8)
    spmm(adj, x, format="bsr4")
    state = FORMATS["bsr4"].prepare(adj)
    spmm(adj, x, format="bsr4")
    assert FORMATS["bsr4"].prepare(adj) is state


def test_forced_format_is_honoured_and_plan_records_it():
    adj = MatrixSpec("rmat", 80, 80, 5, 3).build()
    p = plan(adj, 16, "segment")
    assert (p.forward, p.backward, p.width, p.source) == ("segment", "segment", 16, "forced")
    p = plan(adj, 16, "coo", backward_format="csc")
    assert (p.forward, p.backward) == ("coo", "csc")


def test_auto_plan_gives_applicable_formats():
    for adj in CASES.values():
        for width in (1, 16, 300):
            p = plan(adj, width)
            assert p.source == "selector"
            assert FORMATS[p.forward].applicable(adj) and FORMATS[p.backward].applicable(adj.t())


def test_read_only_memory_mapped_input_is_never_written(tmp_path):
    adj0 = MatrixSpec("communities", 200, 200, 6, 7).build()
    arrays = {}
    for key, t in (("indptr", adj0.indptr), ("indices", adj0.indices)):
        path = tmp_path / f"{key}.npy"
        np.save(path, t.numpy())
        arrays[key] = np.load(path, mmap_mode="r")
    assert not arrays["indices"].flags.writeable
    with warnings.catch_warnings():  # torch warns (once per process) that the arrays are read-only
        warnings.simplefilter("ignore")
        indptr = torch.from_numpy(arrays["indptr"])
        indices = torch.from_numpy(arrays["indices"])
    adj = Adjacency(indptr, indices)
    x = torch.randn(200, 5, requires_grad=True)
    expected = reference(adj0, x, "sum")
    for name in ALL:
        if FORMATS[name].applicable(adj):
            torch.testing.assert_close(spmm(adj, x, format=name), expected)
            spmm(adj, x, reduce="mean", format=name).sum().backward()
    np.testing.assert_array_equal(np.load(tmp_path / "indices.npy"), adj0.indices.numpy())


def test_bsr_conversion_matches_scipy():
    sp = pytest.importorskip("scipy.sparse")
    adj = MatrixSpec("communities", 96, 96, 5, 9).build()
    m = sp.csr_matrix((np.ones(adj.nnz, np.float32), adj.indices.numpy(), adj.indptr.numpy()), shape=adj.shape)
    m.sum_duplicates()
    ref = m.tobsr(blocksize=(4, 4))
    ref.sort_indices()
    crow, col, values = csr_to_bsr(adj, 4)
    np.testing.assert_array_equal(crow.numpy(), ref.indptr)
    np.testing.assert_array_equal(col.numpy(), ref.indices)
    np.testing.assert_allclose(values.numpy(), ref.data)


def test_bsr_and_dense_refuse_matrices_they_would_blow_up():
    sparse_random = MatrixSpec("erdos_renyi", 5000, 5000, 2, 0).build()
    assert not FORMATS["bsr16"].applicable(sparse_random)  # ~1 entry per 256-slot block
    assert not FORMATS["dense"].applicable(sparse_random)  # 25M slots for 10k entries
    with pytest.raises(ValueError, match="format 'dense' cannot hold"):
        spmm(sparse_random, torch.randn(5000, 2), format="dense")


def test_errors_are_one_clear_line():
    adj = CASES["random-square"]
    with pytest.raises(ValueError, match=r"Could not resolve format 'ellpack' among choices \['bsr16'"):
        spmm(adj, torch.randn(37, 2), format="ellpack")
    with pytest.raises(ValueError, match=r"reduce must be one of \['sum', 'mean'\], got 'max'"):
        spmm(adj, torch.randn(37, 2), reduce="max")
    with pytest.raises(ValueError, match=r"x must be \[37, F\]"):
        spmm(adj, torch.randn(36, 2))
    with pytest.raises(ValueError, match="indices must lie in"):
        Adjacency(torch.tensor([0, 1]), torch.tensor([3]))
    with pytest.raises(ValueError, match="non-decreasing"):
        Adjacency(torch.tensor([0, 2, 1, 2]), torch.tensor([0, 0]))
    assert resolve_format("Gather-Scatter") == "gather_scatter" and resolve_format("pyg") == "gather_scatter"


def test_repr():
    adj = Adjacency(torch.tensor([0, 1, 3]), torch.tensor([1, 0, 1]), num_cols=3, values=torch.ones(3))
    assert repr(adj) == "Adjacency(num_rows=2, num_cols=3, nnz=3, weighted)"
    one_off = Adjacency.from_edge_index(torch.tensor([[0], [1]]), 2, single_use=True)
    assert repr(one_off) == "Adjacency(num_rows=2, num_cols=2, nnz=1, single_use)" and one_off.t().single_use
    assert repr(FORMATS["bsr16"]) == "BSR16Format(block=16)" and repr(FORMATS["csr"]) == "CSRFormat()"


class _OnCuda(Adjacency):
    """An adjacency that reports a CUDA device: device rules checked without a GPU."""

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", 0)


def _cuda_like(n: int = 50) -> Adjacency:
    g = torch.Generator().manual_seed(0)
    row, col = torch.randint(0, n, (2, 300), generator=g)
    a = Adjacency.from_edge_index(torch.stack([row, col]), n)
    return _OnCuda(a.indptr, a.indices, a.num_cols)


@pytest.mark.parametrize("name", ["csc", "bsr4"])
def test_a_forced_format_without_cuda_code_names_format_and_device(name: str) -> None:
    from gnnkit.sparse.spmm import plan

    with pytest.raises(ValueError, match=f"format '{name}' has no implementation on cuda"):
        plan(_cuda_like(), 16, name)


def test_formats_without_cuda_code_are_never_candidates_on_cuda() -> None:
    from gnnkit.sparse.formats import FORMATS
    from gnnkit.sparse.selector import usable

    adj = _cuda_like()
    on_cuda = {n for n, f in FORMATS.items() if usable(f, adj)}
    assert not on_cuda & {"csc", "bsr4", "bsr16"}
    assert {"csr", "coo", "dense", "gather_scatter", "segment"} <= on_cuda


@pytest.mark.parametrize("cuda_kernels", [False, True])
def test_native_formats_are_candidates_only_where_their_kernels_are_built(monkeypatch, cuda_kernels):
    """Without CUDA kernels in the build (no GPU, or no nvcc) native formats on CUDA would run
    torch's CSR under their name: the selector and labelling must not take them there."""
    from gnnkit import native

    monkeypatch.setattr(native, "available", lambda: True)
    monkeypatch.setattr(native, "kernels", lambda: ["spmm_csr", *(["spmm_csr_cuda"] if cuda_kernels else [])])
    for name in ("native_csr", "native_sell"):
        assert FORMATS[name].selectable(torch.device("cpu"))
        assert FORMATS[name].selectable(torch.device("cuda")) is cuda_kernels
    assert not FORMATS["native_csr"].selectable(torch.device("meta"))  # no kernels anywhere else


def test_a_plan_made_for_one_matrix_serves_another_of_its_size_class():
    """spmm_planned skips planning (a sampled layer plans once per size class) and gives spmm's values
    and gradients; its inputs are checked as spmm's are, and a format that cannot hold the matrix
    still refuses at the product."""
    g = torch.Generator().manual_seed(4)
    first, second = (Adjacency.from_edge_index(torch.randint(0, 30, (2, 90), generator=g), 30, single_use=True)
                     for _ in range(2))
    chosen = plan(first, 8, "gather_scatter")
    x = torch.randn(30, 8, requires_grad=True)
    ours = spmm_planned(second, x, chosen, reduce="mean")
    (g_ours,) = torch.autograd.grad(ours.sum(), x)
    theirs = spmm(second, x, reduce="mean", format="csr")
    (g_theirs,) = torch.autograd.grad(theirs.sum(), x)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(g_ours, g_theirs)
    with pytest.raises(ValueError, match=r"spmm: x must be \[30, F\]"):
        spmm_planned(second, torch.randn(29, 8), chosen)
    with pytest.raises(ValueError, match="spmm: reduce must be one of"):
        spmm_planned(second, x, chosen, reduce="max")


def test_a_kinds_first_build_hides_both_of_torchs_sparse_notices():
    """torch 2.11 (the CUDA 13 wheels) also says, on a process's first sparse tensor, that invariant
    checks are "implicitly disabled", whatever ``check_invariants`` the constructor is given; torch
    2.13 says neither, so the notices are raised here as torch words them. Other warnings pass."""
    import uuid

    from gnnkit.sparse.formats.base import without_beta_notice

    def build() -> int:
        warnings.warn("Sparse invariant checks are implicitly disabled. Memory errors (e.g. SEGFAULT) will "
                      "occur when operating on a sparse tensor which violates the invariants", UserWarning)
        warnings.warn("Sparse CSR tensor support is in beta state. If you miss a functionality", UserWarning)
        warnings.warn("not torch's notice", UserWarning)
        return 7

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert without_beta_notice(f"kind-{uuid.uuid4()}", build) == 7
    assert [str(w.message) for w in caught] == ["not torch's notice"]


def test_torchs_beta_layout_notice_never_reaches_the_user():
    """torch announces its beta sparse layouts once a process: the first conversion of a kind hides
    it, later ones need no filter (a fresh process, where the notice has not come yet)."""
    import subprocess
    import sys

    code = ("import warnings, torch\n"
            "from gnnkit.sparse import Adjacency, spmm\n"
            "warnings.simplefilter('error')\n"
            "for seed in range(3):\n"
            "    ei = torch.randint(0, 20, (2, 60), generator=torch.Generator().manual_seed(seed))\n"
            "    for fmt in ('csr', 'csc', 'bsr4'):\n"
            "        spmm(Adjacency.from_edge_index(ei, 20, single_use=True), torch.randn(20, 4), format=fmt)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]

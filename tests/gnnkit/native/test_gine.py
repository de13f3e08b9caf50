"""The fused GINE message sum against gather, add, ReLU and index_add (values and gradients)."""

from __future__ import annotations

import pytest
import torch

from gnnkit.native import gine

from .conftest import GRAPHS


def num_cols_of(name: str, indptr: torch.Tensor) -> int:
    return 90 if name == "rectangular" else indptr.numel() - 1


def reference(indptr: torch.Tensor, src: torch.Tensor, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
    rows = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr.diff())
    out = torch.zeros(indptr.numel() - 1, x.size(1), dtype=x.dtype)
    return out.index_add(0, rows, torch.relu(x[src] + emb))


def _inputs(graph: str, width: int, dtype: torch.dtype, types: int = 7):
    indptr, src = GRAPHS[graph]()
    g = torch.Generator().manual_seed(width)
    x = torch.randn(num_cols_of(graph, indptr), width, generator=g, dtype=dtype, requires_grad=True)
    emb = torch.randn(src.numel(), width, generator=g, dtype=dtype, requires_grad=True)
    table = torch.randn(types, width, generator=g, dtype=dtype, requires_grad=True)
    codes = torch.randint(0, types, (src.numel(),), generator=g)
    weight = torch.randn(indptr.numel() - 1, width, generator=g, dtype=dtype)
    return indptr, src, x, emb, table, codes, weight


@pytest.mark.parametrize("width", [1, 7, 16, 83, 300])
@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_values_and_gradients_match_the_unfused_ops(ext, graph, width):
    """Power-law rows with empty ones and a hub, a rectangular matrix, no entries, no nodes."""
    indptr, src, x, emb, table, codes, weight = _inputs(graph, width, torch.float64)
    m = gine.message_csr(indptr, src, x.size(0))
    for ours, expected, inputs in (
        (gine.gine_sum(m, x, emb), reference(indptr, src, x, emb), (x, emb)),
        (gine.gine_sum_coded(m, x, table, gine.edge_codes(codes, table.size(0))),
         reference(indptr, src, x, table[codes]), (x, table)),
    ):
        torch.testing.assert_close(ours, expected)
        if not expected.requires_grad:  # no entries: nothing depends on the inputs
            continue
        grads = torch.autograd.grad((ours * weight).sum(), inputs)
        torch.testing.assert_close(grads, torch.autograd.grad((expected * weight).sum(), inputs))


def test_float32_two_threads_and_one_input_without_gradient(ext):
    """float32 (the training dtype), per-thread table gradients on two threads, and each input alone."""
    indptr, src, x, emb, table, codes, weight = _inputs("powerlaw", 300, torch.float32)
    m, c = gine.message_csr(indptr, src, x.size(0)), gine.edge_codes(codes, table.size(0))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        out = gine.gine_sum_coded(m, x, table, c)
        gx, gt = torch.autograd.grad((out * weight).sum(), (x, table))
    finally:
        torch.set_num_threads(threads)
    expected = reference(indptr, src, x, table[codes])
    ex, et = torch.autograd.grad((expected * weight).sum(), (x, table))
    hub = {"rtol": 1e-4, "atol": 1e-3}  # float32 sums over the hub's hundreds of entries, in another order
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(gx, ex, **hub)
    torch.testing.assert_close(gt, et, **hub)
    (only_emb,) = torch.autograd.grad((gine.gine_sum(m, x.detach(), emb) * weight).sum(), emb)
    (ref_emb,) = torch.autograd.grad((reference(indptr, src, x.detach(), emb) * weight).sum(), emb)
    torch.testing.assert_close(only_emb, ref_emb)
    (only_x,) = torch.autograd.grad((gine.gine_sum(m, x, emb.detach()) * weight).sum(), x)
    (ref_x,) = torch.autograd.grad((reference(indptr, src, x, emb.detach()) * weight).sum(), x)
    torch.testing.assert_close(only_x, ref_x, **hub)


def test_gradcheck_of_a_small_matrix(ext):
    indptr = torch.tensor([0, 2, 2, 5, 6])
    src = torch.tensor([1, 3, 0, 0, 2, 1])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    emb = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    table = torch.randn(2, 3, generator=g, dtype=torch.float64, requires_grad=True)
    m = gine.message_csr(indptr, src, 4)
    codes = gine.edge_codes(torch.tensor([0, 1, 1, 0, 1, 1]), 2)
    assert torch.autograd.gradcheck(lambda a, b: gine.gine_sum(m, a, b), (x, emb))
    assert torch.autograd.gradcheck(lambda a, b: gine.gine_sum_coded(m, a, b, codes), (x, table))


def test_the_column_grouping_is_the_transpose():
    indptr, src = GRAPHS["rectangular"]()
    m = gine.message_csr(indptr, src, 90)
    rows = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr.diff())
    assert torch.equal(torch.sort(m.csc_slots).values, torch.arange(src.numel()))
    assert torch.equal(src[m.csc_slots], torch.repeat_interleave(torch.arange(90), m.csc_indptr.diff()))
    assert torch.equal(m.csc_rows, rows[m.csc_slots])


def test_bad_inputs_are_refused_in_one_line_before_the_kernel():
    indptr, src = torch.tensor([0, 1, 3]), torch.tensor([0, 1, 1])
    with pytest.raises(ValueError, match=r"message_csr: indices out of range"):
        gine.message_csr(indptr, torch.tensor([0, 1, 2]), 2)
    with pytest.raises(ValueError, match=r"message_csr: indptr must start at 0 and end at nnz=3"):
        gine.message_csr(torch.tensor([0, 1, 2]), src, 2)
    m = gine.message_csr(indptr, src, 2)
    x = torch.randn(2, 4)
    with pytest.raises(ValueError, match=r"gine_sum: emb must be \[3, 4\]"):
        gine.gine_sum(m, x, torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"gine_sum: x must have 2 rows"):
        gine.gine_sum(m, torch.randn(3, 4), torch.randn(3, 4))
    with pytest.raises(ValueError, match=r"gine_sum: emb must share x's dtype"):
        gine.gine_sum(m, x, torch.randn(3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"gine_sum: x must be float32/float64 on cpu, got torch.float16"):
        gine.gine_sum(m, x.half(), torch.randn(3, 4).half())
    with pytest.raises(ValueError, match=r"edge_codes: codes out of range"):
        gine.edge_codes(torch.tensor([0, 5, 1]), 5)
    with pytest.raises(ValueError, match=r"edge_codes: codes must be a 1-D int64 tensor"):
        gine.edge_codes(torch.tensor([[0, 1]]), 5)
    with pytest.raises(ValueError, match=r"gine_sum_coded: codes must have one entry per matrix entry \(3\)"):
        gine.gine_sum_coded(m, x, torch.randn(5, 4), gine.edge_codes(torch.tensor([0, 1]), 5))
    with pytest.raises(ValueError, match=r"gine_sum_coded: table must be \[5, 4\]"):
        gine.gine_sum_coded(m, x, torch.randn(4, 4), gine.edge_codes(torch.tensor([0, 1, 4]), 5))

"""Bad input to every native wrapper is refused in Python with one clear line, before any kernel
reads a pointer (a kernel reached with it could crash the process instead of raising)."""

from __future__ import annotations

import pytest
import torch

from gnnkit.native import checks, ops

I64 = torch.int64


def good_csr() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([0, 2, 3], dtype=I64), torch.tensor([0, 1, 1], dtype=I64)


@pytest.mark.parametrize("indptr, indices, message", [
    (torch.tensor([0, 2, 3], dtype=torch.int32), torch.tensor([0, 1, 1]), "indptr must be a 1-D int64"),
    (torch.tensor([0, 2, 3]), torch.tensor([[0, 1, 1]]), "indices must be a 1-D int64"),
    (torch.tensor([], dtype=I64), torch.tensor([], dtype=I64), "at least one element"),
    (torch.tensor([1, 2, 3]), torch.tensor([0, 1, 1]), "start at 0 and end at nnz=3"),
    (torch.tensor([0, 2, 4]), torch.tensor([0, 1, 1]), "end at nnz=3"),
    (torch.tensor([0, 3, 2, 3]), torch.tensor([0, 1, 1]), "non-decreasing"),
    (torch.tensor([0, 2, 3]), torch.tensor([0, 2, 1]), r"indices out of range: .*\[0, 2\)"),
    (torch.tensor([0, 2, 3]), torch.tensor([0, -1, 1]), "indices out of range"),
])
def test_malformed_csr_is_refused(indptr, indices, message):
    with pytest.raises(ValueError, match=message):
        checks.csr("spmm", indptr, indices, None, 2)


def test_values_and_devices_are_checked():
    indptr, indices = good_csr()
    with pytest.raises(ValueError, match=r"values must be a float tensor of shape \(3,\)"):
        checks.csr("spmm", indptr, indices, torch.ones(2), 2)
    with pytest.raises(ValueError, match="one device.*indptr on cpu.*indices on meta"):
        checks.csr("spmm", indptr, indices.to("meta"), None, 2)
    with pytest.raises(ValueError, match="x is on meta but the matrix on cpu"):
        checks.features("spmm", torch.ones(2, 3, device="meta"), 2, torch.device("cpu"))
    with pytest.raises(ValueError, match="x must have 2 rows"):
        checks.features("spmm", torch.ones(3, 3), 2, torch.device("cpu"))
    with pytest.raises(ValueError, match="2-D float"):
        checks.features("spmm", torch.ones(2, dtype=I64), 2, torch.device("cpu"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_features_are_refused_where_the_kernels_lack_them(ext, dtype):
    """The CPU kernels are compiled for float32/float64 only; the CUDA ones take 16-bit floats too.
    Left to the kernel's dispatch, the refusal would be a C++ throw (which took the process down on
    the GPU image's torch); the same 16-bit cores are refused for the TT kernels on both devices."""
    indptr, indices = good_csr()
    with pytest.raises(ValueError, match=f"spmm_csr: x must be float32/float64 on cpu, got {dtype}"):
        ops.spmm(indptr, indices, torch.ones(2, 3, dtype=dtype))
    with pytest.raises(ValueError, match="float32 or float64"):
        ops.tt_lookup([torch.randn(2, 1, 2, 3, dtype=dtype), torch.randn(2, 3, 2, 3, dtype=dtype),
                       torch.randn(2, 3, 2, 1, dtype=dtype)], torch.tensor([0]))
    with pytest.raises(ValueError, match="to_sell: dtype must be a float type"):
        ops.to_sell(ops.CSR(indptr, indices, None, 2), dtype=torch.int64)


def test_strided_index_arrays_reach_the_kernels_flat(ext, monkeypatch):
    """A strided view (a column of an ``[E, 2]`` edge list) is checked and then copied flat for the
    kernels: the CUDA ones refuse anything but a flat buffer, and from C++ (the CPU ones copy it)."""
    from gnnkit.sparse import Adjacency

    pairs = torch.tensor([[0, 0], [1, 0], [1, 1]])  # (column, row), rows sorted
    indptr, columns = torch.tensor([0, 2, 3]), pairs[:, 0]
    assert not columns.is_contiguous()
    adj = Adjacency(indptr, columns, num_cols=2)
    assert adj.indices.is_contiguous() and adj.indptr.is_contiguous()
    x = torch.randn(2, 3)
    torch.testing.assert_close(ops.spmm(indptr, columns, x), torch.stack([x[0] + x[1], x[1]]))
    sent, raw = [], ops._sample_raw
    monkeypatch.setattr(ops, "_sample_raw", lambda *args: sent.append(args[:2]) or raw(*args))
    ops.sample_neighbors(indptr, columns, torch.tensor([0]), [2], False, seed=0)
    assert all(t.is_contiguous() for t in sent[0])
    sell = ops.to_sell(ops.CSR(indptr, columns, None, 2))
    with pytest.raises(ValueError, match="cols must be contiguous"):
        ops.spmm_sell(sell._replace(cols=torch.stack([sell.cols, sell.cols], 1)[:, 0]), x)


def test_spmm_refuses_before_the_kernel(ext):
    indptr, indices = good_csr()
    with pytest.raises(ValueError, match="indices out of range"):
        ops.spmm(indptr, torch.tensor([0, 5, 1]), torch.randn(2, 4))
    with pytest.raises(ValueError, match="x must have 2 rows"):
        ops.spmm_csr_raw(ops.CSR(indptr, indices, None, 2), torch.randn(3, 4))
    sell = ops.to_sell(ops.CSR(indptr, indices, None, 2))
    with pytest.raises(ValueError, match="x must have 2 rows"):
        ops.spmm_sell(sell, torch.randn(5, 4))
    with pytest.raises(ValueError, match="float64"):
        ops.spmm_sell(sell, torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="chunk and sigma"):
        ops.to_sell(ops.CSR(indptr, indices, None, 2), chunk=0)
    torch.testing.assert_close(ops.spmm_sell(sell, torch.eye(2)), torch.tensor([[1.0, 1.0], [0.0, 1.0]]))


def test_a_hand_built_sell_matrix_is_checked_entry_by_entry(ext):
    """A SELL tuple not made by ``to_sell`` (``num_cols`` -1) has its layout checked before the
    kernel reads it: chunk, array sizes, chunk pointers, each row's slots, output rows, columns."""
    indptr, indices = good_csr()
    made = ops.to_sell(ops.CSR(indptr, indices, None, 2), chunk=2)
    by_hand = made._replace(num_cols=-1)
    x = torch.randn(2, 3)
    torch.testing.assert_close(ops.spmm_sell(by_hand, x), ops.spmm_sell(made, x))
    bad = {
        "chunk must be an int >= 1": by_hand._replace(chunk=0),
        "need row_len of 2 and chunk_ptr of 2": by_hand._replace(chunk_ptr=torch.tensor([0, 2, 4])),
        "vals must be 1-D with one value a slot": by_hand._replace(vals=torch.ones(1)),
        "chunk_ptr must rise from 0": by_hand._replace(chunk_ptr=torch.tensor([1, made.cols.numel()])),
        "every row's slots must lie inside its chunk": by_hand._replace(row_len=made.row_len + 1),
        "perm out of range": by_hand._replace(perm=torch.tensor([0, 2])),
        r"cols out of range: entries must lie in \[0, 2\)": by_hand._replace(cols=made.cols + 5),
    }
    for message, sell in bad.items():
        with pytest.raises(ValueError, match=message):
            ops.spmm_sell(sell, x)


def test_a_given_transpose_is_checked(ext):
    indptr, indices = good_csr()
    x = torch.randn(2, 4, requires_grad=True)
    good = ops.transpose(ops.CSR(indptr, indices, None, 2))
    ops.spmm(indptr, indices, x, transposed=good).sum().backward()
    with pytest.raises(ValueError, match=r"transposed must be A\^T \(2 rows, 3 entries\)"):
        ops.spmm(indptr, indices, x, transposed=ops.CSR(torch.tensor([0, 1]), torch.tensor([0]), None, 2))
    with pytest.raises(ValueError, match="indices out of range"):
        ops.spmm(indptr, indices, x, transposed=good._replace(indices=torch.tensor([0, 9, 1])))


def test_sampler_inputs_are_checked(ext):
    indptr, indices = good_csr()
    with pytest.raises(ValueError, match="seeds out of range"):
        ops.sample_neighbors(indptr, indices, torch.tensor([2]), [2], False, seed=0)
    with pytest.raises(ValueError, match="fan-outs must be >= -1"):
        ops.sample_neighbors(indptr, indices, torch.tensor([0]), [-2], False, seed=0)
    with pytest.raises(ValueError, match="scratch map of 2 entries"):
        ops.sample_neighbors(indptr, indices, torch.tensor([0]), [1], False, seed=0, local=torch.full((5,), -1))
    with pytest.raises(ValueError, match="indices out of range"):
        ops.sample_neighbors(indptr, torch.tensor([0, 7, 1]), torch.tensor([0]), [1], False, seed=0)


def test_tt_select_and_dropout_inputs_are_checked(ext):
    cores = [torch.randn(2, 1, 2, 3), torch.randn(2, 3, 2, 3), torch.randn(2, 3, 2, 1)]
    with pytest.raises(ValueError, match="rows out of range"):
        ops.tt_lookup(cores, torch.tensor([-1]))
    with pytest.raises(ValueError, match="ranks do not chain"):
        ops.tt_lookup([cores[0], torch.randn(2, 2, 2, 3), cores[2]], torch.tensor([0]))
    with pytest.raises(ValueError, match="share one dtype"):
        ops.tt_lookup([cores[0].double(), cores[1], cores[2]], torch.tensor([0]))
    with pytest.raises(ValueError, match="integer"):
        ops.tt_lookup(cores, torch.tensor([0.0]))
    with pytest.raises(ValueError, match="1-D float32 CPU"):
        ops.select_magnitude(torch.ones(2, 2), 0.5)
    with pytest.raises(ValueError, match="float32 CPU"):
        ops.dropout(torch.ones(4, dtype=torch.float64), 0.5, seed=0)
    with pytest.raises(ValueError, match=r"p must lie in \[0, 1\), got nan"):
        ops.dropout(torch.ones(4), float("nan"), seed=0)


def test_the_loader_hook_checks_its_graph_once(ext):
    from gnnkit.data.sampler import CSRNeighborSampler
    from torch_geometric.sampler import NodeSamplerInput

    sampler = CSRNeighborSampler(torch.tensor([0, 2, 3]), torch.tensor([0, 9, 1]), [2], seed=0)  # column 9 of 2
    with pytest.raises(ValueError, match="CSRNeighborSampler: indices out of range"):
        sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=torch.tensor([0])))

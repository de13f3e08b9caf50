"""GINE's message sum ``out[i] = sum_{e in row i} relu(x[src_e] + e_e)`` by the fused native kernel (CPU).

The edge variant of GIN's aggregation (Xu et al., "How Powerful are Graph Neural Networks?",
<https://arxiv.org/abs/1810.00826>; Hu et al., "Strategies for Pre-training Graph Neural
Networks", <https://arxiv.org/abs/1905.12265>) in one pass over the entries: gather, add, ReLU and
row sum as tensor ops would write and read back the ``[E, F]`` messages, forward and backward.
The backward pass walks the entries grouped by source (:class:`MessageCSR`), so each row of the
``x`` gradient is summed by one thread without atomics, and recomputes the ReLU mask.

Edge features come as one row per entry (:func:`gine_sum`) or coded (:func:`gine_sum_coded`):
each entry's row is a row of a small table (e.g. one row per bond type), read from cache, so the
``[E, F]`` embeddings are never written and their gradient goes straight into the table's.

The matrix (:func:`message_csr`) and the codes (:func:`edge_codes`) are checked once (O(nnz)) and
then shared by every call on the same batch; each call checks only the dense inputs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from gnnkit.native import checks
from gnnkit.native.ops import _module, column_order

#: dtypes the kernels are built for.
DTYPES = (torch.float32, torch.float64)


class MessageCSR(NamedTuple):
    """A CSR matrix ``[num_rows, num_cols]`` whose entries carry features, with the entries grouped
    by column for the backward pass (build it with :func:`message_csr`)."""

    indptr: Tensor      # int64 [num_rows + 1]
    src: Tensor         # int64 [nnz] column (source) of each entry
    csc_indptr: Tensor  # int64 [num_cols + 1] the transpose's row pointer
    csc_slots: Tensor   # int64 [nnz] the entries (CSR positions) grouped by column, CSR order within one
    csc_rows: Tensor    # int64 [nnz] the row (destination) of each of them

    @property
    def num_cols(self) -> int:
        return self.csc_indptr.numel() - 1

    @property
    def nnz(self) -> int:
        return self.src.numel()


def message_csr(indptr: Tensor, src: Tensor, num_cols: int) -> MessageCSR:
    """Checks the CSR matrix (:func:`checks.csr`, O(nnz)) and adds its column grouping (a stable sort)."""
    checks.csr("message_csr", indptr, src, None, num_cols)
    return MessageCSR(indptr, src, *column_order(indptr, src, num_cols))


class EdgeCodes(NamedTuple):
    """Each entry's row in a table of ``num_rows`` rows (build it with :func:`edge_codes`)."""

    codes: Tensor  # int64 [nnz]
    num_rows: int


def edge_codes(codes: Tensor, num_rows: int) -> EdgeCodes:
    """Checks that ``codes`` is a 1-D int64 tensor of rows in ``[0, num_rows)``."""
    checks.index_vector("edge_codes", "codes", codes)
    checks.in_range("edge_codes", "codes", codes, num_rows)
    return EdgeCodes(codes.contiguous(), int(num_rows))


def _check(op: str, m: MessageCSR, x: Tensor, name: str, rows: Tensor, num_rows: int) -> None:
    """``x [num_cols, F]`` and edge rows ``[num_rows, F]``: float32/64 CPU, one dtype, the matrix's device."""
    device = checks.same_device(op, indptr=m.indptr, src=m.src, csc_indptr=m.csc_indptr)
    checks.features(op, x, m.num_cols, device)
    checks.rows_like(op, name, rows, num_rows, x)
    if device.type != "cpu" or x.dtype not in DTYPES:
        raise ValueError(f"{op}: float32/float64 CPU tensors only, got {x.dtype} on {device}")


class _GINESum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, emb: Tensor, m: MessageCSR) -> Tensor:
        ctx.m = m
        ctx.save_for_backward(x, emb)
        return _module().gine_sum(m.indptr, m.src, x, emb)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        x, emb = ctx.saved_tensors
        m: MessageCSR = ctx.m
        need_x, need_emb = ctx.needs_input_grad[:2]
        gx, ge = _module().gine_sum_backward(m.csc_indptr, m.csc_slots, m.csc_rows, x, emb, grad.contiguous(),
                                             need_x, need_emb)
        return (gx if need_x else None), (ge if need_emb else None), None


class _GINESumCoded(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, table: Tensor, m: MessageCSR, codes: Tensor) -> Tensor:
        ctx.m, ctx.codes = m, codes
        ctx.save_for_backward(x, table)
        return _module().gine_sum_coded(m.indptr, m.src, x, table, codes)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None, None]:
        x, table = ctx.saved_tensors
        m: MessageCSR = ctx.m
        need_x, need_table = ctx.needs_input_grad[:2]
        gx, gt = _module().gine_sum_coded_backward(m.csc_indptr, m.csc_slots, m.csc_rows, x, table, ctx.codes,
                                                   grad.contiguous(), need_x, need_table)
        return (gx if need_x else None), (gt if need_table else None), None, None


def gine_sum(m: MessageCSR, x: Tensor, emb: Tensor) -> Tensor:
    """``out[i] = sum_{e in row i} relu(x[src_e] + emb_e)``, fused.

    Args:
        m: The matrix from :func:`message_csr`.
        x: ``[num_cols, F]`` float32/float64 CPU features.
        emb: ``[nnz, F]`` entry features in CSR order, of ``x``'s dtype.

    Returns:
        ``[num_rows, F]``, differentiable with respect to ``x`` and ``emb``.
    """
    _check("gine_sum", m, x, "emb", emb, m.nnz)
    return _GINESum.apply(x.contiguous(), emb.contiguous(), m)


def gine_sum_coded(m: MessageCSR, x: Tensor, table: Tensor, codes: EdgeCodes) -> Tensor:
    """``out[i] = sum_{e in row i} relu(x[src_e] + table[codes_e])``, fused.

    The table's gradient is summed in one copy per thread (tables are small: one row per edge type).

    Args:
        m: The matrix from :func:`message_csr`.
        x: ``[num_cols, F]`` float32/float64 CPU features.
        table: ``[codes.num_rows, F]`` of ``x``'s dtype.
        codes: From :func:`edge_codes`, one per entry in CSR order.

    Returns:
        ``[num_rows, F]``, differentiable with respect to ``x`` and ``table``.
    """
    _check("gine_sum_coded", m, x, "table", table, codes.num_rows)
    if codes.codes.numel() != m.nnz or codes.codes.device != m.indptr.device:
        raise ValueError(f"gine_sum_coded: codes must have one entry per matrix entry ({m.nnz}) on the matrix's "
                         f"device, got {codes.codes.numel()} on {codes.codes.device}")
    return _GINESumCoded.apply(x.contiguous(), table.contiguous(), m, codes.codes)

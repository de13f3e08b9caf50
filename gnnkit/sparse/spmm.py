"""``spmm``: the sparse-dense product ``A @ X`` with a per-call storage format and its own backward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats import FORMATS, resolve_format
from gnnkit.sparse.formats.base import check_device

REDUCTIONS = ("sum", "mean")


@dataclass(frozen=True)
class SpmmPlan:
    """The formats one :func:`spmm` call uses.

    Attributes:
        forward: Format of ``A`` for ``A @ X``.
        backward: Format of ``A^T`` for the input gradient ``A^T @ dY``.
        width: Feature width ``F`` the choice was made for.
        source: ``"selector"`` when chosen automatically, ``"forced"`` otherwise.
    """

    forward: str
    backward: str
    width: int
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"forward": self.forward, "backward": self.backward, "width": self.width, "source": self.source}


def _fixed(adj: Adjacency, name: str) -> str:
    fmt = FORMATS[resolve_format(name)]
    check_device(fmt, adj.device)
    if not fmt.applicable(adj):
        raise ValueError(f"spmm: format '{fmt.name}' cannot hold {adj}; choose another or 'auto'")
    return fmt.name


def plan(adj: Adjacency, width: int, format: str = "auto", backward_format: str | None = None,
         shared: bool = False, dtype: torch.dtype = torch.float32) -> SpmmPlan:
    """Decide the forward and backward formats of ``spmm(adj, x)`` for ``x`` of width ``width``.

    ``"auto"`` asks the selector (:func:`gnnkit.sparse.selector.choose_format`) separately for
    ``A`` and for ``A^T``; a named format is used for both passes unless ``backward_format``
    names another. The plan is cached on ``adj`` per width, dtype and request.

    Args:
        adj: The adjacency.
        width: Feature width ``F``.
        format: ``"auto"`` or a name from :data:`~gnnkit.sparse.formats.FORMATS`.
        backward_format: Format for the transpose in the backward pass (default: like ``format``).
        shared: The plan serves every single-use matrix of ``adj``'s size class
            (:class:`~gnnkit.models.sparse_conv.BatchPlans`): ``auto`` may then time formats on
            ``adj`` where no model speaks for its device (:func:`~gnnkit.sparse.decision.decide`).
        dtype: Dtype of ``x``, in which any timing multiplies.

    Returns:
        The :class:`SpmmPlan`.
    """
    backward_format = format if backward_format is None else backward_format

    def build() -> SpmmPlan:
        from gnnkit.sparse.selector import choose_format

        auto = format == "auto" or backward_format == "auto"
        fwd = choose_format(adj, width, shared=shared, dtype=dtype) if format == "auto" else _fixed(adj, format)
        bwd = (choose_format(adj, width, transpose=True, shared=shared, dtype=dtype) if backward_format == "auto"
               else _fixed(adj, backward_format))  # A^T holds the same entries as A
        return SpmmPlan(fwd, bwd, int(width), "selector" if auto else "forced")

    return adj.cached(f"plan:{width}:{format}:{backward_format}:{shared}:{dtype}", build)


def mean_scale(adj: Adjacency, dtype: torch.dtype) -> Tensor:
    """``reduce="mean"``'s row scale in ``dtype``: float64 computed in float64 (float32's reciprocal
    rounded up is 3e-8 off), the others rounded from float32's."""
    if dtype == torch.float64:
        return adj.cached("inv_row_counts:float64",
                          lambda: adj.row_counts().clamp(min=1).to(torch.float64).reciprocal_().unsqueeze(1))
    scale = adj.inv_row_counts()
    return scale if scale.dtype == dtype else scale.to(dtype)


class SpMM(torch.autograd.Function):
    """``A @ X`` (optionally row-mean scaled) whose backward multiplies by the cached ``A^T``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, adj: Adjacency, reduce: str, fwd: str, bwd: str) -> Tensor:
        out = FORMATS[fwd](adj, x)
        if reduce == "mean":
            out = out * mean_scale(adj, out.dtype)
        ctx.adj, ctx.reduce, ctx.bwd = adj, reduce, bwd
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        adj: Adjacency = ctx.adj
        if ctx.reduce == "mean":
            grad = grad * mean_scale(adj, grad.dtype)
        fmt = FORMATS[ctx.bwd]
        if fmt.transpose_free and adj.single_use:  # building A^T for one product would cost a sort
            return fmt.transposed(adj, grad), None, None, None, None
        return fmt(adj.t(), grad.contiguous()), None, None, None, None


def spmm(
    adj: Adjacency,
    x: Tensor,
    reduce: str = "sum",
    format: str = "auto",
    backward_format: str | None = None,
) -> Tensor:
    """Sparse-dense product ``A @ X`` (``reduce="sum"``) or its row mean (``reduce="mean"``).

    Every format gives the same values and gradients (up to float rounding); they differ only in
    speed, which depends on the matrix, the width and the machine. ``format="auto"`` lets the
    learned selector of Qiu, You and Wang, "Optimizing Sparse Matrix Multiplications for Graph
    Neural Networks", LCPC 2021 <https://arxiv.org/abs/2111.00352>, pick the format, separately
    for the backward pass (``A^T @ dY``). Conversions are cached on ``adj``.

    Args:
        adj: ``[N_dst, N_src]`` :class:`Adjacency`.
        x: ``[N_src, F]`` dense features.
        reduce: ``"sum"`` or ``"mean"`` (divides row ``i`` by its entry count; empty rows give 0).
        format: ``"auto"`` or a format name (see :data:`~gnnkit.sparse.formats.FORMATS`).
        backward_format: Format of ``A^T`` in the backward pass (default: as ``format``).

    Returns:
        ``[N_dst, F]`` tensor, differentiable with respect to ``x``.
    """
    _check(adj, x, reduce)
    p = plan(adj, x.size(1), format, backward_format, dtype=x.dtype)
    return SpMM.apply(x, adj, reduce, p.forward, p.backward)


def spmm_planned(adj: Adjacency, x: Tensor, chosen: SpmmPlan, reduce: str = "sum") -> Tensor:
    """:func:`spmm` in the formats of ``chosen``, a :func:`plan` made already (perhaps for another
    matrix of the same size class, see :class:`~gnnkit.models.sparse_conv.BatchPlans`): no planning
    per call. Each product still checks that its format holds ``adj`` on its device."""
    _check(adj, x, reduce)
    return SpMM.apply(x, adj, reduce, chosen.forward, chosen.backward)


def _check(adj: Adjacency, x: Tensor, reduce: str) -> None:
    """Refuse a bad reduction, matrix, shape or device mix with one line."""
    if reduce not in REDUCTIONS:
        raise ValueError(f"spmm: reduce must be one of {list(REDUCTIONS)}, got '{reduce}'")
    if not isinstance(adj, Adjacency):
        raise TypeError(f"spmm: adj must be a gnnkit.sparse.Adjacency, got {type(adj).__name__}")
    if not isinstance(x, Tensor) or not x.is_floating_point():
        got = x.dtype if isinstance(x, Tensor) else type(x).__name__
        raise TypeError(f"spmm: x must be a floating-point tensor (features), got {got}")
    if x.dim() != 2 or x.size(0) != adj.num_cols:
        raise ValueError(f"spmm: x must be [{adj.num_cols}, F] for {adj}, got {tuple(x.shape)}")
    if x.device != adj.indptr.device:
        raise ValueError(f"spmm: x is on {x.device} but the adjacency on {adj.indptr.device}")

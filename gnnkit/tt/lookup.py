r"""TT row lookups: the plain per-row contraction, the deduplicated prefix-reuse contraction, its
hand-written backward (used by the hot-row cache) and the dense reconstruction they are tested
against.

Cores follow :class:`~gnnkit.tt.config.TTConfig`'s layout ``[p_k, r_{k-1}, q_k, r_k]``. A row's
partial product after ``k`` cores, ``L_k``, is a ``[q_1 ... q_k, r_k]`` matrix; the next one is the
batched product ``L_k @ G_{k+1}[i_{k+1}]`` with the core slice viewed as ``[r_k, q_{k+1} r_{k+1}]``.
Rows that share the digit prefix ``(i_1, ..., i_k)`` share ``L_k``: :func:`prefix_plan` finds the
distinct prefixes of a sorted set of rows level by level, so :func:`contract` computes each of them
once (the reuse of TT-Rec, <https://arxiv.org/abs/2101.11714>, and of FALCON, Qiu, Xia and Wang,
IPDPS 2025, taken to every level of the tree).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class PrefixPlan:
    """The distinct digit prefixes of a sorted, duplicate-free set of rows.

    Attributes:
        digits: Per level ``k`` (0-based), the digit ``i_{k+1}`` of each distinct prefix of length
            ``k + 1``, int64 ``[M_k]``. The last level lists the rows themselves.
        parents: Per level ``k >= 1``, the position of each prefix's parent among the level
            ``k - 1`` prefixes, int64 ``[M_k]``; ``parents[0]`` is ``None``.
    """

    digits: list[Tensor]
    parents: list[Tensor | None]

    @property
    def sizes(self) -> list[int]:
        """Number of distinct prefixes per level (``M_k``)."""
        return [int(d.numel()) for d in self.digits]


def prefix_plan(rows: Tensor, p_shapes: Sequence[int]) -> PrefixPlan:
    """Distinct prefixes of ``rows`` at every level, with parent links.

    Args:
        rows: Sorted, duplicate-free row ids, int64 ``[U]``.
        p_shapes: Row factorisation ``(p_1, ..., p_d)``.

    Returns:
        The plan; its last level has ``U`` entries, in the order of ``rows``.
    """
    d = len(p_shapes)
    digits: list[Tensor | None] = [None] * d
    parents: list[Tensor | None] = [None] * d
    current = rows
    for k in range(d - 1, 0, -1):
        digits[k] = torch.remainder(current, p_shapes[k])
        prefix = torch.div(current, p_shapes[k], rounding_mode="floor")
        current, parents[k] = torch.unique_consecutive(prefix, return_inverse=True)
    digits[0] = current
    return PrefixPlan(digits, parents)  # type: ignore[arg-type]


def _slices(core: Tensor, digits: Tensor) -> Tensor:
    """Core slices ``G[i]`` viewed as ``[M, r_{k-1}, q_k r_k]``."""
    p, r_in, q, r_out = core.shape
    return core.reshape(p, r_in, q * r_out).index_select(0, digits)


def contract(cores: Sequence[Tensor], plan: PrefixPlan, keep_levels: bool = False) -> Tensor | list[Tensor]:
    """Rows of the plan's last level, each distinct prefix contracted once.

    Args:
        cores: The TT cores, ``[p_k, r_{k-1}, q_k, r_k]``.
        plan: From :func:`prefix_plan`.
        keep_levels: Return every level's partial products ``L_k`` (``[M_k, Q_k, r_k]``, ``Q_k =
            q_1 ... q_k``) instead of the rows only.

    Returns:
        ``[U, embedding_dim]`` rows, or the list of levels when ``keep_levels``.
    """
    first = cores[0]
    level = first.index_select(0, plan.digits[0]).reshape(plan.digits[0].numel(), first.shape[2], first.shape[3])
    levels = [level]
    for k in range(1, len(cores)):
        left = level.index_select(0, plan.parents[k])
        _, _, q, r = cores[k].shape
        level = torch.bmm(left, _slices(cores[k], plan.digits[k])).reshape(left.shape[0], left.shape[1] * q, r)
        levels.append(level)
    return levels if keep_levels else level.reshape(level.shape[0], level.shape[1])


def contract_backward(
    cores: Sequence[Tensor], plan: PrefixPlan, levels: Sequence[Tensor], grad: Tensor
) -> list[Tensor]:
    """Gradients of the cores for :func:`contract`, given its saved levels.

    Walks the prefix tree bottom-up: at level ``k``, ``dG_k[i] += L_{k-1}^T dL_k`` summed over the
    prefixes with digit ``i``, and ``dL_{k-1}`` sums ``dL_k G_k[i]^T`` over each prefix's children.

    Args:
        cores: The cores the levels were computed from.
        plan: The plan the levels were computed with.
        levels: ``contract(cores, plan, keep_levels=True)``.
        grad: Gradient of the rows, ``[U, embedding_dim]``.

    Returns:
        Dense gradients, one per core, shaped like the cores.
    """
    grads = [torch.zeros_like(c) for c in cores]
    d = len(cores)
    g = grad.reshape(levels[-1].shape)
    for k in range(d - 1, 0, -1):
        p, r_in, q, r_out = cores[k].shape
        g = g.reshape(g.shape[0], levels[k - 1].shape[1], q * r_out)  # [M_k, Q_{k-1}, q_k r_k]
        left = levels[k - 1].index_select(0, plan.parents[k])  # [M_k, Q_{k-1}, r_{k-1}]
        slices = _slices(cores[k], plan.digits[k])  # [M_k, r_{k-1}, q_k r_k]
        grads[k].view(p, r_in, q * r_out).index_add_(0, plan.digits[k], torch.bmm(left.transpose(1, 2), g))
        g_left = torch.bmm(g, slices.transpose(1, 2))
        g = torch.zeros_like(levels[k - 1]).index_add_(0, plan.parents[k], g_left)
    grads[0].index_add_(0, plan.digits[0], g.reshape(-1, *cores[0].shape[1:]))
    return grads


def row_digits(rows: Tensor, p_shapes: Sequence[int]) -> list[Tensor]:
    """Mixed-radix digits ``(i_1, ..., i_d)`` of every row (``i_1`` most significant)."""
    digits = []
    stride = math.prod(p_shapes)
    for p in p_shapes:
        stride //= p
        digits.append(torch.remainder(torch.div(rows, stride, rounding_mode="floor"), p))
    return digits


def lookup_plain(cores: Sequence[Tensor], rows: Tensor, p_shapes: Sequence[int]) -> Tensor:
    """The baseline TT lookup: every row contracts its own core slices (no dedup, no reuse).

    Args:
        cores: The TT cores.
        rows: Row ids, int64 ``[B]`` (any order, duplicates allowed).
        p_shapes: Row factorisation.

    Returns:
        ``[B, embedding_dim]``.
    """
    digits = row_digits(rows, p_shapes)
    first = cores[0]
    level = first.index_select(0, digits[0]).reshape(rows.numel(), first.shape[2], first.shape[3])
    for k in range(1, len(cores)):
        _, _, q, r = cores[k].shape
        level = torch.bmm(level, _slices(cores[k], digits[k])).reshape(rows.numel(), level.shape[1] * q, r)
    return level.reshape(rows.numel(), level.shape[1])


def _fused_ok(cores: Sequence[Tensor]) -> bool:
    """Whether the native fused kernel (:func:`gnnkit.native.ops.tt_lookup`) can run this lookup."""
    from gnnkit import native

    if not native.ops.tt_supported(cores) or not native.available():
        return False
    return cores[0].device.type == "cpu" or "tt_lookup_cuda" in native.kernels()


def native_tt_lookup(cores: Sequence[Tensor], rows: Tensor, prefix_reuse: bool = True) -> Tensor:
    """The fused three-core lookup, with prefix reuse or row by row (needs :func:`gnnkit.native.available`)."""
    from gnnkit import native

    return native.ops.tt_lookup(cores, rows, reuse_prefixes=prefix_reuse)


def lookup(
    cores: Sequence[Tensor], rows: Tensor, p_shapes: Sequence[int], dedup: bool = True, prefix_reuse: bool = True,
    fused: bool = True,
) -> Tensor:
    """TT lookup of ``rows`` with optional deduplication and prefix reuse.

    Args:
        cores: The TT cores.
        rows: Row ids, int64 ``[B]`` (any order, duplicates allowed, assumed in range).
        p_shapes: Row factorisation.
        dedup: Contract each distinct row once.
        prefix_reuse: Contract each distinct prefix once (implies ``dedup``). Three-core tables
            use the fused native kernel when it is built and ``fused``: with prefix reuse, or
            row by row when neither ``dedup`` nor ``prefix_reuse`` is asked for.
        fused: Allow the fused native kernel (:func:`gnnkit.native.ops.tt_lookup`); its values
            equal the Python path's up to float rounding, not bitwise.

    Returns:
        ``[B, embedding_dim]``, differentiable with respect to the cores.
    """
    if not (dedup or prefix_reuse):
        return native_tt_lookup(cores, rows, False) if fused and _fused_ok(cores) else lookup_plain(cores, rows, p_shapes)
    if prefix_reuse and fused and _fused_ok(cores):
        return native_tt_lookup(cores, rows)
    unique, inverse = torch.unique(rows, sorted=True, return_inverse=True)
    if prefix_reuse:
        values = contract(cores, prefix_plan(unique, p_shapes))
    else:
        values = lookup_plain(cores, unique, p_shapes)
    return values.index_select(0, inverse)


def full_table(cores: Sequence[Tensor], num_rows: int | None = None) -> Tensor:
    """The dense table ``[prod(p), prod(q)]`` (or its first ``num_rows`` rows), built with einsum.

    An independent reference for the lookups (and the TT-SVD round trip); memory is the full
    table's, so use it on small shapes.
    """
    acc = cores[0].squeeze(1)  # [P, Q, r]
    for core in cores[1:]:
        p, _, q, r = core.shape
        acc = torch.einsum("aqr,brsk->abqsk", acc, core).reshape(acc.shape[0] * p, acc.shape[1] * q, r)
    table = acc.squeeze(-1)
    return table if num_rows is None else table[:num_rows]

r"""Initialisation of TT cores: semi-orthogonal or Gaussian slices with exact output scaling, and
TT-SVD of a given table.

Both random inits are rescaled so the reconstructed table has mean square entry exactly 1 over all
``prod(p)`` rows, the statistics of ``nn.Embedding``'s default ``N(0, 1)`` init; the table's squared
Frobenius norm is computed from the cores in ``O(d p q r^4)`` by :func:`tt_sq_norm`, never by
materialising it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from gnnkit.tt.config import TTConfig


def tt_sq_norm(cores: Sequence[Tensor]) -> Tensor:
    r"""Squared Frobenius norm of the full table, ``sum_i ||W_i||^2``, from the cores.

    Contracts ``Z_k = sum_{i, j} G_k[i, :, j, :]^T Z_{k-1} G_k[i, :, j, :]`` with ``Z_0 = [[1]]``.
    """
    z = torch.ones(1, 1, dtype=cores[0].dtype, device=cores[0].device)
    for core in cores:
        z = torch.einsum("iajc,ab,ibjd->cd", core, z, core)
    return z.reshape(())


def _semi_orthogonal(batch: int, rows: int, cols: int, generator: torch.Generator | None) -> Tensor:
    """``batch`` random ``[rows, cols]`` matrices with orthonormal columns (or rows, if wide),
    uniformly distributed (QR with the sign of ``R``'s diagonal fixed)."""
    tall = rows >= cols
    a = torch.randn(batch, max(rows, cols), min(rows, cols), generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)
    return q if tall else q.transpose(1, 2)


def rescale_(cores: Sequence[Tensor], mean_square: float = 1.0) -> None:
    """Scale every core by the same factor so the table's mean square entry is ``mean_square``."""
    rows = math.prod(c.shape[0] for c in cores)
    dim = math.prod(c.shape[2] for c in cores)
    current = float(tt_sq_norm([c.detach().double() for c in cores])) / (rows * dim)
    if current <= 0.0:
        raise ValueError("TT init: the cores reconstruct an all-zero table; cannot rescale")
    factor = (mean_square / current) ** (1.0 / (2 * len(cores)))
    with torch.no_grad():
        for core in cores:
            core.mul_(factor)


@torch.no_grad()
def init_cores_(cores: Sequence[Tensor], method: str = "orthogonal", generator: torch.Generator | None = None) -> None:
    """Initialise cores in place.

    ``"orthogonal"`` follows the orthogonal core init of Yin et al., "Nimble GNN Embedding with
    Tensor-Train Decomposition" (KDD 2022, <https://arxiv.org/abs/2206.10581>): every slice
    ``G_k[i]``, viewed as an ``[r_{k-1} q_k, r_k]`` matrix, is a uniformly random matrix with
    orthonormal columns (orthonormal rows where it is wide), so partial products neither blow up
    nor vanish with depth. ``"normal"`` draws ``N(0, 1)`` entries (TT-Rec's Gaussian init,
    <https://arxiv.org/abs/2101.11714>). Either way the cores are then rescaled (:func:`rescale_`) to
    the output statistics of ``nn.Embedding``.

    Args:
        cores: Cores ``[p_k, r_{k-1}, q_k, r_k]``, written in place.
        method: ``"orthogonal"`` or ``"normal"``.
        generator: Random generator (default: torch's global one).
    """
    for core in cores:
        p, r_in, q, r_out = core.shape
        if method == "orthogonal":
            values = _semi_orthogonal(p, r_in * q, r_out, generator).reshape(core.shape)
        elif method == "normal":
            values = torch.randn(core.shape, generator=generator, dtype=torch.float64)
        else:
            raise ValueError(f"TT init: expected 'orthogonal' or 'normal', got {method!r}")
        core.copy_(values)
    rescale_(cores)


@torch.no_grad()
def tt_svd(table: Tensor, config: TTConfig) -> list[Tensor]:
    r"""TT cores approximating ``table`` by TT-SVD (Oseledets, "Tensor-Train Decomposition", SIAM J.
    Sci. Comput. 33(5), 2011, <https://doi.org/10.1137/090752286>).

    The ``[N, D]`` table is zero-padded to ``prod(p)`` rows, viewed as a ``d``-way tensor with modes
    ``(p_k q_k)`` and split by ``d - 1`` truncated SVDs. The error is at most the root of the summed
    squared discarded singular values; with ranks at least the table's TT ranks it is exact (up to
    rounding). Where a rank exceeds what the unfolding supports, the core is zero-padded to the
    configured rank.

    Args:
        table: ``[num_embeddings, embedding_dim]`` rows, in TT row order.
        config: The target shape and ranks.

    Returns:
        ``d`` cores ``[p_k, r_{k-1}, q_k, r_k]`` (dtype of ``table``).
    """
    n, dim = table.shape
    if n != config.num_embeddings or dim != config.embedding_dim:
        raise ValueError(
            f"tt_svd: table is [{n}, {dim}], config expects [{config.num_embeddings}, {config.embedding_dim}]"
        )
    p, q, d = config.p_shapes, config.q_shapes, config.num_cores
    work = torch.zeros(config.capacity, dim, dtype=torch.float64)
    work[:n] = table.double()
    order = [axis for k in range(d) for axis in (k, d + k)]
    rest = work.reshape(*p, *q).permute(order).reshape(-1)
    cores, r_prev = [], 1
    for k in range(d - 1):
        matrix = rest.reshape(r_prev * p[k] * q[k], -1)
        u, s, vh = torch.linalg.svd(matrix, full_matrices=False)
        r = config.ranks[k]
        keep = min(r, s.numel())
        core = torch.zeros(r_prev * p[k] * q[k], r, dtype=torch.float64)
        core[:, :keep] = u[:, :keep]
        cores.append(core.reshape(r_prev, p[k], q[k], r).permute(1, 0, 2, 3).contiguous())
        rest = torch.zeros(r, vh.shape[1], dtype=torch.float64)
        rest[:keep] = s[:keep, None] * vh[:keep]
        r_prev = r
    cores.append(rest.reshape(r_prev, p[-1], q[-1], 1).permute(1, 0, 2, 3).contiguous())
    return [c.to(table.dtype) for c in cores]

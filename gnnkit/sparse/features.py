"""The O(nnz) matrix features the format selector reads.

The features of Qiu, You and Wang, "Optimizing Sparse Matrix Multiplications for Graph Neural
Networks", LCPC 2021 <https://arxiv.org/abs/2111.00352> (Table 2): sizes, nnz, density, per-row
and per-column entry counts (min, mean, max, std, coefficient of variation, max minus mean),
number of diagonals and DIA fill, ELL fill, row and column "bounce" (mean absolute change of the
entry count between neighbouring rows/columns), plus the empty-row/column fractions, a locality
measure (mean ``|row - col|``), the dense feature width and the thread count (0 for a GPU product).

Everything is one pass of vectorised bincounts over the entries: O(nnz + rows + cols).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from gnnkit.sparse.adjacency import Adjacency

#: Order of the selector's input vector (:func:`feature_vector`).
FEATURE_NAMES: tuple[str, ...] = (
    "n_rows", "n_cols", "nnz", "density",
    "row_min", "row_mean", "row_max", "row_std", "row_cv", "row_max_minus_mean", "row_bounce", "row_empty",
    "col_min", "col_mean", "col_max", "col_std", "col_cv", "col_max_minus_mean", "col_bounce", "col_empty",
    "n_diags", "dia_fill", "ell_fill", "locality",
    "width", "threads",
)

_SIDE = ("min", "mean", "max", "std", "cv", "max_minus_mean", "bounce", "empty")


def _count_stats(counts: Tensor) -> dict[str, float]:
    """Statistics of a vector of entry counts (rows or columns)."""
    if counts.numel() == 0:
        return dict.fromkeys(_SIDE, 0.0)
    c = counts.to(torch.float64)
    mean = float(c.mean())
    std = float(c.std(unbiased=False))
    top = float(c.max())
    return {
        "min": float(c.min()),
        "mean": mean,
        "max": top,
        "std": std,
        "cv": std / mean if mean > 0 else 0.0,
        "max_minus_mean": top - mean,
        "bounce": float(c.diff().abs().mean()) if c.numel() > 1 else 0.0,
        "empty": float((counts == 0).to(torch.float64).mean()),
    }


def matrix_features(adj: Adjacency) -> dict[str, float]:
    """The width-independent features of ``adj`` (cached on it).

    Returns:
        ``{name: value}`` for every name of :data:`FEATURE_NAMES` except ``width`` and ``threads``.
    """
    def build() -> dict[str, float]:
        n_rows, n_cols, nnz = adj.num_rows, adj.num_cols, adj.nnz
        rows = _count_stats(adj.row_counts())
        cols = _count_stats(torch.bincount(adj.indices, minlength=n_cols))
        if nnz:
            offset = adj.indices - adj.rows()  # diagonal of each entry, in [-(n_rows-1), n_cols-1]
            n_diags = int((torch.bincount(offset + (n_rows - 1), minlength=n_rows + n_cols - 1) > 0).sum())
            locality = float(offset.abs().to(torch.float64).mean()) / max(n_rows, n_cols)
        else:
            n_diags, locality = 0, 0.0
        feats = {
            "n_rows": float(n_rows), "n_cols": float(n_cols), "nnz": float(nnz),
            "density": nnz / (n_rows * n_cols) if n_rows and n_cols else 0.0,
            **{f"row_{k}": v for k, v in rows.items()},
            **{f"col_{k}": v for k, v in cols.items()},
            "n_diags": float(n_diags), "locality": locality,
        }
        return _with_fills(feats)

    return adj.cached("features", build)


def _with_fills(f: dict[str, float]) -> dict[str, float]:
    """Add the DIA and ELL fill ratios (stored entries / slots of that format) for ``f``'s orientation."""
    dia_slots = f["n_diags"] * f["n_rows"]
    ell_slots = f["row_max"] * f["n_rows"]
    return {**f, "dia_fill": f["nnz"] / dia_slots if dia_slots else 0.0,
            "ell_fill": f["nnz"] / ell_slots if ell_slots else 0.0}


def transposed_features(feats: dict[str, float]) -> dict[str, float]:
    """The features of ``A^T`` from those of ``A`` (rows and columns swap; no pass over the data)."""
    out = dict(feats)
    out["n_rows"], out["n_cols"] = feats["n_cols"], feats["n_rows"]
    for k in _SIDE:
        out[f"row_{k}"], out[f"col_{k}"] = feats[f"col_{k}"], feats[f"row_{k}"]
    return _with_fills(out)


def threads_feature(device_kind: str, threads: int | None = None) -> int:
    """The ``threads`` feature of a product on a device kind: the intra-op CPU threads on the CPU
    (default ``torch.get_num_threads()``), 0 on a GPU, whose products the host's thread count does
    not drive (so a GPU model labelled on a 16-core machine reads the same value on a 4-core one)."""
    if device_kind != "cpu":
        return 0
    return torch.get_num_threads() if threads is None else int(threads)


def feature_vector(feats: dict[str, float], width: int, threads: int | None = None) -> np.ndarray:
    """The selector's float64 input vector in :data:`FEATURE_NAMES` order.

    Args:
        feats: :func:`matrix_features` (or :func:`transposed_features`) output.
        width: Dense feature width ``F``.
        threads: Intra-op threads (default: ``torch.get_num_threads()``).
    """
    full = {**feats, "width": float(width),
            "threads": float(torch.get_num_threads() if threads is None else threads)}
    vec = np.array([full[name] for name in FEATURE_NAMES], dtype=np.float64)
    if not np.isfinite(vec).all():
        raise ValueError(f"matrix features must be finite, got {dict(zip(FEATURE_NAMES, vec))}")
    return vec


def describe(feats: dict[str, float]) -> str:
    """One line per feature, for ``gnnkit formats explain``."""
    def fmt(v: float) -> str:
        return f"{v:,.0f}" if v == math.floor(v) and abs(v) < 1e15 else f"{v:.4g}"
    return "\n".join(f"  {name:20s} {fmt(feats[name])}" for name in FEATURE_NAMES if name in feats)

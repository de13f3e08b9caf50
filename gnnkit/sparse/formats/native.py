"""gnnkit's native SpMM kernels as formats: ``native_csr`` and ``native_sell`` (see :mod:`gnnkit.native`).

Both always hold any matrix. When the native build is unavailable (disabled with
``GNNKIT_NATIVE=0``, or no compiler) they compute the same product with torch's CSR kernel, so a
forced format keeps working; the selector considers them only when the build is present
(:meth:`NativeCSRFormat.selectable`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from gnnkit import native
from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats.base import SpmmFormat, register, weights_as, without_beta_notice
from gnnkit.sparse.formats.csr import csr_tensor


def _fallback(adj: Adjacency, x: Tensor) -> Tensor:
    """Pure-PyTorch ``A @ x`` (torch CSR) when the native kernels are unavailable."""
    def build() -> Tensor:
        return without_beta_notice("csr", lambda: csr_tensor(adj, x.dtype))
    return torch.sparse.mm(adj.cached(f"native_fallback:{x.dtype}", build), x)


def _built_for(device: torch.device | None) -> bool:
    """Whether the native build has kernels for ``device`` (the CPU's, or CUDA's when compiled in;
    elsewhere the formats run torch's CSR, which the selector must not mistake for them)."""
    return native.available() and (device is None or device.type == "cpu"
                                   or (device.type == "cuda" and "spmm_csr_cuda" in native.kernels()))


class _NativeFormat(SpmmFormat):
    """What the native formats share: where their kernels are built, and 16-bit values only on CUDA."""

    narrow_on = ("cuda",)  # the CPU kernels take float32/float64

    def selectable(self, device: torch.device | None = None) -> bool:
        """Whether the selector may pick this format: only where its kernels are built."""
        return _built_for(device)


@register("native_csr")
class NativeCSRFormat(_NativeFormat):
    """Native CSR kernel: nnz-balanced row split over threads, vectorised over the feature width
    (GE-SpMM's row split, <https://arxiv.org/abs/2007.03179>)."""

    conversion_free = True

    def convert(self, adj: Adjacency, dtype: torch.dtype) -> Tensor | None:
        return None if adj.values is None else weights_as(adj, dtype).contiguous()

    def multiply(self, state: Tensor | None, adj: Adjacency, x: Tensor) -> Tensor:
        if not _built_for(x.device):
            return _fallback(adj, x)
        return native.ops.spmm_csr_raw(native.ops.CSR(adj.indptr, adj.indices, state, adj.num_cols), x)


@register("native_sell")
class NativeSELLFormat(_NativeFormat):
    """Native SELL-C-sigma kernel: rows sorted by length in windows, packed in padded column-major
    chunks, for skewed degree distributions (Kreutzer et al., <https://arxiv.org/abs/1307.6209>)."""

    def convert(self, adj: Adjacency, dtype: torch.dtype) -> Any:
        if not native.available():
            return None
        values = None if adj.values is None else weights_as(adj, dtype)
        return native.ops.to_sell(native.ops.CSR(adj.indptr, adj.indices, values, adj.num_cols), dtype)

    def multiply(self, state: Any, adj: Adjacency, x: Tensor) -> Tensor:
        if state is None or not _built_for(x.device):
            return _fallback(adj, x)
        return native.ops.spmm_sell(state, x)

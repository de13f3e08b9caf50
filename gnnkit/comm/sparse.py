"""Top-k selection and (value, index) pairs packed into one float32 tensor."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gnnkit import native
from gnnkit.native import ops as native_ops


def topk_count(numel: int, density: float) -> int:
    """How many elements a top-k at ``density`` keeps of ``numel`` (at least one of a non-empty)."""
    if numel == 0:
        return 0
    return min(numel, max(1, math.ceil(density * numel)))


#: Inputs at least this long use the sampled-threshold fast path of :func:`topk_indices`.
FAST_TOPK_MIN = 1 << 16
_SAMPLE = 1 << 16


def topk_indices(x: Tensor, k: int, scratch: Tensor | None = None) -> Tensor:
    """Indices (int64) of ``k`` largest-magnitude elements of 1-D ``x``; all of them, in order,
    when ``k == numel`` (so density 1.0 is exactly dense).

    Exact, but faster than ``torch.topk`` on long CPU tensors: a strided sample of ``|x|`` gives a
    threshold that about ``2k`` elements pass; ``torch.topk`` then runs on those candidates only.
    The candidates come from one pass of the native ``select_magnitude`` kernel on float32 CPU
    tensors when it is built, else from PyTorch ops. If fewer than ``k`` pass (an unlucky sample),
    it falls back to ``torch.topk`` on all of ``x``. Among equal magnitudes the choice may differ
    from ``torch.topk``'s; the selected magnitudes do not.

    Args:
        x: 1-D values.
        k: How many to select.
        scratch: Optional float tensor of at least ``x.numel()`` elements to hold ``|x|`` (saves a
            gradient-sized allocation per call when the caller keeps one across steps).
    """
    n = x.numel()
    if k >= n:
        return torch.arange(n, device=x.device)
    if n >= FAST_TOPK_MIN and 8 * k < n:
        stride = max(1, n // _SAMPLE)
        sample = x[::stride].abs()
        rank = min(sample.numel(), 2 * k * sample.numel() // n + 8)
        threshold = torch.topk(sample, rank, sorted=True).values[-1]
        indices, magnitude = _candidates(x, threshold, scratch)
        if indices.numel() >= k:
            return indices[torch.topk(magnitude, k, sorted=False).indices]
    return torch.topk(_magnitude(x, scratch), k, sorted=False).indices


def _magnitude(x: Tensor, scratch: Tensor | None) -> Tensor:
    """``|x|``, written into ``scratch`` when one is given."""
    return torch.abs(x, out=scratch[:x.numel()]) if scratch is not None else x.abs()


def _candidates(x: Tensor, threshold: Tensor, scratch: Tensor | None) -> tuple[Tensor, Tensor]:
    """Indices and magnitudes of the elements of ``x`` with ``|x| >= threshold``."""
    if x.device.type == "cpu" and x.dtype == torch.float32 and native.available():
        indices, values = native_ops.select_magnitude(x, float(threshold))
        return indices, values.abs()
    magnitude = _magnitude(x, scratch)
    indices = (magnitude >= threshold).nonzero().flatten()
    return indices, magnitude[indices]


def scratch_of(flat: Tensor) -> Tensor | None:
    """``flat`` as scratch space once a compressor has copied its values out (float32, 1-D), else
    None. Compressors use it for ``|x|`` during selection and then for the result (see
    :func:`reusable_output`), so a step allocates nothing gradient-sized."""
    return flat if flat.dtype == torch.float32 and flat.dim() == 1 else None


def reusable_output(flat: Tensor) -> Tensor:
    """A zeroed float32 tensor shaped like ``flat`` for the averaged result: ``flat`` itself when it
    is float32 (a compressor has copied what it needs out of it by then; zeroing in place avoids a
    gradient-sized allocation per step), else a new one."""
    if scratch_of(flat) is not None:
        return flat.zero_()
    return torch.zeros(flat.numel(), dtype=torch.float32, device=flat.device)


def pack(values: Tensor, indices: Tensor) -> Tensor:
    """``[values | indices]`` as one float32 tensor of length ``2k``: the int32 indices travel as
    their raw bits (a float32 view), so one collective carries both.

    Args:
        values: ``[k]`` float values (cast to float32).
        indices: ``[k]`` integer indices, ``< 2**31``.
    """
    return torch.cat([values.to(torch.float32), indices.to(torch.int32).view(torch.float32)])


def unpack(packed: Tensor) -> tuple[Tensor, Tensor]:
    """Inverse of :func:`pack` on ``[..., 2k]``: values ``[..., k]`` and int64 indices ``[..., k]``."""
    k = packed.shape[-1] // 2
    values = packed[..., :k]
    indices = packed[..., k:].contiguous().view(torch.int32).to(torch.int64)
    return values, indices

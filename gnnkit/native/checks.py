"""Input checks run in Python before any native kernel sees its arguments.

The kernels index raw pointers: an out-of-range column, a CUDA tensor beside a CPU one, or a
wrong dtype would read outside an allocation and take the whole process down (and a C++ check
that throws is only as safe as the build's exception ABI). Every public wrapper in
:mod:`gnnkit.native.ops` therefore calls one of these first; each raises :class:`ValueError` with
one line naming the argument and what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


def _fail(op: str, message: str) -> None:
    raise ValueError(f"{op}: {message}")


def same_device(op: str, **tensors: Tensor | None) -> torch.device:
    """The one device of the given tensors (``None`` entries ignored); refuses a mix."""
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name} on {device}" for name, device in devices.items())
        _fail(op, f"all tensors must be on one device, got {listing}")
    return next(iter(devices.values()))


def index_vector(op: str, name: str, t: Tensor) -> None:
    """``t`` is a 1-D int64 tensor."""
    if not isinstance(t, Tensor) or t.dim() != 1 or t.dtype != torch.int64:
        got = f"{t.dtype} of shape {tuple(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
        _fail(op, f"{name} must be a 1-D int64 tensor, got {got}")


def bounds(t: Tensor) -> tuple[int, int]:
    """The smallest and largest entry of a non-empty integer tensor, read in one host sync."""
    low, high = torch.stack(torch.aminmax(t)).tolist()
    return low, high


def in_range(op: str, name: str, t: Tensor, upper: int) -> None:
    """Every entry of ``t`` lies in ``[0, upper)`` (one host sync on a GPU)."""
    if t.numel():
        low, high = bounds(t)
        if low < 0 or high >= upper:
            _fail(op, f"{name} out of range: entries must lie in [0, {upper}), got {low}..{high}")


def csr(op: str, indptr: Tensor, indices: Tensor, values: Tensor | None, num_cols: int) -> None:
    """A well-formed CSR matrix: int64 arrays on one device, ``indptr`` from 0 to nnz and
    non-decreasing, columns in ``[0, num_cols)``, one value per entry (O(nnz))."""
    index_vector(op, "indptr", indptr)
    index_vector(op, "indices", indices)
    same_device(op, indptr=indptr, indices=indices, values=values)
    if indptr.numel() < 1:
        _fail(op, "indptr must have at least one element (num_rows + 1)")
    nnz = indices.numel()
    if int(indptr[0]) != 0 or int(indptr[-1]) != nnz:
        _fail(op, f"indptr must start at 0 and end at nnz={nnz}, got {int(indptr[0])}..{int(indptr[-1])}")
    if indptr.numel() > 1 and bool((indptr.diff() < 0).any()):
        _fail(op, "indptr must be non-decreasing")
    in_range(op, "indices", indices, num_cols)
    if values is not None and (values.dim() != 1 or values.numel() != nnz or not values.is_floating_point()):
        _fail(op, f"values must be a float tensor of shape ({nnz},), got {values.dtype} {tuple(values.shape)}")


def sell(op: str, s: Any, x_rows: int) -> None:
    """A SELL-C-sigma matrix (:class:`gnnkit.native.ops.SELL`) the kernels can read against ``x_rows``
    feature rows: its array sizes always (no sync); with ``num_cols < 0`` (a matrix not made by
    :func:`~gnnkit.native.ops.to_sell`) also its entries (O(nnz)): chunk pointers from 0 to the
    slots, every row's slots inside its chunk, output rows and columns in range."""
    for name in ("chunk_ptr", "perm", "row_len", "cols"):
        index_vector(op, name, getattr(s, name))
    for name in ("chunk_ptr", "perm", "row_len", "cols", "vals"):
        if isinstance(getattr(s, name), Tensor) and not getattr(s, name).is_contiguous():
            _fail(op, f"{name} must be contiguous (as to_sell makes it)")
    if not isinstance(s.chunk, int) or s.chunk < 1:
        _fail(op, f"chunk must be an int >= 1, got {s.chunk!r}")
    rows, slots = s.perm.numel(), s.cols.numel()
    chunks = -(-rows // s.chunk)
    if s.row_len.numel() != rows or s.chunk_ptr.numel() != chunks + 1:
        _fail(op, f"{rows} rows in chunks of {s.chunk} need row_len of {rows} and chunk_ptr of {chunks + 1} "
                  f"entries, got {s.row_len.numel()} and {s.chunk_ptr.numel()}")
    if s.vals.dim() != 1 or s.vals.numel() != slots:
        _fail(op, f"vals must be 1-D with one value a slot ({slots}), got {tuple(s.vals.shape)}")
    if s.num_cols >= 0:
        return
    ptr = s.chunk_ptr
    if int(ptr[0]) != 0 or int(ptr[-1]) != slots or bool((ptr.diff() < 0).any()):
        _fail(op, f"chunk_ptr must rise from 0 to the {slots} slots")
    t = torch.arange(rows, device=ptr.device)
    last = ptr[t // s.chunk] + t % s.chunk + (s.row_len - 1) * s.chunk
    if bool((s.row_len < 0).any()) or bool(((s.row_len > 0) & (last >= ptr[t // s.chunk + 1])).any()):
        _fail(op, "row_len: every row's slots must lie inside its chunk")
    in_range(op, "perm", s.perm, rows)
    in_range(op, "cols", s.cols, x_rows)


#: The feature dtypes the SpMM kernels are compiled for, by device type (the CPU kernels take
#: float32/float64; the CUDA ones also 16-bit floats, summed in float32).
KERNEL_DTYPES = {"cpu": (torch.float32, torch.float64),
                 "cuda": (torch.float32, torch.float64, torch.float16, torch.bfloat16)}


def features(op: str, x: Tensor, rows: int, device: torch.device) -> None:
    """``x`` is a 2-D float ``[rows, F]`` tensor on ``device``, of a dtype its kernels take
    (:data:`KERNEL_DTYPES`; the kernel's own dispatch would throw from C++)."""
    if not isinstance(x, Tensor) or x.dim() != 2 or not x.is_floating_point():
        _fail(op, f"x must be a 2-D float tensor, got {x.dtype if isinstance(x, Tensor) else type(x).__name__}"
                  f"{'' if not isinstance(x, Tensor) else ' of shape ' + str(tuple(x.shape))}")
    if x.size(0) != rows:
        _fail(op, f"x must have {rows} rows (the matrix's columns), got {x.size(0)}")
    if x.device != device:
        _fail(op, f"x is on {x.device} but the matrix on {device}")
    allowed = KERNEL_DTYPES.get(device.type, KERNEL_DTYPES["cpu"])
    if x.dtype not in allowed:
        _fail(op, f"x must be {'/'.join(str(d).removeprefix('torch.') for d in allowed)} on {device.type}, "
                  f"got {x.dtype}")


def rows_like(op: str, name: str, t: Tensor, rows: int, x: Tensor) -> None:
    """``t`` is ``[rows, F]`` with ``x``'s width, dtype and device (e.g. one feature row per matrix entry)."""
    if not isinstance(t, Tensor) or t.dim() != 2 or t.shape != (rows, x.size(1)):
        got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
        _fail(op, f"{name} must be [{rows}, {x.size(1)}] (x's width), got {got}")
    if t.dtype != x.dtype or t.device != x.device:
        _fail(op, f"{name} must share x's dtype and device ({x.dtype} on {x.device}), got {t.dtype} on {t.device}")


def sampler_inputs(op: str, indptr: Tensor, indices: Tensor, seeds: Tensor, fanouts: Sequence[int],
                   local: Tensor) -> None:
    """A valid graph, seeds in range, fan-outs >= -1 and a scratch map of one int entry a node."""
    num_nodes = indptr.numel() - 1
    csr(op, indptr, indices, None, max(num_nodes, 0))
    index_vector(op, "seeds", seeds)
    same_device(op, indptr=indptr, seeds=seeds, local=local)
    in_range(op, "seeds", seeds, num_nodes)
    if any(int(k) < -1 for k in fanouts):
        _fail(op, f"fan-outs must be >= -1 (-1: all neighbours), got {list(fanouts)}")
    if local.dim() != 1 or local.numel() != num_nodes or local.dtype not in (torch.int32, torch.int64) or (
            not local.is_contiguous()):
        _fail(op, f"local must be a contiguous int32/int64 scratch map of {num_nodes} entries, "
                  f"got {local.dtype} {tuple(local.shape)}")


def tt_inputs(op: str, cores: Sequence[Tensor], rows: Tensor) -> None:
    """Three 4-D float cores ``[p, r_in, q, r_out]`` with matching ranks, one dtype and device, and
    rows of the table in range on that device."""
    if len(cores) != 3 or any(not isinstance(c, Tensor) or c.dim() != 4 or not c.is_floating_point() for c in cores):
        _fail(op, "needs exactly three 4-D float cores [p, r_in, q, r_out]")
    c0, c1, c2 = cores
    if len({c.dtype for c in cores}) != 1 or c0.dtype not in (torch.float32, torch.float64):
        _fail(op, f"cores must share one dtype, float32 or float64 (the kernels' on either device), "
                  f"got {[str(c.dtype) for c in cores]}")
    if c0.size(1) != 1 or c2.size(3) != 1 or c0.size(3) != c1.size(1) or c1.size(3) != c2.size(1):
        _fail(op, f"TT ranks do not chain: core shapes {[tuple(c.shape) for c in cores]}")
    if rows.dtype not in (torch.int32, torch.int64):
        _fail(op, f"rows must be an integer tensor, got {rows.dtype}")
    same_device(op, core0=c0, core1=c1, core2=c2, rows=rows)
    in_range(op, "rows", rows, c0.size(0) * c1.size(0) * c2.size(0))


def cpu_float32(op: str, x: Tensor, vector: bool = False) -> None:
    """``x`` is a float32 CPU tensor (1-D with ``vector``)."""
    if not isinstance(x, Tensor) or x.dtype != torch.float32 or x.device.type != "cpu" or (vector and x.dim() != 1):
        got = f"{x.dtype} {tuple(x.shape)} on {x.device}" if isinstance(x, Tensor) else type(x).__name__
        _fail(op, f"x must be a {'1-D ' if vector else ''}float32 CPU tensor, got {got}")


def probability(op: str, p: float) -> None:
    """``p`` lies in ``[0, 1)``."""
    if not 0.0 <= p < 1.0:  # also refuses NaN
        _fail(op, f"p must lie in [0, 1), got {p}")

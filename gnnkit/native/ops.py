"""Thin, autograd-aware wrappers of the native kernels; each one needs :func:`~gnnkit.native.available`.

* :func:`spmm` / :func:`spmm_sell`: ``A @ X`` (sum or row mean) over CSR or SELL-C-sigma, with the
  backward pass multiplying by the transpose;
* :func:`sample_neighbors`: one multi-hop uniform neighbour sample;
* :func:`sample_rows` / :func:`relabel`: one hop over given rows, and the numbering of the nodes it
  reached (the partitioned sampler's steps);
* :func:`tt_lookup`: the fused three-core TT lookup and its gradients;
* :func:`select_magnitude`: the elements of a gradient at or above a magnitude threshold;
* :func:`dropout`: inverted dropout whose mask is a function of a seed (regenerated for backward).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from gnnkit.native import checks
from gnnkit.native.loader import get, kernels

#: SELL-C-sigma defaults: chunks of C rows (a CPU cache line of float32 row pointers, a warp's
#: quarter on GPU) and sorting windows of sigma rows (Kreutzer et al., arXiv 1307.6209).
SELL_C = 8
SELL_SIGMA = 256


def _module() -> Any:
    module = get()
    if module is None:
        raise RuntimeError("gnnkit native kernels are not available (disabled or not built); check gnnkit.native.available()")
    return module


# -- SpMM -------------------------------------------------------------------------------------------
class CSR(NamedTuple):
    """A CSR matrix ``[num_rows, num_cols]`` as the kernels take it (``values`` None: all ones)."""

    indptr: Tensor
    indices: Tensor
    values: Tensor | None
    num_cols: int


def column_order(indptr: Tensor, indices: Tensor, num_cols: int) -> tuple[Tensor, Tensor, Tensor]:
    """A CSR matrix's entries grouped by column, stably (row order within a column): the transpose's
    row pointer ``[num_cols + 1]``, the entries' CSR positions in that order, and their rows."""
    rows = torch.repeat_interleave(torch.arange(indptr.numel() - 1, device=indptr.device), indptr.diff(),
                                   output_size=indices.numel())
    order = torch.argsort(indices, stable=True)
    t_indptr = torch.zeros(num_cols + 1, dtype=torch.int64, device=indptr.device)
    torch.cumsum(torch.bincount(indices, minlength=num_cols), 0, out=t_indptr[1:])
    return t_indptr, order, rows[order]


def transpose(a: CSR) -> CSR:
    """``A^T`` in CSR form (stable: entries of a row keep their order)."""
    indptr, order, rows = column_order(a.indptr, a.indices, a.num_cols)
    values = None if a.values is None else a.values[order]
    return CSR(indptr, rows.contiguous(), values, a.indptr.numel() - 1)


def contiguous_csr(a: CSR) -> CSR:
    """``a`` with flat arrays (the kernels read raw buffers; a strided view is copied once)."""
    values = None if a.values is None else a.values.contiguous()
    return CSR(a.indptr.contiguous(), a.indices.contiguous(), values, a.num_cols)


def spmm_csr_raw(a: CSR, x: Tensor, mean: bool = False) -> Tensor:
    """``A @ x`` (row mean with ``mean``) by the native CSR kernel, no autograd.

    ``a`` must be a valid CSR matrix (:func:`checks.csr`; an :class:`~gnnkit.sparse.Adjacency` is
    checked when built): only the cheap checks of ``x`` and the devices run here, per call.
    """
    device = checks.same_device("spmm_csr", indptr=a.indptr, indices=a.indices, values=a.values)
    checks.features("spmm_csr", x, a.num_cols, device)
    return _module().spmm_csr(a.indptr, a.indices, a.values, x, mean)


class _CSRSpmm(torch.autograd.Function):
    """``A @ X`` whose gradient is ``A^T @ dY`` (row-scaled first for the mean)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, a: CSR, at: CSR | None, mean: bool) -> Tensor:
        ctx.a, ctx.at, ctx.mean = a, at, mean
        return spmm_csr_raw(a, x, mean)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        a: CSR = ctx.a
        if ctx.mean:
            grad = grad / a.indptr.diff().clamp(min=1).to(grad.dtype).unsqueeze(1)
        at = ctx.at if ctx.at is not None else transpose(a)
        return spmm_csr_raw(at, grad.contiguous()), None, None, None


def spmm(indptr: Tensor, indices: Tensor, x: Tensor, values: Tensor | None = None, reduce: str = "sum",
         transposed: CSR | None = None) -> Tensor:
    """``A @ x`` (``reduce="sum"``) or its row mean (``"mean"``) by the native CSR kernel.

    Rows are split across threads by entry count (GE-SpMM's row split,
    <https://arxiv.org/abs/2007.03179>); the feature width is the vectorised inner loop. The
    backward pass multiplies by the transpose (``transposed``, or built per call).

    Args:
        indptr: int64 ``[num_rows + 1]``.
        indices: int64 ``[nnz]`` columns.
        x: ``[num_cols, F]`` float features.
        values: Optional ``[nnz]`` weights (constants: no gradient).
        reduce: ``"sum"`` or ``"mean"``.
        transposed: ``A^T`` from :func:`transpose`, to reuse across calls.

    Returns:
        ``[num_rows, F]``, differentiable with respect to ``x``.
    """
    if reduce not in ("sum", "mean"):
        raise ValueError(f"reduce must be 'sum' or 'mean', got {reduce!r}")
    a = CSR(indptr, indices, values, x.size(0) if isinstance(x, Tensor) and x.dim() == 2 else 0)
    checks.csr("spmm", *a)
    a = contiguous_csr(a)
    if transposed is not None:  # A^T: a row per column of A, A's rows as its columns
        if transposed.indptr.numel() - 1 != a.num_cols or transposed.indices.numel() != indices.numel():
            raise ValueError(f"spmm: transposed must be A^T ({a.num_cols} rows, {indices.numel()} entries), got "
                             f"{transposed.indptr.numel() - 1} rows and {transposed.indices.numel()} entries")
        checks.csr("spmm", transposed.indptr, transposed.indices, transposed.values, indptr.numel() - 1)
        transposed = contiguous_csr(transposed)
    return _CSRSpmm.apply(x, a, transposed, reduce == "mean")


class SELL(NamedTuple):
    """A SELL-C-sigma matrix (see :func:`to_sell`)."""

    chunk_ptr: Tensor
    perm: Tensor
    row_len: Tensor
    cols: Tensor
    vals: Tensor
    chunk: int
    num_cols: int = -1  # columns of the matrix (the rows ``x`` must have); -1: unknown, entries checked per call


def to_sell(a: CSR, dtype: torch.dtype = torch.float32, chunk: int = SELL_C, sigma: int = SELL_SIGMA) -> SELL:
    """SELL-C-sigma form of ``a`` (Kreutzer et al., <https://arxiv.org/abs/1307.6209>): rows sorted
    by length within windows of ``sigma``, chunks of ``chunk`` rows stored column-major and padded."""
    checks.csr("to_sell", *a)
    if dtype not in checks.KERNEL_DTYPES["cuda"]:
        raise ValueError(f"to_sell: dtype must be a float type the kernels take, got {dtype}")
    if chunk < 1 or sigma < 1:
        raise ValueError(f"to_sell: chunk and sigma must be >= 1, got {chunk} and {sigma}")
    narrow = dtype in (torch.float16, torch.bfloat16)  # built in float32 (the CPU builder's types), then rounded
    chunk_ptr, perm, row_len, cols, vals = _module().sell_from_csr(a.indptr, a.indices, a.values, chunk, sigma,
                                                                   torch.float32 if narrow else dtype)
    device = a.indptr.device
    parts = (chunk_ptr, perm, row_len, cols, vals.to(dtype))
    return SELL(*(p.to(device) for p in parts), chunk, a.num_cols)


def spmm_sell(s: SELL, x: Tensor, mean: bool = False) -> Tensor:
    """``A @ x`` (row mean with ``mean``) over a SELL-C-sigma matrix from :func:`to_sell`, no autograd."""
    device = checks.same_device("spmm_sell", chunk_ptr=s.chunk_ptr, perm=s.perm, row_len=s.row_len, cols=s.cols,
                                vals=s.vals)
    checks.features("spmm_sell", x, s.num_cols if s.num_cols >= 0 else x.size(0), device)
    checks.sell("spmm_sell", s, x.size(0))
    if s.vals.dtype != x.dtype:
        raise ValueError(f"spmm_sell: the matrix holds {s.vals.dtype} values but x is {x.dtype}")
    return _module().spmm_sell(s.chunk_ptr, s.perm, s.row_len, s.cols, s.vals, x, s.chunk, mean)


# -- sampling ---------------------------------------------------------------------------------------
def sample_neighbors(indptr: Tensor, indices: Tensor, seeds: Tensor, fanouts: Sequence[int], replace: bool,
                     seed: int, local: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor, list[int], list[int]]:
    """Uniform multi-hop sample in the layout of :class:`gnnkit.data.sampler.CSRNeighborSampler`.

    Args:
        indptr: int64 ``[num_nodes + 1]`` (rows = destinations).
        indices: int64 ``[num_edges]`` sources.
        seeds: int64 ``[B]`` seed nodes.
        fanouts: Fan-out per hop (``-1``: all neighbours).
        replace: Sample with replacement.
        seed: Random seed; the sample depends on it only (not on the thread count).
        local: Scratch map ``[num_nodes]`` (int32 or int64) filled with -1, left as found; one is
            allocated when ``None``.

    Returns:
        ``(node, row, col, edge, num_sampled_nodes, num_sampled_edges)``.
    """
    if local is None:
        local = torch.full((max(indptr.numel() - 1, 0),), -1, dtype=torch.int64, device=indptr.device)
    checks.sampler_inputs("sample_neighbors", indptr, indices, seeds, fanouts, local)
    return _sample_raw(indptr.contiguous(), indices.contiguous(), seeds, fanouts, replace, seed, local)


def _sample_raw(indptr: Tensor, indices: Tensor, seeds: Tensor, fanouts: Sequence[int], replace: bool, seed: int,
                local: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, list[int], list[int]]:
    """:func:`sample_neighbors` on inputs already checked (the graph once, the seeds per batch)."""
    node, row, col, edge, nn, ne = _module().sample_neighbors(indptr, indices, seeds, list(fanouts), bool(replace),
                                                              int(seed) % 2**63, local)
    return node, row, col, edge, nn.tolist(), ne.tolist()  # host tensors on either device: no sync


# -- TT lookup --------------------------------------------------------------------------------------
def alert_not_deterministic(caller: str) -> None:
    """What torch does for one of its operations without a deterministic implementation under
    ``torch.use_deterministic_algorithms(True)``: raise (warn with ``warn_only=True``). Raised here
    in Python, before a native kernel would: a C++ exception took the process down on one torch build.

    Raises:
        RuntimeError: Deterministic algorithms are on (without ``warn_only``).
    """
    if not torch.are_deterministic_algorithms_enabled():
        return
    message = (f"{caller} does not have a deterministic implementation, but you set "
               "'torch.use_deterministic_algorithms(True)'")
    if torch.is_deterministic_algorithms_warn_only_enabled():
        warnings.warn(message, UserWarning, stacklevel=2)
        return
    raise RuntimeError(message)


class _TTLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, rows: Tensor, c0: Tensor, c1: Tensor, c2: Tensor, reuse_prefixes: bool) -> Tensor:
        out, *plan = _module().tt_forward(rows, c0, c1, c2, reuse_prefixes)
        ctx.save_for_backward(c0, c1, c2, *plan)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor, Tensor, Tensor, None]:
        c0, c1, c2, *plan = ctx.saved_tensors
        if c0.is_cuda:  # core gradients summed with atomics (the Python contraction is the deterministic path)
            alert_not_deterministic("gnnkit tt_lookup backward on CUDA")
        g0, g1, g2 = _module().tt_backward(grad.contiguous(), c0, c1, c2, *plan)
        return None, g0, g1, g2, None


def tt_supported(cores: Sequence[Tensor]) -> bool:
    """Whether :func:`tt_lookup` handles these cores (three of them, float32 or float64, one device;
    on a GPU, a prefix's product and its gradient fit in a block's shared memory, and torch is not
    asked for deterministic algorithms: the GPU backward sums with atomics)."""
    return len(cores) == 3 and all(c.dim() == 4 and c.dtype in (torch.float32, torch.float64) for c in cores) and (
        len({c.device for c in cores}) == 1 and len({c.dtype for c in cores}) == 1) and (
        cores[0].device.type != "cuda" or _cuda_tt_fits(cores))


def _cuda_tt_fits(cores: Sequence[Tensor]) -> bool:
    """Whether the CUDA TT kernels take these cores: not in deterministic mode (their backward's
    atomics sum in varying order; the Python contraction's ``index_add_`` then is deterministic),
    and within the shared memory a block may opt into."""
    return not torch.are_deterministic_algorithms_enabled() and (
        tt_shared_bytes(cores) <= _shared_memory_limit(cores[0].device.index))


def tt_shared_bytes(cores: Sequence[Tensor]) -> int:
    """Shared memory a CUDA TT block needs (the backward pass's): ``q1 q2 (r2 + q3)`` values."""
    q1, q2, q3, r2 = cores[0].size(2), cores[1].size(2), cores[2].size(2), cores[1].size(3)
    return cores[0].element_size() * q1 * q2 * (r2 + q3)


@functools.lru_cache(maxsize=None)
def _shared_memory_limit(index: int | None) -> int:
    """The most dynamic shared memory a block may opt into on CUDA device ``index`` (the current one
    for ``None``; 48 KiB if torch does not say), read once per device: lookups ask every step."""
    props = torch.cuda.get_device_properties(index)
    return int(getattr(props, "shared_memory_per_block_optin", 48 * 1024))


def tt_lookup(cores: Sequence[Tensor], rows: Tensor, reuse_prefixes: bool = True) -> Tensor:
    """Rows of a three-core TT table, fused forward and backward.

    The FBTT/TT-Rec lookup (<https://arxiv.org/abs/2101.11714>): with ``reuse_prefixes`` rows are
    sorted, each distinct prefix ``(i1, i2)`` is contracted once, each distinct row once; without,
    each row is contracted on its own, in place (no sort, and on CUDA none of the unique passes
    whose sizes the host waits for: for batches whose rows rarely share a prefix). The backward
    pass sums core gradients into per-thread buffers on the CPU (deterministic) and with atomics
    on a GPU (sums in varying order; under ``torch.use_deterministic_algorithms`` it raises, as
    torch's own nondeterministic operations do, and :func:`tt_supported` sends such cores to the
    Python contraction). Both give the same values up to float rounding.

    Args:
        cores: ``[p_k, r_{k-1}, q_k, r_k]`` cores (``r_0 = r_3 = 1``).
        rows: int64 ``[B]`` TT rows (any order, duplicates allowed).
        reuse_prefixes: Sort and share the contractions of equal prefixes and rows.

    Returns:
        ``[B, q1 q2 q3]``, differentiable with respect to the cores.
    """
    checks.tt_inputs("tt_lookup", cores, rows)
    if cores[0].device.type == "cuda":  # checked here: the kernel's own check cannot raise safely
        need, limit = tt_shared_bytes(cores), _shared_memory_limit(cores[0].device.index)
        if need > limit:
            raise ValueError(f"tt_lookup: the cores need {need} bytes of shared memory a block "
                             f"(q1 q2 (r2 + q3) values), above this GPU's {limit}")
    return _TTLookup.apply(rows.reshape(-1), *cores, bool(reuse_prefixes))


# -- magnitude selection ----------------------------------------------------------------------------
def select_magnitude(x: Tensor, threshold: float) -> tuple[Tensor, Tensor]:
    """Indices (int64, ascending) and values of the elements of 1-D float32 CPU ``x`` with
    ``|x| >= threshold``, in one pass (the candidate step of :func:`gnnkit.comm.sparse.topk_indices`)."""
    checks.cpu_float32("select_magnitude", x, vector=True)
    indices, values = _module().select_magnitude(x, float(threshold))  # pybind returns a list
    return indices, values


# -- sampling ---------------------------------------------------------------------------------------
def _native_graph(sampler: Any, sources_are_rows: bool = True) -> bool:
    """Whether the native kernels can sample ``sampler``'s graph (built, ``indices`` contiguous, on
    the CPU or, for multi-hop sampling, on a GPU with the CUDA sampler built: in device memory or
    pinned host memory read through unified addressing). Its O(E) checks run on a sampler's first
    call only: a well-formed CSR whose sources are its rows (multi-hop sampling numbers them) or,
    with ``sources_are_rows=False``, any non-negative ids (one hop over a partition's rows, whose
    sources are the whole graph's ids; CPU only)."""
    device = sampler.indptr.device.type
    if get() is None or not (sampler.indptr.is_contiguous() and sampler.indices.is_contiguous()):
        return False
    if device != "cpu" and not (device == "cuda" and sources_are_rows and "sample_neighbors_cuda" in kernels()):
        return False
    flag = "_native_graph_checked" if sources_are_rows else "_native_rows_checked"
    if not getattr(sampler, flag, False):
        checks.csr("CSRNeighborSampler", sampler.indptr, sampler.indices, None,
                   sampler.num_nodes if sources_are_rows else 2**63 - 1)
        setattr(sampler, flag, True)
    return True


def _kernel_seed(generator: torch.Generator | None) -> int:
    """The seed of one kernel call, drawn from ``generator`` (on its device; torch's default CPU
    generator when ``None``)."""
    device = generator.device if generator is not None else "cpu"
    return int(torch.randint(0, 2**62, (1,), generator=generator, device=device))


def sample_from_nodes(sampler: Any, seed_nodes: Tensor, generator: torch.Generator | None, local: Tensor,
                      index: Any) -> Any:
    """:meth:`CSRNeighborSampler.sample_from_nodes` by the native kernel, or ``None`` without it.

    The kernel's seed is drawn from ``generator`` (torch's default one when ``None``), so the
    sampler's seeding rules (private generator, per-worker re-seeding) carry over unchanged.

    Args:
        sampler: The :class:`~gnnkit.data.sampler.CSRNeighborSampler`.
        seed_nodes: Validated int64 seed ids.
        generator: The sampler's generator for this process.
        local: The sampler's scratch map (all -1; left so).
        index: The :class:`~torch_geometric.sampler.NodeSamplerInput` (for its metadata).

    Returns:
        A :class:`~torch_geometric.sampler.SamplerOutput`, or ``None`` when the native sampler is
        unavailable (disabled, not built, a GPU graph without the CUDA sampler, or ``indices`` a
        strided view).
    """
    if not _native_graph(sampler):
        return None
    from torch_geometric.sampler import SamplerOutput

    seed = _kernel_seed(generator)
    # The graph is checked once above, the seeds by the sampler per batch: no O(E) pass per batch.
    node, row, col, edge, num_nodes, num_edges = _sample_raw(
        sampler.indptr, sampler.indices, seed_nodes, sampler.num_neighbors, sampler.replace, seed, local)
    return SamplerOutput(node=node, row=row, col=col, edge=edge, batch=None, num_sampled_nodes=num_nodes,
                         num_sampled_edges=num_edges, metadata=(index.input_id, index.time))


def sample_rows(sampler: Any, rows: Tensor, k: int, generator: torch.Generator | None,
                edge_base: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor] | None:
    """One hop of ``sampler``'s fan-out rules over its ``rows`` by the native kernel, or ``None``
    without it (see :meth:`CSRNeighborSampler.sample_row_edges
    <gnnkit.data.sampler.CSRNeighborSampler.sample_row_edges>`).

    Each row draws from the kernel's counter-based stream keyed by the call's seed (drawn from
    ``generator``) and the row's position, as :func:`sample_neighbors` draws one hop.

    Args:
        sampler: The :class:`~gnnkit.data.sampler.CSRNeighborSampler`.
        rows: Rows to expand, int64 ``[F]``.
        k: Fan-out (``-1``: all).
        generator: The generator the call's seed is drawn from.
        edge_base: int64 ``[num_rows]``: number edges ``edge_base[row] + offset in the row``
            instead of by their positions in ``indices``.

    Returns:
        ``(src, edge, count)``: the sampled edges' sources and ids, grouped by row in row order,
        int64 ``[E]``, and the edge count per row, int64 ``[F]``; ``None`` when the native kernel
        is unavailable.

    Raises:
        ValueError: Rows out of range, a fan-out below -1 or an ``edge_base`` of another shape.
    """
    if not _native_graph(sampler, sources_are_rows=False):
        return None
    checks.index_vector("sample_rows", "rows", rows)
    checks.same_device("sample_rows", indptr=sampler.indptr, rows=rows, edge_base=edge_base)
    checks.in_range("sample_rows", "rows", rows, sampler.num_nodes)
    if k < -1:
        raise ValueError(f"sample_rows: the fan-out must be >= -1 (-1: all neighbours), got {k}")
    if edge_base is not None:
        checks.index_vector("sample_rows", "edge_base", edge_base)
        if edge_base.numel() != sampler.num_nodes:
            raise ValueError(f"sample_rows: edge_base must hold {sampler.num_nodes} entries (one a row), "
                             f"got {edge_base.numel()}")
    src, edge, count = _module().sample_rows(sampler.indptr, sampler.indices, rows, int(k), bool(sampler.replace),
                                             _kernel_seed(generator), edge_base)
    return src, edge, count


def relabel(src: Tensor, local: Tensor, num_seen: int) -> tuple[Tensor, Tensor] | None:
    """:func:`gnnkit.data.sampler.relabel` by the native kernel (one sequential pass, as pyg-lib
    relabels), or ``None`` without it or off the CPU.

    Raises:
        ValueError: Ids out of ``local``'s range, or a scratch map that is not a contiguous int32/int64
            CPU vector.
        RuntimeError: More nodes than ``local``'s dtype can number (as the PyTorch version).
    """
    if get() is None or src.device.type != "cpu" or local.device.type != "cpu":
        return None
    checks.index_vector("relabel", "src", src)
    if local.dim() != 1 or local.dtype not in (torch.int32, torch.int64) or not local.is_contiguous():
        raise ValueError(f"relabel: local must be a contiguous int32/int64 vector, got {local.dtype} "
                         f"{tuple(local.shape)}")
    checks.in_range("relabel", "src", src, local.numel())
    if num_seen < 0 or num_seen + src.numel() > torch.iinfo(local.dtype).max - 2:
        raise RuntimeError(f"too many sampled edges in one hop ({src.numel()})")
    src_local, new = _module().relabel(src, local, int(num_seen))
    return src_local, new


# -- dropout ----------------------------------------------------------------------------------------
class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, p: float, seed: int) -> Tensor:
        ctx.p, ctx.seed = p, seed
        return _module().dropout(x, p, seed)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        return _module().dropout(grad, ctx.p, ctx.seed), None, None  # the same seed: the same mask


def dropout(x: Tensor, p: float, seed: int) -> Tensor:
    """Inverted dropout of float32 CPU ``x`` with probability ``p``: the mask depends only on
    ``seed`` and the element's position (any thread count, forward and backward alike)."""
    checks.cpu_float32("dropout", x)
    checks.probability("dropout", float(p))
    return _Dropout.apply(x, float(p), int(seed))

"""The sparse adjacency matrix of a graph, caching every storage format it has been converted to."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

from gnnkit.setting_checks import is_whole


def _as_index(t: Tensor, name: str) -> Tensor:
    """``t`` as a contiguous int64 vector without touching the original (which may be a read-only
    memory map): a strided view, e.g. a row of a transposed ``[E, 2]`` edge list, is copied once here,
    as the native kernels read the arrays as flat buffers (the CUDA ones refuse anything else)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"Adjacency: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 1:
        raise ValueError(f"Adjacency: {name} must be 1-D, got shape {tuple(t.shape)}")
    _integer_ids(t, f"Adjacency: {name}")
    return (t if t.dtype == torch.int64 else t.to(torch.int64)).contiguous()


def _integer_ids(t: Tensor, what: str) -> None:
    """Node ids and offsets are integers: a float or bool tensor was cast without a word (1.5 -> 1)."""
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{what} must be an integer tensor (node ids), got {t.dtype}")


def indptr_of(ids: Tensor, n: int, order: Tensor | None = None) -> Tensor:
    """The CSR row pointer ``[n + 1]`` of row ids in ``[0, n)``: entry ``r`` counts the ids below
    ``r``. ``ids[order]`` (``ids`` itself when ``order`` is None) must be non-decreasing.

    On a GPU a binary search over the sorted ids, with no host sync (``torch.bincount`` there reads
    the ids' range back to size its output); on the CPU a count, as fast for large graphs.
    """
    if ids.device.type == "cpu":
        indptr = torch.zeros(n + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(ids, minlength=n), 0, out=indptr[1:])
        return indptr
    ordered = ids if order is None else ids[order]
    return torch.searchsorted(ordered, torch.arange(n + 1, dtype=torch.int64, device=ids.device))


class Adjacency:
    r"""A graph's adjacency matrix ``A [num_rows, num_cols]`` in CSR form, rows = destinations.

    ``(A @ X)[i] = sum_{e in row i} values[e] * X[indices[e]]``: messages flow from the nodes in
    ``indices`` into their row, as in gnnkit's canonical graph. Other storage formats (COO, CSC,
    BSR, dense, the transpose, ...) are materialised on first use by :func:`gnnkit.sparse.spmm`
    and cached on the object, so a training loop converts once, never per step. The input tensors
    are never written to, so they may be read-only memory maps.

    Format selection follows Qiu, You and Wang, "Optimizing Sparse Matrix Multiplications for
    Graph Neural Networks", LCPC 2021 <https://arxiv.org/abs/2111.00352>.

    Args:
        indptr: ``int [num_rows + 1]`` row pointer (``indptr[0] == 0``, non-decreasing).
        indices: ``int [nnz]`` column (source node) of every entry, grouped by row. Duplicates and
            self-loops are allowed; duplicates add up.
        num_cols: Number of columns (default: ``num_rows``, a square graph adjacency).
        values: Optional ``float [nnz]`` entry weights (default: all ones). Treated as constants:
            :func:`~gnnkit.sparse.spmm` does not differentiate with respect to them.
        validate: Check the CSR invariants (O(nnz)); turn off only for trusted, checked input.
        single_use: The matrix serves one training step only (a sampled mini-batch block): the
            selector then considers only formats that need no conversion, since nothing would
            amortise one.
    """

    def __init__(
        self,
        indptr: Tensor,
        indices: Tensor,
        num_cols: int | None = None,
        values: Tensor | None = None,
        validate: bool = True,
        single_use: bool = False,
    ) -> None:
        self.indptr = _as_index(indptr, "indptr")
        self.indices = _as_index(indices, "indices")
        self.num_rows = int(self.indptr.numel()) - 1
        if num_cols is not None and not is_whole(num_cols):
            raise TypeError(f"Adjacency: num_cols must be an integer, got {num_cols!r}")  # 2.9 was cut to 2
        self.num_cols = self.num_rows if num_cols is None else int(num_cols)
        if values is not None:
            values = values.detach()
            if not values.is_floating_point():
                values = values.to(torch.float32)
        self.values = values
        self.single_use = single_use
        if validate:
            self._validate()
        self._cache: dict[str, Any] = {}

    def _validate(self) -> None:
        if self.num_rows < 0:
            raise ValueError("Adjacency: indptr must have at least one element")
        nnz = self.indices.numel()
        if self.num_cols < 0:
            raise ValueError(f"Adjacency: num_cols must be >= 0, got {self.num_cols}")
        if int(self.indptr[0]) != 0 or int(self.indptr[-1]) != nnz:
            raise ValueError(
                f"Adjacency: indptr must start at 0 and end at nnz={nnz}, "
                f"got {int(self.indptr[0])}..{int(self.indptr[-1])}"
            )
        if self.num_rows and bool((self.indptr.diff() < 0).any()):
            raise ValueError("Adjacency: indptr must be non-decreasing")
        if nnz and (int(self.indices.min()) < 0 or int(self.indices.max()) >= self.num_cols):
            raise ValueError(f"Adjacency: indices must lie in [0, {self.num_cols})")
        if self.values is not None and self.values.shape != (nnz,):
            raise ValueError(f"Adjacency: values must have shape ({nnz},), got {tuple(self.values.shape)}")

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_edge_index(
        cls, edge_index: Tensor, num_nodes: int | None = None, values: Tensor | None = None,
        num_dst: int | None = None, single_use: bool = False,
    ) -> Adjacency:
        """The adjacency of a PyG ``[2, E]`` ``(source, destination)`` edge list.

        Args:
            edge_index: ``[2, E]`` edges; messages flow from ``edge_index[0]`` to ``edge_index[1]``.
            num_nodes: Number of source nodes (default: largest id + 1).
            values: Optional ``[E]`` edge weights.
            num_dst: Number of destination nodes (default: ``num_nodes``).
            single_use: See :class:`Adjacency`.

        Returns:
            An :class:`Adjacency` with one row per destination node.
        """
        if not isinstance(edge_index, Tensor):
            raise TypeError(f"Adjacency.from_edge_index: edge_index must be a torch.Tensor, got "
                            f"{type(edge_index).__name__}")
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"Adjacency.from_edge_index: edge_index must be [2, E], got {tuple(edge_index.shape)}")
        _integer_ids(edge_index, "Adjacency.from_edge_index: edge_index")
        for name, count in (("num_nodes", num_nodes), ("num_dst", num_dst)):
            if count is not None and not is_whole(count, 0):
                raise ValueError(f"Adjacency.from_edge_index: {name} must be an integer >= 0, got {count!r}")
        src, dst = edge_index[0].to(torch.int64), edge_index[1].to(torch.int64)
        if values is not None and not isinstance(values, Tensor):
            raise TypeError(f"Adjacency.from_edge_index: values must be a torch.Tensor of edge weights, got "
                            f"{type(values).__name__}")
        if values is not None and values.shape != (src.numel(),):
            raise ValueError(f"Adjacency.from_edge_index: values must have shape ({src.numel()},), "
                             f"got {tuple(values.shape)}")
        # the (source, destination) id ranges and whether dst is sorted, read in one sync (per layer on a GPU)
        low, high, ordered = (0, 0), (-1, -1), True
        if edge_index.numel():
            facts = torch.cat([torch.stack(torch.aminmax(edge_index, dim=1)).flatten().to(torch.int64),
                               (dst[1:] >= dst[:-1]).all().to(torch.int64).view(1)])
            lo_src, lo_dst, hi_src, hi_dst, sorted_flag = facts.tolist()
            low, high, ordered = (lo_src, lo_dst), (hi_src, hi_dst), bool(sorted_flag)
        inferred = num_nodes is None
        if inferred:
            num_nodes = max(high) + 1
        num_dst = num_nodes if num_dst is None else num_dst
        if min(low) < 0 or high[0] >= num_nodes or high[1] >= num_dst:
            raise ValueError(f"Adjacency.from_edge_index: source ids must lie in [0, {num_nodes}) and destination "
                             f"ids in [0, {num_dst}), got {low[0]}..{high[0]} and {low[1]}..{high[1]}")
        if not ordered:
            order = torch.argsort(dst, stable=True)
            src, dst = src[order], dst[order]
            values = None if values is None else values[order]
        try:
            indptr = indptr_of(dst, num_dst)
        except RuntimeError as err:  # torch's allocator (OutOfMemoryError on a GPU): ids far beyond the edges'
            if not inferred or "allocate" not in str(err):
                raise
            raise ValueError(f"Adjacency.from_edge_index: the largest node id, {num_nodes - 1:,}, makes a row pointer "
                             f"of {num_dst + 1:,} entries that cannot be allocated; pass num_nodes, or relabel the ids "
                             "to 0..N-1") from None
        # well-formed by construction (ids checked above, indptr a cumulative count): no second pass
        return cls(indptr, src, num_cols=num_nodes, values=values, single_use=single_use, validate=False)

    # -- shape and basic views -----------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (self.num_rows, self.num_cols)

    @property
    def device(self) -> torch.device:
        """Where the matrix (and every conversion cached on it) lives."""
        return self.indptr.device

    @property
    def nnz(self) -> int:
        return int(self.indices.numel())

    def row_counts(self) -> Tensor:
        """Entries per row (the in-degree, duplicates counted), int64 ``[num_rows]``."""
        return self.cached("row_counts", lambda: self.indptr.diff())

    def rows(self) -> Tensor:
        """Row (destination) of every entry, int64 ``[nnz]`` (the COO row array)."""
        return self.cached("rows", lambda: torch.repeat_interleave(
            torch.arange(self.num_rows, dtype=torch.int64, device=self.device), self.row_counts(), output_size=self.nnz))

    def weights(self) -> Tensor:
        """Entry values, float32 ``[nnz]`` (ones when the matrix is unweighted)."""
        if self.values is not None:
            return self.values
        return self.cached("ones", lambda: torch.ones(self.nnz, dtype=torch.float32, device=self.device))

    def inv_row_counts(self) -> Tensor:
        """``1 / max(row count, 1)`` as float32 ``[num_rows, 1]``, the scale of ``reduce="mean"``."""
        return self.cached("inv_row_counts",
                           lambda: self.row_counts().clamp(min=1).to(torch.float32).reciprocal_().unsqueeze(1))

    def t(self) -> Adjacency:
        """The transpose ``A^T`` (rows = sources) as its own CSR :class:`Adjacency`, cached.

        Its own conversions are cached on it, so the backward pass of :func:`~gnnkit.sparse.spmm`
        picks and keeps its own format. ``A.t().t()`` is ``A``, except for a single-use matrix,
        whose transpose keeps no link back: it serves one backward product, and the two referring
        to each other would outlive the step (device memory included) until Python's cycle
        collector ran.
        """
        def build() -> Adjacency:
            order = torch.argsort(self.indices, stable=True)
            indptr = indptr_of(self.indices, self.num_cols, order)
            values = None if self.values is None else self.values[order]
            transposed = Adjacency(indptr, self.rows()[order], num_cols=self.num_rows,
                                   values=values, validate=False, single_use=self.single_use)
            if not self.single_use:
                transposed._cache["t"] = self
            return transposed
        return self.cached("t", build)

    def drop_transpose(self) -> None:
        """Forget the cached transpose (:meth:`t` builds it again)."""
        self._cache.pop("t", None)

    def to_dense(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The dense ``[num_rows, num_cols]`` matrix (duplicates summed)."""
        dense = torch.zeros(self.num_rows, self.num_cols, dtype=dtype, device=self.device)
        dense.index_put_((self.rows(), self.indices), self.weights().to(dtype), accumulate=True)
        return dense

    # -- devices -------------------------------------------------------------------------------
    def to(self, device: torch.device | str | int | None = None, non_blocking: bool = False) -> Adjacency:
        """This matrix on ``device``: ``self`` when already there, else a copy made once and cached.

        PyG's ``Data.to``/``Data.cuda`` and Lightning's batch transfer reach this method for a
        ``Data`` holding an ``adj``, so a full-batch graph crosses to the GPU once per run; the
        copy builds its own format conversions there on first use.

        Args:
            device: Target device (``None``: stay).
            non_blocking: Asynchronous copy (from pinned memory).
        """
        if device is None or torch.device(device) == self.device:
            return self
        target = torch.device(device)
        if target.type == "cuda" and target.index is None:
            target = torch.device("cuda", torch.cuda.current_device())
            if target == self.device:
                return self

        def build() -> Adjacency:
            values = None if self.values is None else self.values.to(target, non_blocking=non_blocking)
            return Adjacency(self.indptr.to(target, non_blocking=non_blocking),
                             self.indices.to(target, non_blocking=non_blocking), num_cols=self.num_cols,
                             values=values, validate=False, single_use=self.single_use)
        return self.cached(f"device:{target}", build)

    def cpu(self) -> Adjacency:
        """This matrix in host memory (see :meth:`to`)."""
        return self.to("cpu")

    def cuda(self, device: int | None = None, non_blocking: bool = False) -> Adjacency:
        """This matrix on a CUDA device (see :meth:`to`)."""
        return self.to(torch.device("cuda", device) if device is not None else "cuda", non_blocking)

    def pin_memory(self) -> Adjacency:
        """A copy in page-locked host memory (cached), for asynchronous copies to the GPU."""
        if self.device.type != "cpu" or self.indptr.is_pinned():
            return self

        def build() -> Adjacency:
            values = None if self.values is None else self.values.pin_memory()
            return Adjacency(self.indptr.pin_memory(), self.indices.pin_memory(), num_cols=self.num_cols,
                             values=values, validate=False, single_use=self.single_use)
        return self.cached("pinned", build)

    # -- cache ---------------------------------------------------------------------------------
    def cached(self, key: str, build: Callable[[], Any]) -> Any:
        """``build()``'s result, computed once per key and kept on the object."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def cached_keys(self) -> list[str]:
        """Names of the materialised conversions (for tests and ``formats explain``)."""
        return sorted(self._cache)

    def uncache(self, prefix: str) -> None:
        """Drop the cached conversions whose key starts with ``prefix`` (frees their memory)."""
        for key in [k for k in self._cache if k.startswith(prefix)]:
            del self._cache[key]

    def clear_cache(self) -> None:
        """Drop every cached conversion (e.g. to re-measure conversion costs)."""
        self._cache.clear()

    def __repr__(self) -> str:
        flags = (", weighted" if self.values is not None else "") + (", single_use" if self.single_use else "")
        return f"Adjacency(num_rows={self.num_rows}, num_cols={self.num_cols}, nnz={self.nnz}{flags})"

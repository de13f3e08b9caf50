"""The interface every SpMM storage format implements, and the registry that names them."""

from __future__ import annotations

import contextlib
import warnings
from abc import ABC, abstractmethod
from typing import Any, Callable, TypeVar

import torch
from torch import Tensor

from gnnkit.sparse.adjacency import Adjacency

#: Format name -> format instance; filled by :func:`register` as the format modules are imported.
FORMATS: dict[str, "SpmmFormat"] = {}

_F = TypeVar("_F", bound=type)


def register(name: str) -> Callable[[_F], _F]:
    """Class decorator adding a format to :data:`FORMATS` under ``name``; refuses duplicates."""
    def wrap(cls: _F) -> _F:
        if name in FORMATS:
            raise ValueError(f"SpMM format '{name}' is already registered")
        FORMATS[name] = cls()
        FORMATS[name].name = name
        return cls
    return wrap


#: Alternative spellings accepted by :func:`resolve_format`.
ALIASES = {"gs": "gather_scatter", "pyg": "gather_scatter", "scatter": "gather_scatter",
           "segment_csr": "segment", "coo": "coo", "sparse_csr": "csr", "sparse_csc": "csc"}


def resolve_format(name: str) -> str:
    """Normalise a format name (case, ``-``), with a helpful error.

    Example:
        >>> resolve_format("Gather-Scatter")
        'gather_scatter'
    """
    if not isinstance(name, str):
        raise TypeError(f"format must be a string, got {type(name).__name__}")
    key = name.lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"Could not resolve format '{name}' among choices {sorted(FORMATS)} (or 'auto')")
    return key


# torch announces its beta sparse layouts once per process; gnnkit uses them deliberately. torch
# 2.11 (the CUDA 13 wheels) also announces, on a process's first sparse tensor, that invariant checks
# are "implicitly disabled", even when the constructor is passed check_invariants=False as gnnkit's
# are (its arrays are checked when the Adjacency is made); torch 2.13 no longer does.
_BETA = "Sparse (CSR|CSC|BSR|BSC) tensor support is in beta"
_IMPLICIT_CHECKS = "Sparse invariant checks are implicitly disabled"
_announced: set[str] = set()  # the kinds of conversion whose notice has come (and been ignored)


def without_beta_notice(kind: str, build: Callable[[], Any]) -> Any:
    """``build()`` with torch's one-off notices about its sparse layouts ignored (beta state, and
    torch 2.11's implicitly disabled invariant checks). They come once a process, so only a kind's
    first build pays for the warning filters (a per-product cost for the single-use blocks of
    sampled training)."""
    if kind in _announced:
        return build()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_BETA)
        warnings.filterwarnings("ignore", message=_IMPLICIT_CHECKS)
        result = build()
    _announced.add(kind)
    return result


class SpmmFormat(ABC):
    """A storage format of an :class:`Adjacency` and its product with a dense matrix.

    Subclasses implement :meth:`convert` (once per adjacency and dtype, cached on the adjacency
    by :meth:`prepare`) and :meth:`multiply` (every call, no autograd: :func:`gnnkit.sparse.spmm`
    provides the gradient through the transpose).
    """

    name: str = ""
    #: Works on the CSR arrays as they are (no conversion to pay for a single-use matrix).
    conversion_free: bool = False
    #: Multiplies by ``A^T`` from ``A``'s own entries (:meth:`multiply_transposed`): a backward pass
    #: then needs no transpose of ``A`` (for a single-use matrix, a sort per product).
    transpose_free: bool = False
    #: Device types this format has an implementation on.
    devices: tuple[str, ...] = ("cpu", "cuda")
    #: Device types on which it multiplies float16/bfloat16 values itself; elsewhere such an ``x``
    #: is multiplied in float32 and the product rounded back (mixed precision, see :meth:`compute_dtype`).
    narrow_on: tuple[str, ...] = ("cpu", "cuda")

    def runs_on(self, device: torch.device) -> bool:
        """Whether this format has an implementation on ``device``."""
        return device.type in self.devices

    def applicable(self, adj: Adjacency) -> bool:
        """Whether this format can hold ``adj`` at a sensible memory cost."""
        return True

    def selectable(self, device: torch.device | None = None) -> bool:
        """Whether the selector (and labelling) may use this format on this machine (for matrices
        on ``device``, when given)."""
        return True

    @abstractmethod
    def convert(self, adj: Adjacency, dtype: torch.dtype) -> Any:
        """Build this format's representation of ``adj`` with values of ``dtype``."""

    @abstractmethod
    def multiply(self, state: Any, adj: Adjacency, x: Tensor) -> Tensor:
        """``A @ x`` for ``x [num_cols, F]``, given :meth:`convert`'s result ``state``."""

    def multiply_transposed(self, state: Any, adj: Adjacency, x: Tensor) -> Tensor:
        """``A^T @ x`` for ``x [num_rows, F]`` from ``A``'s :meth:`convert` result (``transpose_free`` formats)."""
        raise NotImplementedError(f"SpMM format '{self.name}' multiplies by A^T only through adj.t()")

    def prepare(self, adj: Adjacency, dtype: torch.dtype = torch.float32) -> Any:
        """The cached conversion of ``adj`` (built on first use)."""
        return adj.cached(f"format:{self.name}:{dtype}",
                          lambda: without_beta_notice(self.name, lambda: self.convert(adj, dtype)))

    def compute_dtype(self, dtype: torch.dtype, device: torch.device) -> torch.dtype:
        """The dtype a product with ``dtype`` values runs in on ``device``: ``dtype`` itself, or
        float32 for float16/bfloat16 where the format has no 16-bit kernel (torch's MKL CSR products
        on the CPU, its COO product on CUDA, gnnkit's CPU kernels)."""
        narrow = dtype in (torch.float16, torch.bfloat16)
        return torch.float32 if narrow and device.type not in self.narrow_on else dtype

    def is_prepared(self, adj: Adjacency, dtype: torch.dtype = torch.float32) -> bool:
        return f"format:{self.name}:{dtype}" in adj.cached_keys()

    def __call__(self, adj: Adjacency, x: Tensor) -> Tensor:
        """``A @ x`` in this format (converting on first use)."""
        return self._product(adj, x, transpose=False)

    def transposed(self, adj: Adjacency, x: Tensor) -> Tensor:
        """``A^T @ x`` in this format without building ``A^T`` (``transpose_free`` formats)."""
        if not self.transpose_free:
            raise ValueError(f"SpMM format '{self.name}' multiplies by A^T only through adj.t()")
        return self._product(adj, x, transpose=True)

    def _product(self, adj: Adjacency, x: Tensor, transpose: bool) -> Tensor:
        check_device(self, adj.device)
        if not self.applicable(adj):
            raise ValueError(f"SpMM format '{self.name}' cannot hold {adj}")
        rows, cols = (adj.num_cols, adj.num_rows) if transpose else (adj.num_rows, adj.num_cols)
        if x.dim() != 2 or x.size(0) != cols:
            of = f"the transpose of {adj}" if transpose else f"{adj}"
            raise ValueError(f"spmm: x must be [{cols}, F] for {of}, got {tuple(x.shape)}")
        compute = self.compute_dtype(x.dtype, adj.device)
        state = self.prepare(adj, compute)
        if adj.nnz == 0 or x.size(1) == 0:
            return x.new_zeros(rows, x.size(1))
        # in the dtype chosen here (the input's, or float32 where the format has no 16-bit kernel):
        # autocast would hand torch's sparse products 16-bit inputs again, and a 16-bit input
        # stays 16-bit wherever the format takes it
        product = self.multiply_transposed if transpose else self.multiply
        inputs = x.contiguous() if x.dtype == compute else x.contiguous().to(compute)
        # autocast's own context only where it is on: entering it costs host time on every product
        off = torch.autocast(adj.device.type, enabled=False) if torch.is_autocast_enabled(adj.device.type) else None
        with off or contextlib.nullcontext():
            out = product(state, adj, inputs)
        return out if out.dtype == x.dtype else out.to(x.dtype)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def check_device(fmt: SpmmFormat, device: torch.device) -> None:
    """Refuse a format on a device it has no implementation on, naming both and the alternatives.

    Raises:
        ValueError: ``fmt`` does not run on ``device``.
    """
    if not fmt.runs_on(device):
        others = sorted(n for n, f in FORMATS.items() if f.runs_on(device))
        raise ValueError(f"spmm: format '{fmt.name}' has no implementation on {device.type} "
                         f"(formats there: {', '.join(others) or 'none'}, or 'auto')")


def weights_as(adj: Adjacency, dtype: torch.dtype) -> Tensor:
    """The adjacency's entry values in ``dtype`` (cached per dtype)."""
    w = adj.weights()
    return w if w.dtype == dtype else adj.cached(f"weights:{dtype}", lambda: w.to(dtype))

"""gnnkit's native kernels (C++ on CPU, CUDA on GPU), reached only through this package.

:mod:`gnnkit.native.loader` builds and loads the extension from ``cuda/``;
:mod:`gnnkit.native.ops` wraps its kernels as autograd-aware functions (:mod:`gnnkit.native.gine`
the fused GINE message sum). Callers check
:func:`available` and keep their pure-PyTorch path otherwise.

Example:
    >>> from gnnkit import native
    >>> if native.available():
    ...     y = native.ops.spmm(indptr, indices, x, reduce="mean")
"""

from gnnkit.native import gine, ops
from gnnkit.native.loader import available, build_dir, disabled, enabled, get, kernels, status

__all__ = ["available", "build_dir", "disabled", "enabled", "get", "gine", "kernels", "ops", "status"]

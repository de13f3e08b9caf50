"""SpMM storage formats, one module each, registered by name in :data:`FORMATS`.

Importing this package registers every built-in format.
"""

from gnnkit.sparse.formats.base import FORMATS, SpmmFormat, register, resolve_format
from gnnkit.sparse.formats import bsr, coo, csc, csr, dense, gather_scatter, segment  # noqa: F401  (register)
from gnnkit.sparse.formats import native  # noqa: F401,E402  (register native_csr, native_sell)

__all__ = ["FORMATS", "SpmmFormat", "register", "resolve_format"]

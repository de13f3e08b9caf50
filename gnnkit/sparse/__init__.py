"""Adaptive sparse formats for GNN aggregation.

:class:`Adjacency` holds a graph's CSR and caches its conversions; :func:`spmm` multiplies it with
dense features in a chosen storage format, or in the one the learned selector predicts fastest
(Qiu, You and Wang, "Optimizing Sparse Matrix Multiplications for Graph Neural Networks",
LCPC 2021 <https://arxiv.org/abs/2111.00352>), with the backward pass choosing its own.

Example:
    >>> adj = Adjacency(graph.indptr, graph.indices)
    >>> out = spmm(adj, x, reduce="mean")            # format="auto"
    >>> out = spmm(adj, x, format="csr")              # forced
"""

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats import FORMATS, SpmmFormat, register, resolve_format
from gnnkit.sparse.spmm import SpmmPlan, plan, spmm, spmm_planned

__all__ = ["Adjacency", "FORMATS", "SpmmFormat", "SpmmPlan", "plan", "register", "resolve_format", "spmm",
           "spmm_planned"]

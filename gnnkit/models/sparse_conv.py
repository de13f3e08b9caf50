"""GCN, GraphSAGE and GIN layers whose aggregation is one :func:`gnnkit.sparse.spmm` per layer.

Each layer computes exactly what PyG's ``GCNConv`` / ``SAGEConv`` / ``GINConv`` compute (same
parameter names, so state dicts load either way), but aggregates through
``message_and_aggregate(adj, x)`` = ``spmm(adj, x)`` on a :class:`~gnnkit.sparse.Adjacency`, with
the storage format chosen per layer for the width it aggregates at (Qiu, You and Wang,
"Optimizing Sparse Matrix Multiplications for Graph Neural Networks", LCPC 2021
<https://arxiv.org/abs/2111.00352>). ``last_plan`` records the formats of the latest call.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch import Tensor, nn

from gnnkit.sparse import Adjacency, SpmmPlan, plan, resolve_format, spmm_planned
from gnnkit.sparse.normalize import gcn_normalized


def _check_format(format: str) -> str:
    return "auto" if format == "auto" else resolve_format(format)


class BatchPlans:
    """The selector's SpMM plan per size class of single-use matrix, kept across steps.

    Every training step brings new single-use matrices (a sampled block per layer, a block-diagonal
    batch of small graphs), and asking the selector anew for each (the matrix features: O(nnz)
    passes and a dozen read-backs, a host sync each on a GPU; the tree ensemble, for ``A`` and
    ``A^T``) costs about as much as the aggregation itself. The matrices of one layer come from the
    same fan-out and batch size and are alike, so the plan the selector makes for the first matrix
    of a size class (rows, columns and entries, each to a power of two, the width, the features'
    dtype and the device kind) serves the next ones, as cuDNN's autotuner keeps one choice per
    shape. Single-use matrices only consider formats that need no conversion, so a kept plan never
    triggers one. On a device kind without a selector model (CUDA until one is calibrated),
    ``"auto"`` times those formats on the first matrix of a size class, once, since its plan serves
    the class (:func:`gnnkit.sparse.decision.decide` with ``shared``). Matrices that serve many
    products (a full graph) keep their own plan, cached on them.
    """

    def __init__(self) -> None:
        self._plans: dict[tuple[str | int, ...], SpmmPlan] = {}

    def get(self, adj: Adjacency, width: int, format: str, dtype: torch.dtype = torch.float32) -> SpmmPlan:
        """The plan for ``adj`` and features of ``width`` columns in ``dtype``: made once per size class
        for a single-use matrix (the selector's for ``"auto"``, the checked named format otherwise),
        else :func:`~gnnkit.sparse.plan`'s."""
        if not adj.single_use:
            return plan(adj, width, format, dtype=dtype)
        # the device kind too: a model planned on the CPU and moved to a GPU must not reuse CPU formats
        key = (adj.device.type, adj.num_rows.bit_length(), adj.num_cols.bit_length(), adj.nnz.bit_length(), width,
               dtype, format)
        if key not in self._plans:
            self._plans[key] = plan(adj, width, format, shared=True, dtype=dtype)
        return self._plans[key]

    def __len__(self) -> int:
        return len(self._plans)


class SparseAggregation(nn.Module):
    """Base of the layers: one ``spmm`` per call, in a fixed format or ``"auto"``.

    Args:
        format: ``"auto"`` (the selector decides per width) or a format name.

    Attributes:
        plans: Where single-use matrices' plans are kept (:class:`BatchPlans`); a model may give its
            layers one shared instance.
    """

    reduce = "sum"

    def __init__(self, format: str = "auto") -> None:
        super().__init__()
        self.format = _check_format(format)
        self.last_plan: SpmmPlan | None = None
        self.plan_counts: Counter[str] = Counter()
        self.plans = BatchPlans()

    def check_inputs(self, x: Tensor, adj: Adjacency) -> None:
        """What PyG users pass first, an ``edge_index``, gets a line saying what to build instead; and
        the destinations, the first ``adj.num_rows`` rows of ``x``, must be there."""
        if not isinstance(adj, Adjacency):
            raise TypeError(f"{type(self).__name__}: adj must be a gnnkit.sparse.Adjacency (from a PyG edge_index: "
                            f"Adjacency.from_edge_index(edge_index, num_nodes)), got {type(adj).__name__}")
        if isinstance(x, Tensor) and x.dim() == 2 and adj.num_rows > x.size(0):
            raise ValueError(f"{type(self).__name__}: {adj} has more destination rows than x has nodes "
                             f"({x.size(0)}); the destinations are the first rows of x")

    def plan_for(self, adj: Adjacency, x: Tensor) -> SpmmPlan:
        """The formats of ``spmm(adj, x)`` (see :class:`BatchPlans`)."""
        return self.plans.get(adj, x.size(1), self.format, x.dtype)

    def record(self, chosen: SpmmPlan) -> SpmmPlan:
        """Remember ``chosen`` as the latest plan and count it (for :meth:`format_report`)."""
        self.last_plan = chosen
        self.plan_counts[f"{chosen.forward}/{chosen.backward}"] += 1
        return chosen

    def message_and_aggregate(self, adj: Adjacency, x: Tensor) -> Tensor:
        """``reduce`` over each row's neighbours of ``x``: ``spmm(adj, x)`` in the planned formats."""
        chosen = self.record(self.plan_for(adj, x))
        return spmm_planned(adj, x, chosen, self.reduce)

    def format_report(self) -> dict[str, Any] | None:
        """The latest plan plus how often each ``forward/backward`` pair ran (``None`` before any call)."""
        if self.last_plan is None:
            return None
        return {**self.last_plan.as_dict(), "counts": dict(self.plan_counts)}


def plan_counts(model: nn.Module) -> dict[str, dict[str, int]]:
    """How often each ``forward/backward`` format pair ran, per :class:`SparseAggregation` of
    ``model`` (by module name): what a resumed run's report carries over (:func:`set_plan_counts`)."""
    return {name: dict(m.plan_counts) for name, m in model.named_modules() if isinstance(m, SparseAggregation)}


def set_plan_counts(model: nn.Module, counts: dict[str, dict[str, int]]) -> None:
    """Give ``model``'s :class:`SparseAggregation` layers the counts :func:`plan_counts` returned
    (a layer not named there starts from none)."""
    for name, m in model.named_modules():
        if isinstance(m, SparseAggregation):
            m.plan_counts = Counter(counts.get(name, {}))


class SparseGCNConv(SparseAggregation):
    """The graph convolution of Kipf & Welling, "Semi-Supervised Classification with Graph
    Convolutional Networks" <https://arxiv.org/abs/1609.02907>: ``\\hat A (X W^T) + b`` with
    ``\\hat A = D^-1/2 (A + I) D^-1/2`` (cached on the adjacency).

    Args:
        in_channels: Input width.
        out_channels: Output width (the width it aggregates at).
        format: ``"auto"`` or a format name.
        bias: Add a learnable bias.
    """

    def __init__(self, in_channels: int, out_channels: int, format: str = "auto", bias: bool = True) -> None:
        super().__init__(format)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.lin.weight)  # PyG's glorot
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, adj: Adjacency, normalized: bool = False) -> Tensor:
        """``[N, in] -> [N, out]`` on a square ``adj``; or ``[N_src, in] -> [N_dst, out]`` on an
        ``adj`` that is ``normalized`` already (e.g. a partition's rows with whole-graph degrees,
        :func:`gnnkit.partitioned.local_graph.gcn_local_normalized`)."""
        self.check_inputs(x, adj)
        if not normalized:  # float64 features get float64 weights (PyG's are in x's dtype)
            adj = gcn_normalized(adj, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
        out = self.message_and_aggregate(adj, self.lin(x))
        return out if self.bias is None else out + self.bias

    def from_aggregated(self, aggregated: Tensor) -> Tensor:
        """The layer's output from its input aggregated already: ``(\\hat A X) W^T + b``, equal to
        :meth:`forward`'s ``\\hat A (X W^T) + b`` (see :mod:`gnnkit.partitioned.input_aggregation`)."""
        out = self.lin(aggregated)
        return out if self.bias is None else out + self.bias

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, format={self.format})"


class SparseSAGEConv(SparseAggregation):
    """The GraphSAGE operator of Hamilton et al., "Inductive Representation Learning on Large
    Graphs" <https://arxiv.org/abs/1706.02216>: ``lin_l(mean_j x_j) + lin_r(x_i)``.

    ``adj`` may be rectangular ``[N_dst, N_src]`` (sampled blocks): the first ``N_dst`` rows of
    ``x`` are the destination nodes, as in PyG.

    Args:
        in_channels: Input width (the width it aggregates at).
        out_channels: Output width.
        format: ``"auto"`` or a format name.
        root_weight: Add the transformed root features.
        bias: Bias of ``lin_l``.
    """

    reduce = "mean"

    def __init__(self, in_channels: int, out_channels: int, format: str = "auto", root_weight: bool = True,
                 bias: bool = True) -> None:
        super().__init__(format)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lin_l = nn.Linear(in_channels, out_channels, bias=bias)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False) if root_weight else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_l, self.lin_r):
            if lin is not None:
                lin.reset_parameters()

    def forward(self, x: Tensor, adj: Adjacency) -> Tensor:
        """``[N_src, in] -> [N_dst, out]``."""
        self.check_inputs(x, adj)
        out = self.lin_l(self.message_and_aggregate(adj, x))
        if self.lin_r is not None:
            out = out + self.lin_r(x[: adj.num_rows])
        return out

    def from_aggregated(self, aggregated: Tensor) -> Tensor:
        """The layer's output from ``[mean_j x_j, x_i]`` side by side (``[N, 2 * in]``), the row means
        computed already (see :mod:`gnnkit.partitioned.input_aggregation`)."""
        mean, own = aggregated.split(self.in_channels, dim=1)
        out = self.lin_l(mean)
        return out if self.lin_r is None else out + self.lin_r(own)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, format={self.format})"


class SparseGINConv(SparseAggregation):
    """The graph isomorphism operator of Xu et al., "How Powerful are Graph Neural Networks?"
    <https://arxiv.org/abs/1810.00826>: ``nn((1 + eps) x_i + sum_j x_j)``.

    Args:
        nn: The update network (e.g. a two-layer MLP).
        eps: Initial ``eps``.
        train_eps: Learn ``eps``.
        format: ``"auto"`` or a format name.
    """

    def __init__(self, nn: nn.Module, eps: float = 0.0, train_eps: bool = False, format: str = "auto") -> None:
        super().__init__(format)
        self.nn = nn
        self.initial_eps = eps
        if train_eps:
            self.eps = torch.nn.Parameter(torch.tensor([eps]))
        else:
            self.register_buffer("eps", torch.tensor([eps]))

    def reset_parameters(self) -> None:
        for module in self.nn.modules():
            if module is not self.nn and hasattr(module, "reset_parameters"):
                module.reset_parameters()
        self.eps.data.fill_(self.initial_eps)

    def forward(self, x: Tensor, adj: Adjacency) -> Tensor:
        """``[N_src, in] -> [N_dst, out]``."""
        self.check_inputs(x, adj)
        out = self.message_and_aggregate(adj, x)
        return self.nn(out + (1 + self.eps) * x[: adj.num_rows])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(nn={self.nn}, format={self.format})"

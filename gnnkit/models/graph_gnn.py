"""GNN encoders for graph property prediction: GIN / GCN with edge features, virtual node, pooling.

The architecture is OGB's molecule example (<https://github.com/snap-stanford/ogb/tree/master/examples/graphproppred/mol>):
atoms and bonds embedded with OGB's ``AtomEncoder``/``BondEncoder`` (a ``Linear`` for float
features, a single learned vector where a dataset has no node features), ``num_layers``
convolutions each followed by BatchNorm, ReLU (all but the last) and dropout
(:func:`gnnkit.models.dropout.dropout`: the native counter-based kernel on CPU, as in the node
models), an optional virtual node (Gilmer et al., "Neural Message Passing for Quantum Chemistry",
<https://arxiv.org/abs/1704.01212>, in OGB's form), then sum / mean / attention pooling and a
linear head.

Convolutions: GIN with edge features (Xu et al., "How Powerful are Graph Neural Networks?",
<https://arxiv.org/abs/1810.00826>; Hu et al.'s edge variant, <https://arxiv.org/abs/1905.12265>):
``mlp((1 + eps) x_i + sum_j relu(x_j + e_ij))``, and OGB's GCN with edge features
``sum_j norm_ij relu(x_j + e_ij) + relu(x_i + r) / deg_i`` (Kipf & Welling,
<https://arxiv.org/abs/1609.02907>).

``aggregation="pyg"`` uses PyG's ``GINEConv`` / ``GINConv`` and its scatter; ``"gnnkit"``
aggregates on the batch's block-diagonal CSR as a :class:`~gnnkit.sparse.Adjacency`, built once
per batch and shared by the layers. GIN with edge features (format ``auto``, CPU) sums its
messages with the fused native kernel (:mod:`gnnkit.native.gine`): gather, add, ReLU and row sum
in one pass, the backward pass walking the entries by source, never writing the ``[E, d]``
messages; on molecules the bond embeddings are rows of one table of bond types
(:class:`~gnnkit.models.bond_types.BondTypes`), never written per edge either. Elsewhere (a
forced format, no native build, a GPU) the messages ``relu(x_j + e_ij)`` are summed into their
rows by :func:`gnnkit.sparse.spmm` with the batch CSR's row pointer and one column per edge slot
(same rows, same per-row counts, so the same matrix statistics as the adjacency); without edge
features GIN multiplies the adjacency itself. The selector plans once per size class of batch
matrix (:class:`~gnnkit.models.sparse_conv.BatchPlans`), not per batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from gnnkit import native
from gnnkit.models.bond_types import BondTypes, bond_codes
from gnnkit.models.dropout import dropout
from gnnkit.models.sparse_conv import BatchPlans, SparseAggregation, SparseGINConv
from gnnkit.sparse import Adjacency, SpmmPlan, resolve_format

MODELS = ("gin", "gcn", "mlp")
POOLINGS = ("mean", "sum", "attention")
AGGREGATIONS = ("pyg", "gnnkit")


@dataclass(frozen=True)
class GraphGNNOptions:
    """How a :class:`GraphGNN` is built (OGB's mol example's defaults).

    Attributes:
        model: ``"gin"``, ``"gcn"`` or ``"mlp"`` (no message passing: per-atom MLP layers, then
            pooling: the bag-of-atoms baseline).
        num_layers: Convolutions (or per-atom MLP layers).
        emb_dim: Width of every hidden representation.
        dropout: Dropout after every layer.
        virtual_node: Add OGB's virtual node (a per-graph vector added to every node, updated
            from the pooled nodes by an MLP between layers).
        pooling: ``"mean"``, ``"sum"`` or ``"attention"`` (a learned gate per node, softmax per graph).
        aggregation: ``"pyg"`` or ``"gnnkit"``.
        format: SpMM format of ``"gnnkit"`` aggregation: ``"auto"`` or a format name.
        edge_features: Use bond/edge features in the messages (GIN becomes GINE).
        molecular: Integer OGB atom/bond features: embed them with ``AtomEncoder``/``BondEncoder``.
        in_channels: Node feature width (0: no node features).
        edge_channels: Edge feature width (0: none).
    """

    model: str = "gin"
    num_layers: int = 5
    emb_dim: int = 300
    dropout: float = 0.5
    virtual_node: bool = False
    pooling: str = "mean"
    aggregation: str = "pyg"
    format: str = "auto"
    edge_features: bool = True
    molecular: bool = True
    in_channels: int = 9
    edge_channels: int = 3

    def __post_init__(self) -> None:
        for name, allowed in (("model", MODELS), ("pooling", POOLINGS), ("aggregation", AGGREGATIONS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"model.{name}: expected one of {list(allowed)}, got {getattr(self, name)!r}")
        if self.format != "auto":
            try:
                resolve_format(self.format)
            except ValueError as err:
                raise ValueError(f"model.format: {err}") from None
        if self.num_layers < 1:
            raise ValueError(f"model.num_layers: expected >= 1, got {self.num_layers}")
        if self.emb_dim < 1:
            raise ValueError(f"model.emb_dim: expected >= 1, got {self.emb_dim}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout: expected a number in [0, 1), got {self.dropout}")
        if self.model == "gcn" and not self.uses_edges:
            raise ValueError("model.model: OGB's GCN needs edge features (set model.edge_features true on a "
                             "dataset with edge features)")

    @property
    def uses_edges(self) -> bool:
        return self.edge_features and self.edge_channels > 0


def node_encoder(options: GraphGNNOptions) -> nn.Module:
    """OGB's ``AtomEncoder`` for molecules, a ``Linear`` for float features, one learned vector
    for featureless graphs (OGB's ogbg-ppa example)."""
    if options.in_channels == 0:
        return _Constant(options.emb_dim)
    if options.molecular:
        from ogb.graphproppred.mol_encoder import AtomEncoder

        return AtomEncoder(options.emb_dim)
    return _FloatEncoder(options.in_channels, options.emb_dim)


def edge_encoder(options: GraphGNNOptions) -> nn.Module:
    """OGB's ``BondEncoder`` for molecules, a ``Linear`` for float edge features."""
    if options.molecular:
        from ogb.graphproppred.mol_encoder import BondEncoder

        return BondEncoder(options.emb_dim)
    return _FloatEncoder(options.edge_channels, options.emb_dim)


class _Constant(nn.Module):
    """The same learned vector for every node (no node features)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, dim))

    def forward(self, x: Tensor | None, num_nodes: int) -> Tensor:  # noqa: D102
        return self.weight.expand(num_nodes, -1)


class _FloatEncoder(nn.Linear):
    """A ``Linear`` on float features (cast from whatever the cache holds)."""

    def forward(self, x: Tensor, num_nodes: int | None = None) -> Tensor:  # noqa: D102
        return super().forward(x.float())


def gin_mlp(dim: int) -> nn.Sequential:
    """GIN's update network in OGB's example: ``Linear(d, 2d), BN, ReLU, Linear(2d, d)``."""
    return nn.Sequential(nn.Linear(dim, 2 * dim), nn.BatchNorm1d(2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))


def edge_slots(adj: Adjacency) -> Adjacency:
    """``adj``'s row-to-edge-slot matrix ``[N, E]`` (entry ``e`` of row ``i`` in column ``e``):
    per-edge messages in CSR order summed into their rows by :func:`~gnnkit.sparse.spmm`. Cached on ``adj``."""
    def build() -> Adjacency:
        slots = torch.arange(adj.nnz, device=adj.device)
        return Adjacency(adj.indptr, slots, num_cols=adj.nnz, single_use=adj.single_use, validate=False)
    return adj.cached("edge_slots", build)


def fused_gine(x: Tensor, edge_emb: Tensor) -> bool:
    """Whether :func:`gnnkit.native.gine.gine_sum` runs these inputs (native build, CPU, float32/64)."""
    return (x.device.type == "cpu" and x.dtype in native.gine.DTYPES and edge_emb.dtype == x.dtype
            and native.available())


class SparseGINEConv(SparseGINConv):
    """GIN with edge features (the operator of PyG's ``GINEConv``, same parameter names):
    ``nn((1 + eps) x_i + sum_j relu(x_j + e_ij))``.

    With format ``"auto"`` on CPU the sum is the fused native kernel
    (:func:`gnnkit.native.gine.gine_sum`, reported as the plan ``native_gine``); otherwise
    :func:`gnnkit.sparse.spmm` sums the materialised messages.

    Xu et al. <https://arxiv.org/abs/1810.00826>; Hu et al. <https://arxiv.org/abs/1905.12265>.

    Args:
        nn: The update network.
        eps: Initial ``eps``.
        train_eps: Learn ``eps`` (OGB's example does).
        format: ``"auto"`` or a format name.
    """

    #: The pseudo-format of the fused kernel in :meth:`format_report`.
    FUSED = "native_gine"

    def __init__(self, nn: nn.Module, eps: float = 0.0, train_eps: bool = True, format: str = "auto") -> None:
        super().__init__(nn, eps, train_eps, format)

    def forward(self, x: Tensor, adj: Adjacency, edge_emb: Tensor | BondTypes) -> Tensor:  # type: ignore[override]
        """``x [N, d]``, ``adj`` the batch's ``[N, N]`` CSR, ``edge_emb [E, d]`` in its entry order (or
        a :class:`BondTypes` of them)."""
        return self.nn(self.message_sum(x, adj, edge_emb) + (1 + self.eps) * x)

    def message_sum(self, x: Tensor, adj: Adjacency, edge_emb: Tensor | BondTypes) -> Tensor:
        """``sum_j relu(x_j + e_ij)`` per row of ``adj``: fused, or the messages through ``spmm``."""
        rows = edge_emb.table if isinstance(edge_emb, BondTypes) else edge_emb
        if self.format == "auto" and fused_gine(x, rows):
            self.record(SpmmPlan(self.FUSED, self.FUSED, x.size(1), "fused"))
            graph = adj.cached("native:message_csr",  # checked once per batch, shared by the layers
                               lambda: native.gine.message_csr(adj.indptr, adj.indices, adj.num_cols))
            if isinstance(edge_emb, BondTypes):
                return native.gine.gine_sum_coded(graph, x, edge_emb.table, edge_emb.codes)
            return native.gine.gine_sum(graph, x, edge_emb)
        if isinstance(edge_emb, BondTypes):
            edge_emb = edge_emb.dense()
        messages = torch.relu(x.index_select(0, adj.indices) + edge_emb)
        return self.message_and_aggregate(edge_slots(adj), messages)


class MolGCNConv(SparseAggregation):
    """OGB's GCN with edge features: ``sum_j norm_ij relu(W x_j + e_ij) + relu(W x_i + r) / deg_i``,
    ``norm_ij = 1 / sqrt(deg_i deg_j)`` with ``deg = in-degree + 1`` (Kipf & Welling
    <https://arxiv.org/abs/1609.02907>, OGB's mol example's ``GCNConv``).

    Args:
        dim: Width.
        aggregation: ``"pyg"`` (PyG's ``scatter``) or ``"gnnkit"`` (:func:`gnnkit.sparse.spmm`).
        format: ``"auto"`` or a format name (``"gnnkit"`` only).
    """

    def __init__(self, dim: int, aggregation: str = "pyg", format: str = "auto") -> None:
        super().__init__(format)
        self.linear = nn.Linear(dim, dim)
        self.root_emb = nn.Embedding(1, dim)
        self.aggregation = aggregation

    def forward(self, x: Tensor, batch: Data, adj: Adjacency | None, edge_emb: Tensor) -> Tensor:  # noqa: D102
        from torch_geometric.utils import scatter

        x = self.linear(x)
        source, target = batch.edge_index
        deg = (batch.indptr[1:] - batch.indptr[:-1]).to(x.dtype) + 1
        inv_sqrt = deg.pow(-0.5)
        messages = (inv_sqrt[source] * inv_sqrt[target]).unsqueeze(1) * torch.relu(x.index_select(0, source) + edge_emb)
        if self.aggregation == "gnnkit":
            out = self.message_and_aggregate(edge_slots(adj), messages)
        else:
            out = scatter(messages, target, 0, dim_size=x.size(0), reduce="sum")
        return out + torch.relu(x + self.root_emb.weight) / deg.unsqueeze(1)


class GraphGNN(nn.Module):
    """Node encoder, message passing (or per-atom MLP layers), pooling, linear head.

    Args:
        options: The architecture (:class:`GraphGNNOptions`).
        out_channels: Tasks (binary) or classes (multi-class).
    """

    def __init__(self, options: GraphGNNOptions, out_channels: int) -> None:
        super().__init__()
        self.options = options
        self.model = options.model
        d, layers = options.emb_dim, options.num_layers
        self.node_encoder = node_encoder(options)
        self.convs = nn.ModuleList(self._conv() for _ in range(layers))
        self.edge_encoders = nn.ModuleList(
            edge_encoder(options) for _ in range(layers if options.uses_edges and options.model != "mlp" else 0)
        )
        self.norms = nn.ModuleList(nn.BatchNorm1d(d) for _ in range(layers))
        self.virtual = None
        if options.virtual_node:
            self.virtual = nn.Embedding(1, d)
            nn.init.zeros_(self.virtual.weight)
            self.virtual_mlps = nn.ModuleList(
                nn.Sequential(nn.Linear(d, 2 * d), nn.BatchNorm1d(2 * d), nn.ReLU(),
                              nn.Linear(2 * d, d), nn.BatchNorm1d(d), nn.ReLU())
                for _ in range(layers - 1)
            )
        self.pool = self._pool()
        self.head = nn.Linear(d, out_channels)
        self.plans = BatchPlans()
        for conv in self.convs:
            if isinstance(conv, SparseAggregation):
                conv.plans = self.plans

    def _conv(self) -> nn.Module:
        o = self.options
        if o.model == "mlp":
            return gin_mlp(o.emb_dim)
        if o.model == "gcn":
            return MolGCNConv(o.emb_dim, o.aggregation, o.format)
        if o.aggregation == "gnnkit":
            if o.uses_edges:
                return SparseGINEConv(gin_mlp(o.emb_dim), train_eps=True, format=o.format)
            return SparseGINConv(gin_mlp(o.emb_dim), train_eps=True, format=o.format)
        from torch_geometric.nn import GINConv, GINEConv

        if o.uses_edges:
            return GINEConv(gin_mlp(o.emb_dim), train_eps=True)
        return GINConv(gin_mlp(o.emb_dim), train_eps=True)

    def _pool(self) -> nn.Module | None:
        if self.options.pooling != "attention":
            return None
        from torch_geometric.nn.aggr import AttentionalAggregation

        d = self.options.emb_dim
        gate = nn.Sequential(nn.Linear(d, 2 * d), nn.BatchNorm1d(2 * d), nn.ReLU(), nn.Linear(2 * d, 1))
        return AttentionalAggregation(gate)

    def _pooled(self, h: Tensor, batch: Data) -> Tensor:
        from torch_geometric.utils import scatter

        if self.pool is not None:
            return self.pool(h, batch.batch, dim_size=batch.num_graphs)
        return scatter(h, batch.batch, 0, dim_size=batch.num_graphs, reduce=self.options.pooling)

    def adjacency(self, batch: Data) -> Adjacency | None:
        """The batch's block-diagonal CSR for gnnkit aggregation (``None`` for PyG's), built once
        per batch and shared by the layers (with whatever they derive from it)."""
        if self.options.aggregation != "gnnkit" or self.options.model == "mlp":
            return None
        # validate=False: the batch CSR is cut from a validated cache entry by GraphSet.batch (the
        # native kernels check it again, once per batch, before they index with it)
        return Adjacency(batch.indptr, batch.indices, num_cols=int(batch.num_nodes), single_use=True, validate=False)

    def bond_codes(self, batch: Data) -> native.gine.EdgeCodes | None:
        """The batch's bond codes for the fused GINE sum (gnnkit aggregation of GIN on molecules with
        format ``auto``), checked once per batch; ``None`` where the layers embed the bonds themselves."""
        o = self.options
        if not (o.aggregation == "gnnkit" and o.model == "gin" and o.uses_edges and o.format == "auto"):
            return None
        return bond_codes(self.edge_encoders[0], batch.edge_attr)

    def _layer(self, i: int, h: Tensor, batch: Data, adj: Adjacency | None,
               codes: native.gine.EdgeCodes | None) -> Tensor:
        conv, o = self.convs[i], self.options
        if o.model == "mlp":
            return conv(h)
        if codes is not None:
            return conv(h, adj, BondTypes.of(self.edge_encoders[i], codes, batch.edge_attr.size(1)))
        edge_emb = self.edge_encoders[i](batch.edge_attr) if o.uses_edges else None
        if o.model == "gcn":
            return conv(h, batch, adj, edge_emb)
        if o.aggregation == "gnnkit":
            return conv(h, adj, edge_emb) if o.uses_edges else conv(h, adj)
        return conv(h, batch.edge_index, edge_emb) if o.uses_edges else conv(h, batch.edge_index)

    def forward(self, batch: Data) -> Tensor:
        """``[num_graphs, out_channels]`` logits of a batch from :meth:`pipeline.graph_layout.GraphSet.batch`."""
        o = self.options
        adj, codes = self.adjacency(batch), self.bond_codes(batch)
        h = self.node_encoder(batch.x, int(batch.num_nodes)) if o.in_channels == 0 else self.node_encoder(batch.x)
        virtual = None
        if self.virtual is not None:
            virtual = self.virtual.weight.expand(batch.num_graphs, -1)
        for i in range(o.num_layers):
            if virtual is not None:
                h = h + virtual[batch.batch]
            out = self.norms[i](self._layer(i, h, batch, adj, codes))
            if i < o.num_layers - 1:
                out = torch.relu(out)
            out = dropout(out, o.dropout, self.training)
            if virtual is not None and i < o.num_layers - 1:
                from torch_geometric.utils import scatter

                pooled = scatter(h, batch.batch, 0, dim_size=batch.num_graphs, reduce="sum") + virtual
                virtual = dropout(self.virtual_mlps[i](pooled), o.dropout, self.training)
            h = out
        return self.head(self._pooled(h, batch))

    def __repr__(self) -> str:
        o = self.options
        return (f"GraphGNN({o.model}, {o.num_layers} layers x {o.emb_dim}, pooling={o.pooling}, "
                f"virtual_node={o.virtual_node}, edge_features={o.uses_edges}, aggregation={o.aggregation}"
                + (f", format={o.format})" if o.aggregation == "gnnkit" else ")"))

    def format_report(self) -> dict[str, Any]:
        """The SpMM plans of each gnnkit-aggregating layer (``{"layer0": {...}}``)."""
        return {f"layer{i}": conv.format_report() for i, conv in enumerate(self.convs)
                if isinstance(conv, SparseAggregation) and conv.format_report() is not None}

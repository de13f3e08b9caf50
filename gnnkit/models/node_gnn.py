"""A stack of message-passing layers (or linear layers for the MLP baseline) for node tasks."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

from gnnkit.models.dropout import dropout
from gnnkit.models.inrank import InRankOptions, describe_low_rank, inrank_layers, replace_linears
from gnnkit.models.residual_stream import ResidualStream
from gnnkit.models.sampled_blocks import SampledBlocks
from gnnkit.partitioned.halo import HaloPlan, with_halo
from gnnkit.partitioned.local_graph import gcn_local_normalized, weighted_halo
from gnnkit.partitioned.stale_halo import StaleHalo
from gnnkit.sparse import Adjacency, resolve_format

#: Where message-passing layers aggregate: PyG's own layers, or gnnkit.sparse.spmm per layer.
AGGREGATIONS = ("pyg", "gnnkit")

#: Models whose layer outputs at a node depend only on that node's in-edges, so trimming the outer
#: hops of a sampled batch leaves the seeds' outputs exactly unchanged.
TRIMMABLE = ("sage", "gin", "gat")

#: Architecture name -> paper, for docs and reports.
MODELS = {
    "gcn": "Kipf & Welling, Semi-Supervised Classification with GCNs <https://arxiv.org/abs/1609.02907>",
    "sage": "Hamilton et al., Inductive Representation Learning on Large Graphs <https://arxiv.org/abs/1706.02216>",
    "gat": "Velickovic et al., Graph Attention Networks <https://arxiv.org/abs/1710.10903>",
    "gin": "Xu et al., How Powerful are Graph Neural Networks? <https://arxiv.org/abs/1810.00826>",
    "mlp": "multi-layer perceptron baseline (ignores the graph)",
}


def resolve_model(name: str) -> str:
    """Normalise an architecture name (case, ``-``/``_``), with a helpful error."""
    key = name.lower().replace("-", "").replace("_", "")
    aliases = {"graphsage": "sage", "gcnconv": "gcn", "sageconv": "sage", "gatconv": "gat", "ginconv": "gin"}
    key = aliases.get(key, key)
    if key not in MODELS:
        raise ValueError(f"Could not resolve model '{name}' among choices {sorted(MODELS)}")
    return key


#: Low-rank parameterisations of the layers' linear maps (``None``: full rank).
LOW_RANKS = ("inrank",)

#: Activations between layers: ReLU (GCN, GraphSAGE, GIN), ELU (GAT), GELU (Platonov et al.'s residual stacks).
ACTIVATIONS = {"relu": torch.relu, "elu": nn.functional.elu, "gelu": nn.functional.gelu}


@dataclass(frozen=True)
class NodeGNNOptions:
    """How a :class:`NodeGNN` stacks its layers, beyond its widths.

    The defaults are the OGB reference models' (BatchNorm, ReLU, dropout 0.5 between layers); the
    small-citation-graph papers' settings are Kipf & Welling's GCN
    (<https://arxiv.org/abs/1609.02907>: 2 layers, dropout 0.5 on every layer's input, ReLU, no
    BatchNorm) and GAT (<https://arxiv.org/abs/1710.10903>: 8 heads of 8 hidden units, ELU, dropout
    0.6 on every layer's input and on the attention coefficients, one output head; 8 averaged
    output heads on Pubmed). ``residual`` with ``layer_norm`` is the stack Platonov et al. train on
    heterophilous graphs (<https://arxiv.org/abs/2302.11640>, their code's ``Model``).

    Args:
        num_layers: Number of layers (>= 1).
        dropout: Dropout probability between layers.
        input_dropout: Dropout probability on the input features, before the first layer.
        batch_norm: BatchNorm after each hidden layer (with ``residual``: before each block and
            before the output map).
        layer_norm: LayerNorm where ``batch_norm`` puts BatchNorm (with ``batch_norm`` off).
        residual: Pre-norm residual blocks: a linear map of the input to the hidden width (then
            dropout and the activation), ``num_layers`` blocks each adding
            ``dropout(linear(act(dropout(layer(norm(h))))))`` to ``h`` with every layer hidden to
            hidden, then a norm and a linear map to the outputs (Platonov et al.'s ``Model`` with
            its ``ResidualModuleWrapper``: PyG's SAGEConv and GCNConv are their modules' first
            linear map on the aggregate).
        activation: Between layers: ``"relu"``, ``"elu"`` or ``"gelu"``.
        heads: Attention heads for GAT hidden layers (the hidden width is split across heads).
        output_heads: Attention heads of GAT's output layer, averaged (GAT's Pubmed setting).
        attention_dropout: Dropout probability on GAT's normalised attention coefficients.
        cached: Cache GCN's normalised adjacency (full-batch training only).
        aggregation: ``"pyg"`` (PyG's layers) or ``"gnnkit"`` (layers of
            :mod:`gnnkit.models.sparse_conv` aggregating with :func:`gnnkit.sparse.spmm`; GCN, SAGE
            and GIN only).
        format: SpMM format of the ``"gnnkit"`` layers: ``"auto"`` (chosen per layer by the
            learned selector) or a format name of :data:`gnnkit.sparse.FORMATS`.
        low_rank: ``None`` (full rank) or ``"inrank"``: every linear map inside the layers (PyG's
            ``Linear`` in GCNConv/GATConv, SAGEConv's ``lin_l``/``lin_r``, GIN's MLP, the MLP
            baseline's layers) becomes an :class:`~gnnkit.models.inrank.InRankLinear`, whose rank
            grows during training (<https://arxiv.org/abs/2306.11250>). Attention vectors, biases
            and BatchNorm stay as they are.
        inrank: How InRank layers start, grow and stop (:class:`~gnnkit.models.inrank.InRankOptions`).
    """

    num_layers: int = 3
    dropout: float = 0.5
    input_dropout: float = 0.0
    batch_norm: bool = True
    layer_norm: bool = False
    residual: bool = False
    activation: str = "relu"
    heads: int = 1
    output_heads: int = 1
    attention_dropout: float = 0.0
    cached: bool = False
    aggregation: str = "pyg"
    format: str = "auto"
    low_rank: str | None = None
    inrank: InRankOptions = InRankOptions()

    def __post_init__(self) -> None:
        object.__setattr__(self, "inrank", InRankOptions.of(self.inrank))  # a dict, as a user's script gives it
        if self.low_rank is not None and self.low_rank not in LOW_RANKS:
            raise ValueError(f"low_rank: expected null or one of {list(LOW_RANKS)}, got {self.low_rank!r}")
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"Could not resolve aggregation '{self.aggregation}' among choices {list(AGGREGATIONS)}")
        if self.format != "auto":
            resolve_format(self.format)  # "Could not resolve format ...": model.format, before the data is read
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation: expected one of {list(ACTIVATIONS)}, got {self.activation!r}")
        for name in ("dropout", "input_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}: expected a probability in [0, 1), got {getattr(self, name)!r}")
        if self.residual and self.output_heads != 1:
            raise ValueError(f"output_heads: the residual stack ends in a linear map, not a GAT layer; leave it at 1, "
                             f"got {self.output_heads}")
        if self.layer_norm and self.batch_norm:
            raise ValueError("layer_norm: LayerNorm replaces BatchNorm; set batch_norm: false as well")
        for name in ("heads", "output_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected at least 1 attention head, got {getattr(self, name)!r}")

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], **fixed: Any) -> NodeGNNOptions:
        """The options among a module's settings (its others left out), ``fixed`` over them, with
        errors named as the recipe's fields (``model.dropout: ...``)."""
        chosen = {name: settings[name] for name in cls.__dataclass_fields__ if name in settings}
        try:
            return cls(**{**chosen, **fixed})
        except ValueError as err:
            raise _as_model_setting(err) from None


def _as_model_setting(err: ValueError) -> ValueError:
    """A :class:`NodeGNNOptions` error named as the recipe's setting (``dropout: ...`` ->
    ``model.dropout: ...``, as ``model.lr`` is; ``Could not resolve aggregation ...`` ->
    ``model.aggregation: Could not resolve aggregation ...``)."""
    text = str(err)
    field = re.match(r"(Could not resolve )?(\w+)", text)
    if field and field.group(2) in NodeGNNOptions.__dataclass_fields__ and not text.startswith("model."):
        return ValueError(f"model.{field.group(2)}: {text}" if field.group(1) else f"model.{text}")
    return err


def resolve_model_setting(name: str) -> str:
    """:func:`resolve_model` for a recipe's ``model.model``, its error naming that field."""
    try:
        return resolve_model(name)
    except ValueError as err:
        raise ValueError(f"model.model: {err}") from None


class NodeGNN(nn.Module):
    """``num_layers`` layers of GCN / GraphSAGE / GAT / GIN / Linear with BatchNorm, an activation
    and dropout between them (see :class:`NodeGNNOptions`).

    The layer stack of the OGB reference models for ogbn-arxiv and ogbn-products by default, and of
    the GCN and GAT papers' citation-graph models with their options (see :data:`MODELS` for the
    papers).

    Args:
        model: ``"gcn"``, ``"sage"``, ``"gat"``, ``"gin"`` or ``"mlp"``.
        in_channels: Input feature width.
        hidden_channels: Hidden width.
        out_channels: Number of classes / tasks.
        options: How the layers are stacked; default :class:`NodeGNNOptions()`.
        **overrides: Fields of :class:`NodeGNNOptions` replacing those of ``options``
            (``num_layers=2, dropout=0.6``).
    """

    def __init__(
        self,
        model: str,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        options: NodeGNNOptions | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__()
        opts = replace(options or NodeGNNOptions(), **overrides)
        self.options = opts
        self.model = resolve_model(model)
        if opts.aggregation == "gnnkit" and self.model == "gat":
            raise ValueError("aggregation='gnnkit' supports gcn, sage and gin (GAT learns its edge weights); "
                             "use aggregation='pyg' for gat")
        self.aggregation = opts.aggregation
        self.format = opts.format
        self.dropout = opts.dropout
        self.input_dropout = opts.input_dropout
        self.activation = ACTIVATIONS[opts.activation]
        num_layers = opts.num_layers
        self.stream: ResidualStream | None = None
        if opts.residual:  # every layer maps the stream to itself; a norm before each and one at the end
            self.stream = ResidualStream(in_channels, hidden_channels, out_channels, num_layers,
                                         self.activation, opts.dropout)
            dims = norm_widths = [hidden_channels] * (num_layers + 1)
        else:
            dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
            norm_widths = dims[1:-1]
        self.layers = nn.ModuleList(
            self._layer(dims[i], dims[i + 1], last=i == num_layers - 1 and not opts.residual)
            for i in range(num_layers)
        )
        self.norms = nn.ModuleList(_norm(d, opts) for d in norm_widths)
        if opts.low_rank == "inrank":
            replace_linears(self.layers, opts.inrank, prefix="layers.")
        self._sampled: tuple[HaloPlan, Adjacency] | None = None  # a boundary-sampled step's matrix
        self._repr = (
            f"NodeGNN({self.model}, {in_channels}, {hidden_channels}, {out_channels}, "
            f"num_layers={num_layers}, dropout={opts.dropout}, batch_norm={opts.batch_norm}"
            + "".join(f", {name}={getattr(opts, name)}" for name in _REPR_EXTRAS
                      if getattr(opts, name) != getattr(_DEFAULTS, name))
            + (f", aggregation={opts.aggregation}, format={opts.format}" if opts.aggregation != "pyg" else "")
            + (f", low_rank={opts.low_rank})" if opts.low_rank else ")")
        )

    def _layer(self, fan_in: int, fan_out: int, last: bool) -> nn.Module:
        opts = self.options
        if self.aggregation == "gnnkit" and self.model != "mlp":
            from gnnkit.models.sparse_conv import SparseGCNConv, SparseGINConv, SparseSAGEConv

            if self.model == "gcn":
                return SparseGCNConv(fan_in, fan_out, format=self.format)
            if self.model == "sage":
                return SparseSAGEConv(fan_in, fan_out, format=self.format)
            return SparseGINConv(_gin_mlp(fan_in, fan_out), format=self.format)
        if self.model == "gin":
            return GINConv(_gin_mlp(fan_in, fan_out))
        if self.model == "gcn":
            return GCNConv(fan_in, fan_out, cached=opts.cached)
        if self.model == "sage":
            return SAGEConv(fan_in, fan_out)
        if self.model == "gat":
            return _gat_layer(fan_in, fan_out, last, opts)
        return nn.Linear(fan_in, fan_out)

    def reset_parameters(self) -> None:
        for module in [*self.layers, *self.norms, self.stream]:
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()

    @property
    def input_layer(self) -> nn.Module:
        """The module that reads the features: the first layer, or a residual stack's input map."""
        return self.layers[0] if self.stream is None else self.stream.input

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        adj: Adjacency | None = None,
        num_sampled_nodes: list[int] | None = None,
        num_sampled_edges: list[int] | None = None,
        halo: HaloPlan | StaleHalo | None = None,
        input_aggregated: bool = False,
        edges_by_destination: bool = False,
    ) -> Tensor:
        """Node scores.

        Args:
            x: ``[N, in_channels]`` node features.
            edge_index: ``[2, E]`` (source, destination) edges; ignored by the MLP.
            adj: The same graph as an :class:`~gnnkit.sparse.Adjacency` for ``aggregation="gnnkit"``
                (pass one that lives across steps, e.g. the full graph's, to keep its format
                conversions cached); built from ``edge_index`` when omitted, as a single-use
                matrix (the selector then avoids formats that need a conversion).
            num_sampled_nodes: Nodes per hop of a neighbour-sampled batch (seeds first), with
                ``num_sampled_edges`` (edges per hop): layer ``i`` then reads the batch less its
                outermost ``i`` hops and computes outputs only for the nodes the next layer reads
                (the batch less ``i + 1`` hops), as a bipartite ``[N_dst, N_src]`` block (DGL's
                blocks; PyG's ``trim_to_layer`` trims the inputs only). The seeds' outputs are
                unchanged in evaluation; BatchNorm's training statistics cover the computed nodes.
                Used when there is one hop per layer, for the models whose aggregation reads only
                each destination's own in-edges (not GCN, whose normalisation uses the sources'
                degrees in the sampled subgraph).
            halo: Partition-parallel training (``aggregation="gnnkit"``): ``x`` holds this rank's
                owned nodes, ``adj`` their rows over ``[owned; halo]`` columns
                (:func:`~gnnkit.partitioned.local_graph.local_adjacency`; GCN normalises it with
                whole-graph degrees), and every layer reads its halo rows from their owners
                (:func:`~gnnkit.partitioned.halo.with_halo`); a collective on every rank. A
                :class:`~gnnkit.partitioned.stale_halo.StaleHalo` trains on the previous step's halo
                rows instead (PipeGCN).
            input_aggregated: ``x`` holds the first layer's input aggregated already, as
                :meth:`input_aggregation` says (``Â X`` for GCN, ``[mean of neighbours, own row]``
                for SAGE; :mod:`gnnkit.partitioned.input_aggregation`): the first layer only
                transforms it, with no graph and no halo exchange.
            edges_by_destination: ``edge_index``'s destinations are non-decreasing, as gnnkit's
                sampler emits them (hop by hop, by destination in node order): the blocks of
                ``aggregation="gnnkit"`` are then rows of one row pointer, made once, with no
                checks (each layer's check is a host sync on a GPU).

        Returns:
            ``[N, out_channels]`` logits, or when trimming ``[num_sampled_nodes[0], out_channels]``
            (the seeds' rows: callers read the seeds).
        """
        x = dropout(x, self.input_dropout, self.training)
        if self.stream is not None:
            x = self.stream.enter(x)
        trim = (num_sampled_nodes is not None and num_sampled_edges is not None and self.model in TRIMMABLE
                and len(num_sampled_edges) == len(self.layers) and adj is None)
        graph: Tensor | Adjacency | None = None  # what the layers aggregate over, made once
        num_dst = x.size(0)
        blocks = (SampledBlocks(edge_index, num_dst) if trim and edges_by_destination and self.aggregation == "gnnkit"
                  else None)  # every layer's block is a prefix of the batch's rows and entries
        if input_aggregated:
            self.input_aggregation()  # a model whose first layer cannot start from it fails here
        for i, layer in enumerate(self.layers):
            stream = x
            if self.stream is not None:
                x = self.norms[i](x)
            if input_aggregated and i == 0:
                x = layer.from_aggregated(x)
            elif trim:
                if i > 0:  # this hop's edges fed the previous layer only
                    edge_index = edge_index[:, : edge_index.size(1) - num_sampled_edges[-i]]
                num_dst -= num_sampled_nodes[-(i + 1)]
                x = self._block(layer, x, edge_index, num_dst, blocks)
            elif halo is not None and self.model != "mlp":
                x = self._partition_layer(i, layer, x, adj, halo)
            else:
                if self.model != "mlp" and graph is None:
                    graph = self._graph(x, edge_index, adj, edges_by_destination)
                x = layer(x) if self.model == "mlp" else layer(x, graph)
            if self.stream is not None:
                x = self.stream.add(i, stream, x)
            elif i < len(self.layers) - 1:
                x = self.activation(self.norms[i](x))
                x = dropout(x, self.dropout, self.training)
        return x if self.stream is None else self.stream.output(self.norms[-1](x))

    def input_aggregation(self) -> str:
        """What the first layer aggregates, for an input aggregated once before training
        (:mod:`gnnkit.partitioned.input_aggregation`): ``"gcn"`` (``Â X``) or ``"mean"`` (SAGE).

        Raises:
            ValueError: The first layer is not linear in an aggregate of ``x`` it could start from
                (GAT, GIN, MLP, PyG layers) or the input is dropped out.
        """
        if self.aggregation != "gnnkit" or self.model not in ("gcn", "sage"):
            raise ValueError(f"data.aggregate_input: needs model gcn or sage with aggregation gnnkit (a first layer "
                             f"linear in its aggregated input), got {self.model} with aggregation {self.aggregation}")
        if self.stream is not None:
            raise ValueError("data.aggregate_input: with model.residual the first layer reads a linear map of the "
                             "features, not the features")
        if self.input_dropout:
            raise ValueError(f"data.aggregate_input: the input must not be dropped out (model.input_dropout "
                             f"{self.input_dropout}): an aggregate computed once cannot change per step")
        return "gcn" if self.model == "gcn" else "mean"

    def _partition_layer(self, i: int, layer: nn.Module, x: Tensor, adj: Adjacency | None,
                         halo: HaloPlan | StaleHalo) -> Tensor:
        """Layer ``i`` on a partition: owned rows plus the halo rows fetched from their owners (or,
        with a :class:`StaleHalo` in training, those of the previous step)."""
        if self.aggregation != "gnnkit" or adj is None:
            raise ValueError("halo: partition-parallel layers need aggregation='gnnkit' and the partition's adj")
        if isinstance(halo, StaleHalo):
            inputs = torch.cat([x, halo.exchange(x, i)]) if self.training else with_halo(x, halo.plan)
            halo = halo.plan
        else:
            inputs = with_halo(x, halo)
        graph = gcn_local_normalized(adj, halo.exact) if self.model == "gcn" else adj  # whole-graph degrees
        if halo.halo_weight is not None:  # a boundary-sampled step: one reweighted matrix for all layers
            if self._sampled is None or self._sampled[0] is not halo:
                self._sampled = (halo, weighted_halo(graph, halo.halo_weight))
            graph = self._sampled[1]
        return layer(inputs, graph, normalized=True) if self.model == "gcn" else layer(inputs, graph)

    def _block(self, layer: nn.Module, x: Tensor, edge_index: Tensor, num_dst: int,
               blocks: SampledBlocks | None = None) -> Tensor:
        """One layer on a sampled block: sources ``x``, outputs for its first ``num_dst`` rows (cut
        from the batch's ``blocks`` when the edges come sorted by destination)."""
        if self.aggregation == "gnnkit":
            if blocks is None:
                return layer(x, Adjacency.from_edge_index(edge_index, x.size(0), num_dst=num_dst, single_use=True))
            return layer(x, blocks.block(num_dst, edge_index.size(1), x.size(0)))
        return layer((x, x[:num_dst]), edge_index, size=(x.size(0), num_dst))

    def _graph(self, x: Tensor, edge_index: Tensor, adj: Adjacency | None,
               edges_by_destination: bool = False) -> Tensor | Adjacency:
        """What the layers aggregate over: the edge list (PyG) or an Adjacency (gnnkit; from edges in
        the sampler's order, one row pointer with no checks, each a host sync on a GPU)."""
        if self.aggregation != "gnnkit":
            return edge_index
        if adj is not None:
            return adj.to(x.device)  # no-op when the batch transfer moved it; else one cached copy
        n = x.size(0)
        if edges_by_destination:
            return SampledBlocks(edge_index, n).block(n, edge_index.size(1), n)
        return Adjacency.from_edge_index(edge_index, n, single_use=True)

    def format_report(self) -> dict[str, dict[str, object]]:
        """SpMM formats of each ``"gnnkit"`` layer: ``{"layer0": {"forward", "backward", "width",
        "source", "counts"}, ...}``, the latest plan and how often each ``forward/backward`` pair ran
        (empty for PyG layers or before the first forward)."""
        reports = {f"layer{i}": layer.format_report() for i, layer in enumerate(self.layers)
                   if hasattr(layer, "format_report")}
        return {k: v for k, v in reports.items() if v is not None}

    def update_ranks(self) -> list[str]:
        """Count an optimizer step in every InRank layer (checking its rank when due); the names
        of the layers whose rank grew."""
        return [name for name, layer in inrank_layers(self) if layer.step()]

    def low_rank_report(self) -> dict[str, object] | None:
        """``{"ranks", "max_ranks", "params", "full_params"}`` of the InRank layers (``None`` without
        ``low_rank``); see :func:`~gnnkit.models.inrank.describe_low_rank`."""
        return describe_low_rank(self) if self.options.low_rank else None

    def __repr__(self) -> str:
        return self._repr


#: Options the repr shows when they differ from the defaults.
_REPR_EXTRAS = ("layer_norm", "residual", "input_dropout", "activation", "heads", "output_heads", "attention_dropout")
_DEFAULTS = NodeGNNOptions()


def _norm(width: int, opts: NodeGNNOptions) -> nn.Module:
    """The normalisation of a ``width``-wide hidden representation the options ask for."""
    if opts.batch_norm:
        return nn.BatchNorm1d(width)
    return nn.LayerNorm(width) if opts.layer_norm else nn.Identity()


def _gat_layer(fan_in: int, fan_out: int, last: bool, opts: NodeGNNOptions) -> nn.Module:
    """A GAT layer: hidden layers split their width across ``heads`` and concatenate, the output
    layer averages ``output_heads`` (GAT paper, section 3.3)."""
    if last:
        return GATConv(fan_in, fan_out, heads=opts.output_heads, concat=False, dropout=opts.attention_dropout)
    if fan_out % opts.heads:
        raise ValueError(f"hidden_channels {fan_out} is not divisible by heads {opts.heads}")
    return GATConv(fan_in, fan_out // opts.heads, heads=opts.heads, dropout=opts.attention_dropout)


def _gin_mlp(fan_in: int, fan_out: int) -> nn.Module:
    """GIN's update network: Linear, ReLU, Linear (as in the GIN paper's node tasks)."""
    return nn.Sequential(nn.Linear(fan_in, fan_out), nn.ReLU(), nn.Linear(fan_out, fan_out))

"""A stack of message-passing layers (or linear layers for the MLP baseline) for node tasks."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

#: Architecture name -> paper, for docs and reports.
MODELS = {
    "gcn": "Kipf & Welling, Semi-Supervised Classification with GCNs <https://arxiv.org/abs/1609.02907>",
    "sage": "Hamilton et al., Inductive Representation Learning on Large Graphs <https://arxiv.org/abs/1706.02216>",
    "gat": "Velickovic et al., Graph Attention Networks <https://arxiv.org/abs/1710.10903>",
    "mlp": "multi-layer perceptron baseline (ignores the graph)",
}


def resolve_model(name: str) -> str:
    """Normalise an architecture name (case, ``-``/``_``), with a helpful error."""
    key = name.lower().replace("-", "").replace("_", "")
    aliases = {"graphsage": "sage", "gcnconv": "gcn", "sageconv": "sage", "gatconv": "gat"}
    key = aliases.get(key, key)
    if key not in MODELS:
        raise ValueError(f"Could not resolve model '{name}' among choices {sorted(MODELS)}")
    return key


class NodeGNN(nn.Module):
    """``num_layers`` layers of GCN / GraphSAGE / GAT / Linear with BatchNorm, ReLU and dropout.

    The layer stack of the OGB reference models for ogbn-arxiv and ogbn-products
    (see :data:`MODELS` for the papers).

    Args:
        model: ``"gcn"``, ``"sage"``, ``"gat"`` or ``"mlp"``.
        in_channels: Input feature width.
        hidden_channels: Hidden width.
        out_channels: Number of classes / tasks.
        num_layers: Number of layers (>= 1).
        dropout: Dropout probability between layers.
        batch_norm: BatchNorm after each hidden layer.
        heads: Attention heads for GAT hidden layers (the hidden width is split across heads).
        cached: Cache GCN's normalised adjacency (full-batch training only).
    """

    def __init__(
        self,
        model: str,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 3,
        dropout: float = 0.5,
        batch_norm: bool = True,
        heads: int = 1,
        cached: bool = False,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.model = resolve_model(model)
        self.dropout = dropout
        dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.layers = nn.ModuleList(
            self._layer(dims[i], dims[i + 1], last=i == num_layers - 1, heads=heads, cached=cached)
            for i in range(num_layers)
        )
        self.norms = nn.ModuleList(
            nn.BatchNorm1d(d) if batch_norm else nn.Identity() for d in dims[1:-1]
        )
        self._repr = (
            f"NodeGNN({self.model}, {in_channels}, {hidden_channels}, {out_channels}, "
            f"num_layers={num_layers}, dropout={dropout}, batch_norm={batch_norm})"
        )

    def _layer(self, fan_in: int, fan_out: int, last: bool, heads: int, cached: bool) -> nn.Module:
        if self.model == "gcn":
            return GCNConv(fan_in, fan_out, cached=cached)
        if self.model == "sage":
            return SAGEConv(fan_in, fan_out)
        if self.model == "gat":
            if last or heads == 1:
                return GATConv(fan_in, fan_out, heads=1)
            if fan_out % heads:
                raise ValueError(f"hidden_channels {fan_out} is not divisible by heads {heads}")
            return GATConv(fan_in, fan_out // heads, heads=heads)
        return nn.Linear(fan_in, fan_out)

    def reset_parameters(self) -> None:
        for module in [*self.layers, *self.norms]:
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Node scores.

        Args:
            x: ``[N, in_channels]`` node features.
            edge_index: ``[2, E]`` (source, destination) edges; ignored by the MLP.

        Returns:
            ``[N, out_channels]`` logits.
        """
        for i, layer in enumerate(self.layers):
            x = layer(x) if self.model == "mlp" else layer(x, edge_index)
            if i < len(self.layers) - 1:
                x = torch.relu(self.norms[i](x))
                x = nn.functional.dropout(x, p=self.dropout, training=self.training)
        return x

    def __repr__(self) -> str:
        return self._repr

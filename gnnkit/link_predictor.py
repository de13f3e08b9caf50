"""The LightningModule for link property prediction: a GNN encoder and a pair decoder.

The setting of OGB's link examples (https://github.com/snap-stanford/ogb/tree/master/examples/linkproppred/collab):
a GCN / GraphSAGE encoder (:class:`~gnnkit.models.node_gnn.NodeGNN`, with ``aggregation: gnnkit``
and ``format: auto`` available) embeds the nodes of the training graph; a decoder scores a pair
``(u, v)`` from ``h_u * h_v``: the dot product, or OGB's ``LinkPredictor`` MLP on the Hadamard
product. Training minimises ``-log sigmoid(s_pos) - log(1 - sigmoid(s_neg))`` over a batch of
positive edges and as many uniformly random pairs (drawn by
:class:`~gnnkit.data.link_datamodule.LinkDataModule`). Validation and test score the split's
positives against its negatives with OGB's link ``Evaluator`` (Hits@K or MRR).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from gnnkit import setting_checks
from gnnkit.link_metrics import evaluate_links, make_link_evaluator
from gnnkit.models.node_gnn import NodeGNN, NodeGNNOptions, resolve_model, resolve_model_setting
from gnnkit.optim import module_optimizer, with_scheduler
from gnnkit.task_module import RunLengthHooks, TaskModule

DECODERS = ("dot", "mlp")
#: Pairs scored per decoder call in evaluation (bounds the ``[pairs, hidden]`` temporaries).
EVAL_CHUNK = 1 << 16


def check_decoder(kind: str, num_layers: int) -> None:
    """``model.decoder`` is one of :data:`DECODERS` and ``model.decoder_layers`` >= 1."""
    if kind not in DECODERS:
        raise ValueError(f"model.decoder: expected one of {list(DECODERS)}, got {kind!r}")
    if not setting_checks.is_whole(num_layers, 1):
        raise ValueError(f"model.decoder_layers: expected >= 1, got {num_layers!r}")


class PairDecoder(nn.Module):
    """Scores node pairs from their embeddings' Hadamard product.

    ``"dot"``: the sum of ``h_u * h_v`` (the inner product, as in GAE, https://arxiv.org/abs/1611.07308).
    ``"mlp"``: OGB's ``LinkPredictor``: ``num_layers`` linear layers on ``h_u * h_v`` with ReLU and
    dropout between them, one logit out.

    Args:
        kind: ``"dot"`` or ``"mlp"``.
        channels: Embedding width.
        num_layers: MLP layers (``"mlp"`` only, >= 1).
        dropout: Dropout between MLP layers.
    """

    def __init__(self, kind: str, channels: int, num_layers: int = 3, dropout: float = 0.0) -> None:
        super().__init__()
        check_decoder(kind, num_layers)
        self.kind = kind
        self.dropout = dropout
        widths = [channels] * num_layers + [1]
        self.lins = nn.ModuleList(nn.Linear(widths[i], widths[i + 1]) for i in range(num_layers)) \
            if kind == "mlp" else nn.ModuleList()

    def forward(self, h_src: Tensor, h_dst: Tensor) -> Tensor:
        """``[B]`` logits of the pairs ``(h_src[i], h_dst[i])``."""
        x = h_src * h_dst
        if self.kind == "dot":
            return x.sum(dim=-1)
        for lin in self.lins[:-1]:
            x = nn.functional.dropout(torch.relu(lin(x)), self.dropout, self.training)
        return self.lins[-1](x).squeeze(-1)


def _endpoints(h: Tensor, pairs: Tensor) -> tuple[Tensor, Tensor]:
    """Rows of ``h`` at both ends of ``pairs [B, 2]``, by ``index_select``: the backward of
    ``h[pairs[:, 0]]`` (an accumulating ``index_put_``) adds repeated rows in a varying order on a
    multi-core CPU from about 50,000 pairs, so two runs of one seed drifted apart by float rounding."""
    return h.index_select(0, pairs[:, 0]), h.index_select(0, pairs[:, 1])


def link_loss(pos: Tensor, neg: Tensor) -> Tensor:
    """``-mean log sigmoid(pos) - mean log(1 - sigmoid(neg))`` from logits (OGB's examples' loss,
    computed with ``logsigmoid`` so that no saturated sigmoid loses the gradient)."""
    return -nn.functional.logsigmoid(pos).mean() - nn.functional.logsigmoid(-neg).mean()


class LinkPredictor(RunLengthHooks, TaskModule):
    """Link prediction with an encoder of node embeddings and a pair decoder; OGB's metrics.

    ``in_channels``, ``num_nodes``, ``full_batch`` and ``task`` come from the datamodule (linked by
    ``gnnkit run``).

    Args:
        model: Encoder: ``"sage"``, ``"gcn"`` (or ``"gin"``) or ``"mlp"`` (features only: the baseline).
        hidden_channels: Hidden and embedding width.
        num_layers: Encoder layers.
        dropout: Dropout between encoder layers (and decoder layers).
        batch_norm: BatchNorm between encoder layers (OGB's link examples use none).
        layer_norm: LayerNorm where ``batch_norm`` puts BatchNorm (with ``batch_norm`` off).
        residual: The encoder as pre-norm residual blocks (Platonov et al.,
            <https://arxiv.org/abs/2302.11640>; :class:`~gnnkit.models.node_gnn.NodeGNNOptions`).
        activation: Between encoder layers: ``"relu"``, ``"elu"`` or ``"gelu"``.
        decoder: ``"mlp"`` (OGB's LinkPredictor) or ``"dot"``.
        decoder_layers: Layers of the MLP decoder.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        aggregation: ``"pyg"`` or ``"gnnkit"`` (:func:`gnnkit.sparse.spmm`; GCN/SAGE/GIN).
        format: SpMM format of ``"gnnkit"`` aggregation: ``"auto"`` or a format name.
        embedding_dim: Width of a learnable per-node embedding concatenated to the features (needed
            by featureless graphs such as ogbl-ddi); 0 = none.
        in_channels: Node feature width.
        num_nodes: Number of nodes (for the embedding table).
        full_batch: The datamodule runs the encoder over the whole graph.
        task: ``{"name", "eval_metric", "negatives"}`` of the dataset.
        optimizer: ``{"class_path", "init_args"}`` of the optimizer (the recipe's top-level
            ``optimizer:`` section); ``None``: Adam with ``lr`` and ``weight_decay``.
        lr_scheduler: ``{"class_path", "init_args"}`` of an lr scheduler stepped per epoch, or ``None``.
    """

    def __init__(
        self,
        model: str = "sage",
        hidden_channels: int = 256,
        num_layers: int = 3,
        dropout: float = 0.0,
        batch_norm: bool = False,
        layer_norm: bool = False,
        residual: bool = False,
        activation: str = "relu",
        decoder: str = "mlp",
        decoder_layers: int = 3,
        lr: float = 0.001,
        weight_decay: float = 0.0,
        aggregation: str = "pyg",
        format: str = "auto",
        embedding_dim: int = 0,
        in_channels: int = 0,
        num_nodes: int = 0,
        full_batch: bool = True,
        task: dict[str, Any] | None = None,
        optimizer: dict[str, Any] | None = None,
        lr_scheduler: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.check_settings(self.hparams)
        self.task = task or {"name": "unknown", "eval_metric": "hits@50", "negatives": "edge_neg"}
        if in_channels == 0 and embedding_dim == 0:
            raise ValueError("model.embedding_dim: the dataset has no node features; set an embedding width "
                             "(e.g. --model.embedding_dim 256)")
        if embedding_dim and num_nodes <= 0:
            raise ValueError("model.num_nodes: a learnable embedding needs the number of nodes")
        self.embedding = nn.Embedding(num_nodes, embedding_dim) if embedding_dim else None
        options = NodeGNNOptions.from_settings(self.hparams, cached=False)
        width = in_channels + embedding_dim
        self.gnn = NodeGNN(resolve_model(model), width, hidden_channels, hidden_channels, options)
        self.decoder = PairDecoder(decoder, hidden_channels, decoder_layers, dropout)
        self.evaluator = make_link_evaluator(self.task["name"], self.task["eval_metric"])
        self._scores: dict[str, tuple[list[Tensor], list[Tensor], list[int]]] = {}

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> dict[str, Any]:  # noqa: D102 (TaskModule's)
        full = super().check_settings(settings)
        resolve_model_setting(full["model"])
        NodeGNNOptions.from_settings(full, cached=False)
        check_decoder(full["decoder"], full["decoder_layers"])
        return full

    def report_info(self) -> dict[str, Any]:
        """``decoder`` and, for ``aggregation="gnnkit"``, the SpMM ``formats`` of each layer."""
        info: dict[str, Any] = {"decoder": self.hparams.decoder}
        if self.hparams.aggregation == "gnnkit":
            info["formats"] = self.gnn.format_report()
        return info

    def node_input(self, batch: Data) -> Tensor:
        """Features of the batch's nodes, with the learnable embedding attached if any."""
        parts = [batch.x] if batch.x is not None and self.hparams.in_channels else []
        if self.embedding is not None:
            parts.append(self.embedding(batch.n_id))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def encode(self, batch: Data) -> Tensor:
        """Embeddings of the batch's nodes (sampled batches: at least its seeds, first)."""
        return self.gnn(self.node_input(batch), batch.edge_index, adj=getattr(batch, "adj", None),
                        num_sampled_nodes=getattr(batch, "num_sampled_nodes", None),
                        num_sampled_edges=getattr(batch, "num_sampled_edges", None))

    def score(self, h: Tensor, pairs: Tensor) -> Tensor:
        """``[B]`` logits of ``pairs [B, 2]`` (rows of ``h``), decoded in chunks."""
        if pairs.numel() == 0:
            return h.new_empty(0)
        if self.training:
            return self.decoder(*_endpoints(h, pairs))
        return torch.cat([self.decoder(*_endpoints(h, c)) for c in pairs.split(EVAL_CHUNK)])

    def forward(self, batch: Data) -> tuple[Tensor, Tensor]:
        """Logits of the batch's positive and negative pairs."""
        h = self.encode(batch)
        return self.score(h, batch.pos), self.score(h, batch.neg)

    def training_step(self, batch: Data, batch_idx: int) -> Tensor:
        pos, neg = self(batch)
        loss = link_loss(pos, neg)
        self.log_loss("train", loss, pos.shape[0])
        return loss

    def _eval_step(self, batch: Data, stage: str) -> None:
        pos, neg = self(batch)
        positives, negatives, per_pos = self._scores.setdefault(stage, ([], [], []))
        positives.append(pos.detach().float().cpu())
        negatives.append(neg.detach().float().cpu())
        per_pos.append(int(batch.neg_per_pos))
        if pos.numel() and neg.numel():
            loss = link_loss(pos, neg)
            self.log_loss(stage, loss, pos.shape[0], prog_bar=False)

    def validation_step(self, batch: Data, batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: Data, batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def _epoch_start(self, stage: str) -> None:
        super()._epoch_start(stage)
        self._scores.pop(stage, None)

    def _epoch_metric(self, stage: str) -> None:
        if stage not in self._scores:
            return
        positives, negatives, per_pos = self._scores.pop(stage)
        pos, neg = torch.cat(positives), torch.cat(negatives)
        if pos.numel() == 0 or neg.numel() == 0:
            return  # nothing to rank (e.g. a sanity check that stopped early)
        if max(per_pos):
            neg = neg.view(pos.shape[0], max(per_pos))
        self.log_metric(stage, evaluate_links(self.evaluator, pos, neg))  # every rank scored the whole split

    def configure_optimizers(self) -> torch.optim.Optimizer | dict[str, Any]:
        """Adam (``lr``, ``weight_decay``) over the encoder, the decoder and the embedding, or the
        ``optimizer`` spec's class; then the ``lr_scheduler`` spec's scheduler, if any."""
        hp = self.hparams
        optimizer = module_optimizer(self, [{"params": list(self.parameters())}], hp.get("optimizer"), hp.lr,
                                     hp.weight_decay)
        return with_scheduler(optimizer, hp.get("lr_scheduler"))

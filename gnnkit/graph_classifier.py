"""The LightningModule for graph property prediction (``ogbg-*`` and their twins)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from gnnkit.metrics import make_graph_evaluator
from gnnkit.models.graph_gnn import GraphGNN, GraphGNNOptions
from gnnkit.optim import module_optimizer, with_scheduler
from gnnkit.task_module import STAGES, TaskModule


def _gnn_options(settings: Mapping[str, Any]) -> GraphGNNOptions:
    """The GNN's options from the model's settings (checked on construction)."""
    return GraphGNNOptions(**{field: settings[field] for field in GraphGNNOptions.__dataclass_fields__})


class GraphClassifier(TaskModule):
    """Graph classification (multi-task binary with missing labels, or multi-class) with OGB's metrics.

    The architecture is OGB's molecule example (:mod:`gnnkit.models.graph_gnn`); ``in_channels``,
    ``edge_channels``, ``out_channels``, ``molecular`` and ``task`` come from the datamodule
    (linked by ``gnnkit run``). Binary tasks train with BCE-with-logits over the labelled entries
    (NaN = missing, as in ogbg-molpcba), multi-class ones with cross-entropy. ``val_metric`` and
    ``test_metric`` are OGB's ``Evaluator`` on the whole split.

    Args:
        model: ``"gin"``, ``"gcn"`` or ``"mlp"`` (per-atom MLP layers and pooling, no message
            passing: the bag-of-atoms baseline).
        num_layers: Layers (OGB's example: 5).
        emb_dim: Hidden width (300).
        dropout: Dropout after every layer (0.5).
        virtual_node: OGB's virtual node (Gilmer et al., <https://arxiv.org/abs/1704.01212>).
        pooling: ``"mean"`` (OGB's default), ``"sum"`` or ``"attention"``.
        aggregation: ``"pyg"`` (PyG's ``GINEConv``/``GINConv``) or ``"gnnkit"``
            (:func:`gnnkit.sparse.spmm` on the batch's block-diagonal CSR).
        format: SpMM format of ``"gnnkit"`` aggregation: ``"auto"`` or a format name.
        edge_features: Use edge (bond) features in the messages.
        lr: Adam learning rate (0.001).
        weight_decay: Adam weight decay.
        in_channels: Node feature width (0 = none).
        edge_channels: Edge feature width (0 = none).
        out_channels: Tasks (binary) or classes (multi-class).
        molecular: Integer OGB atom/bond features (``AtomEncoder``/``BondEncoder``).
        task: ``{"name", "eval_metric", "num_tasks", "task_type"}`` of the dataset.
        optimizer: ``{"class_path", "init_args"}`` of the optimizer (``gnnkit run`` links the
            top-level ``optimizer:`` section here); ``None``: Adam with ``lr`` and ``weight_decay``.
        lr_scheduler: ``{"class_path", "init_args"}`` of an lr scheduler (the top-level
            ``lr_scheduler:`` section); ``None``: a constant learning rate (OGB's example).
    """

    WIDTH = "emb_dim"

    def __init__(
        self,
        model: str = "gin",
        num_layers: int = 5,
        emb_dim: int = 300,
        dropout: float = 0.5,
        virtual_node: bool = False,
        pooling: str = "mean",
        aggregation: str = "pyg",
        format: str = "auto",
        edge_features: bool = True,
        lr: float = 0.001,
        weight_decay: float = 0.0,
        in_channels: int = 9,
        edge_channels: int = 3,
        out_channels: int = 1,
        molecular: bool = True,
        task: dict[str, Any] | None = None,
        optimizer: dict[str, Any] | None = None,
        lr_scheduler: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.check_settings(self.hparams)
        self.task = task or {"name": "unknown", "eval_metric": "rocauc", "num_tasks": 1,
                             "task_type": "binary classification"}
        self.multiclass = self.task["task_type"] == "multiclass classification"
        options = _gnn_options(self.hparams)
        self.gnn = GraphGNN(options, out_channels)
        self.evaluator = make_graph_evaluator(self.task["name"], self.task["eval_metric"], self.task["num_tasks"])
        self._outputs: dict[str, list[tuple[Tensor, Tensor]]] = {s: [] for s in STAGES}

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> dict[str, Any]:  # noqa: D102 (TaskModule's)
        full = super().check_settings(settings)
        _gnn_options(full)  # with the constructor's defaults for the datamodule's shapes
        return full

    def report_info(self) -> dict[str, Any]:
        """``formats``: the SpMM plans of the ``aggregation="gnnkit"`` layers, for report.json."""
        return {"formats": self.gnn.format_report()} if self.hparams.aggregation == "gnnkit" else {}

    def forward(self, batch: Data) -> Tensor:
        """``[num_graphs, out_channels]`` logits."""
        return self.gnn(batch)

    def loss(self, logits: Tensor, y: Tensor) -> Tensor:
        """Cross-entropy (multi-class) or BCE-with-logits over the labelled (non-NaN) entries."""
        if self.multiclass:
            return nn.functional.cross_entropy(logits, y.view(-1).long())
        known = ~torch.isnan(y)
        return nn.functional.binary_cross_entropy_with_logits(logits[known], y[known].to(logits.dtype))

    def _step(self, batch: Data, stage: str) -> Tensor:
        logits = self(batch)
        loss = self.loss(logits, batch.y)
        self.log_loss(stage, loss, int(batch.num_graphs), prog_bar=stage != "test")
        self._outputs[stage].append((batch.y.detach(), logits.detach()))
        return loss

    def training_step(self, batch: Data, batch_idx: int) -> Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: Data, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: Data, batch_idx: int) -> None:
        self._step(batch, "test")

    def epoch_metric(self, y: Tensor, logits: Tensor) -> float:
        """OGB's metric of the predictions (NaN where it is undefined, e.g. ROC-AUC without positives)."""
        try:
            return super().epoch_metric(y, logits)
        except RuntimeError as err:
            if "labeled data available" in str(err):  # OGB: no task with both classes
                return float("nan")
            raise

    def configure_optimizers(self) -> torch.optim.Optimizer | dict[str, Any]:
        """Adam (OGB's example: lr 0.001, no weight decay), or the ``optimizer`` spec's class; then
        the ``lr_scheduler`` spec's scheduler, if any."""
        hp = self.hparams
        optimizer = module_optimizer(self, [{"params": list(self.parameters())}], hp.get("optimizer"), hp.lr,
                                     hp.weight_decay)
        return with_scheduler(optimizer, hp.get("lr_scheduler"))

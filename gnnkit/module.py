"""The LightningModule for node classification on gnnkit's graph batches."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from gnnkit.metrics import make_evaluator
from gnnkit.models.inrank import InRankOptions
from gnnkit.models.node_gnn import NodeGNN, NodeGNNOptions, resolve_model, resolve_model_setting
from gnnkit.optim import module_optimizer, with_scheduler
from gnnkit.partitioned.batch_norm import partition_batch_norms
from gnnkit.pseudo_labels import pseudo_label_loss, pseudo_label_weight
from gnnkit import setting_checks
from gnnkit.setting_checks import SettingRefused
from gnnkit.task_module import STAGES, RunLengthHooks, TaskModule
from gnnkit.tt import TTEmbedding, auto_config

EMBEDDINGS = ("full", "tt")
LR_SCHEDULES = ("constant", "cosine")
#: Which parameters ``weight_decay`` applies to: all, or only the first GNN layer's (Kipf & Welling).
WEIGHT_DECAY_SCOPES = ("all", "first_layer")


def batch_targets(batch: Data) -> Tensor:
    """Local indices of the nodes whose predictions count in ``batch``.

    Full-graph batches carry ``target`` (the split's node ids); neighbour-sampled batches put their
    ``batch_size`` seed nodes first.
    """
    target = getattr(batch, "target", None)
    if target is not None:
        return target
    return torch.arange(batch.batch_size, device=batch.y.device)


def _say_if_tt_is_not_smaller(config: Any, rank: int | None) -> None:
    """A warning when the cores cannot take ``rank`` (capped where a core's shape bounds it) or the
    TT table holds as many parameters as the dense one (a huge rank gave 0.91x without a word)."""
    capped = rank is not None and any(r < rank for r in config.ranks)
    if capped or config.num_params >= config.dense_params:
        note = f"model.tt_rank {rank}: capped where the cores' shapes bound it, {list(config.ranks)}; " \
            if capped else ""
        warnings.warn(f"gnnkit: {note}the TT embedding holds {config.num_params:,} parameters, "
                      f"{config.dense_params / config.num_params:.2f}x compression against the dense table's "
                      f"{config.dense_params:,}", stacklevel=3)


def _check_pseudo_labels(gamma: float, full_batch: bool, multiclass: bool) -> None:
    """One-line errors for a ``model.pseudo_label_gamma`` the run cannot use."""
    if not gamma > 0:
        raise ValueError(f"model.pseudo_label_gamma: expected > 0 (Izadi et al. sweep 1 to 10), got {gamma!r}")
    if not full_batch:
        raise ValueError("model.pseudo_label_gamma: needs full-graph training (data.batch_size: 0); a sampled "
                         "batch has no predictions for the nodes outside its seeds")
    if not multiclass:
        raise ValueError("model.pseudo_label_gamma: needs a multi-class task (pseudo-labels are argmax classes)")


def _gnn_options(settings: Mapping[str, Any]) -> NodeGNNOptions:
    """The layer stack's options from the model's settings (``full_batch`` caches GCN's normalisation)."""
    return NodeGNNOptions.from_settings(settings, cached=settings["full_batch"],
                                        inrank=InRankOptions.of(settings["inrank"], "model.inrank"))


class NodeClassifier(RunLengthHooks, TaskModule):
    """Node classification (multi-class, or multi-task binary) with OGB's metrics.

    ``in_channels``, ``out_channels``, ``num_nodes`` and the ``task`` come from the datamodule
    (linked automatically by ``gnnkit run``).

    Args:
        model: Architecture: ``"gcn"``, ``"sage"``, ``"gat"`` or ``"mlp"``.
        hidden_channels: Hidden width.
        num_layers: Number of layers.
        dropout: Dropout between layers.
        batch_norm: BatchNorm between layers.
        layer_norm: LayerNorm where ``batch_norm`` puts BatchNorm (with ``batch_norm: false``).
        residual: Pre-norm residual blocks around the layers, as Platonov et al. train GNNs on
            heterophilous graphs (<https://arxiv.org/abs/2302.11640>): input and output linear
            maps, and per layer ``h + dropout(linear(act(dropout(layer(norm(h))))))``
            (:class:`~gnnkit.models.node_gnn.NodeGNNOptions`).
        heads: GAT attention heads of the hidden layers.
        lr: Adam learning rate (the default optimizer's; an ``optimizer`` spec carries its own).
        weight_decay: Adam weight decay (L2 penalty added to the gradient; the default optimizer's).
        weight_decay_scope: ``"all"`` parameters (default), or ``"first_layer"``: only the first GNN
            layer's (with ``residual``, the input map's: the one reading the features), as Kipf &
            Welling regularise their GCN (<https://arxiv.org/abs/1609.02907>, section 5.2).
        input_dropout: Dropout on the input features before the first layer (the GCN and GAT
            papers drop every layer's input: 0.5 and 0.6).
        activation: Between layers: ``"relu"`` (default), ``"elu"`` (GAT,
            <https://arxiv.org/abs/1710.10903>) or ``"gelu"`` (Platonov et al.'s residual stacks).
        attention_dropout: GAT: dropout on the normalised attention coefficients (0.6 in the paper).
        output_heads: GAT: attention heads of the output layer, averaged (1 in the paper on Cora
            and Citeseer, 8 on Pubmed).
        lr_schedule: ``"constant"`` (default), or ``"cosine"``: the learning rate falls from ``lr``
            to 0 along a half cosine over ``trainer.max_epochs`` (per step over the estimated
            steps when training is bounded by steps), SGDR's annealing without restarts
            (Loshchilov and Hutter, ICLR 2017, <https://arxiv.org/abs/1608.03983>).
        in_channels: Node feature width (0 for a featureless graph, which needs ``embedding_dim``).
        out_channels: Number of classes (multi-class) or tasks (multi-task).
        num_nodes: Number of nodes (for the learnable embedding table).
        embedding_dim: Width of a learnable per-node embedding, concatenated to the features
            (or replacing them when there are none); 0 = none.
        task: ``{"name", "eval_metric", "num_tasks", "task_type"}`` of the dataset.
        full_batch: Train on the whole graph each step (enables GCN's normalisation cache).
        aggregation: ``"pyg"`` (PyG's layers) or ``"gnnkit"`` (aggregation through
            :func:`gnnkit.sparse.spmm`, GCN/SAGE/GIN).
        format: SpMM format of ``"gnnkit"`` aggregation: ``"auto"`` (learned selector, per layer)
            or a format name.
        embedding: Kind of the learnable table when ``embedding_dim > 0``: ``"full"`` (an
            ``nn.Embedding``) or ``"tt"`` (a :class:`~gnnkit.tt.TTEmbedding`, shapes and ranks
            chosen by :func:`~gnnkit.tt.auto_config`). Default ``"full"``.
        replace_features: Feed only the embedding to the GNN, ignoring node features.
        tt_compression: TT: smallest compression ratio (dense / TT parameters) to reach; the
            largest rank that meets it is used. ``None`` uses ``tt_rank``.
        tt_rank: TT: uniform rank when ``tt_compression`` is ``None`` (default 16).
        tt_num_cores: TT: number of cores.
        tt_init: TT: ``"orthogonal"`` or ``"normal"``.
        tt_hot_rows: TT: cache the decompressed rows of this many highest-degree nodes (needs the
            datamodule's graph at ``setup``).
        tt_reorder: TT: store node ``v`` in TT row ``order[v]`` from the dataset's
            ``extra.node_order`` (preprocess with ``reorder: partition`` or ``rcm``); the order is saved in
            checkpoints.
        optimizer: ``{"class_path", "init_args"}`` of the optimizer (``gnnkit run`` links the top-level
            ``optimizer:`` section here: ``--optimizer SGD --optimizer.lr 0.1``); its ``init_args`` hold
            its ``lr`` and ``weight_decay``, and ``lr``/``weight_decay`` above are then unused.
            ``None`` (default): Adam with ``lr`` and ``weight_decay``.
        lr_scheduler: ``{"class_path", "init_args"}`` of an lr scheduler (the top-level
            ``lr_scheduler:`` section), stepped per epoch; ``None`` (default) uses ``lr_schedule``.
        low_rank: ``None`` (default, full rank) or ``"inrank"``: the GNN's linear maps become InRank
            layers whose rank grows during training (Zhao et al., <https://arxiv.org/abs/2306.11250>;
            :mod:`gnnkit.models.inrank`); ``report.json`` gains ``low_rank: {ranks, max_ranks,
            params, full_params}``.
        inrank: Fields of :class:`~gnnkit.models.inrank.InRankOptions` (``init_rank``, ``buffer``,
            ``threshold``, ``warmup`` and ``gap`` in training batches (one optimizer step each without
            gradient accumulation), ``max_rank_fraction``, ``max_params_fraction``, ``init_scale``,
            ``frozen_base``); the reference's defaults where unset.
        pseudo_label_gamma: ``None`` (default), or Izadi et al.'s semi-supervised objective
            (<https://arxiv.org/abs/2008.09624>, :mod:`gnnkit.pseudo_labels`): the training loss
            gains ``(epoch / max_epochs) ** gamma`` times the cross-entropy of the nodes outside the
            training split against the model's own predictions. Full-graph multi-class training
            on one graph only (not partition-parallel).
    """

    def __init__(
        self,
        model: str = "sage",
        hidden_channels: int = 256,
        num_layers: int = 3,
        dropout: float = 0.5,
        batch_norm: bool = True,
        layer_norm: bool = False,
        residual: bool = False,
        heads: int = 1,
        lr: float = 0.01,
        weight_decay: float = 0.0,
        weight_decay_scope: str = "all",
        input_dropout: float = 0.0,
        activation: str = "relu",
        attention_dropout: float = 0.0,
        output_heads: int = 1,
        lr_schedule: str = "constant",
        in_channels: int = 0,
        out_channels: int = 2,
        num_nodes: int = 0,
        embedding_dim: int = 0,
        task: dict[str, Any] | None = None,
        full_batch: bool = False,
        aggregation: str = "pyg",
        format: str = "auto",
        embedding: str = "full",
        replace_features: bool = False,
        tt_compression: float | None = None,
        tt_rank: int | None = None,
        tt_num_cores: int = 3,
        tt_init: str = "orthogonal",
        tt_hot_rows: int = 0,
        tt_reorder: bool = False,
        optimizer: dict[str, Any] | None = None,
        lr_scheduler: dict[str, Any] | None = None,
        low_rank: str | None = None,
        inrank: dict[str, Any] | None = None,
        pseudo_label_gamma: float | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.check_settings(self.hparams)
        self.task = task or {"name": "unknown", "eval_metric": "acc", "num_tasks": 1,
                             "task_type": "multiclass classification"}
        self.multiclass = self.task["task_type"] == "multiclass classification"
        if (in_channels == 0 or replace_features) and embedding_dim == 0:
            raise ValueError(
                "model.embedding_dim: the dataset has no node features (or they are replaced); set an "
                "embedding width (e.g. --model.embedding_dim 64)"
            )
        if embedding_dim and num_nodes <= 0:
            raise ValueError("model.num_nodes: a learnable embedding needs the number of nodes")
        if pseudo_label_gamma is not None:
            _check_pseudo_labels(pseudo_label_gamma, full_batch, self.multiclass)
        self.embedding: nn.Module | None = None
        if embedding_dim and embedding == "tt":
            config = auto_config(
                num_nodes, embedding_dim, num_cores=tt_num_cores, compression=tt_compression,
                rank=None if tt_compression is not None else tt_rank, init=tt_init, hot_rows=tt_hot_rows,
            )
            if tt_compression is not None and tt_rank is not None:  # the rank was dropped silently
                warnings.warn(f"gnnkit: model.tt_rank {tt_rank} is unused: model.tt_compression {tt_compression} "
                              "sets the TT ranks (--model.tt_compression null lets the rank set them)", stacklevel=2)
            _say_if_tt_is_not_smaller(config, tt_rank if tt_compression is None else None)
            self.embedding = TTEmbedding(config, order=torch.arange(num_nodes) if tt_reorder else None)
        elif embedding_dim:
            self.embedding = nn.Embedding(num_nodes, embedding_dim)
        features = 0 if replace_features else in_channels
        options = _gnn_options(self.hparams)
        self.gnn = NodeGNN(resolve_model(model), features + embedding_dim, hidden_channels, out_channels, options)
        self.evaluator = make_evaluator(self.task["name"], self.task["eval_metric"], self.task["num_tasks"])
        self._outputs: dict[str, list[tuple[Tensor, Tensor]]] = {s: [] for s in STAGES}

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> dict[str, Any]:  # noqa: D102 (TaskModule's)
        full = super().check_settings(settings)
        if full["lr_schedule"] not in LR_SCHEDULES:
            raise ValueError(f"model.lr_schedule: expected one of {list(LR_SCHEDULES)}, got {full['lr_schedule']!r}")
        if full["lr_scheduler"] is not None and full["lr_schedule"] != "constant":
            raise ValueError(f"model.lr_schedule: {full['lr_schedule']!r} and an lr_scheduler: section both set "
                             "the learning rate; keep one")
        if full["weight_decay_scope"] not in WEIGHT_DECAY_SCOPES:
            raise ValueError(f"model.weight_decay_scope: expected one of {list(WEIGHT_DECAY_SCOPES)}, "
                             f"got {full['weight_decay_scope']!r}")
        if full["embedding"] not in EMBEDDINGS:
            raise ValueError(f"model.embedding: expected one of {list(EMBEDDINGS)}, got {full['embedding']!r}")
        setting_checks.optional_at_least("model.tt_rank", full["tt_rank"], 1, "an integer >= 1 (or null)")
        resolve_model_setting(full["model"])
        _gnn_options(full)
        return full

    def report_info(self) -> dict[str, Any]:
        """Keys this model adds to the run's ``report.json``.

        ``formats``: the SpMM formats of each ``aggregation="gnnkit"`` layer: its latest plan and
        how often each pair ran (``{"layer0": {"forward", "backward", "width", "source", "counts"}}``).
        ``embedding``: the learnable table's ``kind`` (``"none"``, ``"full"``, ``"tt"``),
        ``num_params`` and ``compression`` (TT: also shapes, ranks, order and memory).
        """
        info: dict[str, Any] = {}
        if self.hparams.aggregation == "gnnkit":
            info["formats"] = self.gnn.format_report()
        info.update(self._embedding_info())
        low_rank = self.gnn.low_rank_report()
        if low_rank is not None:
            info["low_rank"] = low_rank
        return info

    def _input_aggregation(self) -> str:
        """What the first layer aggregates, for ``data.aggregate_input`` (one-line errors)."""
        if self.embedding is not None:
            raise ValueError("data.aggregate_input: the input holds a learnable embedding, whose aggregate "
                             "changes every step; drop model.embedding_dim or data.aggregate_input")
        return self.gnn.input_aggregation()

    def setup(self, stage: str) -> None:
        """Partition-parallel runs: batch statistics over every partition (sampled ones too: a rank's
        batches come from its own cluster of the graph). TT tables: give them the dataset's node
        order and hot (highest-degree) nodes. A setting that cannot work with the data or the ranks
        is refused with :class:`~gnnkit.setting_checks.SettingRefused` (one line from ``gnnkit run``)."""
        try:
            self._setup(stage)
        except ValueError as err:
            raise SettingRefused(str(err)) from err

    def _setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        partitioned = getattr(datamodule, "partitions", None) is not None
        if self.hparams.get("pseudo_label_gamma") is not None:
            if partitioned:
                raise ValueError("model.pseudo_label_gamma: not available with data.partitions (each rank sees "
                                 "only its partition's nodes)")
            if stage == "fit" and not (self.trainer.max_epochs or 0) > 0:
                raise ValueError("model.pseudo_label_gamma: needs trainer.max_epochs (the weight grows over the "
                                 f"epochs), got {self.trainer.max_epochs!r}")
        if partitioned and getattr(datamodule, "full_batch", True):
            if self.gnn.aggregation != "gnnkit" and self.gnn.model != "mlp":
                raise ValueError("data.partitions: partition-parallel layers need model.aggregation: gnnkit")
            if datamodule.hparams.get("aggregate_input"):
                datamodule.input_aggregation = self._input_aggregation()
        if partitioned:  # a rank's rows (sampled: its seeds' blocks) come from its own cluster of the graph,
            partition_batch_norms(self.gnn)  # so the statistics are every rank's: rank 0's alone trained worse
        if not isinstance(self.embedding, TTEmbedding):
            return
        graph = getattr(datamodule, "graph", None)
        if self.hparams.tt_reorder:
            order = None if graph is None else graph.extra.get("node_order")
            if order is None:
                raise ValueError(
                    "model.tt_reorder: the dataset has no node order; preprocess it with reorder: partition or rcm "
                    "(PreprocessOptions.reorder)"
                )
            self.embedding.set_order(order)
        if self.hparams.tt_hot_rows and graph is not None:
            self.embedding.set_hot_nodes_by_degree(graph.degree())

    def _embedding_info(self) -> dict[str, Any]:
        """``{"embedding": {"kind", "num_params", "compression", ...}}`` of the learnable table."""
        if self.embedding is None:
            return {"embedding": {"kind": "none", "num_params": 0, "compression": None}}
        if isinstance(self.embedding, TTEmbedding):
            return {"embedding": self.embedding.describe()}
        return {"embedding": {"kind": "full", "num_params": self.embedding.weight.numel(), "compression": 1.0,
                              "num_embeddings": self.embedding.num_embeddings,
                              "embedding_dim": self.embedding.embedding_dim}}

    def node_input(self, batch: Data) -> Tensor:
        """Features of the batch's nodes, with the learnable embedding attached if any."""
        parts = []
        if batch.x is not None and self.hparams.in_channels and not self.hparams.replace_features:
            parts.append(batch.x)
        if self.embedding is not None:
            parts.append(self.embedding(batch.n_id))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)

    def forward(self, batch: Data) -> Tensor:
        """Logits for the batch's target nodes."""
        return self.node_logits(batch)[batch_targets(batch)]

    def node_logits(self, batch: Data) -> Tensor:
        """Logits of every node of the batch."""
        return self.gnn(self.node_input(batch), getattr(batch, "edge_index", None), adj=getattr(batch, "adj", None),
                        num_sampled_nodes=getattr(batch, "num_sampled_nodes", None),
                        num_sampled_edges=getattr(batch, "num_sampled_edges", None),
                        halo=getattr(batch, "halo", None),
                        input_aggregated=getattr(batch, "input_aggregated", False),
                        edges_by_destination=getattr(batch, "edges_by_destination", False))

    def _loss(self, logits: Tensor, y: Tensor) -> Tensor:
        if self.multiclass:
            return nn.functional.cross_entropy(logits, y)
        known = ~torch.isnan(y)
        return nn.functional.binary_cross_entropy_with_logits(logits[known], y[known])

    def _step(self, batch: Data, stage: str) -> Tensor:
        every = self.node_logits(batch)
        targets = batch_targets(batch)
        logits = every[targets]
        y = batch.y[targets]
        loss = self._loss(logits, y)
        # A padding batch (a rank keeping step with the others in sampled partition-parallel runs)
        # weighs nothing: in the loss, the logged mean and the metric.
        padding = bool(getattr(batch, "padding", False))
        self.log_loss(stage, loss, 0 if padding else y.shape[0], prog_bar=stage != "test")
        kept = slice(0, 0) if padding else slice(None)
        self._outputs[stage].append((y[kept].detach(), logits[kept].detach()))
        if stage == "train" and self.hparams.get("pseudo_label_gamma") is not None:
            # logged above: the supervised loss alone, comparable across runs
            weight = pseudo_label_weight(self.current_epoch, self.trainer.max_epochs, self.hparams.pseudo_label_gamma)
            loss = loss + weight * pseudo_label_loss(every, targets)
        # A partition's loss counts in proportion to its share of the split (or of the step's seeds),
        # so the ranks' averaged gradients are the whole graph's (1 elsewhere).
        return loss * getattr(batch, "loss_scale", 1.0)

    def training_step(self, batch: Data, batch_idx: int) -> Tensor:
        return self._step(batch, "train")

    def on_train_batch_end(self, outputs: Any, batch: Data, batch_idx: int) -> None:
        """Let InRank layers count the optimizer step and grow their rank when due."""
        if self.hparams.get("low_rank"):
            self.gnn.update_ranks()
        super().on_train_batch_end(outputs, batch, batch_idx)

    def validation_step(self, batch: Data, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: Data, batch_idx: int) -> None:
        self._step(batch, "test")

    def parameter_groups(self, decay: float | None = None) -> list[dict[str, Any]]:
        """The optimizer's parameter groups: every parameter in one, or with
        ``weight_decay_scope="first_layer"`` the first GNN layer's apart and the rest undecayed.

        Args:
            decay: ``weight_decay`` of the decayed group; ``None`` leaves it to the optimizer's own
                default (an ``optimizer`` spec's ``init_args``).
        """
        def group(params: list[nn.Parameter], weight_decay: float | None) -> dict[str, Any]:
            return {"params": params} if weight_decay is None else {"params": params, "weight_decay": weight_decay}

        if self.hparams.weight_decay_scope == "all":
            return [group(list(self.parameters()), decay)]
        first = list(self.gnn.input_layer.parameters())
        chosen = {id(p) for p in first}
        rest = [p for p in self.parameters() if id(p) not in chosen]
        return [group(first, decay), group(rest, 0.0)]

    def configure_optimizers(self) -> torch.optim.Optimizer | dict[str, Any]:
        """Adam (``lr``, ``weight_decay``), or the ``optimizer`` spec's class; then the
        ``lr_scheduler`` spec's scheduler, or ``lr_schedule``. An optimizer with a ``bind(module)``
        method (K-FAC, which hooks the linear layers) is bound to this module."""
        spec = self.hparams.get("optimizer")
        groups = self.parameter_groups(self.hparams.weight_decay if spec is None else None)
        optimizer = module_optimizer(self, groups, spec, self.hparams.lr)
        if self.hparams.get("lr_scheduler") is not None:
            return with_scheduler(optimizer, self.hparams.lr_scheduler)
        if self.hparams.lr_schedule == "constant":
            return optimizer
        epochs = self.trainer.max_epochs
        if epochs is not None and epochs > 0:
            interval, length = "epoch", epochs
        else:
            interval, length = "step", max(1, int(self.trainer.estimated_stepping_batches))
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=length)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": interval}}

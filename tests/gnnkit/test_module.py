import lightning.pytorch as pl
import pytest
import torch

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.module import NodeClassifier
from gnnkit.task_module import run_length
from gnnkit.sparse import decision
from gnnkit.sparse.decision import RunLength


def _module(dm, **kwargs):
    return NodeClassifier(in_channels=dm.num_features, out_channels=dm.num_classes, num_nodes=dm.num_nodes,
                          task=dm.task, full_batch=dm.full_batch, **kwargs)


def _fit(dm, model, epochs):
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=dm)
    return trainer.test(model, datamodule=dm, verbose=False)[0]["test_metric"]


@pytest.fixture(scope="module")
def tiny():
    return GraphDataModule("synthetic-tiny")


def test_gnn_beats_mlp_on_a_synthetic_graph(tiny):
    pl.seed_everything(0)
    sage = _fit(tiny, _module(tiny, model="sage", hidden_channels=64, num_layers=2), 40)
    pl.seed_everything(0)
    mlp = _fit(tiny, _module(tiny, model="mlp", hidden_channels=64, num_layers=2), 40)
    assert sage > mlp + 0.05, (sage, mlp)


def test_residual_layer_norm_stack_trains_and_its_settings_are_checked(tiny):
    """The heterophily recipe's stack (Platonov et al.) learns the synthetic graph; LayerNorm with
    BatchNorm left on is one line naming the recipe's field."""
    with pytest.raises(ValueError, match="^model.layer_norm: LayerNorm replaces BatchNorm; set batch_norm: false"):
        NodeClassifier.check_settings({"layer_norm": True})
    pl.seed_everything(0)
    model = _module(tiny, model="sage", hidden_channels=32, num_layers=2, residual=True, layer_norm=True,
                    batch_norm=False, activation="gelu", dropout=0.2, lr=0.003)
    assert isinstance(model.gnn.norms[0], torch.nn.LayerNorm) and model.gnn.stream is not None
    pl.seed_everything(0)
    mlp = _fit(tiny, _module(tiny, model="mlp", hidden_channels=32, num_layers=2), 30)
    assert _fit(tiny, model, 30) > mlp + 0.05


@pytest.mark.parametrize(("setting", "line"), [
    ({"model": "gcn2"}, r"^model.model: Could not resolve model 'gcn2' among choices \['gat'"),
    ({"aggregation": "dgl"}, r"^model.aggregation: Could not resolve aggregation 'dgl' among choices \['pyg'"),
])
def test_an_unknown_choice_names_the_recipe_field(setting, line):
    with pytest.raises(ValueError, match=line):
        NodeClassifier.check_settings(setting)


def test_featureless_graph_needs_and_uses_an_embedding(tiny):
    with pytest.raises(ValueError, match="model.embedding_dim"):
        NodeClassifier(in_channels=0, out_channels=3, num_nodes=10)
    model = NodeClassifier(in_channels=0, out_channels=tiny.num_classes, num_nodes=tiny.num_nodes,
                           embedding_dim=16, task=tiny.task, model="gcn", full_batch=True)
    batch = next(iter(tiny.train_dataloader()))
    batch.x = None
    assert model(batch).shape == (tiny.graph.split["train"].numel(), tiny.num_classes)


def test_multitask_binary_loss_skips_missing_labels():
    task = {"name": "x", "eval_metric": "rocauc", "num_tasks": 3, "task_type": "binary classification"}
    model = NodeClassifier(in_channels=4, out_channels=3, task=task)
    logits = torch.zeros(4, 3)
    y = torch.tensor([[1.0, 0.0, float("nan")]] * 4)
    assert torch.isfinite(model._loss(logits, y))


def test_fitting_tells_auto_the_run_length(tiny, monkeypatch):
    assert run_length(30, -1, full_batch=True) == RunLength(30, 2)  # a training step and an evaluation
    assert run_length(-1, 500, full_batch=False) == RunLength(500, 1)
    assert run_length(None, -1, full_batch=True) is None  # unbounded: auto assumes its default
    seen = []
    real = decision.decide
    monkeypatch.setattr(decision, "decide", lambda *a, **k: seen.append(decision.current_run_length()) or real(*a, **k))
    model = _module(tiny, model="gcn", hidden_channels=8, num_layers=2, aggregation="gnnkit")
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, datamodule=tiny)
    assert seen and set(seen) == {RunLength(2, 2)} and decision.current_run_length() == decision.DEFAULT_RUN


def test_sampled_training_runs(tiny):
    dm = GraphDataModule("synthetic-tiny", batch_size=256, num_neighbors=[5, 5])
    pl.seed_everything(0)
    acc = _fit(dm, _module(dm, model="sage", hidden_channels=32, num_layers=2), 3)
    assert acc > 1.0 / dm.num_classes


class _RecordLr(pl.Callback):
    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


@pytest.mark.parametrize("bound", ["epochs", "steps"])
def test_cosine_schedule_anneals_over_the_run(tiny, bound):
    with pytest.raises(ValueError, match="model.lr_schedule"):
        _module(tiny, lr_schedule="step")
    record = _RecordLr()
    limit = {"max_epochs": 4} if bound == "epochs" else {"max_epochs": -1, "max_steps": 4}
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[record], **limit)
    trainer.fit(_module(tiny, model="mlp", hidden_channels=8, num_layers=2, lr=0.1, lr_schedule="cosine"),
                datamodule=tiny)
    assert record.lrs == pytest.approx([0.1 * (1 + torch.cos(torch.tensor(torch.pi * e / 4)).item()) / 2
                                        for e in range(4)])


@pytest.mark.parametrize("scope", ["all", "first_layer"])
def test_weight_decay_scope(scope):
    """Kipf & Welling decay only the first layer: a step on a zero loss moves exactly the decayed
    parameters (Adam's L2 term is their only gradient)."""
    model = NodeClassifier(in_channels=4, out_channels=3, model="gcn", hidden_channels=8, num_layers=2,
                           weight_decay=5e-4, weight_decay_scope=scope)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = model.configure_optimizers()
    (sum(p.sum() for p in model.parameters()) * 0).backward()
    optimizer.step()
    moved = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    nonzero = {name for name, p in before.items() if p.any()}  # zero-initialised biases get no L2 gradient
    first = {f"gnn.layers.0.{name}" for name, _ in model.gnn.layers[0].named_parameters()}
    assert moved == (nonzero & first if scope == "first_layer" else nonzero)
    assert moved and (scope == "all") == bool(moved - first)
    with pytest.raises(ValueError, match="model.weight_decay_scope: expected one of"):
        NodeClassifier(in_channels=4, out_channels=3, weight_decay_scope="last")


def test_first_layer_decay_of_a_residual_stack_is_the_input_maps():
    """The map reading the features is the residual stack's input map, not its first block."""
    model = NodeClassifier(in_channels=4, out_channels=3, model="sage", hidden_channels=8, num_layers=2,
                           residual=True, batch_norm=False, weight_decay=5e-4, weight_decay_scope="first_layer")
    decayed = {id(p) for g in model.parameter_groups(5e-4) if g["weight_decay"] > 0 for p in g["params"]}
    assert decayed == {id(p) for p in model.gnn.stream.input.parameters()}


def test_a_padding_batch_weighs_nothing(monkeypatch):
    """A rank keeping step in sampled partition-parallel training trains a padding batch: its loss
    counts 0, it logs with batch size 0 and adds no rows to the epoch metric."""
    from torch_geometric.data import Data

    model = NodeClassifier(in_channels=4, out_channels=3, hidden_channels=8, num_layers=2, dropout=0.0)
    logged = []
    monkeypatch.setattr(model, "log", lambda name, value, **kw: logged.append((name, float(value), kw["batch_size"])))
    edge_index = torch.tensor([[1, 0], [0, 1]])
    batch = Data(x=torch.randn(2, 4), y=torch.tensor([0, 2]), edge_index=edge_index, batch_size=2,
                 num_sampled_nodes=[2], num_sampled_edges=[2], loss_scale=0.7)
    first = float(model.training_step(batch, 0))
    batch.padding, batch.loss_scale = True, 0.0
    assert first > 0 and model.training_step(batch, 1) == 0 and logged == []  # the loss is logged at the epoch's end
    assert [y.numel() for y, _ in model._outputs["train"]] == [2, 0]
    model._log_epoch_loss("train")
    assert logged == [("train_loss", pytest.approx(first / 0.7), 2)]  # the unscaled loss of the real batch alone


def test_an_epoch_that_did_not_finish_leaves_nothing_to_the_next(monkeypatch):
    """A fit that fails mid-epoch leaves its partial loss sum and predictions on the module; the next
    epoch (another fit of the same module) starts from nothing. The sum is float32 whatever the
    loss's dtype (a float16 sum overflows past 65504)."""
    from torch_geometric.data import Data

    model = NodeClassifier(in_channels=4, out_channels=3, hidden_channels=8, num_layers=2, dropout=0.0)
    logged = []
    monkeypatch.setattr(model, "log", lambda name, value, **kw: logged.append((name, float(value), kw["batch_size"])))
    batch = Data(x=torch.randn(2, 4), y=torch.tensor([0, 2]), edge_index=torch.tensor([[1, 0], [0, 1]]),
                 batch_size=2, num_sampled_nodes=[2], num_sampled_edges=[2])
    model.training_step(batch, 0)  # ...and the fit fails here
    model.on_train_epoch_start()  # the next fit's first epoch
    model.log_loss("train", torch.tensor(60000.0, dtype=torch.float16), 4)
    model._log_epoch_loss("train")
    assert logged == [("train_loss", 60000.0, 4)] and model._outputs["train"] == []


def test_input_aggregation_refuses_a_learnable_embedding():
    model = NodeClassifier(in_channels=4, out_channels=3, num_nodes=10, embedding_dim=8, model="gcn",
                           aggregation="gnnkit")
    with pytest.raises(ValueError, match="data.aggregate_input: the input holds a learnable embedding"):
        model._input_aggregation()
    assert NodeClassifier(in_channels=4, out_channels=3, model="sage", aggregation="gnnkit")._input_aggregation() == "mean"


class _SeenAtEpochEnd(pl.Callback):
    """What a callback's end-of-epoch hook sees (the progress bar's runs before the module's) and
    what the epoch logged in the end (read when the next epoch starts, or training ends)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float]] = []
        self.logged: list[tuple[float, float]] = []

    @staticmethod
    def _pair(metrics) -> tuple[float, float]:
        return float(metrics["train_loss"]), float(metrics["train_metric"])

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.seen.append(self._pair(trainer.progress_bar_metrics))

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch > 0:
            self.logged.append(self._pair(trainer.callback_metrics))

    def on_train_end(self, trainer, pl_module) -> None:
        self.logged.append(self._pair(trainer.callback_metrics))


@pytest.mark.parametrize("max_steps", [-1, 4])
def test_callbacks_end_of_epoch_hooks_see_this_epochs_training_loss_and_metric(max_steps):
    """The training loss and metric are logged when the epoch's last batch ends, before Lightning runs
    the callbacks' epoch-end hooks; an epoch cut short by max_steps logs them at its end instead."""
    dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[3, 3])
    seen = _SeenAtEpochEnd()
    trainer = pl.Trainer(max_epochs=2, max_steps=max_steps, limit_train_batches=3, limit_val_batches=1,
                         accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[seen])
    trainer.fit(_module(dm, model="sage", hidden_channels=8, num_layers=2), datamodule=dm)
    assert len(seen.logged) == 2 and len({loss for loss, _ in seen.logged}) == 2
    if max_steps == -1:
        assert seen.seen == seen.logged
    else:  # the second epoch stopped after its first batch: its figures are logged at its end
        assert seen.seen[0] == seen.logged[0] and len(seen.seen) == 2


def test_with_several_ranks_the_epoch_is_logged_at_its_end_only(monkeypatch):
    """With several ranks the epoch's figures wait for the module's epoch-end hook, where Lightning
    reduces them on every rank: read at the last batch by a rank-0-only callback (the progress bar),
    the reduction would run on rank 0 alone and the ranks would wait in different collectives."""
    from types import SimpleNamespace

    from torch_geometric.data import Data

    model = NodeClassifier(in_channels=4, out_channels=3, hidden_channels=8, num_layers=2, dropout=0.0)
    logged = []
    monkeypatch.setattr(model, "log", lambda name, value, **kw: logged.append(name))
    monkeypatch.setattr(model, "_epoch_metric", lambda stage: None)
    batch = Data(x=torch.randn(2, 4), y=torch.tensor([0, 2]), edge_index=torch.tensor([[1, 0], [0, 1]]),
                 batch_size=2, num_sampled_nodes=[2], num_sampled_edges=[2])
    for world_size, expected in ((2, []), (1, ["train_loss"])):
        model.trainer = SimpleNamespace(is_last_batch=True, world_size=world_size)
        logged.clear()
        model.training_step(batch, 0)
        model.on_train_batch_end(None, batch, 0)
        assert logged == expected
        model.on_train_epoch_end()
        assert logged == ["train_loss"]  # logged once, where the epoch ends


@pytest.mark.parametrize("full_batch", [True, False])
def test_partition_parallel_runs_normalise_over_every_ranks_rows(full_batch):
    """Sampled partition-parallel runs normalised each rank's batches, drawn from its own cluster of
    the graph, on their own: quickstart with [10, 5] fan-outs on 2 ranks reached train loss 0.69
    after 8 epochs (0.53 with the statistics of both ranks, 0.53 in one process)."""
    from types import SimpleNamespace

    from gnnkit.partitioned.batch_norm import PartitionBatchNorm

    model = NodeClassifier(in_channels=4, out_channels=3, hidden_channels=8, num_layers=3, batch_norm=True,
                           aggregation="gnnkit")
    datamodule = SimpleNamespace(partitions=2, full_batch=full_batch, hparams={})
    model.trainer = SimpleNamespace(datamodule=datamodule, max_epochs=1)
    model.setup("fit")
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    assert len(norms) == 2 and all(type(m) is PartitionBatchNorm for m in norms)

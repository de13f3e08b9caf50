import lightning.pytorch as pl
import pytest
import torch
from torch.nn import functional as F

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.module import NodeClassifier
from gnnkit.pseudo_labels import pseudo_label_loss, pseudo_label_weight


def test_weight_grows_from_the_first_epoch_to_one():
    weights = [pseudo_label_weight(epoch, 200, 5.0) for epoch in range(200)]
    assert weights[0] == pytest.approx((1 / 200) ** 5)  # ssp's first epoch is 1
    assert weights[-1] == 1.0
    assert all(a < b for a, b in zip(weights, weights[1:]))
    assert pseudo_label_weight(10, 10, 2.0) == 1.0  # past the end it stays at 1
    with pytest.raises(ValueError, match="max_epochs"):
        pseudo_label_weight(0, 0, 1.0)


def test_loss_is_the_unlabelled_nodes_cross_entropy_against_their_argmax():
    torch.manual_seed(0)
    logits = torch.randn(12, 4, requires_grad=True)
    labelled = torch.tensor([0, 5, 7])
    loss = pseudo_label_loss(logits, labelled)
    rest = [i for i in range(12) if i not in (0, 5, 7)]
    expected = torch.stack([F.cross_entropy(logits[i:i + 1], logits[i:i + 1].argmax(-1)) for i in rest]).mean()
    assert torch.allclose(loss, expected)
    loss.backward()
    assert logits.grad[labelled].abs().max() == 0  # labelled rows take no pseudo-label gradient
    assert logits.grad[rest].abs().min() > 0
    assert pseudo_label_loss(logits.detach(), torch.arange(12)).item() == 0.0


@pytest.fixture(scope="module")
def tiny():
    return GraphDataModule("synthetic-tiny")


def _module(dm, **kwargs):
    return NodeClassifier(in_channels=dm.num_features, out_channels=dm.num_classes, num_nodes=dm.num_nodes,
                          task=dm.task, full_batch=dm.full_batch, model="gcn", hidden_channels=16, num_layers=2,
                          **kwargs)


def test_training_loss_adds_the_weighted_pseudo_label_term(tiny):
    pl.seed_everything(0)
    plain, semi = _module(tiny), _module(tiny, pseudo_label_gamma=2.0)
    semi.load_state_dict(plain.state_dict())
    trainer = pl.Trainer(max_epochs=4, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    for model in (plain, semi):
        model.trainer = trainer
        model.log = lambda *args, **kwargs: None
    batch = next(iter(tiny.train_dataloader()))
    plain.eval(), semi.eval()  # no dropout: both see the same logits
    supervised = plain.training_step(batch, 0)
    total = semi.training_step(batch, 0)
    expected = supervised + (1 / 4) ** 2.0 * pseudo_label_loss(plain.node_logits(batch), batch.target)
    assert torch.allclose(total, expected)
    assert semi.validation_step(batch, 0) is None  # evaluation keeps the supervised loss only


def test_fit_with_pseudo_labels_learns(tiny):
    pl.seed_everything(0)
    model = _module(tiny, pseudo_label_gamma=3.0)
    trainer = pl.Trainer(max_epochs=30, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=tiny)
    assert trainer.test(model, datamodule=tiny, verbose=False)[0]["test_metric"] > 0.6


@pytest.mark.parametrize("kwargs, message", [
    ({"pseudo_label_gamma": 0.0}, "expected > 0"),
    ({"pseudo_label_gamma": 1.0, "full_batch": False}, "needs full-graph training"),
])
def test_unusable_settings_raise_one_line_errors(tiny, kwargs, message):
    base = {"in_channels": 4, "out_channels": 3, "full_batch": True}
    with pytest.raises(ValueError, match=f"model.pseudo_label_gamma: {message}"):
        NodeClassifier(**{**base, **kwargs})
    task = {"name": "x", "eval_metric": "rocauc", "num_tasks": 3, "task_type": "binary classification"}
    with pytest.raises(ValueError, match="multi-class"):
        NodeClassifier(in_channels=4, out_channels=3, full_batch=True, task=task, pseudo_label_gamma=1.0)


def test_an_unbounded_run_is_refused_at_setup(tiny):
    model = _module(tiny, pseudo_label_gamma=1.0)
    trainer = pl.Trainer(max_epochs=-1, max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(ValueError, match="model.pseudo_label_gamma: needs trainer.max_epochs"):
        trainer.fit(model, datamodule=tiny)

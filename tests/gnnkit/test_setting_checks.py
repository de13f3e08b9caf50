"""A recipe's numeric settings are refused in one line naming the field, when the classes are built."""

from __future__ import annotations

import pytest

from gnnkit import setting_checks


@pytest.mark.parametrize(("value", "ok"), [(0, True), (5, True), (-1, False), (2.0, False), (True, False),
                                           ("3", False), (None, False)])
def test_at_least_takes_ints_only(value, ok):
    if ok:
        setting_checks.at_least("data.batch_size", value, 0, "a size >= 0")
    else:
        with pytest.raises(ValueError, match=r"^data.batch_size: expected a size >= 0, got "):
            setting_checks.at_least("data.batch_size", value, 0, "a size >= 0")
    setting_checks.optional_at_least("data.eval_batch_size", None, 1, "a size >= 1")


@pytest.mark.parametrize(("value", "zero", "ok"), [(0.01, False, True), (1, False, True), (0, False, False),
                                                   (0, True, True), (-1e-3, True, False),
                                                   (float("nan"), True, False), (float("inf"), False, False),
                                                   ("0.1", False, False), (False, True, False)])
def test_positive_number_is_finite(value, zero, ok):
    if ok:
        setting_checks.positive_number("model.lr", value, zero=zero)
    else:
        with pytest.raises(ValueError, match=r"^model.lr: expected a finite number"):
            setting_checks.positive_number("model.lr", value, zero=zero)


@pytest.mark.parametrize(("value", "expected"), [(None, None), ([15, 10, 5], [15, 10, 5]), ((-1, 0), [-1, 0])])
def test_fanouts_are_per_layer_ints(value, expected):
    assert setting_checks.fanouts("data.num_neighbors", value) == expected


@pytest.mark.parametrize("value", [[], [-2], [3, 1.5], "15", [True]])
def test_bad_fanouts_name_the_field(value):
    with pytest.raises(ValueError, match=r"^data.num_neighbors: expected a list of at least one fan-out"):
        setting_checks.fanouts("data.num_neighbors", value)


def test_the_classes_check_before_reading_data():
    """No dataset is resolved (an unknown name would fail there first): the setting is named."""
    from gnnkit.data.datamodule import GraphDataModule
    from gnnkit.data.graph_set_datamodule import GraphSetDataModule
    from gnnkit.data.link_datamodule import LinkDataModule
    from gnnkit.graph_classifier import GraphClassifier
    from gnnkit.link_predictor import LinkPredictor
    from gnnkit.module import NodeClassifier

    cases = [
        (lambda: GraphDataModule("no-such-dataset", batch_size=-1), "data.batch_size"),
        (lambda: GraphDataModule("no-such-dataset", eval_batch_size=0), "data.eval_batch_size"),
        (lambda: GraphDataModule("no-such-dataset", num_workers=-1), "data.num_workers"),
        (lambda: GraphDataModule("no-such-dataset", seed=1.5), "data.seed"),
        (lambda: GraphDataModule("no-such-dataset", partitions="2"), "data.partitions"),
        (lambda: LinkDataModule("no-such-dataset", seed="x"), "data.seed"),
        (lambda: GraphSetDataModule("no-such-dataset", seed="x"), "data.seed"),
        (lambda: LinkDataModule("no-such-dataset", eval_num_neighbors=[]), "data.eval_num_neighbors"),
        (lambda: GraphSetDataModule("no-such-dataset", eval_batch_size=0), "data.eval_batch_size"),
        (lambda: NodeClassifier(in_channels=4, hidden_channels=0), "model.hidden_channels"),
        (lambda: LinkPredictor(in_channels=4, lr=0.0), "model.lr"),
        (lambda: GraphClassifier(weight_decay=-0.1), "model.weight_decay"),
        (lambda: GraphClassifier(emb_dim=0), "model.emb_dim"),
    ]
    for build, field in cases:
        with pytest.raises(ValueError, match=f"^{field}: expected"):
            build()

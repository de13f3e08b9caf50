import lightning.pytorch as pl
import pytest

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.module import NodeClassifier
from gnnkit.sparse import FORMATS, Adjacency


def _fit(dm, **kwargs):
    model = NodeClassifier(in_channels=dm.num_features, out_channels=dm.num_classes, num_nodes=dm.num_nodes,
                           task=dm.task, full_batch=dm.full_batch, hidden_channels=16, num_layers=2, **kwargs)
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, datamodule=dm)
    return model


@pytest.mark.parametrize("model_name", ["gcn", "gin"])
def test_full_batch_training_reports_formats_per_layer(model_name):
    dm = GraphDataModule("synthetic-tiny")
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch.adj, Adjacency) and batch.adj.nnz == batch.edge_index.size(1)
    assert next(iter(dm.val_dataloader())).adj is batch.adj  # one adjacency: conversions cached across steps
    model = _fit(dm, model=model_name, aggregation="gnnkit", format="auto")
    formats = model.report_info()["formats"]
    assert sorted(formats) == ["layer0", "layer1"]
    for layer in formats.values():
        assert layer["forward"] in FORMATS and layer["backward"] in FORMATS and layer["source"] == "selector"
        assert sum(layer["counts"].values()) >= 2
    assert any(k.startswith("plan:") for k in (batch.adj.cached_keys() if model_name != "gcn"
                                               else batch.adj.cached("gcn_normalized:True", None).cached_keys()))


def test_sampled_training_with_a_forced_format():
    dm = GraphDataModule("synthetic-tiny", batch_size=256, num_neighbors=[5, 5])
    model = _fit(dm, model="sage", aggregation="gnnkit", format="gather_scatter")
    assert {(v["forward"], v["backward"]) for v in model.report_info()["formats"].values()} == {
        ("gather_scatter", "gather_scatter")}


def test_pyg_aggregation_reports_no_formats():
    model = NodeClassifier(in_channels=4, out_channels=3)
    assert "formats" not in model.report_info()

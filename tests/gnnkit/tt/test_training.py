import lightning.pytorch as pl
import pytest
import torch
from torch import nn

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.module import NodeClassifier
from gnnkit.tt import TTEmbedding
from pipeline import preprocess, resolve


@pytest.fixture(scope="module")
def ordered_tiny():
    """synthetic-tiny, neighbour-sampled, with the RCM node order in its cache entry."""
    dm = GraphDataModule("synthetic-tiny", batch_size=128, num_neighbors=[5, 5])
    spec = resolve("synthetic-tiny")
    dm.entry = preprocess(spec, spec.preprocess.replace(reorder="rcm"))
    dm.graph = dm.entry.open()
    return dm


def _model(dm, **kwargs):
    args = dict(in_channels=dm.num_features, out_channels=dm.num_classes, num_nodes=dm.num_nodes, task=dm.task,
                full_batch=dm.full_batch, model="sage", hidden_channels=32, num_layers=2, embedding_dim=16,
                replace_features=True)
    return NodeClassifier(**(args | kwargs))


def _trainer(tmp_path, epochs=2):
    return pl.Trainer(max_epochs=epochs, accelerator="cpu", logger=False, default_root_dir=tmp_path,
                      enable_progress_bar=False, enable_model_summary=False)


def test_tt_option_builds_the_table_and_reports_it(ordered_tiny):
    model = _model(ordered_tiny, embedding="tt", tt_compression=20)
    assert isinstance(model.embedding, TTEmbedding)
    info = model.report_info()["embedding"]
    assert info["kind"] == "tt" and info["compression"] >= 20
    assert info["num_params"] == sum(p.numel() for p in model.embedding.parameters())
    full = _model(ordered_tiny).report_info()["embedding"]
    assert full == {"kind": "full", "num_params": ordered_tiny.num_nodes * 16, "compression": 1.0,
                    "num_embeddings": ordered_tiny.num_nodes, "embedding_dim": 16}
    assert isinstance(_model(ordered_tiny).embedding, nn.Embedding)
    with pytest.raises(ValueError, match="model.embedding: expected one of"):
        _model(ordered_tiny, embedding="hash")
    with pytest.raises(ValueError, match="model.embedding_dim"):
        _model(ordered_tiny, embedding_dim=0)


def test_tt_training_with_order_and_hot_rows_survives_a_checkpoint(ordered_tiny, tmp_path):
    pl.seed_everything(0)
    model = _model(ordered_tiny, embedding="tt", tt_rank=4, tt_reorder=True, tt_hot_rows=64)
    trainer = _trainer(tmp_path)
    trainer.fit(model, datamodule=ordered_tiny)
    order = ordered_tiny.graph.extra["node_order"]
    assert torch.equal(model.embedding.order.long(), order.long())
    assert model.embedding.cache is not None and len(model.embedding.cache) == 64
    assert model.embedding.cache.refreshes > 1  # rebuilt after optimizer steps
    path = tmp_path / "tt.ckpt"
    trainer.save_checkpoint(path)
    loaded = NodeClassifier.load_from_checkpoint(path)  # no datamodule: order comes from the checkpoint
    assert torch.equal(loaded.embedding.order, model.embedding.order)
    for a, b in zip(loaded.embedding.cores, model.embedding.cores):
        assert torch.equal(a, b)
    ids = torch.arange(ordered_tiny.num_nodes)
    model.eval()
    loaded.eval()
    with torch.no_grad():
        assert torch.equal(loaded.embedding(ids), model.embedding(ids))
        torch.testing.assert_close(model.embedding(ids), model.embedding.full_table()[ids])


def test_tt_reorder_without_an_order_in_the_data_fails_clearly(tmp_path):
    dm = GraphDataModule("synthetic-tiny", batch_size=128, num_neighbors=[5, 5])
    model = _model(dm, embedding="tt", tt_rank=4, tt_reorder=True)
    with pytest.raises(ValueError, match="model.tt_reorder: the dataset has no node order"):
        _trainer(tmp_path, 1).fit(model, datamodule=dm)


def test_a_tt_rank_beside_a_compression_target_is_said_to_be_unused(ordered_tiny):
    """The recipes' tt_compression took over and --model.tt_rank 2 did nothing, without a word (a warning,
    not a refusal: a run or checkpoint of both settings must still resume and load)."""
    with pytest.warns(UserWarning, match=r"gnnkit: model.tt_rank 2 is unused: model.tt_compression 20 sets the TT "
                                         r"ranks \(--model.tt_compression null lets the rank set them\)"):
        _model(ordered_tiny, embedding="tt", tt_compression=20, tt_rank=2)
    with pytest.raises(ValueError, match=r"^model.tt_rank: expected an integer >= 1 \(or null\), got 0$"):
        NodeClassifier.check_settings({"embedding": "tt", "embedding_dim": 8, "tt_rank": 0})


def test_a_rank_the_cores_cap_or_a_table_no_smaller_than_the_dense_one_is_said(ordered_tiny):
    """tt_rank 100000 gave ranks [120, 60] and 0.91x compression without a line."""
    with pytest.warns(UserWarning, match=r"gnnkit: model.tt_rank 100000: capped where the cores' shapes bound it, "
                                         r"\[.*\]; the TT embedding holds [\d,]+ parameters, 0\.\d\dx compression"):
        _model(ordered_tiny, embedding="tt", tt_rank=100000)

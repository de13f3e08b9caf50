"""GraphClassifier and its GNN: aggregation paths agree, OGB evaluator wiring, a short `gnnkit run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from gnnkit import native
from gnnkit.graph_classifier import GraphClassifier
from gnnkit.models.graph_gnn import GraphGNN, GraphGNNOptions
from pipeline import graph_layout as gl
from pipeline import synthetic_graphs as sg

REPO = Path(__file__).parents[2]
GRAPH_RECIPES = ("gin_synthetic_molhiv.yaml", "gin_molhiv.yaml")


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> gl.GraphSet:
    folder = sg.generate(tmp_path_factory.mktemp("g") / "small", sg.presets()["synthetic-molhiv-small"])
    meta = gl.normalise_meta(json.loads((folder / "meta.json").read_text()), "meta.json")
    arrays, meta = gl.build(folder, meta, __import__("pipeline").PreprocessOptions(), lambda _msg: None)
    return gl.graph_set_from_arrays(arrays, meta)


def _pair(options: GraphGNNOptions) -> tuple[GraphGNN, GraphGNN]:
    """The same weights with PyG and with gnnkit aggregation (parameter names match)."""
    torch.manual_seed(0)
    pyg = GraphGNN(options, 1)
    ours = GraphGNN(GraphGNNOptions(**{**options.__dict__, "aggregation": "gnnkit"}), 1)
    ours.load_state_dict(pyg.state_dict())
    return pyg.eval(), ours.eval()


@pytest.mark.parametrize("model, edges, virtual, pooling", [
    ("gin", True, False, "mean"), ("gin", False, True, "sum"), ("gcn", True, False, "attention"),
])
def test_gnnkit_aggregation_matches_pygs(graphs, model, edges, virtual, pooling, monkeypatch):
    """Outputs and input gradients of a random batch agree between PyG's convolutions and spmm."""
    monkeypatch.setenv("GNNKIT_NATIVE", "0")  # no kernel build for a 24-molecule batch
    options = GraphGNNOptions(model=model, num_layers=3, emb_dim=16, dropout=0.0, virtual_node=virtual,
                              pooling=pooling, edge_features=edges, format="auto")
    pyg, ours = _pair(options)
    batch = graphs.batch(torch.randperm(graphs.num_graphs, generator=torch.Generator().manual_seed(1))[:24])
    out_pyg, out_ours = pyg(batch), ours(batch)
    assert out_pyg.shape == (24, 1)
    torch.testing.assert_close(out_ours, out_pyg, rtol=1e-4, atol=1e-5)
    out_pyg.sum().backward()
    out_ours.sum().backward()
    for (name, a), (_, b) in zip(pyg.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-3, atol=1e-5, msg=name)
    assert ours.format_report()["layer0"]["source"] == "selector"


@pytest.mark.parametrize("molecular", [True, False])
def test_fused_gine_sum_matches_pygs_gineconv(graphs, molecular):
    """With the native build, GIN with edge features sums through the fused kernel (one row per bond
    type on molecules, one per edge for float features, as ogbg-ppa): outputs and every parameter's
    gradient agree with PyG's GINEConv in training mode."""
    if not native.available():
        pytest.skip("no native build (GNNKIT_NATIVE=0 or no compiler)")
    batch = graphs.batch(torch.randperm(graphs.num_graphs, generator=torch.Generator().manual_seed(2))[:24])
    options = GraphGNNOptions(num_layers=3, emb_dim=16, dropout=0.0)
    if not molecular:
        batch.edge_attr = torch.rand(batch.edge_index.size(1), 7, generator=torch.Generator().manual_seed(0))
        options = GraphGNNOptions(num_layers=3, emb_dim=16, dropout=0.0, molecular=False, edge_channels=7)
    pyg, ours = (model.train() for model in _pair(options))
    out_pyg, out_ours = pyg(batch), ours(batch)
    torch.testing.assert_close(out_ours, out_pyg, rtol=1e-4, atol=1e-5)
    out_pyg.square().sum().backward()
    out_ours.square().sum().backward()
    for (name, a), (_, b) in zip(pyg.named_parameters(), ours.named_parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-3, atol=1e-5, msg=name)
    report = ours.format_report()["layer0"]
    assert (report["forward"], report["source"]) == ("native_gine", "fused")
    assert report["counts"] == {"native_gine/native_gine": 1}


def test_gine_layer_resets_its_eps_and_network():
    """GIN with edge features is GIN's layer with a learnt ``eps``: ``reset_parameters`` restores both."""
    from gnnkit.models.graph_gnn import SparseGINEConv

    torch.manual_seed(0)
    layer = SparseGINEConv(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), eps=0.5)
    assert isinstance(layer.eps, torch.nn.Parameter)
    weight = layer.nn[0].weight.detach().clone()
    with torch.no_grad():
        layer.eps.fill_(3.0)
    layer.reset_parameters()
    assert layer.eps.item() == 0.5
    assert not torch.equal(layer.nn[0].weight, weight)


def test_mlp_baseline_ignores_the_bonds(graphs):
    """The bag-of-atoms model gives the same output whatever the bonds are."""
    torch.manual_seed(0)
    model = GraphGNN(GraphGNNOptions(model="mlp", num_layers=2, emb_dim=8), 1).eval()
    batch = graphs.batch(torch.arange(8))
    shuffled = graphs.batch(torch.arange(8))
    shuffled.edge_index = shuffled.edge_index.flip(0)
    shuffled.indices = torch.zeros_like(shuffled.indices)
    torch.testing.assert_close(model(batch), model(shuffled))
    assert not any("edge" in name for name, _ in model.named_parameters())


def test_bad_options_name_the_field():
    with pytest.raises(ValueError, match="model.pooling: expected one of"):
        GraphGNNOptions(pooling="max2")
    with pytest.raises(ValueError, match="model.model: OGB's GCN needs edge features"):
        GraphGNNOptions(model="gcn", edge_features=False)
    with pytest.raises(ValueError, match="model.format: Could not resolve format 'sel'"):
        GraphGNNOptions(format="sel")  # it failed in the first batch, after the dataset was read
    assert GraphGNNOptions(format="Native-CSR").format == "Native-CSR"


def test_ogb_names_get_ogbs_evaluator_and_twins_the_same_code():
    from ogb.graphproppred import Evaluator
    from sklearn.metrics import roc_auc_score

    ogb = GraphClassifier(emb_dim=8, num_layers=1, task={"name": "ogbg-molhiv", "eval_metric": "rocauc",
                                                          "num_tasks": 1, "task_type": "binary classification"})
    assert type(ogb.evaluator) is Evaluator and ogb.evaluator.eval_metric == "rocauc"
    twin = GraphClassifier(emb_dim=8, num_layers=1, task={"name": "synthetic-molhiv", "eval_metric": "rocauc",
                                                           "num_tasks": 1, "task_type": "binary classification"})
    y = torch.tensor([[0.0], [1.0], [0.0], [1.0], [0.0]])
    scores = torch.tensor([[0.1], [0.4], [0.35], [0.8], [-1.0]])
    assert twin.epoch_metric(y, scores) == pytest.approx(roc_auc_score(y[:, 0], scores[:, 0]))
    assert np.isnan(twin.epoch_metric(torch.zeros(3, 1), torch.randn(3, 1)))  # no positive: undefined


def test_loss_skips_missing_labels_and_multiclass_uses_cross_entropy():
    model = GraphClassifier(emb_dim=8, num_layers=1, out_channels=2,
                            task={"name": "t", "eval_metric": "ap", "num_tasks": 2, "task_type": "binary classification"})
    logits = torch.tensor([[0.5, -1.0], [2.0, 0.3]])
    y = torch.tensor([[1.0, float("nan")], [0.0, 1.0]])
    expected = torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor([0.5, 2.0, 0.3]),
                                                                    torch.tensor([1.0, 0.0, 1.0]))
    torch.testing.assert_close(model.loss(logits, y), expected)
    multi = GraphClassifier(emb_dim=8, num_layers=1, out_channels=3, molecular=False, in_channels=0,
                            edge_channels=7, task={"name": "ogbg-ppa", "eval_metric": "acc", "num_tasks": 1,
                                                   "task_type": "multiclass classification"})
    scores = torch.tensor([[0.1, 2.0, 0.0], [3.0, 0.0, 0.0]])
    torch.testing.assert_close(multi.loss(scores, torch.tensor([[1], [2]])),
                               torch.nn.functional.cross_entropy(scores, torch.tensor([1, 2])))
    assert multi.epoch_metric(torch.tensor([[1], [2]]), scores) == pytest.approx(0.5)


def test_graph_recipes_parse_with_the_graph_task():
    from lightning.pytorch.cli import LightningArgumentParser

    from gnnkit.tasks import task_family

    module, datamodule = task_family("graph").classes()
    for name in GRAPH_RECIPES:
        doc = yaml.safe_load((REPO / "recipes" / name).read_text())
        assert doc["task"] == "graph"
        parser = LightningArgumentParser(exit_on_error=False)
        parser.add_lightning_class_args(module, "model")
        parser.add_lightning_class_args(datamodule, "data")
        parser.add_argument("--task", type=str)
        parser.add_argument("--trainer", type=dict)
        config = parser.parse_object(doc)
        assert config.model.emb_dim == 300 and config.data.batch_size == 32


def _run(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`gnnkit run` of the twin recipe on the small twin, CPU-sized (2 x 32), this checkout's gnnkit."""
    run_dir = tmp_path / "r"
    out = subprocess.run(
        [sys.executable, "-m", "gnnkit.cli", "run", str(REPO / "recipes" / "gin_synthetic_molhiv.yaml"),
         "--data.dataset", "synthetic-molhiv-small", "--model.emb_dim", "32", "--model.num_layers", "2",
         "--trainer.max_epochs", "2", "--run_dir", str(run_dir), *extra],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env={**os.environ, "GNNKIT_NATIVE": "0", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out, run_dir


@pytest.mark.slow
def test_short_fit_through_gnnkit_run(tmp_path):
    """`gnnkit run` on the small twin with gnnkit aggregation: report.json names OGB's metric."""
    out, run_dir = _run(tmp_path, "--model.virtual_node", "true")
    report = json.loads((run_dir / "report.json").read_text())
    assert report["metric"] == "rocauc" and 0.0 <= report["test"] <= 1.0 and report["epochs"] == 2
    assert report["data"]["num_graphs"] == 400 and set(report["formats"]) == {"layer0", "layer1"}
    assert out.stdout.strip().splitlines()[-2].startswith("test rocauc: ")


@pytest.mark.slow
def test_gnnkit_strategy_trains_graph_batches_on_two_ranks(tmp_path):
    """Two gloo ranks under GnnkitStrategy: each takes half of every epoch's graph batches, and the
    epoch metric covers the whole split (gathered over ranks)."""
    out, run_dir = _run(tmp_path, "--trainer.devices", "2", "--trainer.accelerator", "cpu",
                        "--trainer.strategy.class_path", "gnnkit.comm.GnnkitStrategy")
    report = json.loads((run_dir / "report.json").read_text())
    assert report["comm"]["world_size"] == 2 and report["metric"] == "rocauc" and 0.0 <= report["test"] <= 1.0
    lines = out.stderr.splitlines()  # rank 1 (Lightning starts it as a copy of the command) tells nothing again
    assert [line.split(" train_loss")[0] for line in lines if " epoch " in line] == ["[gnnkit] epoch 1/2",
                                                                                    "[gnnkit] epoch 2/2"]
    assert sum(line.startswith("[gnnkit] run ") for line in lines) == 1 and "[gnnkit rank 1]" not in out.stderr


def test_featureless_graphs_with_float_edge_features_like_ogbg_ppa(graphs, monkeypatch):
    """ogbg-ppa's shape: no node features (one learned vector), 7 float edge features, 37 classes;
    both aggregation paths agree there too."""
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    batch = graphs.batch(torch.arange(10))
    batch.x = None
    batch.edge_attr = torch.rand(batch.edge_index.size(1), 7, generator=torch.Generator().manual_seed(0))
    options = GraphGNNOptions(num_layers=2, emb_dim=16, dropout=0.0, molecular=False, in_channels=0, edge_channels=7)
    torch.manual_seed(0)
    pyg = GraphGNN(options, 37).eval()
    ours = GraphGNN(GraphGNNOptions(**{**options.__dict__, "aggregation": "gnnkit"}), 37).eval()
    ours.load_state_dict(pyg.state_dict())
    out = pyg(batch)
    assert out.shape == (10, 37)
    torch.testing.assert_close(ours(batch), out, rtol=1e-4, atol=1e-5)

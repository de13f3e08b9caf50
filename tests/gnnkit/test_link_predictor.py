"""gnnkit/link_predictor.py, gnnkit/link_metrics.py and gnnkit/data/link_datamodule.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ogb.linkproppred import Evaluator

from gnnkit.data.link_datamodule import LinkDataModule, eval_pairs
from gnnkit.link_metrics import LinkMetricEvaluator, evaluate_links, make_link_evaluator
from gnnkit.link_predictor import LinkPredictor, PairDecoder, link_loss

REPO = Path(__file__).parents[2]
TINY = "synthetic-collab-tiny"


@pytest.fixture(autouse=True, scope="module")
def no_native_build():
    """No kernel build for a 3,000-node graph (a fresh GNNKIT_HOME would compile the sampler first)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GNNKIT_NATIVE", "0")
        yield


def test_decoders_score_the_hadamard_product():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(50, 16, generator=g), torch.randn(50, 16, generator=g)
    dot = PairDecoder("dot", 16)
    torch.testing.assert_close(dot(a, b), torch.stack([a[i] @ b[i] for i in range(50)]))
    mlp = PairDecoder("mlp", 16, num_layers=2).eval()
    lin0, lin1 = mlp.lins
    hidden = torch.relu((a * b) @ lin0.weight.T + lin0.bias)
    torch.testing.assert_close(mlp(a, b), (hidden @ lin1.weight.T + lin1.bias)[:, 0])
    with pytest.raises(ValueError, match="model.decoder: expected one of"):
        PairDecoder("cosine", 16)


def test_scores_backpropagate_to_the_same_bits_every_time():
    """``h[pairs[:, 0]]``'s backward summed repeated rows in a varying order from ~50,000 pairs on
    2 CPU threads: two runs of one seed gave val_loss apart by 1e-7 after one epoch, more later."""
    g = torch.Generator().manual_seed(0)
    model = LinkPredictor("sage", hidden_channels=8, num_layers=1, in_channels=8, num_nodes=500)
    h = torch.randn(500, 8, generator=g, requires_grad=True)
    pairs = torch.randint(0, 500, (200_000, 2), generator=g)
    grads = set()
    for _ in range(6):
        h.grad = None
        model.score(h, pairs).sum().backward()
        grads.add(h.grad.numpy().tobytes())
    assert len(grads) == 1


def test_link_loss_is_ogbs_binary_cross_entropy():
    g = torch.Generator().manual_seed(1)
    pos, neg = torch.randn(40, generator=g) * 3, torch.randn(70, generator=g) * 3
    reference = -torch.log(torch.sigmoid(pos) + 1e-15).mean() - torch.log(1 - torch.sigmoid(neg) + 1e-15).mean()
    torch.testing.assert_close(link_loss(pos, neg), reference)


@pytest.mark.parametrize("ogb_name, metric, neg_shape", [("ogbl-collab", "hits@50", (3000,)),
                                                          ("ogbl-ddi", "hits@20", (500,)),
                                                          ("ogbl-citation2", "mrr", (200, 40))])
def test_twins_use_ogbs_metric_code(ogb_name, metric, neg_shape):
    g = torch.Generator().manual_seed(2)
    pos, neg = torch.randn(200, generator=g) + 1.5, torch.randn(*neg_shape, generator=g)
    ours = make_link_evaluator("synthetic-x", metric)
    assert isinstance(ours, LinkMetricEvaluator) and type(make_link_evaluator(ogb_name, "")) is Evaluator
    value = evaluate_links(ours, pos, neg)
    result = Evaluator(ogb_name).eval({"y_pred_pos": pos, "y_pred_neg": neg})
    expected = result["mrr_list"].mean() if metric == "mrr" else result[metric]
    assert value == pytest.approx(float(expected)) and 0 < value < 1
    half = evaluate_links(ours, pos.half(), neg.half())  # mixed precision's 16-bit scores
    assert half == pytest.approx(evaluate_links(ours, pos.half().float(), neg.half().float()))
    with pytest.raises(ValueError, match="eval_metric: expected hits@K, mrr or rocauc"):
        LinkMetricEvaluator("x", "acc")


@pytest.fixture(scope="module")
def full() -> LinkDataModule:
    return LinkDataModule(TINY, batch_size=4096)


def test_full_batch_training_batches_cover_every_edge_once_with_random_negatives(full):
    batches = list(full.train_dataloader())
    train = full.graph.splits["train"]["edge"]
    assert len(batches) == len(full.train_dataloader()) == 4
    pos = torch.cat([b.pos for b in batches])
    assert torch.equal(pos.unique(dim=0), train.unique(dim=0)) and pos.shape == train.shape
    assert all(b.neg.shape == b.pos.shape and b.adj is batches[0].adj and b.x.shape[0] == 3000 for b in batches)
    [val] = list(full.val_dataloader())
    assert val.pos.shape == (1000, 2) and val.neg.shape == (5000, 2) and val.neg_per_pos == 0


def test_sampled_batches_relabel_the_edges_onto_their_seed_blocks():
    data = LinkDataModule(TINY, batch_size=1000, num_neighbors=[5, 3], eval_batch_size=700)
    batch = next(iter(data.train_dataloader()))
    seeds = batch.n_id[: batch.batch_size]
    assert batch.pos.max() < batch.batch_size and batch.num_sampled_nodes[0] == batch.batch_size
    global_pos = seeds[batch.pos]
    train = {tuple(e) for e in data.graph.splits["train"]["edge"].tolist()}
    assert all(tuple(e) in train for e in global_pos.tolist())
    torch.testing.assert_close(batch.x, data.graph.x[batch.n_id])
    val = list(data.val_dataloader())
    assert len(val) == len(data.val_dataloader()) == 9  # 1000 positives and 5000 negatives, 700 a batch
    assert [b.pos.shape[0] for b in val] == [112] * 1 + [111] * 8 and sum(b.neg.shape[0] for b in val) == 5000
    valid = data.graph.splits["valid"]
    assert torch.equal(torch.cat([b.n_id[b.pos] for b in val]), valid["edge"])
    assert torch.equal(torch.cat([b.n_id[b.neg] for b in val]), valid["edge_neg"])


def test_per_source_negatives_become_k_pairs_per_positive():
    split = {"edge": torch.tensor([[0, 1], [2, 3]]), "target_node_neg": torch.tensor([[4, 5, 6], [7, 8, 9]])}
    pos, neg, k = eval_pairs(split)
    assert k == 3 and neg.tolist() == [[0, 4], [0, 5], [0, 6], [2, 7], [2, 8], [2, 9]]


@pytest.mark.parametrize("model, loader", [("sage", {}), ("gcn", {"num_neighbors": [4, 4]}), ("mlp", {})])
def test_model_scores_a_batch_and_learns(full, model, loader):
    data = full if not loader else LinkDataModule(TINY, batch_size=2048, **loader)
    torch.manual_seed(0)
    module = LinkPredictor(model, hidden_channels=32, num_layers=2, lr=0.01, in_channels=data.num_features,
                           num_nodes=data.num_nodes, full_batch=data.full_batch, task=data.task)
    optimizer = module.configure_optimizers()
    losses = []
    for _ in range(3):
        for batch in data.train_dataloader():
            pos, neg = module(batch)
            loss = link_loss(pos, neg)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]
    assert module.evaluator.eval_metric == "hits@50" and module.hparams.model == model


def test_the_encoder_can_be_a_residual_stack_that_learns(full):
    """Platonov et al.'s pre-norm residual blocks (LayerNorm, GELU), as node recipes have them."""
    from gnnkit.models.residual_stream import ResidualStream

    torch.manual_seed(0)
    module = LinkPredictor("sage", hidden_channels=32, num_layers=2, lr=0.01, layer_norm=True, residual=True,
                           activation="gelu", in_channels=full.num_features, num_nodes=full.num_nodes,
                           task=full.task)
    assert any(isinstance(m, ResidualStream) for m in module.gnn.modules())
    optimizer = module.configure_optimizers()
    losses = []
    for _ in range(5):
        for batch in full.train_dataloader():
            loss = link_loss(*module(batch))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]
    with pytest.raises(ValueError, match="model.activation"):
        LinkPredictor(activation="tanh", in_channels=4)


def test_featureless_graphs_need_an_embedding():
    with pytest.raises(ValueError, match="model.embedding_dim"):
        LinkPredictor(in_channels=0, num_nodes=10)
    module = LinkPredictor("sage", hidden_channels=8, num_layers=1, embedding_dim=4, in_channels=0, num_nodes=10)
    assert module.embedding.weight.shape == (10, 4)


@pytest.mark.slow
def test_gnnkit_run_trains_a_link_recipe_with_gnnkit_aggregation(tmp_path):
    """`gnnkit run` with task: link, aggregation: gnnkit, format: auto: report.json names Hits@50."""
    recipe = tmp_path / "link.yaml"
    recipe.write_text(f"task: link\nmodel: {{model: sage, hidden_channels: 32, num_layers: 2, lr: 0.01, "
                      f"aggregation: gnnkit, format: auto}}\ndata: {{dataset: {TINY}, batch_size: 8192}}\n")
    out = subprocess.run([sys.executable, "-m", "gnnkit.cli", "run", str(recipe), "--trainer.max_epochs", "2",
                          "--run_dir", str(tmp_path / "r")], capture_output=True, text=True, cwd=tmp_path,
                         timeout=600, env={**os.environ, "GNNKIT_NATIVE": "0", "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["metric"] == "hits@50" and 0 <= report["test"] <= 1 and report["data"]["family"] == "link"
    assert report["formats"] and (tmp_path / "r" / "checkpoints" / "best.ckpt").is_file()
    assert out.stdout.strip().splitlines()[-2].startswith("test hits@50: ")


def _edges_of(batch) -> tuple:
    seeds = batch.n_id[: batch.batch_size]
    return tuple(map(tuple, seeds[batch.pos].tolist())), tuple(map(tuple, seeds[batch.neg].tolist()))


def test_reuse_records_and_replays_link_batches_with_their_blocks(tmp_path):
    """Epoch 0 records the sampled training batches (positives, negatives, blocks); epochs 1-2 replay
    exactly those batches in another order; a damaged shard's batches are sampled afresh for the same edges."""
    from gnnkit.data.reuse import ReuseConfig

    config = ReuseConfig(epochs=3, factor=3, loader="torch", feature_dtype="float32", cache_dir=str(tmp_path / "c"),
                         shard_mb=0.5)
    data = LinkDataModule(TINY, batch_size=2000, num_neighbors=[4, 2], reuse=config)
    loader = data.train_dataloader()
    recorded = list(loader)
    replayed = list(loader)
    assert len(recorded) == len(replayed) == 8 and data.reuse_stats.batches["replayed"] == 8
    by_edges = {_edges_of(b): b for b in recorded}
    assert set(by_edges) == {_edges_of(b) for b in replayed}
    assert [_edges_of(b) for b in replayed] != [_edges_of(b) for b in recorded]  # a new order
    for batch in replayed:
        original = by_edges[_edges_of(batch)]
        for key in ("x", "edge_index", "n_id", "pos", "neg"):
            assert torch.equal(batch[key], original[key]), key
        assert batch.num_sampled_nodes == original.num_sampled_nodes and batch.neg_per_pos == 0
    shards = sorted((tmp_path / "c").glob("shard-*.bin"))
    assert len(shards) > 1
    shards[0].write_bytes(b"\0" * shards[0].stat().st_size)
    again = list(loader)
    assert data.reuse_stats.batches["resampled"] > 0 and {_edges_of(b) for b in again} == set(by_edges)
    assert data.report_info()["reuse"]["batches"]["recorded"] == 8
    with pytest.raises(ValueError, match="data.reuse: replaying batches needs neighbour sampling"):
        LinkDataModule(TINY, reuse=config)


def test_ranks_deal_the_training_edges_like_a_distributed_sampler():
    from gnnkit.data.link_datamodule import rank_share

    order = torch.randperm(11)
    shares = [rank_share(order, rank, 3) for rank in range(3)]
    assert [s.numel() for s in shares] == [4, 4, 4]  # equal steps on every rank
    assert set(torch.cat(shares).tolist()) == set(range(11))
    assert torch.equal(rank_share(order, 0, 1), order)


@pytest.mark.slow
def test_gnnkit_strategy_trains_a_link_recipe_on_two_ranks(tmp_path):
    out = subprocess.run([sys.executable, "-m", "gnnkit.cli", "run", str(REPO / "recipes" / "sage_synthetic_collab.yaml"),
                          "--data.dataset", TINY, "--data.batch_size", "4096", "--trainer.max_epochs", "2",
                          "--trainer.devices", "2", "--trainer.strategy.class_path", "gnnkit.comm.GnnkitStrategy",
                          "--run_dir", str(tmp_path / "r")], capture_output=True, text=True, cwd=tmp_path, timeout=600,
                         env={**os.environ, "GNNKIT_NATIVE": "0", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sync_dist" not in out.stderr  # epoch-level logs are synced across ranks
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["comm"]["world_size"] == 2 and report["metric"] == "hits@50" and report["test"] > 0
    # 15,000 training edges dealt to 2 ranks in batches of 4,096: 2 steps an epoch on each
    rows = (tmp_path / "r" / "metrics.csv").read_text().splitlines()
    assert rows[-1].split(",")[1] == "4"  # the test row's step counter: 2 epochs of 2 steps (one rank: 4 each)


def test_the_graph_trained_is_stated_in_the_log_and_report(gnnkit_log):
    """Link runs said '3000 nodes, 30000 message-passing edges' and no more; the README promised the
    node runs' line (symmetrised or directed, raw -> trained edges) and report keys for them too."""
    gnnkit_log.set_level("INFO", logger="gnnkit")
    data = LinkDataModule(TINY, batch_size=4096)
    facts = data.describe()
    assert facts["graph"] == "symmetrised" and facts["num_edges"] >= facts["raw_edges"] > 0
    assert facts["raw_self_loops"] is not None
    line = next(r.getMessage() for r in gnnkit_log.records if r.getMessage().startswith(f"data {TINY}:"))
    assert f"symmetrised graph, {facts['raw_edges']:,} -> {facts['num_edges']:,} edges" in line


def test_a_resumed_datamodule_draws_the_next_epochs_shuffles_and_negatives():
    """Fresh generators drew the first epochs' again: a resumed link run trained other batches."""
    def epoch(dm):
        return [torch.cat([batch.pos, batch.neg]) for batch in dm.train_dataloader()]

    straight = LinkDataModule(TINY, batch_size=4096)
    uninterrupted = [epoch(straight) for _ in range(3)]
    first = LinkDataModule(TINY, batch_size=4096)
    epoch(first)
    resumed = LinkDataModule(TINY, batch_size=4096)
    resumed.load_state_dict(first.state_dict())
    for want in uninterrupted[1:]:
        assert all(torch.equal(a, b) for a, b in zip(epoch(resumed), want))
    assert not torch.equal(uninterrupted[0][0], uninterrupted[1][0])


def test_a_resumed_sampled_datamodule_draws_the_next_neighbours_and_skips_the_sanity_check_s():
    """The neighbour samplers were not checkpointed: a resumed sampled link run trained and validated
    on other blocks (epoch 3's train loss 0.7287 against 0.7246), and Lightning's sanity check,
    which a resumed run makes again, drew from the validation sampler."""
    from types import SimpleNamespace

    def epoch(dm):
        return [batch.n_id for stage in ("train", "val") for batch in getattr(dm, f"{stage}_dataloader")()]

    def sanity_check(dm):
        dm.trainer = SimpleNamespace(sanity_checking=True)
        next(iter(dm.val_dataloader()))
        dm.rewind_sanity_check()
        dm.trainer = None

    settings = {"batch_size": 4096, "num_neighbors": [5, 3]}
    straight = LinkDataModule(TINY, **settings)
    sanity_check(straight)
    uninterrupted = [epoch(straight) for _ in range(3)]
    first = LinkDataModule(TINY, **settings)
    sanity_check(first)
    epoch(first)
    resumed = LinkDataModule(TINY, **settings)
    resumed.load_state_dict(first.state_dict())
    sanity_check(resumed)
    for want in uninterrupted[1:]:
        got = epoch(resumed)
        assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
    assert not all(torch.equal(a, b) for a, b in zip(uninterrupted[0], uninterrupted[1]))


def test_a_batch_holding_every_training_edge_is_warned_about(gnnkit_log):
    """sage_synthetic_collab.yaml (64 * 1024 edges a batch, 10 epochs) on a user's graph of 4,800
    training edges took 10 optimizer steps: Hits@50 0.27 against 0.61 for common neighbours."""
    from types import SimpleNamespace

    gnnkit_log.set_level("WARNING", logger="gnnkit")
    LinkDataModule(TINY, batch_size=65536).train_dataloader()
    assert ("data.batch_size 65536 holds all 15,000 training edges: one optimizer step an epoch" in gnnkit_log.text
            and "--data.batch_size 1500" in gnnkit_log.text)
    gnnkit_log.clear()
    LinkDataModule(TINY, batch_size=4096).train_dataloader()
    assert "holds all" not in gnnkit_log.text
    shared = LinkDataModule(TINY, batch_size=4096)  # 4 ranks deal out 3,750 edges each: one batch a rank
    shared.trainer = SimpleNamespace(global_rank=0, world_size=4)
    line = "data.batch_size 4096 holds a rank's whole share of the training edges (3,750 of 15,000 on 4 ranks)"
    shared.train_dataloader()
    once = gnnkit_log.text.count(line)
    shared.train_dataloader()  # Lightning asks again on reloads: said once
    assert once and gnnkit_log.text.count(line) == once and "--data.batch_size 375" in gnnkit_log.text
    gnnkit_log.clear()
    full_batch = LinkDataModule(TINY, batch_size=65536)  # gae_citation.yaml's one step in each of 200 epochs
    full_batch.trainer = SimpleNamespace(global_rank=0, world_size=1, max_epochs=200)
    full_batch.train_dataloader()
    assert "holds all" not in gnnkit_log.text


def test_the_encoder_s_settings_are_named_as_recipe_fields():
    """Its layer options' errors said `dropout: ...`, where the node classifier's say `model.dropout: ...`."""
    with pytest.raises(ValueError, match=r"^model\.dropout: expected a probability in \[0, 1\), got 2$"):
        LinkPredictor.check_settings({"dropout": 2})
    with pytest.raises(ValueError, match=r"^model\.decoder_layers: expected >= 1, got 0$"):
        LinkPredictor.check_settings({"decoder_layers": 0})
    assert LinkPredictor.check_settings({})["hidden_channels"] == 256  # the constructor's defaults

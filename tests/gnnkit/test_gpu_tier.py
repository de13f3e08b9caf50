"""The GPU tier: every recipe family trains for a couple of epochs on CUDA, and GPU and CPU give the
same logits for the same weights and batch. Marked ``gpu``: skipped without CUDA (CI has none); on a
GPU machine ``python -m pytest -m gpu tests`` runs it with every other CUDA test (``bench/gpu_session.sh``
does)."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.models.node_gnn import NodeGNN
from gnnkit.sparse import Adjacency

pytestmark = pytest.mark.gpu

REPO = Path(__file__).parents[2]
GPU = ("--trainer.accelerator", "gpu", "--trainer.devices", "1", "--trainer.max_epochs", "2")
TINY = ("--data.dataset", "synthetic-tiny")
SAMPLED = ("--data.batch_size", "256", "--data.num_neighbors", "[5, 5]")

#: name -> (recipe, extra arguments): one run per recipe family and mechanism.
RUNS = {
    "full_batch_pyg": ("gcn_synthetic_arxiv.yaml", (*TINY, "--model.aggregation", "pyg")),
    "full_batch_gnnkit_auto": ("gcn_synthetic_arxiv.yaml", (*TINY, "--model.aggregation", "gnnkit",
                                                            "--model.format", "auto")),
    "sage_full_batch_gnnkit": ("sage_synthetic_arxiv.yaml", (*TINY, "--model.aggregation", "gnnkit")),
    "sampled_gnnkit_auto": ("sage_synthetic_products.yaml", (*TINY, *SAMPLED, "--data.num_workers", "0",
                                                             "--model.aggregation", "gnnkit", "--model.format", "auto")),
    "sampled_pyg": ("sage_synthetic_products.yaml", (*TINY, *SAMPLED, "--data.num_workers", "0")),
    # a bfloat16 model: the batches gathered on the device are converted too, the CUDA SpMM takes bf16
    "sampled_gnnkit_bf16_true": ("sage_synthetic_products.yaml", (*TINY, *SAMPLED, "--model.aggregation",
                                                                  "gnnkit", "--trainer.precision", "bf16-true")),
    "sampled_cpu_sampler": ("sage_synthetic_products.yaml", (*TINY, *SAMPLED, "--data.sampler_device", "cpu")),
    "tt": ("tt_synthetic_arxiv.yaml", TINY),
    # epochs cut short while batches are made ahead: the recording holds the batches trained on
    "reuse": ("sage_reuse_synthetic_arxiv.yaml", (*TINY, *SAMPLED, "--trainer.max_epochs", "3",
                                                  "--trainer.limit_train_batches", "3")),
    "link": ("sage_synthetic_collab.yaml", ("--data.dataset", "synthetic-collab-tiny")),
    "graph": ("gin_synthetic_molhiv.yaml", ("--data.dataset", "synthetic-molhiv-small", "--trainer.max_epochs", "1",
                                            "--model.aggregation", "gnnkit")),
    **{f"comm_{mode}": (f"comm_{mode}.yaml", TINY)
       for mode in ("allreduce", "multistream", "topk_a2a", "topk_allgather", "signsgd", "powersgd", "dear")},
    # fp16 AMP (a gradient scaler) with dear's deferred step; fusion tuned on device time
    "comm_dear_16_mixed": ("comm_dear.yaml", (*TINY, "--trainer.precision", "16-mixed")),
    "comm_topk_a2a_auto_fusion": ("comm_topk_a2a.yaml", (*TINY, "--trainer.strategy.init_args.bucket_mb", "auto")),
}


def _run(recipe: str, args: tuple[str, ...], run_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "gnnkit.cli", "run", str(REPO / "recipes" / recipe), *GPU, *args,
           "--run_dir", str(run_dir)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads((run_dir / "report.json").read_text())


@pytest.mark.parametrize("name", sorted(RUNS))
def test_recipe_family_trains_on_the_gpu(name, tmp_path):
    recipe, args = RUNS[name]
    report = _run(recipe, args, tmp_path / name)
    assert math.isfinite(report["test"]) and report["epochs"] >= 1
    if "sampled" in name and name != "sampled_cpu_sampler":
        assert report["sampler"]["device"].startswith("cuda"), report.get("sampler")
    if name == "sampled_cpu_sampler":
        assert report["sampler"]["device"] == "cpu"
    if name == "reuse":  # sampled on the GPU: the structure is recorded, x and y gathered again at replay
        assert report["reuse"]["stored"] == "structure" and report["reuse"]["batches"]["replayed"] > 0, report["reuse"]
        assert report["reuse"]["batches"]["recorded"] == 3, report["reuse"]


def _graph(n: int = 300, e: int = 3000, f: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    return torch.randn(n, f, generator=g), edge_index


@pytest.mark.parametrize("model", ["gcn", "sage", "gin"])
@pytest.mark.parametrize("aggregation", ["pyg", "gnnkit"])
def test_gpu_and_cpu_give_the_same_logits_full_batch(model, aggregation):
    x, edge_index = _graph()
    adj = Adjacency.from_edge_index(edge_index, x.size(0))
    torch.manual_seed(0)
    cpu = NodeGNN(model, 16, 32, 5, num_layers=2, aggregation=aggregation).eval()
    gpu = copy.deepcopy(cpu).cuda()
    expected = cpu(x, edge_index, adj=adj)
    data = Data(x=x, edge_index=edge_index, adj=adj).to("cuda")
    got = gpu(data.x, data.edge_index, adj=data.adj)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("aggregation", ["pyg", "gnnkit"])
def test_gpu_and_cpu_give_the_same_logits_on_a_sampled_batch(aggregation):
    dm = GraphDataModule("synthetic-tiny", batch_size=64, num_neighbors=[5, 3], sampler_device="cpu")
    batch = next(iter(dm.train_dataloader()))
    torch.manual_seed(0)
    cpu = NodeGNN("sage", dm.num_features, 32, dm.num_classes, num_layers=2, aggregation=aggregation).eval()
    gpu = copy.deepcopy(cpu).cuda()
    kwargs = {"num_sampled_nodes": batch.num_sampled_nodes, "num_sampled_edges": batch.num_sampled_edges}
    expected = cpu(batch.x, batch.edge_index, **kwargs)
    on_gpu = batch.to("cuda")
    got = gpu(on_gpu.x, on_gpu.edge_index, **kwargs)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)


def test_tt_embedding_rows_on_the_gpu_equal_the_cpu_rows():
    from gnnkit.tt import TTEmbedding, auto_config

    config = auto_config(5000, 64, rank=8)
    table = TTEmbedding(config)
    ids = torch.randint(0, 5000, (1024,))
    expected = table(ids)
    got = copy.deepcopy(table).cuda()(ids.cuda())
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


def test_every_communicator_on_cuda_gradients_across_two_gloo_ranks(tmp_path):
    """DDP with each gnnkit comm hook on CUDA gradients, two ranks sharing the GPU through gloo (two
    NCCL ranks cannot share one GPU); the same checks as the CPU run of ``hook_worker.py``."""
    out = tmp_path / "result.json"
    worker = REPO / "tests" / "gnnkit" / "comm" / "hook_worker.py"
    proc = subprocess.run([sys.executable, str(worker), str(out), "cuda"], capture_output=True, text=True,
                          timeout=600, cwd=str(worker.parent))
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(out.read_text())
    assert len(results) >= 17 and {k: v for k, v in results.items() if v} == {}

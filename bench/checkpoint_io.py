"""What saving ``last.ckpt`` every epoch costs a short epoch: written in the training thread against
written in the background (:class:`gnnkit.checkpoint_io.AtomicCheckpointIO`).

A full-batch epoch on a GPU takes about 10 ms (the arxiv twin's GCN on an H200, bench/results/gpu.json),
while serialising and fsyncing its checkpoint takes about as long, so a run saving every epoch spent
half its time on the disk. This benchmark runs ``--epochs`` epochs of a stand-in for such an epoch
(the host waits ``--epoch-ms``, as it waits for the GPU) and saves the real checkpoint of a recipe's
model with Adam's state after each, three ways: no saving (the floor), saving in the training
thread, saving in the background. Rows: the ``gcn_arxiv.yaml`` model (3 x 256, 128 features, 40
classes) and the ``sage_heterophilous.yaml`` model on chameleon_filtered's shape (5 residual blocks
of 512, 2,325 features, 5 classes). The figure is the wall time an epoch takes, ratios against
saving in the training thread.

    python bench/checkpoint_io.py [--epochs 100] [--epoch-ms 10] [--json PATH] [--png PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnnkit.checkpoint_io import AtomicCheckpointIO, tensor_bytes
from gnnkit.last_checkpoint import random_state
from gnnkit.models.node_gnn import NodeGNN
from pipeline import atomic_write_text, save_figure

#: Row -> NodeGNN arguments of the recipe's model.
MODELS: dict[str, dict[str, Any]] = {
    "gcn_arxiv (3 x 256)": {"model": "gcn", "in_channels": 128, "hidden_channels": 256, "out_channels": 40},
    "sage_heterophilous (5 x 512)": {"model": "sage", "in_channels": 2325, "hidden_channels": 512, "out_channels": 5,
                                     "num_layers": 5, "residual": True, "batch_norm": False, "layer_norm": True,
                                     "activation": "gelu"},
}
WAYS = ("no checkpoint", "training thread", "background")


def checkpoint_of(arguments: dict[str, Any]) -> tuple[dict[str, Any], torch.nn.Module]:
    """A checkpoint shaped as Lightning's (weights, Adam's state, the random state), with the
    model whose tensors it holds."""
    arguments = dict(arguments)
    model = NodeGNN(arguments.pop("model"), arguments.pop("in_channels"), arguments.pop("hidden_channels"),
                    arguments.pop("out_channels"), **arguments)
    optimizer = torch.optim.Adam(model.parameters())
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    checkpoint = {"epoch": 0, "state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()],
                  "callbacks": {"LastCheckpoint": {"random": [random_state()]}}}
    return checkpoint, model


def epoch_ms(way: str, checkpoint: dict[str, Any], model: torch.nn.Module, epochs: int, wait_ms: float,
             folder: Path) -> float:
    """Mean wall milliseconds an epoch: wait (the GPU's epoch), change the weights in place (the
    optimizer step), save."""
    io = AtomicCheckpointIO(background=way == "background")
    start = time.perf_counter()
    for epoch in range(epochs):
        time.sleep(wait_ms / 1000)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1e-3)
        if way != "no checkpoint":
            checkpoint["epoch"] = epoch
            io.save_checkpoint(checkpoint, folder / "last.ckpt")
    io.teardown()  # the end of the fit waits for the last write
    return (time.perf_counter() - start) / epochs * 1000


def measure(epochs: int, wait_ms: float) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(dir=ROOT) as folder:
        for label, arguments in MODELS.items():
            checkpoint, model = checkpoint_of(arguments)
            times = {way: epoch_ms(way, checkpoint, model, epochs, wait_ms, Path(folder)) for way in WAYS}
            base = times["training thread"]
            rows.append({"model": label, "checkpoint_mb": round(tensor_bytes(checkpoint) / 2**20, 2),
                         **{f"{way}_ms": round(ms, 2) for way, ms in times.items()},
                         "background_vs_training_thread": round(times["background"] / base, 3),
                         "floor_vs_training_thread": round(times["no checkpoint"] / base, 3)})
    return rows


def plot(rows: list[dict[str, Any]], wait_ms: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    width = 0.25
    for i, way in enumerate(WAYS):
        ax.bar([j + (i - 1) * width for j in range(len(rows))], [r[f"{way}_ms"] for r in rows], width, label=way)
    ax.set_xticks(range(len(rows)), [r["model"] for r in rows])
    ax.set_ylabel("ms per epoch")
    ax.set_title(f"An epoch of {wait_ms:g} ms, saving last.ckpt after it")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--epoch-ms", type=float, default=10.0, help="the host's wait per epoch (default 10)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "checkpoint_io.json")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "results" / "checkpoint_io.png")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = measure(args.epochs, args.epoch_ms)
    print(f"{'model':<30} {'MB':>7} " + " ".join(f"{way:>16}" for way in WAYS) + f" {'background/thread':>18}")
    for r in rows:
        print(f"{r['model']:<30} {r['checkpoint_mb']:>7.2f} " + " ".join(f"{r[f'{w}_ms']:>13.2f} ms" for w in WAYS)
              + f" {r['background_vs_training_thread']:>17.3f}x")
    result = {"epochs": args.epochs, "epoch_ms": args.epoch_ms, "torch": torch.__version__, "rows": rows}
    atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    plot(rows, args.epoch_ms, args.png)
    print(f"wrote {args.json} and {args.png}")


if __name__ == "__main__":
    main()

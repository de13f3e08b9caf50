"""How low-rank is full-rank Adam's cumulative weight update? The premise of InRank, measured.

Zhao et al., "InRank: Incremental Low-Rank Learning" (<https://arxiv.org/abs/2306.11250>) grow a
factorised layer's rank because the cumulative update ``W_t - W_0`` of full-rank training has a low
effective rank. This script trains a recipe's model on its data with plain Adam at the recipe's
learning rate for ``--steps`` full-graph steps, then prints, for every GNN linear map, the rank that
holds 90 % and 99 % of the update's energy (squared singular values), and the validation accuracy
of the model whose every update is truncated to rank ``k`` (``W_0 + U_k S_k V_k^T``). Where the
truncated model keeps the full one's accuracy, InRank's ``W_0 + U V^T`` layers of that rank can in
principle match full-rank training.

    python bench/update_rank.py [--recipe recipes/gcn_synthetic_arxiv.yaml] [--steps 30]
                                [--ranks 4 8 16 32 64] [--json PATH]   (and a PNG beside the JSON)
    python bench/update_rank.py --plot bench/results/update_rank.json   (only redraw its PNG)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import atomic_write_text, save_figure  # noqa: E402


def energy_rank(update: torch.Tensor, share: float) -> int:
    """Smallest ``k`` whose top-``k`` squared singular values hold ``share`` of the total."""
    energy = torch.linalg.svdvals(update) ** 2
    cumulative = energy.cumsum(0) / energy.sum()
    return int((cumulative < share).sum()) + 1


def truncated(update: torch.Tensor, rank: int) -> torch.Tensor:
    """The best rank-``rank`` approximation of ``update``."""
    u, s, vh = torch.linalg.svd(update, full_matrices=False)
    return (u[:, :rank] * s[:rank]) @ vh[:rank]


def plot(result: dict[str, object], path: Path) -> None:
    """Validation accuracy with every update truncated to rank k, against the full update's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = sorted(result["val_truncated"], key=int)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    accuracy = [result["val_truncated"][k] for k in ranks]
    ax.plot([int(k) for k in ranks], accuracy, "o-", label="update truncated to rank k")
    ax.axhline(result["val_full"], color="tab:gray", linestyle="--", label=f"full update ({result['val_full']:.4f})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rank k of every layer's update")
    ax.set_ylabel("validation accuracy")
    ax.set_title(f"{result['dataset']}: Adam's update after {result['steps']} steps", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    import lightning.pytorch as pl

    from gnnkit.data.datamodule import GraphDataModule
    from gnnkit.module import NodeClassifier

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "gcn_synthetic_arxiv.yaml",
                        help="a full-graph node-classification recipe (its model: and data: sections)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the result here, and a PNG beside it")
    parser.add_argument("--plot", type=Path, metavar="JSON", help="only draw the PNG of a JSON written so")
    args = parser.parse_args()
    if args.plot:
        plot(json.loads(args.plot.read_text()), args.plot.with_suffix(".png"))
        return
    recipe = yaml.safe_load(args.recipe.read_text())
    pl.seed_everything(args.seed)
    data = GraphDataModule(**recipe["data"])
    data.setup("fit")
    if not data.full_batch:
        raise SystemExit(f"{args.recipe}: data: expected full-graph training (batch_size 0)")
    model = NodeClassifier(**recipe["model"], in_channels=data.num_features, out_channels=data.num_classes,
                           num_nodes=data.num_nodes, task=data.task, full_batch=True)
    linears = {name: module for name, module in model.named_modules() if name.endswith(".lin")}
    start = {name: module.weight.detach().clone() for name, module in linears.items()}
    optimizer = torch.optim.Adam(model.parameters(), lr=model.hparams.lr)
    train, valid = next(iter(data.train_dataloader())), next(iter(data.val_dataloader()))

    def accuracy() -> float:
        model.eval()
        with torch.no_grad():
            return float((model(valid).argmax(-1) == valid.y[valid.target].view(-1)).float().mean())

    for step in range(args.steps):
        model.train()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(train), train.y[train.target].view(-1)).backward()
        optimizer.step()
        if (step + 1) % 10 == 0:
            print(f"step {step + 1}/{args.steps}", flush=True)
    trained = {name: module.weight.detach().clone() for name, module in linears.items()}
    result = {"dataset": data.hparams.dataset, "steps": args.steps, "val_full": accuracy(), "layers": {}, "val_truncated": {}}
    for name in linears:
        update = trained[name] - start[name]
        result["layers"][name] = {"shape": list(update.shape), "rank_90": energy_rank(update, 0.9),
                                  "rank_99": energy_rank(update, 0.99)}
    for rank in args.ranks:
        for name, module in linears.items():
            module.weight.data = start[name] + truncated(trained[name] - start[name], rank)
        result["val_truncated"][str(rank)] = accuracy()
    for name, module in linears.items():
        module.weight.data = trained[name]
    print(f"{'layer':<20}{'shape':>12}{'rank 90%':>10}{'rank 99%':>10}")
    for name, layer in result["layers"].items():
        print(f"{name:<20}{'x'.join(map(str, layer['shape'])):>12}{layer['rank_90']:>10}{layer['rank_99']:>10}")
    print(f"validation accuracy: full update {result['val_full']:.4f}; truncated to rank k: "
          + ", ".join(f"k={k} {v:.4f}" for k, v in result["val_truncated"].items()))
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=2) + "\n")
        plot(result, args.json.with_suffix(".png"))


if __name__ == "__main__":
    main()

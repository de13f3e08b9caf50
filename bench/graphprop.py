"""Graph-property training speed: ``aggregation: gnnkit`` vs PyG's ``GINEConv``/``GINConv`` path.

One epoch of synthetic-molhiv training (the ogbg-molhiv twin, batches of 32 molecules, OGB's mol
example's 5 x 300 GIN, Adam) with the same weights, the same batches and the same optimizer
settings, twice per configuration:

* ``pyg``: PyG's ``GINEConv`` (edge features, the recipe's model) or ``GINConv`` (no edge
  features): gather-scatter message passing;
* ``gnnkit``: the same layers aggregating with :func:`gnnkit.sparse.spmm` on the batch's
  block-diagonal CSR (``format: auto``, so the selector picks per batch matrix;
  :mod:`gnnkit.models.graph_gnn`).

Each training step (forward, backward, Adam step) is timed for both paths on the same batch, one
after the other, so both see the same machine load; batches are cut beforehand
(:meth:`pipeline.graph_layout.GraphSet.batch`, timed once and reported apart, the same for both).
The table gives seconds per epoch (``--batches`` steps scaled to the epoch when fewer than an
epoch are timed), ``ratio`` = pyg time / gnnkit time (above 1: gnnkit faster) and ``median``, the
median over batches of the two back-to-back steps' ratio (robust to load spikes on a shared machine). A last row
times the part where the two paths differ (:func:`aggregation_only`: the edge embeddings and the
GINE sums): dense layers, dropout and the optimizer take most of a step and are the same code in both.
First, :func:`count_baselines` prints what logistic regressions on per-graph counts (size, degrees,
bag of atom features) reach on the task: the bar a GNN has to clear. ``--aa pyg`` (or ``gnnkit``)
runs that one path on both sides: the ratio's noise floor on this machine (an A/A run).

    python bench/graphprop.py [--batches N] [--aa pyg|gnnkit] [--json bench/results/graphprop.json]
    python bench/graphprop.py --plot bench/results/graphprop.json   (only redraw its PNG)

``--json`` also draws the epoch times side by side as a PNG beside the JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnnkit.data.graph_set_datamodule import GraphSetDataModule  # noqa: E402
from gnnkit.graph_classifier import GraphClassifier  # noqa: E402
from gnnkit.sparse import Adjacency  # noqa: E402
from pipeline import atomic_write_text, save_figure  # noqa: E402

#: (label, edge features) of the compared configurations.
CONFIGS = (("GINE (edge features, the recipe)", True), ("GIN (no edge features)", False))


def _model(dm: GraphSetDataModule, aggregation: str, edge_features: bool, args: argparse.Namespace) -> GraphClassifier:
    torch.manual_seed(0)
    return GraphClassifier(model="gin", num_layers=args.layers, emb_dim=args.emb_dim, dropout=0.5,
                           aggregation=aggregation, format="auto", edge_features=edge_features,
                           in_channels=dm.num_features, edge_channels=dm.num_edge_features,
                           out_channels=dm.num_classes, molecular=dm.molecular, task=dm.task)


def _step(model: GraphClassifier, optimizer: torch.optim.Optimizer, batch: Any) -> float:
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    loss = model.loss(model(batch), batch.y)
    loss.backward()
    optimizer.step()
    return time.perf_counter() - start


def compare(dm: GraphSetDataModule, batches: list[Any], edge_features: bool, args: argparse.Namespace) -> dict[str, Any]:
    """Time both aggregation paths (with ``args.aa``, that path on both sides) on the same batches
    (same initial weights)."""
    models = {name: _model(dm, args.aa or name, edge_features, args).train() for name in ("pyg", "gnnkit")}
    models["gnnkit"].load_state_dict(models["pyg"].state_dict())
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=0.001) for name, m in models.items()}
    for batch in batches[: args.warmup]:  # first calls: allocator, kernels, selector
        for name in models:
            _step(models[name], optimizers[name], batch)
    steps: dict[str, list[float]] = {name: [] for name in models}
    for i, batch in enumerate(batches):
        order = ("pyg", "gnnkit") if i % 2 == 0 else ("gnnkit", "pyg")
        for name in order:
            steps[name].append(_step(models[name], optimizers[name], batch))
    plans = models["gnnkit"].gnn.format_report()
    return {**_ratios(steps), "plan_layer0": plans.get("layer0")}


def _ratios(steps: dict[str, list[float]]) -> dict[str, float]:
    """Total times, their ratio, and the median of the per-batch ratios (robust to load spikes on a
    shared machine: both steps of a pair ran back to back)."""
    paired = sorted(p / g for p, g in zip(steps["pyg"], steps["gnnkit"]))
    return {"pyg_s": sum(steps["pyg"]), "gnnkit_s": sum(steps["gnnkit"]),
            "ratio": sum(steps["pyg"]) / sum(steps["gnnkit"]), "median_ratio": paired[len(paired) // 2]}


def aggregation_only(dm: GraphSetDataModule, batches: list[Any], dim: int, layers: int) -> dict[str, float]:
    """Forward + backward of what the two paths do differently, ``layers`` per batch: each layer's
    edge embeddings (OGB's ``BondEncoder`` on molecules) and its GINE sums ``sum_j relu(x_j + e_ij)``.
    PyG: the encoder, then ``GINEConv``'s gather-scatter ``propagate``; gnnkit: the per-batch
    ``Adjacency`` and bond codes, then (on CPU with the native build) the fused
    :func:`~gnnkit.native.gine.gine_sum_coded` over one table row per bond type (otherwise ``spmm``
    planned per size class by :class:`~gnnkit.models.graph_gnn.BatchPlans`)."""
    from torch_geometric.nn import GINEConv

    from gnnkit.models.graph_gnn import BatchPlans, BondTypes, GraphGNNOptions, SparseGINEConv, bond_codes, edge_encoder

    torch.manual_seed(0)
    options = GraphGNNOptions(emb_dim=dim, molecular=dm.molecular, edge_channels=dm.num_edge_features)
    encoders = [edge_encoder(options) for _ in range(layers)]
    pyg, ours = GINEConv(torch.nn.Identity(), train_eps=True), SparseGINEConv(torch.nn.Identity(), format="auto")
    ours.plans = BatchPlans()  # as GraphGNN shares one across its layers
    steps: dict[str, list[float]] = {"pyg": [], "gnnkit": []}
    for i, batch in enumerate(batches):
        x = torch.randn(int(batch.num_nodes), dim, requires_grad=True)
        for name in (("pyg", "gnnkit") if i % 2 == 0 else ("gnnkit", "pyg")):
            start = time.perf_counter()
            if name == "pyg":
                outs = [pyg(x, batch.edge_index, encoder(batch.edge_attr)) for encoder in encoders]
            else:
                adj = Adjacency(batch.indptr, batch.indices, num_cols=int(batch.num_nodes), single_use=True,
                                validate=False)
                codes = bond_codes(encoders[0], batch.edge_attr)
                outs = [ours(x, adj, encoder(batch.edge_attr) if codes is None else
                             BondTypes.of(encoder, codes, batch.edge_attr.size(1))) for encoder in encoders]
            torch.stack(outs).sum().backward()
            steps[name].append(time.perf_counter() - start)
    return _ratios(steps)


def count_baselines(dm: GraphSetDataModule) -> dict[str, dict[str, float]]:
    """ROC-AUC of logistic regressions on per-graph counts, no message passing: ``size/degree``
    (atoms, bonds, degree histogram) and ``bag of atoms`` (counts of every atom feature value, plus
    size/degree). What a model that does not see which atoms are bonded can reach on the task."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from gnnkit.metrics import evaluate, make_graph_evaluator

    g = dm.graphs
    ptr = g.graph_ptr.numpy()
    owner = np.repeat(np.arange(g.num_graphs), np.diff(ptr))
    degree = np.diff(g.indptr.numpy())
    size = np.stack([np.diff(ptr), np.add.reduceat(degree, ptr[:-1]) / 2], axis=1)
    hist = np.zeros((g.num_graphs, 7))
    np.add.at(hist, (owner, np.minimum(degree, 6)), 1)
    x = g.x.numpy()
    columns = [np.zeros((g.num_graphs, int(x[:, c].max()) + 1)) for c in range(x.shape[1])]
    for c, block in enumerate(columns):
        np.add.at(block, (owner, x[:, c]), 1)
    features = {"size/degree": np.hstack([size, hist]), "bag of atoms": np.hstack([size, hist, *columns])}
    y = g.y.numpy()[:, 0]
    evaluator = make_graph_evaluator(dm.task["name"], dm.task["eval_metric"], dm.task["num_tasks"])
    out = {}
    for name, f in features.items():
        scaler = StandardScaler().fit(f[g.split["train"].numpy()])
        model = LogisticRegression(max_iter=2000).fit(scaler.transform(f[g.split["train"].numpy()]),
                                                      y[g.split["train"].numpy()])
        out[name] = {}
        for split in ("valid", "test"):
            ids = g.split[split].numpy()
            score = model.decision_function(scaler.transform(f[ids]))
            out[name][split] = evaluate(evaluator, torch.from_numpy(y[ids]).view(-1, 1),
                                        torch.from_numpy(score).view(-1, 1))
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    """Seconds an epoch of each configuration (and of the aggregation alone), both paths side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = dict(result["configs"])
    if "aggregation_only" in result:
        rows["edge embeddings + sums"] = result["aggregation_only"]
    aa = result.get("aa")
    sides = ("PyG", "gnnkit") if aa is None else (f"{aa} (A)", f"{aa} (B)")
    fig, ax = plt.subplots(figsize=(8, 3.6))
    at = range(len(rows))
    for shift, key, side in ((-0.2, "pyg_epoch_s", sides[0]), (0.2, "gnnkit_epoch_s", sides[1])):
        bars = ax.bar([i + shift for i in at], [r[key] for r in rows.values()], width=0.4, label=side)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(list(at), [f"{label}\n{r['ratio']:.2f}x" for label, r in rows.items()], fontsize=8)
    ax.set_ylabel("seconds an epoch")
    threads = f"{result['threads']} thread{'s' * (result['threads'] != 1)}"
    ax.set_title(f"{result['dataset']}: GIN {result['layers']} x {result['emb_dim']}, {threads} "
                 f"(ratio {sides[0]} / {sides[1]})", fontsize=10)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic-molhiv")
    parser.add_argument("--batches", type=int, default=0, help="training steps timed (0: one whole epoch)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--layers", type=int, default=5)
    parser.add_argument("--emb-dim", type=int, default=300)
    parser.add_argument("--baselines-only", action="store_true", help="only the count baselines (seconds)")
    parser.add_argument("--aa", choices=("pyg", "gnnkit"), default=None,
                        help="A/A run: this aggregation path on both sides (the ratio's noise floor)")
    parser.add_argument("--json", type=Path, default=None, help="write the result here, and a PNG beside it")
    parser.add_argument("--plot", type=Path, metavar="JSON", help="only draw the PNG of a JSON written so")
    args = parser.parse_args(argv)
    if args.plot:
        result = json.loads(args.plot.read_text())
        plot(result, args.plot.with_suffix(".png"))
        return result
    torch.set_num_threads(torch.get_num_threads())
    dm = GraphSetDataModule(args.dataset, batch_size=32)
    baselines = count_baselines(dm)
    print(f"{'count baseline (logistic regression)':<38} {'valid':>7} {'test':>7}  ({dm.task['eval_metric']})")
    for name, r in baselines.items():
        print(f"{name:<38} {r['valid']:>7.4f} {r['test']:>7.4f}")
    if args.baselines_only:
        return {"baselines": baselines}
    loader = dm.train_dataloader()
    start = time.perf_counter()
    batches = [b for _, b in zip(range(args.batches or len(loader)), loader)]
    collate_s = time.perf_counter() - start
    scale = len(loader) / len(batches)
    print(f"{args.dataset}: {len(batches)} of {len(loader)} training batches of 32 molecules timed "
          f"(~{sum(int(b.num_nodes) for b in batches) / len(batches):.0f} atoms each), GIN {args.layers} x "
          f"{args.emb_dim}, {torch.get_num_threads()} threads; cutting the batches: {collate_s * scale:.2f} s/epoch")
    rows = {}
    for label, edges in CONFIGS:
        result = compare(dm, batches, edges, args)
        result.update(pyg_epoch_s=result["pyg_s"] * scale, gnnkit_epoch_s=result["gnnkit_s"] * scale)
        rows[label] = result
    sides = ("PyG", "gnnkit") if args.aa is None else (f"{args.aa} (A)", f"{args.aa} (B)")
    print(f"\n{'configuration':<34} {sides[0] + ' s/epoch':>15} {sides[1] + ' s/epoch':>15} {'ratio':>7} "
          f"{'median':>7}  gnnkit plan (layer 0)")
    for label, r in rows.items():
        plan = r["plan_layer0"] or {}
        print(f"{label:<34} {r['pyg_epoch_s']:>15.1f} {r['gnnkit_epoch_s']:>15.1f} {r['ratio']:>7.3f} "
              f"{r['median_ratio']:>7.3f}  {plan.get('forward')}/{plan.get('backward')}")
    result = {
        "dataset": args.dataset, "batches_timed": len(batches), "batches_per_epoch": len(loader),
        "layers": args.layers, "emb_dim": args.emb_dim, "threads": torch.get_num_threads(),
        "machine": platform.machine(), "aa": args.aa, "collate_epoch_s": collate_s * scale, "configs": rows,
        "count_baselines": baselines,
        "summary": {"ratio_gine": rows[CONFIGS[0][0]]["ratio"], "ratio_gin": rows[CONFIGS[1][0]]["ratio"],
                    "median_ratio_gine": rows[CONFIGS[0][0]]["median_ratio"],
                    "median_ratio_gin": rows[CONFIGS[1][0]]["median_ratio"]},
    }
    if args.aa is None:
        agg = aggregation_only(dm, batches, args.emb_dim, args.layers)
        agg.update(pyg_epoch_s=agg["pyg_s"] * scale, gnnkit_epoch_s=agg["gnnkit_s"] * scale)
        print(f"{'edge embeddings + sums (fwd+bwd)':<34} {agg['pyg_epoch_s']:>15.1f} {agg['gnnkit_epoch_s']:>15.1f} "
              f"{agg['ratio']:>7.3f} {agg['median_ratio']:>7.3f}")
        result["aggregation_only"] = agg
        result["summary"]["ratio_edges_and_sums"] = agg["ratio"]
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=2) + "\n")
        plot(result, args.json.with_suffix(".png"))
    return result


if __name__ == "__main__":
    main()

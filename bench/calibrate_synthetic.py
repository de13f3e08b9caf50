"""Calibrate the synthetic twins: MLP vs GCN vs GraphSAGE accuracy under OGB's arxiv protocol.

Generates a preset (optionally scaled or with knobs overridden) into a temp folder, reads it back with
OGB's raw readers (``pipeline.ogb_layout``), makes the graph undirected and trains, full-batch:
3 layers, hidden 256, BatchNorm + ReLU + dropout 0.5 between layers; GCN = PyG ``GCNConv`` (self
loops, symmetric normalisation, cached), SAGE = PyG ``SAGEConv`` (mean), MLP = ``Linear`` layers of
the same shape; Adam, lr 0.01; test accuracy at the epoch of best validation accuracy. These are the
settings of OGB's own ogbn-arxiv examples, whose leaderboard numbers are the targets:

    ogbn-arxiv     MLP 55.50  GCN 71.74  SAGE 71.49
    ogbn-products  MLP 61.06  GCN 75.64  SAGE 78.50

Examples::

    python bench/calibrate_synthetic.py --preset synthetic-arxiv --epochs 300
    python bench/calibrate_synthetic.py --preset synthetic-products --scale 0.04 --set label_noise=0.1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline import atomic_write_text  # noqa: E402
from pipeline.family import read_meta_json  # noqa: E402
from pipeline.ogb_layout import read_ogb_folder  # noqa: E402
from pipeline.synthetic import SyntheticSpec, generate, presets  # noqa: E402

TARGETS = {
    "synthetic-arxiv": {"mlp": 55.50, "gcn": 71.74, "sage": 71.49},
    "synthetic-products": {"mlp": 61.06, "gcn": 75.64, "sage": 78.50},
}


class Net(nn.Module):
    """OGB's arxiv example network: (layer, BN, ReLU, dropout) x (L-1), then a last layer."""

    def __init__(self, kind: str, in_dim: int, hidden: int, out_dim: int, layers: int, dropout: float):
        super().__init__()
        from torch_geometric.nn import GCNConv, SAGEConv

        def layer(i: int, o: int) -> nn.Module:
            if kind == "gcn":
                return GCNConv(i, o, cached=True)
            if kind == "sage":
                return SAGEConv(i, o, aggr="mean")
            return nn.Linear(i, o)

        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.kind = kind
        self.layers = nn.ModuleList(layer(i, o) for i, o in zip(dims[:-1], dims[1:]))
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(layers - 1))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, adj) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x) if self.kind == "mlp" else layer(x, adj)
            if i < len(self.norms):
                x = F.dropout(F.relu(self.norms[i](x)), p=self.dropout, training=self.training)
        return x.log_softmax(dim=-1)


def load(folder: Path, adj_format: str):
    """Read the folder back with OGB's readers; undirected graph as ``edge_index`` or sparse CSR."""
    meta = read_meta_json(folder)
    raw = read_ogb_folder(folder, meta)
    n = raw.num_nodes
    ei = torch.from_numpy(raw.edge_index)
    ei = torch.cat([ei, ei.flip(0)], dim=1)  # undirected: add the reverse of every edge
    if adj_format == "csr":
        # adj_t: rows = destinations, duplicates summed away into one entry of value 1.
        key = torch.unique(ei[1] * n + ei[0])
        row, col = key // n, key % n
        adj = torch.sparse_coo_tensor(
            torch.stack([row, col]), torch.ones(key.numel()), (n, n)
        ).coalesce().to_sparse_csr()
    else:
        adj = ei
    x = torch.from_numpy(np.asarray(raw.node_feat, dtype=np.float32)) if raw.node_feat is not None else None
    y = torch.from_numpy(np.asarray(raw.labels).reshape(-1).astype(np.int64))
    split = {k: torch.from_numpy(v) for k, v in raw.split.items()}
    return x, y, adj, split, meta, raw


def train(kind: str, x, y, adj, split, num_classes: int, epochs: int, seed: int,
          patience: int, log_every: int) -> dict:
    torch.manual_seed(seed)
    model = Net(kind, x.shape[1], 256, num_classes, layers=3, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    best = {"val": -1.0, "test": 0.0, "train": 0.0, "epoch": 0}
    times = []
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        out = model(x, adj)
        loss = F.nll_loss(out[split["train"]], y[split["train"]])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        model.eval()
        with torch.no_grad():
            pred = model(x, adj).argmax(dim=-1)
        acc = {k: float((pred[v] == y[v]).float().mean()) for k, v in split.items()}
        if acc["valid"] > best["val"]:
            best = {"val": acc["valid"], "test": acc["test"], "train": acc["train"], "epoch": epoch}
        if log_every and epoch % log_every == 0:
            print(f"  {kind} epoch {epoch}: loss {loss.item():.4f} train {acc['train']:.4f} "
                  f"valid {acc['valid']:.4f} test {acc['test']:.4f}", flush=True)
        if patience and epoch - best["epoch"] >= patience:
            break
    return {
        "model": kind,
        "test_acc": 100 * best["test"],
        "val_acc": 100 * best["val"],
        "train_acc": 100 * best["train"],
        "best_epoch": best["epoch"],
        "epochs_run": epoch,
        "epoch_time_s": float(np.median(times)),
    }


def graph_stats(raw, y: np.ndarray) -> dict:
    ei = raw.edge_index
    deg = np.bincount(ei.ravel(), minlength=raw.num_nodes)
    return {
        "num_nodes": raw.num_nodes,
        "num_edges_stored": int(ei.shape[1]),
        "mean_degree": float(deg.mean()),
        "median_degree": float(np.median(deg)),
        "max_degree": int(deg.max()),
        "edge_homophily": float((y[ei[0]] == y[ei[1]]).mean()),
        "split_sizes": {k: int(v.size) for k, v in raw.split.items()},
    }


def parse_overrides(items: list[str]) -> dict:
    fields = {f.name: f.type for f in dataclasses.fields(SyntheticSpec)}
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in fields:
            raise SystemExit(f"--set {item}: unknown SyntheticSpec field {key!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value  # a plain string such as a split scheme
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="synthetic-arxiv", choices=sorted(presets()))
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--models", default="mlp,gcn,sage")
    ap.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--seed", type=int, default=None, help="generator seed (default: the preset's)")
    ap.add_argument("--train-seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0,
                    help="scale num_nodes, num_edges and max_degree (same average degree), e.g. 0.04")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a SyntheticSpec field (repeatable)")
    ap.add_argument("--adj", choices=("edge_index", "csr"), default="edge_index",
                    help="pass PyG layers a plain edge_index (default) or a torch sparse CSR adj_t (faster)")
    ap.add_argument("--patience", type=int, default=0, help="stop after this many epochs without a better val acc")
    ap.add_argument("--log-every", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    spec = presets()[args.preset]
    changes = parse_overrides(args.set)
    if args.seed is not None:
        changes["seed"] = args.seed
    if args.scale != 1.0:
        changes["num_nodes"] = max(3, int(round(spec.num_nodes * args.scale)))
        changes["num_edges"] = int(round(spec.num_edges * args.scale))
        if spec.max_degree and "max_degree" not in changes:
            changes["max_degree"] = max(1, int(round(spec.max_degree * args.scale)))
    spec = dataclasses.replace(spec, **changes)
    if spec.num_features == 0:
        raise SystemExit(f"{args.preset}: featureless; calibrate its featured twin instead")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in ("mlp", "gcn", "sage"):
            raise SystemExit(f"--models: unknown model {m!r}; expected mlp, gcn, sage")

    with tempfile.TemporaryDirectory(prefix="calibrate-") as tmp:
        folder = Path(tmp) / "graph"
        t0 = time.perf_counter()
        generate(folder, spec)
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        x, y, adj, split, meta, raw = load(folder, args.adj)
        load_s = time.perf_counter() - t0
        stats = graph_stats(raw, y.numpy())
        del raw
    print(f"{args.preset}: generated in {gen_s:.1f} s, read back in {load_s:.1f} s; "
          f"{stats['num_nodes']:,} nodes, {stats['num_edges_stored']:,} edges, mean degree "
          f"{stats['mean_degree']:.1f}, max {stats['max_degree']:,}, homophily {stats['edge_homophily']:.3f}, "
          f"split {stats['split_sizes']}", flush=True)

    results = []
    for kind in models:
        res = train(kind, x, y, adj, split, meta["num_classes"], args.epochs, args.train_seed,
                    args.patience, args.log_every)
        results.append(res)
        print(f"  {kind}: test {res['test_acc']:.2f}  val {res['val_acc']:.2f}  "
              f"(epoch {res['best_epoch']}/{res['epochs_run']}, {res['epoch_time_s']:.3f} s/epoch)", flush=True)

    target = TARGETS.get(args.preset.replace("-nofeat", ""), {})
    print()
    print(f"{'model':<6} {'test acc':>9} {'val acc':>8} {'best ep':>8} {'s/epoch':>8} {'OGB target':>11}")
    for r in results:
        tgt = target.get(r["model"])
        print(f"{r['model']:<6} {r['test_acc']:>9.2f} {r['val_acc']:>8.2f} {r['best_epoch']:>8d} "
              f"{r['epoch_time_s']:>8.3f} {(f'{tgt:.2f}' if tgt else '-'):>11}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps({
            "preset": args.preset,
            "spec": dataclasses.asdict(spec),
            "epochs": args.epochs,
            "adj": args.adj,
            "generate_s": gen_s,
            "read_s": load_s,
            "graph": stats,
            "results": results,
            "targets": target,
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

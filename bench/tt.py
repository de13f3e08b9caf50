"""TT embedding lookup benchmark: nn.Embedding vs plain TT vs gnnkit's TT, optimisation by optimisation.

Index batches come from real neighbour-sampled mini-batches of a featureless twin (gnnkit's CSR
sampler, GraphSAGE fan-out), so duplicates and locality are realistic:

* ``nodes``: ``batch.n_id``, what :class:`gnnkit.module.NodeClassifier` looks up (no duplicates);
* ``edges``: the source node of every sampled edge (an edge-wise lookup, many duplicates).

Variants, timed side by side (round-robin, median of rounds) on the same batches:

* ``nn.Embedding`` (dense gradient, as the module trains it) and ``nn.Embedding(sparse=True)``;
* ``TT plain``: every row contracts its own core slices (TT-Rec's lookup without reuse);
* gnnkit's TT with each optimisation switched on in turn: ``+dedup``, ``+prefix reuse``, ``+hot
  cache`` (FALCON-style, highest-degree nodes; invalidated before every training step, as an
  optimizer step would), ``+reorder`` (graph-aware node order from the cache entry, ``--reorder``:
  multi-level partition by default, or reverse Cuthill-McKee);
* when the native kernels are built (:mod:`gnnkit.native`): ``native fused``, the same dedup and
  prefix reuse fused into one C++ kernel (what :class:`~gnnkit.tt.TTEmbedding` runs for tables
  without a hot-row cache), and ``native fused +reorder``.

``train`` is forward + backward (rows/s), ``eval`` forward only without gradients. Every TT variant
is checked against its own plain lookup on the first batch before timing. With ``--full-report``
and ``--tt-report`` (``report.json`` of ``recipes/emb_*.yaml`` and ``recipes/tt_*.yaml`` runs) the
accuracy table is printed too.

    python bench/tt.py [--dataset synthetic-products-nofeat] [--json PATH] [--plot PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnnkit.data.sampler import neighbor_loader  # noqa: E402
from gnnkit.native import loader as native_loader  # noqa: E402
from gnnkit.tt import TTConfig, TTEmbedding, auto_config  # noqa: E402
from pipeline import atomic_write_text, preprocess, resolve, save_figure  # noqa: E402
from pipeline.reorder import prefix_sharing  # noqa: E402
from torch_geometric.data import Data  # noqa: E402

TT_STEPS = ["TT plain", "+dedup", "+prefix reuse", "+hot cache", "+reorder"]
NATIVE_STEPS = ["native fused", "native fused +reorder"]


def sample_batches(graph: Any, count: int, batch_size: int, fanout: list[int], seed: int) -> dict[str, list[Tensor]]:
    """``count`` sampled mini-batches of the training split as node and edge index batches."""
    loader = neighbor_loader(Data(num_nodes=graph.num_nodes), graph.indptr, graph.indices, num_neighbors=fanout,
                             input_nodes=graph.split["train"], batch_size=batch_size, shuffle=True, seed=seed)
    nodes, edges = [], []
    for i, batch in enumerate(loader):
        if i == count:
            break
        nodes.append(batch.n_id.clone())
        edges.append(batch.n_id[batch.edge_index[0]].clone())
    return {"nodes": nodes, "edges": edges}


def _tt(config: TTConfig, cores: list[Tensor], order: Tensor | None = None, hot: Tensor | None = None) -> TTEmbedding:
    emb = TTEmbedding(config)
    with torch.no_grad():
        for mine, value in zip(emb.cores, cores):
            mine.copy_(value)
    if order is not None:
        emb.set_order(order)
    if hot is not None:
        emb.set_hot_nodes(hot)
    return emb


def build_variants(num_nodes: int, dim: int, compression: float, hot_rows: int, degree: Tensor,
                   order: Tensor) -> tuple[dict[str, nn.Module], TTConfig]:
    """Every variant, the TT ones sharing one set of core values."""
    base = auto_config(num_nodes, dim, compression=compression, hot_rows=hot_rows)
    cores = [c.detach().clone() for c in TTEmbedding(base, generator=torch.Generator().manual_seed(0)).cores]
    hot = torch.topk(degree.float(), hot_rows).indices

    def cfg(**kw: Any) -> TTConfig:
        return TTConfig(base.num_embeddings, base.p_shapes, base.q_shapes, base.ranks, hot_rows=hot_rows, **kw)

    variants: dict[str, nn.Module] = {
        "nn.Embedding": nn.Embedding(num_nodes, dim),
        "nn.Embedding sparse": nn.Embedding(num_nodes, dim, sparse=True),
        "TT plain": _tt(cfg(dedup=False, prefix_reuse=False), cores),
        "+dedup": _tt(cfg(prefix_reuse=False), cores),
        "+prefix reuse": _tt(cfg(), cores),
        "+hot cache": _tt(cfg(), cores, hot=hot),
        "+reorder": _tt(cfg(), cores, order=order, hot=hot),
    }
    if native_loader.available():  # hot_rows=0: TTEmbedding takes the fused kernel
        fused = TTConfig(base.num_embeddings, base.p_shapes, base.q_shapes, base.ranks, hot_rows=0)
        variants["native fused"] = _tt(fused, cores)
        variants["native fused +reorder"] = _tt(fused, cores, order=order)
    return variants, base


def check_variants(variants: dict[str, nn.Module], batch: Tensor) -> None:
    """Each TT variant's lookup equals its plain per-row lookup (values, and gradients of the cores)."""
    g = torch.randn(batch.numel(), variants["TT plain"].embedding_dim, generator=torch.Generator().manual_seed(1))
    for name in tt_variants(variants):
        emb = variants[name]
        for fast in (True, False):
            for p in emb.parameters():
                p.grad = None
            out = emb(batch) if fast else emb.lookup_plain(batch)
            out.backward(g)
            grads = [p.grad.clone() for p in emb.parameters()]
            if fast:
                got, got_grads = out.detach(), grads
        torch.testing.assert_close(got, out.detach(), rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
        for a, b in zip(got_grads, grads):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4, msg=lambda m: f"{name} gradient: {m}")


def tt_variants(variants: dict[str, nn.Module]) -> list[str]:
    """Names of the TT variants present, in table order."""
    return [name for name in TT_STEPS + NATIVE_STEPS if name in variants]


def _step(emb: nn.Module, idx: Tensor, grad: Tensor, train: bool) -> None:
    if not train:
        with torch.no_grad():
            emb(idx)
        return
    if isinstance(emb, TTEmbedding) and emb.cache is not None:
        emb.cache.invalidate()  # an optimizer step changes the cores before every training lookup
    for p in emb.parameters():
        p.grad = None
    emb(idx).backward(grad)


def time_variants(variants: dict[str, nn.Module], batches: list[Tensor], rounds: int, train: bool) -> dict[str, float]:
    """Rows per second of every variant (median over rounds of the time for all batches)."""
    dim = next(iter(variants.values())).embedding_dim
    grads = [torch.randn(b.numel(), dim) for b in batches]
    times: dict[str, list[float]] = {name: [] for name in variants}
    for name, emb in variants.items():  # warm-up
        _step(emb, batches[0], grads[0], train)
    for _ in range(rounds):
        for name, emb in variants.items():
            start = time.perf_counter()
            for idx, grad in zip(batches, grads):
                _step(emb, idx, grad, train)
            times[name].append(time.perf_counter() - start)
    rows = sum(b.numel() for b in batches)
    return {name: rows / statistics.median(t) for name, t in times.items()}


def memory_mb(emb: nn.Module, batch_rows: int) -> float:
    """Parameters + their gradient (dense, or the batch's rows when sparse) + order + cache, MB."""
    if isinstance(emb, TTEmbedding):
        mem = emb.memory_bytes()
        return (mem["total"] + mem["cores"]) / 2**20
    weight = emb.weight
    grad = batch_rows * weight.shape[1] * 4 if emb.sparse else weight.numel() * 4
    return (weight.numel() * 4 + grad) / 2**20


def _read_acc(path: str | None) -> float | None:
    if not path:
        return None
    return float(json.loads(Path(path).read_text())["test"])


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(results)
    fig, axes = plt.subplots(1, len(workloads), figsize=(7 * len(workloads), 4.5), squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        rows = results[workload]["variants"]
        names = list(rows)
        x = torch.arange(len(names)).float()
        ax.bar(x - 0.2, [rows[n]["train_rows_s"] for n in names], 0.4, label="train (fwd+bwd)")
        ax.bar(x + 0.2, [rows[n]["eval_rows_s"] for n in names], 0.4, label="eval (fwd)")
        ax.set_xticks(x.tolist(), names, rotation=30, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("rows / s")
        ax.set_title(f"{workload}: {results[workload]['rows_per_batch']:,} rows/batch")
        ax.grid(axis="y", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic-products-nofeat")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--compression", type=float, default=1000.0)
    parser.add_argument("--hot-rows", type=int, default=16384)
    parser.add_argument("--reorder", default="partition", choices=["partition", "rcm"],
                        help="node order of the +reorder variants")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanout", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--workloads", nargs="+", default=["nodes", "edges"], choices=["nodes", "edges"])
    parser.add_argument("--full-report", help="report.json of the full-embedding recipe run")
    parser.add_argument("--tt-report", help="report.json of the TT recipe run")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--plot", help="PNG path (default: beside --json, else tt_bench.png)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)

    spec = resolve(args.dataset)
    graph = preprocess(spec, spec.preprocess.replace(reorder=args.reorder)).open()
    order = graph.extra["node_order"].clone()
    batches = sample_batches(graph, args.batches, args.batch_size, args.fanout, seed=0)
    variants, config = build_variants(graph.num_nodes, args.dim, args.compression, args.hot_rows, graph.degree(), order)
    check_variants(variants, batches["nodes"][0][:20000])
    ip, ix = graph.indptr.numpy(), graph.indices.numpy()
    sharing = {"identity": prefix_sharing(ip, ix, config.p_shapes[-1]),
               args.reorder: prefix_sharing(ip, ix, config.p_shapes[-1], order.numpy())}

    results: dict[str, Any] = {}
    for workload in args.workloads:
        data = batches[workload]
        train = time_variants(variants, data, args.rounds, train=True)
        evals = time_variants(variants, data, args.rounds, train=False)
        rows = round(statistics.mean(b.numel() for b in data))
        unique = round(statistics.mean(torch.unique(b).numel() for b in data))
        table = {}
        for name, emb in variants.items():
            table[name] = {
                "train_rows_s": round(train[name]), "eval_rows_s": round(evals[name]),
                "train_vs_plain_tt": round(train[name] / train["TT plain"], 2),
                "train_vs_embedding": round(train[name] / train["nn.Embedding"], 3),
                "memory_mb": round(memory_mb(emb, rows), 2),
            }
        results[workload] = {"rows_per_batch": rows, "unique_per_batch": unique, "variants": table}

    print(f"\n{args.dataset}: {graph.num_nodes:,} nodes x {args.dim}; TT p={config.p_shapes} q={config.q_shapes} "
          f"ranks={config.ranks}: {config.num_params:,} parameters, {config.compression:.0f}x compression; "
          f"hot rows {args.hot_rows:,}; edges sharing a last-level TT prefix: identity {sharing['identity']:.4f}, "
          f"{args.reorder} {sharing[args.reorder]:.4f}")
    for workload, res in results.items():
        print(f"\n[{workload}] {args.batches} sampled batches (batch {args.batch_size}, fan-out {args.fanout}), "
              f"{res['rows_per_batch']:,} rows/batch ({res['unique_per_batch']:,} distinct)")
        print(f"{'variant':<22}{'train rows/s':>14}{'eval rows/s':>14}{'vs plain TT':>13}{'vs nn.Emb':>11}{'memory MB':>11}")
        for name, row in res["variants"].items():
            print(f"{name:<22}{row['train_rows_s']:>14,}{row['eval_rows_s']:>14,}{row['train_vs_plain_tt']:>12.2f}x"
                  f"{row['train_vs_embedding']:>10.3f}x{row['memory_mb']:>11.2f}")

    main_rows = results[args.workloads[0]]["variants"]
    ours = max(tt_variants(main_rows)[1:], key=lambda n: main_rows[n]["train_rows_s"])
    acc_full, acc_tt = _read_acc(args.full_report), _read_acc(args.tt_report)
    summary = {
        "compression": round(config.compression, 1),
        "speedup_vs_plain_tt": main_rows[ours]["train_vs_plain_tt"],
        "ratio_vs_embedding": main_rows[ours]["train_vs_embedding"],
        "ratio_vs_embedding_sparse": round(main_rows[ours]["train_rows_s"] / main_rows["nn.Embedding sparse"]["train_rows_s"], 3),
        "tt_variant": ours,
        "workload": args.workloads[0],
        "acc_full": acc_full,
        "acc_tt": acc_tt,
    }
    if acc_full is not None or acc_tt is not None:
        print("\naccuracy (test, from the recipe runs' report.json)")
        print(f"{'table':<10}{'test acc':>10}{'params':>14}")
        for kind, path, acc in (("full", args.full_report, acc_full), ("tt", args.tt_report, acc_tt)):
            if path:
                emb = json.loads(Path(path).read_text()).get("embedding", {})
                print(f"{kind:<10}{acc:>10.4f}{emb.get('num_params', 0):>14,}")
    print(f"\nsummary: {json.dumps(summary)}")
    out = {"dataset": args.dataset, "config": {"p_shapes": config.p_shapes, "q_shapes": config.q_shapes,
                                               "ranks": config.ranks, "num_params": config.num_params},
           "prefix_sharing": sharing, "args": vars(args), "results": results, "summary": summary}
    plot_path = Path(args.plot) if args.plot else (Path(args.json).with_suffix(".png") if args.json else Path("tt_bench.png"))
    plot(results, plot_path)
    print(f"plot: {plot_path}")
    if args.json:
        atomic_write_text(Path(args.json), json.dumps(out, indent=2) + "\n")
        print(f"json: {args.json}")
    return out


if __name__ == "__main__":
    main()

"""Benchmark gnnkit's learned SpMM format selection against the oracle, always-CSR and PyG.

Reproduces the comparison of Qiu, You and Wang, "Optimizing Sparse Matrix Multiplications for
Graph Neural Networks", LCPC 2021 <https://arxiv.org/abs/2111.00352> on matrices the selector never
saw in training: held-out graph kinds (2-D grids, small-world rings), corpus kinds with unseen
seeds and larger sizes, the synthetic-arxiv twin's adjacency and sampled mini-batch blocks of it.

Per matrix and width, forward plus backward (``A @ X`` and ``A^T @ dY``):

- every format's time (the same format in both passes; product + conversion / 100, measured
  interleaved, fastest of the rounds, by :func:`gnnkit.sparse.measure.measure_formats`);
- ``selected``: ``auto``'s forward and backward formats (the model's pick, close calls timed on
  the matrix, see :func:`gnnkit.sparse.selector.choose_format`); ``predicted``: the model's pick
  alone (``model/orc`` in the table); ``oracle``: the best format of each
  pass; ``csr``: gnnkit's CSR with cached transpose (the strong always-CSR baseline);
- PyG, timed end to end with autograd against gnnkit's ``spmm`` with the selected formats:
  ``EdgeIndex.matmul`` and ``torch.sparse.mm`` on a CSR tensor (PyG's fast paths; the best of them
  is "PyG") and the gather-scatter default beside them.

The end-to-end part times training steps on synthetic-arxiv: GCN full-batch and GraphSAGE on
neighbour-sampled batches, with gnnkit ``auto``, gnnkit with each fixed format that can win
(``csr``, and ``native_csr`` / ``native_sell`` when the native kernels are built) and PyG's stock
layers, each configuration in a process of its own (rounds in rotating order);
``auto_vs_best_fixed`` is the best fixed format's time over ``auto``'s.

``--device cuda`` runs all of it on the GPU: the matrices, conversions and products live there,
``auto`` asks the CUDA model (:mod:`gnnkit.sparse.selector` keeps one per device kind), and the
PyG baselines are its cuSPARSE paths (``EdgeIndex.matmul``, ``torch.sparse.mm``).

The summary's ``targets`` checks it against the device's issue: issue 3's on the CPU
(:data:`CPU_TARGETS`), issue 17's on a GPU (:data:`GPU_TARGETS`), printed at the end.

Example::

    python bench/formats.py --json bench/results/formats.json --png bench/results/formats.png
    python bench/formats.py --device cuda --json bench/results/formats_gpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.targets import Target, print_verdicts, verdicts  # noqa: E402
from gnnkit.allocator import retain_freed_memory  # noqa: E402
from gnnkit.sparse import Adjacency, plan, spmm  # noqa: E402
from gnnkit.sparse.corpus import MatrixSpec  # noqa: E402
from gnnkit.sparse.formats import FORMATS  # noqa: E402
from gnnkit.sparse.measure import measure_formats  # noqa: E402
from gnnkit.sparse.measure import synced_seconds  # noqa: E402
from gnnkit.sparse.selector import choose_format, current_selector, device_kind, model_path  # noqa: E402
from pipeline import atomic_write_text, save_figure  # noqa: E402

warnings.filterwarnings("ignore", message=".*[Ss]parse.*")

#: The selected formats' time over the oracle's, and an epoch of full-batch GCN with auto: both issues'.
_SELECTION = [
    Target(("selected_over_oracle",), 1.05, at_most=True, what="selected format within 5% of the oracle (geomean)"),
    Target(("epoch_auto_vs_best_fixed", "gcn full-batch"), 1.0,
           what="an epoch of full-batch GCN with auto no slower than the best fixed format"),
]
#: Issue 3's targets for the CPU selector.
CPU_TARGETS = [*_SELECTION, Target(("speedup_vs_csr",), 1.17, what="geomean >= 1.17x over always-CSR"),
               Target(("speedup_vs_pyg",), 1.3, what="geomean >= 1.3x over PyG's fastest path")]
#: Issue 17's targets for the GPU selector, set for one H100 or H200.
GPU_TARGETS = [*_SELECTION, Target(("speedup_vs_pyg",), 1.3,
                                   what="auto >= 1.3x PyG's fastest GPU path (EdgeIndex matmul / cuSPARSE)")]

#: Fixed formats the end-to-end part runs beside ``auto`` (native ones only when built).
E2E_FIXED = ["csr", "native_csr", "native_sell"]

#: Held-out matrices: kinds never in the corpus, and corpus kinds at unseen seeds and sizes.
HELD_OUT = [
    MatrixSpec("grid", 40_000, 40_000, 4, 10_001),
    MatrixSpec("grid", 250_000, 250_000, 4, 10_002),
    MatrixSpec("small_world", 30_000, 30_000, 10, 10_003),
    MatrixSpec("small_world", 150_000, 150_000, 4, 10_004),
    MatrixSpec("rmat", 60_000, 60_000, 12, 10_005),
    MatrixSpec("chung_lu", 120_000, 120_000, 6, 10_006),
    MatrixSpec("communities", 40_000, 40_000, 16, 10_007),
    MatrixSpec("banded", 80_000, 80_000, 8, 10_008),
    MatrixSpec("bipartite", 8_000, 60_000, 12, 10_009),
    MatrixSpec("hubs", 50_000, 50_000, 5, 10_010),
    MatrixSpec("erdos_renyi", 100_000, 100_000, 4, 10_011),
]


def geomean(values: list[float]) -> float:
    return float(math.exp(sum(math.log(v) for v in values) / len(values))) if values else float("nan")


def fastest_autograd(fns: dict[str, Callable[[torch.Tensor], torch.Tensor]], x0: torch.Tensor, grad: torch.Tensor,
                     rounds: int) -> dict[str, float]:
    """Fastest forward + backward seconds of each function, rounds interleaved (after a warm-up).

    The order rotates every round, so no path always runs right after another's large
    allocations (the gather-scatter message tensor) or always first.
    """
    best = {name: math.inf for name in fns}
    names = list(fns)
    for round_ in range(rounds + 1):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            fn = fns[name]
            x = x0.detach().requires_grad_(True)
            elapsed = synced_seconds(lambda: fn(x).backward(grad))
            if round_:
                best[name] = min(best[name], elapsed)
    return best


def pyg_paths(adj: Adjacency) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """PyG's ways of computing ``A @ X`` with autograd (rows = destinations)."""
    from torch_geometric import EdgeIndex
    from torch_geometric.utils import scatter

    dst, src = adj.rows(), adj.indices
    edge_index = EdgeIndex(torch.stack([dst, src]), sparse_size=adj.shape, sort_order="row")
    csr = torch.sparse_csr_tensor(adj.indptr, adj.indices, torch.ones(adj.nnz, device=adj.device), adj.shape)
    return {
        "pyg_edgeindex": lambda x: edge_index.matmul(x),
        "pyg_sparse_mm": lambda x: torch.sparse.mm(csr, x),
        "pyg_gather_scatter": lambda x: scatter(x[src], dst, 0, dim_size=adj.num_rows, reduce="sum"),
    }


def bench_matrix(name: str, adj: Adjacency, width: int, repeats: int) -> dict[str, Any]:
    """One table row: all format times, selection, oracle, baselines."""
    fwd = measure_formats(adj, width, repeats=repeats)
    bwd = measure_formats(adj.t(), width, repeats=repeats)
    cost_f = {n: t.cost() for n, t in fwd.items()}
    cost_b = {n: t.cost() for n, t in bwd.items()}
    plan_s = synced_seconds(lambda: plan(adj, width))  # "auto": the model's pick, close calls timed on the matrix
    p = plan(adj, width)  # cached by the call above
    predicted_f, predicted_b = (choose_format(adj, width, transpose=t, verify=False) for t in (False, True))
    selected = cost_f[p.forward] + cost_b[p.backward]
    oracle_f, oracle_b = min(cost_f, key=cost_f.get), min(cost_b, key=cost_b.get)
    oracle = cost_f[oracle_f] + cost_b[oracle_b]
    csr = cost_f["csr"] + cost_b["csr"]

    x0 = torch.randn(adj.num_cols, width).to(adj.device)
    grad = torch.randn(adj.num_rows, width).to(adj.device)
    paths = pyg_paths(adj)
    ours = {"gnnkit_selected": lambda x: spmm(adj, x, format=p.forward, backward_format=p.backward),
            "gnnkit_csr": lambda x: spmm(adj, x, format="csr")}
    check = x0[:, :4].contiguous()  # every path computes the same product
    expected = spmm(adj, check, format="csr")
    for label, fn in {**paths, **ours}.items():
        torch.testing.assert_close(fn(check).detach(), expected, atol=1e-4, rtol=1e-4, msg=label)
    autograd = fastest_autograd({**paths, **ours}, x0, grad, rounds=max(5, repeats))
    pyg_best_name = min(paths, key=autograd.get)
    row = {
        "matrix": name, "rows": adj.num_rows, "cols": adj.num_cols, "nnz": adj.nnz, "width": width,
        "format_ms": {n: round((cost_f[n] + cost_b.get(n, math.inf)) * 1e3, 4) for n in cost_f if n in cost_b},
        "selected": f"{p.forward}/{p.backward}", "oracle": f"{oracle_f}/{oracle_b}",
        "predicted": f"{predicted_f}/{predicted_b}", "plan_s": plan_s,
        "predicted_over_oracle": (cost_f[predicted_f] + cost_b[predicted_b]) / oracle,
        "selected_ms": selected * 1e3, "oracle_ms": oracle * 1e3, "csr_ms": csr * 1e3,
        "autograd_ms": {k: v * 1e3 for k, v in autograd.items()}, "pyg_best": pyg_best_name,
    }
    row["selected_over_oracle"] = selected / oracle
    row["speedup_vs_csr"] = csr / selected
    row["speedup_vs_pyg"] = autograd[pyg_best_name] / autograd["gnnkit_selected"]
    row["speedup_vs_pyg_gather_scatter"] = autograd["pyg_gather_scatter"] / autograd["gnnkit_selected"]
    return row


def twin_matrices(dataset: str, batch_size: int) -> list[tuple[str, Adjacency]]:
    """The twin's adjacency and two neighbour-sampled mini-batch blocks of it (if it is available)."""
    from gnnkit.data.sampler import neighbor_loader
    from pipeline import preprocess, resolve
    from torch_geometric.data import Data

    spec = resolve(dataset)
    graph = preprocess(spec, spec.preprocess).open()
    out = [(f"{dataset}", Adjacency(graph.indptr, graph.indices))]
    loader = neighbor_loader(Data(num_nodes=graph.num_nodes), graph.indptr, graph.indices, num_neighbors=[15, 10, 5],
                             input_nodes=graph.split["train"], batch_size=batch_size, shuffle=True, seed=0)
    batch = next(iter(loader))
    out.append((f"{dataset}-sampled-{batch_size}", Adjacency.from_edge_index(batch.edge_index, batch.num_nodes)))
    return out


class _TrainStep:
    """One Adam training step of a fresh 3-layer ``model`` aggregating as ``config`` says
    (``"pyg"``, or ``"gnnkit-<format>"`` with ``auto`` or a fixed format); same init for all."""

    def __init__(self, model: str, config: str, in_dim: int, hidden: int, classes: int, cached: bool,
                 device: torch.device) -> None:
        from gnnkit.models.node_gnn import NodeGNN

        torch.manual_seed(0)
        aggregation = "pyg" if config == "pyg" else "gnnkit"
        fmt = config.removeprefix("gnnkit-") if aggregation == "gnnkit" else "auto"
        self.net = NodeGNN(model, in_dim, hidden, classes, num_layers=3, aggregation=aggregation, format=fmt,
                           cached=cached).to(device)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=0.01)

    def __call__(self, x: torch.Tensor, edge_index: torch.Tensor, adj: Adjacency | None, target: torch.Tensor,
                 labels: torch.Tensor) -> None:
        self.opt.zero_grad()
        out = self.net(x, edge_index, adj=adj)[target]
        torch.nn.functional.cross_entropy(out, labels).backward()
        self.opt.step()


def _rotated(items: list[str], k: int) -> list[str]:
    return items[k % len(items):] + items[:k % len(items)]


def warm_device(device: torch.device) -> None:
    """Initialise a GPU's libraries before timing (the CUDA context, cuBLAS and cuSPARSE handles
    are made on first use, at a cost of the order of a hundred full-batch steps; every
    configuration's process would pay it in its first step otherwise)."""
    if device.type != "cuda":
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eye = torch.eye(4, device=device)
        torch.sparse.mm(eye.to_sparse_csr(), eye).sum().item()
        (eye @ eye).sum().item()
    torch.cuda.synchronize(device)


def e2e_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Step times of one configuration, alone in this process (``--e2e-worker``).

    ``spec``: ``dataset``, ``model`` (``"gcn"`` full-batch or ``"sage"`` sampled), ``config``,
    ``count`` (timed steps, after a first step that builds caches and lets ``auto`` decide; its time
    is returned as ``first_s``), ``hidden``, ``epochs`` (the run length ``auto`` is told, as
    :class:`~gnnkit.module.NodeClassifier` tells it when fitting starts) and ``device``. Sampled
    batches come from a seeded loader, so every process trains on the same batches; they are moved
    to the device before the timed steps.
    """
    from gnnkit.task_module import run_length
    from gnnkit.sparse.decision import set_run_length

    from gnnkit.data.sampler import neighbor_loader
    from pipeline import preprocess, resolve
    from torch_geometric.data import Data

    dataset = resolve(spec["dataset"])
    graph = preprocess(dataset, dataset.preprocess).open()
    n, count, config = graph.num_nodes, spec["count"], spec["config"]
    x = graph.x if graph.x is not None else torch.randn(n, 128, generator=torch.Generator().manual_seed(0))
    classes = int(graph.meta.get("num_classes", 40))
    y = graph.y.view(-1).clamp(min=0) % classes
    train = graph.split["train"]
    full_batch = spec["model"] == "gcn"
    device = torch.device(spec.get("device", "cpu"))
    warm_device(device)
    set_run_length(run_length(spec.get("epochs"), None, full_batch))
    step = _TrainStep(spec["model"], config, x.size(1), spec["hidden"], classes, full_batch, device)
    if full_batch:
        edge_index, adj = graph.edge_index().to(device), Adjacency(graph.indptr, graph.indices).to(device)
        inputs = [(x.to(device), edge_index, adj, train.to(device), y[train].to(device))] * (count + 1)
    else:
        loader = neighbor_loader(Data(num_nodes=n), graph.indptr, graph.indices, num_neighbors=[15, 10, 5],
                                 input_nodes=train, batch_size=1024, shuffle=True, seed=0)
        inputs = []
        for batch in loader:
            if len(inputs) == count + 1:
                break
            edge_index = batch.edge_index.to(device)
            a = (Adjacency.from_edge_index(edge_index, batch.num_nodes, single_use=True)
                 if config != "pyg" else None)
            inputs.append((x[batch.n_id].to(device), edge_index, a, torch.arange(batch.batch_size, device=device),
                           y[batch.n_id[:batch.batch_size]].to(device)))
    times = [synced_seconds(lambda: step(*item)) for item in inputs]
    return {"times": times[1:], "first_s": times[0], "formats": step.net.format_report() if config != "pyg" else {},
            "epoch_batches": math.ceil(train.numel() / 1024)}


def _run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--e2e-worker", json.dumps(spec)], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"end-to-end worker {spec['config']} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def epoch_times(dataset: str, steps: int, batches: int, hidden: int, trials: int,
                epochs: int = 100, device: str = "cpu") -> list[dict[str, Any]]:
    """Training-step times of GCN full-batch and SAGE sampled: gnnkit auto / fixed formats vs PyG.

    ``run_s``: a run of ``epochs`` epochs, the median first step (conversions, ``auto``'s decision
    and its on-matrix check if it ran) plus ``epochs - 1`` epoch times; ``auto_vs_best_fixed_run``
    compares those, so a check that cost more than it saved would show.

    Each configuration runs in a process of its own, as a training run would (no heap, cache or
    allocator state shared with the others); ``trials`` rounds run every configuration once, in an
    order that rotates from round to round, so slow drifts of the machine hit them alike.
    """
    fixed = [f for f in E2E_FIXED if FORMATS[f].selectable(torch.device(device))]
    configs = ["gnnkit-auto"] + [f"gnnkit-{f}" for f in fixed] + ["pyg"]
    rows = []
    for model, mode in (("gcn", "full-batch"), ("sage", "sampled")):
        samples: dict[str, list[float]] = {config: [] for config in configs}
        firsts: dict[str, list[float]] = {config: [] for config in configs}
        chosen: dict[str, Any] = {}
        for trial in range(trials):
            for config in _rotated(configs, trial):
                spec = {"dataset": dataset, "model": model, "config": config, "hidden": hidden,
                        "count": steps if mode == "full-batch" else batches, "epochs": epochs, "device": device}
                result = _run_worker(spec)
                samples[config] += result["times"]
                firsts[config].append(result["first_s"])
                chosen = result["formats"] if config == "gnnkit-auto" else chosen
                epoch_batches = result["epoch_batches"]
            print(f"  {model} {mode}: trial {trial + 1}/{trials} done", flush=True)
        medians = {config: sorted(t)[len(t) // 2] for config, t in samples.items()}
        if mode == "full-batch":
            times = {config: min(t) for config, t in samples.items()}
        else:
            times = {config: m * epoch_batches for config, m in medians.items()}
        first = {config: sorted(t)[len(t) // 2] for config, t in firsts.items()}
        run = {config: first[config] + (epochs - 1) * times[config] for config in configs}
        rows.append({"model": model, "mode": mode, "epoch_s": times, "step_median_s": medians,
                     "first_step_s": first, "run_s": run, "epochs": epochs,
                     "auto_vs_best_fixed_run": min(run[f"gnnkit-{f}"] for f in fixed) / run["gnnkit-auto"],
                     "best_fixed": min(fixed, key=lambda f: times[f"gnnkit-{f}"]),
                     "auto_formats": chosen,
                     "auto_vs_csr": times["gnnkit-csr"] / times["gnnkit-auto"],
                     "auto_vs_best_fixed": min(times[f"gnnkit-{f}"] for f in fixed) / times["gnnkit-auto"],
                     "auto_vs_pyg": times["pyg"] / times["gnnkit-auto"],
                     "note": ("one full-graph training step = one epoch; fastest of the steps" if mode == "full-batch"
                              else f"median step over {batches} pre-sampled batches per trial x {epoch_batches} "
                                   "batches per epoch (sampling excluded)")
                             + f"; each configuration in its own process, {trials} trials in rotating order"})
    return rows


def print_table(rows: list[dict[str, Any]], formats: list[str]) -> None:
    short = {"gather_scatter": "gs", "segment": "seg", "bsr16": "bsr16", "bsr4": "bsr4", "dense": "dense"}
    head = ["matrix", "F"] + [short.get(f, f) for f in formats] + [
        "selected", "oracle", "sel/orc", "model/orc", "csr/sel", "pyg/sel", "pyggs/sel"]
    lines = [head]
    for r in rows:
        cells = [r["matrix"][:34], str(r["width"])]
        cells += [f"{r['format_ms'][f]:.2f}" if f in r["format_ms"] else "-" for f in formats]
        cells += [r["selected"], r["oracle"], f"{r['selected_over_oracle']:.2f}", f"{r['predicted_over_oracle']:.2f}",
                  f"{r['speedup_vs_csr']:.2f}",
                  f"{r['speedup_vs_pyg']:.2f}", f"{r['speedup_vs_pyg_gather_scatter']:.2f}"]
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        print("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))))


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['matrix'][:28]} F={r['width']}" for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.5))
    ys = range(len(rows))
    h = 0.27
    ax.barh([y - h for y in ys], [r["speedup_vs_csr"] for r in rows], h, label="vs always-CSR (cached transpose)")
    ax.barh(list(ys), [r["speedup_vs_pyg"] for r in rows], h, label="vs PyG fastest path")
    ax.barh([y + h for y in ys], [1 / r["selected_over_oracle"] for r in rows], h, label="oracle / selected")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(list(ys), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speedup of the selected formats (forward + backward), log scale")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def bench_matrices(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Measure every held-out matrix at every width and print the table."""
    matrices: list[tuple[str, Adjacency]] = []
    for spec in HELD_OUT:
        if args.quick:
            spec = MatrixSpec(spec.kind, max(1000, spec.n_rows // 10), max(1000, spec.n_cols // 10),
                              spec.avg_deg, spec.seed)
        matrices.append((spec.name, spec.build()))
    try:
        matrices += twin_matrices(args.dataset, 1024)
    except Exception as err:  # the twin is optional: report, go on with the synthetic set
        print(f"(skipping {args.dataset}: {err})")
    rows = []
    for name, adj in matrices:
        adj = adj.to(args.device)
        for width in args.widths:
            start = time.perf_counter()
            rows.append(bench_matrix(name, adj, width, args.repeats))
            print(f"  measured {name} F={width} in {time.perf_counter() - start:.1f}s", flush=True)
    formats = [f for f in FORMATS if any(f in r["format_ms"] for r in rows)]
    print("\nforward + backward ms per format (same format both passes), selection and ratios:")
    print_table(rows, formats)
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``summary`` object: geomeans over the rows, best and worst cases."""
    best = max(rows, key=lambda r: r["speedup_vs_csr"])
    worst = min(rows, key=lambda r: r["speedup_vs_csr"])
    return {
        "selected_over_oracle": geomean([r["selected_over_oracle"] for r in rows]),
        "predicted_over_oracle": geomean([r["predicted_over_oracle"] for r in rows]),
        "speedup_vs_csr": geomean([r["speedup_vs_csr"] for r in rows]),
        "speedup_vs_pyg": geomean([r["speedup_vs_pyg"] for r in rows]),
        "speedup_vs_pyg_gather_scatter": geomean([r["speedup_vs_pyg_gather_scatter"] for r in rows]),
        "oracle_speedup_vs_csr": geomean([r["csr_ms"] / r["oracle_ms"] for r in rows]),
        "exact_picks": sum(r["selected"] == r["oracle"] for r in rows) / len(rows),
        "best_vs_csr": {"matrix": best["matrix"], "width": best["width"], "speedup": best["speedup_vs_csr"]},
        "worst_vs_csr": {"matrix": worst["matrix"], "width": worst["width"], "speedup": worst["speedup_vs_csr"]},
        "rows": len(rows),
    }


def write_result(args: argparse.Namespace, kind: str, selector_meta: dict[str, Any], summary: dict[str, Any],
                 rows: list[dict[str, Any]], e2e: list[dict[str, Any]]) -> None:
    """``--json`` with what is measured so far (the matrix part is written before the end-to-end
    part starts, so a run cut short keeps it)."""
    args.json.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": args.device, "device_name": torch.cuda.get_device_name() if kind == "cuda" else "cpu",
            "threads": torch.get_num_threads(), "torch": torch.__version__, "selector": str(model_path(kind)),
            "selector_meta": selector_meta, "widths": args.widths, "repeats": args.repeats,
            "quick": args.quick, "e2e_epochs": args.epochs, "e2e_steps": args.steps,
            "e2e_batches": args.batches, "e2e_trials": args.trials,
            "loadavg_at_end": os.getloadavg()}
    atomic_write_text(args.json, json.dumps({"summary": summary, "rows": rows, "end_to_end": e2e, "meta": meta},
                                            indent=2, default=float) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write the results and the summary here")
    parser.add_argument("--png", type=Path, help="per-matrix speedup plot (default: beside --json)")
    parser.add_argument("--widths", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dataset", default="synthetic-arxiv", help="twin for the adjacency and the epoch times")
    parser.add_argument("--steps", type=int, default=6, help="timed full-batch steps per configuration and trial")
    parser.add_argument("--batches", type=int, default=8, help="sampled batches per configuration and trial")
    parser.add_argument("--trials", type=int, default=3,
                        help="end-to-end rounds, each running every configuration once in its own process")
    parser.add_argument("--hidden", type=int, default=128, help="hidden width of the end-to-end models")
    parser.add_argument("--epochs", type=int, default=100,
                        help="run length auto is told in the end-to-end part (and run_s is totalled over)")
    parser.add_argument("--no-e2e", action="store_true", help="skip the end-to-end epoch times")
    parser.add_argument("--e2e-only", action="store_true",
                        help="only the end-to-end epoch times (an existing --json keeps its matrix rows)")
    parser.add_argument("--quick", action="store_true", help="held-out synthetic matrices at 1/10 size")
    parser.add_argument("--device", default="cpu", help="where matrices, formats and models run: cpu or cuda")
    parser.add_argument("--e2e-worker", metavar="JSON", help=argparse.SUPPRESS)  # one configuration's steps
    args = parser.parse_args(argv)
    retain_freed_memory()  # as `gnnkit run` does: no page faults on every step's large activations
    if args.e2e_worker:
        print(json.dumps(e2e_worker(json.loads(args.e2e_worker))))
        return 0

    kind = device_kind(args.device)
    if kind == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: CUDA is not available here (torch {torch.__version__})")
    selector = current_selector(kind)
    selector_meta = selector.meta if selector is not None else {}
    print(f"device {args.device}; {kind} selector: {model_path(kind) or 'none (auto times the candidates)'} "
          f"({selector_meta.get('matrices', '?')} training matrices); threads {torch.get_num_threads()}")
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    if args.e2e_only and args.json and args.json.is_file():  # keep the matrix part of an earlier run
        previous = json.loads(args.json.read_text())
        rows, summary = previous.get("rows", []), previous.get("summary", {})
    if not args.e2e_only:
        rows = bench_matrices(args)
        summary = summarise(rows)
        print("\nsummary (geomeans over rows):")
        for key, value in summary.items():
            print(f"  {key:32s} {value:.3f}" if isinstance(value, float) else f"  {key:32s} {value}")
        if args.json:
            write_result(args, kind, selector_meta, summary, rows, [])
    e2e = []
    if not args.no_e2e:
        try:
            e2e = epoch_times(args.dataset, args.steps, args.batches, args.hidden, args.trials, args.epochs,
                              args.device)
        except Exception as err:
            if args.e2e_only:  # the part asked for failed: say so in the exit status
                raise SystemExit(f"end-to-end epoch times failed: {type(err).__name__}: {err}") from err
            print(f"(skipping end-to-end epoch times: {err})")
        if e2e:
            summary["epoch_auto_vs_best_fixed"] = {f"{r['model']} {r['mode']}": round(r["auto_vs_best_fixed"], 3)
                                                   for r in e2e}
            summary["run_auto_vs_best_fixed"] = {f"{r['model']} {r['mode']}": round(r["auto_vs_best_fixed_run"], 3)
                                                 for r in e2e}
            print("\nend-to-end epoch time (s) on", args.dataset)
            configs = list(e2e[0]["epoch_s"])
            w = max(len(c) for c in configs) + 2
            print("  " + f"{'model':6s} {'mode':11s}" + "".join(f"{c:>{w}s}" for c in configs)
                  + f" {'best fixed/auto':>16s} {'run ratio':>10s} {'pyg/auto':>9s}  auto formats")
            for r in e2e:
                fmts = ", ".join(f"{k}:{v['forward']}/{v['backward']}@{v['width']}" for k, v in r["auto_formats"].items())
                print(f"  {r['model']:6s} {r['mode']:11s}" + "".join(f"{r['epoch_s'][c]:{w}.3f}" for c in configs)
                      + f" {r['auto_vs_best_fixed']:16.2f} {r['auto_vs_best_fixed_run']:10.2f} {r['auto_vs_pyg']:9.2f}"
                      f"  {fmts}")
            print(f"  best fixed/auto: best fixed format's epoch time over auto's; run ratio: the same over "
                  f"{args.epochs} epochs including the first step (conversions, auto's decision and check)")
    summary["targets"] = (verdicts(summary, GPU_TARGETS, "issue 17") if kind == "cuda"
                          else verdicts(summary, CPU_TARGETS, "issue 3"))
    print_verdicts(summary["targets"])
    if args.json:
        write_result(args, kind, selector_meta, summary, rows, e2e)
        print(f"\nwrote {args.json}")
    png = args.png or (args.json.with_suffix(".png") if args.json else None)
    if png and rows:
        plot(rows, png)
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Native kernels vs their best PyTorch equivalents, side by side, at 1 and 2 threads.

* **SpMM** ``A @ X`` (forward product, float32): gnnkit's native CSR (nnz-balanced row split, GE-SpMM
  <https://arxiv.org/abs/2007.03179>) and SELL-C-sigma (<https://arxiv.org/abs/1307.6209>) against
  torch's CSR kernel (``torch.sparse.mm`` on a ``sparse_csr`` tensor, MKL where torch has it) and
  PyG-style gather-scatter (``index_select`` + ``index_add_``), on a power-law graph and a uniform
  one with the node and edge counts of the ogbn-arxiv twin, plus a large graph whose compulsory
  memory traffic (CSR arrays, X once, the output once) is set against a measured copy bandwidth
  (``Tensor.copy_`` of 256 MiB), the physical limit.
* **Sampler**: :class:`gnnkit.data.sampler.CSRNeighborSampler` with the native kernel vs its
  pure-PyTorch path (the same object under :func:`gnnkit.native.disabled`), GraphSAGE fan-out
  ``[15, 10, 5]``, batches of 1024 seeds on the power-law graph.
* **TT lookup** (training: forward + backward): the fused native kernel, with prefix reuse and row
  by row (``reuse_prefixes=False``: no sort; the faster of the two is "ours"), vs gnnkit's Python
  prefix-reuse lookup (:func:`gnnkit.tt.lookup.lookup` with the kernel off) and the plain lookup,
  on the ogbn-products shape (p = 125x140x140, q = 4x5x5, ranks 16,16) with batches of power-law
  popular rows (duplicates, as edge-wise lookups have); on a GPU also against the dense
  ``nn.Embedding`` the TT table replaces, at 20,000 rows and at 200,000 (a sampled batch's inputs).

Every pair is timed interleaved (round-robin, fastest of the rounds) in one process. Ratios measured
side by side hold on these shared machines; absolute times drift.

With ``--device cuda`` the same inputs run on the GPU instead: the CUDA SpMM kernels against
cuSPARSE (torch's CSR on a GPU) and gather-scatter, their bandwidth against a device-to-device
copy, the CUDA sampler against the native CPU sampler at every CPU thread, and the CUDA TT lookup
against the Python reuse version on the GPU. The summary's ``targets`` checks the figures against the
device's issue: issue 7's on the CPU (:data:`CPU_TARGETS`), issue 17's on a GPU (:data:`GPU_TARGETS`),
printed under the table.

    python bench/native.py [--json PATH] [--png PATH] [--quick] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.targets import Target, print_verdicts, verdicts  # noqa: E402
from gnnkit import native  # noqa: E402
from gnnkit.allocator import retain_freed_memory  # noqa: E402
from gnnkit.data.sampler import CSRNeighborSampler  # noqa: E402
from gnnkit.native import ops  # noqa: E402
from gnnkit.tt.lookup import lookup, lookup_plain  # noqa: E402
from pipeline import atomic_write_text, save_figure  # noqa: E402
from torch_geometric.sampler import NodeSamplerInput  # noqa: E402

ARXIV_NODES, ARXIV_EDGES = 169_343, 1_166_243

#: Issue 7's targets for the CPU kernels.
CPU_TARGETS = [
    Target(("spmm_vs_torch_csr_powerlaw",), 1.3, what="native CSR/SELL SpMM >= 1.3x torch's CSR on power-law graphs"),
    Target(("spmm_vs_torch_csr_other_min",), 0.9, what="never slower than 0.9x on others"),
    Target(("sampler_speedup",), 3.0, what="native sampler >= 3x the pure-PyTorch sampler"),
    Target(("tt_fused_speedup",), 2.0, what="fused TT lookup >= 2x the Python reuse version"),
    Target(("spmm_bandwidth_fraction",), 0.5, what="SpMM >= 50% of measured copy bandwidth on large graphs"),
]
#: Issue 17's targets for the CUDA kernels, set for one H100 or H200.
GPU_TARGETS = [
    Target(("spmm_vs_torch_csr_powerlaw",), 1.3, what="native CUDA SpMM >= 1.3x cuSPARSE on power-law graphs"),
    Target(("spmm_vs_torch_csr_other_min",), 1.0, what=">= 1.0x on every other graph"),
    Target(("spmm_bandwidth_fraction_min",), 0.6, what=">= 60% of measured device copy bandwidth on the 1M-row graphs"),
    Target(("sampler_speedup",), 5.0, what="CUDA sampler >= 5x the native CPU sampler on the same host"),
    Target(("tt_vs_plain",), 3.0, what="CUDA fused TT >= 3x the plain TT lookup"),
    Target(("tt_vs_embedding",), 1.0, what="... and >= 1x a dense nn.Embedding on the GPU"),
]


# -- graphs -----------------------------------------------------------------------------------------
def powerlaw_graph(n: int, nnz: int, seed: int, alpha: float = 1.1) -> tuple[torch.Tensor, torch.Tensor]:
    """Chung-Lu style CSR: Pareto row lengths and Pareto source popularity (hubs both ways)."""
    rng = np.random.default_rng(seed)
    weight = rng.pareto(alpha, n) + 1
    deg = np.floor(weight / weight.sum() * nnz).astype(np.int64)
    deg[rng.choice(n, int(nnz - deg.sum()), replace=True)] += 1
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    pop = rng.pareto(alpha, n) + 1
    cdf = np.cumsum(pop / pop.sum())
    cols = np.minimum(np.searchsorted(cdf, rng.random(int(indptr[-1]))), n - 1).astype(np.int64)
    return torch.from_numpy(indptr), torch.from_numpy(cols)


def uniform_graph(n: int, nnz: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Erdos-Renyi style CSR: Poisson row lengths, uniform sources."""
    rng = np.random.default_rng(seed)
    deg = rng.poisson(nnz / n, n).astype(np.int64)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    return torch.from_numpy(indptr), torch.from_numpy(rng.integers(0, n, int(indptr[-1]), dtype=np.int64))


def local_graph(n: int, nnz: int, seed: int, window: int = 2048) -> tuple[torch.Tensor, torch.Tensor]:
    """A graph after a locality-preserving reordering (RCM-like): sources within ``window`` of the row."""
    indptr, _ = uniform_graph(n, nnz, seed)
    rng = np.random.default_rng(seed + 1)
    rows = np.repeat(np.arange(n), np.diff(indptr.numpy()))
    cols = np.clip(rows + rng.integers(-window, window + 1, rows.size), 0, n - 1).astype(np.int64)
    return indptr, torch.from_numpy(cols)


# -- timing -----------------------------------------------------------------------------------------
def interleaved(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Fastest seconds of each function over ``rounds``, timed round-robin after warm-up calls
    (the fastest round is the least disturbed by other work on a shared machine).

    With a GPU present a timing ends with a device synchronisation, so GPU work is timed whole,
    and a function that takes under a millisecond runs several times between synchronisations
    (the per-call time is their mean): one sync a call would add its own ~10-30 us to a 0.2 ms
    kernel. On a machine without a GPU each timing is one call, as before.
    """
    repeats = {name: _repeats(fn) for name, fn in fns.items()}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(_timed(fn, repeats[name]) / repeats[name])
    return {name: min(t) for name, t in times.items()}


def _timed(fn: Callable[[], Any], repeats: int) -> float:
    """Seconds of ``repeats`` back-to-back calls, up to the end of their GPU work."""
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _repeats(fn: Callable[[], Any], target_s: float = 2e-3, most: int = 50) -> int:
    """Warm ``fn`` up (twice: the first call pays lazy initialisation) and pick how many calls a
    timing makes: 1 on the CPU, enough for ``target_s`` on a GPU."""
    _timed(fn, 1)
    once = _timed(fn, 1)
    if not torch.cuda.is_available():
        return 1
    return max(1, min(most, math.ceil(target_s / max(once, 1e-6))))


def copy_bandwidth(rounds: int, mib: int = 256, device: str = "cpu") -> float:
    """Bytes per second of ``dst.copy_(src)`` (read + write) on ``mib`` MiB."""
    src = torch.ones(mib * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    t = interleaved({"copy": lambda: dst.copy_(src)}, rounds)["copy"]
    return 2 * src.numel() * 4 / t


# -- SpMM -------------------------------------------------------------------------------------------
def spmm_variants(indptr: torch.Tensor, indices: torch.Tensor, x: torch.Tensor) -> dict[str, Callable[[], Any]]:
    """The four SpMM paths on ``x``'s device (torch's CSR is cuSPARSE on a GPU)."""
    n, device = indptr.numel() - 1, x.device
    indptr, indices = indptr.to(device), indices.to(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        csr = torch.sparse_csr_tensor(indptr, indices, torch.ones(indices.numel(), device=device), (n, x.size(0)))
    rows = torch.repeat_interleave(torch.arange(n, device=device), indptr.diff())
    a = ops.CSR(indptr, indices, None, x.size(0))
    sell = ops.to_sell(a)

    def gather_scatter() -> torch.Tensor:
        return torch.zeros(n, x.size(1), device=device).index_add_(0, rows, x.index_select(0, indices))

    return {
        "native_csr": lambda: ops.spmm_csr_raw(a, x),
        "native_sell": lambda: ops.spmm_sell(sell, x),
        "torch_csr": lambda: torch.sparse.mm(csr, x),
        "gather_scatter": gather_scatter,
    }


def bench_spmm(graphs: dict[str, tuple[torch.Tensor, torch.Tensor]], width: int, rounds: int,
               threads: int, device: str = "cpu") -> list[dict[str, Any]]:
    rows = []
    for name, (indptr, indices) in graphs.items():
        x = torch.randn(indptr.numel() - 1, width, device=device)
        fns = spmm_variants(indptr, indices, x)
        ref = fns["torch_csr"]()
        for key in ("native_csr", "native_sell"):
            torch.testing.assert_close(fns[key](), ref, atol=1e-3, rtol=1e-4)
        t = interleaved(fns, rounds)
        best = min(t["native_csr"], t["native_sell"])
        rows.append({"kind": "spmm", "graph": name, "threads": threads, "width": width, "device": device,
                     "nodes": indptr.numel() - 1, "nnz": indices.numel(), "seconds": t,
                     "ours": best, "baseline": t["torch_csr"], "ratio": t["torch_csr"] / best,
                     "vs_gather_scatter": t["gather_scatter"] / best})
    return rows


def spmm_rows(graphs: dict[str, tuple[torch.Tensor, torch.Tensor]], large: dict[str, tuple[torch.Tensor, torch.Tensor]],
              width: int, rounds: int, threads: int, device: str) -> list[dict[str, Any]]:
    """SpMM rows of ``graphs`` at ``width``, then of ``large`` at width 32 with their bandwidth rows."""
    rows = bench_spmm(graphs, width, rounds, threads, device)
    copy = copy_bandwidth(rounds, mib=1024 if device == "cuda" else 256, device=device)
    for big in bench_spmm(large, 32, rounds, threads, device):
        achieved = compulsory_bytes(*large[big["graph"]], 32) / big["ours"]
        rows.append(big)
        rows.append({"kind": "bandwidth", "graph": f"{big['graph']} F=32", "threads": threads, "device": device,
                     "ours": big["ours"], "baseline": big["ours"] * achieved / copy, "ratio": achieved / copy,
                     "achieved_gbs": achieved / 1e9, "copy_gbs": copy / 1e9})
    return rows


def compulsory_bytes(indptr: torch.Tensor, indices: torch.Tensor, width: int) -> int:
    """Bytes an SpMM must move at least: CSR arrays, X read once, the output written once."""
    n = indptr.numel() - 1
    return 8 * (n + 1) + 8 * indices.numel() + 2 * 4 * n * width


# -- sampler ----------------------------------------------------------------------------------------
def sampler_batches(indptr: torch.Tensor, indices: torch.Tensor,
                    batches: int) -> tuple[list[torch.Tensor], Callable[[], int]]:
    """``batches`` seed sets of 1024 nodes, and a run of :class:`CSRNeighborSampler` (fan-out
    ``[15, 10, 5]``) over them that returns the sampled edge count."""
    sampler = CSRNeighborSampler(indptr, indices, [15, 10, 5], seed=0)
    g = torch.Generator().manual_seed(1)
    seeds = [torch.randint(0, indptr.numel() - 1, (1024,), generator=g) for _ in range(batches)]

    def run() -> int:
        return sum(sampler.sample_from_nodes(NodeSamplerInput(None, s)).edge.numel() for s in seeds)

    return seeds, run


def bench_sampler(indptr: torch.Tensor, indices: torch.Tensor, batches: int, rounds: int,
                  threads: int) -> dict[str, Any]:
    _, run = sampler_batches(indptr, indices, batches)

    def run_python() -> int:
        with native.disabled():
            return run()

    t = interleaved({"native": run, "python": run_python}, rounds)
    return {"kind": "sampler", "graph": "powerlaw-arxiv", "threads": threads, "batches": batches,
            "edges_per_batch": run() / batches, "seconds": t, "ours": t["native"], "baseline": t["python"],
            "ratio": t["python"] / t["native"]}


def bench_sampler_gpu(indptr: torch.Tensor, indices: torch.Tensor, batches: int, rounds: int,
                      threads: int) -> dict[str, Any]:
    """The CUDA sampler against the native CPU sampler at ``threads`` threads: where to sample."""
    seeds, on_cpu = sampler_batches(indptr, indices, batches)
    # as training samples on a GPU: the loader's sampler over the CSR in device memory, host seeds
    sampler = CSRNeighborSampler(indptr.cuda(), indices.cuda(), [15, 10, 5], seed=0)

    def on_gpu() -> int:
        return sum(sampler.sample_from_nodes(NodeSamplerInput(None, s)).edge.numel() for s in seeds)

    t = interleaved({"cuda": on_gpu, "cpu_native": on_cpu}, rounds)
    return {"kind": "sampler", "graph": "powerlaw-arxiv", "threads": threads, "device": "cuda", "batches": batches,
            "edges_per_batch": on_gpu() / batches, "seconds": t, "ours": t["cuda"], "baseline": t["cpu_native"],
            "baseline_name": "cpu native", "ratio": t["cpu_native"] / t["cuda"]}


# -- TT ---------------------------------------------------------------------------------------------
def bench_tt(batch: int, rounds: int, threads: int, device: str = "cpu") -> dict[str, Any]:
    p, q, r = (125, 140, 140), (4, 5, 5), (1, 16, 16, 1)
    g = torch.Generator().manual_seed(2)
    cores = [(torch.randn(p[k], r[k], q[k], r[k + 1], generator=g) * 0.3).to(device).requires_grad_(True)
             for k in range(3)]
    n = 125 * 140 * 140
    pop = torch.distributions.Pareto(torch.tensor(1.0), torch.tensor(1.2))
    ids = (pop.sample((batch,)) * 1000).long().clamp(max=n - 1)  # power-law popularity, duplicates
    rows = torch.randperm(n, generator=g)[ids].to(device)  # spread popular ids over the table
    grad = torch.randn(batch, 100, generator=g).to(device)

    def train(fn: Callable[[], torch.Tensor]) -> Callable[[], Any]:
        def step() -> Any:
            out = fn()
            return torch.autograd.grad(out, cores, grad)
        return step

    def python_reuse() -> torch.Tensor:
        with native.disabled():
            return lookup(cores, rows, p)

    fused = train(lambda: ops.tt_lookup(cores, rows))
    fwd = ops.tt_lookup(cores, rows)
    torch.testing.assert_close(fwd, python_reuse(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ops.tt_lookup(cores, rows, reuse_prefixes=False), fwd, atol=1e-4, rtol=1e-4)
    paths = {"fused": fused, "fused_per_row": train(lambda: ops.tt_lookup(cores, rows, reuse_prefixes=False)),
             "python_reuse": train(python_reuse), "plain": train(lambda: lookup_plain(cores, rows, p))}
    if device == "cuda":  # the dense table the TT replaces (2.45M x 100 floats), dense gradient as DDP sees it
        table = torch.nn.Embedding(n, 100, device=device)
        paths["embedding"] = lambda: torch.autograd.grad(table(rows), table.weight, grad)
    t = interleaved(paths, rounds)
    best = min(t["fused"], t["fused_per_row"])
    row = {"kind": "tt", "graph": f"products-shape B={batch}", "threads": threads, "device": device,
           "unique_rows": int(rows.unique().numel()),
           "seconds": t, "ours": best, "baseline": t["python_reuse"], "ratio": t["python_reuse"] / best,
           "vs_plain": t["plain"] / best, "per_row_over_reuse": t["fused"] / t["fused_per_row"]}
    if "embedding" in t:
        row["vs_embedding"] = t["embedding"] / best
    return row


# -- report -----------------------------------------------------------------------------------------
def print_table(rows: list[dict[str, Any]]) -> None:
    head = f"{'kernel':8s} {'input':24s} {'thr':>3s} {'ours ms':>9s} {'baseline':>14s} {'base ms':>9s} {'ratio':>6s}  other"
    print(head)
    print("-" * len(head))
    names = {"spmm": "torch_csr", "sampler": "python", "tt": "python_reuse", "bandwidth": "copy"}
    if any(row.get("device") == "cuda" for row in rows):
        names["spmm"] = "cusparse csr"
    for row in rows:
        other = ""
        if row["kind"] == "spmm":
            s = row["seconds"]
            other = (f"csr {s['native_csr'] * 1e3:.1f} / sell {s['native_sell'] * 1e3:.1f} ms; "
                     f"vs gather-scatter {row['vs_gather_scatter']:.2f}x")
        elif row["kind"] == "tt":
            other = (f"vs plain {row['vs_plain']:.2f}x, per-row/reuse {row['per_row_over_reuse']:.2f}x"
                     + (f", vs nn.Embedding {row['vs_embedding']:.2f}x" if "vs_embedding" in row else "")
                     + f", {row['unique_rows']} unique rows")
        elif row["kind"] == "sampler":
            other = f"{row['batches']} batches, {row['edges_per_batch']:.0f} edges/batch"
        elif row["kind"] == "bandwidth":
            other = f"SpMM {row['achieved_gbs']:.1f} GB/s of copy {row['copy_gbs']:.1f} GB/s"
        print(f"{row['kind']:8s} {row['graph']:24s} {row['threads']:3d} {row['ours'] * 1e3:9.2f} "
              f"{row.get('baseline_name', names[row['kind']]):>14s} {row['baseline'] * 1e3:9.2f} "
              f"{row['ratio']:6.2f}  {other}")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['kind']} {r['graph']} t{r['threads']}" for r in rows]
    ratios = [r["ratio"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(rows) + 1.5))
    ax.barh(range(len(rows)), ratios, color=["tab:green" if v >= 1 else "tab:red" for v in ratios])
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up over the PyTorch baseline (bandwidth rows: fraction of copy bandwidth)")
    ax.set_title("gnnkit native kernels vs PyTorch (higher is better)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def summarise(rows: list[dict[str, Any]], device: str = "cpu") -> dict[str, Any]:
    def best(kind: str, graph: str | None = None) -> float:
        vals = [r["ratio"] for r in rows if r["kind"] == kind and (graph is None or r["graph"].startswith(graph))]
        return round(max(vals), 3) if vals else float("nan")

    others = [r["ratio"] for r in rows if r["kind"] == "spmm" and not r["graph"].startswith("powerlaw")]  # per thread count
    by_graph = {r["graph"]: best("bandwidth", r["graph"]) for r in rows if r["kind"] == "bandwidth"}  # best thread count
    threads = sorted({r["threads"] for r in rows})
    summary = {
        "spmm_vs_torch_csr_powerlaw": best("spmm", "powerlaw"),
        "spmm_vs_torch_csr_other_min": round(min(others), 3) if others else float("nan"),
        "sampler_speedup": best("sampler"),
        "tt_fused_speedup": best("tt"),
        "tt_vs_plain": round(max((r["vs_plain"] for r in rows if r["kind"] == "tt"), default=float("nan")), 3),
        "tt_vs_embedding": round(max((r["vs_embedding"] for r in rows if "vs_embedding" in r), default=float("nan")), 3),
        "spmm_bandwidth_fraction": max(by_graph.values(), default=float("nan")),
        "spmm_bandwidth_fraction_by_graph": by_graph,
        "spmm_bandwidth_fraction_min": min(by_graph.values(), default=float("nan")),
        "per_threads": {str(t): {r["kind"] + ":" + r["graph"]: round(r["ratio"], 3) for r in rows if r["threads"] == t}
                        for t in threads},
        "device": device,
        "vendor_baseline": "cuSPARSE (torch.sparse.mm on a CUDA CSR tensor)" if device == "cuda"
        else "torch CSR (torch.sparse.mm, MKL)",
        "note": (("the CUDA kernels on one GPU, the CPU sampler at the machine's threads"
                  if device == "cuda" else f"best over threads {' and '.join(map(str, threads))}")
                 + "; ratio = baseline time / native time; bandwidth fraction = compulsory SpMM bytes "
                   "(CSR arrays, X once, output once) per second / copy bandwidth"),
    }
    summary["targets"] = (verdicts(summary, GPU_TARGETS, "issue 17") if device == "cuda"
                          else verdicts(summary, CPU_TARGETS, "issue 7"))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write rows and summary as JSON")
    parser.add_argument("--png", type=Path, help="ratio plot (default: beside --json)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--width", type=int, default=64, help="feature width of the SpMM inputs")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="smaller graphs and fewer rounds (smoke run)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="cuda: the CUDA kernels against cuSPARSE/PyTorch on the GPU (CPU sampler as baseline)")
    args = parser.parse_args(argv)
    retain_freed_memory()  # as `gnnkit run` does: outputs of the large products are not page-faulted each call
    if not native.available():
        print("native kernels unavailable (see the warning above); nothing to compare", file=sys.stderr)
        return 1
    scale = 10 if args.quick else 1
    rounds = 2 if args.quick else args.rounds
    graphs = {"powerlaw-arxiv": powerlaw_graph(ARXIV_NODES // scale, ARXIV_EDGES // scale, 0),
              "uniform-arxiv": uniform_graph(ARXIV_NODES // scale, ARXIV_EDGES // scale, 1)}
    large = {"uniform-1M-nnz8M": uniform_graph(1_000_000 // scale, 8_000_000 // scale, 2),
             "local-1M-nnz8M": local_graph(1_000_000 // scale, 8_000_000 // scale, 3)}
    rows: list[dict[str, Any]] = []
    old = torch.get_num_threads()
    batches, tt_batch = (4, 2000) if args.quick else (10, 20000)
    try:
        if args.device == "cuda":
            rows += spmm_rows(graphs, large, args.width, rounds, old, "cuda")
            rows.append(bench_sampler_gpu(*graphs["powerlaw-arxiv"], batches, rounds, old))
            rows += [bench_tt(b, rounds, old, "cuda") for b in (tt_batch, 10 * tt_batch)]
        for threads in args.threads if args.device == "cpu" else []:
            torch.set_num_threads(threads)
            rows += spmm_rows(graphs, large, args.width, rounds, threads, "cpu")
            rows.append(bench_sampler(*graphs["powerlaw-arxiv"], batches, rounds, threads))
            rows.append(bench_tt(tt_batch, rounds, threads))
    finally:
        torch.set_num_threads(old)
    print_table(rows)
    summary = summarise(rows, args.device)
    print("\nsummary:", json.dumps({k: v for k, v in summary.items() if k not in ("per_threads", "targets")}))
    print_verdicts(summary["targets"])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps({"rows": rows, "summary": summary, "threads": args.threads,
                                         "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                                         "width": args.width, "torch": torch.__version__,
                                         "kernels": native.kernels()}, indent=1) + "\n")
        plot(rows, args.png or args.json.with_suffix(".png"))
    elif args.png:
        plot(rows, args.png)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

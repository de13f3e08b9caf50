"""Host time of a sampled GraphSAGE step: gnnkit's aggregation against PyG's layers, tensors too small to compute.

On a GPU a sampled step is host-bound: the H200's StepProfile of the products twin (bench/gpu.py)
gave equal host and GPU milliseconds in every phase, the forward taking 4.8 ms with gnnkit's layers
against 3.3 ms with PyG's. What the host does per step (Python, dispatch, allocations, the plan of
each block) is the same work on any machine, so this benchmark measures it on the CPU: one 3-layer
SAGE step (forward, loss, backward) on a 3-hop batch of 8 seeds with fan-out 3 and width 8, where
the kernels themselves take microseconds. Rows run round-robin in one process, each the fastest
of ``--rounds`` rounds of ``--steps`` steps, one intra-op thread.

Rows: PyG's ``SAGEConv`` (the baseline), gnnkit's layers with ``format: auto`` as the CPU runs them
(the shipped CPU model) and as a device without a model runs them (CUDA until a GPU model ships:
the forward and backward formats timed once per size class among those that need no conversion),
and with two fixed formats.

    python bench/host_step.py [--rounds 7] [--steps 300] [--json PATH] [--png PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnnkit.models.node_gnn import NodeGNN
from gnnkit.sparse import selector as selector_module
from pipeline import atomic_write_text, save_figure

SEEDS, FANOUT, HOPS, WIDTH, CLASSES = 8, 3, 3, 8, 4
#: Row label -> (aggregation, format, without a model).
ROWS = {
    "PyG layers": ("pyg", "auto", False),
    "gnnkit, auto (CPU model)": ("gnnkit", "auto", False),
    "gnnkit, auto, no model (as on CUDA)": ("gnnkit", "auto", True),
    "gnnkit, csr": ("gnnkit", "csr", False),
    "gnnkit, gather_scatter": ("gnnkit", "gather_scatter", False),
}
BASELINE = "PyG layers"


def sampled_batch() -> dict[str, object]:
    """A batch in the layout of gnnkit's sampler: hop by hop, edges sorted by destination."""
    nodes = [SEEDS * FANOUT**h for h in range(HOPS + 1)]
    src, dst, start = [], [], 0
    for h in range(HOPS):
        first_new = sum(nodes[: h + 1])
        for j in range(nodes[h]):
            dst += [start + j] * FANOUT
            src += [first_new + FANOUT * j + k for k in range(FANOUT)]
        start += nodes[h]
    return {"x": torch.randn(sum(nodes), WIDTH), "edge_index": torch.tensor([src, dst]), "num_sampled_nodes": nodes,
            "num_sampled_edges": [n * FANOUT for n in nodes[:-1]], "y": torch.randint(0, CLASSES, (SEEDS,))}


@contextlib.contextmanager
def without_model(on: bool) -> Iterator[None]:
    """The CPU as a device kind without a selector model (as CUDA is until a GPU model ships)."""
    if not on:
        yield
        return
    kept = dict(selector_module.SHIPPED_MODELS)
    selector_module.SHIPPED_MODELS["cpu"] = ROOT / "bench" / "no-such-model.json"
    try:
        if selector_module.model_path("cpu") is not None:  # an environment or calibrated model
            raise SystemExit(f"a CPU selector model is set ({selector_module.model_path('cpu')}); unset it to bench")
        yield
    finally:
        selector_module.SHIPPED_MODELS.update(kept)


def step_fn(aggregation: str, format: str, batch: dict[str, object]) -> tuple[Callable[[], None], NodeGNN]:
    """One training step's forward, loss and backward (no optimizer: the same for every row), and its model."""
    torch.manual_seed(0)
    kwargs = {} if aggregation == "pyg" else {"format": format}
    model = NodeGNN("sage", WIDTH, WIDTH, CLASSES, num_layers=HOPS, aggregation=aggregation, dropout=0.0,
                    batch_norm=False, **kwargs)

    def step() -> None:
        out = model(batch["x"], batch["edge_index"], num_sampled_nodes=batch["num_sampled_nodes"],
                    num_sampled_edges=batch["num_sampled_edges"], edges_by_destination=True)
        torch.nn.functional.cross_entropy(out[:SEEDS], batch["y"]).backward()
    return step, model


def measure(rounds: int, steps: int) -> list[dict[str, object]]:
    """Microseconds a step per row: the fastest round, rows interleaved round by round, on one thread
    (the caller's thread count is put back)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(rounds, steps)
    finally:
        torch.set_num_threads(threads)


def _measure(rounds: int, steps: int) -> list[dict[str, object]]:
    batch = sampled_batch()
    fns = {}
    for label, (aggregation, format, no_model) in ROWS.items():
        with without_model(no_model):
            fns[label] = step_fn(aggregation, format, batch)[0]
            for _ in range(30):  # warm-up: plans, caches, the allocator
                fns[label]()
    best: dict[str, float] = {label: float("inf") for label in ROWS}
    for _ in range(rounds):
        for label, fn in fns.items():
            with without_model(ROWS[label][2]):
                start = time.perf_counter()
                for _ in range(steps):
                    fn()
                best[label] = min(best[label], (time.perf_counter() - start) / steps * 1e6)
    base = best[BASELINE]
    return [{"row": label, "us_per_step": round(us, 1), "vs_pyg": round(us / base, 3)} for label, us in best.items()]


def plot(rows: list[dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.barh([r["row"] for r in rows][::-1], [r["us_per_step"] for r in rows][::-1], color="tab:blue")
    ax.set_xlabel("host µs per step (forward, loss, backward)")
    ax.set_title("Host time of a sampled SAGE step (CPU, 1 thread)")
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per row (default 7)")
    parser.add_argument("--steps", type=int, default=300, help="steps per round (default 300)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "host_step.json")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "results" / "host_step.png")
    args = parser.parse_args()
    rows = measure(args.rounds, args.steps)
    width = max(len(r["row"]) for r in rows)
    print(f"{'row':<{width}}  {'µs/step':>8}  {'vs PyG':>7}")
    for r in rows:
        print(f"{r['row']:<{width}}  {r['us_per_step']:>8.1f}  {r['vs_pyg']:>6.2f}x")
    result = {"rounds": args.rounds, "steps": args.steps, "threads": 1, "torch": torch.__version__,
              "batch": {"seeds": SEEDS, "fanout": FANOUT, "hops": HOPS, "width": WIDTH}, "rows": rows}
    atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    plot(rows, args.png)
    print(f"wrote {args.json} and {args.png}")


if __name__ == "__main__":
    main()

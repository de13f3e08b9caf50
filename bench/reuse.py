"""PerFect-style reuse benchmark: fresh sampling vs replaying cached batches (torch and DALI readers).

Two parts, each printed as a side-by-side table:

1. **Loading split** (per dataset, ``--datasets``): the same ``--batches`` training mini-batches of
   neighbour-sampled GraphSAGE (fan-out ``--fanout``, ``--batch-size`` seeds) are

   * produced fresh, PyG-style: gnnkit's CSR sampler inside PyG's ``NodeLoader`` (the sampler's
     ``sample_from_nodes`` = sampling, the loader's ``filter_fn`` = gathering features and labels),
     in the main process;
   * written to a batch cache (``--feature-dtype``), then replayed through the torch reader (0 and 2
     DataLoader workers) and the DALI reader: loading = waiting for a shard's bytes, decoding =
     checksum (``--verify``) + array views + widening of narrowed ints (and float16 features).

   Compute is one GraphSAGE training step (forward, backward, Adam) on each batch. Per-batch
   times are scaled to an epoch (steps per epoch of the training split) for the epoch-time split.
   Replayed shards come from the page cache when the cache fits in memory (as it does here).

2. **Accuracy at equal epochs** (``--train-dataset``, GraphSAGE ``--train-hidden`` wide with fan-out
   ``--train-fanout``: smaller than part 1's so that two runs fit in minutes on 2 CPU cores; the
   recipe's 256-wide model takes seconds per step here): two Lightning runs of ``--epochs`` epochs,
   fresh sampling every epoch vs the reuse schedule (record in epoch 0, replay for
   ``--reuse-epochs - 1`` epochs, fine-tune fresh after), same model and seeds, each run in a
   process of its own that retains freed memory as ``gnnkit run`` does; validation
   accuracy per epoch against cumulative training wall time goes to the PNG, test accuracy of the
   final model to the table. ``end_to_end_speedup`` = fresh run's training time / reuse run's.

3. **Feature preprocessing**: standardising the first dataset's feature matrix (chunked read,
   normalise, cast) with numpy and with DALI (:mod:`pipeline.feature_prep`), in GiB/s.

The JSON (``--json``) has a ``summary`` object with ``loading_speedup`` (fresh sampling+gathering
time over the fastest replay reader's loading+decoding time, on the first dataset), ``end_to_end_speedup``,
``acc_fresh`` and ``acc_reuse``.

    python bench/reuse.py [--datasets synthetic-products synthetic-arxiv] [--json PATH] [--plot PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnnkit.allocator import retain_freed_memory  # noqa: E402
from gnnkit.data.datamodule import GraphDataModule  # noqa: E402
from gnnkit.data.reuse import ReuseConfig, from_record, to_record  # noqa: E402
from gnnkit.module import NodeClassifier  # noqa: E402
from pipeline import atomic_write_text, paths, save_figure, setup_logging  # noqa: E402
from pipeline.batch_cache import BatchCacheWriter, open_batch_cache  # noqa: E402
from pipeline.shard_reader import dali_available, make_shard_reader  # noqa: E402

READERS = (("torch", 0), ("torch", 2), ("dali", 2))


def _model(dm: GraphDataModule, hidden: int, layers: int) -> NodeClassifier:
    model = NodeClassifier(model="sage", in_channels=dm.num_features, hidden_channels=hidden,
                           out_channels=dm.num_classes, num_layers=layers, dropout=0.5, batch_norm=False,
                           lr=0.003, task=dm.task)
    model.setup("fit")
    return model


def _train_step(model: NodeClassifier, optimizer: torch.optim.Optimizer, batch: Any, device: torch.device) -> float:
    """One timed training step; on a GPU the host-to-device copy of the batch counts as compute."""
    start = time.perf_counter()
    batch = batch.to(device)
    optimizer.zero_grad()
    logits = model(batch)
    loss = model._loss(logits, batch.y[: batch.batch_size])
    loss.backward()
    optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def _fresh(dm: GraphDataModule, seeds: list[torch.Tensor], args: argparse.Namespace) -> tuple[list[Any], dict]:
    """Sample and gather ``seeds``' batches PyG-style; per-batch sampling and gathering times."""
    loader = dm._sampled_loader("train")
    for array in (dm.graph.indptr, dm.graph.indices, dm.graph.x):  # both sides read from the page cache
        if array is not None:
            array.sum()
    loader.filter_fn(loader.node_sampler.sample_from_nodes(loader.input_data[seeds[-1]]))  # warm-up
    batches, sampling, gathering = [], [], []
    for index in seeds:
        t0 = time.perf_counter()
        out = loader.node_sampler.sample_from_nodes(loader.input_data[index])
        t1 = time.perf_counter()
        batches.append(loader.filter_fn(out))
        sampling.append(t1 - t0)
        gathering.append(time.perf_counter() - t1)
    return batches, {"sampling": statistics.mean(sampling), "gathering": statistics.mean(gathering)}


def _replay(cache: Any, reader: Any, args: argparse.Namespace) -> tuple[list[Any], dict]:
    """Replay every cached batch ``--rounds`` times; best per-batch loading and decoding times."""
    paths_ = [cache.shard_path(i) for i in range(len(cache.shards))]
    best = {"loading": math.inf, "decoding": math.inf}
    for _ in range(args.rounds):
        loading = decoding = 0.0
        batches = []
        start = time.perf_counter()
        for shard, buffer in reader.read(paths_, list(range(len(paths_)))):
            t0 = time.perf_counter()
            loading += t0 - start
            batches += [from_record(r) for r in cache.decode(shard, buffer, verify=args.verify)]
            start = time.perf_counter()
            decoding += start - t0
        best = {"loading": min(best["loading"], loading / len(batches)),
                "decoding": min(best["decoding"], decoding / len(batches))}
    return batches, best


def _compute(dm: GraphDataModule, batches: list[Any], args: argparse.Namespace) -> float:
    """Mean time of a GraphSAGE training step on the first ``--compute-batches`` batches (a new
    model for each pipeline, warmed up on the last batch; first touches of mapped pages count here)."""
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = _model(dm, args.hidden, len(args.fanout)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    _train_step(model, optimizer, batches[-1], device)  # warm-up (allocator, Adam state), not timed
    return statistics.mean(_train_step(model, optimizer, b, device) for b in batches[:args.compute_batches])


def loading_split(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Per-batch sampling/gathering/loading/decoding/compute times for fresh and replayed batches."""
    dm = GraphDataModule(name, batch_size=args.batch_size, num_neighbors=args.fanout, seed=0)
    steps = math.ceil(dm.graph.split["train"].numel() / args.batch_size)
    order = torch.randperm(dm.graph.split["train"].numel(), generator=torch.Generator().manual_seed(0))
    seeds = [order[i * args.batch_size:(i + 1) * args.batch_size] for i in range(min(args.batches, steps))]
    zero = {"sampling": 0.0, "gathering": 0.0, "loading": 0.0, "decoding": 0.0}
    batches, times = _fresh(dm, seeds, args)
    pipelines = {"fresh (PyG-style)": {**zero, **times, "compute": _compute(dm, batches, args)}}
    folder, inputs = workdir / name, {"bench": name, "fanout": args.fanout, "batch_size": args.batch_size}
    lossy = {"x": torch.float16} if args.feature_dtype == "float16" else {}
    start = time.perf_counter()
    with BatchCacheWriter(folder, inputs, shard_mb=args.shard_mb, lossy=lossy) as writer:
        for batch in batches:
            writer.add(to_record(batch), batch.input_id)
    write = (time.perf_counter() - start) / len(batches)
    nodes = statistics.mean(b.num_nodes for b in batches)
    del batches
    cache = open_batch_cache(folder, inputs)
    for kind, workers in READERS:
        if kind == "dali" and not dali_available():
            print(f"{name}: NVIDIA DALI does not import here: the DALI replay row is skipped")
            continue
        reader = make_shard_reader(kind, num_workers=workers, device=args.device if kind == "dali" else "cpu")
        batches, times = _replay(cache, reader, args)
        label = f"replay ({kind}, {workers} {'threads' if kind == 'dali' else 'workers'})"
        pipelines[label] = {**zero, **times, "compute": _compute(dm, batches, args)}
        del batches
    result = {
        "dataset": name, "steps_per_epoch": steps, "batches_measured": len(seeds), "mean_batch_nodes": nodes,
        "per_batch_s": pipelines, "write_per_batch_s": write,
        "cache_bytes_per_batch": cache.num_bytes / cache.num_batches,
        "cache_gb_per_epoch": cache.num_bytes / cache.num_batches * steps / 2**30,
    }
    shutil.rmtree(folder, ignore_errors=True)
    return result


def feature_prep(name: str, workdir: Path, rounds: int) -> dict[str, Any]:
    """Throughput of standardising the dataset's feature matrix with numpy and with DALI."""
    from pipeline.feature_prep import standardize_file

    dm = GraphDataModule(name, batch_size=1)
    src = workdir / "features.npy"
    np.save(src, dm.graph.x.numpy())
    rates: dict[str, float] = {}
    for backend in ("numpy", "dali") * rounds:
        info = standardize_file(src, workdir / f"out-{backend}.npy", backend=backend)
        rates[backend] = max(rates.get(backend, 0.0), info["gib_per_s"])
    for file in workdir.glob("*.npy"):
        file.unlink()
    return {"dataset": name, "gib": dm.graph.x.numpy().nbytes / 2**30, "gib_per_s": rates}


def _data(times: dict[str, float]) -> float:
    return times["sampling"] + times["gathering"] + times["loading"] + times["decoding"]


class _Curve(pl.Callback):
    """Cumulative training wall time (validation excluded) and the validation metric per epoch."""

    def __init__(self) -> None:
        self.points: list[tuple[float, float]] = []
        self.elapsed = 0.0
        self._start = 0.0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.elapsed += time.perf_counter() - self._start

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after every epoch-end hook of the validation loop, so the metric is this epoch's
        if not trainer.sanity_checking:
            self.points.append((self.elapsed, float(trainer.callback_metrics["val_metric"])))
            self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.elapsed += time.perf_counter() - self._start
        self._start = time.perf_counter()


def train(name: str, args: argparse.Namespace, reuse: ReuseConfig | None, root: Path) -> dict[str, Any]:
    """One Lightning run; returns its curve, training time, test accuracy and reuse report."""
    pl.seed_everything(0, verbose=False)
    dm = GraphDataModule(name, batch_size=args.batch_size, num_neighbors=args.train_fanout, eval_batch_size=4096,
                         num_workers=args.workers, seed=0, reuse=reuse)
    model = _model(dm, args.train_hidden, len(args.train_fanout))
    curve = _Curve()
    trainer = pl.Trainer(max_epochs=args.epochs, accelerator="gpu" if args.device == "cuda" else "cpu", devices=1,
                         default_root_dir=root, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         callbacks=[curve])
    trainer.fit(model, datamodule=dm)
    test = trainer.test(model, datamodule=dm, verbose=False)[0]["test_metric"]
    return {"train_time_s": curve.elapsed, "curve": curve.points, "test": test,
            "reuse": dm.report_info().get("reuse")}


def train_in_process(kind: str, argv: list[str], workdir: Path) -> dict[str, Any]:
    """``train`` for ``kind`` ("fresh" or "reuse") in a process of its own, as ``gnnkit run`` would
    run it (freed memory retained, no heap left over from the loading split)."""
    out = workdir / f"train-{kind}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--train-run", kind, "--train-out", str(out),
           "--train-workdir", str(workdir)]
    subprocess.run(cmd, check=True)
    return json.loads(out.read_text())


def _train_run(args: argparse.Namespace) -> None:
    retain_freed_memory()  # as `gnnkit run` does
    workdir = Path(args.train_workdir)
    schedule = None
    if args.train_run == "reuse":
        schedule = ReuseConfig(epochs=args.reuse_epochs, loader="auto", feature_dtype=args.train_feature_dtype,
                               verify=args.verify, cache_dir=str(workdir / "reuse"))
    Path(args.train_out).write_text(json.dumps(train(args.train_dataset, args, schedule, workdir)))


def _row(cells: list[Any], widths: list[int]) -> str:
    return "  ".join(f"{c:>{w}}" if i else f"{c:<{w}}" for i, (c, w) in enumerate(zip(cells, widths)))


def print_split(split: dict[str, Any]) -> None:
    pipelines, steps = split["per_batch_s"], split["steps_per_epoch"]
    fresh = pipelines["fresh (PyG-style)"]
    print(f"\n{split['dataset']}: {split['batches_measured']} batches of ~{split['mean_batch_nodes']:.0f} nodes, "
          f"{steps} steps/epoch, cache {split['cache_bytes_per_batch'] / 2**20:.1f} MiB/batch "
          f"({split['cache_gb_per_epoch']:.2f} GiB/epoch), write {split['write_per_batch_s'] * 1e3:.1f} ms/batch")
    widths = [26, 9, 9, 9, 9, 9, 9, 9, 9]
    print(_row(["pipeline (s/epoch)", "sampling", "gathering", "loading", "decoding", "data", "compute", "data x",
                "epoch x"], widths))
    for label, t in pipelines.items():
        cells = [t[k] * steps for k in ("sampling", "gathering", "loading", "decoding")]
        print(_row([label, *(f"{c:.2f}" for c in cells), f"{_data(t) * steps:.2f}", f"{t['compute'] * steps:.1f}",
                    f"{_data(fresh) / _data(t):.2f}",
                    f"{(_data(fresh) + fresh['compute']) / (_data(t) + t['compute']):.2f}"], widths))


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    split = results["splits"][0]
    pipelines, steps = split["per_batch_s"], split["steps_per_epoch"]
    labels = [label.replace(" (", "\n(") for label in pipelines]
    bottom = [0.0] * len(labels)
    for part in ("sampling", "gathering", "loading", "decoding"):
        values = [t[part] * steps for t in pipelines.values()]
        axes[0].bar(labels, values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values)]
    axes[0].set_ylabel("data pipeline, seconds per epoch")
    axes[0].set_title(f"data time split, {split['dataset']} (compute not shown)")
    axes[0].tick_params(axis="x", labelsize=7)
    axes[0].legend()
    for key, label in (("fresh", "fresh sampling"), ("reuse", "reuse schedule")):
        run = results.get("training", {}).get(key)
        if run and run["curve"]:
            xs, ys = zip(*run["curve"])
            axes[1].plot(xs, ys, marker=".", label=f"{label} (test {run['test']:.3f})")
    axes[1].set_xlabel("training wall time (s)")
    axes[1].set_ylabel("validation accuracy")
    axes[1].set_title(f"accuracy vs time, {results.get('train_dataset', '')}")
    axes[1].grid(alpha=0.3)
    if axes[1].get_lines():
        axes[1].legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["synthetic-products", "synthetic-arxiv"])
    parser.add_argument("--batches", type=int, default=12, help="batches timed per dataset")
    parser.add_argument("--rounds", type=int, default=3, help="replay rounds (best of)")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanout", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--compute-batches", type=int, default=2, help="batches timed through the model")
    parser.add_argument("--workers", type=int, default=2,
                        help="DataLoader workers of fresh sampling in part 2 (the recipes' setting)")
    parser.add_argument("--shard-mb", type=float, default=64.0)
    parser.add_argument("--feature-dtype", default="float32", choices=["float16", "float32"])
    parser.add_argument("--verify", default="once", choices=["once", "always"],
                        help="CRC-32 check of replayed shards (first read only, or every read)")
    parser.add_argument("--train-dataset", default="synthetic-arxiv")
    parser.add_argument("--train-fanout", type=int, nargs="+", default=[10, 5])
    parser.add_argument("--train-hidden", type=int, default=64)
    parser.add_argument("--train-feature-dtype", default="float16", choices=["float16", "float32"])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--reuse-epochs", type=int, default=7)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"],
                        help="where the model trains (default: the GPU when there is one)")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--skip-feature-prep", action="store_true")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--plot", help="PNG path (default: beside --json, else reuse_bench.png)")
    parser.add_argument("--train-run", choices=["fresh", "reuse"], help=argparse.SUPPRESS)
    parser.add_argument("--train-out", help=argparse.SUPPRESS)
    parser.add_argument("--train-workdir", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    setup_logging()
    if args.train_run:
        _train_run(args)
        return {}
    torch.manual_seed(0)
    workdir = Path(tempfile.mkdtemp(prefix="bench-reuse-", dir=paths.batch_root().parent))
    results: dict[str, Any] = {"args": vars(args), "threads": torch.get_num_threads(), "splits": [],
                               "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu"}
    print(f"model on {results['device']}, {results['threads']} CPU threads, DALI "
          f"{'available' if dali_available() else 'not available'}")
    try:
        for name in args.datasets:
            results["splits"].append(loading_split(name, args, workdir))
            print_split(results["splits"][-1])
        if not args.skip_feature_prep and not dali_available():
            print("\nfeature standardisation skipped: it compares numpy with DALI, which does not import here")
        elif not args.skip_feature_prep:
            prep = results["feature_prep"] = feature_prep(args.datasets[0], workdir, args.rounds)
            rates = prep["gib_per_s"]
            print(f"\nfeature standardisation of {prep['dataset']} ({prep['gib']:.2f} GiB float32): numpy "
                  f"{rates['numpy']:.2f} GiB/s, DALI {rates['dali']:.2f} GiB/s, DALI/numpy "
                  f"{rates['dali'] / rates['numpy']:.2f} (auto keeps {'numpy' if rates['numpy'] >= rates['dali'] else 'dali'} on CPU)")
        if not args.skip_training:
            results["train_dataset"] = args.train_dataset
            results["training"] = {kind: train_in_process(kind, argv, workdir) for kind in ("fresh", "reuse")}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    first = results["splits"][0]
    pipelines = first["per_batch_s"]
    best = min((label for label in pipelines if label.startswith("replay")), key=lambda k: _data(pipelines[k]))
    summary = {"loading_speedup": _data(pipelines["fresh (PyG-style)"]) / _data(pipelines[best])}
    results["loading_speedup_pipeline"] = best
    if "training" in results:
        fresh, reuse = results["training"]["fresh"], results["training"]["reuse"]
        summary.update(end_to_end_speedup=fresh["train_time_s"] / reuse["train_time_s"],
                       acc_fresh=fresh["test"], acc_reuse=reuse["test"])
        widths = [16, 12, 10, 10, 22]
        print(f"\n{args.train_dataset}, GraphSAGE {args.train_hidden} wide, fan-out {args.train_fanout}: "
              f"{args.epochs} epochs, reuse = record 1 + replay "
              f"{args.reuse_epochs - 1} + fresh {args.epochs - args.reuse_epochs}")
        print(_row(["run", "train time", "test acc", "speedup", "batches fresh/replayed"], widths))
        for key, run in (("fresh", fresh), ("reuse", reuse)):
            counts = run["reuse"]["batches"] if run["reuse"] else {"fresh": "all", "replayed": 0}
            print(_row([key, f"{run['train_time_s']:.1f}s", f"{run['test']:.4f}",
                        f"{fresh['train_time_s'] / run['train_time_s']:.2f}",
                        f"{counts['fresh']}/{counts['replayed']}"], widths))
    results["summary"] = summary
    print("\nsummary:", json.dumps({k: round(v, 4) for k, v in summary.items()}))
    plot_path = Path(args.plot) if args.plot else (Path(args.json).with_suffix(".png") if args.json
                                                   else Path("reuse_bench.png"))
    plot(results, plot_path)
    if args.json:
        atomic_write_text(Path(args.json), json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()

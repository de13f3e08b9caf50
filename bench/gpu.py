"""GPU end to end: each recipe family trained by ``gnnkit run`` on one GPU, gnnkit's path against
the plain PyG path and against gnnkit fed by CPU sampling.

Every configuration is one ``gnnkit run`` of a shipped recipe in a process of its own (what a user
runs), with overrides; its ``report.json`` gives the figures. Families and their rows:

* ``sage``: sampled GraphSAGE 3 x 256, fan-out [15, 10, 5], batch 1024 on the products twin
  (``recipes/sage_synthetic_products.yaml``):

  * ``gnnkit``: ``--model.aggregation gnnkit --data.sampler_device auto`` (on a GPU: the CSR,
    features and labels on the device, sampled and gathered there, the next batches made in a
    thread on a second stream: ``data.prefetch``);
  * ``gnnkit, no prefetch``: the same with ``--data.prefetch 0`` (each batch made when the step asks);
  * ``gnnkit, CPU sampling``: the same with ``--data.sampler_device cpu`` (loader workers sample on
    the host, batches copied to the device);
  * ``PyG``: ``--model.aggregation pyg --data.sampler_device cpu``: PyG's layers on batches that
    PyG's ``NodeLoader`` (gnnkit's ``CSRNodeLoader`` subclass) builds on the host. Its sampler is
    gnnkit's ``CSRNeighborSampler`` on the CPU: PyG's own ``NeighborSampler`` needs pyg-lib or
    torch-sparse, which gnnkit does not depend on, so this row differs from gnnkit's CPU-sampling
    row in the layers only.

* ``gcn``: full-batch GCN 3 x 256 on the arxiv twin (``recipes/gcn_synthetic_arxiv.yaml``),
  ``--model.aggregation gnnkit`` against ``pyg``.
* ``reuse``: the products reuse recipe (``recipes/sage_reuse_synthetic_products.yaml``, PerFect-style
  record and replay, https://arxiv.org/abs/2408.08490 ) against the same recipe with
  ``--data.reuse null``, both with gnnkit aggregation and the default sampler device, over the
  recipe's whole schedule (``--reuse-epochs``).

The ``sage`` rows also profile their first epoch, and the ``reuse`` rows their third (a replay
epoch of the recipe's schedule) (:class:`gnnkit.step_profile.StepProfile`: ``--profile-steps`` steps
after 10 of warm-up, split into data / forward / backward / optimizer, host time, GPU time and host
syncs each, with the lines that asked for the syncs, then the operators that took the most device
time over 5 more): a table per row, and
``step_profile`` in its JSON, say where an epoch's time goes. One epoch is profiled, so the median
epoch is not disturbed. The ``reuse`` rows also keep report.json's ``reuse`` counts (batches replayed
and fresh, the time spent waiting for them per phase, the shards kept on the device). Rows with
gnnkit's layers keep the SpMM formats each layer ran (``formats``: which ``auto`` chose there).

Per run: the training epoch without validation (median, ``train_epoch_time_s``; on a GPU timed to
the end of its kernels), training batches per second, the whole training time (``train_time_s``),
peak GPU memory while training (``peak_gpu_mb``; peak RSS on the CPU) and the test metric. The
sampled families test on ``--test-batches`` batches of the test split (the default is a tenth of
ogbn-products' 2.2M test nodes at the recipes' evaluation batch of 4096: testing all of it with CPU
sampling takes minutes a row; a smaller split is tested whole), and the CPU-sampling rows sample
with ``--cpu-workers`` loader processes. A row that fails is recorded with its error and the others still run.
``summary``: ``sage_products_epoch_s`` (gnnkit row), ``gpu_sampling_speedup`` (gnnkit with CPU sampling over gnnkit, epoch time),
``prefetch_speedup`` (gnnkit without prefetching over gnnkit, epoch time),
``gcn_gnnkit_over_pyg_epoch`` (gnnkit's epoch over PyG's: at most 1 is no slower) and
``reuse_end_to_end_speedup`` (fresh sampling's training time over reuse's) with ``reuse_acc_gap``
(fresh minus reuse test metric, in points). On a GPU the summary's ``targets`` checks these against
issue 16's targets (:data:`GPU_TARGETS`), printed under the tables.

    python bench/gpu.py --json bench/results/gpu.json --png bench/results/gpu.png [--families sage gcn reuse] [--epochs 4]
                        [--reuse-epochs 20] [--device cuda|cpu] [--dataset-sampled NAME]
                        [--dataset-full NAME] [--test-batches 54] [--cpu-workers 8] [--resume PARTIAL.json]

``--device cpu`` runs the same rows on the CPU (the GPU rows then sample on the CPU too): a check of
the benchmark itself, not a GPU figure. The runs' folders and logs go under ``--workdir``.

The ``--json`` file is rewritten after every row, so a run cut short keeps the rows it finished.
``--resume PATH`` keeps the rows of an unfinished result (``"complete": false``: some row of some
family missing; same device and arguments) and runs only the chosen families' missing rows, so the
families can span several calls of a lent machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.targets import Target, print_verdicts, verdicts  # noqa: E402
from pipeline import atomic_write_text, save_figure  # noqa: E402

#: Issue 16's targets, set for one H100 or H200.
GPU_TARGETS = [
    Target(("sage_products_epoch_s",), 1.5, at_most=True,
           what="sampled SAGE [15,10,5], batch 1024, 3x256, products twin: epoch <= 1.5 s"),
    Target(("gpu_sampling_speedup",), 5.0, what=">= 5x the same model fed by CPU sampling"),
    Target(("gcn_gnnkit_over_pyg_epoch",), 1.0, at_most=True,
           what="full-batch GCN, arxiv twin, gnnkit aggregation: no slower than PyG's path"),
    Target(("reuse_end_to_end_speedup",), 1.3, what="reuse >= 1.3x end to end on the products twin"),
    Target(("reuse_acc_gap",), 0.5, at_most=True, what="... at <= 0.5 pt accuracy"),
]


@dataclass(frozen=True)
class Config:
    """One row: a recipe and the overrides that make its path.

    Attributes:
        family: ``sage``, ``gcn`` or ``reuse``.
        label: The row's name in the table.
        recipe: The recipe under ``recipes/``.
        overrides: ``gnnkit run`` arguments after the recipe.
        profiled: Whether the run profiles the steps of an epoch.
        profile_epoch: Which (0: the first).
    """

    family: str
    label: str
    recipe: str
    overrides: tuple[str, ...]
    profiled: bool = False
    profile_epoch: int = 0


def configs(families: list[str]) -> list[Config]:
    """The rows of the chosen families, in table order."""
    sage, gcn, reuse = "sage_synthetic_products.yaml", "gcn_synthetic_arxiv.yaml", "sage_reuse_synthetic_products.yaml"
    table = {
        "sage": [Config("sage", "gnnkit", sage, ("--model.aggregation", "gnnkit", "--data.sampler_device", "auto"),
                        profiled=True),
                 Config("sage", "gnnkit, no prefetch", sage,
                        ("--model.aggregation", "gnnkit", "--data.sampler_device", "auto", "--data.prefetch", "0"),
                        profiled=True),
                 Config("sage", "gnnkit, CPU sampling", sage,
                        ("--model.aggregation", "gnnkit", "--data.sampler_device", "cpu"), profiled=True),
                 Config("sage", "PyG", sage, ("--model.aggregation", "pyg", "--data.sampler_device", "cpu"),
                        profiled=True)],
        "gcn": [Config("gcn", "gnnkit", gcn, ("--model.aggregation", "gnnkit")),
                Config("gcn", "PyG", gcn, ("--model.aggregation", "pyg"))],
        "reuse": [Config("reuse", "reuse", reuse, ("--model.aggregation", "gnnkit"), profiled=True, profile_epoch=2),
                  Config("reuse", "fresh sampling", reuse, ("--model.aggregation", "gnnkit", "--data.reuse", "null"),
                         profiled=True, profile_epoch=2)],
    }
    return [row for family in families for row in table[family]]


def command(config: Config, args: argparse.Namespace, run_dir: Path) -> list[str]:
    """The ``gnnkit run`` command line of one row."""
    epochs = args.reuse_epochs if config.family == "reuse" else args.epochs
    sampled = config.family != "gcn"
    dataset = args.dataset_sampled if sampled else args.dataset_full
    accelerator = "gpu" if args.device == "cuda" else "cpu"
    cpu_sampling = dict(zip(config.overrides[::2], config.overrides[1::2])).get("--data.sampler_device") == "cpu"
    profile = ["--trainer.callbacks+=gnnkit.step_profile.StepProfile",
               "--trainer.callbacks.init_args.steps", str(args.profile_steps),
               "--trainer.callbacks.init_args.epoch", str(config.profile_epoch)]
    return [sys.executable, "-m", "gnnkit.cli", "run", str(ROOT / "recipes" / config.recipe), *config.overrides,
            "--trainer.accelerator", accelerator, "--trainer.max_epochs", str(epochs),
            *(["--trainer.limit_test_batches", str(args.test_batches)] if sampled else []),
            *(["--data.num_workers", str(args.cpu_workers)] if cpu_sampling else []),
            *(profile if config.profiled and args.profile_steps > 0 else []),
            *(["--data.dataset", dataset] if dataset else []), "--run_dir", str(run_dir)]


def run(config: Config, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Train one row in its own process; its figures from ``report.json``."""
    name = f"{config.family}-{config.label.replace(' ', '_').replace(',', '')}"
    run_dir = workdir / name
    cmd = command(config, args, run_dir)
    with open(workdir / f"{name}.log", "w") as log:
        print(f"== {config.family} / {config.label}: {' '.join(cmd[3:])}", flush=True)
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout, cwd=ROOT).returncode
    if code != 0:
        tail = (workdir / f"{name}.log").read_text()[-2000:]
        raise RuntimeError(f"bench/gpu.py: {config.family} / {config.label} failed (exit {code}):\n{tail}")
    report = json.loads((run_dir / "report.json").read_text())
    timed = report.get("train_epoch_times_s", [])
    if len(timed) != report["epochs"]:  # the medians and sums would be of some epochs only
        raise RuntimeError(f"bench/gpu.py: {config.family} / {config.label}: report.json timed {len(timed)} "
                           f"of its {report['epochs']} epochs")
    sampler = report.get("sampler") or {}
    return {"family": config.family, "label": config.label, "args": list(config.overrides),
            "epochs": report["epochs"], "train_epoch_s": report["train_epoch_time_s"],
            "train_time_s": report["train_time_s"], "train_epoch_times_s": timed,
            "batches_per_s": report["train_batches_per_s"],
            "peak_gpu_mb": report.get("peak_train_gpu_mb", report.get("peak_gpu_mb")),
            "peak_rss_mb": report["peak_rss_mb"],
            "sampler_device": sampler.get("device") if isinstance(sampler, dict) else sampler,
            "metric": report["metric"], "test": report["test"],
            **({"formats": layer_formats(report["formats"])} if report.get("formats") else {}),
            **({"step_profile": report["step_profile"]} if "step_profile" in report else {}),
            **({"reuse": {k: report["reuse"].get(k) for k in REUSE_KEYS}} if "reuse" in report else {})}


def layer_formats(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per gnnkit layer, how often each ``forward/backward`` format pair ran (report.json's
    ``formats``): which formats ``auto`` chose on this device."""
    return {layer: dict(plan.get("counts", {})) for layer, plan in report.items() if isinstance(plan, dict)}


#: What the reuse rows keep of report.json's ``reuse``.
REUSE_KEYS = ("loader", "stored", "epochs", "batches", "load_time_s", "device_kept_mb", "cache_bytes")


def _row(family: str, label: str, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The row of ``family`` / ``label`` that ran (not one that failed), or None."""
    return next((r for r in rows if (r["family"], r["label"]) == (family, label) and "error" not in r), None)


def run_or_fail(config: Config, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """:func:`run`, or a row holding the error: one failed row does not cost the table the others."""
    try:
        return run(config, args, workdir)
    except (RuntimeError, OSError, KeyError, ValueError, subprocess.TimeoutExpired) as err:
        print(f"   failed: {str(err).splitlines()[0]}", flush=True)
        return {"family": config.family, "label": config.label, "args": list(config.overrides), "error": str(err)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a and b else None


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary keys the issue names, from the rows that ran (``None`` where a row is missing)."""
    def epoch(family: str, label: str) -> float | None:
        row = _row(family, label, rows)
        return row["train_epoch_s"] if row else None

    reuse, fresh = _row("reuse", "reuse", rows), _row("reuse", "fresh sampling", rows)
    return {
        "sage_products_epoch_s": epoch("sage", "gnnkit"),
        "gpu_sampling_speedup": _ratio(epoch("sage", "gnnkit, CPU sampling"), epoch("sage", "gnnkit")),
        "prefetch_speedup": _ratio(epoch("sage", "gnnkit, no prefetch"), epoch("sage", "gnnkit")),
        "sage_gnnkit_over_pyg_speedup": _ratio(epoch("sage", "PyG"), epoch("sage", "gnnkit")),
        "gcn_gnnkit_over_pyg_epoch": _ratio(epoch("gcn", "gnnkit"), epoch("gcn", "PyG")),
        "reuse_end_to_end_speedup": _ratio(fresh["train_time_s"], reuse["train_time_s"]) if reuse and fresh else None,
        "reuse_acc_gap": round(100 * (fresh["test"] - reuse["test"]), 2) if reuse and fresh else None,
    }


def print_table(rows: list[dict[str, Any]], device: str) -> None:
    """One table per family; the ratio column is each row's epoch over the family's first row's."""
    memory = "peak GPU MB" if device == "cuda" else "peak RSS MB"
    for family in dict.fromkeys(r["family"] for r in rows):
        group = [r for r in rows if r["family"] == family and "error" not in r]
        failed = [r["label"] for r in rows if r["family"] == family and "error" in r]
        if failed:
            print(f"\n{family}: failed: {', '.join(failed)}")
        if not group:
            continue
        print(f"\n{family} ({device})")
        print(f"{'path':22} {'sampler':>8} {'epoch s':>9} {'vs first':>8} {'batches/s':>10} {'train s':>9} "
              f"{memory:>12} {'test':>7}")
        for r in group:
            mem = r["peak_gpu_mb"] if device == "cuda" else r["peak_rss_mb"]
            ratio = _ratio(r["train_epoch_s"], group[0]["train_epoch_s"])
            print(f"{r['label']:22} {str(r['sampler_device'] or '-'):>8} {r['train_epoch_s']:9.3f} "
                  f"{ratio if ratio is not None else float('nan'):8.3f} {r['batches_per_s'] or 0:10.2f} "
                  f"{r['train_time_s']:9.2f} {mem or 0:12.1f} {r['test']:7.4f}")


def print_profiles(rows: list[dict[str, Any]]) -> None:
    """Per profiled row: each phase of a step, host ms (GPU ms and host syncs where measured), medians."""
    for r in rows:
        profile = r.get("step_profile") or {}
        if not profile.get("steps"):
            continue
        print(f"\n{r['family']} / {r['label']}: a step's phases in epoch {profile.get('epoch', 0)}, median of "
              f"{profile['steps']} steps (ms)")
        gpu, syncs = profile.get("gpu_ms"), profile.get("syncs")
        print(f"{'phase':10} {'host':>9}" + (f" {'GPU':>9} {'syncs':>6}" if gpu else ""))
        for phase, host in profile["host_ms"].items():
            print(f"{phase:10} {host:9.3f}" + (f" {gpu[phase]:9.3f} {syncs[phase]:6.1f}" if gpu else ""))
        for site, per_step in (profile.get("sync_sites") or {}).items():
            print(f"  {per_step:9.2f} syncs a step at {site}")
        for op in profile.get("operators", [])[:5]:
            print(f"  {op['self_ms']:9.3f} ms  {op['calls']:6d} calls  {op['name'][:70]}")
        epoch = profile.get("whole_epoch")
        if epoch:
            slow = ", ".join(f"{ms:.1f} (step {i})" for i, ms in epoch["slowest"])
            first, end = epoch["window"]
            window = f"steps {first}-{end - 1} were the profile's (slower)" if end > first else "no step was profiled"
            print(f"  whole epoch, host clock: {epoch['steps']} steps, the first {epoch['first_ms']:.1f} ms from the "
                  f"epoch's start, then median {epoch['median_ms']:.2f} ms, mean {epoch['mean_ms']:.2f} ms; slowest "
                  f"{slow}; {window}")
    for r in rows:
        if r.get("formats"):
            chosen = "; ".join(f"{layer} {', '.join(f'{pair} x{n}' for pair, n in counts.items())}"
                               for layer, counts in r["formats"].items())
            print(f"\n{r['family']} / {r['label']}: SpMM formats (forward/backward) {chosen}")


def plot(result: dict[str, Any], path: Path) -> None:
    """A panel per family: each path's training epoch time (seconds), labelled with its test metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [r for r in result["rows"] if "error" not in r]
    families = list(dict.fromkeys(r["family"] for r in ran))
    if not families:
        return
    fig, axes = plt.subplots(1, len(families), figsize=(4.5 * len(families), 4), squeeze=False)
    for ax, family in zip(axes[0], families):
        group = [r for r in ran if r["family"] == family]
        bars = ax.bar([r["label"].replace(", ", ",\n") for r in group], [r["train_epoch_s"] for r in group])
        ax.bar_label(bars, labels=[f"{r['train_epoch_s']:.3g} s\ntest {r['test']:.3f}" for r in group], fontsize=8)
        ax.set_ylabel("training epoch (s, median)")
        ax.set_title(f"{family} on {result.get('gpu', result['device'])}", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.margins(y=0.2)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


#: The families, in table order.
FAMILIES = ["sage", "gcn", "reuse"]
#: The arguments a result records; resuming needs them equal.
RECORDED = ("epochs", "reuse_epochs", "dataset_sampled", "dataset_full", "test_batches", "cpu_workers")


def machine(args: argparse.Namespace) -> dict[str, Any]:
    """What a result's rows must share: the device, its GPU's name, and the arguments that shape
    the figures."""
    gpu = None
    if args.device == "cuda":
        import torch

        gpu = torch.cuda.get_device_name(0)
    return {"device": args.device, "gpu": gpu, **{k: getattr(args, k) for k in RECORDED}}


def resumed_rows(path: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rows of an unfinished result at ``path`` that this run keeps (see ``--resume``).

    Raises:
        ValueError: ``path`` is not an unfinished result of the same machine and arguments.
    """
    try:
        earlier = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"--resume {path}: not a readable bench/gpu.py result ({err})") from None
    if earlier.get("complete", True):
        raise ValueError(f"--resume {path}: that result is complete (nothing to resume; run without --resume)")
    theirs = {"device": earlier.get("device"), "gpu": earlier.get("gpu"),
              **{k: earlier.get("args", {}).get(k) for k in RECORDED}}
    if theirs != machine(args):
        raise ValueError(f"--resume {path}: recorded with {theirs}, this run is {machine(args)}")
    return list(earlier.get("rows", []))


def result_of(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The JSON result of the rows so far; ``complete`` once every family's every row is there."""
    here = machine(args)
    families = [f for f in FAMILIES if any(r["family"] == f for r in rows)]
    summary = summarise(rows)
    if args.device == "cuda":
        summary["targets"] = verdicts(summary, GPU_TARGETS, "issue 16")
    result = {"device": args.device, "complete": all(_row(c.family, c.label, rows) for c in configs(FAMILIES)),
              "rows": rows, "summary": summary,
              "args": {**{k: here[k] for k in RECORDED}, "families": families}}
    if here["gpu"] is not None:
        result["gpu"] = here["gpu"]
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--png", type=Path, help="a bar chart of the epoch times, a panel per family")
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=FAMILIES)
    parser.add_argument("--epochs", type=int, default=4, help="epochs of the sage and gcn rows (median of them)")
    parser.add_argument("--reuse-epochs", type=int, default=20, help="epochs of the reuse rows (the recipe's schedule)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--dataset-sampled", help="dataset of the sage and reuse rows (default: the recipes')")
    parser.add_argument("--dataset-full", help="dataset of the gcn rows (default: the recipe's)")
    parser.add_argument("--workdir", type=Path, help="run folders and logs (default: a temporary folder)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    parser.add_argument("--test-batches", type=int, default=54,
                        help="test batches of the sampled families (a count, not Lightning's fraction, which "
                             "fails on a split of under 1/fraction batches; a smaller split is tested whole)")
    parser.add_argument("--cpu-workers", type=int, default=8, help="loader processes of the CPU-sampling rows")
    parser.add_argument("--resume", type=Path, help="an unfinished --json result whose rows to keep")
    parser.add_argument("--profile-steps", type=int, default=30,
                        help="steps of the profiled rows' epoch split into phases (0: no profile)")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA device here (use --device cpu to check the benchmark itself)")
    try:
        earlier = resumed_rows(args.resume, args) if args.resume else []
    except ValueError as err:
        parser.error(str(err))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for config in configs(FAMILIES):  # earlier rows and this run's, in table order
            done = _row(config.family, config.label, earlier)
            if done is None and config.family not in args.families:
                continue
            rows.append(done if done is not None else run_or_fail(config, args, workdir))
            if args.json:
                atomic_write_text(args.json, json.dumps(result_of(rows, args), indent=2) + "\n")
    print_table(rows, args.device)
    print_profiles(rows)
    result = result_of(rows, args)
    print(json.dumps({k: v for k, v in result["summary"].items() if k != "targets"}, indent=2))
    print_verdicts(result["summary"].get("targets", []))
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=2) + "\n")
    if args.png:
        plot(result, args.png)
    return result


if __name__ == "__main__":
    main()

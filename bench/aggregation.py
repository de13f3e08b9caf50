"""PyG's layers against gnnkit's SpMM layers in the shipped full-batch recipes: epoch time, and the
same training losses.

Runs ``gnnkit run recipes/<recipe>.yaml --trainer.max_epochs N --model.aggregation {pyg,gnnkit}``
for each recipe, PyG's run first, each in a process of its own exactly as a user types it, and
prints the medians of report.json's ``epoch_time_s`` (validation included) and
``train_epoch_time_s``, PyG's over gnnkit's, and the largest difference between the two runs'
training losses epoch by epoch (metrics.csv). Writes the rows as JSON and the epoch times as a PNG
beside it.

    python bench/aggregation.py [--recipes gcn_synthetic_arxiv sage_synthetic_arxiv] [--epochs 6] \\
        [--json bench/results/aggregation.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline import atomic_write_text, save_figure  # noqa: E402

AGGREGATIONS = ("pyg", "gnnkit")
#: Whose layers each aggregation is, as the plot says.
OWNERS = {"pyg": "PyG", "gnnkit": "gnnkit"}


def command(recipe: str, aggregation: str, epochs: int, run_dir: Path, extra: list[str]) -> list[str]:
    """The ``gnnkit run`` command line of one run (from the repository root)."""
    return [sys.executable, "-m", "gnnkit.cli", "run", f"recipes/{recipe}.yaml", "--trainer.max_epochs", str(epochs),
            "--model.aggregation", aggregation, "--run_dir", str(run_dir), *extra]


def train_losses(run_dir: Path) -> list[float]:
    """The training loss of each epoch, from the run's metrics.csv."""
    with (run_dir / "metrics.csv").open() as handle:
        return [float(row["train_loss"]) for row in csv.DictReader(handle) if row.get("train_loss")]


def run_once(recipe: str, aggregation: str, epochs: int, run_dir: Path, extra: list[str]) -> dict[str, Any]:
    """One run's report, with its training losses under ``train_losses``."""
    out = subprocess.run(command(recipe, aggregation, epochs, run_dir, extra), capture_output=True, text=True,
                         cwd=REPO)
    if out.returncode != 0:
        raise SystemExit(f"{recipe} with {aggregation}'s layers failed:\n{out.stderr[-3000:]}")
    report = json.loads((run_dir / "report.json").read_text())
    return {**report, "train_losses": train_losses(run_dir)}


def compare(recipe: str, epochs: int, runs: Path, extra: list[str]) -> dict[str, Any]:
    """One row: both runs of ``recipe``, their epoch times, ratios and loss difference."""
    reports = {a: run_once(recipe, a, epochs, runs / f"{recipe}-{a}", extra) for a in AGGREGATIONS}
    losses = [reports[a]["train_losses"] for a in AGGREGATIONS]
    row: dict[str, Any] = {"recipe": recipe, "epochs": epochs}
    for a in AGGREGATIONS:
        row[a] = {"epoch_s": reports[a]["epoch_time_s"], "train_epoch_s": reports[a]["train_epoch_time_s"],
                  "val": reports[a]["val"], "train_losses": reports[a]["train_losses"]}
    row["epoch_ratio"] = round(row["pyg"]["epoch_s"] / row["gnnkit"]["epoch_s"], 2)
    row["train_epoch_ratio"] = round(row["pyg"]["train_epoch_s"] / row["gnnkit"]["train_epoch_s"], 2)
    row["max_train_loss_diff"] = max(abs(p - g) for p, g in zip(*losses)) if all(losses) else None
    row["command"] = " ".join(["gnnkit", *command(recipe, "{pyg,gnnkit}", epochs, Path("DIR"), extra)[3:]])
    return row


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Epoch time per recipe, PyG's layers beside gnnkit's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for i, aggregation in enumerate(AGGREGATIONS):
        ax.bar([j + (i - 0.5) * 0.4 for j in range(len(rows))], [r[aggregation]["epoch_s"] for r in rows], 0.4,
               label=f"{OWNERS[aggregation]}'s layers")
    ax.set_xticks(range(len(rows)), [f"{r['recipe']}\n{r['epoch_ratio']:.1f}x" for r in rows])
    ax.set_ylabel("s per epoch (validation included)")
    ax.set_title("Full-batch recipes: PyG's layers against gnnkit's SpMM layers")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=["gcn_synthetic_arxiv", "sage_synthetic_arxiv"])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--runs", type=Path, help="run folders go here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="write rows as JSON, and the PNG beside it")
    parser.add_argument("extra", nargs="*", help="more gnnkit run arguments for every run (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        runs = (args.runs or Path(tmp)).resolve()
        rows = [compare(recipe, args.epochs, runs, args.extra) for recipe in args.recipes]
    print(f"{'recipe':<24} {'pyg epoch s':>12} {'gnnkit epoch s':>15} {'ratio':>6} {'pyg train s':>12} "
          f"{'gnnkit train s':>15} {'ratio':>6} {'max loss diff':>14}")
    for r in rows:
        diff = f"{r['max_train_loss_diff']:.1e}" if r["max_train_loss_diff"] is not None else "-"
        print(f"{r['recipe']:<24} {r['pyg']['epoch_s']:12.2f} {r['gnnkit']['epoch_s']:15.2f} {r['epoch_ratio']:6.1f} "
              f"{r['pyg']['train_epoch_s']:12.2f} {r['gnnkit']['train_epoch_s']:15.2f} "
              f"{r['train_epoch_ratio']:6.1f} {diff:>14}")
    if args.json:
        atomic_write_text(args.json, json.dumps({"rows": rows}, indent=1) + "\n")
        plot(rows, args.json.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

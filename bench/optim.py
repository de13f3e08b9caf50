"""The training algorithms of issue 20 against Adam, each on the same graph and seeds.

Each comparison is two recipes run on one graph: Adam's (the baseline) and the method's.

=============  =====================================  ==========================================
name           baseline recipe (Adam)                 method recipe
=============  =====================================  ==========================================
kfac-arxiv     gcn_synthetic_arxiv                    opt_kfac_synthetic_arxiv (K-FAC, 2008.09624)
kfac-cora      gcn_citation on Cora (``--citation``)  opt_kfac_citation (with Izadi et al.'s pseudo-labels)
ssp-cora       gcn_citation on Cora                   gcn_citation + the same pseudo-labels (Adam: what
                                                      the objective alone gives, beside kfac-cora)
galore         emb_synthetic_arxiv                    opt_galore_synthetic_arxiv (GaLore, 2403.03507)
inrank         gcn_synthetic_arxiv                    opt_inrank_synthetic_arxiv (InRank, 2306.11250)
lns-madam      gcn_citation on Cora                   opt_lns_madam_citation (LNS-Madam, 2106.13914)
=============  =====================================  ==========================================

Each run is ``gnnkit run RECIPE --seed_everything S --run_dir ...`` in a process of its own, one at a
time; its figures come from the run folder: ``report.json`` (best validation and its checkpoint's
test accuracy, optimizer state bytes, weight bytes, parameter count, median epoch time) and
``metrics.csv`` (the validation curve: the epoch at which a run first reaches the Adam run's best
validation accuracy, and the seconds that takes at the median epoch time). A run folder that
already holds a ``report.json`` is read instead of rerun, so an interrupted benchmark resumes.

The step time of distributed K-FAC with and without pipelined factor communication (D-KFAC vs
SPD-KFAC, 4 ranks) comes from ``bench/kfac_pipeline.py``, run once into the runs folder.

    python bench/optim.py [--only kfac-arxiv galore ...] [--seeds 0 1 2] [--long-seeds 0]
                          [--citation /tmp/citation] [--json bench/results/optim.json]
                          [--png bench/results/optim.png]

Cora in OGB layout: ``python bench/planetoid_to_ogb.py --raw PLANETOID/data --out /tmp/citation cora``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gnnkit.report import read_metrics  # noqa: E402
from pipeline import atomic_write_text  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Comparison:
    """Adam's recipe and a method's, on one graph.

    Attributes:
        name: Row label (``--only`` picks by it).
        baseline: Adam's recipe (a name in ``recipes/``).
        method: The method's recipe.
        graph: ``None`` for the recipes' own dataset, else a graph folder under ``--citation``.
        args: ``gnnkit run`` arguments for both runs (e.g. a shorter run on the arxiv twin).
        baseline_args: Arguments for Adam's run only, making its model the method's (same widths).
        method_args: Arguments for the method's run only (a schedule scaled to the shorter run).
        long: Runs on the arxiv twin: seeds from ``--long-seeds`` (default: the first of ``--seeds``).
    """

    name: str
    baseline: str
    method: str
    graph: str | None = None
    args: tuple[str, ...] = ()
    baseline_args: tuple[str, ...] = ()
    method_args: tuple[str, ...] = ()
    long: bool = False


#: 30 of the arxiv recipes' 500 full-batch epochs (a full-batch epoch of the 3 x 256 GCN with PyG's
#: layers takes ~14 s on a 2-core CPU): both sides of a comparison get the same budget, and PyG's
#: layers, as the method recipes have them (the GCN recipe's default is gnnkit's).
ARXIV_EPOCHS = ("--trainer.max_epochs", "30", "--model.aggregation", "pyg")
#: InRank's warm-up and growth gap (200 and 25 optimizer steps over 500) scaled to the 30 steps.
INRANK_SHORT = ("--model.inrank", json.dumps({"init_rank": 40, "buffer": 8, "threshold": 0.9, "warmup": 12, "gap": 2,
                                               "max_params_fraction": 0.5, "init_scale": 4.0, "frozen_base": True}))
COMPARISONS = (
    Comparison("kfac-arxiv", "gcn_synthetic_arxiv", "opt_kfac_synthetic_arxiv", args=ARXIV_EPOCHS, long=True),
    Comparison("kfac-cora", "gcn_citation", "opt_kfac_citation", graph="cora"),
    Comparison("ssp-cora", "gcn_citation", "gcn_citation", graph="cora",
               method_args=("--model.pseudo_label_gamma", "1.0")),
    Comparison("galore", "emb_synthetic_arxiv", "opt_galore_synthetic_arxiv"),
    Comparison("inrank", "gcn_synthetic_arxiv", "opt_inrank_synthetic_arxiv", args=ARXIV_EPOCHS,
               method_args=INRANK_SHORT, long=True),
    Comparison("lns-madam", "gcn_citation", "opt_lns_madam_citation", graph="cora",
               baseline_args=("--model.hidden_channels", "64")),
)


def command(recipe: str, dataset: Path | None, seed: int, run_dir: Path, override: list[str]) -> list[str]:
    """The ``gnnkit run`` command line of one run (from the repository root)."""
    cmd = [sys.executable, "-m", "gnnkit.cli", "run", f"recipes/{recipe}.yaml", "--seed_everything", str(seed),
           "--run_dir", str(run_dir)]
    if dataset is not None:
        cmd += ["--data.dataset", str(dataset)]
    return cmd + override


def run_recipe(recipe: str, dataset: Path | None, seed: int, extra: tuple[str, ...],
               args: argparse.Namespace) -> dict[str, Any]:
    """One run's report plus its validation curve (run first unless its folder already finished)."""
    tag = "".join(f"-{a.lstrip('-').replace('.', '_')}" for a in extra if not a.startswith("{"))
    tag += f"-{zlib.crc32(' '.join(extra).encode()):08x}" if any(a.startswith("{") for a in extra) else ""
    run_dir = (args.runs / f"{recipe}-{dataset.name if dataset else 'recipe'}{tag}-{seed}").resolve()
    cmd = command(recipe, dataset, seed, run_dir, [*extra, *args.override])
    if not (run_dir / "report.json").is_file():
        print(f"running {recipe} seed {seed}{f' on {dataset}' if dataset else ''}", flush=True)
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        if out.returncode != 0:
            raise SystemExit(f"{recipe} failed:\n{out.stderr[-3000:]}")
    report = json.loads((run_dir / "report.json").read_text())
    curve = [r["val_metric"] for r in read_metrics(run_dir / "metrics.csv") if "val_metric" in r]
    report["curve"] = curve
    report["command"] = " ".join(["gnnkit", "run", *cmd[4:]])
    return report


def epochs_to(curve: list[float], target: float) -> int | None:
    """1-based epoch at which ``curve`` first reaches ``target`` (``None``: never)."""
    return next((i + 1 for i, value in enumerate(curve) if value >= target - 1e-9), None)


def weight_bytes(report: dict[str, Any]) -> int:
    """Bytes the trained weights take between steps (LNS codes where the optimizer stores them)."""
    optimizer = report.get("optimizer") or {}
    return int(optimizer.get("weight_bytes") or optimizer.get("param_bytes") or 0)


def row(name: str, role: str, report: dict[str, Any], target: float) -> dict[str, Any]:
    """A table row of one run, timed against ``target`` (the Adam run's best validation accuracy)."""
    epochs = epochs_to(report["curve"], target)
    low_rank = report.get("low_rank") or {}
    return {
        "comparison": name, "role": role, "dataset": report["dataset"], "optimizer": report["optimizer"]["class"],
        "val": report["val"], "test": report["test"], "epochs": report["epochs"],
        "epochs_to_target": epochs,
        "seconds_to_target": None if epochs is None else round(epochs * report["epoch_time_s"], 3),
        "state_bytes": report["optimizer"]["state_bytes"], "weight_bytes": weight_bytes(report),
        "params": low_rank.get("params", report["num_params"]),
        "full_params": low_rank.get("full_params", report["num_params"]),
        "epoch_time_s": report["epoch_time_s"], "command": report["command"],
        "val_curve": [round(v, 4) for v in report["curve"]],
    }


def compare(comparison: Comparison, seeds: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Baseline and method rows of one comparison for every seed."""
    dataset = None if comparison.graph is None else (args.citation / comparison.graph).resolve()
    if dataset is not None and not dataset.is_dir():
        print(f"skipping {comparison.name}: no graph at {dataset} (see bench/planetoid_to_ogb.py)")
        return []
    rows = []
    for seed in seeds:
        base = run_recipe(comparison.baseline, dataset, seed, comparison.args + comparison.baseline_args, args)
        ours = run_recipe(comparison.method, dataset, seed, comparison.args + comparison.method_args, args)
        target = max(base["curve"]) if base["curve"] else base["val"]
        rows += [row(comparison.name, "adam", base, target) | {"seed": seed},
                 row(comparison.name, "method", ours, target) | {"seed": seed}]
    return rows


def pairs(rows: list[dict[str, Any]], name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(Adam, method) row pairs of one comparison, one per seed."""
    mine = [r for r in rows if r["comparison"] == name]
    return [(a, m) for a in mine for m in mine
            if a["role"] == "adam" and m["role"] == "method" and a["seed"] == m["seed"]]


def mean_ratio(rows: list[dict[str, Any]], name: str, key: str) -> float | None:
    """Mean over seeds of ``method[key] / adam[key]`` (``None`` when a value is missing)."""
    values = [m[key] / a[key] for a, m in pairs(rows, name) if m[key] is not None and a[key]]
    return round(statistics.mean(values), 4) if values else None


def own_ratio(rows: list[dict[str, Any]], name: str, key: str, over: str) -> float | None:
    """Mean over seeds of the method row's ``key / over`` (e.g. InRank's trained over full-rank weights)."""
    values = [m[key] / m[over] for _, m in pairs(rows, name) if m[over]]
    return round(statistics.mean(values), 4) if values else None


def mean_gap(rows: list[dict[str, Any]], name: str) -> float | None:
    """Mean over seeds of Adam's test accuracy minus the method's (a fraction; > 0: the method is worse)."""
    values = [a["test"] - m["test"] for a, m in pairs(rows, name)]
    return round(statistics.mean(values), 4) if values else None


def summarise(rows: list[dict[str, Any]], pipeline: dict[str, Any] | None) -> dict[str, Any]:
    """The issue's summary keys (``kfac_epochs_over_adam`` is the worse of the two graphs) and the gaps."""
    kfac = [v for v in (mean_ratio(rows, n, "epochs_to_target") for n in ("kfac-arxiv", "kfac-cora")) if v]
    return {
        "kfac_epochs_over_adam": max(kfac) if kfac else None,
        "kfac_epochs_over_adam_arxiv": mean_ratio(rows, "kfac-arxiv", "epochs_to_target"),
        "kfac_epochs_over_adam_cora": mean_ratio(rows, "kfac-cora", "epochs_to_target"),
        "kfac_test_gap_arxiv": mean_gap(rows, "kfac-arxiv"),
        "kfac_test_gap_cora": mean_gap(rows, "kfac-cora"),
        "adam_pseudo_label_test_gap_cora": mean_gap(rows, "ssp-cora"),
        "spd_kfac_over_dkfac_step": None if pipeline is None else round(pipeline["summary"]["spd_kfac_over_dkfac_step"], 4),
        "galore_state_over_adam": mean_ratio(rows, "galore", "state_bytes"),
        "galore_test_gap": mean_gap(rows, "galore"),
        "inrank_params_over_full": own_ratio(rows, "inrank", "params", "full_params"),
        "inrank_test_gap": mean_gap(rows, "inrank"),
        "lns_madam_acc_gap": mean_gap(rows, "lns-madam"),
        "lns_madam_weight_bytes_over_adam": mean_ratio(rows, "lns-madam", "weight_bytes"),
    }


def kfac_pipeline(args: argparse.Namespace) -> dict[str, Any] | None:
    """``bench/kfac_pipeline.py``'s result (run once into the runs folder)."""
    path = (args.runs / "kfac_pipeline.json").resolve()
    if not path.is_file():
        print("running bench/kfac_pipeline.py", flush=True)
        out = subprocess.run([sys.executable, "bench/kfac_pipeline.py", "--json", str(path)], cwd=REPO,
                             capture_output=True, text=True)
        print(out.stdout, end="")
        if out.returncode != 0:
            raise SystemExit(f"bench/kfac_pipeline.py failed:\n{out.stderr[-3000:]}")
    return json.loads(path.read_text())


def print_table(rows: list[dict[str, Any]]) -> None:
    """Each comparison's Adam and method rows side by side with the method's ratios."""
    print(f"{'comparison':<11} {'seed':>4} {'role':<6} {'val':>7} {'test':>7} {'ep->tgt':>7} {'s->tgt':>7} "
          f"{'state MB':>9} {'weights MB':>10} {'params':>9} {'s/epoch':>8}")
    for r in rows:
        def fmt(value: Any, spec: str) -> str:
            return "-".rjust(int(spec.lstrip(">").split(".")[0])) if value is None else format(value, spec)
        print(f"{r['comparison']:<11} {r['seed']:>4} {r['role']:<6} {r['val']:>7.4f} {r['test']:>7.4f} "
              f"{fmt(r['epochs_to_target'], '>7')} {fmt(r['seconds_to_target'], '>7.1f')} "
              f"{r['state_bytes'] / 1e6:>9.2f} {r['weight_bytes'] / 1e6:>10.3f} {r['params']:>9} "
              f"{r['epoch_time_s']:>8.3f}")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Validation accuracy per epoch, Adam against the method, one panel per comparison (first seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["comparison"] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.4), squeeze=False)
    for ax, name in zip(axes[0], names):
        adam, method = pairs(rows, name)[0]
        for r, label in ((adam, "Adam"), (method, name)):
            ax.plot(range(1, len(r["val_curve"]) + 1), r["val_curve"], label=label)
        ax.axhline(max(adam["val_curve"]), color="grey", lw=0.6, ls="--")
        ax.set(title=f"{name} ({adam['dataset']}, seed {adam['seed']})", xlabel="epoch", ylabel="validation accuracy")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=[c.name for c in COMPARISONS], help="comparisons to run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--long-seeds", type=int, nargs="+", help="seeds of the arxiv-twin comparisons")
    parser.add_argument("--citation", type=Path, default=Path("/tmp/citation"),
                        help="folder of OGB-layout citation graphs (bench/planetoid_to_ogb.py)")
    parser.add_argument("--runs", type=Path, default=Path("runs/optim"), help="run folders go here")
    parser.add_argument("--no-pipeline", action="store_true", help="skip bench/kfac_pipeline.py")
    parser.add_argument("--override", nargs=argparse.REMAINDER, default=[],
                        help="further gnnkit run arguments for every run (last on the line)")
    parser.add_argument("--json", type=Path, help="write rows and summary as JSON")
    parser.add_argument("--png", type=Path, help="plot the validation curves here")
    args = parser.parse_args(argv)
    chosen = [c for c in COMPARISONS if not args.only or c.name in args.only]
    long_seeds = args.long_seeds or args.seeds[:1]
    rows = [r for c in chosen for r in compare(c, long_seeds if c.long else args.seeds, args)]
    pipeline = None if args.no_pipeline else kfac_pipeline(args)
    print_table(rows)
    summary = summarise(rows, pipeline)
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    if args.png and rows:
        plot(rows, args.png)
    if args.json:
        atomic_write_text(args.json, json.dumps({"rows": rows, "kfac_pipeline": pipeline, "summary": summary},
                                                indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

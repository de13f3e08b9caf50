"""The citation recipes on the real citation graphs, against their papers' figures (and any node
recipes on other small graphs a user brings: ``--names``, ``--recipes``).

Runs ``gnnkit run recipes/<recipe>.yaml --data.dataset DIR/<graph> --seed_everything S`` for each
recipe, graph and seed, one run at a time, each in a process of its own exactly as a user types it,
and prints test accuracy per run, the mean and standard deviation over seeds, and the paper's
figure beside it (Kipf & Welling, <https://arxiv.org/abs/1609.02907>, Table 2; Velickovic et al.,
<https://arxiv.org/abs/1710.10903>, Table 2). The graphs are OGB-layout folders built by
``bench/planetoid_to_ogb.py`` (Planetoid split). A run folder that already holds a ``report.json``
is read instead of rerun (``--runs DIR/<recipe>-<graph>-<seed>/``), so an interrupted benchmark
resumes.

    python bench/planetoid_to_ogb.py --raw RAW --out /tmp/citation cora citeseer
    python bench/citation.py --graphs /tmp/citation [--seeds 0 1 2] [--json bench/results/citation.json]
    python bench/heterophilous_to_ogb.py --raw RAW --out /tmp/hetero minesweeper actor
    python bench/citation.py --graphs /tmp/hetero --names minesweeper actor --recipes gcn_citation sage_arxiv

Link recipes too (GAE's figures, Kipf & Welling, <https://arxiv.org/abs/1611.07308>, Table 1), on link
folders that ``gnnkit import --task link`` writes from PyG's Planetoid graphs (each saved with
``torch.save(Planetoid(root, "Cora")[0].to_dict(), "cora.pt")``):

    gnnkit import cora.pt /tmp/links/cora --task link
    gnnkit import citeseer.pt /tmp/links/citeseer --task link
    python bench/citation.py --graphs /tmp/links --recipes gae_citation

Graph classification recipes too, on the TU datasets made into graph folders by ``bench/tu_to_ogb.py``
(Xu et al.'s figures, <https://arxiv.org/abs/1810.00826>, Table 1):

    python bench/tu_to_ogb.py --raw DIR --out /tmp/tu mutag proteins nci1 imdbbinary
    python bench/citation.py --graphs /tmp/tu --names mutag proteins nci1 imdbbinary --recipes gin_tu

The test metric is each graph's own (accuracy, or ROC-AUC for a binary task or a link folder), in percent.
``--json PATH`` also draws the rows beside their papers' figures as a PNG next to it; ``--plot PATH``
draws that PNG again from a JSON written so, running nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from pipeline import atomic_write_text
from pipeline.atomic import save_figure

REPO = Path(__file__).resolve().parents[1]
#: Test metric (%) in each recipe's paper: Table 2 of the GCN and GAT papers; for the heterophily
#: recipe, GraphSAGE's mean over 10 splits in Platonov et al.'s results (notebooks/results.ipynb of
#: github.com/yandex-research/heterophilous-graphs; ROC-AUC for minesweeper, tolokers, questions).
PAPER = {
    "gcn_citation": {"cora": 81.5, "citeseer": 70.3, "pubmed": 79.0},
    "gat_citation": {"cora": 83.0, "citeseer": 72.5, "pubmed": 79.0},
    "gae_citation": {"cora": 91.0, "citeseer": 89.5, "pubmed": 96.4},  # GAE, Table 1 (ROC-AUC)
    # GIN-0, Xu et al. Table 1: 10-fold cross-validation accuracy (here: one 80/10/10 split)
    "gin_tu": {"mutag": 89.4, "proteins": 76.2, "nci1": 82.7, "ptc": 64.6, "imdbbinary": 75.1, "imdbmulti": 52.3},
    "sage_heterophilous": {"roman_empire": 85.74, "amazon_ratings": 53.63, "minesweeper": 93.51, "tolokers": 82.43,
                           "questions": 76.44},
}


def command(recipe: str, graph: Path, seed: int, run_dir: Path) -> list[str]:
    """The ``gnnkit run`` command line of one run (from the repository root)."""
    return [sys.executable, "-m", "gnnkit.cli", "run", f"recipes/{recipe}.yaml",
            "--data.dataset", str(graph), "--seed_everything", str(seed), "--run_dir", str(run_dir)]


def run_once(recipe: str, graph: Path, seed: int, runs: Path) -> dict[str, Any]:
    """One run's report (read from its folder when it already finished)."""
    run_dir = (runs / f"{recipe}-{graph.name}-{seed}").resolve()
    report = run_dir / "report.json"
    if not report.is_file():
        out = subprocess.run(command(recipe, graph, seed, run_dir), capture_output=True, text=True, cwd=REPO)
        if out.returncode != 0:
            raise SystemExit(f"{recipe} on {graph.name}, seed {seed} failed:\n{out.stderr[-3000:]}")
    return json.loads(report.read_text())


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Per graph, each recipe's test mean with its seeds' spread (error bar), and the paper's figure
    as a black diamond on that recipe's bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    recipes = list(dict.fromkeys(r["recipe"] for r in rows))
    width = 0.8 / len(recipes)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.3 * len(rows) + 1.2 * len(graphs)), 3.8))
    for i, recipe in enumerate(recipes):
        mine = [r for r in rows if r["recipe"] == recipe]
        xs = [graphs.index(r["graph"]) + (i - (len(recipes) - 1) / 2) * width for r in mine]
        ax.bar(xs, [r["mean"] for r in mine], width, yerr=[r["std"] for r in mine], capsize=2, label=recipe)
        papers = [(x, r["paper"]) for x, r in zip(xs, mine) if r["paper"] is not None]
        if papers:
            ax.scatter(*zip(*papers), marker="D", s=14, color="black", zorder=3,
                       label="paper" if not ax.get_legend_handles_labels()[1].count("paper") else None)
    metrics = {r["graph"]: r.get("metric", "acc") for r in rows}
    ax.set_xticks(range(len(graphs)), [f"{g}\n{metrics[g]}" for g in graphs], fontsize=8)
    low = min([r["mean"] - r["std"] for r in rows] + [r["paper"] for r in rows if r["paper"] is not None])
    ax.set_ylim(max(0.0, low - 10), 118)
    ax.set_yticks([t for t in ax.get_yticks() if t <= 100])
    ax.set_ylabel("test metric (%), mean over seeds")
    ax.set_title("Recipes on real graphs (one split each) against their papers")
    ax.legend(fontsize=7, loc="upper center", ncols=min(len(recipes) + 1, 6), frameon=False)
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=Path, help="folder of OGB-layout citation graphs (to run the recipes)")
    parser.add_argument("--names", nargs="+", default=["cora", "citeseer"])
    parser.add_argument("--recipes", nargs="+", default=["gcn_citation", "gat_citation"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--runs", type=Path, default=Path("runs/citation"), help="run folders go here")
    parser.add_argument("--json", type=Path, help="write rows as JSON, and the PNG beside it")
    parser.add_argument("--plot", type=Path, metavar="JSON", help="only draw the PNG of a JSON written so")
    args = parser.parse_args(argv)
    if args.plot:
        plot(json.loads(args.plot.read_text())["rows"], args.plot.with_suffix(".png"))
        return 0
    if args.graphs is None:
        parser.error("--graphs is needed to run the recipes (or --plot JSON to draw one)")
    rows = []
    print(f"{'recipe':<14} {'graph':<18} {'test per seed':<24} {'mean':>6} {'std':>5} {'paper':>6} {'diff':>6}")
    for recipe in args.recipes:
        for name in args.names:
            reports = [run_once(recipe, args.graphs.resolve() / name, seed, args.runs) for seed in args.seeds]
            accs = [round(100 * r["test"], 2) for r in reports]
            mean = statistics.mean(accs)
            std = statistics.stdev(accs) if len(accs) > 1 else 0.0
            paper = PAPER.get(recipe, {}).get(name)
            rows.append({"recipe": recipe, "graph": name, "seeds": args.seeds, "test_acc": accs,
                         "val_acc": [round(100 * r["val"], 2) for r in reports], "mean": round(mean, 2),
                         "std": round(std, 2),
                         "paper": paper, "epochs": reports[0]["epochs"], "metric": reports[0]["metric"],
                         "adjusted_homophily": reports[0].get("data", {}).get("adjusted_homophily"),
                         "command": " ".join(["gnnkit", *command(recipe, args.graphs.resolve() / name, 0,
                                                                 args.runs)[3:-4]])})
            per_seed = " ".join(f"{a:.1f}" for a in accs)
            diff = f"{mean - paper:+.1f}" if paper is not None else "-"
            print(f"{recipe:<14} {name:<18} {per_seed:<24} {mean:>6.1f} {std:>5.1f} {paper or '-':>6} {diff:>6}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        lines = ",\n".join(f"  {json.dumps(row)}" for row in rows)  # one run group per line
        atomic_write_text(args.json, f'{{"rows": [\n{lines}\n]}}\n')
        plot(rows, args.json.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Start-up time of the ``gnnkit`` command, whole processes, against importing Lightning.

Times, as separate processes (``python -m gnnkit.cli ...``, what the console script runs):
``gnnkit --help``, ``gnnkit datasets``, a cache-hit ``gnnkit preprocess synthetic-tiny`` and
``gnnkit cache verify`` over a cache that holds that entry and a sampled-batch cache, and ``gnnkit run
recipes/quickstart.yaml --help`` kept from the untimed first round (:mod:`gnnkit.help_cache`). The baseline
is ``python -c "import lightning"``, which every one of these commands paid before the strategy was
registered lazily (issue 18: 4.7-5.8 s each); ``python -c pass`` is the interpreter's floor. The
commands run round-robin for ``--repeats`` rounds in a private ``GNNKIT_HOME``; the table gives the
fastest and the median round, the median's ratio to the baseline's median, and whether the command
imported torch or Lightning (one extra run under ``-X importtime``).

A second table times the start of training: ``gnnkit run recipes/quickstart.yaml --trainer.max_epochs
1`` (imports, recipe, data, one epoch, the test), against the same command with Python's cyclic
garbage collector left running through the heavy imports, as gnnkit did before
:mod:`gnnkit.import_gc` (its import replaced by a plain one in that process).

Absolute times drift on shared machines; the ratios, measured side by side, hold.

    python bench/cli_start.py [--repeats 7] [--json PATH]   (and a PNG beside the JSON)
    python bench/cli_start.py --plot bench/results/cli_start.json   (only redraw the PNG)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import atomic_write_text, save_figure  # noqa: E402

DATASET = "synthetic-tiny"
TARGET_S = 1.0
BASELINE = ("import lightning", ["-c", "import lightning"])
FLOOR = ("python -c pass", ["-c", "pass"])
COMMANDS = {
    "gnnkit --help": ["--help"],
    "gnnkit datasets": ["datasets"],
    f"gnnkit preprocess {DATASET} (hit)": ["preprocess", DATASET],
    "gnnkit cache verify": ["cache", "verify"],
    "gnnkit run quickstart --help (kept)": ["run", "recipes/quickstart.yaml", "--help"],
}
#: The start of training, and the same with the collector on through the imports (the baseline).
RUN_ARGS = ["run", str(ROOT / "recipes" / "quickstart.yaml"), "--trainer.max_epochs", "1"]
RUN = "gnnkit run quickstart, 1 epoch"
RUN_BASELINE = "the same, collector on in imports"
COLLECTOR_ON = ("import importlib, sys, gnnkit.import_gc as g; g.import_without_gc = importlib.import_module; "
                f"from gnnkit.cli import main; sys.exit(main({RUN_ARGS!r}))")


def _argv(args: list[str], gnnkit: bool) -> list[str]:
    return [sys.executable, *(["-m", "gnnkit.cli"] if gnnkit else []), *args]


def _time(argv: list[str], env: dict[str, str], cwd: Path = ROOT) -> float:
    """Wall time of one process run in ``cwd``; it must succeed."""
    start = time.perf_counter()
    result = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return seconds


def _heavy_imports(argv: list[str], env: dict[str, str]) -> list[str]:
    """Which of torch, lightning and pandas the process imported (from ``-X importtime``)."""
    result = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, cwd=ROOT, capture_output=True,
                            text=True)
    names = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    return sorted(n for n in ("torch", "lightning", "pandas") if n in names)


def _prepare(home: Path, env: dict[str, str]) -> None:
    """A cache entry of the tiny dataset and a small sampled-batch cache, made untimed."""
    subprocess.run(_argv(["preprocess", DATASET], True), env=env, cwd=ROOT, check=True, capture_output=True)
    code = ("import torch; from pipeline.batch_cache import BatchCacheWriter, BatchRecord\n"
            f"with BatchCacheWriter(__import__('pathlib').Path({str(home / 'batches' / DATASET / 'bench')!r}),"
            " {'graph': 'bench'}) as w:\n"
            "    w.add(BatchRecord({'x': torch.ones(64, 8)}, {'batch_size': 64}), seeds=torch.arange(64))\n")
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True, capture_output=True)


def measure(repeats: int) -> dict[str, object]:
    """Time every command and the baselines round-robin; returns rows and the settings."""
    with tempfile.TemporaryDirectory(prefix="gnnkit-cli-bench-") as tmp:
        home = Path(tmp)
        env = {**os.environ, "GNNKIT_HOME": str(home), "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        for key in ("GNNKIT_DATA_ROOT", "GNNKIT_CACHE", "GNNKIT_BATCHES", "GNNKIT_REGISTRY"):
            env.pop(key, None)
        _prepare(home, env)
        cases = {name: _argv(args, True) for name, args in COMMANDS.items()}
        cases |= {name: _argv(args, False) for name, args in (BASELINE, FLOOR)}
        cases |= {RUN: _argv(RUN_ARGS, True), RUN_BASELINE: _argv(["-c", COLLECTOR_ON], False)}
        cwd = {name: home if name in (RUN, RUN_BASELINE) else ROOT for name in cases}  # run folders in home
        for name, argv in cases.items():  # warm the file cache and the bytecode
            _time(argv, env, cwd[name])
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(repeats):
            for name, argv in cases.items():
                times[name].append(_time(argv, env, cwd[name]))
        heavy = {name: _heavy_imports(argv, env) for name, argv in cases.items() if name not in (RUN, RUN_BASELINE)}
    base = statistics.median(times[BASELINE[0]])
    rows = [{**_row(name, t, base), "imports": heavy[name], "under_target": statistics.median(t) < TARGET_S}
            for name, t in times.items() if name not in (RUN, RUN_BASELINE)]
    run, before = (statistics.median(times[name]) for name in (RUN, RUN_BASELINE))
    run_rows = [_row(name, times[name], before) for name in (RUN, RUN_BASELINE)]
    return {"repeats": repeats, "baseline": BASELINE[0], "target_s": TARGET_S, "python": sys.version.split()[0],
            "cpus": os.cpu_count(), "rows": rows, "run_rows": run_rows,
            "summary": {"run_start_speedup": round(before / run, 3)}}


def _row(name: str, times: list[float], base: float) -> dict[str, object]:
    """A command's fastest and median time, the median's ratio to ``base``, and every time."""
    median = statistics.median(times)
    return {"command": name, "min_s": round(min(times), 4), "median_s": round(median, 4),
            "ratio_to_baseline": round(median / base, 4), "times_s": [round(x, 4) for x in times]}


def print_table(result: dict[str, object]) -> None:
    rows = result["rows"]
    width = max(len(r["command"]) for r in rows)
    print(f"{'command':<{width}}  {'min s':>7}  {'median s':>8}  {'vs ' + result['baseline']:>18}  imports")
    for r in rows:
        print(f"{r['command']:<{width}}  {r['min_s']:>7.3f}  {r['median_s']:>8.3f}  {r['ratio_to_baseline']:>17.3f}x"
              f"  {', '.join(r['imports']) or '-'}")
    ours = [r for r in rows if r["command"] in COMMANDS]
    print(f"\nslowest gnnkit command: {max(r['median_s'] for r in ours):.3f} s median "
          f"(target < {result['target_s']:.0f} s: {'met' if all(r['under_target'] for r in ours) else 'MISSED'}); "
          f"{result['repeats']} rounds, round-robin")
    print(f"\n{'training start':<{width}}  {'min s':>7}  {'median s':>8}  {'vs collector on':>18}")
    for r in result["run_rows"]:
        print(f"{r['command']:<{width}}  {r['min_s']:>7.3f}  {r['median_s']:>8.3f}  {r['ratio_to_baseline']:>17.3f}x")


def plot(result: dict[str, object], path: Path) -> None:
    """Median seconds of each command beside ``import lightning``, and of the training start beside
    the same run with the collector on through the imports."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = [("command start", result["rows"]), ("training start", result.get("run_rows", []))]
    tables = [(title, rows) for title, rows in tables if rows]
    fig, axes = plt.subplots(len(tables), 1, figsize=(8, 1.2 + 0.45 * sum(len(r) for _, r in tables)), squeeze=False)
    for ax, (title, rows) in zip(axes[:, 0], tables):
        labels, medians = [r["command"] for r in rows][::-1], [r["median_s"] for r in rows][::-1]
        bars = ax.barh(labels, medians, color="tab:blue")
        ax.bar_label(bars, labels=[f"{m:.2f} s" for m in medians], fontsize=8)
        ax.set_xlim(0, 1.15 * max(medians))
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("median wall seconds, whole process")
    fig.suptitle(f"gnnkit start-up ({result['cpus']} CPUs, Python {result['python']}, {result['repeats']} rounds)")
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds (default 7)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "cli_start.json",
                        help="where to write the rows (default bench/results/cli_start.json), a PNG beside it")
    parser.add_argument("--plot", type=Path, metavar="JSON", help="only draw the PNG of a JSON written so")
    args = parser.parse_args()
    if args.plot:
        plot(json.loads(args.plot.read_text()), args.plot.with_suffix(".png"))
        return
    result = measure(args.repeats)
    print_table(result)
    atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    plot(result, args.json.with_suffix(".png"))
    print(f"wrote {args.json} and its PNG")


if __name__ == "__main__":
    main()

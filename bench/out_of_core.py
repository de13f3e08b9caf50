"""Out-of-core preprocessing against in-memory preprocessing: time, peak memory, the same entry.

Generates the papers-shaped twin (``synthetic-papers-small``, ogbn-papers100M at 1/20th) if it is
missing, then preprocesses it in child processes, each ``gnnkit preprocess NAME`` with a cache
folder of its own, so each one builds:

* out of core, ``--memory-budget-mb 2048``;
* in memory, when this machine's memory allows it (the estimate stays under ``--max-in-memory-gb``
  and 80% of what the kernel reports available); otherwise the in-memory build runs on
  ``--compare-dataset`` (synthetic-products) instead, out of core as well, so one graph has both.

Each child's wall time is measured around it and its peak resident memory is its ``ru_maxrss``,
read with ``os.wait4`` (the ``RUSAGE_CHILDREN`` figure of that one child). The raw files are hashed
once beforehand (the cache key's digests), so the children time the build alone. Where both paths
built a graph, every array file and the manifest's arrays are compared (``byte_identical``).
Prints a side-by-side table and writes ``--json`` with a ``summary``: ``out_of_core_peak_mb`` and
``out_of_core_budget_mb`` (the twin), ``in_memory_peak_mb``, ``time_ratio`` and ``peak_ratio``
(out of core over in memory, on the graph both built) and ``byte_identical``.

    python bench/out_of_core.py --json bench/results/out_of_core.json
    python bench/out_of_core.py --dataset synthetic-papers-tiny --budget-mb 512 --json /tmp/ooc.json
    python bench/out_of_core.py --plot bench/results/out_of_core.json   (only redraw its PNG)

``--json`` also draws each build's wall time and peak memory, with the budget, as a PNG beside it.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: Bytes per raw edge the in-memory build needs besides the raw arrays (build_csr's keys when
#: symmetrising: 2E int64 keys, a mask, the de-duplicated copy and the row numbers).
KEY_BYTES_PER_EDGE = 40


def locate(name: str) -> dict[str, Any]:
    """Generate ``name`` if missing, hash its raw files into the digest memo; its folder and sizes."""
    from pipeline import paths
    from pipeline.family import layout_module
    from pipeline.fingerprint import DigestMemo, raw_digests
    from pipeline.progress import Stages, setup_logging
    from pipeline.raw_chunks import RawNodeChunks
    from pipeline.registry import resolve
    from pipeline.sources import locate as locate_source

    setup_logging()
    say = Stages(f"bench {name}")
    source = locate_source(resolve(name), paths.data_root(), say)
    files = layout_module(source.meta["family"]).raw_files(source.folder, source.meta)
    raw_digests(source.folder, files, DigestMemo(paths.cache_root() / "digests.json"), say)
    raw = RawNodeChunks(source.folder, source.meta)
    return {"folder": str(source.folder), "raw_mb": sum(f.stat().st_size for f in files) / 2**20,
            "num_nodes": raw.num_nodes, "num_edges": raw.num_edges}


def estimate_in_memory_mb(info: dict[str, Any]) -> float:
    """About what the in-memory build peaks at: every raw array loaded, plus build_csr's keys."""
    return info["raw_mb"] + KEY_BYTES_PER_EDGE * info["num_edges"] / 2**20 + 300


def run_child(command: list[str], env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run ``command``; its wall time, peak resident memory (its own ru_maxrss) and exit code."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    lines = log.read_text().splitlines()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n" + "\n".join(lines[-20:]))
    return {"wall_s": round(wall, 2), "peak_mb": round(usage.ru_maxrss / 1024, 1), "output": lines[-1]}


def preprocess(name: str, budget_mb: int | None, root: Path, memo: Path) -> dict[str, Any]:
    """``gnnkit preprocess name`` in a fresh cache folder ``root`` (seeded with the digest memo)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    shutil.copy(memo, root / "digests.json")
    command = [sys.executable, "-m", "gnnkit.cli", "preprocess", name]
    if budget_mb is not None:
        command += ["--memory-budget-mb", str(budget_mb)]
    env = {**os.environ, "GNNKIT_CACHE": str(root)}
    result = run_child(command, env, root.with_suffix(".log"))
    entry = Path(result.pop("output"))
    manifest = json.loads((entry / "manifest.json").read_text())
    return {"dataset": name, "path": "out-of-core" if budget_mb else "in-memory", "budget_mb": budget_mb,
            **result, "build_s": manifest["stats"]["build_s"], "entry": str(entry),
            "entry_mb": round(sum(a["bytes"] for a in manifest["arrays"].values()) / 2**20, 1),
            "num_nodes": manifest["meta"]["num_nodes"], "num_edges": manifest["meta"]["num_edges"]}


def identical(a: Path, b: Path) -> bool:
    """Same key, the same manifest arrays and every array file equal byte for byte."""
    ma, mb = (json.loads((p / "manifest.json").read_text()) for p in (a, b))
    return a.name == b.name and ma["arrays"] == mb["arrays"] and all(
        filecmp.cmp(a / info["file"], b / info["file"], shallow=False) for info in ma["arrays"].values())


def summarise(rows: list[dict[str, Any]], dataset: str, budget_mb: int, same: bool | None) -> dict[str, Any]:
    """The headline figures: the twin's out-of-core peak, and both paths on the graph both built."""
    by = {(r["dataset"], r["path"]): r for r in rows}
    ours = by[(dataset, "out-of-core")]
    both = next(d for d, p in by if p == "in-memory")
    memory, streamed = by[(both, "in-memory")], by[(both, "out-of-core")]
    return {
        "dataset": dataset,
        "out_of_core_peak_mb": ours["peak_mb"],
        "out_of_core_budget_mb": budget_mb,
        "under_budget": ours["peak_mb"] <= budget_mb,
        "out_of_core_s": ours["wall_s"],
        "compared_on": both,
        "in_memory_peak_mb": memory["peak_mb"],
        "in_memory_s": memory["wall_s"],
        "time_ratio": round(streamed["wall_s"] / memory["wall_s"], 3),
        "peak_ratio": round(streamed["peak_mb"] / memory["peak_mb"], 3),
        "byte_identical": same,
    }


def print_table(rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    print(f"{'dataset':24} {'path':12} {'budget MiB':>10} {'time s':>8} {'peak MiB':>9} {'entry MiB':>9} {'nnz':>12}")
    for r in rows:
        print(f"{r['dataset']:24} {r['path']:12} {r['budget_mb'] or '-':>10} {r['wall_s']:>8.1f} {r['peak_mb']:>9.0f} "
              f"{r['entry_mb']:>9.0f} {r['num_edges']:>12,}")
    print(f"\n{summary['compared_on']}: out of core / in memory: time {summary['time_ratio']:.2f}x, "
          f"peak memory {summary['peak_ratio']:.2f}x, entries byte-identical: {summary['byte_identical']}")
    print(f"{summary['dataset']} out of core: peak {summary['out_of_core_peak_mb']:.0f} MiB under a "
          f"{summary['out_of_core_budget_mb']} MiB budget: {summary['under_budget']}")


def plot(report: dict[str, Any], path: Path) -> None:
    """Each build's wall time and peak resident memory side by side, the memory budget as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipeline import save_figure

    rows = report["rows"]
    labels = [f"{r['dataset']}\n{r['path']}" for r in rows]
    colors = ["tab:blue" if r["budget_mb"] else "tab:gray" for r in rows]
    fig, (time_ax, memory_ax) = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, unit in ((time_ax, "wall_s", "wall seconds"), (memory_ax, "peak_mb", "peak resident MiB")):
        bars = ax.bar(labels, [r[key] for r in rows], color=colors)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
        ax.set_ylabel(unit)
        ax.tick_params(axis="x", labelsize=8)
    budget = report["summary"]["out_of_core_budget_mb"]
    memory_ax.axhline(budget, color="tab:red", linestyle="--", label=f"budget {budget} MiB")
    memory_ax.legend(fontsize=8)
    fig.suptitle("Preprocessing out of core (blue) against in memory (gray)")
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic-papers-small")
    parser.add_argument("--budget-mb", type=int, default=2048)
    parser.add_argument("--compare-dataset", default="synthetic-products",
                        help="in-memory comparison graph when --dataset does not fit in memory here")
    parser.add_argument("--max-in-memory-gb", type=float, default=18.0)
    parser.add_argument("--keep", action="store_true", help="keep the cache folders the children built")
    parser.add_argument("--json", type=Path, help="write the rows and summary here, and a PNG beside it")
    parser.add_argument("--plot", type=Path, metavar="JSON", help="only draw the PNG of a JSON written so")
    parser.add_argument("--locate", help=argparse.SUPPRESS)  # child mode: generate and hash one dataset
    args = parser.parse_args(argv)
    if args.plot:
        plot(json.loads(args.plot.read_text()), args.plot.with_suffix(".png"))
        return 0
    if args.locate:
        print(json.dumps(locate(args.locate)))
        return 0
    from pipeline import paths

    work = paths.gnnkit_home() / "bench-out-of-core"
    work.mkdir(parents=True, exist_ok=True)
    memo = work / "digests.json"

    def prepare(name: str) -> dict[str, Any]:
        env = {**os.environ, "GNNKIT_CACHE": str(work)}  # the memo lands in work/digests.json
        command = [sys.executable, str(Path(__file__).resolve()), "--locate", name]
        out = run_child(command, env, work / f"{name}.locate.log")
        return json.loads(out["output"])

    info = prepare(args.dataset)
    from pipeline.progress import available_memory_mb

    limit_mb = min(args.max_in_memory_gb * 1024, 0.8 * (available_memory_mb() or float("inf")))
    fits = estimate_in_memory_mb(info) <= limit_mb
    print(f"{args.dataset}: in-memory estimate {estimate_in_memory_mb(info):,.0f} MiB, limit here {limit_mb:,.0f} MiB"
          f" -> {'both paths on it' if fits else f'in-memory comparison on {args.compare_dataset}'}", flush=True)
    runs = [(args.dataset, args.budget_mb)]
    if fits:
        runs.append((args.dataset, None))
    else:
        prepare(args.compare_dataset)
        runs += [(args.compare_dataset, args.budget_mb), (args.compare_dataset, None)]
    rows = []
    for name, budget in runs:
        root = work / f"{'ooc' if budget else 'memory'}-{name}"
        rows.append(preprocess(name, budget, root, memo))
        row = rows[-1]
        print(f"  {name} {row['path']}: {row['wall_s']:.1f} s, peak {row['peak_mb']:.0f} MiB", flush=True)
    pair = [Path(r["entry"]) for r in rows if r["dataset"] == runs[-1][0]]
    same = identical(*pair)
    summary = summarise(rows, args.dataset, args.budget_mb, same)
    print_table(rows, summary)
    if args.json:
        report = {"rows": rows, "summary": summary, "in_memory_estimate_mb": round(estimate_in_memory_mb(info)),
                  "in_memory_limit_mb": round(limit_mb), "cpu_count": os.cpu_count()}
        from pipeline import atomic_write_text

        atomic_write_text(args.json, json.dumps(report, indent=2) + "\n")
        plot(report, args.json.with_suffix(".png"))
    if not args.keep:
        for name, budget in runs:
            shutil.rmtree(work / f"{'ooc' if budget else 'memory'}-{name}", ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

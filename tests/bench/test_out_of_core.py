"""bench/out_of_core.py: both paths on the tiny papers twin in child processes, and its summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _row(dataset, path, wall, peak):
    return {"dataset": dataset, "path": path, "budget_mb": 2048 if path == "out-of-core" else None,
            "wall_s": wall, "peak_mb": peak}


def test_summary_compares_on_the_graph_both_paths_built(bench):
    ooc = bench("out_of_core")
    rows = [_row("papers", "out-of-core", 300.0, 1900.0), _row("products", "out-of-core", 200.0, 1500.0),
            _row("products", "in-memory", 100.0, 4500.0)]
    summary = ooc.summarise(rows, "papers", 2048, True)
    assert summary["out_of_core_peak_mb"] == 1900.0 and summary["under_budget"] and summary["compared_on"] == "products"
    assert summary["in_memory_peak_mb"] == 4500.0 and summary["time_ratio"] == 2.0 and summary["peak_ratio"] == 0.333
    assert summary["byte_identical"] is True


def test_the_tiny_twin_end_to_end(tmp_path):
    out = tmp_path / "ooc.json"
    env = {**os.environ, "GNNKIT_HOME": str(tmp_path / "home")}
    result = subprocess.run([sys.executable, str(BENCH / "out_of_core.py"), "--dataset", "synthetic-papers-tiny",
                             "--budget-mb", "512", "--json", str(out)],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [(r["dataset"], r["path"]) for r in report["rows"]] == [
        ("synthetic-papers-tiny", "out-of-core"), ("synthetic-papers-tiny", "in-memory")]
    summary = report["summary"]
    assert summary["byte_identical"] is True and summary["out_of_core_budget_mb"] == 512
    assert 0 < summary["out_of_core_peak_mb"] < 512 and summary["in_memory_peak_mb"] > 0
    assert "time 0." in result.stdout or "time 1." in result.stdout  # the side-by-side ratio line
    assert not (tmp_path / "home" / "bench-out-of-core" / "ooc-synthetic-papers-tiny").exists()  # cleaned up
    assert (tmp_path / "ooc.png").read_bytes()[:4] == b"\x89PNG"


def test_plot_redraws_the_committed_report(bench, tmp_path):
    committed = json.loads((BENCH / "results" / "out_of_core.json").read_text())
    (tmp_path / "ooc.json").write_text(json.dumps(committed))
    assert bench("out_of_core").main(["--plot", str(tmp_path / "ooc.json")]) == 0
    assert (tmp_path / "ooc.png").stat().st_size > 10_000

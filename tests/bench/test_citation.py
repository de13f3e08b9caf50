"""bench/citation.py: one row per recipe and graph from the runs' reports, beside the paper's figure."""

from __future__ import annotations

import json


def _report(folder, test: float, val: float, homophily: float | None = 0.81) -> None:
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"test": test, "val": val, "epochs": 200, "metric": "acc",
                                                    "data": {"adjusted_homophily": homophily}}))


def test_finished_runs_are_read_not_rerun_and_rows_hold_mean_paper_and_homophily(bench, tmp_path, capsys):
    """An interrupted benchmark resumes: a run folder holding a report.json is read as it is."""
    citation = bench("citation")
    runs = tmp_path / "runs"
    for seed, acc in ((0, 0.80), (1, 0.82), (2, 0.84)):
        _report(runs / f"gcn_citation-cora-{seed}", acc, acc + 0.01)
    out = tmp_path / "rows.json"
    assert citation.main(["--graphs", str(tmp_path / "graphs"), "--names", "cora", "--recipes", "gcn_citation",
                          "--runs", str(runs), "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["test_acc"] == [80.0, 82.0, 84.0] and row["mean"] == 82.0 and row["std"] == 2.0
    assert row["paper"] == 81.5 and row["adjusted_homophily"] == 0.81 and row["val_acc"] == [81.0, 83.0, 85.0]
    assert row["command"].startswith("gnnkit run recipes/gcn_citation.yaml --data.dataset ")
    line = capsys.readouterr().out.splitlines()[-1].split()
    assert line == ["gcn_citation", "cora", "80.0", "82.0", "84.0", "82.0", "2.0", "81.5", "+0.5"]
    png = out.with_suffix(".png")
    assert png.read_bytes().startswith(b"\x89PNG")  # the rows beside the paper, drawn next to the JSON
    png.unlink()
    assert citation.main(["--plot", str(out)]) == 0 and png.read_bytes().startswith(b"\x89PNG")


def test_a_failed_run_ends_the_benchmark_naming_it(bench, tmp_path, monkeypatch):
    import subprocess

    import pytest

    citation = bench("citation")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "boom\n"))
    with pytest.raises(SystemExit, match="sage_heterophilous on actor, seed 0 failed:\nboom"):
        citation.run_once("sage_heterophilous", tmp_path / "actor", 0, tmp_path / "runs")

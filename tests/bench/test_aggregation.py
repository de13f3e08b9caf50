"""bench/aggregation.py: one row per recipe from its two runs' reports and metrics: epoch times,
PyG's over gnnkit's, and the largest training-loss difference (runs faked: each writes a report)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

TIMES = {"pyg": (10.0, 8.0, [2.0, 1.5, 1.25]), "gnnkit": (2.0, 1.0, [2.0, 1.5, 1.2501])}


def _fake_run(args, **kwargs):
    """What ``gnnkit run`` leaves in its ``--run_dir``: report.json and metrics.csv."""
    run_dir = Path(args[args.index("--run_dir") + 1])
    epoch, train, losses = TIMES[args[args.index("--model.aggregation") + 1]]
    run_dir.mkdir(parents=True)
    (run_dir / "report.json").write_text(json.dumps({"epoch_time_s": epoch, "train_epoch_time_s": train,
                                                     "val": 0.5}))
    rows = "".join(f"{i},0,,{loss}\n{i},0,0.5,\n" for i, loss in enumerate(losses))  # train and val rows
    (run_dir / "metrics.csv").write_text("epoch,step,val_loss,train_loss\n" + rows)
    return subprocess.CompletedProcess(args, 0, "", "")


def test_a_row_has_both_runs_their_ratio_and_the_loss_difference(bench, tmp_path, monkeypatch, capsys):
    aggregation = bench("aggregation")
    monkeypatch.setattr(subprocess, "run", _fake_run)
    out = tmp_path / "aggregation.json"
    assert aggregation.main(["--recipes", "gcn_synthetic_arxiv", "--epochs", "3", "--runs", str(tmp_path / "runs"),
                             "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["epoch_ratio"] == 5.0 and row["train_epoch_ratio"] == 8.0
    assert row["pyg"]["train_losses"] == [2.0, 1.5, 1.25] and row["max_train_loss_diff"] == pytest.approx(1e-4)
    assert row["command"] == ("gnnkit run recipes/gcn_synthetic_arxiv.yaml --trainer.max_epochs 3 "
                              "--model.aggregation {pyg,gnnkit} --run_dir DIR")
    assert out.with_suffix(".png").stat().st_size > 0
    line = capsys.readouterr().out.splitlines()[-1].split()
    assert line == ["gcn_synthetic_arxiv", "10.00", "2.00", "5.0", "8.00", "1.00", "8.0", "1.0e-04"]


def test_a_failed_run_ends_the_benchmark_naming_it(bench, tmp_path, monkeypatch):
    aggregation = bench("aggregation")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "boom\n"))
    with pytest.raises(SystemExit, match="sage_arxiv with gnnkit's layers failed:\nboom"):
        aggregation.run_once("sage_arxiv", "gnnkit", 2, tmp_path / "run", [])

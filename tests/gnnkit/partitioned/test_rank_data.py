"""``data.partitions``: each rank trains on its own METIS partition through ``gnnkit run``."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gnnkit.data.datamodule import GraphDataModule

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "recipes" / "quickstart.yaml"
EXACT = ["--trainer.max_epochs", "3", "--model.model", "gcn", "--model.aggregation", "gnnkit",
         "--model.dropout", "0", "--model.batch_norm", "false"]


def _run(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gnnkit.cli", "run", str(RECIPE), *EXACT, "--run_dir", str(run_dir),
                           *args], capture_output=True, text=True, cwd=run_dir.parent, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "GNNKIT_NATIVE": "0",
                               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})


def _curve(run_dir: Path, column: str) -> list[float]:
    with open(run_dir / "metrics.csv") as f:
        return [float(row[column]) for row in csv.DictReader(f) if row.get(column)]


def test_two_partitions_train_as_one_process(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    result = _run(one, "--data.partitions", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    result = _run(two, "--data.partitions", "2", "--trainer.devices", "2",
                  "--trainer.strategy.class_path", "gnnkit.comm.GnnkitStrategy")
    assert result.returncode == 0, result.stderr[-3000:]
    # the ranks' gradients average to the whole graph's: the same training losses, the same accuracy
    assert _curve(two, "train_loss") == pytest.approx(_curve(one, "train_loss"), rel=1e-5)
    assert _curve(two, "val_acc") == pytest.approx(_curve(one, "val_acc"), abs=0.01)
    report = json.loads((two / "report.json").read_text())
    assert report["data"]["loader"] == "partitioned full-batch (2 parts)"
    part = report["partition"]
    assert part["parts"] == 2 and part["halo_nodes"] > 0 and 0 < part["edge_cut"] < 0.5
    assert part["rows_sent_per_exchange"] > 0


def test_partitions_need_one_rank_each_and_gnnkit_layers(tmp_path):
    result = _run(tmp_path / "r", "--data.partitions", "2")
    assert result.returncode != 0 and "data.partitions: 2 partitions need 2 ranks (one each)" in result.stderr
    result = _run(tmp_path / "s", "--data.partitions", "1", "--model.aggregation", "pyg")
    assert result.returncode != 0 and "partition-parallel layers need model.aggregation: gnnkit" in result.stderr


def test_partitions_need_full_batch_training():
    with pytest.raises(ValueError, match="data.partitions: expected a count >= 1 with full-batch training"):
        GraphDataModule("synthetic-tiny", batch_size=64, partitions=2)

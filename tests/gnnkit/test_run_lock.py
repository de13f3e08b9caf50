"""gnnkit/run_lock.py: a second run into a folder a run is using is refused, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from gnnkit.resume import RUN_DIR_ENV, ResumeError
from gnnkit.run import run
from gnnkit.run_lock import run_folder_lock

QUICKSTART = str(Path(__file__).parents[2] / "recipes" / "quickstart.yaml")


def test_the_folder_is_held_while_the_block_runs_and_free_after(tmp_path):
    with run_folder_lock(tmp_path):
        with pytest.raises(ResumeError, match=f"^{tmp_path}: another gnnkit run is using this folder"):
            with run_folder_lock(tmp_path):
                pass
    with run_folder_lock(tmp_path):  # free again
        pass
    assert list(tmp_path.iterdir()) == []  # the lock is on the folder: no file


def test_a_run_into_a_folder_another_run_holds_is_refused_and_writes_nothing(tmp_path, monkeypatch):
    """Two runs into one --run_dir both trained there: each epoch's rows twice in metrics.csv, and a
    best-v1.ckpt beside best.ckpt."""
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    monkeypatch.setenv(RUN_DIR_ENV, "")
    with run_folder_lock(tmp_path):  # the first run
        with pytest.raises(ResumeError, match="another gnnkit run is using this folder"):
            run(QUICKSTART, ["--trainer.max_epochs", "1", "--run_dir", str(tmp_path)])
    assert list(tmp_path.iterdir()) == []


def test_a_busy_folder_is_refused_before_the_data_is_read(tmp_path, monkeypatch):
    """The refusal came after the datamodule was built: minutes of preprocessing on a cache miss."""
    monkeypatch.setenv("GNNKIT_NATIVE", "0")
    monkeypatch.setenv(RUN_DIR_ENV, "")
    monkeypatch.setenv("GNNKIT_HOME", str(tmp_path / "home"))  # an empty cache: building would preprocess
    (tmp_path / "run").mkdir()
    with run_folder_lock(tmp_path / "run"):
        with pytest.raises(ResumeError, match="another gnnkit run is using this folder"):
            run(QUICKSTART, ["--trainer.max_epochs", "1", "--run_dir", str(tmp_path / "run")])
    assert not (tmp_path / "home" / "cache").exists()

"""gnnkit/set_aside.py: an earlier run's files, put back as they were or deleted."""

from __future__ import annotations

from pathlib import Path

from gnnkit.set_aside import SetAside


def _earlier_run(folder: Path) -> None:
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "best.ckpt").write_bytes(b"best")
    (folder / "metrics.csv").write_text("epoch\n0\n")
    (folder / "config.yaml").write_text("model: {}\n")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_refused_run_puts_back_what_it_moved_copied_and_rewrote(tmp_path):
    _earlier_run(tmp_path)
    earlier = _files(tmp_path)
    aside = SetAside(tmp_path)
    aside.copy(tmp_path / "config.yaml")
    aside.copy(tmp_path / "metrics.csv")
    aside.move(tmp_path / "metrics.csv")  # copied, then removed: the copy (its first version) comes back
    aside.move(tmp_path / "checkpoints" / "best.ckpt")
    aside.move(tmp_path / "missing.csv")  # nothing there: nothing to keep
    assert not (tmp_path / "metrics.csv").exists() and not (tmp_path / "checkpoints" / "best.ckpt").exists()
    (tmp_path / "config.yaml").write_text("model: {new: 1}\n")  # the refused run's
    (tmp_path / "checkpoints").rmdir()
    assert sorted(aside.restore()) == ["checkpoints/best.ckpt", "config.yaml", "metrics.csv"]
    aside.drop()
    assert _files(tmp_path) == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "config.yaml", "metrics.csv"]


def test_a_run_that_trains_drops_what_it_set_aside(tmp_path):
    _earlier_run(tmp_path)
    aside = SetAside(tmp_path)
    aside.move(tmp_path / "checkpoints" / "best.ckpt")
    aside.copy(tmp_path / "config.yaml")
    aside.drop()
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "checkpoints", "config.yaml", "metrics.csv"]
    assert aside.restore() == []


def test_nothing_to_set_aside_makes_no_folder(tmp_path):
    aside = SetAside(tmp_path)
    aside.copy(tmp_path / "config.yaml")
    aside.move(tmp_path / "metrics.csv")
    assert list(tmp_path.iterdir()) == [] and aside.restore() == []

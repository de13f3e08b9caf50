from pathlib import Path

import pytest

from pipeline.atomic import atomic_write, atomic_write_text, save_figure


def test_atomic_write_replaces_whole_or_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "out" / "report.json"
    atomic_write_text(path, "old")

    def fail(handle) -> None:
        handle.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, fail)
    assert path.read_text() == "old"
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]  # no temp file left behind


def test_save_figure_writes_a_png_through_a_unique_temp_name(tmp_path: Path, monkeypatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import pipeline.temp_paths as temp_paths

    names, mkstemp = [], temp_paths.tempfile.mkstemp
    monkeypatch.setattr(temp_paths.tempfile, "mkstemp", lambda **kw: names.append(mkstemp(**kw)) or names[-1])
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    for _ in range(2):
        save_figure(fig, tmp_path / "curves.png")
    plt.close(fig)
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len({name for _, name in names}) == 2  # two writers never share a temp file


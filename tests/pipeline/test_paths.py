"""pipeline/paths.py: where gnnkit keeps its data and caches."""

from pathlib import Path

from pipeline import paths


def test_an_empty_gnnkit_home_is_unset(monkeypatch, tmp_path):
    """`GNNKIT_HOME= gnnkit preprocess ...` wrote cache/ and data/ into the current folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GNNKIT_HOME", "")
    assert paths.gnnkit_home() == tmp_path / "xdg" / "gnnkit"
    monkeypatch.setenv("GNNKIT_HOME", "~/g")
    assert paths.gnnkit_home() == Path.home() / "g"

"""`gnnkit run RECIPE --help` kept: the second request prints the same text without importing torch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gnnkit import help_cache
from gnnkit.help_cache import help_key, keep_help, kept_help, names_other_classes, printed_help

REPO = Path(__file__).parents[2]
QUICKSTART = REPO / "recipes" / "quickstart.yaml"

#: Runs `gnnkit run ARGS`, then says whether torch was imported.
_PROBE = ("import sys; from gnnkit.cli import main; code = main(sys.argv[1:]); "
          "sys.stderr.write('torch imported: %s\\n' % ('torch' in sys.modules)); sys.exit(code)")


def _help(home, *args):
    env = {**os.environ, "GNNKIT_HOME": str(home), "COLUMNS": "100"}
    out = subprocess.run([sys.executable, "-c", _PROBE, "run", *map(str, args)], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout, out.stderr.splitlines()[-1]


@pytest.mark.slow
def test_a_repeated_help_is_the_same_text_without_importing_torch(tmp_path):
    first, imported = _help(tmp_path, QUICKSTART, "--help")
    assert imported == "torch imported: True" and "--model.hidden_channels" in first
    again, imported = _help(tmp_path, QUICKSTART, "--help")
    assert (again, imported) == (first, "torch imported: False")
    bare, imported = _help(tmp_path, "--help")  # another request: its own text
    assert imported == "torch imported: True" and bare != first and "--resume RUN_DIR" in bare


def test_the_key_follows_the_recipe_the_arguments_and_the_width(tmp_path, monkeypatch):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(QUICKSTART.read_text())
    key = help_key([str(recipe), "--help"], str(recipe))
    assert key == help_key([str(recipe), "--help"], str(recipe))
    assert help_key([str(recipe), "-h"], str(recipe)) != key
    monkeypatch.setenv("COLUMNS", "57")
    assert help_key([str(recipe), "--help"], str(recipe)) != key
    monkeypatch.delenv("COLUMNS")
    recipe.write_text(QUICKSTART.read_text().replace("hidden_channels: 64", "hidden_channels: 65"))
    assert help_key([str(recipe), "--help"], str(recipe)) != key
    assert help_key([str(tmp_path / "gone.yaml"), "--help"], str(tmp_path / "gone.yaml")) is None


def test_arguments_naming_other_config_files_are_never_kept(tmp_path):
    """The key holds the recipe's bytes alone: an edit of `--config extra.yaml` kept the old text."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(QUICKSTART.read_text())
    assert help_key([str(recipe), "--help"], str(recipe)) is not None
    assert help_key([str(recipe), "--config", "extra.yaml", "--help"], str(recipe)) is None
    assert help_key([str(recipe), "--data=data.yml", "--help"], str(recipe)) is None


def test_a_changed_source_file_of_gnnkit_changes_the_key(tmp_path, monkeypatch):
    package = tmp_path / "gnnkit"
    package.mkdir()
    (package / "module.py").write_text("x = 1\n")
    monkeypatch.setattr(help_cache, "_PACKAGE_ROOTS", (package,))
    key = help_key(["--help"], None)
    (package / "module.py").write_text("x = 12\n")
    assert help_key(["--help"], None) != key


def test_classes_of_other_modules_are_never_kept():
    assert names_other_classes("model:\n  class_path: mypkg.Model\n", [])
    assert names_other_classes("optimizer: my_opt.Opt\n", [])
    assert names_other_classes("model:\n  class_path: mypkg.Model  # mine\n", [])  # the line-end regex missed these
    assert names_other_classes("model: {class_path: mypkg.Model}\n", [])
    assert names_other_classes("trainer:\n  callbacks: [mypkg.CB]\n", [])
    assert names_other_classes("model: [unclosed\n", [])  # no YAML: never kept
    assert names_other_classes("", ["--optimizer", "mypkg.Opt"]) and names_other_classes("", ["--optimizer=a.B"])
    assert not names_other_classes("model:\n  class_path: gnnkit.models.NodeGNN\noptimizer: Adam\n",
                                   ["--optimizer", "torch.optim.SGD", "--data.dataset", "/a/b.c", "--model.lr", "0.1"])
    for recipe in sorted((REPO / "recipes").glob("*.yaml")):
        assert not names_other_classes(recipe.read_text(), []), recipe


def test_a_damaged_kept_text_is_made_again_and_old_ones_go(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNKIT_HOME", str(tmp_path))
    keep_help("k1", "text one\n")
    assert kept_help("k1") == "text one\n" and kept_help("k2") is None
    (tmp_path / "help" / "k1.json").write_text('{"key": "k1", "te')
    assert kept_help("k1") is None
    (tmp_path / "help" / "k1.json").write_text(json.dumps({"key": "other", "text": "x"}))
    assert kept_help("k1") is None
    monkeypatch.setattr(help_cache, "KEEP", 2)
    os.utime(tmp_path / "help" / "k1.json", ns=(0, 0))  # the oldest
    for n in range(4):
        keep_help(f"n{n}", str(n))
        os.utime(tmp_path / "help" / f"n{n}.json", ns=((n + 1) * 10**9,) * 2)  # older than the next one
    assert sorted(path.name for path in (tmp_path / "help").iterdir()) == ["n2.json", "n3.json"]


def test_an_unwritable_home_only_keeps_nothing(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("GNNKIT_HOME", str(tmp_path / "file"))
    keep_help("k", "text")
    assert kept_help("k") is None


def test_printed_help_returns_the_text_and_passes_other_exits_on(capsys):
    def helps():
        print("the help")
        raise SystemExit(0)

    def fails():
        print("partial")
        raise SystemExit(2)

    assert printed_help(helps) == "the help\n" and capsys.readouterr().out == ""
    with pytest.raises(SystemExit):
        printed_help(fails)
    assert capsys.readouterr().out == "partial\n"

from types import SimpleNamespace

import pytest

from gnnkit.saved_config import AtomicSaveConfig


class _Parser:
    def __init__(self, text):
        self.text = text

    def dump(self, config, skip_none=False):
        if isinstance(self.text, Exception):
            raise self.text
        return self.text


def test_config_is_written_whole_or_not_at_all(tmp_path):
    """Lightning truncated config.yaml and then wrote it: a kill between left an empty file, and the
    run folder could not be resumed ('config.yaml: empty')."""
    trainer = SimpleNamespace(log_dir=str(tmp_path), is_global_zero=True,
                              strategy=SimpleNamespace(broadcast=lambda x: x))
    AtomicSaveConfig(_Parser("model: {lr: 0.1}\n"), {}, overwrite=True).setup(trainer, None, "fit")
    assert (tmp_path / "config.yaml").read_text() == "model: {lr: 0.1}\n"
    with pytest.raises(RuntimeError, match="killed"):
        AtomicSaveConfig(_Parser(RuntimeError("killed")), {}, overwrite=True).setup(trainer, None, "fit")
    assert (tmp_path / "config.yaml").read_text() == "model: {lr: 0.1}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_a_dataset_folder_given_relative_is_saved_absolute(tmp_path, monkeypatch):
    """A run given --data.dataset ds/cora could be resumed only from the directory it started in."""
    from jsonargparse import Namespace

    from gnnkit.saved_config import with_absolute_dataset

    (tmp_path / "ds" / "cora").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    config = Namespace(data=Namespace(dataset="ds/cora", batch_size=0), model=Namespace(lr=0.1))
    saved = with_absolute_dataset(config)
    assert saved.data.dataset == str(tmp_path.resolve() / "ds" / "cora") and saved.model.lr == 0.1
    assert config.data.dataset == "ds/cora"  # the run's own config is untouched
    for kept in ("synthetic-tiny", "ds/missing", str(tmp_path / "ds" / "cora")):  # a name, no folder, absolute
        assert with_absolute_dataset(Namespace(data=Namespace(dataset=kept))).data.dataset == kept
    assert with_absolute_dataset(Namespace(model=Namespace(lr=0.1))).model.lr == 0.1  # no data section

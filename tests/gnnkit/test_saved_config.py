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

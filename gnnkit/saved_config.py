"""The run's ``config.yaml``, written whole or not at all, with the dataset's folder as an absolute path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.cli import SaveConfigCallback

from pipeline import atomic_write_text
from pipeline.registry import load_registry, looks_like_path


def with_absolute_dataset(config: Any) -> Any:
    """``config`` (a jsonargparse namespace) with ``data.dataset`` as an absolute path when it names a
    folder by a relative one (``--data.dataset ds/cora``): ``gnnkit run --resume RUN_DIR`` from
    another directory then finds the same folder. Registry names, and paths that name no folder
    (refused later, as they were), are kept as written; ``config`` itself is left unchanged."""
    dataset = config.get("data.dataset") if "data" in config else None
    if not isinstance(dataset, str) or dataset in load_registry() or not looks_like_path(dataset):
        return config
    folder = Path(dataset).expanduser()
    if folder.is_absolute() or not folder.is_dir():
        return config
    config = config.clone()
    config["data.dataset"] = str(folder.resolve())
    return config


class AtomicSaveConfig(SaveConfigCallback):
    """Lightning's ``SaveConfigCallback``, writing through a temp file and a rename: Lightning
    truncates ``config.yaml`` and then writes it at the start of every fit, resumed ones included,
    so a kill in those milliseconds left an empty file and a run folder that could not be resumed.

    Always overwrites (``gnnkit run`` replaces an earlier run's config, and a resumed run rewrites
    its own with the overrides it was given) and writes one file (no ``multifile``). A dataset
    folder given by a relative path is saved as an absolute one (:func:`with_absolute_dataset`).
    """

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:  # noqa: D102
        if self.already_saved:
            return
        log_dir = trainer.log_dir  # a collective, on every rank as in Lightning's
        if trainer.is_global_zero:
            assert log_dir is not None
            config = with_absolute_dataset(self.config)
            atomic_write_text(Path(log_dir) / self.config_filename, self.parser.dump(config, skip_none=False))
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)

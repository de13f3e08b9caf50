"""The run's ``config.yaml``, written whole or not at all."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.cli import SaveConfigCallback

from pipeline import atomic_write_text


class AtomicSaveConfig(SaveConfigCallback):
    """Lightning's ``SaveConfigCallback``, writing through a temp file and a rename: Lightning
    truncates ``config.yaml`` and then writes it at the start of every fit, resumed ones included,
    so a kill in those milliseconds left an empty file and a run folder that could not be resumed.

    Always overwrites (``gnnkit run`` replaces an earlier run's config, and a resumed run rewrites
    its own with the overrides it was given) and writes one file (no ``multifile``).
    """

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:  # noqa: D102
        if self.already_saved:
            return
        log_dir = trainer.log_dir  # a collective, on every rank as in Lightning's
        if trainer.is_global_zero:
            assert log_dir is not None
            atomic_write_text(Path(log_dir) / self.config_filename, self.parser.dump(self.config, skip_none=False))
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)

"""An earlier run's files that a new run in the same folder replaces, kept aside until it trains.

A run into a used folder (``--run_dir OLD``, or ``--resume``) clears or trims the folder's
``metrics.csv`` and checkpoints before ``fit``, and Lightning rewrites ``config.yaml`` and
``hparams.yaml`` when ``fit`` starts. ``fit`` can still refuse the run before its first step (another
optimizer's state in the checkpoint, a setting the data rule out): the refused run then had already
cost the earlier run its metrics and best checkpoint. :class:`SetAside` moves or copies those files
into a temp folder inside the run folder first, puts them back if the run is refused, and deletes
them once training starts. Its temp folder carries its owner (:mod:`pipeline.temp_paths`), so one left by a
killed run is removed by the next temp made there.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pipeline.temp_paths import make_temp_dir, remove

#: The files ``fit`` rewrites in place before a refusal can come: LightningCLI's saved config and
#: the CSV logger's hyper-parameters.
REWRITTEN_IN_FIT = ("config.yaml", "hparams.yaml")


class SetAside:
    """The files of an earlier run, set aside in ``run_dir`` until the new run is past refusal.

    Args:
        run_dir: The run folder; the files set aside are in it or below it.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._folder: Path | None = None
        self._kept: list[str] = []  # paths relative to run_dir, as held in the temp folder

    def _slot(self, path: Path) -> tuple[str, Path]:
        name = str(Path(path).relative_to(self.run_dir))
        if self._folder is None:
            self._folder = make_temp_dir(self.run_dir / "earlier-run")
        return name, self._folder / str(len(self._kept))

    def _held(self, path: Path) -> bool:
        return str(Path(path).relative_to(self.run_dir)) in self._kept

    def move(self, path: Path) -> None:
        """Take ``path`` out of the folder (what ``unlink`` would do), keeping it to put back (its
        first version, if a copy is kept already)."""
        if self._held(path):
            Path(path).unlink(missing_ok=True)
        elif Path(path).is_file():
            name, slot = self._slot(path)
            os.replace(path, slot)
            self._kept.append(name)

    def copy(self, path: Path) -> None:
        """Keep a copy of ``path`` before it is rewritten in place (the first version only)."""
        if Path(path).is_file() and not self._held(path):
            name, slot = self._slot(path)
            shutil.copy2(path, slot)
            self._kept.append(name)

    def restore(self) -> list[str]:
        """Put every file set aside back where it was (over what the run wrote there); the names
        restored, relative to the run folder."""
        if self._folder is None:
            return []
        for index, name in enumerate(self._kept):
            target = self.run_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._folder / str(index), target)
        restored, self._kept = self._kept, []
        return restored

    def drop(self) -> None:
        """Delete what is still set aside, and the temp folder."""
        if self._folder is not None:
            remove(self._folder)
            self._folder, self._kept = None, []

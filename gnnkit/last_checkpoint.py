"""``checkpoints/last.ckpt``: the run's state at every epoch boundary, enough to continue exactly.

:class:`LastCheckpoint` writes ``last.ckpt`` at the start of every training epoch after the first
(and once more when training ends), i.e. after the previous epoch has been validated, logged to
``metrics.csv`` and its learning-rate schedule stepped: a run killed at any point continues from the
last whole epoch whose checkpoint write had finished (:class:`~gnnkit.checkpoint_io.AtomicCheckpointIO`
writes in the background), and ``metrics.csv`` already holds every row of the epochs the checkpoint
covers (a resumed run drops the rows after them).
(Lightning's ``ModelCheckpoint(save_last=True)`` saves in ``on_train_epoch_end``, before the
epoch's training metrics reach the logger, and only when a top-k checkpoint was saved too.)

Besides what Lightning saves (weights, optimizer, schedulers, loops, callbacks, the datamodule's
``state_dict`` with its samplers, the strategy's communication state), the checkpoint holds every
rank's global random state (torch, CUDA, numpy, Python), restored when the resumed run reaches the
same point: dropout masks, shuffles and anything else drawn from the global generators continue as
if the run had never stopped. It also holds every rank's format-plan counts of gnnkit's aggregation
layers (:func:`~gnnkit.models.sparse_conv.plan_counts`), so the report of a resumed run counts
every epoch's products; the sanity check's products are left out of them (a resumed run checks again).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch

from gnnkit.models.sparse_conv import plan_counts, set_plan_counts
from gnnkit.rank_state import gather_ranks, my_rank_state
from gnnkit.resume import LAST  # the checkpoint's file name in ``<run>/checkpoints/``


def random_state() -> dict[str, Any]:
    """The global random state of torch, CUDA, numpy and Python, as plain types and tensors (a
    checkpoint loads with ``weights_only=True``)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"name": str(name), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
                  "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_random_state(state: dict[str, Any]) -> None:
    """Restore what :func:`random_state` returned."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class LastCheckpoint(pl.Callback):
    """Writes ``<dirpath>/last.ckpt`` at every epoch boundary and keeps the random state in it.

    Args:
        dirpath: Folder of the checkpoint (the run's ``checkpoints/``).
        save: Write it (``False`` under ``--trainer.enable_checkpointing false``: no file, while the
            sanity check's batches are still given back and a checkpoint restored still continues).
    """

    def __init__(self, dirpath: Path | str, save: bool = True) -> None:
        self.dirpath = Path(dirpath)
        self.save = save
        self._restored: dict[str, Any] | None = None
        self._fit_started = False
        self._skip_save = False
        self._at_epoch_start = False
        self._module: pl.LightningModule | None = None
        self._counts_before_check: dict[str, dict[str, int]] = {}

    @property
    def path(self) -> Path:
        """Where the checkpoint is written."""
        return self.dirpath / LAST

    @property
    def state_key(self) -> str:
        return "LastCheckpoint"

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._module = pl_module

    def state_dict(self) -> dict[str, Any]:
        """Every rank's random state and format-plan counts (collective: called on all ranks by
        ``dump_checkpoint``)."""
        return {"random": gather_ranks(random_state()),
                "plan_counts": gather_ranks(plan_counts(self._module) if self._module is not None else {})}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep the random state for the start of the resumed fit (or apply it at once when the
        checkpoint is restored after ``on_fit_start``, as some strategies do)."""
        self._restored = state_dict
        if self._fit_started:
            self._apply_restored()

    def _apply_restored(self) -> None:
        saved, self._restored = self._restored or {}, None
        mine = my_rank_state(saved.get("random", []), "the random state")
        if mine is not None:
            set_random_state(mine)
        counts = my_rank_state(saved.get("plan_counts", []), "the format-plan counts")
        if counts is not None and self._module is not None:
            set_plan_counts(self._module, counts)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Restore the random state of the checkpoint, if resuming.

        This is the last hook before the fit loop makes the first epoch's data iterator (a
        ``DataLoader`` iterator draws its base seed from the global generator when made; the sanity
        check between runs under ``isolate_rng``), i.e. the resumed run's generators enter that epoch
        as the uninterrupted run's did at the epoch boundary where the checkpoint was saved."""
        self._fit_started = True
        if self._restored is not None:
            self._apply_restored()
            self._skip_save = True

    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._counts_before_check = plan_counts(pl_module)

    def on_sanity_check_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Undo what the sanity check drew from the datamodule's samplers (Lightning isolates only the
        global generators), so a resumed run, which checks again, validates on the same batches; and
        leave its products out of the format-plan counts, which a resumed run would count twice."""
        rewind = getattr(trainer.datamodule, "rewind_sanity_check", None)
        if callable(rewind):
            rewind()
        set_plan_counts(pl_module, self._counts_before_check)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._skip_save:  # the boundary this run resumed from: nothing new to save
            self._skip_save = False
            return
        if trainer.current_epoch > 0 and self.save:
            self._at_epoch_start = True
            try:
                trainer.save_checkpoint(self.path, weights_only=False)  # said: Lightning logs its default
            finally:
                self._at_epoch_start = False

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Make an epoch-start checkpoint record the loops as they were when the previous epoch
        ended. ``on_train_epoch_start`` runs after the fit loop counted the new epoch as "ready",
        and Lightning restores such a checkpoint as a restart at that epoch's start, which skips the
        epoch's batches; with the count taken back it restores like an end-of-epoch checkpoint."""
        if not self._at_epoch_start:
            return
        progress = checkpoint["loops"]["fit_loop"]["epoch_progress"]
        for counts in (progress["total"], progress["current"]):
            if counts["ready"] == counts["started"] + 1:
                counts["ready"] = counts["started"]

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fit_started = False

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._skip_save = False
        if self.save:
            trainer.save_checkpoint(self.path, weights_only=False)  # said: Lightning logs its default

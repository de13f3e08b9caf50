"""The run folder's report: ``report.json`` and ``curves.png`` from a finished run."""

from __future__ import annotations

import csv
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import EarlyStopping, Timer

from gnnkit.device_clock import device_clock
from gnnkit.native import loader
from gnnkit.optim.state import describe_optimizers
from gnnkit.rank_state import fitting
from pipeline import atomic_write_text, log, peak_rss_mb, save_figure


def _clock(module: pl.LightningModule) -> float:
    """The time once the module's device has run what was queued: an epoch's end (one step for
    full-batch training) would otherwise pass before its backward has run on a GPU, and validation
    would be charged for it."""
    return device_clock(getattr(module, "device", None))


#: Seconds after which the next finished epoch gets a line, whatever the ~5% rule says: a run of long
#: epochs (5 s a step, one step an epoch, 1000 epochs) printed nothing for its first four minutes.
LINE_EVERY_S = 30.0


class EpochTimer(pl.Callback):
    """Records the wall time of every training epoch (on a GPU, up to the end of its kernels) and of
    its training alone (its start to its last batch's end, less validation); logs a line per epoch
    when asked.

    Args:
        log_lines: Log one summary line per epoch (for non-interactive runs without a bar).
    """

    def __init__(self, log_lines: bool = False) -> None:
        self.log_lines = log_lines
        self.times: list[float] = []
        self.train_times: list[float] = []  # the same epochs without their validation
        self.train_batches: list[int] = []
        self._start = 0.0
        self._validating_since: float | None = None
        self._validation = 0.0
        self._batches = 0
        self._trained: float | None = None  # the epoch's training seconds, once its last batch has ended
        self._built_before = 0.0  # native build seconds before the epoch
        self._epochs_here = 0  # epochs this process trained (a resumed run's restored ones are not)
        self._restoring_fit = True  # whether the checkpoint being restored continues a fit
        self.peak_train_gpu_mb: float | None = None
        self._last_line = time.monotonic()  # when an epoch line was last logged (or the timer made)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        build = loader.build_seconds() - self._built_before  # a first use's one-time build is no training
        self.times.append(_clock(pl_module) - self._start - build)
        cut_short = self._trained is None  # no last batch: trained until now
        self.train_times.append(self.times[-1] - self._validation if cut_short else self._trained - build)
        self.train_batches.append(self._batches)
        self._epochs_here += 1

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = _clock(pl_module)
        self._built_before = loader.build_seconds()
        self._validation, self._batches, self._trained = 0.0, 0, None
        if self._epochs_here:  # a resumed run's first: its last line was the previous process's
            self._log_epoch(trainer, trainer.current_epoch)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        """Count the batch; after the epoch's last, stop the training clock (callbacks' hooks run
        before the module's, which then scores the epoch's training predictions)."""
        self._batches += 1
        if trainer.is_last_batch:
            self._trained = _clock(pl_module) - self._start - self._validation

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._validating_since = _clock(pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._validating_since is not None:
            self._validation += _clock(pl_module) - self._validating_since
            self._validating_since = None

    def state_dict(self) -> dict[str, Any]:
        """The epochs timed so far, saved in checkpoints: a resumed run's report then covers every
        epoch (it covered those of the last process only, none after a resume of a finished run)."""
        return {"times": list(self.times), "train_times": list(self.train_times),
                "train_batches": list(self.train_batches)}

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Note whether the checkpoint restored next continues a fit (its state then follows)."""
        self._restoring_fit = fitting(trainer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the saved epochs when a fit resumes; a test of the best weights restores callbacks too,
        and taking them there cut the report back to the best epoch's (20 epochs reported as 9)."""
        if not self._restoring_fit:
            return
        self.times = list(state_dict.get("times", []))
        self.train_times = list(state_dict.get("train_times", []))
        self.train_batches = list(state_dict.get("train_batches", []))

    def summary(self) -> dict[str, Any]:
        """``epoch_time_s`` (median epoch, its validation included), ``train_epoch_time_s`` (median
        epoch's training: to its last batch, without validation), ``train_time_s`` (all epochs' training),
        ``train_batches_per_s`` (the median epoch's batches over its median time) and
        ``train_epoch_times_s`` (each epoch's training, so a reader can check that every epoch is there)."""
        if not self.times:
            return {"epoch_time_s": None, "train_epoch_time_s": None, "train_time_s": None,
                    "train_batches_per_s": None, "train_epoch_times_s": []}
        train = statistics.median(self.train_times)
        rate = statistics.median(self.train_batches) / train if train > 0 else None
        return {"epoch_time_s": round(statistics.median(self.times), 4), "train_epoch_time_s": round(train, 4),
                "train_time_s": round(sum(self.train_times), 4),
                "train_batches_per_s": None if rate is None else round(rate, 3),
                "train_epoch_times_s": [round(t, 4) for t in self.train_times],
                **({"peak_train_gpu_mb": self.peak_train_gpu_mb} if self.peak_train_gpu_mb is not None else {})}

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._epochs_here:
            self._log_epoch(trainer, trainer.current_epoch, force=True)
        self.peak_train_gpu_mb = peak_gpu(pl_module).get("peak_gpu_mb")  # before testing's larger batches

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """With a progress bar (no epoch lines), why training stopped before ``max_epochs``, on a line of
        its own: the bar has closed by now (at ``on_train_end`` the line would continue the bar's);
        for a resumed run that had no epoch left, that it trained none."""
        if not self._epochs_here and trainer.current_epoch:  # a resume of a finished run
            reason = stop_reason(trainer)  # max_steps reached, say, with epochs left
            log.info("nothing to train: the checkpoint has %d of %s epochs%s", trainer.current_epoch, trainer.max_epochs,
                     f" ({reason})" if reason else "")
            return
        reason = None if self.log_lines else stop_reason(trainer)
        if reason:
            log.info("training stopped at epoch %d/%s: %s", trainer.current_epoch, trainer.max_epochs, reason)

    def _log_epoch(self, trainer: pl.Trainer, epoch: int, force: bool = False) -> None:
        """Log the metrics of the epoch just finished (every ~5% of the run, or once
        :data:`LINE_EVERY_S` have passed since the last line, and the last, with why training
        stopped before ``max_epochs``)."""
        every = max(1, (trainer.max_epochs or 20) // 20)
        due = force or epoch % every == 0 or time.monotonic() - self._last_line >= LINE_EVERY_S
        if not self.log_lines or not self.times or not due:
            return
        self._last_line = time.monotonic()
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.endswith(("_loss", "_metric"))}
        shown = " ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items()))
        reason = stop_reason(trainer) if force else None
        log.info("epoch %d/%s %s (%.2fs)%s", epoch, trainer.max_epochs, shown, self.times[-1],
                 f"; stopped: {reason}" if reason else "")


def stop_reason(trainer: pl.Trainer) -> str | None:
    """Why a fit ended before ``max_epochs``: ``max_steps``, ``max_time`` or an ``EarlyStopping``
    callback (``None`` when it ran its epochs). Lightning tells only the first (and ``max_epochs``),
    in a line that came before gnnkit's last epoch line, which says it instead."""
    if trainer.max_epochs not in (None, -1) and trainer.current_epoch >= trainer.max_epochs:
        return None  # it did run them
    if trainer.max_steps not in (None, -1) and trainer.global_step >= trainer.max_steps:
        return f"max_steps={trainer.max_steps} reached"
    for callback in trainer.callbacks:
        if isinstance(callback, Timer) and callback._duration is not None and callback.time_remaining() <= 0:
            return f"max_time ({callback._duration:.0f}s) reached"
        if isinstance(callback, EarlyStopping) and callback.stopped_epoch:
            return (f"early, {callback.monitor} did not improve for {callback.wait_count} checks "
                    f"(patience {callback.patience})")
    return None


def peak_gpu(model: pl.LightningModule) -> dict[str, float]:
    """``peak_gpu_mb``: the most CUDA memory torch's allocator held for tensors in this process
    (``torch.cuda.max_memory_allocated``), when the model trained on a GPU; empty otherwise."""
    import torch

    device = getattr(model, "device", None)
    if device is None or device.type != "cuda":
        return {}
    return {"peak_gpu_mb": round(torch.cuda.max_memory_allocated(device) / 2**20, 1)}


def read_metrics(path: Path) -> list[dict[str, float]]:
    """Per-epoch rows of a Lightning ``metrics.csv`` (step rows merged by epoch)."""
    by_epoch: dict[int, dict[str, float]] = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if row.get("epoch", "") == "":
                continue
            epoch = int(float(row["epoch"]))
            values = {k: float(v) for k, v in row.items() if v not in ("", None) and k not in ("epoch", "step")}
            by_epoch.setdefault(epoch, {"epoch": epoch}).update(values)
    return [by_epoch[e] for e in sorted(by_epoch)]


def _last(rows: list[dict[str, float]], key: str) -> float | None:
    """The latest value of ``key`` in ``metrics.csv``'s rows (``None`` if none has it)."""
    return next((row[key] for row in reversed(rows) if key in row), None)


def plot_curves(rows: list[dict[str, float]], metric: str, path: Path) -> None:
    """Loss and metric per epoch (train and validation) as a two-panel PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, suffix, title in ((axes[0], "loss", "loss"), (axes[1], "metric", metric)):
        for stage in ("train", "val"):
            points = [(r["epoch"], r[f"{stage}_{suffix}"]) for r in rows if f"{stage}_{suffix}" in r]
            if points:
                ax.plot(*zip(*points), label=stage, marker="." if len(points) < 30 else None)
        ax.set_xlabel("epoch")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if ax.lines:  # a run stopped before its first epoch's figures has nothing to label
            ax.legend()
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def _score(value: Any, metric: str, split: str) -> float | None:
    """A metric for the report, rounded; ``None`` (JSON's null, not the non-standard ``NaN``) with a
    warning when it is undefined, as ROC-AUC is on a split holding one class."""
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        log.warning("the %s %s is undefined (%s): %s", split, metric, value,
                    "its split holds one class only" if metric in ("rocauc", "ap") else "see the run log")
        return None
    return round(value, 6)


def write_report(
    run_dir: Path,
    *,
    trainer: pl.Trainer,
    model: Any,
    datamodule: Any,
    test: float,
    timer: EpochTimer,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``report.json`` and ``curves.png`` into ``run_dir``; returns the report.

    In a multi-process run every rank builds the report and only global rank 0 writes it (the
    ranks share ``run_dir``)."""
    metric = model.evaluator.eval_metric
    rows = read_metrics(run_dir / "metrics.csv") if (run_dir / "metrics.csv").is_file() else []
    checkpoint = trainer.checkpoint_callback
    # the validation metric of the weights tested: the best checkpoint's, or without checkpoints the last epoch's
    best = checkpoint.best_model_score if checkpoint is not None else _last(rows, "val_metric")
    report = {
        "dataset": datamodule.describe()["name"],
        "model": model.hparams.model,
        "metric": metric,
        "val": _score(best, metric, "validation"),
        "test": _score(test, metric, "test"),
        "epochs": trainer.current_epoch,
        **timer.summary(),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        **peak_gpu(model),
        "num_params": model.num_params,
        "best_checkpoint": str(checkpoint.best_model_path) if checkpoint is not None else None,
        "data": datamodule.describe(),
        **describe_optimizers(getattr(trainer, "optimizers", None) or []),
        **(extra or {}),
    }
    # parts that describe themselves (the model, data, strategy, callbacks such as StepProfile) add keys
    for part in (model, datamodule, trainer.strategy, *getattr(trainer, "callbacks", ())):
        if callable(getattr(part, "report_info", None)):
            report.update(part.report_info())
    if not trainer.is_global_zero:
        return report
    atomic_write_text(run_dir / "report.json", json.dumps(report, indent=2) + "\n")
    if rows:
        plot_curves(rows, metric, run_dir / "curves.png")
    return report

"""What gnnkit's LightningModules share: the epoch metric over every rank's predictions, the epoch
mean loss, the parameter count, and the run length that ``format="auto"`` weighs its checks against.

:class:`~gnnkit.module.NodeClassifier`, :class:`~gnnkit.graph_classifier.GraphClassifier` and
:class:`~gnnkit.link_predictor.LinkPredictor` derive from :class:`TaskModule`; the two whose
matrices outlive a step (full graphs) also mix in :class:`RunLengthHooks`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor

from gnnkit import setting_checks
from gnnkit.metrics import evaluate
from gnnkit.sparse.decision import RunLength, set_run_length

STAGES = ("train", "val", "test")


def gather_rows(t: Tensor) -> Tensor:
    """Rows of ``t`` from every rank of the default process group, in rank order (``t`` itself
    outside distributed runs), so an epoch metric covers the whole split when each rank evaluated
    only its shard (Lightning's ``DistributedSampler``). Ranks may hold different row counts."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return t
    world = torch.distributed.get_world_size()
    if world == 1:
        return t
    count = torch.tensor([t.shape[0]], device=t.device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    torch.distributed.all_gather(counts, count)
    longest = int(max(c.item() for c in counts))
    padded = t.new_zeros((longest, *t.shape[1:]))
    padded[: t.shape[0]] = t
    parts = [torch.empty_like(padded) for _ in range(world)]
    torch.distributed.all_gather(parts, padded.contiguous())
    return torch.cat([part[: int(c.item())] for part, c in zip(parts, counts)])


def run_length(max_epochs: int | None, max_steps: int | None, full_batch: bool) -> RunLength | None:
    """The products per width a run's long-lived matrix serves: ``max_epochs`` x (one training step
    plus one evaluation) for a full graph, else ``max_steps``; ``None`` when unbounded or unknown
    (sampled blocks are single-use and never timed anyway). One layer's worth: a lower bound
    where several layers share a width, so ``auto`` errs towards not timing."""
    if max_epochs is not None and max_epochs > 0:
        return RunLength(max_epochs, 2 if full_batch else 1)
    if max_steps is not None and max_steps > 0:
        return RunLength(max_steps, 1)
    return None


class TaskModule(pl.LightningModule):
    """A LightningModule whose steps keep ``(targets, logits)`` per stage in ``self._outputs``; at
    each epoch's end they are gathered from every rank and scored by :meth:`epoch_metric`.

    Subclasses set ``self.evaluator`` (an OGB ``Evaluator`` wrapper with ``eval_metric``) and
    ``self._outputs = {stage: [] for stage in STAGES}``, or override :meth:`_epoch_metric`.
    """

    evaluator: Any
    _outputs: dict[str, list[tuple[Tensor, Tensor]]]
    #: The model's layer-width setting, ``model.<WIDTH>``.
    WIDTH = "hidden_channels"

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Check the model settings that need no data; the constructor checks them again, with the rest.

        ``gnnkit run`` calls this before the datamodule is built, since that reads (and on first use
        preprocesses) the dataset: a bad ``--model.dropout`` waited minutes for it. Subclasses add
        their own checks.

        Args:
            settings: Constructor arguments; those left out (the ones the datamodule gives) take the
                constructor's defaults.

        Returns:
            The settings with those defaults filled in.

        Raises:
            ValueError: One line naming the ``model.`` field and what was expected.
        """
        parameters = inspect.signature(cls.__init__).parameters.values()
        full = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
        full.update(settings)
        setting_checks.model_settings(full["lr"], full["weight_decay"], f"model.{cls.WIDTH}", full[cls.WIDTH])
        return full

    @property
    def num_params(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def epoch_metric(self, y: Tensor, logits: Tensor) -> float:
        """OGB's metric of a stage's gathered predictions."""
        return evaluate(self.evaluator, y, logits)

    def log_metric(self, stage: str, value: float) -> None:
        """Log ``<stage>_metric`` and ``<stage>_<OGB metric name>``. Every rank computed the same
        value from gathered rows; ``sync_dist`` says so to Lightning."""
        once = {"on_step": False, "on_epoch": True, "batch_size": 1, "sync_dist": True}  # also from a batch hook
        self.log(f"{stage}_metric", value, prog_bar=True, **once)
        self.log(f"{stage}_{self.evaluator.eval_metric.replace('@', '_')}", value, **once)

    def log_loss(self, stage: str, loss: Tensor, count: int, prog_bar: bool = True) -> None:
        """Add a step's mean ``loss`` over ``count`` examples to ``<stage>_loss``, logged at the
        epoch's end as ``self.log(name, loss, on_step=False, on_epoch=True, batch_size=count,
        sync_dist=True)`` per step would log it: the mean over every rank's examples.

        Two tensor operations a step and no host sync, where Lightning's ``log`` walks its result
        collection on every call (about half a millisecond of host time a step on a CPU core, time
        a GPU step spends waiting for its next kernel). In one process the training epoch's value is
        logged when its last batch ends (:meth:`on_train_batch_end`), so callbacks' end-of-epoch
        hooks, which Lightning runs before the module's (the progress bar's), see it as they would a
        per-step one; with several ranks those hooks see the previous epoch's.
        """
        losses = self._epoch_losses()
        weighted = loss.detach().float() * count  # float32, as Lightning keeps it: a 16-bit sum overflows
        if stage in losses:
            total, seen, _ = losses[stage]
            weighted, count = total + weighted, seen + count
        losses[stage] = (weighted, count, prog_bar)

    def _epoch_losses(self) -> dict[str, tuple[Tensor, int, bool]]:
        """Per stage, the epoch's ``(sum of loss x count, count, prog_bar)`` so far (made on first use:
        the subclasses' constructors do not call one here)."""
        return self.__dict__.setdefault("_loss_sums", {})

    def _log_epoch_loss(self, stage: str) -> None:
        """Log the epoch's ``<stage>_loss`` added up by :meth:`log_loss` (nothing if no step added to it)."""
        entry = self._epoch_losses().pop(stage, None)
        if entry is not None:
            total, count, prog_bar = entry
            self.log(f"{stage}_loss", total / max(count, 1), on_step=False, on_epoch=True, batch_size=count,
                     prog_bar=prog_bar, sync_dist=True)  # the mean over ranks (a no-op on one)

    def _epoch_start(self, stage: str) -> None:
        """Forget what a stage's steps kept in an epoch that did not finish (a fit that failed
        mid-epoch, then another fit of the same module)."""
        self._epoch_losses().pop(stage, None)
        outputs = getattr(self, "_outputs", None)
        if outputs is not None and stage in outputs:
            outputs[stage].clear()

    def _epoch_end(self, stage: str) -> None:
        self._log_epoch_loss(stage)
        self._epoch_metric(stage)

    def _epoch_metric(self, stage: str) -> None:
        outputs = self._outputs[stage]
        if not outputs:
            return
        y = gather_rows(torch.cat([o[0] for o in outputs]))
        logits = gather_rows(torch.cat([o[1] for o in outputs]))
        outputs.clear()
        self.log_metric(stage, self.epoch_metric(y, logits))

    def on_train_epoch_start(self) -> None:
        self._epoch_start("train")

    def on_validation_epoch_start(self) -> None:
        self._epoch_start("val")

    def on_test_epoch_start(self) -> None:
        self._epoch_start("test")

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After the epoch's last batch, log its training loss and metric, so what callbacks' epoch-end
        hooks show (the progress bar's) is this epoch's. In one process only: with several, a
        callback reading the metrics on rank 0 alone (the progress bar) would run Lightning's
        cross-rank reduction of them there alone, and the ranks would wait in different collectives
        (Lightning issue #21264); they are logged at the epoch's end instead, reduced on every rank."""
        if self.trainer.is_last_batch and self.trainer.world_size == 1:
            self._epoch_end("train")

    def on_train_epoch_end(self) -> None:
        self._epoch_end("train")  # several ranks, or an epoch cut short by max_steps (else: nothing left)

    def on_validation_epoch_end(self) -> None:
        self._epoch_end("val")

    def on_test_epoch_end(self) -> None:
        self._epoch_end("test")


class RunLengthHooks:
    """Mixin for a :class:`TaskModule` with ``hparams.full_batch``: during ``fit`` the format
    selector knows how many products the run's matrices serve (its checks' payback)."""

    def on_fit_start(self) -> None:
        self._previous_run = set_run_length(run_length(self.trainer.max_epochs, self.trainer.max_steps,  # type: ignore[attr-defined]
                                                       self.hparams.full_batch))  # type: ignore[attr-defined]

    def on_fit_end(self) -> None:
        set_run_length(getattr(self, "_previous_run", None))

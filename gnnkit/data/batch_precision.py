"""PyG batches in the precision the trainer holds the weights in (``--trainer.precision bf16-true``,
``16-true``, ``64-true``).

Lightning's "true" precision plugins convert a batch's floating-point tensors to the weights' dtype
before the transfer (``Precision.convert_input``), but only plain tensors and collections of them:
a PyG ``Data`` is neither, so its features stayed float32 against bfloat16 weights (``mat1 and mat2
must have the same dtype``). gnnkit's datamodules give their batches the same conversion, in the
datamodule's ``on_before_batch_transfer`` hook, which Lightning calls where it converts (the
LightningModule's own hook would make Lightning warn, in every run, that a datamodule was passed).
"""

from __future__ import annotations

import copy
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.plugins.precision import Precision
from lightning_utilities.core.apply_func import apply_to_collection
from torch_geometric.data.data import BaseData


def in_precision(batch: Any, trainer: pl.Trainer | None) -> Any:
    """``batch`` with the floating-point tensors of its PyG ``Data`` in ``trainer``'s input dtype, on
    copies (a full graph's loader hands out the same ``Data`` every epoch); ``batch`` itself for
    precisions that keep float32 inputs (``32-true``, the ``*-mixed`` ones) or without a trainer."""
    plugin = trainer.precision_plugin if trainer is not None else None
    if plugin is None or type(plugin).convert_input is Precision.convert_input:
        return batch
    return apply_to_collection(batch, BaseData, lambda data: copy.copy(data).apply(plugin.convert_input))


class PrecisionBatches(pl.LightningDataModule):
    """Base of gnnkit's datamodules: their PyG batches take the trainer's true precision
    (:func:`in_precision`) before Lightning moves them to the device."""

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return in_precision(batch, self.trainer)

"""A test-only fault: one rank dies or stalls at a chosen epoch, on the first attempt only.

``GNNKIT_TEST_FAULT=ACTION@EPOCH[:RANK]`` (``ACTION`` is ``exit``, ``stall`` or ``raise``) makes
global rank ``RANK`` (default 0) ``os._exit(17)``, sleep for ten minutes or raise
:class:`InjectedFault` at the first training batch of epoch
``EPOCH``, i.e. after ``checkpoints/last.ckpt`` covers epochs ``0 .. EPOCH-1`` (its background
write is waited for first, so the point is known). It fires only in a
run that starts afresh and only on torchrun's first attempt (``TORCHELASTIC_RESTART_COUNT`` 0), so
the resumed or restarted run gets through. The kill -9 and elastic-restart tests use it to stop a
run at a known point; unset (always, outside tests), nothing happens.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import lightning.pytorch as pl

from gnnkit.checkpoint_io import wait_for_checkpoints

#: Environment variable holding the fault.
FAULT_ENV = "GNNKIT_TEST_FAULT"
#: Exit status of a rank that the fault ends.
EXIT_CODE = 17
ACTIONS = ("exit", "stall", "raise")


class InjectedFault(RuntimeError):
    """The error the ``raise`` fault raises."""


@dataclass(frozen=True)
class Fault:
    """What to do, at which epoch, on which rank."""

    action: str
    epoch: int
    rank: int = 0


def parse_fault(text: str) -> Fault:
    """Parse ``ACTION@EPOCH[:RANK]``.

    Raises:
        ValueError: The text is not of that form.
    """
    action, _, rest = text.partition("@")
    epoch, _, rank = rest.partition(":")
    if action not in ACTIONS or not epoch.isdigit() or not (rank == "" or rank.isdigit()):
        raise ValueError(f"{FAULT_ENV}: expected ACTION@EPOCH[:RANK] with ACTION one of {', '.join(ACTIONS)}, got {text!r}")
    return Fault(action, int(epoch), int(rank or 0))


def fault_from_env() -> Fault | None:
    """The fault the environment asks for, on torchrun's first attempt; ``None`` otherwise."""
    text = os.environ.get(FAULT_ENV, "")
    if not text or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0) or 0) > 0:
        return None
    return parse_fault(text)


class FaultInjection(pl.Callback):
    """Carries out a :class:`Fault` at the first training batch of its epoch.

    Args:
        fault: The fault.
    """

    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object,
                             batch_idx: int) -> None:
        if trainer.current_epoch != self.fault.epoch or batch_idx != 0:
            return
        wait_for_checkpoints(trainer)  # rank 0's background write of the boundary's last.ckpt has landed
        trainer.strategy.barrier("fault_injection")  # before any rank acts
        if trainer.global_rank != self.fault.rank:
            return
        if self.fault.action == "exit":
            os._exit(EXIT_CODE)
        if self.fault.action == "raise":
            raise InjectedFault(f"{FAULT_ENV}: injected at epoch {self.fault.epoch} on rank {self.fault.rank}")
        time.sleep(600)

"""Per-rank state in a checkpoint: every rank's part gathered into one list, each rank picks its own.

Lightning builds the checkpoint dictionary on every rank and writes rank 0's, so state that differs
between ranks (random generators, samplers) is gathered first. Collective: every rank of the
default process group must call :func:`gather_ranks` at the same point (Lightning's
``dump_checkpoint`` runs on all ranks).
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
from lightning.pytorch.trainer.states import TrainerFn


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def gather_ranks(state: Any) -> list[Any]:
    """``[state of rank 0, state of rank 1, ...]`` (``[state]`` outside distributed runs)."""
    if not _distributed():
        return [state]
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return states


def my_rank_state(states: list[Any], what: str) -> Any | None:
    """This rank's entry of a gathered list, or ``None`` (with a reason logged) when the checkpoint
    was written by a different number of ranks.

    Args:
        states: What :func:`gather_ranks` returned when the checkpoint was written.
        what: Name of the state, for the log line.
    """
    from pipeline import log

    world = dist.get_world_size() if _distributed() else 1
    if len(states) != world:
        log.warning("resume: the checkpoint holds %s of %d rank(s), this run has %d; it starts afresh",
                    what, len(states), world)
        return None
    return states[dist.get_rank() if _distributed() else 0]


def fitting(trainer: Any) -> bool:
    """Whether a checkpoint restored now continues a fit (or there is no trainer yet), rather than
    giving its weights to a test or validation: only a fit takes the generators and communication
    state it saved."""
    return trainer is None or trainer.state.fn == TrainerFn.FITTING

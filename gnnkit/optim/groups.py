"""A parameter group's hyper-parameters checked when the group is added to an optimizer."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch


@contextlib.contextmanager
def dropped_on_error(optimizer: torch.optim.Optimizer) -> Iterator[dict]:
    """The group ``optimizer.add_param_group`` just added, removed again when a check of it raises.

    torch fills a group's missing hyper-parameters from the defaults when it adds the group, so the
    checks run after; a refused group must not stay behind in ``param_groups`` (a user who catches
    the error would otherwise step with it).
    """
    try:
        yield optimizer.param_groups[-1]
    except Exception:
        optimizer.param_groups.pop()
        raise

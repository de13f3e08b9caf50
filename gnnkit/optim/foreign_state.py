"""Refusing a saved optimizer state that another optimizer wrote.

``torch.optim.Optimizer.load_state_dict`` checks only the number of groups and of parameters, so
an SGD checkpoint loads into Adam (``--ckpt_path`` of a run trained with another ``--optimizer``)
and the first step fails with ``KeyError: 'betas'``: the loaded groups replaced Adam's settings
with SGD's. Saved groups that both set something the optimizer's groups do not have and lack
something they have are that case. Either alone is not: a scheduler adds its own keys to the groups
(``initial_lr``, OneCycleLR's ``max_lr``), and an older torch's groups lack a setting added since
(torch fills it in).
"""

from __future__ import annotations

from typing import Any

import torch


class ForeignOptimizerState(ValueError):
    """A saved optimizer state that is another optimizer's (one line naming the settings)."""


def refuse_foreign_state(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Make ``optimizer.load_state_dict`` raise :class:`ForeignOptimizerState`, before changing
    anything, for a state whose parameter groups hold settings ``optimizer``'s groups do not and
    lack some they hold. Returns ``optimizer``."""
    optimizer.register_load_state_dict_pre_hook(_check_groups)
    return optimizer


def _check_groups(optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> None:
    known = {key for group in optimizer.param_groups for key in group} - {"params"}
    saved = {key for group in state_dict.get("param_groups", []) for key in group} - {"params"}
    foreign = sorted(saved - known)
    if foreign and known - saved:
        name = type(optimizer).__name__
        raise ForeignOptimizerState(
            f"the checkpoint's optimizer state is another optimizer's: its parameter groups set "
            f"{', '.join(foreign)}, which {name} does not take; continue with the optimizer that "
            f"wrote it (--optimizer), or start a new run")

"""gnnkit/optim/foreign_state.py: another optimizer's saved state is refused before it loads."""

from __future__ import annotations

import pytest
import torch

from gnnkit.optim import module_optimizer
from gnnkit.optim.foreign_state import ForeignOptimizerState


def _adam() -> torch.optim.Optimizer:
    layer = torch.nn.Linear(4, 2)
    return module_optimizer(layer, [{"params": list(layer.parameters())}], None, lr=0.01)


def test_another_optimizers_state_is_refused_and_changes_nothing():
    """SGD's state loaded into Adam, whose first step then failed with KeyError: 'betas'."""
    adam = _adam()
    sgd = torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1, momentum=0.9)
    before = [dict(g) for g in adam.param_groups]
    with pytest.raises(ForeignOptimizerState, match="set dampening, momentum, nesterov, which Adam does not take"):
        adam.load_state_dict(sgd.state_dict())
    assert [dict(g) for g in adam.param_groups] == before


def test_its_own_state_loads_with_a_schedulers_keys_and_so_does_an_older_torchs_with_a_setting_fewer():
    adam, saved = _adam(), _adam()
    for p in saved.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    saved.step()
    state = saved.state_dict()
    adam.load_state_dict(state)
    del state["param_groups"][0]["maximize"]  # a setting a later torch added: torch fills it in
    adam.load_state_dict(state)
    torch.optim.lr_scheduler.StepLR(saved, step_size=3)  # adds initial_lr to the groups
    adam.load_state_dict(saved.state_dict())  # a cosine-schedule run's checkpoint into a constant-lr run
    assert adam.state_dict()["state"].keys() == saved.state_dict()["state"].keys()

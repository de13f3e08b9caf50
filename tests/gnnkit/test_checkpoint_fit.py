import torch
from torch import nn

from gnnkit.checkpoint_fit import _settings_differ, _weights_problem


def test_the_first_difference_is_named_with_how_many_more():
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    assert _weights_problem(model.state_dict(), model) is None
    saved = {**model.state_dict(), "0.weight": torch.zeros(3, 5)}
    assert _weights_problem(saved, model) == "0.weight is [3, 5] in the checkpoint, [3, 4] in the model"
    saved = {k: v for k, v in model.state_dict().items() if k != "1.bias"} | {"2.weight": torch.zeros(1)}
    assert _weights_problem(saved, model) == ("the model's 1.bias is missing from the checkpoint, and 1 more "
                                              "difference(s)")


def test_a_buffer_registered_as_none_is_not_unexpected():
    model = nn.Linear(2, 2)
    model.register_buffer("order", None)  # set in setup(), as a TT table's node order
    assert _weights_problem({**model.state_dict(), "order": torch.arange(2)}, model) is None


def test_the_settings_that_differ_are_named_as_a_recipe_writes_them():
    class Module:
        hparams = {"model": "gcn", "in_channels": 8, "dropout": 0.5, "optimizer": "sgd", "layers": [2, 3]}

    checkpoint = {"hyper_parameters": {"model": "sage", "in_channels": 32, "dropout": 0.5, "optimizer": "adam",
                                       "layers": (2, 3)}}
    differ = _settings_differ(checkpoint, Module(), None)
    assert differ == "model.model sage (here gcn), the data's in_channels 32 (here 8)"

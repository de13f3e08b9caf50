"""Optimizer and lr scheduler specs, built over NodeClassifier's parameter groups."""

from types import SimpleNamespace

import pytest
import torch

from gnnkit.module import NodeClassifier
from gnnkit.optim import GaLoreAdamW, build_optimizer, build_scheduler, describe_optimizers


def _model(**kwargs):
    return NodeClassifier(in_channels=4, out_channels=3, model="gcn", hidden_channels=8, num_layers=2, **kwargs)


def test_specs_resolve_bare_and_dotted_names():
    params = [torch.nn.Parameter(torch.zeros(3, 2))]
    assert type(build_optimizer({"class_path": "SGD", "init_args": {"lr": 0.1}}, [{"params": params}])) is torch.optim.SGD
    galore = build_optimizer({"class_path": "gnnkit.optim.GaLoreAdamW", "init_args": {"rank": 1}}, [{"params": params}])
    assert isinstance(galore, GaLoreAdamW) and galore.param_groups[0]["rank"] == 1
    step = build_scheduler({"class_path": "StepLR", "init_args": {"step_size": 2}}, galore)
    assert isinstance(step["scheduler"], torch.optim.lr_scheduler.StepLR) and step["interval"] == "epoch"
    plateau = build_scheduler({"class_path": "torch.optim.lr_scheduler.ReduceLROnPlateau",
                               "init_args": {"mode": "max"}}, galore)
    assert plateau["monitor"] == "val_metric"


@pytest.mark.parametrize(("spec", "message"), [
    ({"class_path": "Adamm"}, "optimizer: unknown class 'Adamm'"),
    ({"class_path": "torch.optim.Adamm"}, "optimizer: cannot import 'torch.optim.Adamm'"),
    ({"class_path": "torch.nn.Linear"}, "optimizer: torch.nn.Linear is not a torch.optim.Optimizer"),
    ({"init_args": {}}, "optimizer: expected {class_path"),
    ({"class_path": "SGD", "init": {}}, "optimizer: unexpected keys \\['init'\\]"),
])
def test_bad_specs_name_the_section(spec, message):
    with pytest.raises(ValueError, match=message):
        build_optimizer(spec, [{"params": [torch.nn.Parameter(torch.zeros(1))]}])


def _trajectory(model, steps=3):
    optimizer = model.configure_optimizers()
    torch.manual_seed(0)
    for _ in range(steps):
        optimizer.zero_grad()
        sum((p * torch.randn_like(p)).sum() for p in model.parameters()).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()], optimizer


def test_default_is_adam_and_an_equal_adam_spec_gives_the_same_steps():
    torch.manual_seed(1)
    default = _model(lr=0.02, weight_decay=1e-3)
    torch.manual_seed(1)
    spec = _model(optimizer={"class_path": "torch.optim.Adam", "init_args": {"lr": 0.02, "weight_decay": 1e-3}})
    (a, adam), (b, _) = _trajectory(default), _trajectory(spec)
    assert type(adam) is torch.optim.Adam and adam.param_groups[0]["lr"] == 0.02
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_a_spec_keeps_the_first_layer_weight_decay_scope():
    model = _model(weight_decay_scope="first_layer",
                   optimizer={"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1, "weight_decay": 0.5}})
    optimizer = model.configure_optimizers()
    assert type(optimizer) is torch.optim.SGD
    first, rest = optimizer.param_groups
    assert first["weight_decay"] == 0.5 and rest["weight_decay"] == 0.0
    assert {id(p) for p in first["params"]} == {id(p) for p in model.gnn.layers[0].parameters()}


def test_a_scheduler_spec_replaces_lr_schedule_and_both_are_refused():
    model = _model(lr_scheduler={"class_path": "torch.optim.lr_scheduler.StepLR", "init_args": {"step_size": 3}})
    configured = model.configure_optimizers()
    assert isinstance(configured["lr_scheduler"]["scheduler"], torch.optim.lr_scheduler.StepLR)
    with pytest.raises(ValueError, match="model.lr_schedule: 'cosine' and an lr_scheduler: section"):
        _model(lr_schedule="cosine", lr_scheduler={"class_path": "StepLR", "init_args": {"step_size": 3}})


def test_describe_optimizers_counts_state_and_parameter_bytes():
    _, adam = _trajectory(_model())
    params = sum(p.numel() for g in adam.param_groups for p in g["params"])
    info = describe_optimizers([adam])["optimizer"]
    assert info["class"] == "torch.optim.adam.Adam"
    assert info["param_bytes"] == 4 * params
    assert info["state_bytes"] == 4 * 2 * params + 4 * len(adam.state)  # two moments + a step scalar each
    assert info["weight_bytes"] == info["weight_bytes_fp32"] == 4 * params  # FP32 parameters, stored as such
    assert describe_optimizers([])["optimizer"] == {"class": None, "state_bytes": 0, "param_bytes": 0,
                                                    "weight_bytes": 0, "weight_bytes_fp32": 0}


class _Param:
    """A stand-in for a parameter's device and dtype (a CUDA tensor needs a GPU)."""

    def __init__(self, cuda: bool, floating: bool = True) -> None:
        self.is_cuda, self._floating = cuda, floating

    def is_floating_point(self) -> bool:
        return self._floating


@pytest.mark.parametrize("params, trainer, expected", [
    ([_Param(True), _Param(True)], None, True),
    ([_Param(True), _Param(False)], None, False),  # one parameter on the CPU
    ([_Param(True, floating=False)], None, False),
    ([], None, False),
    ([_Param(True)], SimpleNamespace(precision="32-true", gradient_clip_val=None), True),
    ([_Param(True)], SimpleNamespace(precision="16-mixed", gradient_clip_val=None), False),  # a gradient scaler
    ([_Param(True)], SimpleNamespace(precision="32-true", gradient_clip_val=1.0), False),
])
def test_adam_is_fused_only_where_every_parameter_and_the_trainer_allow(params, trainer, expected):
    from gnnkit.optim.build import fusable

    module = SimpleNamespace(_trainer=trainer)
    assert fusable(module, [{"params": params}]) is expected


def test_a_cpu_module_keeps_adams_default_implementation():
    from gnnkit.optim.build import module_optimizer

    module = torch.nn.Linear(3, 2)
    optimizer = module_optimizer(module, [{"params": list(module.parameters())}], None, lr=0.1)
    assert optimizer.defaults["fused"] is None


@pytest.mark.gpu
def test_a_cuda_module_gets_the_fused_adam():
    from gnnkit.optim.build import module_optimizer

    module = torch.nn.Linear(3, 2).cuda()
    optimizer = module_optimizer(module, [{"params": list(module.parameters())}], None, lr=0.1)
    assert optimizer.defaults["fused"] is True
    module(torch.ones(4, 3, device="cuda")).sum().backward()
    optimizer.step()

"""K-FAC: factors, the preconditioned step against a dense Fisher inverse, state, options, D-KFAC."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from gnnkit.optim import KFAC
from gnnkit.optim.kfac import input_factor
from gnnkit.optim.kfac_comm import owner_ranks

ROOT = Path(__file__).parents[3]
HERE = Path(__file__).parent


def _tiny(seed=0, bias=True):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4, bias=bias), nn.Tanh(), nn.Linear(4, 2, bias=bias))


def _loss(model, x, y):
    return nn.functional.cross_entropy(model(x), y)


def _data(seed=1, n=8):
    torch.manual_seed(seed)
    return torch.randn(n, 3), torch.randint(0, 2, (n,))


@pytest.mark.parametrize("bias", [True, False])
def test_factors_are_the_per_example_outer_product_averages(bias):
    model, (x, y) = _tiny(bias=bias), _data()
    opt = KFAC(model.parameters(), damping=0.1, factor_decay=0.0).bind(model)
    # Explicit per-example gradients of the first layer's output under the mean loss.
    h = model[0](x).detach().requires_grad_(True)
    loss = nn.functional.cross_entropy(model[2](model[1](h)), y)
    (grad_h,) = torch.autograd.grad(loss, h)
    n = x.shape[0]
    a_rows = [torch.cat([xi, torch.ones(1)]) if bias else xi for xi in x]
    want_a = sum(torch.outer(a, a) for a in a_rows) / n
    want_g = sum(torch.outer(n * g, n * g) for g in grad_h) / n
    _loss(model, x, y).backward()
    opt.step()
    state = opt.state[model[0].weight]
    torch.testing.assert_close(state["A"], want_a)
    torch.testing.assert_close(state["G"], want_g)
    assert opt.layers == ["0", "2"]


def test_running_average_and_update_intervals():
    model = _tiny()
    opt = KFAC(model.parameters(), factor_decay=0.25, factor_update_interval=2, inv_update_interval=4).bind(model)
    inputs = [_data(seed=s)[0] for s in range(3)]
    y = _data()[1]
    for step, x in enumerate(inputs):
        opt.zero_grad()
        _loss(model, x, y).backward()
        assert (opt._layers[0].new_a is not None) == (step % 2 == 0)  # steps 0 and 2 record
        opt.step()
    want = 0.25 * input_factor(inputs[0], True) + 0.75 * input_factor(inputs[2], True)
    torch.testing.assert_close(opt.state[model[0].weight]["A"], want)
    assert opt.state["kfac"]["step"] == 3


def test_validation_forwards_do_not_record():
    model, (x, y) = _tiny(), _data()
    opt = KFAC(model.parameters()).bind(model)
    model.eval()
    _loss(model, x, y).backward()
    with torch.no_grad():
        model.train()
        model(x)
    assert all(layer.new_a is None and layer.new_g is None for layer in opt._layers)


@pytest.mark.parametrize("inverse", ["eigen", "cholesky"])
def test_preconditioned_step_equals_dense_damped_fisher_inverse(inverse):
    model, (x, y) = _tiny(), _data()
    damping = 0.05
    opt = KFAC(model.parameters(), lr=1.0, damping=damping, inverse=inverse, base="sgd", momentum=0.0,
               factor_decay=0.0).bind(model)
    before = copy.deepcopy(model)
    _loss(model, x, y).backward()
    layer = model[2]
    grad = torch.cat([layer.weight.grad, layer.bias.grad[:, None]], dim=1).clone()
    opt.step()
    state = opt.state[layer.weight]
    a, g = state["A"].double(), state["G"].double()
    if inverse == "eigen":  # (G (x) A + lambda I)^-1 on the row-major vec (= kron(A, G) column-major)
        fisher = torch.kron(g, a) + damping * torch.eye(a.shape[0] * g.shape[0], dtype=torch.double)
    else:  # damping split over the factors
        root = damping ** 0.5
        fisher = torch.kron(g + root * torch.eye(g.shape[0], dtype=torch.double),
                            a + root * torch.eye(a.shape[0], dtype=torch.double))
    step = torch.linalg.solve(fisher, grad.double().flatten()).reshape(grad.shape).float()
    torch.testing.assert_close(before[2].weight - layer.weight, step[:, :-1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(before[2].bias - layer.bias, step[:, -1], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(step, grad)  # the preconditioner did something


@pytest.mark.parametrize("bias", [True, False])
def test_kl_clip_scales_the_sgd_step_into_its_trust_region(bias):
    """nu = min(1, sqrt(kl_clip / (lr^2 sum(P * V)))), over the preconditioned layers together (without
    a bias, V was read after P overwrote it: sum(P * P), a scale 4.7x too small)."""
    steps = {}
    for clip in (None, 1e-6, 1e6):
        model, (x, y) = _tiny(bias=bias), _data()
        opt = KFAC(model.parameters(), lr=0.5, base="sgd", momentum=0.0, factor_decay=0.0, kl_clip=clip).bind(model)
        before = [p.detach().clone() for p in model.parameters()]
        _loss(model, x, y).backward()
        plain = [p.grad.clone() for p in model.parameters()]
        opt.step()
        steps[clip] = [b - p.detach() for b, p in zip(before, model.parameters())]
    free, tight, loose = steps[None], steps[1e-6], steps[1e6]
    for a, b in zip(free, loose):  # nu = 1
        torch.testing.assert_close(a, b)
    quadratic = sum((s / 0.5 * g).sum() for s, g in zip(free, plain)) * 0.5**2
    nu = (1e-6 / quadratic).sqrt()
    assert nu < 1
    for a, b in zip(free, tight):
        torch.testing.assert_close(b, a * nu, rtol=1e-4, atol=1e-7)


def test_kl_clip_with_the_adam_base_is_said_to_be_unused():
    with pytest.warns(UserWarning, match="KFAC.kl_clip bounds base='sgd' steps; base='adam' normalises its own"):
        KFAC(_tiny().parameters(), kl_clip=0.001)


@pytest.mark.parametrize("inverse", ["eigen", "cholesky"])
def test_factors_of_a_diverged_training_are_one_line(inverse):
    """NaN in the factors came out of eigh as a 30-line LinAlgError about an ill-conditioned input."""
    model, (x, y) = _tiny(), _data()
    opt = KFAC(model.parameters(), lr=0.1, base="sgd", inverse=inverse).bind(model)
    x[0, 0] = float("nan")  # as a blown-up activation
    _loss(model, x, y).backward()
    with pytest.raises(FloatingPointError, match=r"^KFAC: the Kronecker factors of layer '\d' hold NaN or inf: the "
                                                 r"training diverged; a smaller lr \(or kl_clip with base='sgd'\)"):
        opt.step()


def test_adam_base_on_an_identity_preconditioner_is_torch_adam():
    """Parameters outside the hooked layers (here an embedding table) take torch's Adam step."""
    torch.manual_seed(0)
    table = nn.Embedding(5, 3)
    model = nn.Sequential(nn.Linear(3, 2))
    ref_table = copy.deepcopy(table)
    opt = KFAC(list(table.parameters()) + list(model.parameters()), lr=0.1, weight_decay=0.01).bind(model)
    ref = torch.optim.Adam(ref_table.parameters(), lr=0.1, weight_decay=0.01)
    idx = torch.tensor([0, 2, 4])
    for _ in range(3):
        for t, o in ((table, opt), (ref_table, ref)):
            o.zero_grad()
            (t(idx) ** 2).sum().backward()
            o.step()
    torch.testing.assert_close(table.weight, ref_table.weight)


def _train(model, opt, x, y, steps):
    for _ in range(steps):
        opt.zero_grad()
        _loss(model, x, y).backward()
        opt.step()


def test_state_dict_round_trip_resumes_identically():
    model, (x, y) = _tiny(), _data()
    options = {"lr": 0.05, "factor_decay": 0.9, "inv_update_interval": 2}
    opt = KFAC(model.parameters(), **options).bind(model)
    _train(model, opt, x, y, 3)
    saved_model, saved = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    assert saved["state"]["kfac"]["step"] == 3 and "A" in saved["state"][0] and "QG" in saved["state"][2]
    resumed = _tiny(seed=5)
    resumed.load_state_dict(saved_model)
    opt2 = KFAC(resumed.parameters(), **options).bind(resumed)
    opt2.load_state_dict(saved)
    _train(model, opt, x, y, 2)
    _train(resumed, opt2, x, y, 2)
    for p, q in zip(model.parameters(), resumed.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


@pytest.mark.parametrize("kwargs, field", [
    ({"damping": 0.0}, "KFAC.damping"), ({"factor_decay": 1.0}, "KFAC.factor_decay"),
    ({"factor_update_interval": 0}, "KFAC.factor_update_interval"),
    ({"inv_update_interval": 1.5}, "KFAC.inv_update_interval"), ({"inverse": "svd"}, "KFAC.inverse"),
    ({"base": "rmsprop"}, "KFAC.base"), ({"lr": -1.0}, "KFAC.lr"), ({"momentum": 1.0}, "KFAC.momentum"),
    ({"betas": (0.9, 1.0)}, "KFAC.betas"), ({"damping": "0.1"}, "KFAC.damping"), ({"factor_decay": None}, "KFAC.factor_decay"),
    ({"eps": float("nan")}, "KFAC.eps"), ({"kfac_pipeline": "no"}, "KFAC.kfac_pipeline"),
    ({"kl_clip": 0.0}, "KFAC.kl_clip"), ({"kl_clip": "0.001"}, "KFAC.kl_clip"),
])
def test_bad_options_raise_one_line_value_errors(kwargs, field):
    with pytest.raises(ValueError, match=field) as error:
        KFAC(_tiny().parameters(), **kwargs)
    assert "\n" not in str(error.value)


def test_a_groups_own_settings_are_checked():
    """A group's own negative weight_decay was taken (only the defaults were checked)."""
    with pytest.raises(ValueError, match="KFAC.weight_decay: expected a finite number >= 0, got -0.5"):
        KFAC([{"params": _tiny().parameters(), "weight_decay": -0.5}])
    with pytest.raises(ValueError, match="KFAC.momentum: expected a number in \\[0, 1\\), got 1.5"):
        KFAC([{"params": _tiny().parameters(), "momentum": 1.5}], base="sgd")


def test_bind_needs_a_linear_layer():
    with pytest.raises(ValueError, match="KFAC.bind"):
        KFAC(nn.Embedding(3, 2).parameters()).bind(nn.Embedding(3, 2))
    with pytest.raises(TypeError, match=r"KFAC.bind: expected the model \(a torch.nn.Module\), got NoneType"):
        KFAC(_tiny().parameters()).bind(None)


def test_owner_ranks_balance_cubic_costs():
    assert owner_ranks([8, 1, 27, 64], 2) == [1, 1, 1, 0]
    assert owner_ranks([5, 5, 5], 3) == [0, 1, 2]
    assert owner_ranks([1.0], 1) == [0]


def test_pyg_convs_are_hooked_on_their_linear_maps(monkeypatch):
    from gnnkit.models.node_gnn import NodeGNN

    monkeypatch.setenv("GNNKIT_NATIVE", "0")  # no kernel build for a 6-node graph

    for name, want in (("gcn", ["layers.0.lin", "layers.1.lin"]),
                       ("sage", ["layers.0.lin_l", "layers.0.lin_r", "layers.1.lin_l", "layers.1.lin_r"]),
                       ("gin", ["layers.0.nn.0", "layers.0.nn.2", "layers.1.nn.0", "layers.1.nn.2"])):
        model = NodeGNN(model=name, in_channels=4, hidden_channels=5, out_channels=3, num_layers=2)
        opt = KFAC(model.parameters()).bind(model)
        assert opt.layers == want, name
        x, edges = torch.randn(6, 4), torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
        nn.functional.cross_entropy(model(x, edges), torch.randint(0, 3, (6,))).backward()
        before = [p.clone() for p in model.parameters()]
        opt.step()
        assert all("A" in opt.state[layer.weight] for layer in opt._layers), name
        assert all(torch.isfinite(p).all() for p in model.parameters())
        assert any(not torch.equal(p, q) for p, q in zip(before, model.parameters()))


@pytest.mark.slow
def test_recipe_trains_through_the_node_classifier_on_two_ranks(tmp_path):
    """Two gloo ranks under GnnkitStrategy with pipelined factors (SPD-KFAC): bind() is collective
    there, and every rank's factor all-reduces must pair up with the other's."""
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "gnnkit.cli", "run", ROOT / "recipes" / "opt_kfac_citation.yaml",
                          "--trainer.max_epochs", "3", "--optimizer.inv_update_interval", "2",
                          "--optimizer.kfac_pipeline", "true", "--trainer.devices", "2",
                          "--trainer.strategy.class_path", "gnnkit.comm.GnnkitStrategy",
                          "--run_dir", run_dir], capture_output=True, text=True, cwd=tmp_path, timeout=600,
                         env={**os.environ, "GNNKIT_NATIVE": "0",
                              "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sync_dist" not in out.stderr  # epoch-level logs are synced across ranks
    report = json.loads((run_dir / "report.json").read_text())
    assert report["optimizer"]["class"] == "gnnkit.optim.kfac.KFAC" and report["comm"]["world_size"] == 2
    assert report["optimizer"]["state_bytes"] > 2 * report["optimizer"]["param_bytes"]  # factors + moments
    ckpts = sorted(run_dir.rglob("*.ckpt"))
    assert ckpts, "no checkpoint written"
    state = torch.load(ckpts[-1], weights_only=True)["optimizer_states"][0]["state"]
    assert state["kfac"]["step"] == 3 and any("A" in s and "QA" in s for s in state.values())


@pytest.mark.parametrize("pipeline", [False, True])
def test_dkfac_on_two_gloo_ranks_equals_one_rank(tmp_path, pipeline):
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(HERE / "kfac_worker.py"), str(out), str(int(pipeline))],
                          capture_output=True, text=True, timeout=180, cwd=str(ROOT),
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    # Inversion costs d_A^3 + d_G^3 = 855, 854, 243: rank 1 inverts (and broadcasts) two layers.
    assert result["owners"] == [0, 1, 1]
    # Pipelined, each layer's A and G all-reduces are already in flight when backward returns.
    assert result["0"]["in_flight_after_backward"] == ([6, 6, 6, 6] if pipeline else [0, 0, 0, 0])
    # Pipelined, a step without inversion (the last, step 3) leaves its reductions in flight;
    # state_dict() folds them in, so the factors below still equal the single rank's.
    assert result["0"]["deferred_at_end"] is pipeline
    for rank in ("0", "1"):
        assert result[rank]["factors_max_diff"] < 1e-5, result
        assert result[rank]["weights_max_diff"] < 1e-5, result


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true", "16-mixed"])
@pytest.mark.parametrize("inverse", ["eigen", "cholesky"])
def test_16_bit_training_keeps_float32_factors(precision, inverse):
    """bf16 activations reached eigh ('linalg_eigh_cpu' not implemented for 'BFloat16') and the
    factor matmuls ran in bf16 under autocast."""
    model, (x, y) = _tiny(), _data()
    if precision == "bf16-true":
        model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
    opt = KFAC(model.parameters(), inverse=inverse, inv_update_interval=1).bind(model)
    before = [p.detach().clone() for p in model.parameters()]
    for _ in range(3):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16 if precision == "16-mixed" else torch.bfloat16,
                            enabled=precision.endswith("mixed")):
            loss = _loss(model, x, y)
        loss.float().backward()
        opt.step()
    state = opt.state[model[0].weight]
    assert state["A"].dtype == state["G"].dtype == torch.float32
    assert all(torch.isfinite(p).all() and not torch.equal(p, b) for p, b in zip(model.parameters(), before))


def test_an_unbound_optimizer_says_it_steps_as_its_base():
    """Unbound, K-FAC preconditions nothing: its steps equal Adam's, which went unnoticed."""
    model, (x, y) = _tiny(), _data()
    opt = KFAC(model.parameters())
    _loss(model, x, y).backward()
    with pytest.warns(UserWarning, match=r"KFAC: no layer is bound, so this steps as plain adam; call KFAC"):
        opt.step()

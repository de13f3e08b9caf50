"""GaLoreAdamW against torch's AdamW and against Adam run by hand in the projected coordinates."""

import copy

import pytest
import torch

from gnnkit.optim import GaLoreAdamW, optimizer_state_bytes
from gnnkit.optim.galore import projection_side, svd_projector


def _params(seed=0):
    """A tall, a wide and a 1-D parameter (right- and left-projected, and plain)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g)) for shape in ((12, 6), (5, 9), (7,))]


def _grads(params, step):
    """Deterministic, step-dependent gradients (a fixed random quadratic's plus a rotating term)."""
    g = torch.Generator().manual_seed(1000 + step)
    for p in params:
        p.grad = (0.5 * p.detach() + torch.randn(p.shape, generator=g)).clone()


def _run(optimizer, params, steps, start=0):
    for step in range(start, start + steps):
        _grads(params, step)
        optimizer.step()


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_full_rank_is_adamw(weight_decay):
    """rank >= min(m, n) keeps every direction: GaLore is exactly AdamW (and Adam without decay)."""
    ours, ref = _params(), _params()
    _run(GaLoreAdamW(ours, lr=0.05, weight_decay=weight_decay, rank=6, update_proj_gap=2), ours, 6)
    _run(torch.optim.AdamW(ref, lr=0.05, weight_decay=weight_decay), ref, 6)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    if weight_decay == 0.0:
        adam = _params()
        _run(torch.optim.Adam(adam, lr=0.05), adam, 6)
        for a, b in zip(ours, adam):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def _projected_reference(weight, rank, steps, lr, scale):
    """GaLore by hand with one projector (T larger than the run): Adam on the coordinates
    ``Z`` whose gradient is ``G @ P.T``, each of its moves ``dZ`` applied to the weight as
    ``scale * dZ @ P``."""
    weight = weight.detach().clone()
    z = torch.nn.Parameter(torch.zeros(weight.shape[0], rank))
    adam = torch.optim.Adam([z], lr=lr)
    projector = None
    for step in range(steps):
        holder = [torch.nn.Parameter(weight.clone())]
        _grads(holder, step)
        grad = holder[0].grad
        if projector is None:
            projector = torch.linalg.svd(grad, full_matrices=False)[2][:rank]
        z.grad = grad @ projector.T
        before = z.detach().clone()
        adam.step()
        weight += scale * (z.detach() - before) @ projector
    return weight


def test_low_rank_step_is_adam_in_the_projected_coordinates():
    weight = _params()[0]  # [12, 6]: right projection
    ours = [torch.nn.Parameter(weight.detach().clone())]
    _run(GaLoreAdamW(ours, lr=0.05, weight_decay=0.0, rank=2, update_proj_gap=100, scale=0.5), ours, 5)
    expected = _projected_reference(weight, rank=2, steps=5, lr=0.05, scale=0.5)
    torch.testing.assert_close(ours[0].detach(), expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(ours[0], weight)


def test_low_rank_state_has_the_projected_size():
    params = _params()
    optimizer = GaLoreAdamW(params, rank=2)
    _run(optimizer, params, 1)
    tall, wide, vector = (optimizer.state[p] for p in params)
    assert tall["exp_avg"].shape == tall["exp_avg_sq"].shape == (12, 2) and tall["projector"].shape == (2, 6)
    assert wide["exp_avg"].shape == (2, 9) and wide["projector"].shape == (5, 2)
    assert vector["exp_avg"].shape == (7,) and "projector" not in vector
    floats = 4
    expected = floats * (2 * 12 * 2 + 2 * 6 + 2 * 2 * 9 + 5 * 2 + 2 * 7)  # moments + projectors
    assert optimizer_state_bytes(optimizer) == expected  # `step` is a Python int: no tensor bytes
    adam = torch.optim.Adam(_params())
    for p in adam.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    adam.step()
    assert optimizer_state_bytes(adam) == floats * 2 * (72 + 45 + 7) + 3 * floats  # + step tensors


def test_projection_side_follows_the_reference():
    assert projection_side(torch.Size([100, 8]), 4) == "right"
    assert projection_side(torch.Size([8, 100]), 4) == "left"
    assert projection_side(torch.Size([8, 8]), 4) == "right"
    assert projection_side(torch.Size([8, 100]), 8) is None  # full rank
    assert projection_side(torch.Size([100]), 4) is None
    assert projection_side(torch.Size([100, 8]), 0) is None
    grad = torch.randn(20, 6)
    right, left = svd_projector(grad, 3, "right"), svd_projector(grad.T, 3, "left")
    torch.testing.assert_close(right @ right.T, torch.eye(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(left.T @ left, torch.eye(3), atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", [(200, 16), (16, 200), (30, 30)])
def test_projector_spans_the_top_singular_subspace(shape):
    grad = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    u, _, vh = torch.linalg.svd(grad.double(), full_matrices=False)
    right, left = svd_projector(grad, 5, "right").double(), svd_projector(grad, 5, "left").double()
    torch.testing.assert_close(right.T @ right, vh[:5].T @ vh[:5], atol=1e-5, rtol=0)  # same subspace,
    torch.testing.assert_close(left @ left.T, u[:, :5] @ u[:, :5].T, atol=1e-5, rtol=0)  # any signs


def test_projector_refreshes_every_update_proj_gap_steps():
    params = _params()[:1]
    optimizer = GaLoreAdamW(params, rank=2, update_proj_gap=3)
    projectors, grads = [], []
    for step in range(8):
        _grads(params, step)
        grads.append(params[0].grad.clone())
        optimizer.step()
        projectors.append(optimizer.state[params[0]]["projector"].clone())
    changed = [step for step in range(1, 8) if not torch.equal(projectors[step], projectors[step - 1])]
    assert changed == [3, 6]
    torch.testing.assert_close(projectors[6], svd_projector(grads[6], 2, "right"))  # that step's gradient
    assert not torch.allclose(projectors[6], svd_projector(grads[5], 2, "right"), atol=1e-3)


def test_state_dict_round_trip_resumes_identically():
    params = _params()
    optimizer = GaLoreAdamW(params, lr=0.02, rank=2, update_proj_gap=3)
    _run(optimizer, params, 4)
    saved_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    saved = copy.deepcopy(optimizer.state_dict())
    _run(optimizer, params, 5, start=4)  # crosses a refresh (step 6)

    resumed = GaLoreAdamW(saved_params, lr=0.02, rank=2, update_proj_gap=3)
    resumed.load_state_dict(saved)
    _run(resumed, saved_params, 5, start=4)
    for a, b in zip(params, saved_params):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="GaLoreAdamW.update_proj_gap"):
        GaLoreAdamW(_params(), update_proj_gap=0)
    with pytest.raises(ValueError, match="GaLoreAdamW.rank"):
        GaLoreAdamW(_params(), rank=-1)


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: GaLoreAdamW(p, lr=float("nan")), "GaLoreAdamW.lr: expected a finite number >= 0, got nan"),
    (lambda p: GaLoreAdamW(p, scale=-1.0), "GaLoreAdamW.scale: expected a finite number > 0"),  # gradient ascent
    (lambda p: GaLoreAdamW([{"params": p, "lr": -1.0}], rank=2), "GaLoreAdamW.lr: .* got -1.0"),  # a group's own
    (lambda p: GaLoreAdamW([{"params": p, "rank": -1}]), r"GaLoreAdamW.rank: expected an integer >= 0"),
    (lambda p: GaLoreAdamW(p, betas=(0.9,)), r"GaLoreAdamW.betas: expected two numbers in \[0, 1\)"),
], ids=["nan lr", "negative scale", "group lr", "group rank", "one beta"])
def test_hyper_parameters_are_checked_in_every_group(make, message):
    """NaN rates turned the weights NaN, a group's own negative lr was taken; all ran before."""
    with pytest.raises(ValueError, match=message):
        make([torch.nn.Parameter(torch.randn(4, 4))])

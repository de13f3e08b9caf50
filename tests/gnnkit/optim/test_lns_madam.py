"""LNSMadam against a hand-written Madam-in-LNS reference, its codes, its checkpoint and its bytes."""

import copy
import math

import pytest
import torch

from gnnkit.optim import LNSMadam, describe_optimizers, optimizer_state_bytes
from gnnkit.optim.lns import LNSFormat, decode, encode


def _weight(seed=0, shape=(3, 4)):
    g = torch.Generator().manual_seed(seed)
    return torch.nn.Parameter(torch.randn(shape, generator=g) * 0.3)


def _grad(shape, step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(shape, generator=g)


def _reference(w0, grads, lr, gamma, bits, p_scale, g_bound, beta, wd):
    """Madam in the LNS, element by element in Python floats (nearest rounding)."""
    flat = [float(v) for v in w0.flatten()]
    rms = math.sqrt(sum(v * v for v in flat) / len(flat))
    scale = float(torch.tensor(max(max(abs(v) for v in flat), p_scale * rms), dtype=torch.float32))
    max_code = 2 ** (bits - 1) - 2

    def to_code(v):
        return min(max(round(-gamma * math.log2(abs(v) / scale)), 0), max_code)

    signs = [(v > 0) - (v < 0) for v in flat]
    codes = [to_code(v) if v else None for v in flat]
    v_avg = [0.0] * len(flat)
    for t, grad in enumerate(grads, start=1):
        for i, g in enumerate(float(x) for x in grad.flatten()):
            v_avg[i] = beta * v_avg[i] + (1 - beta) * g * g
            denom = math.sqrt(v_avg[i] / (1 - beta**t))
            normed = 0.0 if denom == 0 else max(-g_bound, min(g_bound, g / denom))
            if codes[i] is not None:
                moved = codes[i] + gamma * lr * (signs[i] * normed + wd)
                codes[i] = min(max(math.floor(moved + 0.5), 0), max_code)
    values = [0.0 if c is None else s * scale * 2.0 ** (-c / gamma) for s, c in zip(signs, codes)]
    return torch.tensor(values, dtype=torch.float64).reshape(w0.shape)


@pytest.mark.parametrize(("bits", "gamma", "lr", "wd"), [(8, 8.0, 0.05, 0.0), (6, 4.0, 0.2, 0.1), (8, 16.0, 0.03, 0.0)])
def test_step_matches_the_hand_written_reference(bits, gamma, lr, wd):
    w = _weight()
    with torch.no_grad():
        w[0, 0] = 0.0  # zeros stay zero under a multiplicative update
    w0 = w.detach().clone()
    with pytest.warns(UserWarning, match=r"1 of 12 entries of a \[3, 4\] weight are 0"):
        optimizer = LNSMadam([w], lr=lr, bits=bits, gamma=gamma, weight_decay=wd, rounding="nearest")
    grads = [_grad(w.shape, step) for step in range(5)]
    for grad in grads:
        w.grad = grad.clone()
        optimizer.step()
    expected = _reference(w0, grads, lr, gamma, bits, 3.0, 10.0, 0.999, wd)
    torch.testing.assert_close(w.detach().double(), expected, rtol=1e-6, atol=0)
    assert float(w.detach()[0, 0]) == 0.0
    assert not torch.equal(w.detach(), decode(encode(w0, optimizer.state[w]["scale"], optimizer.format),
                                               optimizer.state[w]["scale"], optimizer.format))


def test_update_is_multiplicative_in_the_direction_of_the_gradient():
    w = torch.nn.Parameter(torch.tensor([[0.5, -0.5], [0.25, -0.25]]))
    optimizer = LNSMadam([w], lr=0.25, gamma=8.0, rounding="nearest")
    before = w.detach().clone()
    w.grad = torch.ones_like(w)  # descent lowers every weight: positives shrink, negatives grow in size
    optimizer.step()
    ratio = (w.detach() / before).flatten()
    torch.testing.assert_close(ratio, torch.tensor([2 ** -0.25, 2 ** 0.25, 2 ** -0.25, 2 ** 0.25]))


def test_weights_are_always_the_decoded_codes():
    w, bias = _weight(shape=(16, 8)), torch.nn.Parameter(torch.zeros(8))
    optimizer = LNSMadam([w, bias], lr=0.02)
    fmt = optimizer.format
    for step in range(4):
        state = optimizer.state[w]
        assert state["codes"].dtype == torch.int8
        assert torch.equal(w.detach(), decode(state["codes"], state["scale"], fmt))  # exactly
        assert torch.equal(encode(w, state["scale"], fmt), state["codes"])
        w.grad, bias.grad = _grad(w.shape, step), _grad(bias.shape, step)
        optimizer.step()
    assert float(w.detach().abs().max()) <= float(optimizer.state[w]["scale"])


def test_max_norm_clamp_is_code_zero():
    w = torch.nn.Parameter(torch.tensor([[1.0, 0.5], [-0.25, 0.125]]))
    rms = float(w.detach().pow(2).mean().sqrt())
    optimizer = LNSMadam([w], lr=1.0, rounding="nearest")
    scale = float(optimizer.state[w]["scale"])
    assert scale == pytest.approx(3.0 * rms, rel=1e-6)  # Madam's bound, 3 x the initial RMS
    for _ in range(30):
        w.grad = -torch.sign(w.detach())  # every magnitude grows
        optimizer.step()
    torch.testing.assert_close(w.detach().abs(), torch.full((2, 2), scale))


def test_stochastic_rounding_is_unbiased():
    w = torch.nn.Parameter(torch.full((1, 20000), 0.1))
    optimizer = LNSMadam([w], lr=0.3 / 8, gamma=8.0, rounding="stochastic", seed=3)
    before = optimizer.state[w]["codes"].float().abs().mean()
    w.grad = torch.ones_like(w)  # normalised gradient 1: the code moves by gamma * lr = 0.3
    optimizer.step()
    moved = optimizer.state[w]["codes"].float().abs().mean() - before
    assert abs(float(moved) - 0.3) < 0.02


def test_one_dimensional_parameters_take_adam():
    bias, ref = torch.nn.Parameter(torch.zeros(5)), torch.nn.Parameter(torch.zeros(5))
    ours = LNSMadam([bias], fp_lr=0.05)
    adam = torch.optim.Adam([ref], lr=0.05)
    for step in range(4):
        bias.grad, ref.grad = _grad((5,), step), _grad((5,), step)
        ours.step()
        adam.step()
    torch.testing.assert_close(bias, ref)
    assert "codes" not in ours.state[bias]


def test_an_lr_schedule_scales_the_fp32_parameters_rate_too():
    """A LambdaLR to 0 stopped the quantised weights, and the biases kept moving at the full fp_lr."""
    bias, ref = torch.nn.Parameter(torch.zeros(5)), torch.nn.Parameter(torch.zeros(5))
    ours = LNSMadam([bias], fp_lr=0.05)
    adam = torch.optim.Adam([ref], lr=0.05)
    halving = [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5) for opt in (ours, adam)]
    for step in range(4):
        bias.grad, ref.grad = _grad((5,), step), _grad((5,), step)
        ours.step()
        adam.step()
        for scheduler in halving:
            scheduler.step()
    torch.testing.assert_close(bias, ref)
    torch.optim.lr_scheduler.LambdaLR(ours, lambda epoch: 0.0)  # sets lr to 0 as it starts
    before = bias.detach().clone()
    bias.grad = _grad((5,), 9)
    ours.step()
    assert ours.param_groups[0]["lr"] == 0.0 and torch.equal(bias.detach(), before)


@pytest.mark.parametrize("schedule", ["one_cycle", "plateau"])
def test_the_fp32_rate_follows_schedulers_that_start_elsewhere_or_record_no_start(schedule):
    """OneCycleLR records initial_lr = max_lr / 25 (the rate rose to 25x fp_lr at its peak);
    ReduceLROnPlateau records none (fp_lr was never reduced)."""
    bias, ref = torch.nn.Parameter(torch.zeros(5)), torch.nn.Parameter(torch.zeros(5))
    ours, adam = LNSMadam([bias], lr=0.01, fp_lr=0.05), torch.optim.Adam([ref], lr=0.05)
    if schedule == "one_cycle":
        make = [lambda opt, peak=peak: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=peak, total_steps=6,
                                                                                  cycle_momentum=False)
                for peak in (0.01, 0.05)]
    else:
        make = [lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0)] * 2
    schedulers = [build(opt) for build, opt in zip(make, (ours, adam))]
    for step in range(5):
        bias.grad, ref.grad = _grad((5,), step), _grad((5,), step)
        ours.step()
        adam.step()
        for scheduler in schedulers:
            scheduler.step(1.0) if schedule == "plateau" else scheduler.step()
    torch.testing.assert_close(bias, ref)


def test_state_dict_round_trip_resumes_identically():
    w, b = _weight(shape=(6, 5)), torch.nn.Parameter(torch.zeros(5))
    optimizer = LNSMadam([w, b], lr=0.02, seed=7)
    for step in range(3):
        w.grad, b.grad = _grad(w.shape, step), _grad(b.shape, step)
        optimizer.step()
    saved_params = [torch.nn.Parameter(p.detach().clone()) for p in (w, b)]
    saved = copy.deepcopy(optimizer.state_dict())
    for step in range(3, 6):
        w.grad, b.grad = _grad(w.shape, step), _grad(b.shape, step)
        optimizer.step()

    resumed = LNSMadam(saved_params, lr=0.02, seed=7)
    resumed.load_state_dict(saved)
    assert resumed.state[saved_params[0]]["codes"].dtype == torch.int8
    for step in range(3, 6):
        for p in saved_params:
            p.grad = _grad(p.shape, step)
        resumed.step()
    torch.testing.assert_close(saved_params[0], w, rtol=0, atol=0)
    torch.testing.assert_close(saved_params[1], b, rtol=0, atol=0)


def test_weight_bytes_are_a_quarter_of_fp32():
    w, b = _weight(shape=(100, 50)), torch.nn.Parameter(torch.zeros(50))
    optimizer = LNSMadam([w, b])
    assert optimizer.weight_bytes() == {"weight_bytes": 5000 + 4 + 200, "weight_bytes_fp32": 20000 + 200}
    info = describe_optimizers([optimizer])["optimizer"]
    assert info["weight_bytes"] == 5204 and info["weight_bytes_fp32"] == 20200
    w.grad, b.grad = torch.ones_like(w), torch.ones_like(b)
    optimizer.step()
    # state: Madam's squared-gradient average (FP32) and Adam's two moments for the bias; not the codes
    assert optimizer_state_bytes(optimizer) == 4 * 5000 + 2 * 4 * 50
    adam = torch.optim.Adam([torch.nn.Parameter(torch.zeros(3))])
    assert describe_optimizers([adam])["optimizer"]["weight_bytes"] == 12


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match=r"LNSFormat.bits: expected an integer in \[2, 8\], got 9"):
        LNSMadam([_weight()], bits=9)
    with pytest.raises(ValueError, match="LNSFormat.gamma: expected a finite number > 0, got 0"):
        LNSMadam([_weight()], gamma=0)
    with pytest.raises(ValueError, match="LNSMadam.rounding"):
        LNSMadam([_weight()], rounding="up")
    with pytest.raises(ValueError, match="LNSMadam.beta"):
        LNSMadam([_weight()], beta=1.0)
    assert LNSFormat(8, 8.0).max_code == 126


def test_gnnkit_run_with_the_recipe_reports_weight_bytes(tmp_path):
    """The LNS-Madam recipe through ``gnnkit run`` on synthetic-tiny: it trains, and report.json
    gives the stored weight bytes at about a quarter of FP32."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parents[3]
    pythonpath = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))  # this checkout's gnnkit
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "gnnkit.cli", "run", str(root / "recipes" / "opt_lns_madam_citation.yaml"),
         "--trainer.max_epochs", "5", "--run_dir", str(run_dir)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env={**os.environ, "GNNKIT_NATIVE": "0", "PYTHONPATH": pythonpath})
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    optimizer = report["optimizer"]
    assert optimizer["class"] == "gnnkit.optim.lns_madam.LNSMadam"
    assert optimizer["weight_bytes_fp32"] == optimizer["param_bytes"]
    assert 3.5 * optimizer["weight_bytes"] < optimizer["weight_bytes_fp32"] < 4.0 * optimizer["weight_bytes"]


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: LNSMadam(p, lr=float("nan")), "LNSMadam.lr: expected a finite number >= 0, got nan"),  # ran hidden
    (lambda p: LNSMadam(p, weight_decay=-1.0), "LNSMadam.weight_decay: expected a finite number >= 0"),
    (lambda p: LNSMadam([{"params": p, "lr": -1.0}]), "LNSMadam.lr: expected a finite number >= 0, got -1.0"),
    (lambda p: LNSMadam(p, g_bound=float("inf")), "LNSMadam.g_bound: expected a finite number > 0"),
    (lambda p: LNSMadam(p, seed="x"), "LNSMadam.seed: expected an integer >= 0"),
], ids=["nan lr", "negative decay", "group lr", "endless bound", "text seed"])
def test_hyper_parameters_are_checked_in_every_group(make, message):
    with pytest.raises(ValueError, match=message):
        make([torch.nn.Parameter(torch.randn(4, 4))])


def test_zero_entries_of_a_weight_are_named_in_a_warning():
    """A zero-initialised 2-D weight stayed at zero for good, without a word."""
    layer = torch.nn.Linear(6, 5)
    torch.nn.init.zeros_(layer.weight)
    with pytest.warns(UserWarning, match=r"LNSMadam: 30 of 30 entries of a \[5, 6\] weight are 0, which a "
                                         r"multiplicative update never moves"):
        LNSMadam(layer.parameters(), lr=0.05)

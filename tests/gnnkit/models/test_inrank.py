"""InRank layers: reconstruction, the growth rule on known spectra, the optimizer, the GNN option."""

import warnings

import pytest
import torch
from torch.nn import functional as F
from torch_geometric.nn import GCNConv, SAGEConv

from gnnkit.models.inrank import (InRankLinear, InRankOptions, describe_low_rank, explained_ratio, max_rank,
                                  next_rank, replace_linears)
from gnnkit.models.node_gnn import NodeGNN, NodeGNNOptions


def test_forward_is_the_dense_weight_it_reconstructs():
    torch.manual_seed(0)
    layer = InRankLinear(12, 7, options=InRankOptions(init_rank=2, buffer=1))
    with torch.no_grad():
        layer.u.normal_()  # every column non-zero: the applied slice must still be exactly 3 modes
        layer.bias.normal_()
    x = torch.randn(5, 12)
    m = layer.applied_rank
    assert m == 3 and layer.max_rank == 3
    dense = layer.u[:, :m] @ layer.v[:m]
    torch.testing.assert_close(layer.weight, dense)
    assert torch.linalg.matrix_rank(layer.weight) == 3
    torch.testing.assert_close(layer(x), F.linear(x, dense, layer.bias), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer(x), x @ layer.v[:m].T @ layer.u[:, :m].T + layer.bias, rtol=1e-5, atol=1e-6)


def test_initial_product_has_glorot_variance_and_unapplied_modes_start_at_zero():
    torch.manual_seed(0)
    layer = InRankLinear(256, 256, options=InRankOptions(init_rank=4, buffer=4))
    assert layer.max_rank == 128 and layer.applied_rank == 8
    assert float(layer.weight.detach().var()) == pytest.approx(2 / 512, rel=0.1)
    assert torch.count_nonzero(layer.u[:, 8:]) == 0


def _spectrum(values, n=20):
    return torch.tensor(list(values) + [0.0] * (n - len(values)))


def test_explained_ratio_is_the_references_variance_ratio():
    s = torch.tensor([5.0, 3.0, 1.0, 0.5])
    for k in range(4):
        residual = s.clone()
        residual[:k] = 0
        assert explained_ratio(s, k) == pytest.approx(1 - residual.var().item() / s.var().item())
    assert explained_ratio(s, 4) == 1.0
    assert explained_ratio(torch.zeros(4), 1) == 1.0
    assert explained_ratio(torch.ones(4), 2) == 0.0


def test_next_rank_follows_the_threshold_buffer_and_maximum():
    s = _spectrum([10, 9, 8, 7, 6, 0.01, 0.01])  # five strong directions, two weak
    k = next(k for k in range(20) if explained_ratio(s, k) > 0.9)
    assert k == 5
    assert next_rank(s, 2, 8, 20, 0.9) == 5  # reaches the five strong directions
    assert next_rank(s, 2, 2, 20, 0.9) == 4  # a smaller buffer caps the growth per check
    assert next_rank(s, 2, 8, 12, 0.9) == 4  # rank <= max_rank - buffer
    assert next_rank(s, 6, 8, 20, 0.9) == 6  # never shrinks
    assert next_rank(s, 4, 0, 20, 0.9) == 4  # no buffer: nothing to grow into


def _set_spectrum(layer, values):
    """Factors whose applied product has singular values ``values`` (then zeros)."""
    m = layer.applied_rank
    g = torch.Generator().manual_seed(1)
    left = torch.linalg.qr(torch.randn(layer.out_features, m, generator=g))[0]
    right = torch.linalg.qr(torch.randn(layer.in_features, m, generator=g))[0]
    sv = torch.tensor(list(values) + [0.0] * (m - len(values)))
    with torch.no_grad():
        layer.u[:, :m] = left * sv
        layer.v[:m] = right.T


def test_the_explained_ratio_of_a_spectrum_with_autograd_history_warns_nothing():
    s = torch.tensor([3.0, 2.0, 1.0, 0.5], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's "Converting a tensor with requires_grad=True to a scalar"
        assert explained_ratio(s * 1.0, 2) == pytest.approx(explained_ratio(s.detach(), 2))


def test_rank_grows_when_the_update_spectrum_asks_and_only_on_check_steps():
    layer = InRankLinear(40, 30, options=InRankOptions(init_rank=2, buffer=6, warmup=3, gap=2, threshold=0.9))
    assert (layer.rank, layer.applied_rank, layer.max_rank) == (2, 8, 15)
    _set_spectrum(layer, [9, 8, 7, 6, 5, 0.01])  # five strong directions
    torch.testing.assert_close(torch.linalg.svdvals(layer.weight)[:6], torch.tensor([9, 8, 7, 6, 5, 0.01]))
    grew = [layer.step() for _ in range(3)]  # warm-up: no check
    assert grew == [False] * 3 and layer.rank == 2
    assert layer.step() is True  # step 4: a check
    expected = next_rank(torch.linalg.svdvals(layer.weight), 2, 6, 15, 0.9)
    assert layer.rank == expected == 5 and layer.applied_rank == 11
    assert layer.step() is False  # step 5: not a check step
    _set_spectrum(layer, [1.0] * 11)  # a flat spectrum: grow by the whole buffer, up to max - buffer
    assert layer.step() is True and layer.rank == 9 and layer.applied_rank == 15
    assert layer.step() is False and layer.step() is False and layer.rank == 9  # at the maximum


def test_growing_keeps_the_function_and_the_optimizer_trains_new_modes():
    torch.manual_seed(0)
    layer = InRankLinear(10, 8, options=InRankOptions(init_rank=1, buffer=1, warmup=0, gap=1, threshold=0.999))
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.05)
    x, target = torch.randn(64, 10), torch.randn(64, 8)
    before = layer(x).detach()
    unapplied = layer.v[layer.applied_rank:].detach().clone()
    loss = (layer(x) - target).square().mean()
    loss.backward()
    assert torch.count_nonzero(layer.u.grad[:, layer.applied_rank:]) == 0
    assert torch.count_nonzero(layer.v.grad[layer.applied_rank:]) == 0
    optimizer.step()
    torch.testing.assert_close(layer.v[2:].detach(), unapplied[0:])  # untouched while unapplied
    moved = layer(x).detach()
    assert not torch.allclose(moved, before)
    assert layer.update_rank() and layer.applied_rank == 3
    torch.testing.assert_close(layer(x).detach(), moved)  # the new mode starts with u = 0
    for _ in range(3):
        optimizer.zero_grad()
        (layer(x) - target).square().mean().backward()
        optimizer.step()
    assert torch.count_nonzero(layer.u[:, 2]) > 0  # the same optimizer trains the new mode


def test_state_dict_keeps_rank_and_step_count():
    layer = InRankLinear(20, 20, options=InRankOptions(init_rank=2, buffer=2, warmup=0, gap=1))
    _set_spectrum(layer, [1.0] * 4)
    layer.step()
    other = InRankLinear(20, 20, options=InRankOptions(init_rank=2, buffer=2, warmup=0, gap=1))
    other.load_state_dict(layer.state_dict())
    assert (other.rank, int(other.steps)) == (layer.rank, 1) and layer.rank > 2
    torch.testing.assert_close(other.weight, layer.weight)


def test_replace_linears_reaches_the_convs_linear_maps():
    convs = torch.nn.ModuleList([GCNConv(16, 8), SAGEConv(8, 4)])
    replaced = replace_linears(convs, InRankOptions(init_rank=1, buffer=1))
    assert sorted(replaced) == ["0.lin", "1.lin_l", "1.lin_r"]
    assert replaced["1.lin_r"].bias is None and replaced["1.lin_l"].bias is not None
    x, edge_index = torch.randn(6, 16), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    assert convs[1](convs[0](x, edge_index), edge_index).shape == (6, 4)


@pytest.mark.parametrize("model", ["gcn", "sage", "gin", "gat", "mlp"])
def test_node_gnn_low_rank_option(model):
    torch.manual_seed(0)
    options = NodeGNNOptions(num_layers=2, low_rank="inrank", inrank=InRankOptions(init_rank=2, buffer=2))
    net = NodeGNN(model, 32, 32, 5, options)
    report = net.low_rank_report()
    assert report["ranks"] and all(rank == 4 for name, rank in report["ranks"].items() if "layers.0" in name)
    assert report["params"] < report["full_params"]
    out = net(torch.randn(10, 32), torch.randint(0, 10, (2, 30)))
    out.sum().backward()
    assert out.shape == (10, 5)
    assert "low_rank=inrank" in repr(net)
    assert NodeGNN(model, 32, 32, 5, num_layers=2).low_rank_report() is None
    assert describe_low_rank(torch.nn.Linear(3, 3)) == {"ranks": {}, "max_ranks": {}, "params": 0, "full_params": 0}


def test_bad_options_raise_one_line_errors():
    with pytest.raises(ValueError, match="low_rank: expected null or one of"):
        NodeGNNOptions(low_rank="svd")
    with pytest.raises(ValueError, match=r"inrank.threshold: expected a fraction in \(0, 1\]"):
        InRankOptions(threshold=1.5)
    with pytest.raises(ValueError, match="inrank.init_rank: expected an integer >= 1"):
        InRankOptions(init_rank=0)
    with pytest.raises(ValueError, match=r"inrank.max_params_fraction: expected a fraction in \(0, 1\]"):
        InRankOptions(max_params_fraction=0.0)
    with pytest.raises(ValueError, match="InRankLinear.in_features: expected a width >= 1, got 0"):
        InRankLinear(0, 4)  # a rank-1 layer over nothing
    with pytest.raises(ValueError, match="InRankLinear.out_features: expected a width >= 1, got -1"):
        InRankLinear(8, -1)  # torch's "negative dimension -1"


@pytest.mark.parametrize(("fields", "message"), [
    ({"init_rank": 2.5}, "inrank.init_rank: expected an integer >= 1, got 2.5"),  # failed at the first forward
    ({"gap": 2.5}, "inrank.gap: expected an integer >= 1, got 2.5"),  # was taken
    ({"init_rank": True}, "inrank.init_rank: expected an integer >= 1, got True"),
    ({"threshold": "0.9"}, r"inrank.threshold: expected a fraction in \(0, 1\], got '0.9'"),  # a raw TypeError
    ({"warmup": None}, "inrank.warmup: expected an integer >= 0, got None"),
    ({"init_scale": float("inf")}, "inrank.init_scale: expected a finite number > 0, got inf"),
    ({"frozen_base": "yes"}, "inrank.frozen_base: expected true or false, got 'yes'"),
])
def test_option_values_of_the_wrong_kind_are_one_line_errors(fields, message):
    with pytest.raises(ValueError, match=message):
        InRankOptions(**fields)


def test_node_gnn_takes_inrank_options_as_a_dict():
    """The CLI's form, natural in a script too: an AttributeError on 'max_params_fraction' before."""
    net = NodeGNN("mlp", 8, 16, 3, low_rank="inrank", inrank={"init_rank": 4, "buffer": 2})
    assert net.options.inrank == InRankOptions(init_rank=4, buffer=2)
    with pytest.raises(ValueError, match=r"inrank: unknown fields \['rank'\]; expected some of"):
        NodeGNN("mlp", 8, 16, 3, low_rank="inrank", inrank={"rank": 4})


def test_training_without_step_warns_once_past_the_first_check():
    """In a user's loop without update_ranks() the rank stayed at init_rank, silently."""
    layer = InRankLinear(6, 6, options=InRankOptions(warmup=3, gap=2))
    x = torch.randn(4, 6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(12):
            layer(x).sum().backward()
    assert [str(w.message)[:56] for w in caught] == ["InRankLinear: 5 training passes and no step(), so the ra"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stepped = InRankLinear(6, 6, options=InRankOptions(warmup=3, gap=2))
        for _ in range(12):
            stepped(x).sum().backward()
            stepped.step()


@pytest.mark.parametrize("shape", [(128, 256), (256, 256), (256, 40), (1433, 16), (3, 5)])
def test_max_params_fraction_bounds_the_trained_entries(shape):
    options = InRankOptions(init_rank=500, buffer=8, max_params_fraction=0.5)
    layer = InRankLinear(*shape, options=options)
    assert layer.max_rank == max_rank(*shape, options) == max(1, int(0.5 * shape[0] * shape[1] / sum(shape)))
    assert layer.applied_rank == layer.max_rank  # the initial rank is clamped to the cap
    assert layer.num_params() <= 0.5 * layer.full_params() or layer.max_rank == 1
    assert max_rank(256, 256, InRankOptions()) == 128  # unset: half the smaller side, as the reference


def test_gnnkit_run_reports_the_grown_ranks(tmp_path):
    """``gnnkit run`` with ``model.low_rank: inrank`` on synthetic-tiny: the ranks grow from 2 and
    report.json lists them with the parameter counts."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parents[3]
    recipe = root / "recipes" / "quickstart.yaml"
    pythonpath = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))  # this checkout's gnnkit
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "gnnkit.cli", "run", str(recipe), "--trainer.max_epochs", "6",
         "--model.low_rank", "inrank", "--model.inrank", '{"init_rank": 2, "buffer": 2, "warmup": 1, "gap": 1}',
         "--run_dir", str(run_dir)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600, env={**os.environ, "GNNKIT_NATIVE": "0", "PYTHONPATH": pythonpath})
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    low_rank = report["low_rank"]
    assert set(low_rank["ranks"]) == {"layers.0.lin_l", "layers.0.lin_r", "layers.1.lin_l", "layers.1.lin_r"}
    assert all(4 <= rank <= low_rank["max_ranks"][name] for name, rank in low_rank["ranks"].items())
    assert any(rank > 4 for rank in low_rank["ranks"].values())  # grew past the initial 2 + 2 modes
    assert 0 < low_rank["params"] < low_rank["full_params"]


def test_frozen_base_is_w0_plus_the_low_rank_update_and_is_never_stored():
    torch.manual_seed(0)
    options = InRankOptions(init_rank=2, buffer=1, frozen_base=True, warmup=0, gap=1)
    layer = InRankLinear(12, 9, options=options)
    assert torch.count_nonzero(layer.u) == 0  # the cumulative update starts at zero
    base = layer.base().clone()
    bound = (6 / 21) ** 0.5
    assert float(base.abs().max()) <= bound and float(base.std()) > 0.5 * bound / 3**0.5
    with torch.no_grad():
        layer.u.normal_()
        layer.bias.normal_()
    x = torch.randn(4, 12)
    m = layer.applied_rank
    torch.testing.assert_close(layer.weight, base + layer.u[:, :m] @ layer.v[:m])
    torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-6)
    state = layer.state_dict()
    assert all(value.numel() != 12 * 9 for value in state.values())  # W_0 is a seed, not a tensor
    other = InRankLinear(12, 9, options=options)
    assert not torch.equal(other.base(), base)
    other.load_state_dict(state)
    torch.testing.assert_close(other.base(), base, rtol=0, atol=0)  # regenerated from the loaded seed
    torch.testing.assert_close(other(x), layer(x))
    assert not any(p is layer.base() for p in layer.parameters())
    _set_spectrum(layer, [5.0, 0.0, 0.0])  # the rank follows the update's spectrum, not W_0's
    assert layer.update_rank() is False and layer.rank == 2

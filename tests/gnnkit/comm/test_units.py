"""Single-process tests of the pieces: packing, splitting, tuning, registry, strategy options."""

from __future__ import annotations

import contextlib
import importlib
import warnings

import pytest
import torch
from lightning.pytorch.strategies import StrategyRegistry

import gnnkit  # noqa: F401
from gnnkit.comm import FusionTuner, GnnkitStrategy, MultiStreamAllReduce, PowerSGD, SignSGD, TopKA2A, resolve_mode
from gnnkit.comm.base import make_layout
from gnnkit.comm.multistream import split_parts
from gnnkit.comm.residuals import Residuals
from gnnkit.comm.signsgd import pack_bits, pack_signs, unpack_bits
from gnnkit.comm.sparse import pack, topk_count, topk_indices, unpack
from gnnkit.comm.topk_a2a import gather_plan, shard_sizes


def test_pack_roundtrip_keeps_index_bits() -> None:
    values = torch.randn(5)
    indices = torch.tensor([0, 3, 2**31 - 1, 77, 123456789])
    v, i = unpack(pack(values, indices))
    assert torch.equal(v, values) and torch.equal(i, indices)


def test_topk_count_and_indices() -> None:
    assert topk_count(0, 0.5) == 0 and topk_count(10, 0.01) == 1 and topk_count(10, 1.0) == 10
    x = torch.tensor([0.1, -5.0, 2.0, 0.0, -3.0])
    assert sorted(topk_indices(x, 2).tolist()) == [1, 4]
    assert topk_indices(x, 5).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("n", [1, 8, 13, 1000])
def test_sign_packing_matches_reference(n: int) -> None:
    x = torch.randn(n)
    x[::3] = 0.0
    packed = pack_signs(x)
    half = (n + 7) // 8
    assert packed.dtype == torch.uint8 and packed.numel() == 2 * half
    assert torch.equal(unpack_bits(packed[:half], n), x > 0) and torch.equal(unpack_bits(packed[half:], n), x != 0)
    assert torch.equal(unpack_bits(pack_bits(x < 0), n), x < 0)


def test_split_parts_covers_bucket() -> None:
    for numel, streams, min_part in [(10, 3, 1), (100, 4, 30), (5, 8, 1), (7, 2, 100)]:
        parts = split_parts(numel, streams, min_part)
        assert sum(length for _, length in parts) == numel
        assert [o for o, _ in parts] == [sum(l for _, l in parts[:i]) for i in range(len(parts))]
        assert len(parts) <= streams and (len(parts) == 1 or min(l for _, l in parts) >= min_part)


def test_shards_and_gather_plan() -> None:
    assert shard_sizes(10, 4) == [3, 3, 2, 2]
    assert gather_plan([250, 250, 250, 250], 0.01, "auto") == (True, 2 * 4 * 3)
    assert gather_plan([250, 250, 250, 250], 0.5, "auto") == (False, 250)
    assert gather_plan([250] * 4, 0.01, "dense") == (False, 250)


def test_residuals_roundtrip() -> None:
    layout = make_layout([("a", (2, 3)), ("b", (4,))])
    res = Residuals()
    res.store(torch.arange(10.0), layout)
    acc = res.add_to(torch.ones(10), layout)
    assert torch.equal(acc, torch.arange(10.0) + 1)
    res.store(acc, layout)
    assert res.add_to(torch.zeros(10), layout).data_ptr() == acc.data_ptr()  # updated in place
    moved = make_layout([("b", (4,)), ("a", (2, 3))])  # another bucket order: keyed by name
    assert torch.equal(res.gather(moved), torch.cat([torch.arange(7.0, 11.0), torch.arange(1.0, 7.0)]))
    fresh = res.add_to(torch.zeros(10), moved)  # another layout: a new tensor, the memory untouched
    assert fresh.data_ptr() != acc.data_ptr() and torch.equal(res.gather(layout), torch.arange(1.0, 11.0))
    other = Residuals()
    other.load_state_dict(res.state_dict())
    assert torch.equal(other.gather(layout), torch.arange(1.0, 11.0))


def test_fusion_tuner_finds_minimum() -> None:
    cost = {1.0: 9.0, 2.0: 5.0, 4.0: 3.0, 8.0: 4.0, 16.0: 6.0, 32.0: 8.0, 64.0: 9.0}
    tuner = FusionTuner(total_mb=60, steps=2, skip=1)
    assert tuner.candidates == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    tuned = 0
    while not tuner.done:
        tuner.record(cost[tuner.current_mb])
        tuned += 1
        assert tuned < 100
    assert tuner.result == 4.0
    assert len(tuner.times) < len(cost)  # binary search, not a sweep
    assert FusionTuner(total_mb=0.5).done


def test_registry_and_resolver() -> None:
    for name in ("gnnkit", "gnnkit_multistream", "gnnkit_topk_a2a", "gnnkit_topk_allgather",
                 "gnnkit_signsgd", "gnnkit_powersgd", "gnnkit_dear"):
        assert name in StrategyRegistry
    assert StrategyRegistry["gnnkit_topk_a2a"]["init_params"] == {"comm": "topk_a2a"}
    assert resolve_mode("TopK-A2A") == "topk_a2a"
    with pytest.raises(ValueError, match="Could not resolve comm 'ring' among choices"):
        resolve_mode("ring")


def test_strategy_repr_and_options() -> None:
    s = GnnkitStrategy(comm="topk_a2a", density=0.05, bucket_mb="auto")
    assert repr(s) == ("GnnkitStrategy(comm='topk_a2a', streams=2, density=0.05, gather='auto', "
                       "warmup_steps=0, sign_error_feedback=False, sign_momentum=0.0, powersgd_rank=1, "
                       "bucket_mb='auto', tune_steps=3)")
    assert repr(s.communicator) == "TopKA2A(density=0.05, gather='auto')"
    signs = GnnkitStrategy(comm="signsgd", sign_error_feedback=True).communicator
    assert signs.error_feedback and repr(signs) == "SignSGD(error_feedback=True)"
    assert repr(GnnkitStrategy(comm="signsgd").communicator) == "SignSGD()"
    assert repr(MultiStreamAllReduce(streams=4)) == "MultiStreamAllReduce(streams=4, min_part_kb=256.0)"
    assert repr(PowerSGD(rank=2)) == "PowerSGD(rank=2, seed=0)"
    assert s._ddp_kwargs["bucket_cap_mb"] == 1.0
    for kwargs, message in [({"comm": "topk_a2a", "density": 0.0}, "density"),
                            ({"comm": "multistream", "streams": 0}, "streams"),
                            ({"bucket_mb": -1}, "bucket_mb"), ({"gather": "x"}, "gather"),
                            ({"warmup_steps": -1}, "warmup_steps"), ({"comm": "nope"}, "Could not resolve"),
                            ({"comm": None}, "Could not resolve comm None"), ({"streams": 2.5}, "streams: expected an "
                            "integer >= 1, got 2.5"), ({"powersgd_rank": 2.5}, "powersgd_rank: expected an integer"),
                            ({"bucket_mb": float("inf")}, "bucket_mb"), ({"tune_steps": 1.5}, "tune_steps")]:
        with pytest.raises(ValueError, match=message):
            GnnkitStrategy(**kwargs)
    assert TopKA2A(0.1).info()["density"] == 0.1


def test_recipes_build_their_strategy() -> None:
    from pathlib import Path

    import yaml

    recipes = sorted((Path(__file__).parents[3] / "recipes").glob("comm_*.yaml"))
    assert {r.stem[5:] for r in recipes} == {"allreduce", "multistream", "topk_a2a", "topk_allgather",
                                             "signsgd", "powersgd", "dear"}
    for recipe in recipes:
        config = yaml.safe_load(recipe.read_text())
        spec = config["trainer"]["strategy"]
        assert spec["class_path"] == "gnnkit.comm.GnnkitStrategy"
        assert config["trainer"]["devices"] == 2 and config["data"]["dataset"] == "synthetic-arxiv"
        strategy = GnnkitStrategy(**spec["init_args"])
        assert strategy.comm == recipe.stem[5:]


@pytest.mark.parametrize("use_native", [True, False], ids=["native", "pytorch"])
@pytest.mark.parametrize("kind", ["normal", "ties", "sparse", "sorted"])
def test_fast_topk_matches_torch_topk(kind: str, use_native: bool) -> None:
    from gnnkit import native

    if use_native and not native.available():
        pytest.skip("native kernels not built here")
    with contextlib.nullcontext() if use_native else native.disabled():
        _check_fast_topk(kind)


def _check_fast_topk(kind: str) -> None:
    n, k = 300_000, 1500
    gen = torch.Generator().manual_seed(3)
    x = {"normal": torch.randn(n, generator=gen),
         "ties": torch.randint(-3, 4, (n,), generator=gen).float(),
         "sparse": torch.randn(n, generator=gen) * (torch.rand(n, generator=gen) < 0.001),
         "sorted": torch.linspace(-1, 1, n)}[kind]
    got = topk_indices(x, k)
    assert got.numel() == k and got.unique().numel() == k
    expected = torch.topk(x.abs(), k).values
    assert torch.equal(x[got].abs().sort().values, expected.sort().values)


def test_vote_signs_is_the_sum_of_the_ternary_signs() -> None:
    """A 0 abstains: an element 0 on every rank gets no vote (it went as +, and moved)."""
    from gnnkit.comm.signsgd import vote_signs

    grads = [torch.randn(37, generator=torch.Generator().manual_seed(r)) for r in range(5)]
    for r, g in enumerate(grads):
        g[r::4] = 0.0
        g[30:] = 0.0  # 0 on every rank
    rows = torch.stack([pack_signs(g) for g in grads])
    votes = vote_signs(rows, 37)
    assert torch.equal(votes, sum(torch.sign(g) for g in grads).to(torch.int32))
    assert not votes[30:].any()


def test_register_refuses_duplicates() -> None:
    from gnnkit.comm.registry import register

    with pytest.raises(ValueError, match="already registered"):
        register("TopK-A2A")(TopKA2A)


@pytest.fixture
def one_rank_group():
    """A 1-rank gloo process group for the test, destroyed afterwards."""
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_every_mode_on_a_single_rank_group(one_rank_group) -> None:
    from gnnkit.comm import MODES

    layout = make_layout([("w", (64, 32)), ("b", (33,))])  # sign bytes not a multiple of 4
    grad = torch.randn(64 * 32 + 33, generator=torch.Generator().manual_seed(0))
    options = {"topk_a2a": {"density": 1.0}, "topk_allgather": {"density": 1.0}, "powersgd": {"rank": 32}}
    for name, cls in MODES.items():
        comm = cls(**options.get(name, {}))
        comm.setup(None)
        out = comm.launch(grad.clone(), layout).wait()
        if name == "signsgd":
            scale = torch.cat([grad[:2048].abs().mean().expand(2048), grad[2048:].abs().mean().expand(33)])
            expected = torch.sign(grad) * scale  # each parameter's own mean |g|
        else:
            expected = grad
        assert torch.allclose(out, expected, atol=1e-5), name
        if name == "dear":
            comm.finish_backward()


def _scaled_signs(m: torch.Tensor, sizes: tuple[int, ...]) -> torch.Tensor:
    """Signs of ``m`` times each parameter's mean |m| (parameters of ``sizes`` elements, in order)."""
    scale = torch.cat([part.abs().mean().expand(part.numel()) for part in m.split(sizes)])
    return torch.sign(m) * scale


def test_signum_signs_the_worker_momentum_and_restores_it(one_rank_group) -> None:
    layout = make_layout([("w", (40, 5)), ("b", (7,))])
    gen = torch.Generator().manual_seed(5)
    grads = [torch.randn(207, generator=gen) for _ in range(4)]
    comm, m = SignSGD(momentum=0.9), torch.zeros(207)
    comm.setup(None)
    for grad in grads[:2]:
        m = 0.9 * m + 0.1 * grad
        out = comm.launch(grad.clone(), layout).wait()
        torch.testing.assert_close(out, _scaled_signs(m, (200, 7)))
    resumed = SignSGD(momentum=0.9)
    resumed.setup(None)
    comm.bytes_sent = 4096  # as two ranks would have counted (one sends nothing)
    resumed.load_state_dict(comm.state_dict())  # a checkpoint mid-run continues the momentum
    assert resumed.info()["bytes_sent"] == 4096  # and the report's counter
    for grad in grads[2:]:
        m = 0.9 * m + 0.1 * grad
        out = resumed.launch(grad.clone(), layout).wait()
        torch.testing.assert_close(out, _scaled_signs(m, (200, 7)))
    assert repr(resumed) == "SignSGD(momentum=0.9)"
    with pytest.raises(ValueError, match="momentum"):
        SignSGD(momentum=1.0)


def test_signsgd_error_feedback_keeps_what_the_sent_signs_missed(one_rank_group) -> None:
    """Residual plus the sent values equals the gradient, exact zeros included (they send 0, and keep
    0: as +, an element no batch touched moved by mean |g| every step)."""
    layout = make_layout([("w", (10, 5))])
    grad = torch.randn(50, generator=torch.Generator().manual_seed(3))
    grad[::4] = 0.0
    comm = SignSGD(error_feedback=True)
    comm.setup(None)
    sent = comm.launch(grad.clone(), layout).wait()  # one rank: the vote is its own signs
    torch.testing.assert_close(sent, torch.sign(grad) * grad.abs().mean())
    assert not sent[::4].any()
    residual = comm.residuals.add_to(torch.zeros(50), layout)
    torch.testing.assert_close(residual + sent, grad)


def test_multistream_shares_gloo_groups_by_their_worker_threads(one_rank_group, monkeypatch) -> None:
    """A gloo group runs 2 collectives at once, so 4 streams need 2 groups, and a bucket's 4 parts
    go pairwise to them; the result is still the all-reduce."""
    import torch.distributed as dist

    from gnnkit.comm import multistream

    assert multistream.concurrent_collectives(None) == 2
    counts = {}
    for streams in (1, 2, 3, 4):
        comm = MultiStreamAllReduce(streams=streams, min_part_kb=1)
        comm.setup(None)
        counts[streams] = len(comm.groups)
    assert counts == {1: 1, 2: 1, 3: 2, 4: 2}
    used, all_reduce = [], dist.all_reduce
    monkeypatch.setattr(dist, "all_reduce", lambda tensor, group, async_op: used.append(group) or all_reduce(
        tensor, group=group, async_op=async_op))
    grad = torch.randn(4096)
    torch.testing.assert_close(comm.launch(grad.clone(), make_layout([("w", (4096,))])).wait(), grad)
    assert used == [comm.groups[0], comm.groups[0], comm.groups[1], comm.groups[1]]


@pytest.mark.parametrize("comm, fixed", [("topk_a2a", True), ("topk_allgather", True), ("signsgd", False),
                                         ("allreduce", False), ("powersgd", False)])
def test_bucket_dependent_modes_keep_ddp_buckets_fixed(comm: str, fixed: bool) -> None:
    from gnnkit.comm import GnnkitStrategy

    strategy = GnnkitStrategy(comm=comm)
    assert strategy.fixed_buckets is fixed
    assert strategy._ddp_kwargs["find_unused_parameters"] is fixed  # DDP's switch that skips regrouping
    assert GnnkitStrategy(comm=comm, fixed_buckets=False)._ddp_kwargs["find_unused_parameters"] is False


def test_the_unused_parameters_notice_is_hushed_until_the_first_step_that_syncs(monkeypatch) -> None:
    """DDP prints it at the first forward outside no_sync: with accumulate_grad_batches 2, the second."""
    import contextlib
    from types import SimpleNamespace

    from lightning.pytorch.strategies import DDPStrategy

    from gnnkit import quiet
    from gnnkit.comm import GnnkitStrategy

    hushed = []

    @contextlib.contextmanager
    def record(fragment):
        hushed.append(fragment)
        yield

    monkeypatch.setattr(quiet, "native_stderr_without", record)
    monkeypatch.setattr(DDPStrategy, "training_step", lambda self, *args, **kwargs: "loss")
    strategy = GnnkitStrategy(comm="topk_a2a")
    strategy._model = SimpleNamespace(require_backward_grad_sync=False)  # inside no_sync
    assert strategy.training_step() == "loss" and hushed == [quiet.UNUSED_PARAMETERS_NOTICE]
    strategy._model.require_backward_grad_sync = True
    assert strategy.training_step() == "loss" and len(hushed) == 2
    assert strategy.training_step() == "loss" and len(hushed) == 2  # once a process: nothing to hush after
    assert not GnnkitStrategy(comm="topk_a2a", find_unused_parameters=True)._hush_unused_notice  # the user's own
    assert not GnnkitStrategy(comm="allreduce")._hush_unused_notice


def test_the_packages_names_load_on_first_use():
    import gnnkit.comm as comm

    assert sorted(comm.__all__) == sorted(comm._HOMES)
    for name in comm.__all__:
        assert getattr(comm, name) is getattr(importlib.import_module(comm._HOMES[name]), name)
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        comm.Nope  # noqa: B018


def test_a_checkpoint_of_other_mode_options_is_said_and_its_state_carried_over() -> None:
    """A resume with sign_momentum and error feedback dropped used none of the saved state, silently."""
    from types import SimpleNamespace

    strategy = GnnkitStrategy(comm="signsgd")
    loaded: list = []
    strategy.hook = SimpleNamespace(load_state_dict=loaded.append)
    state = {"hook": {"steps": 3}}
    saved = {"mode": "signsgd", "options": "SignSGD(error_feedback=True, momentum=0.9)", "world_size": 1,
             "ranks": [state]}
    strategy._restored = saved
    with pytest.warns(UserWarning, match=r"checkpoint was trained with SignSGD\(error_feedback=True, momentum=0.9\), "
                                         r"now SignSGD\(\): its state \(residuals, momentum\) carries over"):
        strategy._apply_restored()
    assert loaded == [state["hook"]]
    strategy._restored = {**saved, "options": "SignSGD()"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        strategy._apply_restored()
    assert len(loaded) == 2


def test_ddps_unused_parameters_error_names_this_strategys_switch() -> None:
    """Lightning's advice (strategy='ddp_find_unused_parameters_true') dropped gnnkit's communication."""
    strategy = GnnkitStrategy(comm="topk_a2a")
    error = RuntimeError("Expected to have finished reduction in the prior iteration before starting a new one. "
                         "... Parameter indices which did not receive grad for rank 0: 3")
    strategy.on_exception(error)
    assert str(error).startswith("the LightningModule has parameters that were not used in producing the loss")
    assert "GnnkitStrategy(comm='topk_a2a', find_unused_parameters=True)" in str(error)
    assert str(error).endswith("DDP said: Expected to have finished reduction in the prior iteration before "
                               "starting a new one. ... Parameter indices which did not receive grad for rank 0: 3")
    other = RuntimeError("something else")
    strategy.on_exception(other)
    assert str(other) == "something else"

"""``format="auto"``'s decision: when the on-matrix check runs, ties, and one path for auto and explain.

No test here times anything: the check's timer is a fake that returns given timings and counts calls.
"""

import math

import pytest
import torch

from gnnkit.cli import main
from gnnkit.sparse import FORMATS, Adjacency, plan
from gnnkit.sparse import decision as decision_module
from gnnkit.sparse.corpus import MatrixSpec
from gnnkit.sparse.decision import (CHECK_NOISE, DEFAULT_RUN, RunLength, TimeModel, current_run_length, decide,
                                    set_run_length)
from gnnkit.sparse.features import FEATURE_NAMES
from gnnkit.sparse.forest import TreeEnsemble
from gnnkit.sparse.measure import FormatTiming
from gnnkit.sparse.selector import NO_MODEL_DEFAULT, Selector, choose_format, set_selector, usable

LONG = RunLength(epochs=10_000, calls_per_epoch=2)
SHORT = RunLength(epochs=1, calls_per_epoch=1)


def model(costs: dict[str, float]) -> Selector:
    """A selector predicting ``costs`` (log relative) for every matrix: one leaf."""
    tree = {"feature": [0], "threshold": [0.0], "left": [-1], "right": [-1], "value": [list(costs.values())]}
    return Selector(TreeEnsemble([tree], len(FEATURE_NAMES), len(costs)), list(costs))


class FakeTimer:
    """Stands in for ``measure_formats``: product seconds per format, no conversion; counts calls."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds
        self.calls: list[list[str]] = []

    def __call__(self, adj, width, formats, repeats, dtype=None):
        self.calls.append(list(formats))
        return {n: FormatTiming(0.0, self.seconds[n], repeats) for n in formats}


@pytest.fixture(scope="module")
def adj() -> Adjacency:
    return MatrixSpec("rmat", 2000, 2000, 8, 0).build()


def test_check_is_skipped_when_the_models_margin_is_large(adj):
    timer = FakeTimer({"csr": 1.0, "gather_scatter": 0.1})
    clear = model({"csr": 2.0, "gather_scatter": 0.0})  # csr predicted e^2 = 7.4x slower
    d = decide(adj, 64, run=LONG, selector=clear, timer=timer, verify=True)
    assert (d.choice, d.pick, d.runner_up, d.checked) == ("gather_scatter", "gather_scatter", "csr", False)
    assert d.margin == pytest.approx(2.0) and "clear margin" in d.reason and timer.calls == []


def test_check_is_skipped_when_the_run_cannot_repay_it(adj):
    timer = FakeTimer({"csr": 0.001, "gather_scatter": 1.0})
    close = model({"csr": 0.1, "gather_scatter": 0.0})
    d = decide(adj, 64, run=SHORT, selector=close, timer=timer, verify=True)
    assert d.choice == "gather_scatter" and not d.checked and timer.calls == []
    assert 0 < d.expected_saving_s <= d.check_cost_s and "check cost" in d.reason
    # the saving is products x predicted difference, from the time model's absolute estimate
    best = TimeModel().best_product_s(adj, 64)
    assert d.expected_saving_s == pytest.approx(SHORT.products * best * (math.exp(0.1) - 1))


def test_check_runs_when_the_margin_is_small_and_the_run_long(adj):
    close = model({"csr": 0.1, "gather_scatter": 0.0})
    faster = FakeTimer({"csr": 0.5, "gather_scatter": 1.0})  # the runner-up takes half the time
    d = decide(adj, 64, run=LONG, selector=close, timer=faster, verify=True)
    assert faster.calls == [["gather_scatter", "csr"]] * 2 and d.checked  # a switch is timed twice
    assert d.expected_saving_s > d.check_cost_s
    assert d.choice == "csr" and d.pick == "gather_scatter" and d.timings_s == {"gather_scatter": 1.0, "csr": 0.5}
    single = MatrixSpec("rmat", 2000, 2000, 8, 0).build()
    single.single_use = True  # one product cannot repay a measurement
    assert not decide(single, 64, run=LONG, selector=close, timer=faster, verify=True).checked
    assert not decide(adj, 64, run=LONG, selector=close, timer=faster, verify=False).checked
    assert len(faster.calls) == 2


class WarmingTimer(FakeTimer):
    """A fake timer whose first timing of ``slow`` catches it warming up (twice its time)."""

    def __init__(self, seconds: dict[str, float], slow: str) -> None:
        super().__init__(seconds)
        self.slow = slow

    def __call__(self, adj, width, formats, repeats, dtype=None):
        out = super().__call__(adj, width, formats, repeats, dtype)
        if len(self.calls) == 1 and self.slow in out:
            out[self.slow] = FormatTiming(0.0, 2 * self.seconds[self.slow], repeats)
        return out


def test_a_switch_needs_a_second_timing_to_agree(adj):
    """A pick slow only in the first timing (a process's first products: the heap still growing)
    stays; the faster of each format's two times decides. Without a model the default stays too."""
    close = model({"csr": 0.1, "gather_scatter": 0.0})
    warming = WarmingTimer({"csr": 0.9, "gather_scatter": 1.0}, slow="gather_scatter")
    d = decide(adj, 64, run=LONG, selector=close, timer=warming, verify=True)
    assert warming.calls == [["gather_scatter", "csr"]] * 2
    assert d.choice == "gather_scatter" and "kept" in d.reason and d.timings_s == {"gather_scatter": 1.0, "csr": 0.9}
    names = [n for n in FORMATS if usable(FORMATS[n], adj)]
    warming = WarmingTimer({n: 0.95 if n == "segment" else 1.0 for n in names}, slow=NO_MODEL_DEFAULT)
    d = decision_module._without_model(adj, 64, False, True, LONG, "cpu", names, warming)
    assert warming.calls == [names, [NO_MODEL_DEFAULT, "segment"]]
    assert d.choice == NO_MODEL_DEFAULT and "kept" in d.reason and d.timings_s[NO_MODEL_DEFAULT] == 1.0


def test_a_difference_within_noise_keeps_the_models_pick(adj):
    close = model({"csr": 0.1, "gather_scatter": 0.0})
    for ratio in (1 - CHECK_NOISE / 2, 1.0, 1.3):  # runner-up a little faster, equal, slower
        d = decide(adj, 64, run=LONG, selector=close, timer=FakeTimer({"csr": ratio, "gather_scatter": 1.0}),
                   verify=True)
        assert d.checked and d.choice == "gather_scatter" and "kept" in d.reason


def test_ties_resolve_in_the_fixed_format_order(adj):
    order = list(FORMATS)
    names = ["segment", "gather_scatter", "csc", "coo"]  # the model's own order differs from FORMATS'
    tied = model({n: 0.0 for n in names})
    timer = FakeTimer({n: 1.0 for n in names})
    choices = {decide(adj, 64, run=LONG, selector=tied, timer=timer, verify=True).choice for _ in range(3)}
    assert choices == {"coo"} == {tied.select(adj, 64)} == {min(names, key=order.index)}
    d = decide(adj, 64, run=LONG, selector=tied, timer=timer, verify=True)
    assert list(d.scores) == sorted(names, key=order.index) and d.runner_up == "csc"
    assert not d.checked and d.expected_saving_s == 0 and timer.calls == []  # a predicted tie has nothing to gain
    with_default = model({n: 0.0 for n in names + ["csr"]})  # a tie with the model's default keeps the default
    assert decide(adj, 64, run=LONG, selector=with_default, timer=timer, verify=True).choice == "csr"


def test_auto_and_explain_take_the_same_decision(make_ogb_folder, monkeypatch, capsys):
    folder = make_ogb_folder()
    close = model({"csr": 0.1, "gather_scatter": 0.0})
    monkeypatch.setattr(decision_module, "_timer", FakeTimer({"csr": 0.5, "gather_scatter": 1.0}))
    set_selector(close)
    previous = set_run_length(RunLength(1000, 2))
    try:
        assert main(["formats", "explain", str(folder), "--width", "8", "--no-measure",
                     "--epochs", "1000", "--calls-per-epoch", "2"]) == 0
        out = capsys.readouterr().out
        assert out.count("auto uses csr (checked on the matrix)") == 2 and "model's pick gather_scatter" in out
        assert "expected saving" in out and "runner-up csr took 0.50x the time" in out
        from pipeline import preprocess, resolve

        spec = resolve(str(folder))
        graph = preprocess(spec, spec.preprocess).open()
        auto = plan(Adjacency(graph.indptr, graph.indices), 8)
        assert (auto.forward, auto.backward) == ("csr", "csr")
        set_run_length(RunLength(1, 1))  # a short run: explain and auto both take the model's pick
        assert choose_format(Adjacency(graph.indptr, graph.indices), 8) == "gather_scatter"
        assert main(["formats", "explain", str(folder), "--width", "8", "--no-measure", "--epochs", "1",
                     "--calls-per-epoch", "1"]) == 0
        assert capsys.readouterr().out.count("auto uses gather_scatter (not timed)") == 2
    finally:
        set_selector(None)
        set_run_length(previous)


def test_run_length_and_time_model_inputs():
    assert current_run_length() == DEFAULT_RUN
    with pytest.raises(ValueError, match="epochs and calls_per_epoch must be >= 1"):
        RunLength(0)
    assert RunLength(50, 2).products == 100
    fitted = TimeModel.from_meta({"time_model": {"s_per_nnz_width": 1e-9, "convert_s_per_nnz": {"csr": 2e-9}}})
    assert fitted.s_per_nnz_width == 1e-9 and fitted.convert_s_per_nnz["csr"] == 2e-9
    assert fitted.convert_s_per_nnz["coo"] == TimeModel().convert_s_per_nnz["coo"]
    assert TimeModel.from_meta({}) == TimeModel()


def test_backward_timing_pays_the_transpose_where_a_format_needs_one(monkeypatch):
    """A single-use matrix's backward is timed as a step pays it: a format without a transpose-free
    product builds A^T every time (none is kept on the matrix), gather-scatter builds none."""
    from gnnkit.sparse.measure import measure_backward

    block = MatrixSpec("rmat", 300, 300, 6, 0).build()
    block.single_use = True
    built = []
    real = Adjacency.t
    monkeypatch.setattr(Adjacency, "t", lambda self: built.append(self) or real(self))
    times = measure_backward(block, 16, ["csr", "gather_scatter"], repeats=2)
    assert set(times) == {"csr", "gather_scatter"} and all(t > 0 for t in times.values())
    assert built == [block] * 3  # csr: the warm-up and two rounds, each its own A^T
    assert "t" not in block.cached_keys()
    csr = type(FORMATS["csr"])
    monkeypatch.setattr(csr, "__call__", lambda self, a, x: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("full")))
    assert set(measure_backward(block, 16, ["csr", "gather_scatter"], repeats=2)) == {"gather_scatter"}
    assert "t" not in block.cached_keys()  # dropped though its product failed


def test_a_format_whose_conversion_runs_out_of_memory_is_left_out_of_the_timing(monkeypatch):
    """A single-use block's format is built twice (the first build warms up): out of memory in
    either leaves that format out instead of failing the step that plans the size class."""
    from gnnkit.sparse.measure import measure_formats

    block = MatrixSpec("rmat", 300, 300, 6, 0).build()
    block.single_use = True
    csr = type(FORMATS["csr"])
    builds = []

    def convert(self, adj, dtype):
        builds.append(adj)
        raise torch.cuda.OutOfMemoryError("full")

    monkeypatch.setattr(csr, "convert", convert)
    assert set(measure_formats(block, 16, ["csr", "gather_scatter"], repeats=1, min_seconds=0.0)) == {
        "gather_scatter"}
    assert builds == [block] and not any(k.startswith("format:csr") for k in block.cached_keys())
def test_timings_multiply_features_of_the_layers_dtype(monkeypatch):
    """A 16-bit run's size classes are timed with 16-bit features, forward and backward."""
    from gnnkit.sparse.measure import measure_backward, measure_formats

    block = MatrixSpec("rmat", 300, 300, 6, 0).build()
    block.single_use = True
    seen = []
    kind = type(FORMATS["gather_scatter"])
    call, transposed = kind.__call__, kind.transposed
    monkeypatch.setattr(kind, "__call__", lambda self, a, x: seen.append(("A", x.dtype)) or call(self, a, x))
    monkeypatch.setattr(kind, "transposed", lambda self, a, g: seen.append(("A^T", g.dtype)) or transposed(self, a, g))
    assert set(measure_formats(block, 16, ["gather_scatter"], repeats=1, min_seconds=0.0, dtype=torch.bfloat16)) == {
        "gather_scatter"}
    assert set(measure_backward(block, 16, ["gather_scatter"], repeats=1, dtype=torch.float16)) == {"gather_scatter"}
    assert seen and set(seen) == {("A", torch.bfloat16), ("A^T", torch.float16)}


def test_timing_waits_for_the_stream_of_the_matrixs_device(monkeypatch):
    """A product is timed to the end of its kernels on the matrix's GPU (not the current one's);
    a CPU matrix's product asks no CUDA stream."""
    from gnnkit.sparse import measure

    asked = []

    class Stream:
        def synchronize(self):
            synced.append(1)

    synced = []

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: asked.append(device) or Stream())
    assert measure.synced_seconds(lambda: None, torch.device("cuda", 1)) >= 0
    assert asked == [torch.device("cuda", 1)] and len(synced) == 2  # before and after
    measure.synced_seconds(lambda: None, torch.device("cpu"))
    assert len(asked) == 1 and len(synced) == 2

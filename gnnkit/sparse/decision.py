"""How ``format="auto"`` decides: the model's pick, and whether timing it on the matrix can pay.

The learned model (:class:`~gnnkit.sparse.selector.Selector`, after Qiu, You and Wang, "Optimizing
Sparse Matrix Multiplications for Graph Neural Networks", LCPC 2021
<https://arxiv.org/abs/2111.00352>) predicts every format's log cost relative to the fastest. Its
pick stands unless all of these hold, and then the pick and the runner-up are timed on the matrix
itself (as cuDNN's benchmark mode times its candidate algorithms):

- the matrix serves many products (not ``single_use``) and the check is on (``$GNNKIT_SPMM_VERIFY``);
- the model's margin (runner-up's predicted log cost minus the pick's) is small, at most
  ``log(``:data:`VERIFY_WITHIN```)``: a clear call is not worth second-guessing;
- the expected saving over the run, ``products x (predicted runner-up time - predicted pick
  time)``, exceeds the check's own estimated cost (two conversions and
  ``1 + VERIFY_ROUNDS`` products of each format). Absolute times come from :class:`TimeModel`.

The model is the one of the matrix's device kind (:func:`~gnnkit.sparse.selector.current_selector`).
A device kind without one (no GPU model shipped or calibrated yet) gets the same check widened to
every usable format, when the matrix serves many products and the check is on; otherwise
:data:`~gnnkit.sparse.selector.NO_MODEL_DEFAULT` (torch's CSR: cuSPARSE on CUDA), except for the
backward product of a single-use matrix (a sampled block), which takes a format that multiplies by
``A^T`` from ``A``'s entries (PyG's backward), since building ``A^T`` for one product costs a sort
(not in deterministic mode on a GPU, where that scatter-add sorts instead). A single-use matrix
serves many products too when its choice is ``shared``: kept for every matrix of its size class
(:class:`~gnnkit.models.sparse_conv.BatchPlans`, the blocks of one layer step after step), the
timing of every usable format on the first one is paid once per size class, as cuDNN's benchmark
mode times once per shape; the timed product is a synced wall time (the current stream's), host
work and the step's conversion included (which bound a sampled step on a GPU), with features of
the layer's dtype (a 16-bit run times in 16 bits, and keeps its own plans). Its backward is timed
as a step pays it: the transpose-free formats from ``A``'s entries, the others with ``A^T`` sorted
first (the transpose-free one stays unless another beats it beyond noise). With a model the
single-use rule stands (no check): on the 2-core CPU the shipped model was trained on, timing the
arxiv twin's sampled blocks chose what the model picks for them (native CSR both ways, ``A^T``
sorted), so a check would only add its cost.

A timed runner-up replaces the pick only when faster by more than :data:`CHECK_NOISE` (the
conversion amortised over the run's products), and only if a second timing of the two confirms it
(:func:`_confirmed`): a process's first products can run slow for a while (on the 2-core CPU,
the arxiv twin's normalised adjacency at width 128 took about 75 ms a product for a format's first
two to four, then 48, likely the heap still growing under its 90 MB outputs), so a format timed
only then lost to one timed after (a quarter of the decisions of a training run's first step). The
fastest of both timings decides. Within noise the model's pick stays, and equal
predictions resolve in the fixed order of :data:`~gnnkit.sparse.formats.FORMATS`. So ``auto``
gives the same choice run to run wherever it does not time, and wherever timing finds no clear
winner. :func:`decide` is the one code path: ``auto`` (:func:`~gnnkit.sparse.selector.choose_format`)
takes its :attr:`Decision.choice`, ``gnnkit formats explain`` prints the whole :class:`Decision`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats import FORMATS
from gnnkit.sparse.measure import (
    AMORTIZE_STEPS,
    FormatTiming,
    measure_backward,
    measure_formats,
)
from pipeline.env_switch import switch

#: The check may run only when the runner-up's predicted cost is within this factor of the pick's.
VERIFY_WITHIN = 1.5
#: Timed rounds (after one warm-up) of the check.
VERIFY_ROUNDS = 3
#: A timed runner-up must beat the pick's amortised cost by more than this fraction to replace it.
CHECK_NOISE = 0.10
VERIFY_ENV = "GNNKIT_SPMM_VERIFY"

#: ``measure_formats``-like callable: ``(adj, width, formats, repeats) -> {format: FormatTiming}``.
Timer = Callable[[Adjacency, int, list[str], int], dict[str, FormatTiming]]


@dataclass(frozen=True)
class RunLength:
    """How many products a matrix will serve in this run, per pass and width.

    Attributes:
        epochs: Training epochs.
        calls_per_epoch: Products per epoch at one width (training steps plus evaluations).
    """

    epochs: int
    calls_per_epoch: int = 1

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.calls_per_epoch < 1:
            raise ValueError(f"RunLength: epochs and calls_per_epoch must be >= 1, got {self.epochs}, "
                             f"{self.calls_per_epoch}")

    @property
    def products(self) -> int:
        return self.epochs * self.calls_per_epoch


#: Assumed when nobody said how long the run is: the amortisation the model's labels assume.
DEFAULT_RUN = RunLength(AMORTIZE_STEPS, 1)

_run: RunLength | None = None


def set_run_length(run: RunLength | None) -> RunLength | None:
    """Tell ``auto`` how long the coming run is (``None``: unknown, :data:`DEFAULT_RUN`); returns the
    previous setting. :class:`~gnnkit.module.NodeClassifier` sets it when fitting starts."""
    global _run
    previous, _run = _run, run
    return previous


def current_run_length() -> RunLength:
    """The run length ``auto`` plans for."""
    return _run if _run is not None else DEFAULT_RUN


@dataclass(frozen=True)
class TimeModel:
    """Absolute time estimates for the check's cost/benefit: the fastest format's product takes
    ``overhead_s + s_per_nnz_width * nnz * width``; a format's conversion ``convert_s_per_nnz * nnz``.

    The defaults are :func:`gnnkit.sparse.calibrate.fit_time_model` of the shipped model's corpus
    (1,200 samples on 2 x86 threads, ``bench/results/formats_labels.jsonl``); ``gnnkit formats
    calibrate`` stores this machine's in the model (``meta["time_model"]``).
    """

    s_per_nnz_width: float = 4.2e-11
    overhead_s: float = 1.6e-5
    convert_s_per_nnz: dict[str, float] = field(default_factory=lambda: {
        "csr": 3.0e-10, "coo": 5.0e-8, "csc": 1.5e-9, "gather_scatter": 1.4e-10, "segment": 9.2e-11,
        "native_csr": 7.1e-10, "native_sell": 6.7e-9, "bsr4": 3.8e-8, "bsr16": 3.0e-8, "dense": 1.6e-8})

    def best_product_s(self, adj: Adjacency, width: int) -> float:
        """Estimated seconds of one product in the fastest format."""
        return self.overhead_s + self.s_per_nnz_width * adj.nnz * width

    def convert_s(self, name: str, adj: Adjacency) -> float:
        """Estimated seconds to convert ``adj`` to ``name`` (the largest known rate if unknown)."""
        rate = self.convert_s_per_nnz.get(name, max(self.convert_s_per_nnz.values(), default=0.0))
        return rate * adj.nnz

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> TimeModel:
        """The model's ``meta["time_model"]`` if it has one, else the defaults."""
        data = meta.get("time_model")
        if not isinstance(data, dict):
            return cls()
        default = cls()
        return cls(float(data.get("s_per_nnz_width", default.s_per_nnz_width)),
                   float(data.get("overhead_s", default.overhead_s)),
                   {**default.convert_s_per_nnz, **{str(k): float(v)
                                                    for k, v in data.get("convert_s_per_nnz", {}).items()}})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    """What ``auto`` chose for one matrix, pass and width, and why.

    Attributes:
        choice: The format ``auto`` uses.
        pick: The model's pick.
        reason: One line: why ``choice`` (and why the check ran or not).
        scores: Predicted log cost relative to the fastest, for every usable format, best first.
        checked: Whether the pick and the runner-up were timed on the matrix.
        runner_up: The usable format predicted next best (``None`` if there is none).
        margin: ``scores[runner_up] - scores[pick]`` (``None`` without a runner-up).
        products: Products the run is expected to make with this choice.
        expected_saving_s: ``products x`` predicted time difference pick vs runner-up.
        check_cost_s: Estimated seconds of the check.
        timings_s: Measured amortised seconds per product of the timed formats (when checked).
        width: Feature width.
        transpose: Whether this is the backward matrix ``A^T``.
        device: The device kind of the matrix, whose model spoke.
        model: That model's file (``"set in code"`` for :func:`~gnnkit.sparse.selector.set_selector`),
            ``None`` when the device kind has no model.
    """

    choice: str
    pick: str
    reason: str
    scores: dict[str, float]
    checked: bool = False
    runner_up: str | None = None
    margin: float | None = None
    products: int = 0
    expected_saving_s: float = 0.0
    check_cost_s: float = 0.0
    timings_s: dict[str, float] = field(default_factory=dict)
    width: int = 0
    transpose: bool = False
    device: str = "cpu"
    model: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fastest(measured: dict[str, float]) -> str:
    """The format of least measured time (ties in the order of :data:`~gnnkit.sparse.formats.FORMATS`)."""
    return min(measured, key=lambda n: (measured[n], _order(n)))


def _beats(measured: dict[str, float], other: str, keep: str) -> bool:
    """Whether ``other`` took under ``1 - CHECK_NOISE`` of ``keep``'s time: the one rule by which a
    timed format replaces the one ``auto`` keeps."""
    return measured[other] < (1 - CHECK_NOISE) * measured[keep]


def _confirmed(time: Callable[[list[str]], dict[str, float]], names: list[str], keep: str) -> dict[str, float]:
    """Seconds per format of ``names`` by ``time``, with ``keep`` and the fastest timed again where
    that one :func:`_beats` ``keep``: each then keeps the faster of its two times.

    Args:
        time: Times the formats it is given.
        names: The formats to time.
        keep: The format that stays unless beaten (the model's pick, the default).
    """
    measured = time(names)
    if keep not in measured:
        return measured
    best = _fastest(measured)
    if not _beats(measured, best, keep):
        return measured
    again = time([keep, best])
    return {n: min(t, again.get(n, math.inf)) for n, t in measured.items()}


def _order(name: str) -> int:
    names = list(FORMATS)
    return names.index(name) if name in names else len(names)


def verify_enabled(verify: bool | None) -> bool:
    """``verify`` if given, else ``$GNNKIT_SPMM_VERIFY`` (on unless set off: :func:`pipeline.env_switch.switch`)."""
    if verify is not None:
        return verify
    return switch(VERIFY_ENV, True)


#: Seconds of rounds (up to 10) the timing of a single-use size class takes at least: its products
#: take microseconds, and in the first steps of a run a prefetching thread competes for the host.
SHARED_MIN_S = 0.02


def _timer(adj: Adjacency, width: int, formats: list[str], repeats: int,
           dtype: torch.dtype = torch.float32) -> dict[str, FormatTiming]:
    return measure_formats(adj, width, formats, repeats=repeats, min_seconds=SHARED_MIN_S if adj.single_use else 0.0,
                           dtype=dtype)


def _backward_timer(adj: Adjacency, width: int, formats: list[str], repeats: int,
                    dtype: torch.dtype = torch.float32) -> dict[str, float]:
    return measure_backward(adj, width, formats, repeats=repeats, min_seconds=SHARED_MIN_S, dtype=dtype)


def _saving_and_cost(adj: Adjacency, width: int, costs: dict[str, float], pick: str, rival: str, run: RunLength,
                     times: TimeModel) -> tuple[float, float]:
    """Expected saving of the check over the run (``products x`` predicted time difference) and its
    estimated cost (both conversions, ``1 + VERIFY_ROUNDS`` products of each), in seconds."""
    best = times.best_product_s(adj, width)
    t_pick, t_rival = best * math.exp(costs[pick]), best * math.exp(costs[rival])
    saving = run.products * abs(t_rival - t_pick)
    cost = times.convert_s(pick, adj) + times.convert_s(rival, adj) + (1 + VERIFY_ROUNDS) * (t_pick + t_rival)
    return saving, cost


def decide(adj: Adjacency, width: int, transpose: bool = False, verify: bool | None = None,
           run: RunLength | None = None, selector: Any = None, timer: Timer | None = None,
           shared: bool = False, dtype: torch.dtype = torch.float32) -> Decision:
    """The format ``auto`` uses for ``adj @ X`` (or ``adj^T @ X``), with the reasons.

    Args:
        adj: The matrix.
        width: Feature width.
        transpose: Decide for ``adj^T`` (the backward pass).
        verify: Allow the on-matrix check (default: :func:`verify_enabled`).
        run: The run's length (default: :func:`current_run_length`).
        selector: The model (default: :func:`~gnnkit.sparse.selector.current_selector` of the
            matrix's device kind).
        timer: Times formats on the matrix (default: :func:`~gnnkit.sparse.measure.measure_formats`).
        shared: The decision serves every single-use matrix of ``adj``'s size class, not ``adj``
            alone: without a model, the usable formats are then timed on it (see the module's notes).
        dtype: Dtype of the features, which the timing draws its input in.

    Returns:
        The :class:`Decision`; its ``choice`` is what ``auto`` uses.
    """
    from gnnkit.sparse.selector import current_selector, device_kind, usable

    kind = device_kind(adj.device)
    selector = selector or current_selector(kind)
    run = run or current_run_length()
    usable_formats = [n for n in FORMATS if usable(FORMATS[n], adj)]  # each format's check once
    timer = timer or functools.partial(_timer, dtype=dtype)
    if selector is None:
        return _without_model(adj, width, transpose, verify, run, kind, usable_formats, timer, shared, dtype)
    costs = selector.costs(adj, width, transpose)
    pick = selector.pick(costs, lambda name: name in usable_formats)
    ranked = sorted((n for n in costs if n in usable_formats), key=lambda n: (costs[n], _order(n)))
    scores = {n: costs[n] for n in ranked}
    base = {"pick": pick, "scores": scores, "width": int(width), "transpose": transpose, "products": run.products,
            "device": kind, "model": str(selector.meta.get("path", "set in code"))}
    rivals = [n for n in ranked if n != pick]
    if pick not in costs or not rivals:
        return Decision(choice=pick, reason="only usable format", **base)
    rival = rivals[0]
    margin = costs[rival] - costs[pick]
    saving, cost = _saving_and_cost(adj, width, costs, pick, rival, run, TimeModel.from_meta(selector.meta))
    base.update(runner_up=rival, margin=margin, expected_saving_s=saving, check_cost_s=cost)
    if not verify_enabled(verify):
        return Decision(choice=pick, reason="model's pick (on-matrix check turned off)", **base)
    if adj.single_use or adj.nnz == 0:
        return Decision(choice=pick, reason="model's pick (single-use matrix: one product cannot repay a check)",
                        **base)
    if margin > math.log(VERIFY_WITHIN):
        return Decision(choice=pick, reason=f"model's pick (clear margin: runner-up {rival} predicted "
                                            f"{math.exp(margin):.2f}x slower)", **base)
    if saving <= cost:
        return Decision(choice=pick, reason=f"model's pick (expected saving {saving:.3g} s over {run.products} "
                                            f"products <= check cost {cost:.3g} s)", **base)
    measured = _confirmed(lambda names: _time_formats(adj, width, transpose, names, run, timer), [pick, rival], pick)
    base.update(checked=True, timings_s=measured)
    if pick not in measured or rival not in measured:
        return Decision(choice=pick, reason="model's pick (the check could not time both formats)", **base)
    ratio = measured[rival] / measured[pick]
    if _beats(measured, rival, pick):
        return Decision(choice=rival, reason=f"timed: runner-up {rival} took {ratio:.2f}x the time of the model's "
                                             f"pick {pick} (beyond {CHECK_NOISE:.0%} noise)", **base)
    return Decision(choice=pick, reason=f"timed: model's pick kept (runner-up {rival} took {ratio:.2f}x its time; "
                                        f"a switch needs < {1 - CHECK_NOISE:.2f}x)", **base)


def _time_formats(adj: Adjacency, width: int, transpose: bool, names: list[str], run: RunLength,
                  timer: Timer) -> dict[str, float]:
    """Measured seconds per product of ``names`` on ``adj`` (or ``adj^T``), conversion amortised over
    the run (a single-use matrix's over its one product: each step's matrix converts anew)."""
    matrix = adj.t() if transpose else adj
    timings = timer(matrix, width, names, VERIFY_ROUNDS)
    products = 1 if adj.single_use else run.products
    return {n: t.cost(products) for n, t in timings.items()}


def _transpose_free(adj: Adjacency, usable_formats: list[str]) -> str | None:
    """The first usable format that multiplies by ``A^T`` from ``A``'s own entries, unless deterministic
    algorithms are asked for on a GPU (torch's scatter-add then sorts its indices, the very cost it
    would avoid, while cuSPARSE's CSR product is deterministic as it is); else None."""
    if adj.device.type == "cuda" and torch.are_deterministic_algorithms_enabled():
        return None
    return next((n for n in usable_formats if FORMATS[n].transpose_free), None)


def _without_model(adj: Adjacency, width: int, transpose: bool, verify: bool | None, run: RunLength, kind: str,
                   usable_formats: list[str], timer: Timer, shared: bool = False,
                   dtype: torch.dtype = torch.float32) -> Decision:
    """``auto`` on a device kind with no model: time every usable format on a matrix that serves
    many products, itself or as the first of a ``shared`` size class (as cuDNN's benchmark mode
    does), else keep the default format."""
    from gnnkit.sparse.selector import NO_MODEL_DEFAULT

    default = NO_MODEL_DEFAULT if NO_MODEL_DEFAULT in usable_formats else usable_formats[0]
    missing = f"no selector model for {kind} ('gnnkit formats calibrate --device {kind}' makes one)"
    base = {"pick": default, "scores": {}, "width": int(width), "transpose": transpose, "products": run.products,
            "device": kind, "model": None}
    if len(usable_formats) < 2:
        return Decision(choice=default, reason=f"only usable format; {missing}", **base)
    free = _transpose_free(adj, usable_formats) if transpose and adj.single_use else None
    if free is not None:
        if shared and verify_enabled(verify) and adj.nnz:
            return _time_backward(adj, width, usable_formats, free, missing, base, dtype)
        return Decision(choice=free, reason=f"{missing}; single-use matrix: {free} multiplies by A^T from A's "
                                            f"entries (A^T would be sorted for one product)", **base)
    # the check takes a conversion and 1 + VERIFY_ROUNDS products of every format: a run that makes
    # fewer products than that in all cannot repay it (a shared choice is exempt: it serves the
    # matrices of its size class step after step, which the run's length per matrix does not count)
    too_short = not shared and run.products < len(usable_formats) * (1 + VERIFY_ROUNDS)
    check_on = verify_enabled(verify)
    one_product = adj.single_use and not shared
    if not check_on or one_product or adj.nnz == 0 or too_short:
        why = ("on-matrix check turned off" if not check_on else
               f"a run of {run.products} products" if too_short else
               "single-use matrix" if one_product else "no entries")
        return Decision(choice=default, reason=f"{missing}; {why}: default {default}", **base)
    measured = _confirmed(lambda names: _time_formats(adj, width, transpose, names, run, timer), usable_formats,
                          default)
    base.update(checked=True, timings_s=measured)
    if default not in measured:
        return Decision(choice=default, reason=f"{missing}; the check could not time {default}", **base)
    best = _fastest(measured)
    if _beats(measured, best, default):
        return Decision(choice=best, reason=f"{missing}; timed every usable format: {best} took "
                                            f"{measured[best] / measured[default]:.2f}x the time of {default}", **base)
    return Decision(choice=default, reason=f"{missing}; timed every usable format: default {default} kept "
                                           f"(best {best} within {CHECK_NOISE:.0%})", **base)


def _time_backward(adj: Adjacency, width: int, usable_formats: list[str], free: str, missing: str,
                   base: dict[str, Any], dtype: torch.dtype = torch.float32) -> Decision:
    """The backward format of a single-use size class without a model: every usable format timed as
    a step pays it (:func:`~gnnkit.sparse.measure.measure_backward`: the transpose-free ones from
    ``A``'s entries, the others with ``A^T`` sorted first), the transpose-free ``free`` kept unless
    another is faster beyond :data:`CHECK_NOISE`."""
    measured = _confirmed(lambda names: _backward_timer(adj, width, names, VERIFY_ROUNDS, dtype=dtype),
                          usable_formats, free)
    base = {**base, "pick": free, "checked": True, "timings_s": measured}
    if free not in measured:  # the GPU had no memory for it
        return Decision(choice=free, reason=f"{missing}; the check could not time {free}", **base)
    best = _fastest(measured)
    if _beats(measured, best, free):
        return Decision(choice=best, reason=f"{missing}; timed every usable format for the size class's backward "
                                            f"(A^T sorted where needed): {best} took "
                                            f"{measured[best] / measured[free]:.2f}x the time of {free}", **base)
    return Decision(choice=free, reason=f"{missing}; timed every usable format for the size class's backward: "
                                        f"{free}, which multiplies by A^T from A's entries, kept (best {best} "
                                        f"within {CHECK_NOISE:.0%})", **base)

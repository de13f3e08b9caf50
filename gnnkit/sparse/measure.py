"""Timing SpMM formats on one matrix: the measurements the selector learns from.

A format's cost for a training run is its product time plus its one-off conversion time
amortised over :data:`AMORTIZE_STEPS` products (the conversion is cached on the
:class:`~gnnkit.sparse.Adjacency`, so a training run pays it once). The forward product ``A @ X``
and the backward product ``A^T @ dY`` are separate measurements, because :func:`~gnnkit.sparse.spmm`
chooses their formats separately.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from gnnkit.sparse.adjacency import Adjacency
from gnnkit.sparse.formats import FORMATS

#: Products a conversion is amortised over when labelling (e.g. 50 epochs x 2 layers).
AMORTIZE_STEPS = 100


@dataclass(frozen=True)
class FormatTiming:
    """Measured seconds of one format on one matrix and width.

    Attributes:
        convert_s: One-off conversion from CSR.
        spmm_s: One product (the fastest of ``repeats``).
        repeats: Number of timed products behind ``spmm_s``.
    """

    convert_s: float
    spmm_s: float
    repeats: int

    def cost(self, amortize: int = AMORTIZE_STEPS) -> float:
        """Product time plus the conversion spread over ``amortize`` products."""
        return self.spmm_s + self.convert_s / amortize

    def as_dict(self) -> dict[str, Any]:
        return {"convert_s": self.convert_s, "spmm_s": self.spmm_s, "repeats": self.repeats}


def synced_seconds(fn: Callable[[], Any], device: torch.device | None = None) -> float:
    """Wall time of ``fn()``, waiting for the queued work of ``device``'s current CUDA stream (default:
    the current device's; none for a CPU ``device``) before and after (asynchronous kernels); other
    streams' work, such as a prefetching thread's, is not waited for."""
    cuda = (torch.cuda.is_available() and torch.cuda.is_initialized()
            and (device is None or torch.device(device).type == "cuda"))
    sync = torch.cuda.current_stream(device).synchronize if cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def measure_formats(
    adj: Adjacency,
    width: int,
    formats: list[str] | None = None,
    repeats: int = 3,
    slow_factor: float = 4.0,
    seed: int = 0,
    max_rounds: int = 10,
    min_seconds: float = 0.2,
    dtype: torch.dtype = torch.float32,
) -> dict[str, FormatTiming]:
    """Time every applicable format's conversion and product ``adj @ X`` for ``X [num_cols, width]``.

    Rounds are interleaved (every format once per round) and a format's time is its fastest
    product: on a shared machine, interference only ever adds time, and interleaving spreads it
    over all formats instead of penalising whichever ran during a burst. At least ``repeats``
    rounds follow the warm-up, more (up to ``max_rounds``) while they take under ``min_seconds``
    in all, so fast products get more samples. From the second timed round on, formats whose
    fastest time is ``slow_factor`` times the best are dropped (their time stands), which keeps
    labelling fast without changing the winner; a format that lost one round to the scheduler
    (threads parked behind another process) is thus timed again before it can be dropped. The
    transpose (except of a single-use matrix) and the COO row array are built beforehand, since
    every training run needs them anyway; conversions are freed at the end.

    Args:
        adj: The matrix.
        width: Feature width.
        formats: Names to time (default: all registered).
        repeats: Least timed rounds after the warm-up round.
        slow_factor: Threshold for dropping clearly losing formats from the repeats.
        seed: Seed of the random input.
        max_rounds: Most timed rounds.
        min_seconds: Keep adding rounds (up to ``max_rounds``) until this much time has passed.
        dtype: Dtype of the random input (a 16-bit run's products are timed in 16 bits).

    Returns:
        ``{format: FormatTiming}`` for the applicable formats (native ones only when built).
    """
    names = [n for n in (list(FORMATS) if formats is None else formats)
             if FORMATS[n].runs_on(adj.device) and FORMATS[n].applicable(adj)
             and FORMATS[n].selectable(adj.device)]  # native ones only where built
    x = _random_input(adj.num_cols, width, adj.device, seed, dtype)
    adj.rows()
    if not adj.single_use:  # a single-use matrix's backward takes no transpose where it can help it
        adj.t()
    convert: dict[str, float] = {}
    fastest: dict[str, float] = {}
    counts: dict[str, int] = {}
    try:
        with torch.no_grad():
            for name in list(names):
                build = functools.partial(FORMATS[name].prepare, adj, x.dtype)
                # a single-use matrix builds its format every step: its second build is timed, not the process's first
                for _ in range(2 if adj.single_use else 1):
                    adj.uncache(f"format:{name}:")
                    if not _fits(adj, name, build, convert):
                        names.remove(name)
                        break
            for name in list(names):  # warm-up round
                if _fits(adj, name, lambda: FORMATS[name](adj, x), fastest):
                    counts[name] = 1
                else:
                    names.remove(name)
            products = {name: (lambda name=name: FORMATS[name](adj, x)) for name in names}
            _timed_rounds(products, fastest, counts, repeats, max_rounds, min_seconds, adj.device, slow_factor)
    finally:
        for name in names:
            adj.uncache(f"format:{name}:")
    return {n: FormatTiming(convert[n], fastest[n], counts[n]) for n in names}


def measure_backward(adj: Adjacency, width: int, formats: list[str], repeats: int = 3, seed: int = 0,
                     max_rounds: int = 10, min_seconds: float = 0.0,
                     dtype: torch.dtype = torch.float32) -> dict[str, float]:
    """Seconds of the backward product ``A^T @ G`` of a single-use matrix per format, as a training
    step pays it: formats that multiply by ``A^T`` from ``A``'s own entries do so, the others build
    ``A^T`` first (a sort; a single-use matrix has no transpose to reuse) and multiply by it. Each
    time is the fastest of the rounds after a warm-up (``repeats``, more up to ``max_rounds`` while
    they take under ``min_seconds``), rounds interleaved as in :func:`measure_formats`; a format
    the GPU has no memory for is left out.

    Args:
        adj: The matrix (single-use: its transpose is dropped after each product).
        width: Feature width of ``G``.
        formats: Names to time (each must hold ``adj``).
        repeats: Least timed rounds.
        seed: Seed of the random ``G``.
        max_rounds: Most timed rounds.
        min_seconds: Keep adding rounds (up to ``max_rounds``) until this much time has passed.
        dtype: Dtype of ``G``.
    """
    grad = _random_input(adj.num_rows, width, adj.device, seed, dtype)

    def product(name: str) -> None:
        fmt = FORMATS[name]
        if fmt.transpose_free:
            fmt.transposed(adj, grad)
            return
        try:
            fmt(adj.t(), grad)
        finally:
            adj.drop_transpose()  # the next step's matrix builds its own

    fastest: dict[str, float] = {}
    with torch.no_grad():
        names = [n for n in formats if _fits(adj, n, lambda n=n: product(n), fastest)]  # warm-up
        products = {name: (lambda name=name: product(name)) for name in names}
        _timed_rounds(products, fastest, dict.fromkeys(names, 1), repeats, max_rounds, min_seconds, adj.device)
    return {n: fastest[n] for n in names}


def _random_input(rows: int, width: int, device: torch.device, seed: int,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A seeded ``[rows, width]`` standard normal input in ``dtype``, drawn where it is used (no host copy)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(rows, width, generator=gen, device=device, dtype=dtype)


def _timed_rounds(products: dict[str, Callable[[], Any]], fastest: dict[str, float], counts: dict[str, int],
                  repeats: int, max_rounds: int, min_seconds: float, device: torch.device,
                  slow_factor: float = math.inf) -> None:
    """Rounds of one product per format synced on ``device``, interleaved, after a warm-up whose
    times ``fastest`` holds: each format keeps its fastest time (and ``counts`` its products); at
    least ``repeats`` rounds, more up to ``max_rounds`` while they take under ``min_seconds``. From
    the second round on, formats ``slow_factor`` times the best drop out (their time stands)."""
    active, start = list(products), time.perf_counter()
    for round_ in range(max_rounds):
        if round_ >= repeats and time.perf_counter() - start >= min_seconds:
            break
        for name in active:
            fastest[name] = min(fastest[name], synced_seconds(products[name], device))
            counts[name] += 1
        if round_ >= 1:  # two timed products first: one scheduling hiccup must not drop a format
            best = min(fastest.values(), default=0.0)
            active = [n for n in active if fastest[n] <= slow_factor * best]


def _fits(adj: Adjacency, name: str, fn: Callable[[], Any], into: dict[str, float]) -> bool:
    """Time ``fn`` (:func:`synced_seconds`) into ``into[name]``; False (and the format's conversion
    dropped) if the GPU ran out of memory for it: a format too large for what is free is no candidate."""
    try:
        into[name] = synced_seconds(fn, adj.device)
    except torch.cuda.OutOfMemoryError:
        adj.uncache(f"format:{name}:")
        return False
    return True


def best_format(timings: dict[str, FormatTiming], amortize: int = AMORTIZE_STEPS) -> str:
    """The format of least amortised cost."""
    return min(timings, key=lambda n: timings[n].cost(amortize))

"""Where a training step's time goes: a Lightning callback that splits a window of steps into phases.

A step is cut at Lightning's hooks into ``data`` (the previous step's end to this one's start:
fetching the batch, which for sampled training is sampling and gathering, and moving it to the
device), ``forward`` (the training step, up to ``on_before_backward``), ``backward`` and
``optimizer`` (the update and the hooks that end the step). For each phase it records the host's
wall time and, on a GPU, the time between CUDA events recorded at the same cut points (the GPU's
own timeline, idle gaps included) and the step's host synchronisations (the training thread's
and its backward pass's, gnnkit's native kernels' included: their bindings hand C++ warnings to
Python), counted with ``torch.cuda.set_sync_debug_mode("warn")`` and traced to the source lines
that asked for them (:func:`sync_site`). A step whose
host time far exceeds its GPU time is held by the host (launches, syncs, Python); a GPU that is
busy all step is the bottleneck.

After that window it runs ``torch.profiler`` over a few more steps and keeps the operators that
took the most device time (host time on the CPU), so one run answers which kernels to work on.
It measures one epoch (the first by default; ``epoch`` picks another, e.g. a replay epoch of a
reuse schedule), so with several epochs a median epoch time is not disturbed.

    gnnkit run recipes/sage_synthetic_products.yaml --trainer.callbacks+=gnnkit.step_profile.StepProfile \\
        --trainer.callbacks.init_args.steps 30

``report.json`` then has ``step_profile`` (milliseconds a step, each phase's median) and the run
folder ``step_profile.txt`` (the profiler's table).
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import lightning.pytorch as pl
import torch

from pipeline import atomic_write_text, log

#: The phases of a step, in order: they end at ``on_train_batch_start``, ``on_before_backward``,
#: ``on_after_backward`` and ``on_train_batch_end``.
PHASES = ("data", "forward", "backward", "optimizer")
#: How torch's sync debug mode starts a warning of a sync ("called a synchronizing CUDA operation"); its
#: one-off notice on entering the mode ("... does not yet detect all synchronizing operations") is none.
SYNC_WARNING = "called a synchronizing"


#: Sync sites kept in the summary, the most frequent first.
SYNC_SITES = 8
NAME_WIDTH_CAP = 120  # the table shows operator names whole up to this width (CUDA kernel names run longer)
_ROOT = Path(__file__).resolve().parents[1]  # the repository (gnnkit/ and pipeline/)
_SKIPPED = (str(Path(warnings.__file__).resolve()), str(Path(__file__).resolve()),
            str(Path(torch.__file__).resolve().parent) + os.sep)  # the warning's machinery, this file, torch's
# Python (its folder with the separator: torch_geometric's files are not torch's)


def sync_site(frame: FrameType | None) -> str:
    """Where a host sync was asked for: the innermost Python frame from ``frame`` outwards that is
    not the warning's machinery, this module or torch's own Python (``path:line function``, the
    path relative to the repository, or to ``site-packages`` for an installed package), or
    ``"(no Python frame)"`` for a sync inside a C++ autograd kernel."""
    while frame is not None:
        shown = _shown_path(frame.f_code.co_filename)
        if shown is not None:
            return f"{shown}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return "(no Python frame)"


@functools.lru_cache(maxsize=512)
def _shown_path(filename: str) -> str | None:
    """How :func:`sync_site` names a source file (``None``: a file it looks past); cached, since a
    sync inside the timed window must not cost the host a walk of the file system."""
    path = Path(filename).resolve()
    if str(path).startswith(_SKIPPED):
        return None
    installed = [i for i, part in enumerate(path.parts) if part in ("site-packages", "dist-packages")]
    if installed:  # an installed package's: from its package folder
        return str(Path(*path.parts[installed[-1] + 1:]))
    return str(path.relative_to(_ROOT) if path.is_relative_to(_ROOT) else Path(*path.parts[-2:]))


def _in_backward() -> bool:
    """Whether this thread is running an autograd graph task (a ``backward`` pass) now."""
    task_id = getattr(torch._C, "_current_graph_task_id", None)
    return task_id is not None and task_id() != -1


class StepProfile(pl.Callback):
    """Times the phases of ``steps`` training steps after ``skip`` warm-up steps, then profiles
    ``profiled_steps`` more with ``torch.profiler`` (0: no profiler).

    Args:
        steps: Steps whose phases are timed.
        skip: Steps of the epoch left out first (warm-up: allocator, cuSPARSE plans, caches); at
            least 1, since the first timed step's data phase starts where the step before it ended.
        profiled_steps: Steps run under ``torch.profiler`` after the timed ones.
        top: Operators kept from the profiler's table.
        epoch: The epoch measured (0: the first).
    """

    def __init__(self, steps: int = 30, skip: int = 10, profiled_steps: int = 5, top: int = 15,
                 epoch: int = 0) -> None:
        for name, value, low in (("steps", steps, 1), ("skip", skip, 1), ("profiled_steps", profiled_steps, 0),
                                 ("top", top, 1), ("epoch", epoch, 0)):
            if value < low:
                raise ValueError(f"StepProfile.{name}: expected an integer >= {low}, got {value!r}")
        self.steps, self.skip, self.profiled_steps, self.top, self.epoch = steps, skip, profiled_steps, top, epoch
        self.rows: list[dict[str, Any]] = []  # per timed step: phase -> host ms, gpu:phase -> GPU ms, ...
        self.operators: list[dict[str, Any]] = []
        self.table = ""
        self._cuda: torch.device | None = None
        self._seen = 0  # training steps begun
        self._marks: list[tuple[float, Any, int]] = []  # (host clock, CUDA event, syncs so far) at each cut
        self._syncs = 0  # the training thread's host syncs counted so far
        self._sync_sites: Counter[str] = Counter()  # where they were asked for (sync_site)
        self._catcher: warnings.catch_warnings | None = None
        self._profiler: torch.profiler.profile | None = None
        self._step_ms: list[float] = []  # each step of the measured epoch, host clock (the first from its start)
        self._since = 0.0  # where the next step's time starts: the last step's end, less this callback's work

    # -- the window -------------------------------------------------------------------------------

    def _timing(self) -> bool:
        return self.skip <= self._seen - 1 < self.skip + self.steps

    def _profiling(self) -> bool:
        return self.skip + self.steps <= self._seen - 1 < self.skip + self.steps + self.profiled_steps

    def _mark(self) -> None:
        """A cut point: the host clock, a CUDA event on the current stream, the syncs so far."""
        event = None
        if self._cuda is not None:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
        self._marks.append((time.perf_counter(), event, self._syncs))

    def _count_syncs(self, on: bool) -> None:
        """Count the step's host syncs from here (``on``) or stop. torch's sync debug mode and
        Python's warnings are the process's: a prefetching thread's syncs (sampling the next batches
        meanwhile, :mod:`gnnkit.data.prefetch`) are left out, as they do not hold the step. The
        step's backward pass counts wherever it runs: on a GPU, autograd runs it on a device thread
        of its own while the training thread waits, and the ops of Python ``autograd.Function``
        backwards (gnnkit's SpMM) warn there."""
        if self._cuda is None:
            return
        if on and self._catcher is None:
            self._catcher = warnings.catch_warnings()
            self._catcher.__enter__()  # restores the filters and showwarning on exit
            warnings.simplefilter("always")
            training = threading.current_thread()

            def count(message: Any, *args: Any, **kwargs: Any) -> None:
                if (threading.current_thread() is training or _in_backward()) and SYNC_WARNING in str(message):
                    self._syncs += 1
                    self._sync_sites[sync_site(sys._getframe(1))] += 1

            warnings.showwarning = count
            torch.cuda.set_sync_debug_mode("warn")
        elif not on and self._catcher is not None:
            torch.cuda.set_sync_debug_mode("default")
            self._catcher.__exit__(None, None, None)
            self._catcher = None

    # -- Lightning hooks --------------------------------------------------------------------------

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        device = pl_module.device
        self._cuda = device if device.type == "cuda" else None

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            self._step_ms, self._since = [], time.perf_counter()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if trainer.current_epoch != self.epoch:
            return
        self._seen += 1
        if self._timing():
            self._mark()
        elif self._profiling() and self._profiler is None:
            self._start_profiler()

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        self._mark_within(trainer)

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._mark_within(trainer)

    def _mark_within(self, trainer: pl.Trainer) -> None:
        """A cut inside a step (forward | backward | optimizer) of the timed window."""
        if trainer.current_epoch == self.epoch and self._timing():
            self._mark()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if trainer.current_epoch != self.epoch:
            return
        self._step_ms.append(1e3 * (time.perf_counter() - self._since))
        self._bookkeeping(trainer)
        self._since = time.perf_counter()  # the window's close and the profiler's table are no step's

    def _bookkeeping(self, trainer: pl.Trainer) -> None:
        """After a step: close it in the window, open or close the window and the profiler."""
        if self._timing():
            self._mark()
            self._close_step()
            if self._seen == self.skip + self.steps:
                self._close_window()
        elif self._profiling() and self._seen == self.skip + self.steps + self.profiled_steps:
            self._stop_profiler(trainer)
        if self._seen == self.skip:  # the window opens: the next step's data phase starts now
            self._count_syncs(True)
            self._mark()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """An epoch shorter than the window closes it where it stands, and says what it left out."""
        if trainer.current_epoch == self.epoch:
            self._close_window()
            if self._profiler is not None:
                self._stop_profiler(trainer)
            wanted = self.skip + self.steps + self.profiled_steps
            if self._seen < wanted:
                log.warning("step profile: epoch %d had %d steps, fewer than the %d asked for (skip %d, steps %d, "
                            "profiled_steps %d): %d timed, %s", self.epoch, self._seen, wanted, self.skip, self.steps,
                            self.profiled_steps, len(self.rows),
                            "a shorter profile" if self.table else "no step_profile.txt")

    # -- a step's phases ----------------------------------------------------------------------------

    def _close_step(self) -> None:
        """Turn the cut points of the step just ended into its phase times (its GPU times wait for
        the window's end, so that no step waits for the GPU); its end opens the next step's data phase."""
        marks = self._marks
        self._marks = [marks[-1]]
        if len(marks) != len(PHASES) + 1:  # a step without backward (manual optimisation, a skipped step)
            return
        row: dict[str, Any] = {}
        for phase, (begin, end) in zip(PHASES, zip(marks, marks[1:])):
            row[phase] = 1e3 * (end[0] - begin[0])
            if self._cuda is not None:
                row[f"gpu:{phase}"] = (begin[1], end[1])
                row[f"syncs:{phase}"] = end[2] - begin[2]
        self.rows.append(row)

    def _close_window(self) -> None:
        """Stop counting syncs, then read the GPU times of the window's steps (one wait, at its end)."""
        self._count_syncs(False)
        self._marks = []
        pending = [(row, key) for row in self.rows for key, value in row.items() if isinstance(value, tuple)]
        if pending:
            torch.cuda.synchronize(self._cuda)
        for row, key in pending:
            begin, end = row[key]
            row[key] = begin.elapsed_time(end)

    # -- the profiler -------------------------------------------------------------------------------

    # The profile is a by-product: a profiler that cannot start or finish (no CUPTI, say) is logged
    # and the run goes on with the phases alone.

    def _start_profiler(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self._cuda is not None:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profiler = torch.profiler.profile(activities=activities)
        try:
            profiler.__enter__()
        except RuntimeError as err:
            log.warning("step profile: torch.profiler did not start (%s); phase times only", err)
            self.profiled_steps = 0
            return
        self._profiler = profiler

    def _stop_profiler(self, trainer: pl.Trainer) -> None:
        profiler, self._profiler = self._profiler, None
        if self._cuda is not None:
            torch.cuda.synchronize(self._cuda)
        try:
            profiler.__exit__(None, None, None)
            averages = profiler.key_averages()
        except RuntimeError as err:
            log.warning("step profile: torch.profiler failed (%s); phase times only", err)
            return
        sort = "self_device_time_total" if self._cuda is not None else "self_cpu_time_total"
        ranked = sorted(averages, key=lambda e: getattr(e, sort), reverse=True)[:self.top]
        width = min(max([55, *(len(e.key) + 4 for e in ranked)]), NAME_WIDTH_CAP)  # torch cuts at width - 3
        self.table = averages.table(sort_by=sort, row_limit=self.top, max_name_column_width=width)
        self.operators = [{"name": e.key, "calls": e.count, "self_ms": round(getattr(e, sort) / 1e3, 3)}
                          for e in ranked]
        if trainer.is_global_zero:
            path = Path(trainer.default_root_dir) / "step_profile.txt"
            atomic_write_text(path, self.table + "\n")
            log.info("step profile: %s", path)

    # -- the summary ----------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """Each phase's median over the timed steps, in milliseconds (``host``; on a GPU also ``gpu``
        and ``syncs``, and ``sync_sites``: where the window's syncs were asked for, the most frequent
        first, as syncs a step), the step's, and the profiled operators."""
        epoch = {"whole_epoch": self.whole_epoch()} if len(self._step_ms) > 1 else {}
        if not self.rows:
            return {"steps": 0, **epoch}

        def medians(prefix: str) -> dict[str, float]:  # each phase's, and the whole step's
            out = {p: statistics.median(r[prefix + p] for r in self.rows) for p in PHASES}
            out["step"] = statistics.median(sum(r[prefix + p] for p in PHASES) for r in self.rows)
            return {k: round(v, 3) for k, v in out.items()}

        out: dict[str, Any] = {"epoch": self.epoch, "steps": len(self.rows), "skipped": self.skip,
                               "host_ms": medians("")}
        if self._cuda is not None:
            out["gpu_ms"], out["syncs"] = medians("gpu:"), medians("syncs:")
            sites = self._sync_sites.most_common(SYNC_SITES)
            out["sync_sites"] = {site: round(n / len(self.rows), 3) for site, n in sites}
        if self.operators:
            out["profiled_steps"] = self.profiled_steps
            out["operators"] = self.operators
        return {**out, **epoch}

    def whole_epoch(self, slowest: int = 5) -> dict[str, Any]:
        """Every step of the measured epoch on the host clock, without syncs of its own: how long the
        first took from the epoch's start (the loader's start, the first batch made with nothing ahead),
        then the others' median, mean and slowest (0-based step numbers). ``window`` is the steps
        this profile measured (``[first, end)``: timed with CUDA events and sync counting, then under
        the profiler), which run slower; its own work between steps (closing the window, the
        profiler's table) is left out. Where the phase medians times the step count fall short of
        the epoch, this says where the rest went: the first step, a few slow steps, or every step a
        little."""
        first, *steps = self._step_ms
        ranked = sorted(range(len(steps)), key=steps.__getitem__, reverse=True)[:slowest]
        count = len(self._step_ms)
        return {"steps": count, "first_ms": round(first, 3), "median_ms": round(statistics.median(steps), 3),
                "mean_ms": round(statistics.fmean(steps), 3),
                "slowest": [[i + 1, round(steps[i], 3)] for i in ranked],
                "window": [min(self.skip, count), min(self.skip + self.steps + self.profiled_steps, count)]}

    def report_info(self) -> dict[str, Any]:
        """``step_profile`` for report.json."""
        return {"step_profile": self.summary()}

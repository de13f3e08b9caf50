"""Known third-party noise, filtered only where gnnkit triggers it.

A ``gnnkit run`` printed, besides its own lines, Lightning's ``GPU available: ...`` and ``TPU
available: ...`` lines, its litlogger tip, its "``Trainer.fit`` stopped: ``max_epochs=N`` reached"
(or ``max_steps``; before gnnkit's line of that last epoch, which says why it stopped), and torch's
``LeafSpec`` deprecation warning (raised from Lightning's pytree helpers, twice per run).
:func:`quiet` hides exactly these inside a
``with`` block (or around a decorated function) and takes its own warning and log filters away
on leaving, so a user's own code and process settings are never changed, and filters that code in
the block installed for the process stay (ogb's import turns off the warnings of its background
version check, which fails after the block on a machine without internet). A resumed run also
hides, with :func:`resuming`, Lightning's warning that its checkpoint folder is not empty: it
continues in its own folder by design. A run without validation (``--trainer.limit_val_batches 0``)
hides, with :func:`unvalidated`, Lightning's warning that the best checkpoint's metric was never
logged: the run log says instead that the test takes the last weights. :func:`native_stderr_without`
drops a line that C++ writes straight to the process's standard error, past Python's warnings
(DDP's ``find_unused_parameters`` notice, which ``GnnkitStrategy`` triggers on purpose).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

#: Loggers Lightning's ``rank_zero_info`` writes through (pytorch and fabric flavours), and those of
#: its seeding and of its process group's start (on every rank).
LIGHTNING_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                     "lightning.fabric.utilities.seed", "lightning.fabric.utilities.distributed",
                     "lightning.pytorch.trainer.connectors.signal_connector")
#: Log lines dropped: hardware availability (the run log names the device), the litlogger tip, the
#: end of a fit at ``max_epochs`` or ``max_steps`` (it came before gnnkit's line of the last epoch,
#: "epoch N/M ...", which says the same: ``; stopped: max_steps=S reached``; a stop for want of
#: batches is still told), the seed (config.yaml holds it), the checkpoint restored for a resume or
#: a test (gnnkit's "resume: ... continues from ..." says the first), the process group's banners
#: (the run line names the ranks) and the notices of a SIGTERM or a Ctrl-C received (gnnkit's line
#: at the exit says so, and how to continue).
LOG_LINES = re.compile(r"(GPU|TPU|HPU) available: |💡 Tip: .*litlogger|"
                       r"`Trainer.fit` stopped: `max_(epochs|steps)=\d+` reached|"
                       r"(\[rank: \d+\] )?Seed set to |Restoring states from the checkpoint path |"
                       r"(Loaded model weights|Restored all states) from the checkpoint |"
                       r"(\[rank: \d+\] )?Initializing distributed: GLOBAL_RANK: |-{20,}\ndistributed_backend=|"
                       r"(\[rank: \d+\] )?Received SIGTERM: |\n?Detected KeyboardInterrupt, attempting graceful")
#: Warning messages dropped (regexes matched at the start of the message) and their categories.
WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", DeprecationWarning),
    # GnnkitStrategy(fixed_buckets=True) sets DDP's find_unused_parameters on purpose
    (r"find_unused_parameters=True was specified in DDP constructor, but did not find any unused", UserWarning),
    # gnnkit's sampled and graph-batch loaders deal evaluation items without repeats (gnnkit.data.eval_shards);
    # a full-graph loader holds one item, the whole graph, which every rank evaluates alike
    (r"Using `DistributedSampler` with the dataloaders. During `trainer.test\(\)`", Warning),
    # gnnkit's modules log per epoch, never per step: the logging interval is not theirs (a small dataset
    # of the user's, fewer batches than its 50, warned on every run)
    (r"The number of training batches \(\d+\) is smaller than the logging interval", Warning),
)

#: Lightning's warning when a run's checkpoint folder already holds checkpoints.
RESUME_WARNING = r"Checkpoint directory .* exists and is not empty"

#: Lightning's warning, when a run without validation saves its checkpoints, that the best
#: checkpoint's metric (gnnkit's ``val_metric``) was never logged.
UNVALIDATED_WARNING = r"`ModelCheckpoint\(monitor='val_metric'\)` could not find the monitored key"

#: DDP's C++ notice (once a process, at its first forward) that ``find_unused_parameters=True`` found
#: none: ``GnnkitStrategy(fixed_buckets=True)`` sets that switch on purpose (see its docstring).
UNUSED_PARAMETERS_NOTICE = "find_unused_parameters=True was specified in DDP constructor"

P = ParamSpec("P")
R = TypeVar("R")


class _DropLines(logging.Filter):
    """Drops the log records whose message matches :data:`LOG_LINES`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return LOG_LINES.match(record.getMessage()) is None


@contextmanager
def ignoring(patterns: tuple[tuple[str, type[Warning]], ...]) -> Iterator[None]:
    """Ignore the ``(message regex, category)`` warnings inside the block.

    On leaving, the filters are as before plus those that code in the block added for the process
    (a library's import, e.g. ogb's): ``warnings.catch_warnings`` alone would drop those too.
    """
    with warnings.catch_warnings():
        for message, category in patterns:
            warnings.filterwarnings("ignore", message=message, category=category)
        ours = list(warnings.filters)
        try:
            yield
        finally:
            added = [f for f in warnings.filters if f not in ours]
    for action, message, category, module, lineno in reversed(added):
        warnings.filterwarnings(action, _pattern(message), category, _pattern(module), lineno)


def _pattern(regex: re.Pattern[str] | str | None) -> str:
    """The text of a warning filter's message or module regex ("" for none)."""
    return "" if regex is None else getattr(regex, "pattern", regex)


@contextmanager
def quiet() -> Iterator[None]:
    """Hide Lightning's and torch's known noise inside the block; gnnkit's filters are gone after."""
    drop = _DropLines()
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    for log in loggers:
        log.addFilter(drop)
    try:
        with ignoring(WARNINGS):
            yield
    finally:
        for log in loggers:
            log.removeFilter(drop)


@contextmanager
def resuming() -> Iterator[None]:
    """Hide Lightning's "checkpoint directory exists and is not empty" warning inside the block: a
    resumed run writes its checkpoints beside the ones it resumes from."""
    with ignoring(((RESUME_WARNING, Warning),)):
        yield


@contextmanager
def unvalidated() -> Iterator[None]:
    """Hide Lightning's "could not find the monitored key" warning inside the block: a run that skips
    validation has no metric to pick a best checkpoint by, and says so in its log."""
    with ignoring(((UNVALIDATED_WARNING, Warning),)):
        yield


def quietly(function: Callable[P, R]) -> Callable[P, R]:
    """Decorator: run ``function`` inside :func:`quiet`."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with quiet():
            return function(*args, **kwargs)

    return wrapper


@contextmanager
def native_stderr_without(fragment: str) -> Iterator[None]:
    """Drop the lines holding ``fragment`` that are written to file descriptor 2 inside the block.

    C++ warnings (``TORCH_WARN`` outside a Python call) go there directly, past Python's warnings
    filters. Inside the block descriptor 2 is a pipe; a thread passes every line on to the real
    standard error as it arrives (a line without its newline yet waits for it, or for the end of
    the block), except those holding ``fragment``. Where no pipe or thread can be had, nothing is
    filtered.
    """
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        read_end, write_end = os.pipe()
    except OSError:
        os.close(saved)
        yield
        return
    relay = threading.Thread(target=_relay_lines, args=(read_end, saved, fragment.encode()), name="gnnkit-stderr",
                             daemon=True)
    try:
        relay.start()
    except RuntimeError:  # no thread to be had
        for fd in (read_end, write_end, saved):
            os.close(fd)
        yield
        return
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last writer gone (unless a child process took it): the relay ends
        relay.join(timeout=5.0)
        if not relay.is_alive():
            os.close(saved)


def _relay_lines(read_end: int, target: int, unwanted: bytes) -> None:
    """Copy lines from ``read_end`` to ``target`` until the pipe ends, without those holding ``unwanted``."""
    pending = b""
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            _write_all(target, b"".join(line + b"\n" for line in lines if unwanted not in line))
    if pending and unwanted not in pending:
        _write_all(target, pending)


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a pipe or terminal may take part of it); nothing
    when standard error itself is gone (the relay goes on reading, so writers never block)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass

"""Progress for long work: a live bar on a terminal, timestamped log lines otherwise."""

from __future__ import annotations

import logging
import os
import resource
import sys
import time
from typing import Iterable, Iterator, TypeVar

from tqdm import tqdm

log = logging.getLogger("gnnkit")
T = TypeVar("T")


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """Resident memory of this process now, in MiB (the peak where ``/proc`` is not available)."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            pages = int(handle.read().split()[1])
    except (OSError, IndexError, ValueError):
        return peak_rss_mb()
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def anonymous_rss_mb() -> float:
    """This process's anonymous resident memory in MiB (``RssAnon``: its heap and mappings, not file
    pages such as a memory-mapped cache, which ``MemAvailable`` counts as free), or all of it where
    ``/proc`` does not say."""
    held = _proc_kib("/proc/self/status", b"RssAnon:")
    return held / 1024 if held is not None else rss_mb()


def available_memory_mb() -> float | None:
    """Memory the kernel can give this process now without swapping, in MiB (``MemAvailable``;
    None where ``/proc/meminfo`` does not say)."""
    available = _proc_kib("/proc/meminfo", b"MemAvailable:")
    return available / 1024 if available is not None else None


def _proc_kib(path: str, key: bytes) -> int | None:
    """The kB figure of the line of ``path`` that starts with ``key``, or ``None``."""
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return None


class Stages:
    """Reports the stages of one job with elapsed time and peak memory.

    Args:
        job: Prefix for each line, e.g. ``"preprocess synthetic-arxiv"``.
    """

    def __init__(self, job: str) -> None:
        self.job = job
        self.start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def __call__(self, message: str) -> None:
        log.info("%s: %s [%.1fs, peak %.0f MiB]", self.job, message, self.elapsed, peak_rss_mb())

    def bar(self, items: Iterable[T], total: int, desc: str) -> Iterator[T]:
        """Iterate with a tqdm bar on a TTY, or a log line every ~10% otherwise."""
        if draws_bars():
            yield from tqdm(items, total=total, desc=f"{self.job}: {desc}", leave=False)
            return
        step = max(1, total // 10)
        for i, item in enumerate(items, 1):
            yield item
            if i % step == 0 or i == total:
                self(f"{desc} {i}/{total}")


def draws_bars() -> bool:
    """Whether progress is a bar: standard error is a terminal with a width. A pseudo-terminal of
    no size (``script`` without ``stty cols``) showed blank lines for a whole run, neither a bar nor
    the log lines given otherwise."""
    if not sys.stderr.isatty():
        return False
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except (OSError, ValueError):  # no descriptor (a replaced stream), or not a terminal after all
        return False


#: Environment variables that give a process's rank in a multi-process job, in the order Lightning
#: reads them (torchrun's ``RANK``, Lightning's own launcher's ``LOCAL_RANK``, SLURM, LSF).
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def _rank_variable() -> tuple[str, int] | None:
    """The first of :data:`RANK_VARIABLES` set to a number, and its value."""
    for name in RANK_VARIABLES:
        try:
            return name, int(os.environ[name])
        except (KeyError, ValueError):
            continue
    return None


def process_rank() -> int:
    """This process's rank in a multi-process job (0 alone), read from :data:`RANK_VARIABLES` now:
    torchrun, SLURM and Lightning's launcher (which starts the other ranks as copies of the command)
    set them. Without them, the rank Lightning's strategy has given ``rank_zero_only``: the ranks
    that ``ddp_fork`` or ``ddp_notebook`` start in a user's own ``Trainer`` are told theirs that way
    only (``gnnkit run`` refuses those strategies). Under Lightning's launcher this is the rank on
    the node (:func:`node_rank`)."""
    found = _rank_variable()
    if found is not None:
        return found[1]
    rank_zero = sys.modules.get("lightning_utilities.core.rank_zero")  # never imported for this
    return int(getattr(getattr(rank_zero, "rank_zero_only", None), "rank", 0) or 0)


def node_rank() -> int:
    """The machine of a job that Lightning's own launcher runs on several (``NODE_RANK``, set on each
    by the user), whose ranks know only their rank on the machine (``LOCAL_RANK``); 0 where a global
    rank variable (torchrun's ``RANK``, SLURM's) is set, or ``NODE_RANK`` is not."""
    found = _rank_variable()
    if found is None or found[0] != "LOCAL_RANK":
        return 0
    try:
        return int(os.environ.get("NODE_RANK", 0))
    except ValueError:
        return 0


def is_rank_zero() -> bool:
    """Whether this process is (or will be, before any process group exists) global rank 0."""
    return process_rank() == 0 and node_rank() == 0


#: ``extra=`` of a log line that every rank tells (its own partition, its own share of the seeds).
EVERY_RANK = {"every_rank": True}


class _RankLines(logging.Filter):
    """Info lines from rank 0 only, as Lightning's ``rank_zero_info``: every rank of a run logged
    the same data, run and epoch lines. A line every rank should tell (its own share of something)
    is logged with ``extra=EVERY_RANK``; warnings and errors come from every rank. A line
    from another rank is marked ``[gnnkit rank N]`` (``[gnnkit node M rank N]`` under Lightning's launcher on
    several machines, :func:`node_rank`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        rank, node = process_rank(), node_rank()
        zero = rank == 0 and node == 0
        record.gnnkit_prefix = ("[gnnkit]" if zero else f"[gnnkit rank {rank}]" if node == 0
                                else f"[gnnkit node {node} rank {rank}]")
        return zero or record.levelno >= logging.WARNING or getattr(record, "every_rank", False)


class _CurrentStderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is at each line, as :data:`logging.lastResort`
    does: a handler holding the stream of its first call wrote into a closed one once a notebook
    or pytest's capture had swapped ``sys.stderr`` and closed its own ("I/O operation on closed file")."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # noqa: D102 - logging.StreamHandler's attribute, read at each line
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def setup_logging(level: int = logging.INFO) -> None:
    """Send gnnkit's log lines to stderr (idempotent), info lines from rank 0 only (:class:`_RankLines`)."""
    if not log.handlers:
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(gnnkit_prefix)s %(message)s"))
        handler.addFilter(_RankLines())
        log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False

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
        if sys.stderr.isatty():
            yield from tqdm(items, total=total, desc=f"{self.job}: {desc}", leave=False)
            return
        step = max(1, total // 10)
        for i, item in enumerate(items, 1):
            yield item
            if i % step == 0 or i == total:
                self(f"{desc} {i}/{total}")


def setup_logging(level: int = logging.INFO) -> None:
    """Send gnnkit's log lines to stderr (idempotent)."""
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[gnnkit] %(message)s"))
        log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False

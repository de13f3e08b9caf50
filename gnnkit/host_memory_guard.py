"""Hand freed host memory back to the OS once a run holds half of the memory it could have.

``gnnkit run`` keeps freed blocks in glibc's heap (:func:`gnnkit.allocator.retain_freed_memory`):
re-allocating a full graph's activations then costs no page faults, an epoch 1.7x faster on the
arxiv twin, but the heap fragments and its peak grows (2.2x there). On a graph whose working set
fills the machine that growth is what runs it out of memory, for no speed (the products twin:
22.2 GiB against 18.9 GiB, the same epoch time). :class:`HostMemoryGuard` reads the resident
memory before every backward pass (the step's activations alive) and after every validation
batch. The first time it exceeds ``share`` of what the process could hold (its anonymous resident
memory, not the memory-mapped cache files the kernel can drop, plus what the kernel can still give,
``MemAvailable``), it calls :func:`gnnkit.allocator.release_freed_memory` and says so in one line.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning.pytorch as pl

from gnnkit.allocator import is_retaining, release_freed_memory
from pipeline.progress import anonymous_rss_mb, available_memory_mb

log = logging.getLogger(__name__)

#: Share of the memory the process could hold above which freed blocks go back to the OS.
DEFAULT_SHARE = 0.5


class HostMemoryGuard(pl.Callback):
    """Stop retaining freed host memory once the process holds ``share`` of what it could.

    Idle while the process does not retain freed memory (:func:`gnnkit.allocator.is_retaining`).

    Args:
        share: Resident memory over (resident + available) at which to release, in (0, 1].
    """

    def __init__(self, share: float = DEFAULT_SHARE) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share: expected a fraction in (0, 1], got {share}")
        self.share = share

    def check(self) -> bool:
        """Release freed memory if the process retains it and is over its share; whether it did."""
        if not is_retaining():
            return False
        available = available_memory_mb()
        held = anonymous_rss_mb()
        if available is None or held <= self.share * (held + available):
            return False
        release_freed_memory()
        log.info("host memory: the run holds %.1f GiB of %.1f GiB it could have; freed blocks now go back "
                 "to the OS (slower re-allocation, a lower peak)", held / 1024, (held + available) / 1024)
        return True

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Any) -> None:
        """Check with the step's activations alive (near its peak; at the batch's end they are freed)."""
        self.check()

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:  # noqa: D102
        self.check()

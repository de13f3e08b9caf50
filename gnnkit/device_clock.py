"""The wall clock once a device has run what was queued on it."""

from __future__ import annotations

import time

import torch


def device_clock(device: torch.device | None) -> float:
    """``time.perf_counter()`` after a CUDA ``device`` has run its queued work (a sync); kernels and
    collectives only queue work, so host time alone would time their launch. Any other device (or
    ``None``) reads the clock at once."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()

"""gnnkit/host_memory_guard.py: freed host memory goes back to the OS once a run holds half of what
it could have, once, with one line; never while the process does not retain it."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

import gnnkit.host_memory_guard as guard_module
from gnnkit.host_memory_guard import HostMemoryGuard


def _machine(monkeypatch, held_mb: float, available_mb: float | None, retaining: bool = True) -> list[str]:
    released: list[str] = []
    state = {"retaining": retaining}
    monkeypatch.setattr(guard_module, "anonymous_rss_mb", lambda: held_mb)
    monkeypatch.setattr(guard_module, "available_memory_mb", lambda: available_mb)
    monkeypatch.setattr(guard_module, "is_retaining", lambda: state["retaining"])

    def release() -> bool:
        released.append("released")
        state["retaining"] = False
        return True

    monkeypatch.setattr(guard_module, "release_freed_memory", release)
    return released


def test_over_its_share_the_run_releases_once_and_says_so(monkeypatch, caplog):
    released = _machine(monkeypatch, held_mb=12_000, available_mb=8_000)  # 60% of 20 GB
    guard = HostMemoryGuard()
    with caplog.at_level(logging.INFO, logger=guard_module.__name__):
        assert guard.check() and not guard.check()  # once: the process no longer retains
        guard.on_before_backward(None, None, None)
    assert released == ["released"]
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("host memory: the run holds 11.7 GiB of 19.5 GiB it could have; freed blocks now go back")


@pytest.mark.parametrize("held, available, retaining", [(4_000, 16_000, True),  # 20%: keep the speed
                                                        (9_999, 10_001, True),  # just under half
                                                        (12_000, None, True),  # no /proc/meminfo
                                                        (12_000, 8_000, False)])  # not retaining
def test_under_its_share_or_not_retaining_nothing_changes(monkeypatch, held, available, retaining):
    released = _machine(monkeypatch, held, available, retaining)
    guard = HostMemoryGuard()
    guard.on_validation_batch_end(None, None, None, None, 0)
    assert not guard.check() and released == []


def test_a_share_outside_zero_to_one_is_refused():
    with pytest.raises(ValueError, match=r"share: expected a fraction in \(0, 1\], got 1.5"):
        HostMemoryGuard(1.5)


PROBE = """
import torch
from gnnkit.allocator import is_retaining, release_freed_memory, retain_freed_memory
from pipeline.progress import rss_mb
print(retain_freed_memory(), is_retaining())
blocks = [torch.ones(25_000_000) for _ in range(4)]  # 400 MB, touched
base = rss_mb()
del blocks
kept = rss_mb()
print(release_freed_memory(), is_retaining())
print(round(base - kept), round(kept - rss_mb()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux-only")
def test_release_hands_the_retained_blocks_back():
    """Retained, 400 MB of freed tensors stay resident; released, they leave at once."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    assert out[:4] == ["True", "True", "True", "False"]
    freed_on_del, freed_on_release = int(out[4]), int(out[5])
    assert freed_on_del < 50 and freed_on_release > 350, out

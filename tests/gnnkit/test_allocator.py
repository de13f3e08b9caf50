"""retain_freed_memory: glibc keeps freed large blocks, so re-allocating them costs no page faults."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import resource, sys, torch
from gnnkit.allocator import retain_freed_memory
print(retain_freed_memory())
faults = []
for _ in range(8):  # 100 MB, filled, freed: a fresh mmap each time unless glibc keeps it
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(25_000_000)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[-3:]))  # the heap settles within a few rounds (aligned requests may take two blocks)
"""


def probe(env_value: str | None) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "GNNKIT_RETAIN_FREED_MEMORY"}
    if env_value is not None:
        env["GNNKIT_RETAIN_FREED_MEMORY"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    accepted, faults = out.stdout.split()
    return accepted, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux-only")
def test_freed_blocks_are_reused_without_page_faults() -> None:
    accepted, faults = probe(None)
    assert accepted == "True"
    assert faults < 1000  # 3 x 100 MB in 4 KiB pages would be ~73,000 faults


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux-only")
def test_switched_off_by_the_environment() -> None:
    accepted, faults = probe("0")
    assert accepted == "False"
    assert faults > 60_000  # glibc's default: every 100 MB block is a fresh mapping

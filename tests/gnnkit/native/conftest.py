"""Fixtures of the native-kernel tests: the build (once per session) and small adversarial graphs."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from gnnkit import native


@pytest.fixture(scope="session")
def ext():
    """The native extension, built once per session (a cold build counts towards the suite).

    With a C++ compiler present the build must succeed: a failure here is a real failure, not a
    skip. Without any compiler the tests that need the build are skipped.
    """
    if not native.enabled():
        pytest.skip("GNNKIT_NATIVE=0: native kernels switched off for this run")
    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler on PATH: the native build is impossible here")
    module = native.get()
    assert module is not None, f"native build failed: {native.status()['error']}"
    return module


@pytest.fixture
def deterministic():
    """``torch.use_deterministic_algorithms(True)`` for one test, restored after it."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def powerlaw_csr(n: int, seed: int = 0, avg: float = 6.0, zero_frac: float = 0.15,
                 num_cols: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR with power-law row lengths, empty rows, hub rows, duplicates and unused columns."""
    rng = np.random.default_rng(seed)
    num_cols = n if num_cols is None else num_cols
    deg = np.minimum((rng.pareto(1.2, n) + 1) * avg / 3, 4 * n).astype(np.int64)
    deg[rng.random(n) < zero_frac] = 0
    if n:
        deg[0] = 3 * n  # a hub with repeated sources
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(deg)
    weight = rng.pareto(1.3, num_cols) + 1
    cols = rng.choice(max(num_cols, 1), size=int(indptr[-1]), p=weight / weight.sum()) if num_cols else np.zeros(0)
    cols = cols.astype(np.int64)
    if num_cols > 4:
        cols[cols >= num_cols - 3] = 0  # the last columns stay isolated
    return torch.from_numpy(indptr), torch.from_numpy(cols)


GRAPHS = {
    "powerlaw": lambda: powerlaw_csr(150, seed=1),
    "rectangular": lambda: powerlaw_csr(60, seed=2, num_cols=90),
    "uniform": lambda: (torch.arange(0, 401, 4), torch.randint(0, 100, (400,), generator=torch.Generator().manual_seed(3))),
    "empty-graph": lambda: (torch.zeros(9, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
    "no-nodes": lambda: (torch.zeros(1, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
    "single-loop": lambda: (torch.tensor([0, 1]), torch.tensor([0])),
}


def on_device(device: str, *tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """``tensors`` moved to ``device`` (``None`` stays ``None``)."""
    return [None if t is None else t.to(device) for t in tensors]

"""Shared fixtures: an isolated GNNKIT_HOME per test session and small OGB-format folders."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from pipeline.ogb_layout import write_ogb_folder


NO_CUDA_REASON = "needs CUDA: the GPU tier (pytest -m gpu) runs on a GPU machine, see bench/gpu_session.sh"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with ``slow`` tests run first (:func:`_slow_modules_first`); tests marked ``gpu`` are
    skipped, with the reason, where torch sees no CUDA device."""
    _slow_modules_first(items)
    marked = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not marked:
        return
    import torch

    if not torch.cuda.is_available():
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=NO_CUDA_REASON))


def _slow_modules_first(items: list[pytest.Item]) -> None:
    """Moves the modules that hold a ``slow`` test (multi-process and end-to-end runs) to the front,
    each whole and in its own order: pytest-xdist hands tests out in this order, so the long ones
    start early instead of leaving one worker busy at the end while the others wait."""
    slow = {getattr(item, "module", None) for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: getattr(item, "module", None) not in slow)  # stable: each group keeps its order


def _xdist_session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The temporary folder all pytest-xdist workers of this session share, or ``None`` without xdist."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    return tmp_path_factory.getbasetemp().parent  # each worker's basetemp is <session>/popen-gwN


@pytest.fixture
def gnnkit_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """``caplog`` that also sees gnnkit's log lines: once :func:`pipeline.setup_logging` has run in
    this process, gnnkit's logger no longer propagates to the root logger caplog listens on."""
    logger = logging.getLogger("gnnkit")
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


#: The variables that tell Lightning (and gnnkit's log lines) a process's rank.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


@pytest.fixture(autouse=True)
def rank_variables_restored() -> Iterator[None]:
    """Each test ends with the rank variables it began with: Lightning's launcher writes LOCAL_RANK
    into ``os.environ`` when a test trains several ranks in-process, and a later test in that worker
    then saw a rank (its Lightning lines prefixed ``[rank: 0]``)."""
    before = {k: os.environ.get(k) for k in RANK_VARIABLES}
    yield
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session", autouse=True)
def gnnkit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test session gets its own data and cache folders (never the user's)."""
    home = tmp_path_factory.mktemp("gnnkit-home")
    old = {k: os.environ.get(k) for k in ("GNNKIT_HOME", "GNNKIT_DATA_ROOT", "GNNKIT_CACHE", "GNNKIT_BATCHES", "GNNKIT_REGISTRY",
                                          "GNNKIT_NATIVE_CACHE")}
    os.environ["GNNKIT_HOME"] = str(home)
    shared = _xdist_session_folder(tmp_path_factory)
    if shared is not None and old["GNNKIT_NATIVE_CACHE"] is None:
        # the workers of one session build the native kernels once (the build holds an flock)
        os.environ["GNNKIT_NATIVE_CACHE"] = str(shared / "gnnkit-native")
    for key in ("GNNKIT_DATA_ROOT", "GNNKIT_CACHE", "GNNKIT_BATCHES", "GNNKIT_REGISTRY"):
        os.environ.pop(key, None)
    yield home
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


OGB_META = {
    "num tasks": 1,
    "num classes": 4,
    "task type": "multiclass classification",
    "eval metric": "acc",
    "add_inverse_edge": "False",
    "split": "random",
    "additional node files": "None",
    "additional edge files": "None",
    "is hetero": "False",
    "version": 1,
}


def graph_arrays(num_nodes: int = 200, num_edges: int = 1000, num_features: int = 8, seed: int = 0) -> dict[str, Any]:
    """A small random graph with community labels, as write_ogb_folder's arguments."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, num_nodes)
    src = rng.integers(0, num_nodes, num_edges)
    dst = rng.integers(0, num_nodes, num_edges)
    perm = rng.permutation(num_nodes)
    a, b = int(0.6 * num_nodes), int(0.8 * num_nodes)
    x = (np.eye(4)[labels] @ rng.standard_normal((4, num_features)) + rng.standard_normal((num_nodes, num_features)))
    return {
        "edge_index": np.stack([src, dst]),
        "num_nodes": num_nodes,
        "labels": labels,
        "split": {"train": perm[:a], "valid": perm[a:b], "test": perm[b:]},
        "meta": dict(OGB_META),
        "node_feat": x.astype(np.float32) if num_features else None,
    }


@pytest.fixture
def make_ogb_folder(tmp_path: Path) -> Callable[..., Path]:
    """Write an OGB-format folder; keyword arguments replace parts of :func:`graph_arrays`."""
    counter = iter(range(10**6))

    def make(binary: bool = False, meta_changes: dict[str, Any] | None = None, **changes: Any) -> Path:
        parts = graph_arrays()
        parts.update(changes)
        parts["meta"] = {**parts["meta"], **(meta_changes or {})}
        return write_ogb_folder(tmp_path / f"ogb-{next(counter)}", binary=binary, **parts)

    return make


def assert_same_batches(got: list[tuple[Any, ...]], expected: list[tuple[Any, ...]], cuda: bool = False) -> None:
    """Two runs' batches (tuples of tensors) are equal one by one, and on a GPU where ``cuda``."""
    import torch

    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        for ta, tb in zip(a, b):
            assert (ta.is_cuda or not cuda) and torch.equal(ta, tb)

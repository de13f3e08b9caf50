"""The external bucket sort gives build_csr's CSR exactly, whatever the load size and the skew."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from pipeline.canonicalize import build_csr
from pipeline.external_csr import ExternalCsr
from pipeline.options import PreprocessOptions


class _Collect:
    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []

    def write(self, values: np.ndarray) -> None:
        self.parts.append(np.array(values, dtype=np.int64))


def _external(src, dst, n, options, folder: Path, sort_keys: int, chunk: int = 97):
    both = options.undirected
    csr = ExternalCsr(n, folder, sort_keys, src.size * (2 if both else 1), options.undirected)
    for lo in range(0, src.size, chunk):
        s, t = src[lo:lo + chunk], dst[lo:lo + chunk]
        if options.self_loops == "remove":
            s, t = s[s != t], t[s != t]
        csr.add(np.concatenate([t * n + s, *([s * n + t] if both else [])]).astype(np.int64))
    indptr = _Collect()
    sha = csr.write(indptr, folder / "indices.raw")
    indices = np.fromfile(folder / "indices.raw", dtype=np.int64)
    return np.concatenate(indptr.parts), indices, sha, csr.stats


def _graph(rng, kind: str, n: int, e: int):
    if kind == "hub":  # one destination takes every edge, sources repeat: loads must split a row
        return rng.integers(0, max(1, n // 7), e), np.full(e, n // 2)
    if kind == "repeated":  # one edge many times: a bucket of one key
        return np.full(e, 1 % n), np.full(e, (n - 1) // 2)
    return rng.integers(0, n, e), rng.integers(0, n, e)


@pytest.mark.parametrize("kind", ["uniform", "hub", "repeated"])
@pytest.mark.parametrize("undirected", [False, True])
@pytest.mark.parametrize("self_loops", ["keep", "remove"])
def test_matches_build_csr(tmp_path, kind, undirected, self_loops):
    rng = np.random.default_rng(len(kind) * 7 + undirected * 3 + (self_loops == "remove"))
    options = PreprocessOptions(undirected=undirected, self_loops=self_loops)
    for trial, (n, e, sort_keys) in enumerate([(257, 3000, 50), (1000, 5000, 613), (3, 40, 1), (1, 10, 2)]):
        folder = tmp_path / f"t{trial}"
        folder.mkdir()
        src, dst = _graph(rng, kind, n, e)
        indptr, indices, sha, stats = _external(src, dst, n, options, folder, sort_keys)
        want_indptr, want_indices = build_csr(np.stack([src, dst]), n, options)
        assert np.array_equal(indptr, want_indptr) and np.array_equal(indices, want_indices)
        assert sha == hashlib.sha256(want_indices.tobytes()).hexdigest() and stats.nnz == want_indices.size
        assert not list(folder.glob("*.keys"))  # every bucket file read and deleted
        if trial == 0 and kind != "uniform" and not (undirected and kind == "repeated"):
            assert stats.redistributed > 0  # a bucket bigger than a load was split again


def test_empty_graphs(tmp_path):
    for n in (0, 5):
        indptr, indices, _, stats = _external(np.zeros(0, np.int64), np.zeros(0, np.int64), n,
                                               PreprocessOptions(), tmp_path, sort_keys=4)
        assert np.array_equal(indptr, np.zeros(n + 1, dtype=np.int64)) and indices.size == 0 == stats.nnz

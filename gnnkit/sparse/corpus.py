"""Random sparse matrices of many shapes, for training and testing the format selector.

The corpus of Qiu, You and Wang, "Optimizing Sparse Matrix Multiplications for Graph Neural
Networks", LCPC 2021 <https://arxiv.org/abs/2111.00352> is SuiteSparse; gnnkit generates graph-like
matrices instead, so anyone can rebuild the corpus offline: Erdos-Renyi, power-law (R-MAT),
banded, block-diagonal communities, bipartite (rectangular, like sampled mini-batch blocks),
hub-heavy, and real-graph-like degree sequences (Chung-Lu with log-normal degrees). Held-out
kinds the selector never trains on (2-D grids, small-world rings) live in :data:`HOLDOUT_KINDS`.

Every generator is vectorised numpy and deterministic in its seed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch

from gnnkit.sparse.adjacency import Adjacency

Generator = Callable[[np.random.Generator, int, int, float], tuple[np.ndarray, np.ndarray]]
GENERATORS: dict[str, Generator] = {}


def _generator(name: str) -> Callable[[Generator], Generator]:
    def wrap(fn: Generator) -> Generator:
        if name in GENERATORS:
            raise ValueError(f"matrix generator '{name}' is already registered")
        GENERATORS[name] = fn
        return fn
    return wrap


def _edges(rng: np.random.Generator, n_rows: int, avg_deg: float) -> int:
    return max(1, int(rng.poisson(n_rows * avg_deg)))


@_generator("erdos_renyi")
def erdos_renyi(rng: np.random.Generator, n_rows: int, n_cols: int, avg_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Uniform random entries (G(n, m))."""
    m = _edges(rng, n_rows, avg_deg)
    return rng.integers(0, n_rows, m), rng.integers(0, n_cols, m)


def _rmat_ids(rng: np.random.Generator, m: int, n: int, probs: tuple[float, float, float, float],
              ) -> tuple[np.ndarray, np.ndarray]:
    """R-MAT (Chakrabarti et al. 2004): recursive quadrant choice, one bit per level."""
    levels = max(1, math.ceil(math.log2(max(n, 2))))
    rows = np.zeros(m, dtype=np.int64)
    cols = np.zeros(m, dtype=np.int64)
    cum = np.cumsum(probs)
    for _ in range(levels):
        q = np.searchsorted(cum, rng.random(m) * cum[-1])
        rows = rows * 2 + (q >= 2)
        cols = cols * 2 + (q % 2)
    return rows % n, cols % n


@_generator("rmat")
def rmat(rng: np.random.Generator, n_rows: int, n_cols: int, avg_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Power-law graph from R-MAT with Graph500-like skew (a, b, c, d jittered per matrix)."""
    a = rng.uniform(0.45, 0.6)
    b = c = (1 - a) * rng.uniform(0.3, 0.4)
    rows, cols = _rmat_ids(rng, _edges(rng, n_rows, avg_deg), max(n_rows, n_cols), (a, b, c, 1 - a - b - c))
    perm = rng.permutation(max(n_rows, n_cols))  # hide the id/degree correlation
    return perm[rows] % n_rows, perm[cols] % n_cols


@_generator("banded")
def banded(rng: np.random.Generator, n_rows: int, n_cols: int, avg_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Entries near the diagonal: a band of random half-width, partly filled."""
    m = _edges(rng, n_rows, avg_deg)
    half = max(1, int(avg_deg * rng.uniform(0.5, 4)))
    rows = rng.integers(0, n_rows, m)
    centre = (rows * (n_cols / n_rows)).astype(np.int64)
    return rows, np.clip(centre + rng.integers(-half, half + 1, m), 0, n_cols - 1)


@_generator("communities")
def communities(rng: np.random.Generator, n_rows: int, n_cols: int, avg_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Block-diagonal communities (contiguous ids) with a fraction of edges between them."""
    m = _edges(rng, n_rows, avg_deg)
    size = max(2, int(rng.choice([8, 32, 128, 512])))
    rows = rng.integers(0, n_rows, m)
    inside = rng.random(m) < rng.uniform(0.7, 0.98)
    base = (rows // size) * size
    cols = np.where(inside, base + rng.integers(0, size, m), rng.integers(0, n_cols, m))
    return rows, np.minimum(cols, n_cols - 1)


@_generator("bipartite")
def bipartite(rng: np.random.Generator, n_rows: int, n_cols: int, avg_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Rectangular random matrix with skewed column popularity (like a sampled mini-batch block)."""
    m = _edges(rng, n_rows, avg_deg)
    popularity = rng.zipf(rng.uniform(1.5, 3.0), n_cols).astype(np.float64)
    cols = rng.choice(n_cols, size=m, p=popularity / popularity.sum())
    return rng.integers(0, n_rows, m), cols


@_generator("hubs")
def hubs(rng: np.random.Generator, n_rows: int, n_cols: int, avg_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Sparse background plus a few hub rows and columns holding a large share of the entries."""
    m = _edges(rng, n_rows, avg_deg)
    n_hubs = max(1, int(rng.integers(1, 20)))
    share = rng.uniform(0.2, 0.6)
    rows = rng.integers(0, n_rows, m)
    cols = rng.integers(0, n_cols, m)
    to_hub = rng.random(m) < share
    hub_rows = rng.random(m) < 0.5
    hub_ids_r = rng.integers(0, n_rows, n_hubs)
    hub_ids_c = rng.integers(0, n_cols, n_hubs)
    pick = rng.integers(0, n_hubs, m)
    rows = np.where(to_hub & hub_rows, hub_ids_r[pick], rows)
    cols = np.where(to_hub & ~hub_rows, hub_ids_c[pick], cols)
    return rows, cols


@_generator("chung_lu")
def chung_lu(rng: np.random.Generator, n_rows: int, n_cols: int, avg_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Chung-Lu graph with log-normal expected degrees: real-graph-like degree sequences."""
    m = _edges(rng, n_rows, avg_deg)
    sigma = rng.uniform(0.5, 1.8)
    w_rows = rng.lognormal(0.0, sigma, n_rows)
    w_cols = w_rows if n_rows == n_cols and rng.random() < 0.7 else rng.lognormal(0.0, sigma, n_cols)
    rows = rng.choice(n_rows, size=m, p=w_rows / w_rows.sum())
    cols = rng.choice(n_cols, size=m, p=w_cols / w_cols.sum())
    return rows, cols


@_generator("grid")
def grid(rng: np.random.Generator, n_rows: int, n_cols: int, avg_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """2-D lattice with 4-neighbourhoods (held out: never in the training corpus)."""
    side = max(2, int(math.sqrt(n_rows)))
    ids = np.arange(side * side).reshape(side, side)
    pairs = [(ids[:, :-1], ids[:, 1:]), (ids[:-1, :], ids[1:, :])]
    src = np.concatenate([a.ravel() for a, _ in pairs] + [b.ravel() for _, b in pairs])
    dst = np.concatenate([b.ravel() for _, b in pairs] + [a.ravel() for a, _ in pairs])
    return dst % n_rows, src % n_cols


@_generator("small_world")
def small_world(rng: np.random.Generator, n_rows: int, n_cols: int, avg_deg: float) -> tuple[np.ndarray, np.ndarray]:
    """Watts-Strogatz ring lattice with 10% of the entries rewired (held out)."""
    k = max(1, int(avg_deg // 2))
    rows = np.repeat(np.arange(n_rows), 2 * k)
    offsets = np.tile(np.concatenate([np.arange(1, k + 1), -np.arange(1, k + 1)]), n_rows)
    cols = (rows + offsets) % n_cols
    rewire = rng.random(rows.size) < 0.1
    cols[rewire] = rng.integers(0, n_cols, int(rewire.sum()))
    return rows, cols


CORPUS_KINDS = ("erdos_renyi", "rmat", "banded", "communities", "bipartite", "hubs", "chung_lu")
HOLDOUT_KINDS = ("grid", "small_world")


def coo_to_adjacency(rows: np.ndarray, cols: np.ndarray, n_rows: int, n_cols: int) -> Adjacency:
    """CSR adjacency from entry coordinates (sorted by row, then column; duplicates kept)."""
    order = np.lexsort((cols, rows))
    counts = np.bincount(rows, minlength=n_rows)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return Adjacency(torch.from_numpy(indptr), torch.from_numpy(cols[order].astype(np.int64)), num_cols=n_cols)


@dataclass(frozen=True)
class MatrixSpec:
    """One corpus matrix: a generator name, a shape, a mean entries-per-row and a seed.

    Args:
        kind: Name in :data:`GENERATORS`.
        n_rows: Rows (destinations).
        n_cols: Columns (sources).
        avg_deg: Mean entries per row (random generators may draw an entry twice: duplicates are kept).
        seed: Random seed.
    """

    kind: str
    n_rows: int
    n_cols: int
    avg_deg: float
    seed: int

    def build(self) -> Adjacency:
        """Generate the matrix."""
        if self.kind not in GENERATORS:
            raise ValueError(f"Could not resolve matrix kind '{self.kind}' among choices {sorted(GENERATORS)}")
        rng = np.random.default_rng(self.seed)
        rows, cols = GENERATORS[self.kind](rng, self.n_rows, self.n_cols, self.avg_deg)
        return coo_to_adjacency(rows.astype(np.int64), cols.astype(np.int64), self.n_rows, self.n_cols)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.n_rows}x{self.n_cols}-d{self.avg_deg:g}-s{self.seed}"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def sample_specs(
    count: int,
    seed: int = 0,
    kinds: tuple[str, ...] = CORPUS_KINDS,
    min_rows: int = 1_000,
    max_rows: int = 1_000_000,
    max_nnz: int = 4_000_000,
    large_fraction: float = 0.1,
) -> list[MatrixSpec]:
    """A reproducible random list of corpus matrices.

    Sizes are log-uniform; most matrices are kept below ``sqrt(min_rows * max_rows)`` rows so the
    corpus can be measured in minutes on a small machine, and a ``large_fraction`` of them spans
    the upper half of the size range. Mean degrees are log-uniform in [1.5, 64], capped so that
    ``nnz <= max_nnz``.

    Args:
        count: Number of matrices.
        seed: Seed of the draw (each matrix gets its own derived seed).
        kinds: Generator names to draw from (round-robin, so every kind is represented).
        min_rows: Smallest row count.
        max_rows: Largest row count.
        max_nnz: Cap on ``n_rows * avg_deg``.
        large_fraction: Share of matrices drawn from the upper half of the log-size range.
    """
    rng = np.random.default_rng(seed)
    lo, hi = math.log(min_rows), math.log(max_rows)
    mid = (lo + hi) / 2
    specs = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        big = rng.random() < large_fraction
        n_rows = int(math.exp(rng.uniform(mid, hi) if big else rng.uniform(lo, mid)))
        n_cols = n_rows
        if kind == "bipartite":
            n_cols = min(max_rows, max(2, int(n_rows * math.exp(rng.uniform(math.log(0.1), math.log(20))))))
        avg_deg = round(math.exp(rng.uniform(math.log(1.5), math.log(64))), 1)
        avg_deg = min(avg_deg, max(1.0, max_nnz / n_rows))
        specs.append(MatrixSpec(kind, n_rows, n_cols, avg_deg, int(rng.integers(0, 2**31 - 1))))
    return specs

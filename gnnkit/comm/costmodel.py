"""Alpha-beta cost model of every communication mode: projected communication time per step.

The alpha-beta (Hockney) model prices a message of ``m`` bytes at ``alpha + m * beta``; ring
collectives' costs follow Thakur, Rabenseifner and Gropp, "Optimization of Collective
Communication Operations in MPICH" (IJHPCA 2005, <https://doi.org/10.1177/1094342005051521>).
Lossy modes also pay local compute (top-k selection, sign packing, small matmuls), priced per
gradient element, because on CPUs it is often the larger part.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Sequence

from pipeline import atomic_write_text

BYTES = 4  # float32 gradients
MODES = ("allreduce", "multistream", "topk_a2a", "topk_allgather", "signsgd", "powersgd", "dear")


@dataclass(frozen=True)
class Calibration:
    """Machine constants of the model.

    Args:
        alpha: Latency per collective step, seconds.
        beta: Seconds per byte one stream moves (1 / single-stream bandwidth).
        link_beta: Seconds per byte of the physical link, shared by all streams (0 = no limit
            beyond ``beta``, e.g. loopback).
        stream_parallelism: How many streams the host drives at full speed at once (1: extra
            streams gain nothing, as with 4 ranks on 2 cores).
        topk_s: Seconds per gradient element of top-k selection plus residual bookkeeping.
        sign_s: Seconds per gradient element of sign packing and voting.
        powersgd_s: Seconds per gradient element per unit of rank of PowerSGD's matmuls and QR.
    """

    alpha: float = 50e-6
    beta: float = 1 / 1.0e9
    link_beta: float = 0.0
    stream_parallelism: float = 1.0
    topk_s: float = 2e-9
    sign_s: float = 1e-9
    powersgd_s: float = 1e-9

    def with_bandwidth(self, gbit_per_s: float | None, latency_s: float | None = None) -> "Calibration":
        """Put the ranks behind a link of ``gbit_per_s`` (and ``latency_s`` per message)."""
        out = self
        if gbit_per_s is not None:
            link = 8 / (gbit_per_s * 1e9)
            out = replace(out, link_beta=link, beta=max(out.beta, link))
        if latency_s is not None:
            out = replace(out, alpha=latency_s)
        return out

    def save(self, path: Path) -> None:
        """Write the calibration as JSON (through a temp file: never half-written)."""
        atomic_write_text(path, json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path, network: str | None = None) -> "Calibration":
        """Read :meth:`save`'s JSON, or ``bench/comm.py --json``'s (one calibration per network:
        ``network`` picks one, default the first)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:  # missing, a folder, not UTF-8, not JSON
            raise ValueError(f"{path}: unreadable calibration ({str(err).splitlines()[0]})") from None
        data = data.get("calibration", data) if isinstance(data, dict) else data
        if not isinstance(data, dict) or not data:
            raise ValueError(f"{path}: expected a calibration object (Calibration.save, or bench/comm.py --json)")
        if all(isinstance(v, dict) for v in data.values()):
            if network is None:
                network = next(iter(data))
            if network not in data:
                raise ValueError(f"{path}: no network {network!r}; it has {sorted(data)}")
            data = data[network]
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data.values()):
            raise ValueError(f"{path}: expected numbers for {sorted(known)}, got "
                             f"{', '.join(unknown) + ' (unknown)' if unknown else 'other values'}")
        return cls(**data)


@dataclass(frozen=True)
class Estimate:
    """Projected time of one mode, split into its parts (seconds)."""

    mode: str
    latency: float
    bandwidth: float
    compute: float
    bytes_per_rank: float

    @property
    def total(self) -> float:
        return self.latency + self.bandwidth + self.compute


def sparse_gather_elements(params: float, ranks: int, density: float) -> float:
    """Elements each rank contributes to TopKA2A's all-gather (``gather="auto"``)."""
    return min(2 * density * params, params / ranks)


def estimate(mode: str, params: float, ranks: int, cal: Calibration, density: float = 0.01,
             streams: int = 2, powersgd_rank: int = 1, layer_width: int = 256,
             compute_s: float = 0.0) -> Estimate:
    """Communication time of one step of ``mode`` for ``params`` float32 gradients on ``ranks``.

    Args:
        mode: One of :data:`MODES`.
        params: Gradient elements per step.
        ranks: Number of ranks ``P`` (>= 2).
        cal: Machine constants.
        density: Top-k density.
        streams: Streams of ``multistream``.
        powersgd_rank: PowerSGD rank; matrices are taken as ``layer_width`` wide.
        compute_s: Backward/forward compute that ``dear`` overlaps its two phases with.
    """
    if ranks < 2:
        raise ValueError(f"ranks must be >= 2, got {ranks}")
    p, n, a, b = ranks, float(params), cal.alpha, cal.beta
    ring = (p - 1) / p
    if mode in ("allreduce", "dear"):
        moved = 2 * ring * n * BYTES
        est = Estimate(mode, 2 * (p - 1) * a, moved * b, 0.0, moved)
        if mode == "dear" and compute_s > 0:  # each half hides behind half of the compute
            half = est.total / 2
            exposed = 2 * max(0.0, half - compute_s / 2)
            scale = exposed / est.total if est.total else 0.0
            est = Estimate(mode, est.latency * scale, est.bandwidth * scale, 0.0, moved)
        return est
    if mode == "multistream":
        moved = 2 * ring * n * BYTES
        per_byte = max(cal.link_beta, b / min(streams, cal.stream_parallelism))
        return Estimate(mode, 2 * (p - 1) * a, moved * per_byte, 0.0, moved)
    if mode == "topk_allgather":
        moved = (p - 1) * 2 * density * n * BYTES
        return Estimate(mode, (p - 1) * a, moved * b, cal.topk_s * n, moved)
    if mode == "topk_a2a":
        a2a = ring * 2 * density * n * BYTES
        gather = (p - 1) * sparse_gather_elements(n, p, density) * BYTES
        return Estimate(mode, 2 * (p - 1) * a, (a2a + gather) * b, cal.topk_s * n, a2a + gather)
    if mode == "signsgd":
        moved = (p - 1) * (n / 4 + 4)  # two bit planes (sign, non-zero) and a float32 scale
        return Estimate(mode, (p - 1) * a, moved * b, cal.sign_s * n, moved)
    if mode == "powersgd":
        compressed = 2 * powersgd_rank * n / layer_width
        moved = 2 * ring * compressed * BYTES
        return Estimate(mode, 4 * (p - 1) * a, moved * b, cal.powersgd_s * powersgd_rank * n, moved)
    raise ValueError(f"Could not resolve mode {mode!r} among choices {list(MODES)}")


def plan(params: float, ranks: int, cal: Calibration, modes: Sequence[str] = MODES,
         **options: float) -> list[Estimate]:
    """Every mode's estimate, fastest first."""
    return sorted((estimate(m, params, ranks, cal, **options) for m in modes), key=lambda e: e.total)


def explain(best: Estimate, baseline: Estimate, params: float, ranks: int, density: float) -> str:
    """One paragraph on why ``best`` wins against dense all-reduce."""
    parts = {"latency": best.latency, "bandwidth": best.bandwidth, "compute": best.compute}
    bound = max(parts, key=parts.get)
    lines = [f"{best.mode} is fastest: {best.total * 1e3:.2f} ms vs all-reduce "
             f"{baseline.total * 1e3:.2f} ms ({best.total / baseline.total:.2f}x), "
             f"{best.bytes_per_rank / 2**20:.1f} MiB per rank vs {baseline.bytes_per_rank / 2**20:.1f} MiB; "
             f"it is {bound}-bound."]
    lo = 1 / (2 * (ranks - 1))
    lines.append(f"TopKA2A's window at {ranks} ranks (paper's dense gather): {lo:.4f} < density < 0.5; "
                 f"density {density} is {'inside' if lo < density < 0.5 else 'outside'}.")
    if baseline.bandwidth < baseline.latency:
        lines.append("Dense all-reduce is latency-bound here: compression cannot help much; "
                     "fewer, larger buckets (bucket_mb) or multistream do.")
    return "\n".join(lines)


def fit_alpha_beta(samples: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """Least-squares ``alpha, beta`` from ``(latency_terms, bytes_moved, seconds)`` samples, e.g.
    ``(2(P-1), 2(P-1)/P * bytes, t)`` of ring all-reduces of several sizes (both kept >= 0).

    Residuals are relative (each sample weighted by ``1/t^2``): sizes span orders of magnitude,
    the model is judged by relative error, and plain least squares would fit the largest size
    alone."""
    sxx = sxy = syy = sxt = syt = 0.0
    for x, y, t in samples:
        w = 1.0 / (t * t) if t > 0 else 0.0
        sxx, sxy, syy, sxt, syt = sxx + w * x * x, sxy + w * x * y, syy + w * y * y, sxt + w * x * t, syt + w * y * t
    det = sxx * syy - sxy * sxy
    if det <= 0:
        raise ValueError("fit_alpha_beta needs samples of at least two different sizes")
    alpha = (sxt * syy - syt * sxy) / det
    beta = (sxx * syt - sxy * sxt) / det
    if alpha < 0:  # latency invisible at these sizes: bandwidth only
        alpha, beta = 0.0, syt / syy
    return max(alpha, 0.0), max(beta, 1e-15)


def relative_error(measured: float, predicted: float) -> float:
    """``|measured - predicted| / measured``."""
    return abs(measured - predicted) / measured if measured > 0 else math.inf

"""Counter-based random numbers: element ``i`` of a stream depends on (seed, stream, i) alone.

A sequential generator's draws depend on how many values were drawn before, so chunk sizes,
thread counts and the sampling algorithms of a numpy version all leak into the result. Here the
``i``-th value of a stream is ``splitmix64(key + i * GAMMA)`` (the SplitMix64 finaliser of Steele,
Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014,
https://doi.org/10.1145/2660193.2660195), computed in vectorised uint64 numpy arithmetic, and a
stream's key is a SplitMix64 hash of ``(seed, stream, substream...)``. Any slice ``[start,
start + count)`` can be drawn on its own, in any order, by any worker, with the same bits.

Distributions are derived from those bits with explicit formulas (never numpy's samplers, whose
algorithms may change between versions): uniforms from the top 53 bits, normals by the inverse
CDF (:func:`pipeline.portable_math.normal_ppf`), exponentials by ``-log(u)``, bounded integers by
scaling, permutations by sorting random keys.
"""

from __future__ import annotations

import numpy as np

from pipeline import portable_math

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # 2^64 / golden ratio, odd
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _mix_int(z: int) -> int:
    """SplitMix64's finaliser on a Python int (for keys)."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def stream_key(seed: int, *ids: int) -> int:
    """A 64-bit stream key from a non-negative seed and stream/substream ids (a hash chain)."""
    key = _mix_int(seed * _GAMMA + 1)
    for i in ids:
        key = _mix_int(key + (int(i) + 1) * _GAMMA)
    return key


def bits(key: int, start: int, count: int) -> np.ndarray:
    """Raw uint64 values ``start .. start + count - 1`` of the stream ``key``."""
    return bits_at(key, np.arange(start, start + count, dtype=np.uint64))


def bits_at(key: int, positions: np.ndarray) -> np.ndarray:
    """Raw uint64 values of the stream ``key`` at any ``positions`` (non-negative integers)."""
    with np.errstate(over="ignore"):
        z = np.asarray(positions).astype(np.uint64)
        z *= np.uint64(_GAMMA)
        z += np.uint64(key)
        z ^= z >> np.uint64(30)
        z *= np.uint64(_M1)
        z ^= z >> np.uint64(27)
        z *= np.uint64(_M2)
        z ^= z >> np.uint64(31)
    return z


def uniform(key: int, start: int, count: int) -> np.ndarray:
    """float64 uniforms in the open interval (0, 1): ``(top 53 bits + 1/2) / 2^53``."""
    return uniform_at(key, np.arange(start, start + count, dtype=np.uint64))


def uniform_at(key: int, positions: np.ndarray) -> np.ndarray:
    """:func:`uniform`'s values at any ``positions`` of the stream."""
    u = (bits_at(key, positions) >> np.uint64(11)).astype(np.float64)
    u += 0.5
    u *= 2.0 ** -53
    return u


def normal(key: int, start: int, count: int) -> np.ndarray:
    """float64 standard normals (inverse CDF of :func:`uniform`)."""
    return portable_math.normal_ppf(uniform(key, start, count))


def exponential(key: int, start: int, count: int) -> np.ndarray:
    """float64 standard exponentials, ``-log(u)``."""
    return -portable_math.log(uniform(key, start, count))


def below(key: int, start: int, high: np.ndarray | int) -> np.ndarray:
    """int64 integers uniform in ``[0, high)`` (``high`` >= 1, below 2^53), one per element of ``high``.

    ``floor(u * high)`` with ``u`` from :func:`uniform`; the bias is below 2^-53 * high.
    """
    high = np.asarray(high, dtype=np.int64)
    u = uniform(key, start, int(high.size) if high.ndim else 1).reshape(high.shape)
    out = np.floor(u * high.astype(np.float64)).astype(np.int64)
    return np.minimum(out, high - 1)


def permutation(key: int, n: int) -> np.ndarray:
    """A random permutation of ``0..n-1`` (stable argsort of random 64-bit keys)."""
    return np.argsort(bits(key, 0, n), kind="stable").astype(np.int64)

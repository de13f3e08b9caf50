"""Chunked preprocessing of large feature matrices: row normalisation, column standardisation.

:func:`normalize_features` applies the preprocessing option ``normalize_features``:

* ``"row"``: PyG's ``NormalizeFeatures`` (the row normalisation of Kipf & Welling's GCN inputs,
  <https://arxiv.org/abs/1609.02907>): every value is shifted by the matrix's minimum, then each
  row is divided by its sum, clamped below at 1 (a row summing to less than 1, zero included, is
  left as it is after the shift). For the usual non-negative bag-of-words features the shift is 0
  and every non-empty row of counts sums to one.
* ``"column"``: zero mean and unit variance per column.
* ``"auto"``: ``"row"`` for features without a negative value (counts, bag-of-words, binary: what
  GCN's row normalisation is for), else ``"none"``: the shift by a negative minimum squeezes
  real-valued features (embeddings) into a sliver of each row's sum, and GCN's citation recipe
  fell to chance accuracy on them (0.27 against 0.98 as stored).

:func:`standardize_file` standardises a ``.npy`` on disk with one of two backends that give the
same result (up to float rounding):

* ``numpy``: a loop over row chunks of a memory-mapped ``.npy``;
* ``dali``: an NVIDIA DALI pipeline (<https://github.com/NVIDIA/DALI>): ``fn.readers.numpy`` reads
  one row slice per sample (its start is fed per sample through ``external_source``; a constant
  start would re-read the same slice), arithmetic with constant mean/scale tensors, ``fn.cast``.

``backend="auto"`` keeps whichever is faster where it runs: on CPU numpy (measured by
``bench/reuse.py`` at about 1.3-1.5x DALI's throughput on this class of machine, as the issue's
own measurement found), DALI when a GPU is there to run its pipeline.

The statistics (mean and population standard deviation per column, accumulated in float64; a
constant column gets scale 1) are one numpy pass in both cases.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import DatasetError
from pipeline.options import FEATURE_NORMALIZATIONS
from pipeline.progress import log
from pipeline.temp_paths import make_temp_file

BACKENDS = ("auto", "numpy", "dali")
DTYPES = ("float32", "float16")
CHUNK_ROWS = 65536


def global_min(x: np.ndarray, chunk_rows: int = CHUNK_ROWS) -> np.float32:
    """The smallest value of ``x`` ``[N, F]`` (0 when it is empty), by row chunks."""
    if x.size == 0:
        return np.float32(0)
    return np.float32(min(np.asarray(x[start:start + chunk_rows]).min()
                          for start in range(0, x.shape[0], chunk_rows)))


def row_normalize_block(block: np.ndarray, minimum: np.float32) -> np.ndarray:
    """``(block - minimum) / max(rowsum(block - minimum), 1)`` in float32 (row sums in float64).

    One block of :func:`row_normalize_array`; the out-of-core build calls it on the same
    :data:`CHUNK_ROWS`-row blocks, so both give the same bits.
    """
    shifted = np.asarray(block, dtype=np.float32) - minimum
    sums = np.maximum(shifted.sum(1, dtype=np.float64), 1.0).astype(np.float32)
    return shifted / sums[:, None]


def row_normalize_array(x: np.ndarray, out: np.ndarray, minimum: np.float32,
                        chunk_rows: int = CHUNK_ROWS) -> None:
    """``out[:] = (x - minimum) / max(rowsum(x - minimum), 1)`` in float32, by row chunks.

    PyG's ``NormalizeFeatures`` with ``minimum = x.min()``; row sums are accumulated in float64.
    ``out`` may be ``x`` itself.
    """
    for start in range(0, x.shape[0], chunk_rows):
        out[start:start + chunk_rows] = row_normalize_block(x[start:start + chunk_rows], minimum)


def resolved_normalization(how: str, minimum: float | None, say: Callable[[str], None]) -> str:
    """The transform ``how`` applies to features whose smallest value is ``minimum`` (``None``: no
    features): ``"auto"`` resolved, and a warning for ``"row"`` over negative values."""
    negative = minimum is not None and minimum < 0
    if how == "auto":
        if negative:
            say(f"features take negative values (down to {minimum:.3g}), so they are no counts: not "
                f"row-normalised (normalize_features auto), kept as stored")
        return "none" if negative else "row"
    if how == "row" and negative:
        log.warning("normalize_features row: the features take negative values (down to %.3g); shifted by that "
                    "minimum, real-valued features keep a sliver of their variation (use auto or none)", minimum)
    return how


def normalize_features(x: np.ndarray, how: str, progress: Callable[[str], None] | None = None) -> tuple[np.ndarray, str]:
    """Apply the preprocessing option ``normalize_features`` to a float32 ``[N, F]`` matrix.

    Args:
        x: The features; transformed in place when writable, else copied first.
        how: ``"row"``, ``"column"``, ``"auto"`` or ``"none"`` (see the module docstring).
        progress: Called with a line naming the transform.

    Returns:
        The transformed matrix (float32; ``x`` itself for ``"none"`` or an empty matrix) and the
        transform applied (``"auto"`` resolved).

    Raises:
        ValueError: For an unknown ``how``.
    """
    if how not in FEATURE_NORMALIZATIONS:
        raise ValueError(f"normalize_features: expected one of {list(FEATURE_NORMALIZATIONS)}, got {how!r}")
    if how == "none" or x.size == 0:
        return x, "none"
    say = progress or (lambda _msg: None)
    minimum = global_min(x) if how in ("row", "auto") else None
    how = resolved_normalization(how, minimum, say)
    if how == "none":
        return x, how
    x = x if x.flags.writeable else x.copy()
    if how == "row":
        say(f"row-normalising {x.shape[0]:,} feature rows")
        row_normalize_array(x, x, minimum)
    else:
        say(f"standardising {x.shape[1]} feature columns")
        mean, scale = column_stats(x)
        standardize_array(x, x, mean, scale)
    return x, how


class ColumnStats:
    """Per-column sums and sums of squares in float64, fed one row block at a time.

    The sums depend on the blocks (float addition is not associative): :func:`column_stats` feeds
    ``chunk_rows``-row blocks of the matrix, and the out-of-core build feeds the same
    :data:`CHUNK_ROWS`-row blocks as it reads them, so both get the same bits.

    Args:
        num_columns: F.
    """

    def __init__(self, num_columns: int) -> None:
        self.total = np.zeros(num_columns, dtype=np.float64)
        self.squares = np.zeros(num_columns, dtype=np.float64)
        self.rows = 0

    def add(self, block: np.ndarray) -> None:
        """Accumulate the next block of rows ``[R, F]``."""
        chunk = np.asarray(block, dtype=np.float64)
        self.total += chunk.sum(0)
        self.squares += np.square(chunk).sum(0)
        self.rows += chunk.shape[0]

    def mean_scale(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-column mean and 1/std (float32; population std, a constant column gets scale 1)."""
        n = max(1, self.rows)
        mean = self.total / n
        std = np.sqrt(np.maximum(self.squares / n - mean**2, 0.0))
        scale = np.where(std > 1e-12, 1.0 / np.where(std > 1e-12, std, 1.0), 1.0)
        return mean.astype(np.float32), scale.astype(np.float32)


def column_stats(x: np.ndarray, chunk_rows: int = CHUNK_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and 1/std (float32) of ``x`` ``[N, F]``, accumulated in float64 by chunks."""
    stats = ColumnStats(x.shape[1])
    for start in range(0, x.shape[0], chunk_rows):
        stats.add(x[start:start + chunk_rows])
    return stats.mean_scale()


def standardize_block(block: np.ndarray, mean: np.ndarray, scale: np.ndarray,
                      dtype: np.dtype | type = np.float32) -> np.ndarray:
    """``(block - mean) * scale`` (in float32) cast to ``dtype``: one block of :func:`standardize_array`."""
    chunk = np.asarray(block, dtype=np.float32)
    return ((chunk - mean) * scale).astype(dtype, copy=False)


def standardize_array(x: np.ndarray, out: np.ndarray, mean: np.ndarray, scale: np.ndarray,
                      chunk_rows: int = CHUNK_ROWS) -> None:
    """``out[:] = (x - mean) * scale`` cast to ``out.dtype``, by row chunks (numpy backend)."""
    for start in range(0, x.shape[0], chunk_rows):
        out[start:start + chunk_rows] = standardize_block(x[start:start + chunk_rows], mean, scale, out.dtype)


def _standardize_dali(src: Path, out: np.ndarray, mean: np.ndarray, scale: np.ndarray, chunk_rows: int,
                      device: str) -> None:
    from nvidia.dali import fn, pipeline_def, types

    rows, cols = out.shape
    starts = list(range(0, rows, chunk_rows))

    def source(info):  # noqa: ANN001, ANN202 - DALI's SampleInfo in, the slice start out
        if info.idx_in_epoch >= len(starts):
            raise StopIteration
        return np.array([starts[info.idx_in_epoch], 0], dtype=np.int32)

    gpu = device == "cuda"

    @pipeline_def(batch_size=1, num_threads=2, device_id=0 if gpu else None)
    def chunks():  # noqa: ANN202
        data = fn.readers.numpy(files=[str(src)], roi_start=fn.external_source(source=source, batch=False),
                                roi_shape=[chunk_rows, cols], out_of_bounds_policy="trim_to_shape")
        data = data.gpu() if gpu else data
        normal = (data - types.Constant(mean)) * types.Constant(scale)
        return fn.cast(normal, dtype=types.FLOAT16 if out.dtype == np.float16 else types.FLOAT)

    pipe = chunks()
    pipe.build()
    for start in starts:
        (batch,) = pipe.run()
        tensor = batch.as_cpu().as_tensor() if gpu else batch.as_tensor()
        out[start:start + chunk_rows] = np.array(tensor).reshape(-1, cols)


def resolve_backend(backend: str, device: str = "cpu") -> str:
    """The backend ``"auto"`` stands for: DALI on a GPU (when installed), numpy on CPU."""
    from pipeline.shard_reader import dali_available  # torch: only where a backend is chosen

    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {list(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return "dali" if device == "cuda" and dali_available() else "numpy"
    if backend == "dali" and not dali_available():
        raise ValueError("backend: 'dali' asked for but nvidia-dali is not installed")
    return backend


def standardize_file(
    src: Path,
    dst: Path,
    dtype: str = "float32",
    backend: str = "auto",
    chunk_rows: int = CHUNK_ROWS,
    device: str = "cpu",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Standardise every column of a 2-D float32 ``.npy`` and write it as ``dtype`` to ``dst``.

    ``dst`` is written under a temporary name and renamed into place when complete.

    Args:
        src: Input ``.npy`` (2-D float32), read by chunks of ``chunk_rows`` rows.
        dst: Output ``.npy``.
        dtype: ``"float32"`` or ``"float16"``.
        backend: ``"numpy"``, ``"dali"`` or ``"auto"`` (see :func:`resolve_backend`).
        chunk_rows: Rows per chunk.
        device: ``"cpu"`` or ``"cuda"`` (where the DALI pipeline runs).
        progress: Called with a line per stage.

    Returns:
        ``{"backend", "seconds", "gib_per_s", "rows", "cols"}`` of the transform pass.

    Raises:
        DatasetError: If ``src`` is not a readable 2-D float32 ``.npy``.
        ValueError: For an unknown ``dtype`` or ``backend``.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {list(DTYPES)}, got {dtype!r}")
    backend = resolve_backend(backend, device)
    try:
        x = np.load(src, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:
        raise DatasetError(src, f"unreadable .npy ({err})") from None
    if x.ndim != 2 or x.dtype != np.float32:
        raise DatasetError(src, f"expected a 2-D float32 matrix, got {x.dtype} of shape {list(x.shape)}")
    say = progress or (lambda _msg: None)
    say(f"feature statistics of {list(x.shape)}")
    mean, scale = column_stats(x, chunk_rows)
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = make_temp_file(Path(dst))
    os.close(fd)
    try:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.dtype(dtype), shape=x.shape)
        say(f"standardising with {backend}")
        start = time.perf_counter()
        if backend == "dali":
            _standardize_dali(Path(src).resolve(), out, mean, scale, chunk_rows, device)
        else:
            standardize_array(x, out, mean, scale, chunk_rows)
        out.flush()
        seconds = time.perf_counter() - start
        del out
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {"backend": backend, "seconds": seconds, "gib_per_s": x.nbytes / 2**30 / max(seconds, 1e-9),
            "rows": int(x.shape[0]), "cols": int(x.shape[1])}

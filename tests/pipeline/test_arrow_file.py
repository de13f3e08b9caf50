"""The streamed array file is write_array's file, byte for byte, and never holds the array in memory."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pipeline.arrow_file import StreamedArray, write_array

DTYPES = ["int64", "int32", "uint8", "float16", "float32", "float64"]
SHAPES = [(0,), (1,), (7,), (1000, 3), (5, 0), (12_345,)]


def _streamed(path: Path, array: np.ndarray, chunk: int) -> str:
    with StreamedArray(path, array.shape, array.dtype) as out:
        flat = array.reshape(-1)
        for start in range(0, flat.size, chunk):
            out.write(flat[start:start + chunk])
        return out.sha256()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_streamed_file_is_write_arrays_file(tmp_path, dtype, shape):
    array = (np.random.default_rng(0).standard_normal(shape) * 100).astype(dtype)
    whole = write_array(tmp_path / "whole.arrow", array)
    assert _streamed(tmp_path / "streamed.arrow", array, chunk=333) == whole
    assert (tmp_path / "streamed.arrow").read_bytes() == (tmp_path / "whole.arrow").read_bytes()
    assert whole == hashlib.sha256(array.tobytes()).hexdigest()


def test_the_zero_data_is_a_hole_and_rows_can_be_rewritten(tmp_path):
    values = np.arange(100_000, dtype=np.float32).reshape(-1, 4)
    with StreamedArray(tmp_path / "a.arrow", values.shape, np.float32) as out:
        assert out.hole_bytes == values.nbytes  # pyarrow handed the zero buffer over without a copy
        out.write(values[:10_000])
        out.write(values[10_000:])
        assert np.array_equal(out.read(40, 8), values.reshape(-1)[40:48])
        out.restart()  # a second pass rewrites what the first wrote
        for start in range(0, values.shape[0], 999):
            out.write(out.read(start * 4, min(999, values.shape[0] - start) * 4) * 2)
        sha = out.sha256()
    assert sha == write_array(tmp_path / "b.arrow", values * 2)
    assert (tmp_path / "a.arrow").read_bytes() == (tmp_path / "b.arrow").read_bytes()


def test_incomplete_or_overfull_arrays_are_refused(tmp_path):
    with StreamedArray(tmp_path / "a.arrow", (10,), np.int64) as out:
        out.write(np.arange(4))
        with pytest.raises(ValueError, match="4 of 10 values written"):
            out.sha256()
        with pytest.raises(ValueError, match="11 values written, the array has 10"):
            out.write(np.arange(7))
    with pytest.raises(TypeError, match="native fixed-width numbers"):
        StreamedArray(tmp_path / "b.arrow", (3,), np.dtype(">i8"))


def test_copy_from_a_raw_file(tmp_path):
    values = np.random.default_rng(1).integers(0, 1 << 40, 50_000)
    values.tofile(tmp_path / "raw")
    with StreamedArray(tmp_path / "a.arrow", values.shape, np.int64) as out:
        out.copy_from(tmp_path / "raw", hashlib.sha256(values.tobytes()).hexdigest())
        sha = out.sha256()
    assert sha == write_array(tmp_path / "b.arrow", values)
    assert (tmp_path / "a.arrow").read_bytes() == (tmp_path / "b.arrow").read_bytes()


MEMORY_PROBE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from pipeline.arrow_file import StreamedArray
    def hwm():
        return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024
    before = hwm()
    n = 1 << 27  # 1 GiB of int64
    with StreamedArray(sys.argv[1], (n,), np.int64) as out:
        chunk = np.arange(1 << 21, dtype=np.int64)
        for start in range(0, n, chunk.size):
            out.write(chunk + start)
        out.sha256()
    print(hwm() - before)
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc for the peak resident memory")
def test_a_gigabyte_array_is_written_in_little_memory(tmp_path):
    root = Path(__file__).parents[2]
    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(tmp_path / "big.arrow")], cwd=root,
                         capture_output=True, text=True, check=True, timeout=120)
    assert float(out.stdout) < 200  # MiB above the interpreter's own: chunks, not the 1 GiB array
    assert os.path.getsize(tmp_path / "big.arrow") > 1 << 30


def test_a_failed_create_raises_its_own_error(tmp_path):
    """A folder removed under the writer (`gnnkit cache clear` during a build) raised
    `BufferError: cannot close exported pointers exist`, which hid the real error."""
    with pytest.raises(FileNotFoundError):
        with StreamedArray(tmp_path / "gone" / "a.arrow", (1000, 4), np.float32):
            pass

"""The cache's array file: one flat primitive column in one record batch of an Arrow IPC file.

:func:`write_array` writes an array that is whole in memory. :class:`StreamedArray` writes the
same bytes for an array that never is: pyarrow writes the file for an all-zero array of the
right length and dtype, backed by an anonymous memory map whose pages are never touched (they
read as the kernel's zero page, which does not count towards the process's resident memory), and
the zero data buffer itself is not even written but skipped (a hole in the file: the writer's
sink sees pyarrow hand over that very buffer, by address). The data buffer's offset is then
found by reopening the file with :func:`pyarrow.memory_map` (only the metadata pages are read)
and comparing buffer addresses, and the real values are written over it in chunks (``pwrite``)
while their SHA-256 is computed. Any part of the data region not written stays zero, so a file
is complete only when every value was written (:meth:`StreamedArray.sha256` checks).
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

#: Bytes per read when a file's data is copied or read back.
COPY_CHUNK = 1 << 24


def write_array(path: Path, array: np.ndarray) -> str:
    """Write one flat Arrow IPC file; returns the SHA-256 of the array's bytes."""
    flat = np.ascontiguousarray(array).reshape(-1)
    column = pa.array(flat) if flat.size else pa.array([], type=pa.from_numpy_dtype(flat.dtype))
    batch = pa.record_batch([column], names=["values"])
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return hashlib.sha256(memoryview(flat).cast("B")).hexdigest()


class _HoleSink:
    """A file sink for :class:`pyarrow.PythonFile` that skips (seeks over) the bytes of one buffer."""

    def __init__(self, handle: IO[bytes], start: int, nbytes: int) -> None:
        self._handle = handle
        self._range = (start, start + nbytes)
        self.skipped = 0
        self.closed = False

    def write(self, data: Any) -> int:
        address = getattr(data, "address", None)  # a pyarrow.Buffer handed over without a copy
        size = data.size if address is not None else memoryview(data).nbytes
        if address is not None and self._range[0] <= address and address + size <= self._range[1]:
            self._handle.seek(size, os.SEEK_CUR)
            self.skipped += size
        else:
            self._handle.write(data)
        return size

    def tell(self) -> int:
        return self._handle.tell()

    def flush(self) -> None:
        self._handle.flush()

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while data.nbytes:
        done = os.pwrite(fd, data, offset)
        data, offset = data[done:], offset + done


class StreamedArray:
    """An array's cache file written in chunks, never whole in memory (see the module docstring).

    Args:
        path: The ``.arrow`` file to create.
        shape: The array's shape (the file holds it flattened in C order).
        dtype: A fixed-width numeric dtype in native byte order.

    Attributes:
        offset: Byte offset of the data in the file.
        hole_bytes: Data bytes left as a hole when the file was created (all of them, unless
            pyarrow copied the zero buffer; the file is right either way).

    The values are written in C order by consecutive :meth:`write` calls; :meth:`read` reads
    written values back and :meth:`restart` rewrites them from the start (a second pass that
    transforms what the first wrote). Call :meth:`close` when done (or use ``with``).
    """

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: np.dtype | type) -> None:
        self.path = Path(path)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "iuf" or not self.dtype.isnative:
            raise TypeError(f"{self.path.name}: streamed arrays take native fixed-width numbers, not {self.dtype}")
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        self._written = 0
        self._digest = hashlib.sha256()
        self._copied_sha: str | None = None
        self.hole_bytes = 0  # data bytes pyarrow handed over untouched and the file skipped
        self.offset = self._create()
        self._fd = os.open(self.path, os.O_RDWR)

    def _create(self) -> int:
        """Write the file for an all-zero array (its data a hole); returns the data's byte offset."""
        if self.size == 0:
            write_array(self.path, np.empty(self.shape, dtype=self.dtype))
            return 0
        zeros_map = mmap.mmap(-1, self.nbytes)
        try:
            zeros = np.frombuffer(zeros_map, dtype=self.dtype, count=self.size)
            batch = pa.record_batch([pa.array(zeros)], names=["values"])
            with open(self.path, "wb") as handle:
                sink = _HoleSink(handle, zeros.ctypes.data, self.nbytes)
                with pa.PythonFile(sink, mode="w") as out, pa.ipc.new_file(out, batch.schema) as writer:
                    writer.write_batch(batch)
            self.hole_bytes = sink.skipped
        finally:
            batch = zeros = None
            with contextlib.suppress(BufferError):  # still exported by a failed write's frames: freed with them
                zeros_map.close()  # (raising here hid that failure: a full disk, a folder cleared under it)
        return self._data_offset()

    def _data_offset(self) -> int:
        with pa.memory_map(str(self.path), "r") as mapped:
            base = mapped.read_buffer(1).address  # zero-copy: the mapping's first byte
            column = pa.ipc.open_file(mapped).get_batch(0).column(0)
            offset = column.buffers()[1].address - base
        if len(column) != self.size or offset < 0 or offset + self.nbytes > os.path.getsize(self.path):
            raise RuntimeError(f"{self.path}: pyarrow laid the file out unexpectedly (data at byte {offset})")
        return offset

    def write(self, values: np.ndarray) -> None:
        """Append the next values (cast to the array's dtype, taken in C order)."""
        flat = np.ascontiguousarray(values, dtype=self.dtype).reshape(-1)
        if self._written + flat.size > self.size:
            raise ValueError(f"{self.path.name}: {self._written + flat.size} values written, the array has {self.size}")
        data = memoryview(flat).cast("B")
        _pwrite_all(self._fd, data, self.offset + self._written * self.dtype.itemsize)
        self._digest.update(data)
        self._written += flat.size

    def read(self, start: int, count: int) -> np.ndarray:
        """Values ``[start, start + count)`` as written so far (a bounded read, no memory map)."""
        out = np.empty(count, dtype=self.dtype)
        view, position = memoryview(out).cast("B"), self.offset + start * self.dtype.itemsize
        while view.nbytes:
            done = os.preadv(self._fd, [view], position)
            if done == 0:
                raise EOFError(f"{self.path}: ends before value {start + count}")
            view, position = view[done:], position + done
        return out

    def restart(self) -> None:
        """Write the values again from the first one (the checksum starts over)."""
        self._written = 0
        self._digest = hashlib.sha256()
        self._copied_sha = None

    def copy_from(self, source: Path, sha256: str) -> None:
        """Fill the whole array with the raw bytes of ``source`` (kernel-side copy, no user memory).

        Args:
            source: A file of exactly ``nbytes`` bytes holding the values in C order.
            sha256: Their SHA-256, computed when they were produced.
        """
        if os.path.getsize(source) != self.nbytes:
            raise ValueError(f"{source}: {os.path.getsize(source)} bytes, the array needs {self.nbytes}")
        with open(source, "rb") as handle:
            src, copied = handle.fileno(), 0
            while copied < self.nbytes:
                done = os.copy_file_range(src, self._fd, min(COPY_CHUNK * 64, self.nbytes - copied),
                                          copied, self.offset + copied)
                if done == 0:
                    raise EOFError(f"{source}: ended after {copied} bytes")
                copied += done
        self._written = self.size
        self._copied_sha = sha256

    def sha256(self) -> str:
        """The SHA-256 of the array's bytes.

        Raises:
            ValueError: Not every value was written.
        """
        if self._written != self.size:
            raise ValueError(f"{self.path.name}: {self._written} of {self.size} values written")
        return self._copied_sha or self._digest.hexdigest()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> StreamedArray:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

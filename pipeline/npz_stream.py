"""The arrays of an ``.npz`` archive read or written piece by piece, never whole.

``numpy.load`` reads a member array whole, and ``numpy.savez`` writes arrays that are whole in
memory. For archives larger than memory (OGB's ``data.npz`` of ogbn-papers100M holds 1.6 billion
edges), :class:`NpzReader` streams a member's elements from the zip (stored or deflated members
alike, through :mod:`zipfile`), after parsing its ``.npy`` header with :mod:`numpy.lib.format`, and
:class:`NpzWriter` writes a member as a header followed by its data in chunks, as ``numpy.savez``
lays it out (uncompressed ``.npy`` members, zip64), so ``numpy.load`` reads the result as usual.
"""

from __future__ import annotations

import contextlib
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from pipeline.errors import DatasetError

#: Errors that mean a damaged or unreadable archive.
READ_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error)


@dataclass(frozen=True)
class MemberHeader:
    """What a member's ``.npy`` header declares.

    Attributes:
        shape: The array's shape.
        fortran: Whether the data is stored in Fortran (column-major) order.
        dtype: The stored dtype (any byte order).
    """

    shape: tuple[int, ...]
    fortran: bool
    dtype: np.dtype

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def rows(self) -> int:
        """Length of the first dimension (1 for a scalar)."""
        return int(self.shape[0]) if self.shape else 1


def read_header(handle: IO[bytes], path: Path | str, name: str) -> MemberHeader:
    """Parse the ``.npy`` header at the current position of ``handle``.

    Raises:
        DatasetError: Not a ``.npy`` format 1.0 or 2.0 header (naming the archive and member).
    """
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
    else:
        raise DatasetError(path, f"array '{name}': .npy format version {version}; expected 1.0 or 2.0")
    return MemberHeader(tuple(int(d) for d in shape), bool(fortran), dtype)


class NpzReader:
    """An open ``.npz`` archive whose arrays are read in chunks (use as a context manager).

    Args:
        path: The archive.

    Raises:
        DatasetError: The file is not a readable zip archive.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except READ_ERRORS as err:
            raise DatasetError(self.path, f"unreadable npz archive ({err})") from None
        self._members = {info.filename.removesuffix(".npy"): info for info in self._zip.infolist()}
        self._headers: dict[str, MemberHeader] = {}

    def __enter__(self) -> NpzReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def names(self) -> list[str]:
        """Member array names (without ``.npy``), in archive order."""
        return list(self._members)

    def __contains__(self, name: str) -> bool:
        return name in self._members

    def header(self, name: str) -> MemberHeader:
        """The header of member ``name`` (read once, from the first bytes of the member)."""
        if name not in self._headers:
            try:
                with self._zip.open(self._members[name]) as member:
                    self._headers[name] = read_header(member, self.path, name)
            except DatasetError:
                raise
            except READ_ERRORS as err:
                raise DatasetError(self.path, f"unreadable npz archive ({err})") from None
        return self._headers[name]

    def chunks(self, name: str, start: int, count: int, chunk: int) -> Iterator[np.ndarray]:
        """Elements ``[start, start + count)`` of member ``name`` in storage order, ``chunk`` at a time.

        Storage order is C order, or Fortran order when the header says so. Each chunk is a 1-D
        read-only array of the stored dtype; skipping to ``start`` reads through the bytes before
        it (a zip member has no random access), in bounded pieces.

        Raises:
            DatasetError: The member is shorter than its header says, or the archive is damaged.
        """
        header = self.header(name)
        if header.dtype.hasobject:
            raise DatasetError(self.path, f"array '{name}' holds Python objects; expected numbers")
        itemsize = header.dtype.itemsize
        try:
            with self._zip.open(self._members[name]) as member:
                read_header(member, self.path, name)
                if start:
                    member.seek(member.tell() + start * itemsize)
                done = 0
                while done < count:
                    n = min(chunk, count - done)
                    data = member.read(n * itemsize)
                    if len(data) != n * itemsize:
                        raise DatasetError(self.path, f"array '{name}' is truncated (expected {header.size} values)")
                    yield np.frombuffer(data, dtype=header.dtype)
                    done += n
        except DatasetError:
            raise
        except READ_ERRORS as err:
            raise DatasetError(self.path, f"unreadable npz archive ({err})") from None


def member_headers(path: Path) -> dict[str, MemberHeader]:
    """Every member's header (only the headers are read)."""
    with NpzReader(path) as archive:
        return {name: archive.header(name) for name in archive.names()}


class NpzWriter:
    """Writes an ``.npz`` archive as ``numpy.savez`` (or ``savez_compressed``) does, members whole or
    in chunks; unlike numpy's, the same arrays make the same bytes (members carry a fixed time, not
    the second they were written at).

    Args:
        path: The archive to create.
        compressed: Deflate the members (read whole or in chunks alike, more slowly).
    """

    #: The time every member carries (zip's earliest).
    DATE_TIME = (1980, 1, 1, 0, 0, 0)

    def __init__(self, path: Path, compressed: bool = False) -> None:
        self._compression = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
        self._zip = zipfile.ZipFile(path, mode="w", compression=self._compression, allowZip64=True)

    def __enter__(self) -> NpzWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._zip.close()

    def write(self, name: str, array: np.ndarray) -> None:
        """Write a whole (small) array as member ``name``."""
        with self._open(name) as handle:
            np.lib.format.write_array(handle, np.asanyarray(array), allow_pickle=False)

    def _open(self, name: str) -> IO[bytes]:
        """Member ``name``'s stream, to write."""
        info = zipfile.ZipInfo(f"{name}.npy", date_time=self.DATE_TIME)
        info.compress_type, info.external_attr = self._compression, 0o600 << 16
        return self._zip.open(info, "w", force_zip64=True)

    @contextlib.contextmanager
    def member(self, name: str, shape: tuple[int, ...], dtype: np.dtype | type) -> Iterator[MemberSink]:
        """A C-order member whose data is written in chunks (``sink.write(values)``, in C order).

        Raises:
            ValueError: When the block ends and the chunks did not hold exactly ``prod(shape)`` values.
        """
        dtype = np.dtype(dtype)
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": tuple(int(d) for d in shape)}
        with self._open(name) as handle:
            np.lib.format.write_array_header_1_0(handle, header)
            sink = MemberSink(handle, dtype)
            yield sink
            expected = int(np.prod(shape, dtype=np.int64))
            if sink.count != expected:
                raise ValueError(f"{name}: wrote {sink.count} values, the header says {expected}")


def save_npz(path: Path, arrays: dict[str, np.ndarray], compressed: bool = False) -> None:
    """``numpy.savez(path, **arrays)`` (``savez_compressed``), the same bytes for the same arrays."""
    with NpzWriter(path, compressed) as npz:
        for name, array in arrays.items():
            npz.write(name, array)


class MemberSink:
    """The data of one member being written (see :meth:`NpzWriter.member`)."""

    def __init__(self, handle: IO[bytes], dtype: np.dtype) -> None:
        self._handle = handle
        self._dtype = dtype
        self.count = 0

    def write(self, values: np.ndarray) -> None:
        """Append ``values`` (cast to the member's dtype, C order)."""
        values = np.ascontiguousarray(values, dtype=self._dtype)
        self._handle.write(memoryview(values).cast("B"))
        self.count += values.size

    def write_bytes(self, data: bytes | memoryview) -> None:
        """Append raw bytes already in the member's dtype (e.g. copied from a spill file)."""
        self._handle.write(data)
        self.count += len(data) // self._dtype.itemsize

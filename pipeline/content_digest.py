"""A digest of what an OGB raw folder holds, independent of how its files were compressed.

The bytes of ``*.csv.gz`` depend on the zlib build and those of ``*.npz`` on the time they were
zipped, so two machines that write the same graph get different file digests. This digest hashes
the content instead: for every file under the folder, in sorted path order, its relative path
and then the decompressed text (``.gz``), each member array's name, dtype, shape and C-order
bytes (``.npz``, streamed, never loaded whole), or the bytes as they are (anything else).
The synthetic twins' registry entries record it as ``fingerprint`` (see
:func:`pipeline.sources.locate`).
"""

from __future__ import annotations

import gzip
import hashlib
import zipfile
from pathlib import Path

import numpy as np

from pipeline.errors import DatasetError
from pipeline.npz_stream import read_header

_BLOCK = 1 << 22


def _update_stream(digest: "hashlib._Hash", handle) -> None:
    for block in iter(lambda: handle.read(_BLOCK), b""):
        digest.update(block)


def _update_npz(digest: "hashlib._Hash", path: Path) -> None:
    with zipfile.ZipFile(path) as archive:
        for name in sorted(archive.namelist()):
            with archive.open(name) as member:
                header = read_header(member, path, name)
                shape, fortran, dtype = header.shape, header.fortran, header.dtype
                if dtype.hasobject:
                    raise DatasetError(path, f"array '{name}' holds Python objects; expected numbers")
                little = dtype.newbyteorder("<")
                digest.update(f"{name}|{little.str}|{tuple(shape)}|".encode())
                if (fortran and len(shape) > 1) or dtype.byteorder == ">":
                    # Normalise to little-endian C order, so the layout on disk does not matter.
                    data = np.frombuffer(member.read(), dtype=dtype)
                    data = data.reshape(shape, order="F" if fortran else "C").astype(little)
                    digest.update(data.tobytes(order="C"))
                else:
                    _update_stream(digest, member)


def content_digest(folder: Path) -> str:
    """sha256 (hex) of the content of every file under ``folder`` (see the module docstring).

    Raises:
        DatasetError: A file cannot be read or decompressed (naming it).
    """
    folder = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        digest.update(f"\0{rel}\0".encode())
        try:
            if path.suffix == ".gz":
                with gzip.open(path, "rb") as handle:
                    _update_stream(digest, handle)
            elif path.suffix == ".npz":
                _update_npz(digest, path)
            else:
                with path.open("rb") as handle:
                    _update_stream(digest, handle)
        except (OSError, EOFError, zipfile.BadZipFile, ValueError) as err:
            raise DatasetError(path, f"cannot read for the content digest ({err})") from None
    return digest.hexdigest()

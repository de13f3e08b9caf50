"""Files saved with ``torch.save`` (OGB's ``split_dict.pt`` and link splits), read with the
weights-only unpickler: tensors, and numpy arrays of plain dtypes, never arbitrary objects."""

from __future__ import annotations

import io
import itertools
import pickle
import pickletools
import re
import tarfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import DatasetError
from pipeline.graph import whole

#: The dtypes of the numpy arrays a split file may hold.
DTYPES = ("int64", "int32", "int16", "uint8", "float32", "float64", "bool")

#: The first bytes of a zip archive, all ``torch.load`` checks before reading one (torch.serialization._is_zipfile).
ZIP_MAGIC = b"PK\x03\x04"

#: Bytes read to find the legacy format's header: a pickled magic number, 15 to 24 bytes in protocols 2 to 5.
LEGACY_HEAD = 64


def load_pt(path: Path) -> Any:
    """``torch.load(path, weights_only=True)`` with numpy arrays allowed (``bytes`` too: numpy pickles
    an empty array's data as ``bytes()``).

    Raises:
        DatasetError: The file is missing, is no file ``torch.save`` writes (:func:`not_torch_file`), or
            anything else unpickling it refuses or fails on.
    """
    import torch

    if not path.is_file():
        raise DatasetError(path, "missing")
    reconstruct = np._core.multiarray._reconstruct  # numpy >= 2; pickles may name numpy.core too
    safe: list = [np.ndarray, np.dtype, bytes, reconstruct, (reconstruct, "numpy.core.multiarray._reconstruct")]
    safe += [type(np.dtype(t)) for t in DTYPES]
    try:
        with torch.serialization.safe_globals(safe), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")  # torch's, on each load
            warnings.filterwarnings("ignore", message="Detected pickle protocol")  # on each pickle not of protocol 2
            return torch.load(path, map_location="cpu", weights_only=True)  # tensors saved from a GPU too
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a bad file
        if (unlike := not_torch_file(path)) is not None:
            raise DatasetError(path, f"not a torch file (torch.save writes a zip archive; {unlike})") from None
        refused = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        named = f": {refused.group(1)} is not allowed" if refused else ""
        raise DatasetError(path, f"cannot be read with weights_only=True ({type(err).__name__}{named})") from None


def not_torch_file(path: Path) -> str | None:
    """What ``path`` is instead of a file ``torch.save`` writes, told apart as ``torch.load`` does: a zip
    archive (from its first bytes), else a tar archive (torch's oldest format) or the legacy format,
    a pickle whose first object is torch's magic number.

    Returns:
        ``None`` for a file of one of torch's formats (a damaged one too), else a few words on the file.
    """
    with path.open("rb") as file:
        head = file.read(LEGACY_HEAD)
    if head.startswith(ZIP_MAGIC) or _legacy_header(head) or _is_tar(path):
        return None
    if not head:
        return "this one is empty"
    if head[:1] == pickle.PROTO:
        return "this one is a pickle without torch's header, as pickle.dump writes: save it with torch.save"
    return f"this one begins {head[:16]!r}"


def _legacy_header(head: bytes) -> bool:
    """Whether ``head`` starts with the pickled magic number of torch's legacy format (``torch.save``
    with ``_use_new_zipfile_serialization=False``), read opcode by opcode, nothing unpickled."""
    import torch

    try:
        ops = itertools.islice(pickletools.genops(io.BytesIO(head)), 3)
        first = next((arg for op, arg, _ in ops if op.name not in ("PROTO", "FRAME")), None)
    except Exception:  # noqa: BLE001 - no pickle opcodes: no header
        return False
    return isinstance(first, int) and first == torch.serialization.MAGIC_NUMBER


def _is_tar(path: Path) -> bool:
    """Whether ``path`` is an uncompressed tar archive, torch's oldest format (``torch.load`` still tries it)."""
    try:
        with tarfile.open(path, mode="r:"):
            return True
    except (tarfile.TarError, OSError):
        return False


def as_array(value: Any) -> np.ndarray:
    """A loaded tensor's or array's values as a numpy array."""
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def as_ids(value: Any, where: Path | str, key: str) -> np.ndarray:
    """A tensor's or array's values as int64 ids: whole numbers only (``3.0`` is 3; ``19.9`` was cut
    to 19 before).

    Raises:
        DatasetError: Naming the file, the key and the first value that is no whole number.
    """
    array = as_array(value)
    if array.dtype.kind in "iu":
        return array.astype(np.int64, copy=False)
    if array.dtype.kind != "f" or not (ids := whole(array)).all():
        bad = array.reshape(-1)[0] if array.dtype.kind != "f" else array[~ids].reshape(-1)[0]
        raise DatasetError(where, f"'{key}' must hold whole-number ids, found {bad.item()!r} (dtype {array.dtype})")
    return array.astype(np.int64)

"""Files saved with ``torch.save`` (OGB's ``split_dict.pt`` and link splits), read with the
weights-only unpickler: tensors, and numpy arrays of plain dtypes, never arbitrary objects."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import DatasetError
from pipeline.graph import whole

#: The dtypes of the numpy arrays a split file may hold.
DTYPES = ("int64", "int32", "int16", "uint8", "float32", "float64", "bool")


def load_pt(path: Path) -> Any:
    """``torch.load(path, weights_only=True)`` with numpy arrays allowed (``bytes`` too: numpy pickles
    an empty array's data as ``bytes()``).

    Raises:
        DatasetError: The file is missing, or anything else unpickling it refuses or fails on.
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
            return torch.load(path, map_location="cpu", weights_only=True)  # tensors saved from a GPU too
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a bad file
        refused = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
        named = f": {refused.group(1)} is not allowed" if refused else ""
        raise DatasetError(path, f"cannot be read with weights_only=True ({type(err).__name__}{named})") from None


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

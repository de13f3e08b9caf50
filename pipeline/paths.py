"""Where gnnkit keeps raw datasets and the preprocessed cache.

``GNNKIT_HOME`` (default ``$XDG_CACHE_HOME/gnnkit`` or ``~/.cache/gnnkit``) holds ``data/`` (raw OGB
folders, downloaded or generated), ``cache/`` (preprocessed Arrow entries) and ``batches/`` (cached
sampled mini-batches for reuse). ``GNNKIT_DATA_ROOT``, ``GNNKIT_CACHE`` and ``GNNKIT_BATCHES``
override each part.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.errors import DatasetError


def gnnkit_home() -> Path:
    """The root of gnnkit's per-user state.

    Raises:
        DatasetError: ``GNNKIT_HOME`` names a file.
    """
    if os.environ.get("GNNKIT_HOME", "").strip():  # empty is unset (it was the current folder)
        home = Path(os.environ["GNNKIT_HOME"]).expanduser()
        if home.exists() and not home.is_dir():
            raise DatasetError("GNNKIT_HOME", f"{home} is a file (expected a folder for gnnkit's data and caches)")
        return home
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gnnkit"


def data_root() -> Path:
    """Folder of raw datasets in OGB's layout."""
    env = os.environ.get("GNNKIT_DATA_ROOT")
    return Path(env).expanduser() if env else gnnkit_home() / "data"


def cache_root() -> Path:
    """Folder of preprocessed cache entries."""
    env = os.environ.get("GNNKIT_CACHE")
    return Path(env).expanduser() if env else gnnkit_home() / "cache"


def batch_root() -> Path:
    """Folder of cached sampled mini-batches (see :mod:`pipeline.batch_cache`)."""
    env = os.environ.get("GNNKIT_BATCHES")
    return Path(env).expanduser() if env else gnnkit_home() / "batches"


def dataset_folder(root: Path, dataset: str) -> Path:
    """``root/<dataset>``, the folder of one dataset's entries in a cache, for a dataset *name* (one
    plain path component, as the caches file datasets) and nothing else: ``root / "/home/x"`` is
    ``/home/x`` and ``root / ".."`` the folder above, which a cache command must never touch.

    Raises:
        ValueError: ``dataset`` is empty, ``.``/``..`` or has a path separator.
    """
    if dataset in ("", ".", "..") or Path(dataset).name != dataset:  # "a/b" and "/x" have another name
        raise ValueError(f"dataset: expected a dataset name as the cache files it ('gnnkit cache list'), "
                         f"not a path, got {dataset!r}")
    return root / dataset


def nearest_existing(path: Path) -> Path | None:
    """``path`` itself if it exists, else its closest parent that does (``.`` for a relative path of
    new folders; ``None`` only if not even that exists): what a folder to make would be made in."""
    path = Path(path)
    return next((candidate for candidate in (path, *path.parents) if candidate.exists()), None)

"""Where gnnkit keeps raw datasets and the preprocessed cache.

``GNNKIT_HOME`` (default ``$XDG_CACHE_HOME/gnnkit`` or ``~/.cache/gnnkit``) holds ``data/`` (raw OGB
folders, downloaded or generated), ``cache/`` (preprocessed Arrow entries) and ``batches/`` (cached
sampled mini-batches for reuse). ``GNNKIT_DATA_ROOT``, ``GNNKIT_CACHE`` and ``GNNKIT_BATCHES``
override each part.
"""

from __future__ import annotations

import os
from pathlib import Path


def gnnkit_home() -> Path:
    """The root of gnnkit's per-user state."""
    if "GNNKIT_HOME" in os.environ:
        return Path(os.environ["GNNKIT_HOME"]).expanduser()
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

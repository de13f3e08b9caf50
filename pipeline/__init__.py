"""gnnkit's data pipeline: dataset registry, OGB raw layout, canonical graph, Arrow cache.

It knows nothing of Lightning or models; :mod:`gnnkit` reads data only through this API.
"""

from pipeline import cache, paths
from pipeline.atomic import atomic_write, atomic_write_text, save_figure
from pipeline.cache import CacheEntry
from pipeline.errors import DatasetError
from pipeline.fingerprint import tree_size
from pipeline.graph import CanonicalGraph
from pipeline.options import PreprocessOptions
from pipeline.preprocess import preprocess
from pipeline.progress import EVERY_RANK, Stages, is_rank_zero, log, peak_rss_mb, setup_logging
from pipeline.registry import DatasetSpec, load_registry, resolve

__all__ = [
    "cache",
    "paths",
    "CacheEntry",
    "CanonicalGraph",
    "DatasetError",
    "DatasetSpec",
    "PreprocessOptions",
    "load_registry",
    "preprocess",
    "Stages",
    "atomic_write",
    "atomic_write_text",
    "save_figure",
    "log",
    "peak_rss_mb",
    "resolve",
    "setup_logging",
    "EVERY_RANK",
    "is_rank_zero",
    "tree_size",
]

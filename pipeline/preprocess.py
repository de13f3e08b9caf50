"""Raw dataset -> validated canonical graph -> published Arrow cache entry (or a cache hit)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipeline import cache, paths, temp_paths
from pipeline.errors import DatasetError, writing_under
from pipeline.family import layout_module
from pipeline.fingerprint import DigestMemo, cache_key, raw_digests
from pipeline.options import PreprocessOptions
from pipeline.progress import Stages, log, peak_rss_mb
from pipeline.registry import DatasetSpec, resolve

if TYPE_CHECKING:
    from pipeline.sources import SourceFolder


def preprocess(
    dataset: str | Path | DatasetSpec,
    options: PreprocessOptions | None = None,
    *,
    data_root: Path | None = None,
    cache_root: Path | None = None,
    force: bool = False,
) -> cache.CacheEntry:
    """Make sure a dataset has a valid cache entry and return it.

    Args:
        dataset: Registry name, OGB-format folder path, or resolved spec.
        options: Preprocessing options; default: the registry entry's.
        data_root: Raw data folder (default :func:`pipeline.paths.data_root`).
        cache_root: Cache folder (default :func:`pipeline.paths.cache_root`).
        force: Rebuild even when the entry exists (like PyG's ``force_reload``).

    Returns:
        The cache entry; ``entry.manifest["stats"]`` holds the build time (up to writing; with
        ``options.memory_budget_mb``, the out-of-core build writes as it goes and ``out_of_core``
        holds its chunk sizes and sort counts) and peak memory.

    Raises:
        DatasetError: Unknown dataset or raw data that breaks the canonical-graph contract; no
            entry is published then.
    """
    from pipeline.sources import locate

    spec = dataset if isinstance(dataset, DatasetSpec) else resolve(dataset)
    options = options or spec.preprocess
    data_root = data_root or paths.data_root()
    cache_root = cache_root or paths.cache_root()
    say = Stages(f"preprocess {spec.name}")
    for stale in temp_paths.remove_stale(cache_root / spec.name):
        say(f"removed {stale.name} (left by an interrupted preprocess)")
    with writing_under(data_root):  # a twin generated, a download
        source = locate(spec, data_root, say)
    with writing_under(cache_root / spec.name):
        return _entry(spec, source, options, cache_root, force, say)


def _entry(spec: DatasetSpec, source: SourceFolder, options: PreprocessOptions, cache_root: Path, force: bool,
           say: Stages) -> cache.CacheEntry:
    """:func:`preprocess`'s cache hit, or its build, of ``source`` (located raw files)."""
    if options.memory_budget_mb is not None and source.meta["family"] != "node":
        raise DatasetError("preprocess.memory_budget_mb", f"out-of-core preprocessing reads node-property "
                           f"datasets; {spec.name} is a {source.meta['family']}-property dataset (leave it unset)")
    layout = layout_module(source.meta["family"])
    memo = DigestMemo(cache_root / "digests.json")
    inputs = {
        "dataset": spec.name,
        "source": spec.source,
        "source_version": source.version,
        "raw": raw_digests(source.folder, layout.raw_files(source.folder, source.meta), memo, say),
        "meta": source.meta,  # meta.json says how to read raw/: its task, metric and files
        "options": options.key_fields(),
        "schema_version": cache.SCHEMA_VERSION,
    }
    key = cache_key(inputs)
    if not force:
        try:
            hit = cache.lookup(cache_root, spec.name, key, say)
        except DatasetError as err:
            log.warning("%s; building it again", err)
            force = True  # replaces the damaged entry
        else:
            if hit is not None:
                say(f"cache hit {hit.path}")
                return hit
    names = {"name": spec.name, "family": source.meta["family"], "folder": str(source.folder)}  # not in the key
    if options.memory_budget_mb is None:
        arrays, meta = layout.build(source.folder, source.meta, options, say)
        stats = {"build_s": round(say.elapsed, 2), "peak_rss_mb": round(peak_rss_mb(), 1)}
        entry = cache.publish(cache_root, key, inputs, arrays, {**meta, **names}, stats, say, replace=force)
    else:
        from pipeline import out_of_core  # the chunked readers and the external sort: only for such a build

        with cache.building(cache_root, key, inputs) as builder:
            meta, order, details = out_of_core.build(builder, source.folder, source.meta, options, say)
            stats = {"build_s": round(say.elapsed, 2), "peak_rss_mb": round(peak_rss_mb(), 1), "out_of_core": details}
            entry = builder.publish({**meta, **names}, stats, order, replace=force)
    say(f"published {entry.path} in {say.elapsed:.1f}s")
    return entry

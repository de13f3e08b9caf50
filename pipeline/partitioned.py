"""A node dataset split into P partition entries of the Arrow cache, one per training rank.

Partition-parallel training (BNS-GCN, Wan et al., MLSys 2022, <https://arxiv.org/abs/2203.10983>;
PipeGCN, Wan et al., ICLR 2022, <https://arxiv.org/abs/2203.10428>; DistDGL,
<https://arxiv.org/abs/2010.05337>) gives every rank the nodes of one METIS part and their incoming
edges; the sources of those edges that other parts own are the rank's *halo*, whose features come
from their owners during training. Each partition entry holds, for part ``p`` of ``P``:

* ``owned``: the global ids of the nodes it owns, ascending;
* ``indptr``, ``indices``: the CSR rows of its owned nodes (destinations), sources as *global* ids;
* ``x`` (if the graph has features), ``y``: features and labels of the owned nodes, in ``owned`` order;
* ``split.train`` / ``split.valid`` / ``split.test``: positions in ``owned`` of the split's nodes;
* ``halo``: global ids of the sources it does not own, ascending, ``halo_owner``: their parts, and
  ``halo_refs``: how many of its edges come from each (the hottest remote nodes, for a feature cache);
* ``row_start``: where each owned node's row starts in the whole graph's CSR (edge ids of sampled
  batches are positions in the whole graph's ``indices``, as in a single process);
* ``owner``: the part of every node of the whole graph (``int16``, ``int32`` beyond 32,767 parts),
  so sampled training knows whom to ask for any node's neighbours and features (DistDGL,
  <https://arxiv.org/abs/2010.05337>, keeps the same map).

``meta`` carries the task meta of the whole graph plus ``part``, ``parts``, ``num_nodes`` (global),
``num_owned``, ``num_halo`` and the partition's ``edge_cut``. Entries are published like any cache
entry (temp folder, rename) under the dataset name ``<dataset>.part<p>of<P>``, keyed by the whole
graph's entry key, P, the part, the partitioner and its seed, so a changed graph or setting makes
new entries and an unchanged one is a cache hit.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pipeline import cache
from pipeline.errors import DatasetError
from pipeline.fingerprint import cache_key
from pipeline.graph import SPLITS
from pipeline.partition import edge_cut, metis_parts
from pipeline.progress import log

#: Bump when the layout or meaning of partition arrays changes.
PARTITION_VERSION = 2


def part_name(dataset: str, part: int, parts: int) -> str:
    """The cache dataset name of one partition entry."""
    return f"{dataset}.part{part}of{parts}"


def is_part_of(name: str, dataset: str) -> bool:
    """Whether the cache dataset ``name`` is one of ``dataset``'s partition entries (:func:`part_name`)."""
    return re.fullmatch(rf"{re.escape(dataset)}\.part\d+of\d+", name) is not None


def _inputs(entry: cache.CacheEntry, part: int, parts: int, seed: int) -> dict[str, Any]:
    return {
        "dataset": part_name(entry.dataset, part, parts),
        "graph": {"dataset": entry.dataset, "key": entry.key},
        "part": part,
        "parts": parts,
        "partitioner": {"method": "metis", "pymetis": metadata.version("pymetis"), "seed": seed},
        "schema_version": cache.SCHEMA_VERSION,
        "partition_version": PARTITION_VERSION,
    }


def _part_arrays(entry: cache.CacheEntry, owner: np.ndarray, owner_map: np.ndarray, part: int) -> dict[str, np.ndarray]:
    """The arrays of one partition entry (see the module docstring); ``owner_map`` is ``owner`` in
    its stored type, shared by every part."""
    indptr, indices = entry.numpy("indptr"), entry.numpy("indices")
    owned = np.flatnonzero(owner == part).astype(np.int64)
    starts, counts = indptr[owned], np.diff(indptr)[owned]
    local_indptr = np.zeros(owned.size + 1, dtype=np.int64)
    np.cumsum(counts, out=local_indptr[1:])
    gather = np.repeat(starts - local_indptr[:-1], counts) + np.arange(local_indptr[-1])
    local_indices = np.ascontiguousarray(indices[gather], dtype=np.int64)
    halo, refs = np.unique(local_indices[owner[local_indices] != part], return_counts=True)
    arrays = {"owned": owned, "indptr": local_indptr, "indices": local_indices,
              "row_start": np.ascontiguousarray(starts, dtype=np.int64)}
    if "x" in entry.manifest["arrays"]:
        arrays["x"] = np.ascontiguousarray(entry.numpy("x")[owned])
    arrays["y"] = np.ascontiguousarray(entry.numpy("y")[owned])
    for split in SPLITS:
        nodes = entry.numpy(f"split.{split}")
        arrays[f"split.{split}"] = np.searchsorted(owned, nodes[owner[nodes] == part]).astype(np.int64)
    arrays["halo"] = halo.astype(np.int64)
    arrays["halo_owner"] = owner[halo].astype(np.int32)
    arrays["halo_refs"] = refs.astype(np.int64)
    arrays["owner"] = owner_map
    return arrays


def owner_dtype(parts: int) -> np.dtype:
    """The smallest signed integer type holding part numbers ``0..parts-1``."""
    return np.dtype(np.int16) if parts <= np.iinfo(np.int16).max + 1 else np.dtype(np.int32)


def partition_entry(
    entry: cache.CacheEntry,
    parts: int,
    *,
    seed: int = 0,
    cache_root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[cache.CacheEntry]:
    """The ``parts`` partition entries of a node dataset's cache entry, built once and cached.

    Args:
        entry: The whole graph's cache entry (:func:`pipeline.preprocess`).
        parts: Number of parts P (at least 1).
        seed: METIS's seed.
        cache_root: Where entries are published (default: the whole graph's cache folder).
        progress: Called with a line per stage.

    Returns:
        The P entries, part 0 first.

    Raises:
        ValueError: ``parts`` below 1 or above the node count, or an entry that is not a node dataset.
    """
    say = progress or (lambda _msg: None)
    meta = entry.manifest["meta"]
    if meta.get("family", "node") != "node":
        raise ValueError(f"{entry.dataset}: partitioning needs a node-property dataset, not a {meta['family']} one")
    num_nodes = int(entry.manifest["arrays"]["indptr"]["shape"][0]) - 1
    if not 1 <= parts <= max(num_nodes, 1):
        raise ValueError(f"parts: expected 1 to {num_nodes} (the node count), got {parts}")
    cache_root = cache_root or entry.path.parent.parent
    inputs = [_inputs(entry, p, parts, seed) for p in range(parts)]
    keys = [cache_key(i) for i in inputs]
    try:
        hits = [cache.lookup(cache_root, i["dataset"], k) for i, k in zip(inputs, keys)]
    except DatasetError as err:  # as preprocessing does with a damaged graph entry
        log.warning("%s; partitioning again", err)
        hits, damaged = [], True
    else:
        damaged = False
    if hits and all(hit is not None for hit in hits):
        say(f"cache hit: {parts} partitions of {entry.dataset}")
        return hits  # type: ignore[return-value]
    indptr, indices = entry.numpy("indptr"), entry.numpy("indices")
    say(f"METIS: {num_nodes:,} nodes into {parts} parts")
    owner = metis_parts(indptr, indices, parts, seed=seed)
    cut = edge_cut(indptr, indices, owner)
    say(f"edge cut {cut:.4f}")
    owner_map = owner.astype(owner_dtype(int(owner.max(initial=0)) + 1))
    published = []
    for p, (part_inputs, key) in enumerate(zip(inputs, keys)):
        arrays = _part_arrays(entry, owner, owner_map, p)
        part_meta = {**meta, "name": part_inputs["dataset"], "part": p, "parts": parts, "num_nodes": num_nodes,
                     "num_owned": int(arrays["owned"].size), "num_halo": int(arrays["halo"].size),
                     "num_edges": int(arrays["indices"].size), "edge_cut": round(cut, 6)}
        published.append(cache.publish(cache_root, key, part_inputs, arrays, part_meta, replace=damaged))
        say(f"part {p}: {part_meta['num_owned']:,} nodes, {part_meta['num_halo']:,} halo nodes, "
            f"{part_meta['num_edges']:,} edges")
    return published


@dataclass
class Partition:
    """One opened partition entry (arrays memory-mapped; see the module docstring).

    Attributes:
        owned, indptr, indices, x, y, split, halo, halo_owner, halo_refs, row_start, owner: The
            entry's arrays.
        meta: The entry's meta.
    """

    owned: Any
    indptr: Any
    indices: Any
    x: Any | None
    y: Any
    split: dict[str, Any]
    halo: Any
    halo_owner: Any
    halo_refs: Any
    row_start: Any
    owner: Any
    meta: dict[str, Any]

    @property
    def part(self) -> int:
        return int(self.meta["part"])

    @property
    def parts(self) -> int:
        return int(self.meta["parts"])


def open_partition(entry: cache.CacheEntry) -> Partition:
    """A partition entry's arrays as (read-only backed) torch tensors."""
    arrays = entry.manifest["arrays"]
    return Partition(
        owned=entry.array("owned"), indptr=entry.array("indptr"), indices=entry.array("indices"),
        x=entry.array("x") if "x" in arrays else None, y=entry.array("y"),
        split={s: entry.array(f"split.{s}") for s in SPLITS},
        halo=entry.array("halo"), halo_owner=entry.array("halo_owner"), halo_refs=entry.array("halo_refs"),
        row_start=entry.array("row_start"), owner=entry.array("owner"), meta=dict(entry.manifest["meta"]),
    )

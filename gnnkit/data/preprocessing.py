"""The preprocessing a recipe asks for (``data.undirected``, ``data.preprocess...``) and what it got.

A recipe overrides the registry's preprocessing options field by field (``None`` keeps the
registry's choice); a folder given by path has no registry entry, so its graph is directed, with
features as stored, unless the recipe says otherwise. :func:`graph_facts` states which graph was
trained, for the run log and ``report.json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from pipeline import CacheEntry, DatasetError, PreprocessOptions


@dataclass(frozen=True)
class PreprocessOverrides:
    """Feature preprocessing set by a recipe (``data.preprocess`` in a recipe); part of the cache key.

    Values are checked by :func:`resolve_options` (a plain ``str`` here, so that a bad value is one
    line naming the field rather than a type-union traceback from the argument parser).

    Args:
        normalize_features: ``"row"`` (each node's feature row divided by its sum, as PyG's
            ``NormalizeFeatures``), ``"column"`` (zero mean, unit variance per column), ``"auto"``
            (``"row"`` for counts, else as stored) or ``"none"``; ``None`` keeps the registry's choice. See :mod:`pipeline.feature_prep`.
        memory_budget_mb: Preprocess out of core with peak memory under this many MiB
            (:mod:`pipeline.out_of_core`; node datasets); the entry is the same, so this is not part
            of the cache key. ``None`` keeps the registry's choice (in memory unless it sets one).
    """

    normalize_features: str | None = None
    memory_budget_mb: int | None = None


#: The options a recipe sets under ``data.preprocess`` (the others are ``data.<name>``).
PREPROCESS_FIELDS = tuple(f.name for f in fields(PreprocessOverrides))


def resolve_options(
    registry: PreprocessOptions,
    overrides: PreprocessOverrides | None = None,
    **graph: Any,
) -> PreprocessOptions:
    """The registry's options with a recipe's non-``None`` choices applied.

    Args:
        registry: The dataset's registry options (defaults for a folder given by path).
        overrides: ``data.preprocess``.
        **graph: ``data.undirected``, ``data.self_loops``, ``data.reorder``.

    Raises:
        DatasetError: A bad value, naming the recipe field (``data.self_loops``,
            ``data.preprocess.normalize_features``, ``data.preprocess.memory_budget_mb``).
    """
    changes = dict(graph)
    if overrides is not None:
        changes.update(asdict(overrides))
    try:
        return registry.replace(**changes)
    except DatasetError as err:
        name = err.where.rsplit(".", 1)[-1]
        field = f"data.preprocess.{name}" if name in PREPROCESS_FIELDS else f"data.{name}"
        raise DatasetError(field, err.problem) from None


def graph_facts(entry: CacheEntry) -> dict[str, Any]:
    """Which graph a cache entry holds: directed or symmetrised, self loops, edge counts, features.

    Returns:
        ``graph`` (``"symmetrised"`` or ``"directed"``), ``self_loops`` (``"keep"``/``"remove"``),
        ``raw_edges`` and ``raw_self_loops`` (as read, before symmetrising; ``None`` for entries
        built before they were recorded), ``num_edges`` (as trained) and ``normalize_features``.
    """
    options = PreprocessOptions.from_dict(entry.manifest["inputs"]["options"], "cache entry options")
    meta = entry.manifest["meta"]
    return {
        "graph": "symmetrised" if options.undirected else "directed",
        "self_loops": options.self_loops,
        "raw_edges": meta.get("num_raw_edges"),
        "raw_self_loops": meta.get("num_raw_self_loops"),
        "num_edges": meta["num_edges"],
        "normalize_features": meta.get("features_normalized", options.normalize_features),  # "auto" resolved
    }


def describe_line(name: str, facts: dict[str, Any]) -> str:
    """One log line for :func:`graph_facts`: ``data NAME: symmetrised graph, 1,000 -> 1,990 edges, ...``."""
    raw = facts["raw_edges"]
    edges = f"{facts['num_edges']:,} edges" if raw is None else f"{raw:,} -> {facts['num_edges']:,} edges"
    loops = "self loops removed" if facts["self_loops"] == "remove" else (
        "self loops kept" + ("" if facts["raw_self_loops"] is None else f" ({facts['raw_self_loops']:,} raw)"))
    features = {"none": "features as stored", "row": "features row-normalised",
                "column": "features standardised per column"}[facts["normalize_features"]]
    return f"data {name}: {facts['graph']} graph, {edges}, {loops}, {features}"

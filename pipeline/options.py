"""Preprocessing options: everything that changes the canonical graph is part of the cache key;
``memory_budget_mb`` (how the graph is built, not what it is) is not."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from pipeline.errors import DatasetError
from pipeline.reorder import REORDER_METHODS

SELF_LOOP_MODES = ("keep", "remove")
#: Feature transforms (:mod:`pipeline.feature_prep`): none, PyG's row normalisation, column standardisation,
#: and row normalisation for features without negative values (none for others).
FEATURE_NORMALIZATIONS = ("none", "row", "column", "auto")
#: What registry files written before the choice existed mean by ``normalize_features: true/false``.
LEGACY_NORMALIZATION = {True: "column", False: "none"}


@dataclass(frozen=True)
class PreprocessOptions:
    """How raw edges become the canonical CSR.

    Args:
        undirected: Add the reverse of every edge and drop duplicate edges (OGB's GCN/SAGE
            examples symmetrise ogbn-arxiv the same way). Default ``False``.
        self_loops: ``"keep"`` self loops as stored, or ``"remove"`` them. Default ``"keep"``.
        reorder: Graph-aware node numbering stored beside the graph as ``extra.node_order``
            (``order[v]`` = new number of node ``v``; node ids stay as they are): ``"rcm"``
            (reverse Cuthill-McKee), ``"partition"`` (nested METIS clusters, :mod:`pipeline.partition`)
            or ``"none"``; see :mod:`pipeline.reorder`. Default ``"none"``.
        normalize_features: Feature transform (:mod:`pipeline.feature_prep`, chunked): ``"row"``
            divides each node's feature row by its sum as PyG's ``NormalizeFeatures`` does,
            ``"column"`` standardises every column to zero mean and unit variance, ``"auto"`` is
            ``"row"`` for features without negative values (counts) and ``"none"`` for others,
            ``"none"`` keeps the features as stored. ``True``/``False`` (registry files written before the choice
            existed) mean ``"column"``/``"none"``. Default ``"none"``.
        memory_budget_mb: Build the entry out of core (:mod:`pipeline.out_of_core`: raw files read in
            chunks, the CSR by an external sort) so that the process's peak memory stays under this
            many MiB; node-property datasets only, ``reorder`` must be ``"none"``. The entry is the
            same, byte for byte, as the in-memory build's, so this is not part of the cache key.
            ``None`` (the default) builds in memory.
    """

    undirected: bool = False
    self_loops: str = "keep"
    reorder: str = "none"
    normalize_features: str = "none"
    memory_budget_mb: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.undirected, bool):
            raise DatasetError("preprocess.undirected", f"expected true or false, got {self.undirected!r}")
        if isinstance(self.normalize_features, bool):
            object.__setattr__(self, "normalize_features", LEGACY_NORMALIZATION[self.normalize_features])
        if self.normalize_features not in FEATURE_NORMALIZATIONS:
            raise DatasetError("preprocess.normalize_features",
                               f"expected one of {list(FEATURE_NORMALIZATIONS)}, got {self.normalize_features!r}")
        if self.self_loops not in SELF_LOOP_MODES:
            raise DatasetError(
                "preprocess.self_loops", f"expected one of {list(SELF_LOOP_MODES)}, got {self.self_loops!r}"
            )
        if self.reorder not in REORDER_METHODS:
            raise DatasetError(
                "preprocess.reorder", f"expected one of {list(REORDER_METHODS)}, got {self.reorder!r}"
            )
        budget = self.memory_budget_mb
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise DatasetError("preprocess.memory_budget_mb",
                               f"expected a whole number of MiB >= 1 (or null for in-memory), got {budget!r}")

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None, where: str) -> PreprocessOptions:
        """Build from a registry/recipe mapping, naming an unknown field in the error."""
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        for key in values:
            if key not in known:
                raise DatasetError(f"{where}.{key}", f"unknown preprocessing option; expected one of {sorted(known)}")
        try:
            return cls(**values)
        except DatasetError as err:
            raise DatasetError(f"{where}.{err.where.rsplit('.', 1)[-1]}", err.problem) from None

    def key_fields(self) -> dict[str, Any]:
        """The options as they enter the cache key. Options added after the first release are left
        out while at their default, so entries built before they existed keep their keys; and
        ``"column"`` enters as ``True``, the value it had before ``"row"`` existed. ``memory_budget_mb``
        never enters: both builds publish the same entry."""
        values = asdict(self)
        del values["memory_budget_mb"]
        if self.normalize_features == "none":
            del values["normalize_features"]
        elif self.normalize_features == "column":
            values["normalize_features"] = True
        return values

    def replace(self, **changes: Any) -> PreprocessOptions:
        """A copy with the non-``None`` values of ``changes`` applied."""
        merged = asdict(self)
        merged.update({k: v for k, v in changes.items() if v is not None})
        return PreprocessOptions(**merged)

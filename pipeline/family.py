"""OGB's three task families and the modules that read, build and generate each.

OGB sorts its datasets into node (``ogbn-*``), link (``ogbl-*``) and graph (``ogbg-*``) property
prediction (https://arxiv.org/abs/2005.00687). Each family has its own raw layout and meta keys, so
each has a *layout* module (meta normalisation, the files to fingerprint, reading with OGB's raw
readers and building the arrays to cache) and a *generator* module (its synthetic twins). Both are
imported lazily: reading a node dataset never imports the link or graph code.

A layout module exposes ``normalise_meta(raw, where)``, ``raw_files(folder, meta)`` and
``build(folder, meta, options, say) -> (arrays, meta)``; a generator module ``GENERATOR_VERSION``,
``SyntheticSpec``, ``presets()`` and ``generate(folder, spec, progress)``.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

from pipeline.errors import DatasetError

FAMILIES = ("node", "link", "graph")
#: OGB's name prefix of each family.
PREFIXES = {"ogbn-": "node", "ogbl-": "link", "ogbg-": "graph"}
#: OGB's sub-package of each family (holds its ``master.csv`` and ``Evaluator``).
OGB_PACKAGES = {"node": "ogb.nodeproppred", "link": "ogb.linkproppred", "graph": "ogb.graphproppred"}
_LAYOUTS = {"node": "pipeline.ogb_layout", "link": "pipeline.link_layout", "graph": "pipeline.graph_layout"}
_GENERATORS = {"node": "pipeline.synthetic", "link": "pipeline.synthetic_link", "graph": "pipeline.synthetic_graphs"}
#: Files whose presence marks a graph-property folder (one label per graph).
GRAPH_LABEL_FILES = ("graph-label.csv.gz", "graph-label.npz")


def family_of_name(name: str) -> str | None:
    """The family of an OGB dataset name (``ogbl-collab`` -> ``link``), ``None`` for other names."""
    return next((family for prefix, family in PREFIXES.items() if name.startswith(prefix)), None)


def detect_family(raw_meta: dict[str, Any], folder: Path | None = None, where: str = "meta.json") -> str:
    """The family of a raw OGB meta dict (as OGB writes it, before normalisation).

    An explicit ``"family"`` key wins; OGB's ``task type`` "link prediction" means link; a
    ``data type`` key (OGB's graph master.csv) or a graph-label file under ``folder/raw`` means
    graph; anything else is a node-property dataset.

    Raises:
        DatasetError: An explicit ``family`` that is not one of :data:`FAMILIES`.
    """
    if "family" in raw_meta:
        family = str(raw_meta["family"])
        if family not in FAMILIES:
            raise DatasetError(where, f"'family' must be one of {list(FAMILIES)}, got {family!r}")
        return family
    if str(raw_meta.get("task type", "")) == "link prediction":
        return "link"
    if "data type" in raw_meta:
        return "graph"
    if folder is not None and any((folder / "raw" / name).is_file() for name in GRAPH_LABEL_FILES):
        return "graph"
    return "node"


def _module(table: dict[str, str], family: str) -> ModuleType:
    if family not in table:
        raise ValueError(f"family: expected one of {list(FAMILIES)}, got {family!r}")
    return importlib.import_module(table[family])


def layout_module(family: str) -> ModuleType:
    """The layout module of ``family`` (reading, validation, building cache arrays)."""
    return _module(_LAYOUTS, family)


def generator_module(family: str) -> ModuleType:
    """The synthetic-twin generator module of ``family``."""
    return _module(_GENERATORS, family)


def generator_modules() -> dict[str, ModuleType]:
    """Every family's generator module, by family."""
    return {family: generator_module(family) for family in FAMILIES}


def normalise_meta(raw: dict[str, Any], where: str, folder: Path | None = None) -> dict[str, Any]:
    """Normalise a raw OGB meta dict with its family's rules; the result names its ``family``."""
    family = detect_family(raw, folder, where)
    meta = layout_module(family).normalise_meta(raw, where)
    meta["family"] = family
    return meta


def read_meta_json(folder: Path) -> dict[str, Any]:
    """Read ``<folder>/meta.json`` and normalise it with its family's rules."""
    path = folder / "meta.json"
    if not path.is_file():
        raise DatasetError(path, "missing: an OGB-format folder needs a meta.json with OGB's meta_dict keys")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DatasetError(path, f"not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(raw, dict):
        raise DatasetError(path, "expected a JSON object of meta keys")
    return normalise_meta(raw, str(path), folder)

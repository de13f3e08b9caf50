"""The steps every ``gnnkit import`` takes, whatever the task: refuse an existing folder, read the
source (one graph's arrays through :mod:`pipeline.array_source`), make the task's parts, write them
atomically.

The task modules say what the arrays mean: :mod:`pipeline.node_graph_import` (node prediction),
:mod:`pipeline.link_graph_import` (link prediction) and :mod:`pipeline.graph_set_import` (a dataset
of many graphs, graph property prediction).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.array_source import named_arrays, read_arrays
from pipeline.errors import DatasetError
from pipeline.paths import nearest_existing


#: Edge data a one-graph (node or link) import reads only to say it is not kept: gnnkit's recipes for
#: those tasks read no edge features (a graph set keeps its ``edge_attr``: :mod:`pipeline.graph_set_import`).
UNKEPT_EDGE_DATA = ("edge_attr", "edge_weight", "edge_feat")


@dataclass(frozen=True)
class Imported:
    """What an import wrote.

    Attributes:
        folder: The dataset folder.
        summary: A line on what was read (nodes, edges, features, task, split).
        num_nodes: N (of all graphs, for a set of graphs).
        has_features: Whether the graph has node features.
        homophily: A node graph's adjusted homophily by its training labels
            (:func:`pipeline.homophily.of_edge_list`; ``None``: not measured), for the recipe to suggest.
    """

    folder: Path
    summary: str
    num_nodes: int
    has_features: bool
    homophily: float | None = None


def shuffled_split(ids: np.ndarray, shares: dict[str, float], seed: int, at_least: int = 0) -> dict[str, np.ndarray]:
    """``ids`` dealt into parts of ``shares`` (``train``/``valid``/``test``, the last taking the rest) in a
    seeded random order, each but the last at least ``at_least`` long; each part sorted."""
    order = np.random.default_rng(seed).permutation(ids)
    names = list(shares)
    ends = np.cumsum([max(at_least, round(shares[p] * len(order))) for p in names[:-1]])
    return {p: np.sort(part) for p, part in zip(names, np.split(order, ends))}


def unkept_note(arrays: Mapping[str, np.ndarray], task: str) -> str:
    """``"; not kept: edge_attr [E, 4] (...)"`` for the :data:`UNKEPT_EDGE_DATA` in ``arrays``, or ``""``."""
    found = [f"{name} {list(arrays[name].shape)}" for name in UNKEPT_EDGE_DATA if name in arrays]
    return f"; not kept: {', '.join(found)} (gnnkit's {task} recipes read no edge features)" if found else ""


def named_source(source: Path | str | Any, names: Collection[str]) -> tuple[str, dict[str, np.ndarray]]:
    """A one-graph source's name (for errors) and its arrays among ``names``: a ``.pt``/``.npz``
    path, a PyG ``Data`` or a mapping of arrays (:mod:`pipeline.array_source`)."""
    if isinstance(source, (str, Path)):
        return str(source), read_arrays(Path(source), names)
    where = type(source).__name__
    return where, named_arrays(source, names, where)


def import_graph(source: Path | str | Any, folder: Path, read: Callable[[Any], tuple[str, Any]],
                 parts: Callable[[Any, str], dict[str, Any]], write: Callable[..., Path]) -> Imported:
    """Write ``source`` as a dataset folder, atomically.

    Args:
        source: The graph (or graphs), as ``read`` takes it.
        folder: The folder to write; must not exist.
        read: ``source ->`` its name (for errors) and its content (:func:`named_source`: named arrays).
        parts: ``(content, where) ->`` the writer's keyword arguments, with ``summary``, ``num_nodes``
            (N, or each graph's) and ``node_feat``; raises :class:`DatasetError` naming a bad array.
        write: The layout's writer (``write(folder, **parts)``; ``FileExistsError`` for a folder
            made meanwhile).

    Raises:
        DatasetError: A bad source or an existing ``folder``; nothing is written then.
    """
    folder = Path(folder)
    if folder.exists():  # before reading a large source
        raise DatasetError(folder, "exists: expected a new folder to write the dataset into")
    nearest = nearest_existing(folder)
    if nearest is not None and not nearest.is_dir():  # makedirs said "exists" of the file in the way
        raise DatasetError(folder, f"{nearest} is a file: expected a folder to write the dataset under")
    where, content = read(source)
    found = parts(content, where)
    summary = found.pop("summary")
    homophily = found.pop("homophily", None)
    try:
        written = write(folder, **found)
    except FileExistsError:  # made meanwhile by another process
        raise DatasetError(folder, "exists: expected a new folder to write the dataset into") from None
    except OSError as err:
        raise DatasetError(folder, f"cannot be written ({err.strerror or err})") from None
    return Imported(written, summary, int(np.sum(found["num_nodes"])), found["node_feat"] is not None, homophily)

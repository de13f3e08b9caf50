"""The task families a recipe trains: which LightningModule and datamodule, and how they are linked.

A recipe's top-level ``task:`` key (``node`` by default, ``--task link`` on the command line) picks
the pair ``gnnkit run`` builds, following OGB's three families (https://arxiv.org/abs/2005.00687):
node property prediction (:class:`gnnkit.module.NodeClassifier`), link property prediction
(``LinkPredictor``) and graph property prediction (``GraphClassifier``). Classes are named by
dotted path and imported only for the task a run uses.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: The ``data.*`` -> ``model.*`` links every family shares (applied when both are instantiated).
SHARED_LINKS = (
    ("data.num_features", "model.in_channels"),
    ("data.task", "model.task"),
)


@dataclass(frozen=True)
class TaskFamily:
    """One task family's classes.

    Attributes:
        module: Dotted path of the LightningModule.
        datamodule: Dotted path of the LightningDataModule.
        links: LightningCLI ``link_arguments(source, target, apply_on="instantiate")`` pairs beyond
            :data:`SHARED_LINKS`.
    """

    module: str
    datamodule: str
    links: tuple[tuple[str, str], ...] = ()

    def classes(self) -> tuple[type, type]:
        """The module and datamodule classes (imported now)."""
        return _import(self.module), _import(self.datamodule)


def _import(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


TASKS: dict[str, TaskFamily] = {
    "node": TaskFamily(
        "gnnkit.module.NodeClassifier",
        "gnnkit.data.datamodule.GraphDataModule",
        (("data.num_classes", "model.out_channels"), ("data.num_nodes", "model.num_nodes"),
         ("data.full_batch", "model.full_batch")),
    ),
    "link": TaskFamily(
        "gnnkit.link_predictor.LinkPredictor",
        "gnnkit.data.link_datamodule.LinkDataModule",
        (("data.num_nodes", "model.num_nodes"), ("data.full_batch", "model.full_batch")),
    ),
    "graph": TaskFamily(
        "gnnkit.graph_classifier.GraphClassifier",
        "gnnkit.data.graph_set_datamodule.GraphSetDataModule",
        (("data.num_classes", "model.out_channels"), ("data.num_edge_features", "model.edge_channels"),
         ("data.molecular", "model.molecular")),
    ),
}
DEFAULT_TASK = "node"


def task_family(name: str) -> TaskFamily:
    """The family called ``name``; a clear error naming the choices otherwise."""
    if name not in TASKS:
        raise ValueError(f"task: expected one of {sorted(TASKS)}, got {name!r}")
    return TASKS[name]


def resolve_dataset(dataset: str, task: str) -> Any:
    """``data.dataset`` resolved (:func:`pipeline.resolve`) and checked to be of ``task``'s family
    before anything is preprocessed: a link or graph folder given to a node recipe failed deep in
    preprocessing or in the cache reader.

    Raises:
        ValueError: Naming the dataset's family and the recipes that train it.
    """
    from pipeline.registry import resolve, spec_family

    spec = resolve(dataset)
    found = spec_family(spec)
    if found is not None and found != task:
        raise ValueError(f"data.dataset: {spec.name} is a {found}-property dataset; this recipe trains the {task} "
                         f"task (give a {found} recipe, whose 'task: {found}' picks that family, or a {task}-property "
                         "dataset)")
    return spec


def read_recipe(path: str | Path) -> Any:
    """A recipe's YAML (``safe_load``: no tags that build objects).

    Raises:
        ValueError: One line naming the file: not UTF-8 text, not YAML (with the line and column),
            or empty.
    """
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start}): a recipe is a YAML file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ValueError(f"{path}: not a valid recipe YAML{where}: {problem}") from None
    if doc is None:
        raise ValueError(f"{path}: empty (expected a mapping of recipe sections: model, data, trainer)")
    return doc


def override_values(overrides: list[str]) -> dict[str, str | None]:
    """LightningCLI-style ``--key value`` and ``--key=value`` overrides by key (``None``: no value
    follows the key)."""
    values: dict[str, str | None] = {}
    for i, arg in enumerate(overrides):
        if arg.startswith("--"):
            key, eq, value = arg[2:].partition("=")
            following = overrides[i + 1] if i + 1 < len(overrides) else None
            values[key] = value if eq else (None if following is None or following.startswith("--") else following)
    return values


def recipe_task(config: str | Path, overrides: list[str]) -> str:
    """The task a run trains: ``--task X`` / ``--task=X`` among the overrides, else the config's
    top-level ``task:``, else :data:`DEFAULT_TASK`.

    Raises:
        ValueError: A config that is not a YAML mapping (:func:`read_recipe`), or ``--task`` without a value.
    """
    values = override_values(overrides)
    if "task" in values:
        if values["task"] is None:
            raise ValueError("--task: expected a value (one of " + ", ".join(sorted(TASKS)) + ")")
        return values["task"]
    doc: Any = read_recipe(config)
    if not isinstance(doc, dict):
        raise ValueError(f"{config}: expected a mapping of recipe sections")
    return str(doc.get("task", DEFAULT_TASK))


def add_task_argument(parser: Any) -> None:
    """Add the top-level ``task`` key to a recipe parser (saved in the run's config.yaml)."""
    parser.add_argument("--task", type=str, default=DEFAULT_TASK,
                        help=f"The task family: one of {sorted(TASKS)} (node property prediction by default).")

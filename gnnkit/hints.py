"""Size hints: a recipe names the graph its hyper-parameters come from, and a run on a graph far
smaller or larger than that one gets a line pointing at the recipe set for its size.

A recipe states its reference graph as a top-level key of its config (a LightningCLI argument, so
it is checked, overridable and saved in the run folder's ``config.yaml``)::

    reference: {graph: Cora, nodes: 2708}

Hyper-parameters tuned on 140 labelled Cora nodes over-fit nothing on ogbn-products, and a
3 x 256 BatchNorm stack tuned on ogbn-arxiv over-fits Cora's labels (issue 18 measured 3-6 points
lost that way), so a graph more than :data:`FAR` times smaller or larger than the reference is
worth a word before training starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml


#: A dataset this many times smaller or larger than a recipe's reference graph gets a hint.
FAR = 10.0


@dataclass(frozen=True)
class Reference:
    """The graph a recipe's hyper-parameters were published for.

    Args:
        graph: Its name (``Cora``, ``ogbn-arxiv``).
        nodes: Its number of nodes.
        heterophilous: Its edges mostly join nodes of different classes (adjusted homophily below
            :data:`~pipeline.homophily.HETEROPHILOUS_BELOW`), as minesweeper's do.
    """

    graph: str
    nodes: int
    heterophilous: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, int) or self.nodes < 1:
            raise ValueError(f"reference.nodes: expected a positive node count, got {self.nodes!r}")
        if not isinstance(self.heterophilous, bool):
            raise ValueError(f"reference.heterophilous: expected true or false, got {self.heterophilous!r}")


def add_reference_argument(parser: Any) -> None:
    """Add the top-level ``reference`` key to a recipe parser (a ``LightningArgumentParser``)."""
    parser.add_argument(
        "--reference", type=Reference | None, default=None,
        help="The graph the recipe's hyper-parameters come from ({graph: NAME, nodes: N, heterophilous: "
             f"false}}); a dataset more than {FAR:g}x smaller or larger, or heterophilous unlike it, gets a hint "
             "naming a better-suited recipe.",
    )


@dataclass(frozen=True)
class _Candidate:
    path: Path
    reference: Reference
    model: str | None
    dataset: str | None


def _read_candidate(path: Path, task: str) -> _Candidate | None:
    """A ``task`` recipe's reference, model and default dataset, or ``None`` when it names no
    reference (or trains another task family)."""
    try:
        config = yaml.safe_load(path.read_text())
        if config.get("task", "node") != task:
            return None
        ref = config["reference"]
        reference = Reference(graph=str(ref["graph"]), nodes=int(ref["nodes"]),
                              heterophilous=bool(ref.get("heterophilous", False)))
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return None
    model = (config.get("model") or {}).get("model")
    dataset = (config.get("data") or {}).get("dataset")
    return _Candidate(path, reference, model, dataset)


def _candidates(recipe: Path, task: str = "node") -> Iterator[_Candidate]:
    """The ``task`` recipes beside ``recipe`` (itself left out) that name a reference, by file name."""
    for path in sorted(recipe.parent.glob("*.yaml")):
        if path.resolve() != recipe.resolve() and (candidate := _read_candidate(path, task)) is not None:
            yield candidate


def _distance(nodes: int, reference: Reference) -> float:
    """How far apart two sizes are, as the absolute log of their ratio."""
    return abs(math.log(nodes / reference.nodes))


def suggest_recipe(recipe: Path, model: str, num_nodes: int, heterophilous: bool | None = None,
                   task: str = "node", far: float = FAR) -> _Candidate | None:
    """The recipe beside ``recipe`` that suits a graph of ``num_nodes`` nodes best, if any.

    Candidates are the ``task`` recipes in the same folder whose reference graph is within ``far``
    times ``num_nodes`` (and, where ``heterophilous`` is known, is as heterophilous as the graph);
    preferred are the same ``model``, then recipes that train on their reference graph itself (over
    its synthetic twins), then the closest size, then the name.
    """
    best: tuple[tuple[Any, ...], _Candidate] | None = None
    for candidate in _candidates(recipe, task):
        if _distance(num_nodes, candidate.reference) > math.log(far):
            continue
        if heterophilous is not None and candidate.reference.heterophilous != heterophilous:
            continue
        rank = (candidate.model != model, candidate.dataset != candidate.reference.graph,
                _distance(num_nodes, candidate.reference), candidate.path.name)
        if best is None or rank < best[0]:
            best = (rank, candidate)
    return None if best is None else best[1]


def size_hint(recipe: Path, reference: Reference | None, model: str, dataset: str, num_nodes: int,
              heterophilous: bool | None = None, task: str = "node") -> str | None:
    """One line when ``dataset`` is more than :data:`FAR` times smaller or larger than the recipe's
    reference graph (``None`` otherwise, or when the recipe names no reference).

    Args:
        recipe: The recipe's path (its folder is searched for a better-sized recipe).
        reference: The recipe's ``reference``.
        model: The recipe's architecture (``gcn``), preferred among the suggestions.
        dataset: The dataset's name, for the message.
        num_nodes: The dataset's node count.
        heterophilous: Whether the dataset is (``None``: not known); suggestions are set for its kind.
        task: The run's task family; suggestions are recipes of it.
    """
    if reference is None or _distance(num_nodes, reference) <= math.log(FAR):
        return None
    ratio = num_nodes / reference.nodes
    size = f"{ratio:,.0f}x more" if ratio > 1 else f"{1 / ratio:,.0f}x fewer"
    line = (f"hint: {dataset} has {num_nodes:,} nodes, {size} than {reference.graph} ({reference.nodes:,}), the graph "
            f"{recipe.name}'s hyper-parameters come from")
    better = suggest_recipe(recipe, model, num_nodes, heterophilous, task)
    if better is None:
        return line + "; expect to tune them"
    other = "" if better.model == model else (f" with {better.model}, not {model}: on some graphs {model} does better "
                                               f"(a heterophilous one), so compare the two")
    return line + f"; {better.path} is set for {better.reference.graph} ({better.reference.nodes:,} nodes){other}"


def homophily_hint(recipe: Path, reference: Reference | None, dataset: str, homophily: float | None,
                   edges: int | None = None) -> str | None:
    """One line when ``dataset`` is heterophilous (adjusted homophily below
    :data:`~pipeline.homophily.HETEROPHILOUS_BELOW`) and the recipe was set on a graph that is not,
    naming the recipe beside it that was set on a heterophilous graph; or when its class labels are
    too few to tell (fewer than :data:`~pipeline.homophily.MIN_EDGES` edges join labelled training
    nodes, as in a split of 20 labels a class), saying so and naming that recipe to compare
    (``None`` otherwise).

    Args:
        recipe: The recipe's path (its folder is searched for a recipe set on a heterophilous graph).
        reference: The recipe's ``reference``; without one nothing is known to compare.
        dataset: The dataset's name, for the message.
        homophily: The dataset's adjusted homophily (:func:`gnnkit.homophily.adjusted_homophily`).
        edges: The edges it was measured on (:func:`gnnkit.homophily.homophily_measure`; ``None``
            without class labels).
    """
    from pipeline.homophily import HETEROPHILOUS_BELOW, MIN_EDGES, homophily_text, is_heterophilous

    if reference is None or reference.heterophilous:
        return None
    unmeasured = homophily is None and edges is not None and edges < MIN_EDGES
    if not unmeasured and not is_heterophilous(homophily):
        return None
    other = next((c for c in _candidates(recipe) if c.reference.heterophilous), None)
    if unmeasured:
        return None if other is None else (
            f"hint: {dataset}'s homophily is not measured: {edges:,} edges join its labelled training nodes, "
            f"fewer than {MIN_EDGES}; {recipe.name} is set for {reference.graph}, whose classes link within, so "
            f"if {dataset}'s do not, {other.path} does better: compare the two by validation "
            f"(README: Heterophilous graphs)")
    line = (f"hint: {dataset} is heterophilous (adjusted homophily {homophily_text(homophily)} on its training "
            f"labels, below {HETEROPHILOUS_BELOW:g}), unlike {reference.graph}, the graph {recipe.name}'s "
            f"hyper-parameters come from")
    if other is None:
        return line + "; expect to tune them"
    return line + f"; compare {other.path} by validation (README: Heterophilous graphs)"

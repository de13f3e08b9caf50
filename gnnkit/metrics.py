"""Task metrics through OGB's ``Evaluator``, also for graphs that are not OGB datasets."""

from __future__ import annotations

import numpy as np
import torch
from ogb.graphproppred import Evaluator as GraphEvaluator
from ogb.nodeproppred import Evaluator
from torch import Tensor

OGB_NAMES = ("ogbn-arxiv", "ogbn-products", "ogbn-proteins", "ogbn-papers100M", "ogbn-mag")


class _NamedMetric:
    """An OGB ``Evaluator`` for a graph that is not an OGB dataset: OGB's ``Evaluator(name)``
    accepts only OGB's own names, so this sets the metric named in a folder's meta.json and runs
    the same metric code, without pretending to be another dataset.

    Args:
        name: Dataset name (for messages).
        eval_metric: The metric (``acc`` / ``rocauc`` for nodes; ``rocauc`` / ``ap`` / ``acc`` for graphs).
        num_tasks: Number of label columns.
    """

    def __init__(self, name: str, eval_metric: str, num_tasks: int) -> None:  # noqa: D107
        self.name = name
        self.eval_metric = eval_metric
        self.num_tasks = num_tasks

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, eval_metric={self.eval_metric!r}, num_tasks={self.num_tasks})"


class MetricEvaluator(_NamedMetric, Evaluator):
    """OGB's node-property ``Evaluator`` for a graph that is not an OGB dataset (see :class:`_NamedMetric`)."""


def make_evaluator(name: str, eval_metric: str, num_tasks: int) -> Evaluator:
    """OGB's own evaluator for OGB datasets, the same metric code for anything else."""
    if name in OGB_NAMES:
        return Evaluator(name)
    return MetricEvaluator(name, eval_metric, num_tasks)


def evaluate(evaluator: Evaluator, y_true: Tensor, logits: Tensor) -> float:
    """Score predictions with ``evaluator``.

    Args:
        evaluator: An OGB-style evaluator.
        y_true: ``[B]`` class ids or ``[B, T]`` binary labels.
        logits: ``[B, C]`` class scores or ``[B, T]`` task scores.

    Returns:
        The metric as a float in [0, 1].
    """
    if evaluator.eval_metric == "acc":
        y_pred = logits.argmax(dim=-1, keepdim=True)
        y_true = y_true.view(-1, 1)
    else:
        y_pred = logits.float()  # mixed precision gives 16-bit scores, which numpy (and OGB) cannot read
        if y_true.is_floating_point():  # so do binary labels of a bfloat16 batch (--trainer.precision bf16-true)
            y_true = y_true.float()
    if y_true.numel() == 0:
        return float("nan")
    result = evaluator.eval({"y_true": y_true.cpu(), "y_pred": y_pred.detach().cpu()})
    value = result[evaluator.eval_metric]
    return float(np.asarray(value)) if not isinstance(value, torch.Tensor) else float(value)


class GraphMetricEvaluator(_NamedMetric, GraphEvaluator):
    """OGB's graph-property ``Evaluator`` for datasets that are not OGB's own, such as the twins
    (see :class:`_NamedMetric`)."""


def make_graph_evaluator(name: str, eval_metric: str, num_tasks: int) -> GraphEvaluator:
    """``ogb.graphproppred.Evaluator(name)`` for OGB's ``ogbg-*`` datasets, the same code otherwise."""
    if name.startswith("ogbg-"):
        return GraphEvaluator(name)
    return GraphMetricEvaluator(name, eval_metric, num_tasks)

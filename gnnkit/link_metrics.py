"""Link-prediction metrics through OGB's link ``Evaluator``, also for graphs that are not OGB datasets."""

from __future__ import annotations

import numpy as np
import torch
from ogb.linkproppred import Evaluator
from torch import Tensor

#: OGB's link-property datasets (the ``Evaluator`` knows their metrics by name).
OGB_NAMES = ("ogbl-ppa", "ogbl-collab", "ogbl-citation2", "ogbl-ddi", "ogbl-wikikg2", "ogbl-biokg", "ogbl-vessel")


class LinkMetricEvaluator(Evaluator):
    """OGB's link ``Evaluator`` for a dataset that is not an OGB one (a synthetic twin, a folder).

    ``Evaluator(name)`` accepts only OGB's own names; this runs the same metric code (Hits@K, MRR,
    ROC-AUC) for the metric named in the dataset's meta, without pretending to be another dataset.

    Args:
        name: Dataset name (for messages).
        eval_metric: ``"hits@K"``, ``"mrr"`` or ``"rocauc"``.
    """

    def __init__(self, name: str, eval_metric: str) -> None:  # noqa: D107
        self.name = name
        self.eval_metric = eval_metric
        if eval_metric.startswith("hits@"):
            self.K = int(eval_metric.split("@")[1])
        elif eval_metric not in ("mrr", "rocauc"):
            raise ValueError(f"eval_metric: expected hits@K, mrr or rocauc, got {eval_metric!r}")

    def __repr__(self) -> str:
        return f"LinkMetricEvaluator({self.name!r}, eval_metric={self.eval_metric!r})"


def make_link_evaluator(name: str, eval_metric: str) -> Evaluator:
    """OGB's own evaluator for OGB datasets, the same metric code for anything else."""
    if name in OGB_NAMES:
        return Evaluator(name)
    return LinkMetricEvaluator(name, eval_metric)


def evaluate_links(evaluator: Evaluator, pos: Tensor, neg: Tensor) -> float:
    """Score link predictions with ``evaluator``.

    Args:
        evaluator: An OGB link evaluator.
        pos: ``[P]`` scores of the positive edges.
        neg: ``[M]`` scores of the negative pairs (Hits@K, ROC-AUC), or ``[P, K]`` scores of each
            positive's own negatives (MRR).

    Returns:
        The metric as a float (MRR: the mean reciprocal rank).
    """
    if pos.numel() == 0:
        return float("nan")
    result = evaluator.eval({"y_pred_pos": pos.detach().float().cpu(), "y_pred_neg": neg.detach().float().cpu()})
    value = result["mrr_list"].mean() if evaluator.eval_metric == "mrr" else result[evaluator.eval_metric]
    return float(value) if isinstance(value, torch.Tensor) else float(np.asarray(value))

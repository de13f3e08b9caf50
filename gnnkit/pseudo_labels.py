"""Izadi et al.'s semi-supervised objective: the labelled nodes' loss plus a growing weight times the
loss of the unlabelled nodes against the model's own predictions.

Izadi, Fang, Stevenson, Lin, "Optimization of Graph Neural Networks with Natural Gradient Descent",
IEEE BigData 2020, <https://arxiv.org/abs/2008.09624> (reference code russellizadi/ssp,
``experiments/train_eval.py``): their SSP results (GCN on Cora 82.8 with the public split) train on

    L = CE(labelled) + lambda(t) * CE(unlabelled, argmax of the model's own output),
    lambda(t) = (t / T) ** gamma,

``t`` the 1-based epoch of ``T``, ``gamma`` swept over 1..10. The pseudo-labels are the predictions
of the same (training-mode) forward pass, without gradient through the argmax. Under K-FAC the
unlabelled nodes' gradients also enter the output factors, so the Fisher sees every node, which
is the point of the paper's semi-supervised preconditioning; with any optimizer the term is a
self-training regulariser. Transductive full-graph training only: "unlabelled" is every node
outside the training split (validation and test nodes included; their labels are never read).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F


def pseudo_label_weight(epoch: int, max_epochs: int, gamma: float) -> float:
    """``lambda = (epoch / max_epochs) ** gamma`` for the 0-based ``epoch`` (ssp counts from 1)."""
    if max_epochs <= 0:
        raise ValueError(f"pseudo_label_weight: max_epochs must be > 0, got {max_epochs}")
    return (min(epoch + 1, max_epochs) / max_epochs) ** gamma


def pseudo_label_loss(logits: Tensor, labelled: Tensor) -> Tensor:
    """Mean cross-entropy of the nodes not in ``labelled`` against their own argmax predictions.

    Args:
        logits: ``[num_nodes, classes]`` logits of every node of the graph.
        labelled: Indices of the nodes whose true labels the supervised loss uses.

    Returns:
        A scalar (0 when every node is labelled).
    """
    unlabelled = torch.ones(logits.shape[0], dtype=torch.bool, device=logits.device)
    unlabelled[labelled] = False
    rest = logits[unlabelled]
    if rest.shape[0] == 0:
        return logits.sum() * 0.0
    return F.cross_entropy(rest, rest.detach().argmax(dim=-1))

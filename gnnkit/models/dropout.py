"""Dropout (Srivastava et al., JMLR 2014 <https://jmlr.org/papers/v15/srivastava14a.html>) that runs
the native counter-based kernel on CPU float32 and torch's otherwise.

torch's CPU dropout draws a Bernoulli per element from one locked generator: for a sampled GraphSAGE
step on synthetic-arxiv it was a third of the step. The native kernel (:func:`gnnkit.native.ops.dropout`)
takes its seed from torch's default generator, so ``seed_everything`` makes runs repeatable.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional

from gnnkit import native


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)`` when training.

    Args:
        x: Input of any shape.
        p: Drop probability in ``[0, 1)``.
        training: Identity when False.

    Returns:
        A tensor of ``x``'s shape.
    """
    if not training or p == 0.0:
        return x
    if x.device.type == "cpu" and x.dtype == torch.float32 and 0.0 < p < 1.0 and "dropout" in native.kernels():
        seed = int(torch.randint(-(2**63), 2**63 - 1, (1,)))
        return native.ops.dropout(x, p, seed)
    return functional.dropout(x, p=p, training=True)

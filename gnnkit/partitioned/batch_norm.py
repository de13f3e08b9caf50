"""Batch normalisation over every partition's nodes: the statistics of the whole graph.

With one partition per rank, a plain ``BatchNorm1d`` would normalise each rank's nodes by their own
mean and variance, and keep a different running average on every rank. BNS-GCN
(<https://arxiv.org/abs/2203.10983>) synchronises them; so does this layer, on any backend
(``torch.nn.SyncBatchNorm`` wants CUDA): per-feature sums, sums of squares and the row count are
summed over the ranks by an all-reduce whose backward all-reduces the gradients, so forward,
backward and the running statistics equal one process's on the whole graph.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class _AllReduceSum(torch.autograd.Function):
    """Sum over the ranks; the gradient of every rank's input is the sum of the ranks' gradients."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        out = x.clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        out = grad.clone()
        dist.all_reduce(out)
        return out


class PartitionBatchNorm(nn.BatchNorm1d):
    """``BatchNorm1d`` whose training statistics cover the rows of every rank (a collective)."""

    def forward(self, x: Tensor) -> Tensor:  # noqa: D102
        if not (self.training and _distributed()):
            return super().forward(x)
        width = x.size(1)
        stats = _AllReduceSum.apply(torch.cat([x.sum(0), (x * x).sum(0), x.new_full((1,), float(x.size(0)))]))
        count = stats[-1]
        mean = stats[:width] / count
        var = (stats[width:2 * width] / count - mean * mean).clamp_min(0.0)
        if self.track_running_stats and self.running_mean is not None and self.running_var is not None:
            with torch.no_grad():
                momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked + 1)
                self.num_batches_tracked += 1
                self.running_mean.lerp_(mean.detach(), momentum)
                self.running_var.lerp_(var.detach() * count / (count - 1).clamp_min(1.0), momentum)
        out = (x - mean) * torch.rsqrt(var + self.eps)
        return out * self.weight + self.bias if self.affine else out


def partition_batch_norms(module: nn.Module) -> nn.Module:
    """Replace every ``BatchNorm1d`` below ``module`` with a :class:`PartitionBatchNorm` holding the
    same parameters and running statistics; returns ``module`` (changed in place)."""
    for name, child in module.named_children():
        if type(child) is nn.BatchNorm1d:
            synced = PartitionBatchNorm(child.num_features, child.eps, child.momentum, child.affine,
                                        child.track_running_stats)
            synced.load_state_dict(child.state_dict())
            setattr(module, name, synced.to(next(child.buffers(), torch.empty(0)).device))
        else:
            partition_batch_norms(child)
    return module

"""Boundary-node sampling on 2 gloo ranks: ``bns_worker.py OUT MODEL``. Writes, per rank, the halo
rows sent exactly and sampled, and how far one sample and the mean of many are from the exact layer."""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.getcwd())
from halo_worker import F, finish, partition, spawn  # noqa: E402

from gnnkit.models.node_gnn import NodeGNN  # noqa: E402
from gnnkit.partitioned.boundary_sampling import BoundarySampler  # noqa: E402

SAMPLES = 400


def worker(rank: int, world: int, out: str, name: str) -> None:
    part = partition(rank, world)
    x, owned, plan, adj = part["whole"][2], part["owned"], part["plan"], part["adj"]
    torch.manual_seed(0)
    layer = NodeGNN(name, F, 8, 8, num_layers=1, aggregation="gnnkit", format="csr")
    sampler = BoundarySampler(0.5, seed=3)
    with torch.no_grad():  # sampled steps first: GCN's degrees must come from the whole exchange all the same
        samples = [layer(x[owned], None, adj=adj, halo=sampler.plan(plan, step)) for step in range(SAMPLES)]
        exact = layer(x[owned], None, adj=adj, halo=plan)
        same = layer(x[owned], None, adj=adj, halo=BoundarySampler(1.0).plan(plan, 0))
    sent = [sampler.plan(plan, step).send_rows for step in range(20)]
    scale = float(exact.abs().mean())
    finish(out, rank, {"exact_sent": plan.send_rows, "sampled_sent": float(np.mean(sent)),
                       "one_error": float((samples[0] - exact).abs().mean()) / scale,
                       "mean_error": float((torch.stack(samples).mean(0) - exact).abs().mean()) / scale,
                       "rate_one_error": float((same - exact).abs().max())})


if __name__ == "__main__":
    spawn(worker, 2, sys.argv[1], sys.argv[2])

"""Boundary-node sampling on 2 gloo ranks: ``bns_worker.py OUT MODEL``. Writes, per rank, the halo
rows sent exactly and sampled, and how far one sample and the mean of many are from the exact layer."""

from __future__ import annotations

import json
import os
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.getcwd())
from halo_worker import F, graph  # noqa: E402

from gnnkit.models.node_gnn import NodeGNN  # noqa: E402
from gnnkit.partitioned.boundary_sampling import BoundarySampler  # noqa: E402
from gnnkit.partitioned.halo import HaloPlan  # noqa: E402
from gnnkit.partitioned.local_graph import local_adjacency  # noqa: E402
from pipeline.partition import metis_parts  # noqa: E402

SAMPLES = 400


def worker(rank: int, port: int, out: str, name: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    indptr, indices, x, _ = graph()
    owner = metis_parts(indptr, indices, 2)
    owned = np.flatnonzero(owner == rank)
    rows = [indices[indptr[v]:indptr[v + 1]] for v in owned]
    local_indices = np.concatenate(rows)
    halo = np.unique(local_indices[owner[local_indices] != rank])
    t = torch.from_numpy
    plan = HaloPlan.build(t(owned), t(halo), t(owner[halo]))
    adj = local_adjacency(t(np.concatenate([[0], np.cumsum([r.size for r in rows])])), t(local_indices),
                          t(owned), t(halo))
    torch.manual_seed(0)
    layer = NodeGNN(name, F, 8, 8, num_layers=1, aggregation="gnnkit", format="csr")
    sampler = BoundarySampler(0.5, seed=3)
    with torch.no_grad():
        exact = layer(x[owned], None, adj=adj, halo=plan)
        samples = [layer(x[owned], None, adj=adj, halo=sampler.plan(plan, step)) for step in range(SAMPLES)]
        same = layer(x[owned], None, adj=adj, halo=BoundarySampler(1.0).plan(plan, 0))
    sent = [sampler.plan(plan, step).send_rows for step in range(20)]
    scale = float(exact.abs().mean())
    result = {"exact_sent": plan.send_rows, "sampled_sent": float(np.mean(sent)),
              "one_error": float((samples[0] - exact).abs().mean()) / scale,
              "mean_error": float((torch.stack(samples).mean(0) - exact).abs().mean()) / scale,
              "rate_one_error": float((same - exact).abs().max())}
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(port, sys.argv[1], sys.argv[2]), nprocs=2)

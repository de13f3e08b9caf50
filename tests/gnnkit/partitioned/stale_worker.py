"""PipeGCN's stale exchange on 2 gloo ranks: ``stale_worker.py OUT``. Step ``t`` sends owned rows
holding ``t`` and halo gradients holding ``t + 1``; writes what each step received."""

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
from halo_worker import graph  # noqa: E402

from gnnkit.partitioned.halo import HaloPlan  # noqa: E402
from gnnkit.partitioned.stale_halo import StaleHalo  # noqa: E402
from pipeline.partition import metis_parts  # noqa: E402

STEPS = 4


def worker(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    indptr, indices, _, _ = graph()
    owner = metis_parts(indptr, indices, 2)
    owned = np.flatnonzero(owner == rank)
    sources = np.concatenate([indices[indptr[v]:indptr[v + 1]] for v in owned])
    halo = np.unique(sources[owner[sources] != rank])
    t = torch.from_numpy
    plan = HaloPlan.build(t(owned), t(halo), t(owner[halo]))
    stale = StaleHalo(plan)
    sent = torch.zeros(plan.num_owned, dtype=torch.bool)
    sent[plan.send_index] = True
    seen = []
    for step in range(STEPS):
        rows = torch.full((plan.num_owned, 3), float(step), requires_grad=True)
        received = stale.exchange(rows, layer=0)
        (received * (step + 1)).sum().backward()
        seen.append({"halo": sorted(set(received.flatten().tolist())),
                     "grad_sent_rows": sorted(set(rows.grad[sent].flatten().tolist())),
                     "grad_other_rows": sorted(set(rows.grad[~sent].flatten().tolist()))})
    stale.drain()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(seen, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(port, sys.argv[1]), nprocs=2)

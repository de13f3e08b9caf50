"""PipeGCN's stale exchange on 2 gloo ranks: ``stale_worker.py OUT``. Step ``t`` sends owned rows
holding ``t`` and halo gradients holding ``t + 1``; writes what each step received."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from halo_worker import finish, partition, spawn  # noqa: E402

from gnnkit.partitioned.stale_halo import StaleHalo  # noqa: E402

STEPS = 4


def worker(rank: int, world: int, out: str) -> None:
    plan = partition(rank, world)["plan"]
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
    finish(out, rank, seen)


if __name__ == "__main__":
    spawn(worker, 2, sys.argv[1])

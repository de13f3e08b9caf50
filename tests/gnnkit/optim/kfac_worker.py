"""D-KFAC on 2 gloo ranks against 1 rank on the same global batch: ``kfac_worker.py OUT PIPELINE``.

Rank r trains on rows r::2 of the batch with its gradients averaged by all-reduce (what DDP does);
rank 0 also trains a copy alone on every row. Writes the largest factor and weight differences."""

from __future__ import annotations

import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, os.getcwd())
from gnnkit.optim import KFAC  # noqa: E402

STEPS = 4
OPTIONS = {"lr": 0.05, "damping": 0.03, "factor_decay": 0.5, "inv_update_interval": 2}


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 5), nn.Tanh(), nn.Linear(5, 3))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + step)
    return torch.randn(16, 6, generator=generator), torch.randint(0, 3, (16,), generator=generator)


def train(net: nn.Module, opt: KFAC, rows: slice, world: int) -> list[int]:
    """Trains; returns how many factor collectives were in flight when each backward ended."""
    in_flight = []
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        nn.functional.cross_entropy(net(x[rows]), y[rows]).backward()
        in_flight.append(len(opt.comm._pending) if opt.comm is not None else 0)
        if world > 1:
            for p in net.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(world)
        opt.step()
    return in_flight


def worker(rank: int, port: int, out: str, pipeline: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    net = model()
    opt = KFAC(net.parameters(), kfac_pipeline=pipeline, **OPTIONS).bind(net)
    in_flight = train(net, opt, slice(rank, None, 2), 2)
    deferred = opt._deferred is not None  # pipelined: step 3 inverts nothing, its factors are still in flight
    opt.state_dict()  # folds them in
    dist.barrier()
    alone = model()
    dist.destroy_process_group()  # the single-rank run below sees no process group
    solo = KFAC(alone.parameters(), **OPTIONS).bind(alone)
    assert solo.comm is None
    train(alone, solo, slice(None), 1)
    factors = max((opt.state[p][k] - solo.state[q][k]).abs().max().item()
                  for p, q in zip(net.parameters(), alone.parameters()) if p.dim() == 2 for k in ("A", "G"))
    weights = max((p - q).abs().max().item() for p, q in zip(net.parameters(), alone.parameters()))
    result = {"factors_max_diff": factors, "weights_max_diff": weights, "owners": opt.comm.owners,
              "in_flight_after_backward": in_flight, "deferred_at_end": deferred}
    with open(f"{out}.{rank}", "w") as handle:
        json.dump(result, handle)


def main() -> None:
    out, pipeline = sys.argv[1], bool(int(sys.argv[2]))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.start_processes(worker, args=(port, out, pipeline), nprocs=2, start_method="fork")  # inherits the imports
    results = {str(r): json.load(open(f"{out}.{r}")) for r in range(2)}
    results["owners"] = results["0"]["owners"]
    with open(out, "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    main()

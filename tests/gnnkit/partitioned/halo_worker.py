"""P gloo ranks, each with one METIS partition of a random graph, against one process on the whole
graph: ``halo_worker.py OUT WORLD MODEL``. Writes the largest forward and gradient differences."""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.getcwd())
from gnnkit.models.node_gnn import NodeGNN  # noqa: E402
from gnnkit.partitioned.batch_norm import partition_batch_norms  # noqa: E402
from gnnkit.partitioned.halo import HaloPlan, with_halo  # noqa: E402
from gnnkit.partitioned.input_aggregation import aggregate_input, first_layer_input  # noqa: E402
from gnnkit.partitioned.local_graph import gcn_local_normalized, local_adjacency  # noqa: E402
from gnnkit.sparse import Adjacency, spmm  # noqa: E402
from pipeline.graph import edges_to_csr  # noqa: E402
from pipeline.partition import metis_parts  # noqa: E402

N, F, C = 120, 6, 4


def graph() -> tuple[np.ndarray, np.ndarray, torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, N, 600), rng.integers(0, N, 600)
    indptr, indices = edges_to_csr(np.concatenate([src, dst]), np.concatenate([dst, src]), N)
    generator = torch.Generator().manual_seed(1)
    return indptr, indices, torch.randn(N, F, generator=generator), torch.randint(0, C, (N,), generator=generator)


def model(name: str) -> NodeGNN:
    torch.manual_seed(0)
    return NodeGNN(name, F, 8, C, num_layers=3, dropout=0.0, batch_norm=True, aggregation="gnnkit", format="csr")


def step(net: NodeGNN, logits: torch.Tensor, y: torch.Tensor, scale: float) -> dict[str, torch.Tensor]:
    """Sum of the cross-entropy over the given rows, / N (the whole graph's mean); returns grads."""
    loss = torch.nn.functional.cross_entropy(logits, y, reduction="sum") / scale
    net.zero_grad()
    loss.backward()
    return {name: p.grad.clone() for name, p in net.named_parameters()}


def partition(rank: int, world: int) -> dict:
    """Rank ``rank``'s METIS partition of :func:`graph`: ``owned``, its CSR rows (global ids) as
    ``indptr``/``indices``, ``halo``, the agreed ``plan`` and the local ``adj`` (a collective)."""
    indptr, indices, x, y = graph()
    owner = metis_parts(indptr, indices, world)
    owned = np.flatnonzero(owner == rank)
    rows = [indices[indptr[v]:indptr[v + 1]] for v in owned]
    local_indptr = np.concatenate([[0], np.cumsum([r.size for r in rows])])
    local_indices = np.concatenate(rows)
    halo = np.unique(local_indices[owner[local_indices] != rank])
    t = torch.from_numpy
    return {"whole": (indptr, indices, x, y), "owned": owned, "halo": halo,
            "plan": HaloPlan.build(t(owned), t(halo), t(owner[halo])),
            "adj": local_adjacency(t(local_indptr), t(local_indices), t(owned), t(halo))}


def finish(out: str, rank: int, result: object) -> None:
    """Write this rank's result to ``OUT.<rank>`` and leave the process group."""
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def _start(rank: int, world: int, port: int, worker: Callable[..., None], *args: object) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    worker(rank, world, *args)


def spawn(worker: Callable[..., None], world: int, *args: object) -> None:
    """Run ``worker(rank, world, *args)`` on ``world`` gloo ranks of a fresh localhost group."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # fork: the ranks inherit the imports (a spawned rank re-imports torch, PyG and gnnkit, ~3 s each
    # on 2 cores); nothing here has started a thread pool or CUDA before it
    mp.start_processes(_start, args=(world, port, worker, *args), nprocs=world, start_method="fork")


def worker(rank: int, world: int, out: str, name: str) -> None:
    part = partition(rank, world)
    indptr, indices, x, y = part["whole"]
    owned, plan, adj = part["owned"], part["plan"], part["adj"]
    t = torch.from_numpy
    net = partition_batch_norms(model(name))
    logits = net(x[owned], None, adj=adj, halo=plan)
    grads = step(net, logits, y[owned], N)
    for g in grads.values():
        dist.all_reduce(g)  # what DDP does (it averages; the loss was scaled by the global count)
    whole = model(name)
    full_logits = whole(x, None, adj=Adjacency(t(indptr), t(indices)))
    full_grads = step(whole, full_logits, y, N)
    net.eval(), whole.eval()  # running statistics: those of the whole graph
    with torch.no_grad():
        evaluated = net(x[owned], None, adj=adj, halo=plan) - whole(x, None, adj=Adjacency(t(indptr), t(indices)))[owned]
    finish(out, rank, {
        "eval_forward": float(evaluated.abs().max()),
        "forward": float((logits - full_logits[owned]).detach().abs().max()),
        "grad": max(float((grads[k] - full_grads[k]).abs().max()) for k in grads),
        "halo": int(part["halo"].size), "sent": plan.send_rows,
        **aggregated_input(name, x[owned], y[owned], adj, plan, full_logits[owned], full_grads),
    })


def aggregated_input(name: str, x: torch.Tensor, y: torch.Tensor, adj: Adjacency, plan: HaloPlan,
                     full_logits: torch.Tensor, full_grads: dict[str, torch.Tensor]) -> dict:
    """The first layer's input aggregated once, 5 halo rows per owner and round (several rounds,
    uneven between the ranks): its aggregate against the exchanged one, and the model on it against
    the whole graph's; for a model that cannot start from it, its one-line error."""
    net = partition_batch_norms(model(name))
    try:
        kind = net.input_aggregation()
    except ValueError as error:
        return {"aggregation_error": str(error)}
    reduce, graph = ("sum", gcn_local_normalized(adj, plan)) if kind == "gcn" else ("mean", adj)
    streamed = aggregate_input(x, graph, plan, reduce, chunk_rows=5)
    exchanged = spmm(graph, with_halo(x, plan), reduce=reduce)
    logits = net(first_layer_input(x, adj, plan, kind, chunk_rows=5), None, adj=adj, halo=plan, input_aggregated=True)
    grads = step(net, logits, y, N)
    for g in grads.values():
        dist.all_reduce(g)
    return {"aggregate": float((streamed - exchanged).abs().max()),
            "rounds": -(-max(plan.send_counts + plan.recv_counts) // 5),
            "aggregated_forward": float((logits - full_logits).detach().abs().max()),
            "aggregated_grad": max(float((grads[k] - full_grads[k]).abs().max()) for k in grads)}


if __name__ == "__main__":
    spawn(worker, int(sys.argv[2]), sys.argv[1], sys.argv[3])

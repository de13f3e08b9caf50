"""Partition-parallel against replicated training on 1, 2 and 4 gloo ranks: full-graph, or sampled.

    python bench/scale.py [--json PATH] [--dataset synthetic-arxiv] [--ranks 1 2 4] [--epochs 30]
                          [--network loopback|1gbit] [--model gcn] [--hidden 256] [--layers 3]
                          [--boundary-sampling 0.5 0.25] [--no-aggregate-input]
    python bench/scale.py --out-of-core [--json PATH] [--out-of-core-json bench/results/out_of_core.json]
    python bench/scale.py --sampled [--json PATH] [--dataset synthetic-products] [--ranks 1 2 4]
                          [--epochs 2] [--network loopback|1gbit] [--batch-size 1024] [--fanout 15 10 5]
                          [--remote-cache 0.1] [--remote-dtype float16] [--no-balance-seeds]
                          [--test-nodes 50000]

Both modes train the same full-graph GNN (gnnkit aggregation, Adam, the arxiv recipe's shape) for
``--epochs`` epochs and test it exactly:

* ``replicated``: every rank holds the whole graph and its features (DDP as today): each computes
  the whole forward, its loss over its share of the training nodes, and the gradients are averaged.
* ``partitioned``: every rank opens only its METIS partition entry (``gnnkit partition``) and
  exchanges halo rows in every layer (:mod:`gnnkit.partitioned`, the BNS-GCN/PipeGCN design without
  sampling or staleness, https://arxiv.org/abs/2203.10983).

Per run it records rank 0's graph + feature bytes held (the arrays it opened) and the halo input
features it receives every step, peak RSS per rank,
median epoch time, halo bytes sent per epoch (rows x width x 4 bytes, forward and backward, every
layer) and the test metric. ``--network 1gbit`` puts each rank in a network namespace behind the
emulated 1 Gbit/s link of ``bench/comm.py`` (needs root; loopback otherwise, and the output says so).
``--boundary-sampling 0.5 0.25`` adds partitioned runs at the largest P with BNS-GCN's boundary
sampling at those rates. Unless ``--no-aggregate-input``, one more exact partitioned run at the largest
P aggregates the first layer's input once, streaming the halo features in chunks
(:mod:`gnnkit.partitioned.input_aggregation`): it holds ``Â X`` in place of ``X``, its halo feature
column is the largest chunk it held at once (at setup), and the first layer exchanges nothing.
``summary`` holds ``memory_per_rank_over_replicated_p4`` (partitioned graph + feature bytes, the halo
features held included, over replicated at the largest P), ``epoch_partitioned_over_replicated_p4``
and ``acc_gap`` (single-process metric minus partitioned metric at the largest P, in points) of that
run, and ``*_every_layer_exchanged`` of the run exchanging the halo in every layer (memory also
without the halo, and with each sampling rate).

``--sampled`` compares neighbour-sampled GraphSAGE (the products recipe's shape: 3 x 256, fan-out
``--fanout``, ``--batch-size`` seeds per rank and step, Adam 0.003, no BatchNorm) in three modes:

* ``single``: one process on the whole graph (gnnkit's CSR sampler), at ``--batch-size`` and at the
  global batch of the largest P (``batch-size x P``, the same steps per epoch as the P-rank runs);
* ``replicated``: DDP at the largest P, every rank holding the whole graph and features and taking
  its share of the shuffled seeds (as ``DistributedSampler``);
* ``partitioned``: every rank opens only its METIS partition and samples its own seeds across
  partitions (:mod:`gnnkit.partitioned.remote_sampler`), fetching remote features from their
  owners with a cache of ``--remote-cache`` x its owned nodes (:mod:`gnnkit.partitioned.remote_features`),
  remote rows travelling and cached in ``--remote-dtype`` (default: the features' own dtype), the
  ranks' seed counts evened out (:mod:`gnnkit.partitioned.seed_balance`; ``--no-balance-seeds``:
  every rank trains on its own seeds only).

Each run trains ``--epochs`` epochs and tests on ``--test-nodes`` nodes of the test split drawn once
(the same for every run; each evaluated once, sampled with the training fan-out). A row holds the
largest graph + feature bytes a rank holds (the partition's arrays with the owner map, and its node
directory; the cache apart), peak RSS per rank, the median epoch time (and every epoch's: the first
is slower in both modes, so use ``--epochs 3`` or more for a steady-state median), remote feature
bytes fetched per epoch (all ranks), the cache's hit rate and the test accuracy. ``--json`` keeps
the other mode's results of an existing file: the sampled rows sit under ``sampled`` (rows of another ``--network`` kept), and
``summary`` gains ``sampled_memory_per_rank_over_replicated_p4`` (cache included),
``sampled_acc_gap`` (single process at the same global batch minus partitioned at the largest P, in
points; ``sampled_acc_gap_vs_batch<B>`` against the recipe's batch) and
``sampled_epoch_partitioned_over_replicated_p4`` (on the emulated 1 Gbit/s link when it ran).

``--out-of-core`` runs ``bench/out_of_core.py`` (the papers-shaped twin preprocessed under a 2 GB
budget against the in-memory path) in a child, or reads the result it wrote with
``--out-of-core-json``, and keeps it under ``out_of_core``; ``summary`` gains
``out_of_core_peak_mb`` and the out-of-core / in-memory time and peak ratios. ``--png PATH`` draws
the ``--json`` report's memory and epoch ratios at the largest P against the targets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gnnkit.allocator import retain_freed_memory  # noqa: E402
from pipeline import atomic_write_text, save_figure  # noqa: E402

MODES = ("replicated", "partitioned")
SAMPLED_MODES = ("single", "replicated", "partitioned")


def _graph_bytes(arrays: dict) -> int:
    return sum(int(a["bytes"]) for name, a in arrays.items() if not name.startswith("split."))


def _whole(entry, torch):
    """The whole graph as (x, y, adj, splits), and its graph + feature bytes."""
    from gnnkit.sparse import Adjacency

    g = entry.open()
    adj = Adjacency(g.indptr, g.indices)
    return g.x, g.y, adj, g.split, _graph_bytes(entry.manifest["arrays"])


def _partition(entry, ranks: int, input_aggregation: str | None):
    """This rank's partition as full-batch data, the graph + feature bytes training reads (the
    first layer's aggregated input in place of the features when ``input_aggregation``), and the
    halo feature rows held at once: every halo row per step, or once, the largest chunk streamed
    while aggregating the input."""
    from gnnkit.optim.state import tensor_bytes
    from gnnkit.partitioned.input_aggregation import largest_chunk_rows
    from gnnkit.partitioned.rank_data import held_bytes, open_rank_partition, partition_data

    part = open_rank_partition(entry, ranks)
    data = partition_data(part, input_aggregation)
    if input_aggregation is None:
        return data, part, held_bytes(part, sampled=False), part.halo.numel()
    held = held_bytes(part, sampled=False) - tensor_bytes([part.x]) + tensor_bytes([data.x])
    return data, part, held, largest_chunk_rows(data.halo)


def worker(args: argparse.Namespace) -> None:
    """One rank of one mode: train, test, and (rank 0) write the measurements."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gnnkit.metrics import evaluate, make_evaluator
    from gnnkit.models.node_gnn import NodeGNN
    from gnnkit.task_module import gather_rows
    from gnnkit.partitioned.batch_norm import partition_batch_norms
    from gnnkit.partitioned.boundary_sampling import BoundarySampler
    from pipeline import peak_rss_mb, preprocess

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{args.port}", rank=args.rank,
                            world_size=args.ranks)
    entry = preprocess(args.dataset)
    meta = entry.manifest["meta"]
    halo_rows = 0
    torch.manual_seed(0)
    model = NodeGNN(args.model, meta["num_features"], args.hidden, meta["num_classes"], num_layers=args.layers,
                    dropout=0.5, batch_norm=True, aggregation="gnnkit", format="csr")
    if args.mode == "partitioned":
        data, part, held, halo_rows = _partition(entry, args.ranks,
                                                 model.input_aggregation() if args.aggregate_input else None)
        x, y, adj, halo = data.x, data.y, data.adj, data.halo
        halo_rows = int(halo_rows * (args.boundary_sampling or 1.0))  # rows received per step, or once
        split = part.split
        train = split["train"]
        scale = train.numel() * args.ranks / entry.manifest["arrays"]["split.train"]["shape"][0]
        evaluated = {s: split[s] for s in ("valid", "test")}
    else:
        x, y, adj, split, held = _whole(entry, torch)
        halo = None
        train = split["train"][args.rank::args.ranks]
        scale = train.numel() * args.ranks / split["train"].numel()
        evaluated = {s: split[s] if args.rank == 0 else split[s][:0] for s in ("valid", "test")}
    if args.mode == "partitioned":
        partition_batch_norms(model)
    net = DistributedDataParallel(model) if args.ranks > 1 else model
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    times = []
    sampler = BoundarySampler(args.boundary_sampling) if args.boundary_sampling and halo is not None else None
    sent_rows = []
    for epoch in range(args.epochs):
        start = time.perf_counter()
        net.train()
        opt.zero_grad()
        step_halo = sampler.plan(halo, epoch) if sampler is not None else halo
        sent_rows.append(0 if step_halo is None else step_halo.send_rows)
        out = net(x, None, adj=adj, halo=step_halo, input_aggregated=args.aggregate_input)
        loss = torch.nn.functional.cross_entropy(out[train], y[train]) * scale
        loss.backward()
        opt.step()
        dist.barrier()
        times.append(time.perf_counter() - start)
    model.eval()
    with torch.no_grad():
        out = model(x, None, adj=adj, halo=halo, input_aggregated=args.aggregate_input)
    evaluator = make_evaluator(meta["name"], meta["eval_metric"], meta["num_tasks"])
    scores = {s: evaluate(evaluator, gather_rows(y[idx]), gather_rows(out[idx])) for s, idx in evaluated.items()}
    width_bytes = 4 * ((0 if args.aggregate_input else meta["num_features"]) + (args.layers - 1) * args.hidden)
    sent = 2 * statistics.mean(sent_rows) * width_bytes  # forward rows + backward gradients
    peak = torch.tensor([peak_rss_mb()])
    peaks = [torch.zeros(1) for _ in range(args.ranks)]
    dist.all_gather(peaks, peak)
    if args.rank == 0:
        atomic_write_text(Path(args.out), json.dumps({
            "mode": args.mode, "ranks": args.ranks, "boundary_sampling": args.boundary_sampling,
            "aggregate_input": args.aggregate_input, "graph_feature_mb": round(held / 2**20, 2),
            "halo_feature_mb": round(halo_rows * meta["num_features"] * 4 / 2**20, 2),
            "peak_rss_mb": [round(float(p), 1) for p in peaks],
            "epoch_s": round(statistics.median(times[1:] or times), 4),
            "halo_mb_per_epoch": round(sent / 2**20, 3),
            "valid": round(scores["valid"], 4), "test": round(scores["test"], 4),
        }))
    from comm import leave_process_group

    leave_process_group()


def launch(args: argparse.Namespace, mode: str, ranks: int, rate: float | None, aggregate: bool, out: Path) -> dict:
    from comm import NETWORKS, EmulatedNetwork, free_port, run_ranks

    gbit = NETWORKS[args.network]
    emulated = EmulatedNetwork(ranks, gbit, delay_ms=0.0) if gbit and ranks > 1 else None
    master = "10.77.0.1" if emulated else "127.0.0.1"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--mode", mode, "--ranks", str(ranks),
           "--dataset", args.dataset, "--epochs", str(args.epochs), "--model", args.model,
           "--hidden", str(args.hidden), "--layers", str(args.layers),
           *(["--boundary-sampling", str(rate)] if rate else []),
           "--aggregate-input" if aggregate else "--no-aggregate-input",
           "--master", master, "--port", str(29710 if emulated else free_port()), "--out", str(out)]
    with emulated if emulated else contextlib.nullcontext():
        run_ranks(cmd, ranks, emulated, args.timeout, f"bench/scale.py: {mode} on {ranks} ranks")
    return json.loads(out.read_text())


# ---------------------------------------------------------------- sampled training (--sampled)
def _test_nodes(entry, count: int, torch):
    """``count`` nodes of the test split, drawn once (seed 0), ascending: the same for every run."""
    test = entry.array("split.test")
    pick = torch.randperm(test.numel(), generator=torch.Generator().manual_seed(0))[:count]
    return torch.sort(test[pick]).values


def _whole_loaders(args, entry, torch):
    """Single process and replicated DDP: the whole graph on every rank, this rank's seeds."""
    from torch_geometric.data import Data

    from gnnkit.data.link_datamodule import rank_share
    from gnnkit.data.sampler import neighbor_loader

    g = entry.open()
    data = Data(x=g.x, y=g.y, num_nodes=g.num_nodes)
    train = g.split["train"]
    test = _test_nodes(entry, args.test_nodes, torch)[args.rank::args.ranks]  # each node once

    def train_epoch(epoch: int):
        order = torch.randperm(train.numel(), generator=torch.Generator().manual_seed(1000 + epoch))
        order = rank_share(order, args.rank, args.ranks)  # as DistributedSampler deals
        return neighbor_loader(data, g.indptr, g.indices, args.fanout, input_nodes=train[order],
                               batch_size=args.batch_size, shuffle=False, seed=args.rank + 1000 * epoch)

    evaluation = neighbor_loader(data, g.indptr, g.indices, args.fanout, input_nodes=test,
                                 batch_size=args.eval_batch_size, shuffle=False, seed=7)
    return train_epoch, evaluation, _graph_bytes(entry.manifest["arrays"]), None


def _partition_loaders(args, entry, torch):
    """Partitioned: this rank's partition only, its own seeds, sampled across partitions."""
    from gnnkit.partitioned.halo import sorted_positions
    from gnnkit.partitioned.rank_data import held_bytes, open_rank_partition
    from gnnkit.partitioned.remote_features import RemoteFeatures
    from gnnkit.partitioned.remote_sampler import PartitionNeighborSampler
    from gnnkit.partitioned.sampled_loader import PartitionNodeLoader
    from gnnkit.partitioned.seed_balance import rank_seeds
    from gnnkit.rank_state import gather_ranks

    part = open_rank_partition(entry, args.ranks)
    features = RemoteFeatures(part, args.remote_cache, dtype=args.remote_dtype)

    def loader(positions, seed: int, batch_size: int, shuffle: bool):
        seeds, labels = rank_seeds(part, features.directory, positions, args.balance_seeds)
        sampler = PartitionNeighborSampler(part, args.fanout, seed=seed, directory=features.directory)
        return PartitionNodeLoader(sampler, features, labels, seeds, gather_ranks(seeds.numel()), batch_size, shuffle)

    train = loader(part.split["train"], 0, args.batch_size, shuffle=True)
    positions, mine = sorted_positions(part.owned, _test_nodes(entry, args.test_nodes, torch))
    evaluation = loader(positions[mine], 7, args.eval_batch_size, shuffle=False)
    held = held_bytes(part, sampled=True) + features.directory.nbytes
    return (lambda epoch: train), evaluation, held, features


def sampled_worker(args: argparse.Namespace) -> None:
    """One rank of one sampled mode: train, test, and (rank 0) write the measurements."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gnnkit.metrics import evaluate, make_evaluator
    from gnnkit.models.node_gnn import NodeGNN
    from gnnkit.task_module import gather_rows
    from pipeline import peak_rss_mb, preprocess

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.ranks))
    retain_freed_memory()  # as gnnkit run does (glibc keeps freed batches for the next)
    if args.ranks > 1:
        dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{args.port}", rank=args.rank,
                                world_size=args.ranks)
    entry = preprocess(args.dataset)
    meta = entry.manifest["meta"]
    loaders = _partition_loaders if args.mode == "partitioned" else _whole_loaders
    train_epoch, evaluation, held, features = loaders(args, entry, torch)
    torch.manual_seed(0)
    model = NodeGNN("sage", meta["num_features"], args.hidden, meta["num_classes"], num_layers=args.layers,
                    dropout=0.5, batch_norm=False)
    net = DistributedDataParallel(model) if args.ranks > 1 else model
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    times, steps, nodes = [], 0, []
    for epoch in range(args.epochs):
        start = time.perf_counter()
        net.train()
        for step, batch in enumerate(train_epoch(epoch)):
            if args.max_steps and step >= args.max_steps:
                break
            out = net(batch.x, batch.edge_index, num_sampled_nodes=batch.num_sampled_nodes,
                      num_sampled_edges=batch.num_sampled_edges)[:batch.batch_size]
            loss = torch.nn.functional.cross_entropy(out, batch.y[:batch.batch_size])
            opt.zero_grad()
            (loss * getattr(batch, "loss_scale", 1.0)).backward()
            opt.step()
            steps += 1
            nodes.append(batch.n_id.numel())
        if args.ranks > 1:
            dist.barrier()
        times.append(time.perf_counter() - start)
    fetched = features.stats.state_dict() if features is not None else None
    model.eval()
    ys, logits = [], []
    with torch.no_grad():
        for batch in evaluation:
            out = model(batch.x, batch.edge_index, num_sampled_nodes=batch.num_sampled_nodes,
                        num_sampled_edges=batch.num_sampled_edges)[:batch.batch_size]
            if not getattr(batch, "padding", False):
                ys.append(batch.y[:batch.batch_size])
                logits.append(out)
    evaluator = make_evaluator(meta["name"], meta["eval_metric"], meta["num_tasks"])
    ys = ys or [torch.zeros(0, dtype=torch.int64)]  # a rank owning none of the test nodes
    logits = logits or [torch.zeros(0, meta["num_classes"])]
    test = evaluate(evaluator, gather_rows(torch.cat(ys)), gather_rows(torch.cat(logits)))
    remote = [0.0] * 4 if fetched is None else [  # (the cache fill counts in none of the first three)
        fetched["fetched_bytes"], fetched["remote_rows"], fetched["cache_hits"], fetched["cache_bytes"]]
    ranks = gather_rows(torch.tensor([[peak_rss_mb(), held, *remote, statistics.mean(nodes or [0])]],
                                     dtype=torch.float64)).tolist()
    if args.rank == 0:
        needed = sum(r[3] for r in ranks)
        atomic_write_text(Path(args.out), json.dumps({
            "mode": args.mode, "ranks": args.ranks, "network": args.network, "batch_size": args.batch_size,
            "global_batch": args.batch_size * args.ranks, "epochs": args.epochs, "steps": steps,
            "graph_feature_mb": round(max(r[1] for r in ranks) / 2**20, 2),
            "cache_mb": round(max(r[5] for r in ranks) / 2**20, 2),
            "peak_rss_mb": [round(r[0], 1) for r in ranks],
            "epoch_s": round(statistics.median(times), 3),
            "epoch_times_s": [round(t, 3) for t in times],
            "remote_dtype": args.remote_dtype if args.mode == "partitioned" else None,
            "balance_seeds": args.balance_seeds if args.mode == "partitioned" else None,
            "remote_fetch_mb_per_epoch": round(sum(r[2] for r in ranks) / 2**20 / args.epochs, 1),
            "cache_hit_rate": round(sum(r[4] for r in ranks) / needed, 4) if needed else None,
            "nodes_per_batch": round(statistics.mean(r[6] for r in ranks)),
            "test": round(test, 4),
        }))
    if args.ranks > 1:
        from comm import leave_process_group

        leave_process_group()


def sampled_launch(args: argparse.Namespace, mode: str, ranks: int, batch_size: int, out: Path) -> dict:
    from comm import NETWORKS, EmulatedNetwork, free_port, run_ranks

    gbit = NETWORKS[args.network]
    emulated = EmulatedNetwork(ranks, gbit, delay_ms=0.0) if gbit and ranks > 1 else None
    master = "10.77.0.1" if emulated else "127.0.0.1"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--sampled", "--mode", mode,
           "--ranks", str(ranks), "--dataset", args.dataset, "--epochs", str(args.epochs),
           "--hidden", str(args.hidden), "--layers", str(args.layers), "--batch-size", str(batch_size),
           "--eval-batch-size", str(args.eval_batch_size), "--fanout", *map(str, args.fanout),
           "--remote-cache", str(args.remote_cache), "--test-nodes", str(args.test_nodes),
           *(["--remote-dtype", args.remote_dtype] if args.remote_dtype else []),
           "--balance-seeds" if args.balance_seeds else "--no-balance-seeds",
           "--max-steps", str(args.max_steps), "--network", args.network,
           "--master", master, "--port", str(29710 if emulated else free_port()), "--out", str(out)]
    with emulated if emulated else contextlib.nullcontext():
        run_ranks(cmd, ranks, emulated, args.timeout, f"bench/scale.py: sampled {mode} on {ranks} ranks")
    return json.loads(out.read_text())


def sampled_runs(ranks: list[int], batch_size: int, network: str,
                 modes: list[str] | None = None) -> list[tuple[str, int, int]]:
    """(mode, ranks, batch size per rank) of a ``--sampled`` invocation: the single process at the
    recipe's batch and at the largest P's global batch (loopback only), replicated DDP at the largest
    P, partitioned at every P > 1; only ``modes`` if given."""
    top = max(ranks)
    runs = [("single", 1, b) for b in dict.fromkeys([batch_size, batch_size * top]) if network == "loopback"]
    runs += [("replicated", top, batch_size)] if top > 1 else []
    runs += [("partitioned", p, batch_size) for p in sorted(set(ranks)) if p > 1]
    return [run for run in runs if modes is None or run[0] in modes]


def summarise_sampled(rows: list[dict]) -> dict:
    """The sampled mode's summary keys (from the rows of every network that ran)."""
    def row(mode: str, ranks: int, network: str | None = None, global_batch: int | None = None) -> dict | None:
        for r in rows:
            if (r["mode"], r["ranks"]) == (mode, ranks) and network in (None, r["network"]) \
                    and global_batch in (None, r["global_batch"]):
                return r
        return None

    top = max(r["ranks"] for r in rows)
    network = "1gbit" if row("partitioned", top, "1gbit") and row("replicated", top, "1gbit") else "loopback"
    part = row("partitioned", top, "loopback") or row("partitioned", top)
    rep = row("replicated", top, "loopback") or row("replicated", top)  # the same epochs as ``part``
    summary: dict = {"sampled_ranks": top}
    if part and rep:
        summary["sampled_memory_per_rank_over_replicated_p4"] = round(
            (part["graph_feature_mb"] + part["cache_mb"]) / rep["graph_feature_mb"], 4)
        summary["sampled_memory_bound_1_3_over_p"] = round(1.3 / top, 4)
    for net in ("loopback", "1gbit"):
        p, r = row("partitioned", top, net), row("replicated", top, net)
        if p and r:
            key = "sampled_epoch_partitioned_over_replicated_p4" + ("" if net == network else f"_{net}")
            summary[key] = round(p["epoch_s"] / r["epoch_s"], 4)
    summary["sampled_epoch_network"] = network
    same = row("single", 1, global_batch=part["global_batch"]) if part else None
    if part and same:
        summary["sampled_acc_gap"] = round(100 * (same["test"] - part["test"]), 2)
        if rep:
            summary["sampled_acc_gap_replicated"] = round(100 * (same["test"] - rep["test"]), 2)
    for single in (r for r in rows if r["mode"] == "single" and part and r["global_batch"] != part["global_batch"]):
        summary[f"sampled_acc_gap_vs_batch{single['batch_size']}"] = round(100 * (single["test"] - part["test"]), 2)
    return summary


def print_sampled_table(rows: list[dict], flush: bool = False) -> None:
    print(f"{'mode':12} {'ranks':>5} {'network':>8} {'batch':>6} {'graph+feat MB':>13} {'cache MB':>8} "
          f"{'peak RSS MB (max)':>17} {'epoch s':>8} {'fetch MB/epoch':>14} {'cache hits':>10} {'test':>6}")
    for r in rows:
        hits = "-" if r["cache_hit_rate"] is None else f"{r['cache_hit_rate']:.3f}"
        print(f"{r['mode']:12} {r['ranks']:5d} {r['network']:>8} {r['global_batch']:6d} {r['graph_feature_mb']:13.1f} "
              f"{r['cache_mb']:8.1f} {max(r['peak_rss_mb']):17.1f} {r['epoch_s']:8.1f} "
              f"{r['remote_fetch_mb_per_epoch']:14.1f} {hits:>10} {r['test']:6.4f}", flush=flush)


def summarise(rows: list[dict], network: str) -> dict:
    """The exact partitioned run at the largest P against replicated (its first layer's input
    aggregated once when that run is there; ``*_every_layer_exchanged``: the run exchanging the
    halo in every layer), and the boundary-sampled runs' memory."""
    by = {(r["mode"], r["ranks"], r.get("boundary_sampling"), r.get("aggregate_input", False)): r for r in rows}
    top = max(r["ranks"] for r in rows)
    rep, one = by[("replicated", top, None, False)], by[("replicated", 1, None, False)]
    exchanged = by[("partitioned", top, None, False)]
    par = by.get(("partitioned", top, None, True), exchanged)

    def memory(r: dict) -> float:
        return round((r["graph_feature_mb"] + r["halo_feature_mb"]) / rep["graph_feature_mb"], 4)

    sampled = {f"memory_per_rank_over_replicated_p4_bns{r['boundary_sampling']}": memory(r)
               for r in rows if r["ranks"] == top and r.get("boundary_sampling")}
    return {
        "ranks": top, "network": network, "input_aggregated": par is not exchanged,
        "memory_per_rank_over_replicated_p4": memory(par),
        "memory_per_rank_over_replicated_p4_every_layer_exchanged": memory(exchanged),
        "memory_per_rank_over_replicated_p4_without_halo": round(exchanged["graph_feature_mb"] / rep["graph_feature_mb"], 4),
        **sampled,
        "memory_bound_1_3_over_p": round(1.3 / top, 4),
        "epoch_partitioned_over_replicated_p4": round(par["epoch_s"] / rep["epoch_s"], 4),
        "epoch_partitioned_over_replicated_p4_every_layer_exchanged": round(exchanged["epoch_s"] / rep["epoch_s"], 4),
        "acc_gap": round(100 * (one["test"] - par["test"]), 2),
        "acc_gap_every_layer_exchanged": round(100 * (one["test"] - exchanged["test"]), 2),
    }


def print_table(rows: list[dict], flush: bool = False) -> None:
    print(f"{'mode':20} {'ranks':>5} {'graph+feat MB':>13} {'halo feat MB':>12} {'peak RSS MB (max)':>17} "
          f"{'epoch s':>8} {'halo MB/epoch':>13} {'valid':>6} {'test':>6}")
    for r in rows:
        mode = (r["mode"] + (f" bns {r['boundary_sampling']}" if r.get("boundary_sampling") else "")
                + (" agg-input" if r.get("aggregate_input") else ""))
        print(f"{mode:20} {r['ranks']:5d} {r['graph_feature_mb']:13.1f} {r['halo_feature_mb']:12.1f} "
              f"{max(r['peak_rss_mb']):17.1f} {r['epoch_s']:8.3f} {r['halo_mb_per_epoch']:13.1f} {r['valid']:6.4f} "
              f"{r['test']:6.4f}", flush=flush)


def plot(report: dict, path: Path) -> None:
    """Two panels at the largest P from a ``--json`` report: graph + feature memory per rank and
    epoch time, each over replicated training's, with the targets (1.3/P and 1) as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary, rows = report.get("summary", {}), report.get("rows", [])
    aggregated = summary.get("input_aggregated")
    memory = {"full-graph exact\n(halo counted)": summary.get("memory_per_rank_over_replicated_p4_every_layer_exchanged",
                                                             summary.get("memory_per_rank_over_replicated_p4")),
              "full-graph exact\n(stored)": summary.get("memory_per_rank_over_replicated_p4_without_halo"),
              "full-graph exact,\ninput aggregated": summary.get("memory_per_rank_over_replicated_p4") if aggregated else None,
              **{f"full-graph\nBNS {key.rsplit('bns', 1)[1]}": v for key, v in summary.items()
                 if key.startswith("memory_per_rank_over_replicated_p4_bns")},
              "sampled\n(cache counted)": summary.get("sampled_memory_per_rank_over_replicated_p4")}
    top = max((r["ranks"] for r in rows), default=0)
    replicated = next((r for r in rows if (r["mode"], r["ranks"]) == ("replicated", top)), None)
    epoch = {"full-graph exact": summary.get("epoch_partitioned_over_replicated_p4_every_layer_exchanged",
                                             summary.get("epoch_partitioned_over_replicated_p4")),
             "full-graph exact,\ninput aggregated": summary.get("epoch_partitioned_over_replicated_p4") if aggregated else None,
             **{f"full-graph\nBNS {r['boundary_sampling']}": round(r["epoch_s"] / replicated["epoch_s"], 4)
                for r in rows if replicated and r["ranks"] == top and r.get("boundary_sampling")},
             "sampled\nloopback": summary.get("sampled_epoch_partitioned_over_replicated_p4_loopback"),
             f"sampled\n{summary.get('sampled_epoch_network', '')}": summary.get("sampled_epoch_partitioned_over_replicated_p4")}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, values, target, title in ((axes[0], memory, summary.get("memory_bound_1_3_over_p"), "graph + features per rank"),
                                      (axes[1], epoch, 1.0, f"epoch time (full-graph: {summary.get('network', '')})")):
        shown = {k: v for k, v in values.items() if v is not None}
        bars = ax.bar(list(shown), list(shown.values()))
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
        if target:
            ax.axhline(target, color="red", linestyle="--", label=f"target {target:.3f}")
            ax.legend()
        ax.set_ylabel("partitioned / replicated")
        ax.set_title(f"{title}, P = {summary.get('ranks', top)}")
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def _previous(path: Path | None) -> dict:
    """What an earlier ``--json`` run left in ``path`` (empty without one)."""
    return json.loads(path.read_text()) if path is not None and path.is_file() else {}


def out_of_core_summary(result: dict) -> dict:
    """The summary keys of a ``bench/out_of_core.py`` result (``out_of_core_peak_mb`` and the ratios)."""
    s = result["summary"]
    return {"out_of_core_peak_mb": s["out_of_core_peak_mb"], "out_of_core_budget_mb": s["out_of_core_budget_mb"],
            "out_of_core_dataset": s["dataset"], "out_of_core_time_over_in_memory": s["time_ratio"],
            "out_of_core_peak_over_in_memory": s["peak_ratio"], "out_of_core_byte_identical": s["byte_identical"]}


def run_out_of_core(args: argparse.Namespace) -> None:
    """Out-of-core against in-memory preprocessing (``bench/out_of_core.py`` in a child, or the
    result it wrote to ``--out-of-core-json``), merged into ``--json`` under ``out_of_core``."""
    if args.out_of_core_json is not None:
        result = json.loads(args.out_of_core_json.read_text())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out_of_core.json"
            subprocess.run([sys.executable, str(Path(__file__).with_name("out_of_core.py")), "--json", str(out)],
                           check=True, timeout=args.timeout)
            result = json.loads(out.read_text())
    summary = out_of_core_summary(result)
    print(json.dumps(summary, indent=2))
    if args.json:
        previous = _previous(args.json)
        merged = {**{k: v for k, v in previous.get("summary", {}).items() if not k.startswith("out_of_core_")},
                  **summary}
        atomic_write_text(args.json, json.dumps({**previous, "summary": merged, "out_of_core": result}, indent=2) + "\n")


def run_full_graph(args: argparse.Namespace, network: str) -> None:
    from pipeline import preprocess
    from pipeline.partitioned import partition_entry

    entry = preprocess(args.dataset)
    for ranks in args.ranks:  # built once here, so the ranks only open them
        partition_entry(entry, ranks)
    runs = [(mode, ranks, None, False) for ranks in args.ranks for mode in MODES
            if not (mode == "partitioned" and ranks == 1)]  # one partition: the graph
    runs += [("partitioned", max(args.ranks), None, True)] if args.aggregate_input else []
    runs += [("partitioned", max(args.ranks), rate, False) for rate in args.boundary_sampling]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode, ranks, rate, aggregate in runs:
            rows.append(launch(args, mode, ranks, rate, aggregate, Path(tmp) / f"{mode}{ranks}-{rate}-{aggregate}.json"))
            print_table(rows[-1:], flush=True)
    print()
    print_table(rows)
    summary = summarise(rows, network)
    print(json.dumps(summary, indent=2))
    if args.json:
        previous = _previous(args.json)
        sampled = previous.get("sampled")
        summary.update(summarise_sampled(sampled["rows"]) if sampled else {})
        summary.update(out_of_core_summary(previous["out_of_core"]) if "out_of_core" in previous else {})
        atomic_write_text(args.json, json.dumps({"rows": rows, "summary": summary,
                                                 "args": {k: v for k, v in vars(args).items()
                                                          if k in ("dataset", "epochs", "model", "hidden", "layers")},
                                                 **{k: previous[k] for k in ("sampled", "out_of_core") if k in previous}},
                                     indent=2) + "\n")


def run_sampled(args: argparse.Namespace) -> None:
    from pipeline import preprocess
    from pipeline.partitioned import partition_entry

    entry = preprocess(args.dataset)
    for ranks in args.ranks:
        if ranks > 1:
            partition_entry(entry, ranks)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode, ranks, batch in sampled_runs(args.ranks, args.batch_size, args.network, args.modes):
            rows.append(sampled_launch(args, mode, ranks, batch, Path(tmp) / f"{mode}{ranks}-{batch}.json"))
            print_sampled_table(rows[-1:], flush=True)
    previous = _previous(args.json)
    ran = {(r["mode"], r["ranks"], r["network"], r["global_batch"]) for r in rows}
    kept = [r for r in previous.get("sampled", {}).get("rows", [])
            if (r["mode"], r["ranks"], r["network"], r["global_batch"]) not in ran]
    rows = kept + rows
    print()
    print_sampled_table(rows)
    summary = summarise_sampled(rows)
    print(json.dumps(summary, indent=2))
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k in ("dataset", "epochs", "hidden", "layers", "batch_size",
                                                                 "eval_batch_size", "fanout", "remote_cache",
                                                                 "remote_dtype", "balance_seeds", "test_nodes",
                                                                 "max_steps")}
        full = {k: previous[k] for k in ("rows", "args", "out_of_core") if k in previous}
        merged = {**{k: v for k, v in previous.get("summary", {}).items() if not k.startswith("sampled_")}, **summary}
        atomic_write_text(args.json, json.dumps({**full, "summary": merged,
                                                 "sampled": {"rows": rows, "args": settings}}, indent=2) + "\n")


def main() -> None:
    from comm import EmulatedNetwork, add_worker_args

    from gnnkit.partitioned.remote_features import WIRE_DTYPES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--sampled", action="store_true", help="compare neighbour-sampled training")
    parser.add_argument("--out-of-core", action="store_true",
                        help="compare out-of-core with in-memory preprocessing (bench/out_of_core.py)")
    parser.add_argument("--out-of-core-json", type=Path,
                        help="--out-of-core: merge this bench/out_of_core.py result instead of running it")
    parser.add_argument("--dataset", help="default: synthetic-arxiv (full-graph), synthetic-products (--sampled)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--epochs", type=int, help="default: 30 (full-graph), 2 (--sampled)")
    parser.add_argument("--network", default="loopback", choices=["loopback", "1gbit"])
    parser.add_argument("--model", default="gcn", choices=["gcn", "sage"])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--aggregate-input", action=argparse.BooleanOptionalAction, default=True,
                        help="also run exact partitioned training at the largest rank count with the first layer's "
                             "input aggregated once (gnnkit/partitioned/input_aggregation.py); its figures lead the "
                             "summary")
    parser.add_argument("--boundary-sampling", type=float, nargs="*", default=[],
                        help="also run partitioned training at the largest rank count with these BNS rates")
    parser.add_argument("--batch-size", type=int, default=1024, help="--sampled: seeds per rank and step")
    parser.add_argument("--eval-batch-size", type=int, default=4096)
    parser.add_argument("--fanout", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--remote-cache", type=float, default=0.1,
                        help="--sampled: cache of remote rows, as a fraction of a rank's owned nodes")
    parser.add_argument("--remote-dtype", choices=list(WIRE_DTYPES),
                        help="--sampled: dtype remote rows travel and are cached in (default: the features')")
    parser.add_argument("--balance-seeds", action=argparse.BooleanOptionalAction, default=True,
                        help="--sampled: even out the partitioned ranks' seed counts (seed_balance.py)")
    parser.add_argument("--test-nodes", type=int, default=50_000, help="--sampled: test nodes evaluated")
    parser.add_argument("--max-steps", type=int, default=0, help="--sampled: stop each epoch after this many steps")
    parser.add_argument("--modes", nargs="+", choices=SAMPLED_MODES, help="--sampled: run only these modes")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--png", type=Path, help="draw the --json report's ratios at the largest P (after any mode)")
    parser.add_argument("--mode", choices=SAMPLED_MODES, help=argparse.SUPPRESS)
    add_worker_args(parser)
    args = parser.parse_args()
    args.dataset = args.dataset or ("synthetic-products" if args.sampled else "synthetic-arxiv")
    args.epochs = args.epochs or (2 if args.sampled else 30)
    if args.worker:
        args.ranks = args.ranks[0]
        args.boundary_sampling = args.boundary_sampling[0] if args.boundary_sampling else None
        (sampled_worker if args.sampled else worker)(args)
        return
    if args.out_of_core:
        run_out_of_core(args)
        _plot_report(args)
        return
    network = args.network
    if network != "loopback" and (why := EmulatedNetwork.available()):
        print(f"bench/scale.py: {why}: using loopback")
        network = args.network = "loopback"
    run_sampled(args) if args.sampled else run_full_graph(args, network)
    _plot_report(args)


def _plot_report(args: argparse.Namespace) -> None:
    if args.png and args.json:
        plot(_previous(args.json), args.png)


if __name__ == "__main__":
    main()

"""Partition-parallel against replicated full-graph training on 1, 2 and 4 gloo ranks.

    python bench/scale.py [--json PATH] [--dataset synthetic-arxiv] [--ranks 1 2 4] [--epochs 30]
                          [--network loopback|1gbit] [--model gcn] [--hidden 256] [--layers 3]

Both modes train the same full-graph GNN (gnnkit aggregation, Adam, the arxiv recipe's shape) for
``--epochs`` epochs and test it exactly:

* ``replicated``: every rank holds the whole graph and its features (DDP as today): each computes
  the whole forward, its loss over its share of the training nodes, and the gradients are averaged.
* ``partitioned``: every rank opens only its METIS partition entry (``gnnkit partition``) and
  exchanges halo rows in every layer (:mod:`gnnkit.partitioned`, the BNS-GCN/PipeGCN design without
  sampling or staleness, https://arxiv.org/abs/2203.10983).

Per run it records rank 0's graph + feature bytes held (the arrays it opened, plus the halo's input
features it receives every step), peak RSS per rank,
median epoch time, halo bytes sent per epoch (rows x width x 4 bytes, forward and backward, every
layer) and the test metric. ``--network 1gbit`` puts each rank in a network namespace behind the
emulated 1 Gbit/s link of ``bench/comm.py`` (needs root; loopback otherwise, and the output says so).
``summary`` holds ``memory_per_rank_over_replicated_p4`` (partitioned over replicated graph +
feature bytes at the largest P), ``epoch_partitioned_over_replicated_p4`` and ``acc_gap``
(single-process metric minus partitioned metric at the largest P, in points).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pipeline import atomic_write_text  # noqa: E402

MODES = ("replicated", "partitioned")


def _graph_bytes(arrays: dict) -> int:
    return sum(int(a["bytes"]) for name, a in arrays.items() if not name.startswith("split."))


def _whole(entry, torch):
    """The whole graph as (x, y, adj, splits), and its graph + feature bytes."""
    from gnnkit.sparse import Adjacency

    g = entry.open()
    adj = Adjacency(g.indptr, g.indices)
    return g.x, g.y, adj, g.split, _graph_bytes(entry.manifest["arrays"])


def _partition(entry, ranks: int, torch):
    from gnnkit.partitioned.rank_data import open_rank_partition, partition_data

    part = open_rank_partition(entry, ranks)
    data = partition_data(part)
    arrays = {name: {"bytes": t.numel() * t.element_size()} for name, t in
              [("owned", part.owned), ("indptr", part.indptr), ("indices", part.indices), ("x", part.x),
               ("y", part.y), ("halo", part.halo), ("halo_owner", part.halo_owner)]}
    halo_features = part.halo.numel() * part.x.size(1) * part.x.element_size()  # received every step
    return data, part, _graph_bytes(arrays) + halo_features


def worker(args: argparse.Namespace) -> None:
    """One rank of one mode: train, test, and (rank 0) write the measurements."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gnnkit.metrics import evaluate, make_evaluator
    from gnnkit.models.node_gnn import NodeGNN
    from gnnkit.module import gather_rows
    from gnnkit.partitioned.batch_norm import partition_batch_norms
    from pipeline import peak_rss_mb, preprocess

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{args.port}", rank=args.rank,
                            world_size=args.ranks)
    entry = preprocess(args.dataset)
    meta = entry.manifest["meta"]
    if args.mode == "partitioned":
        data, part, held = _partition(entry, args.ranks, torch)
        x, y, adj, halo = data.x, data.y, data.adj, data.halo
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
    torch.manual_seed(0)
    model = NodeGNN(args.model, x.size(1), args.hidden, meta["num_classes"], num_layers=args.layers,
                    dropout=0.5, batch_norm=True, aggregation="gnnkit", format="csr")
    if args.mode == "partitioned":
        partition_batch_norms(model)
    net = DistributedDataParallel(model) if args.ranks > 1 else model
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    times = []
    for _ in range(args.epochs):
        start = time.perf_counter()
        net.train()
        opt.zero_grad()
        out = net(x, None, adj=adj, halo=halo)
        loss = torch.nn.functional.cross_entropy(out[train], y[train]) * scale
        loss.backward()
        opt.step()
        dist.barrier()
        times.append(time.perf_counter() - start)
    model.eval()
    with torch.no_grad():
        out = model(x, None, adj=adj, halo=halo)
    evaluator = make_evaluator(meta["name"], meta["eval_metric"], meta["num_tasks"])
    scores = {s: evaluate(evaluator, gather_rows(y[idx]), gather_rows(out[idx])) for s, idx in evaluated.items()}
    width_bytes = 4 * (x.size(1) + (args.layers - 1) * args.hidden)  # every layer's input row
    sent = 0 if halo is None else 2 * halo.send_rows * width_bytes  # forward rows + backward gradients
    peak = torch.tensor([peak_rss_mb()])
    peaks = [torch.zeros(1) for _ in range(args.ranks)]
    dist.all_gather(peaks, peak)
    if args.rank == 0:
        atomic_write_text(Path(args.out), json.dumps({
            "mode": args.mode, "ranks": args.ranks, "graph_feature_mb": round(held / 2**20, 2),
            "peak_rss_mb": [round(float(p), 1) for p in peaks],
            "epoch_s": round(statistics.median(times[1:] or times), 4),
            "halo_mb_per_epoch": round(sent / 2**20, 3),
            "valid": round(scores["valid"], 4), "test": round(scores["test"], 4),
        }))
    dist.destroy_process_group()


def launch(args: argparse.Namespace, mode: str, ranks: int, out: Path) -> dict:
    from comm import NETWORKS, EmulatedNetwork, free_port, run_ranks

    gbit = NETWORKS[args.network]
    emulated = EmulatedNetwork(ranks, gbit, delay_ms=0.0) if gbit and ranks > 1 else None
    master = "10.77.0.1" if emulated else "127.0.0.1"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--mode", mode, "--ranks", str(ranks),
           "--dataset", args.dataset, "--epochs", str(args.epochs), "--model", args.model,
           "--hidden", str(args.hidden), "--layers", str(args.layers),
           "--master", master, "--port", str(29710 if emulated else free_port()), "--out", str(out)]
    with emulated if emulated else contextlib.nullcontext():
        run_ranks(cmd, ranks, emulated, args.timeout, f"bench/scale.py: {mode} on {ranks} ranks")
    return json.loads(out.read_text())


def summarise(rows: list[dict], network: str) -> dict:
    by = {(r["mode"], r["ranks"]): r for r in rows}
    top = max(r["ranks"] for r in rows)
    rep, par, one = by[("replicated", top)], by[("partitioned", top)], by[("replicated", 1)]
    return {
        "ranks": top, "network": network,
        "memory_per_rank_over_replicated_p4": round(par["graph_feature_mb"] / rep["graph_feature_mb"], 4),
        "memory_bound_1_3_over_p": round(1.3 / top, 4),
        "epoch_partitioned_over_replicated_p4": round(par["epoch_s"] / rep["epoch_s"], 4),
        "acc_gap": round(100 * (one["test"] - par["test"]), 2),
    }


def print_table(rows: list[dict]) -> None:
    print(f"{'mode':12} {'ranks':>5} {'graph+feat MB':>13} {'peak RSS MB (max)':>17} {'epoch s':>8} "
          f"{'halo MB/epoch':>13} {'valid':>6} {'test':>6}")
    for r in rows:
        print(f"{r['mode']:12} {r['ranks']:5d} {r['graph_feature_mb']:13.1f} {max(r['peak_rss_mb']):17.1f} "
              f"{r['epoch_s']:8.3f} {r['halo_mb_per_epoch']:13.1f} {r['valid']:6.4f} {r['test']:6.4f}")


def main() -> None:
    from comm import EmulatedNetwork, add_worker_args

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--dataset", default="synthetic-arxiv")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--network", default="loopback", choices=["loopback", "1gbit"])
    parser.add_argument("--model", default="gcn", choices=["gcn", "sage"])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    add_worker_args(parser)
    args = parser.parse_args()
    if args.worker:
        args.ranks = args.ranks[0] if isinstance(args.ranks, list) else args.ranks
        worker(args)
        return
    network = args.network
    if network != "loopback" and (why := EmulatedNetwork.available()):
        print(f"bench/scale.py: {why}: using loopback")
        network = args.network = "loopback"
    from pipeline import preprocess
    from pipeline.partitioned import partition_entry

    entry = preprocess(args.dataset)
    for ranks in args.ranks:  # built once here, so the ranks only open them
        partition_entry(entry, ranks)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in args.ranks:
            for mode in MODES:
                if mode == "partitioned" and ranks == 1:
                    continue  # one partition is the whole graph
                rows.append(launch(args, mode, ranks, Path(tmp) / f"{mode}{ranks}.json"))
                print_table(rows[-1:])
    print()
    print_table(rows)
    summary = summarise(rows, network)
    print(json.dumps(summary, indent=2))
    if args.json:
        atomic_write_text(args.json, json.dumps({"rows": rows, "summary": summary,
                                                 "args": {k: v for k, v in vars(args).items()
                                                          if k in ("dataset", "epochs", "model", "hidden", "layers")}},
                                                indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Sampled training across 2 partitions on 2 gloo ranks, checked against the whole graph:
``sampled_worker.py OUT ENTRY PART0 PART1`` (cache entry folders of the graph and its partitions).
Writes, per rank, what each check found (see test_remote_sampler.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch_geometric.data import Data

sys.path.insert(0, os.getcwd())
from halo_worker import finish, spawn  # noqa: E402

from gnnkit.data.sampler import neighbor_loader  # noqa: E402
from gnnkit.models.node_gnn import NodeGNN  # noqa: E402
from gnnkit.partitioned.remote_features import RemoteFeatures, decode_rows, encode_rows  # noqa: E402
from gnnkit.partitioned.remote_sampler import PartitionNeighborSampler  # noqa: E402
from gnnkit.partitioned.sampled_loader import PartitionNodeLoader  # noqa: E402
from gnnkit.partitioned.seed_balance import balance_seeds  # noqa: E402
from gnnkit.rank_state import gather_ranks  # noqa: E402
from pipeline.cache import load_entry  # noqa: E402
from pipeline.partitioned import open_partition  # noqa: E402

FANOUT = [3, 2]


def edge_facts(batch, indptr, indices, fanout) -> dict:
    """Is every edge of ``batch`` a real edge with its real id, is the fan-out respected, without
    replacement, and are the rows those of the whole graph?"""
    n_id, (src, dst) = batch.n_id, batch.edge_index
    real = bool((indices[batch.e_id] == n_id[src]).all())
    inside = bool(((indptr[n_id[dst]] <= batch.e_id) & (batch.e_id < indptr[n_id[dst] + 1])).all())
    fan_ok, distinct, start = True, True, 0
    for hop, (k, count) in enumerate(zip(fanout, batch.num_sampled_edges)):
        hop_dst, hop_e = dst[start:start + count], batch.e_id[start:start + count]
        start += count
        for node in hop_dst.unique().tolist():
            picked = hop_e[hop_dst == node]
            degree = int(indptr[n_id[node] + 1] - indptr[n_id[node]])
            fan_ok &= picked.numel() == min(degree, k)
            distinct &= picked.unique().numel() == picked.numel()
    return {"real_edges": real and inside, "fanout": fan_ok, "without_replacement": distinct,
            "nodes_unique": n_id[batch.batch_size:].unique().numel() == n_id.numel() - batch.batch_size}


def worker(rank: int, world: int, out: str, entry_path: str, *part_paths: str) -> None:
    torch.set_num_threads(1)
    graph = load_entry(Path(entry_path)).open()
    indptr, indices, x, y = graph.indptr, graph.indices, graph.x, graph.y
    part = open_partition(load_entry(Path(part_paths[rank])))
    result: dict = {}

    # neighbour lists and features of remote nodes
    features = RemoteFeatures(part, cache_fraction=0.0)
    train = part.split["train"]
    loader = PartitionNodeLoader(PartitionNeighborSampler(part, FANOUT, seed=3), features, part.y[train],
                                 part.owned[train], gather_ranks(train.numel()), 16, shuffle=True)
    facts, remote = [], 0
    for batch in loader:
        facts.append(edge_facts(batch, indptr, indices, FANOUT))
        facts[-1]["x"] = bool(torch.equal(batch.x, x[batch.n_id])) and bool(
            torch.equal(batch.y, y[batch.n_id[:batch.batch_size]]))
        remote += int((part.owner[batch.n_id] != rank).sum())
    result["batches"] = {key: all(f[key] for f in facts) for key in facts[0]}
    result["remote_nodes"], result["fetched_rows"] = remote, features.stats.fetched_rows
    result["steps"] = len(facts)

    # a cache of hot remote rows: cached rows are never fetched
    cached = RemoteFeatures(part, cache_fraction=0.5)
    ids = cached.cache_ids[:5]
    got_x = cached.gather(ids)
    after_cached = cached.stats.state_dict()
    uncached = part.halo[~torch.isin(part.halo, cached.cache_ids)][:4].to(torch.int64)
    got_x2 = cached.gather(uncached)
    result["cache"] = {"rows": int(cached.cache_ids.numel()), "asked": int(ids.numel()),
                       "hits": after_cached["cache_hits"], "fetched": after_cached["fetched_rows"],
                       "fetched_bytes": after_cached["fetched_bytes"],
                       "equal": bool(torch.equal(got_x, x[ids]) and torch.equal(got_x2, x[uncached])),
                       "fetched_after_uncached": cached.stats.fetched_rows, "uncached_asked": int(uncached.numel())}

    # 16-bit remote rows: cached and fetched rows are the float16 roundings, owned rows exact
    half = RemoteFeatures(part, cache_fraction=0.5, dtype="float16")
    mixed = torch.cat([half.cache_ids[:3], uncached, part.owned[:3].to(torch.int64)])
    rounded = torch.cat([x[mixed[:-3]].half().float(), x[mixed[-3:]]])
    result["half"] = {"equal": bool(torch.equal(half.gather(mixed), rounded)),
                      "cache_dtype": str(half.cache_x.dtype), "row_bytes": half.row_bytes, "width": x.size(1),
                      "fetched_bytes": half.stats.fetched_bytes, "fetched_rows": half.stats.fetched_rows}

    # 8-bit remote rows: cached and fetched rows are the codec's roundings, owned rows exact
    eight = RemoteFeatures(part, cache_fraction=0.5, dtype="int8")
    coded = torch.cat([decode_rows(encode_rows(x[mixed[:-3]], torch.int8), torch.float32), x[mixed[-3:]]])
    result["int8"] = {"equal": bool(torch.equal(eight.gather(mixed), coded)), "cache_dtype": str(eight.cache_x.dtype),
                      "row_bytes": eight.row_bytes, "fetched_bytes": eight.stats.fetched_bytes,
                      "fetched_rows": eight.stats.fetched_rows}

    # lockstep: rank 1 holds 3 seeds only; both take the same steps, padding where empty
    seeds = train if rank == 0 else train[:3]
    lock = PartitionNodeLoader(PartitionNeighborSampler(part, FANOUT, seed=0), features, part.y[seeds],
                               part.owned[seeds], gather_ranks(seeds.numel()), 8, shuffle=True)
    batches = list(lock)
    covered = torch.cat([b.n_id[:b.batch_size] for b in batches if not b.padding])
    result["lockstep"] = {"steps": len(batches), "len": len(lock), "padding": sum(b.padding for b in batches),
                          "seeds": int(seeds.numel()), "covered": sorted(covered.tolist()),
                          "expected": sorted(part.owned[seeds].tolist()),
                          "scales": [float(b.loss_scale) for b in batches],
                          "padding_scales": [float(b.loss_scale) for b in batches if b.padding]}

    # even seed counts: rank 1 keeps 3 of its seeds, rank 0 hands it some of its own; their batches
    # are the whole graph's, labels and all
    mine = part.owned[seeds].to(torch.int64)
    even, labels = balance_seeds(part, features.directory, mine, part.y[seeds])
    even_loader = PartitionNodeLoader(PartitionNeighborSampler(part, FANOUT, seed=0), features, labels, even,
                                      gather_ranks(even.numel()), 8, shuffle=True)
    even_batches = list(even_loader)
    facts = [edge_facts(b, indptr, indices, FANOUT) for b in even_batches]
    result["balanced"] = {"before": mine.tolist(), "after": even.tolist(), "labels": torch.equal(labels, y[even]),
                          "padding": sum(b.padding for b in even_batches),
                          "batches": all(all(f.values()) for f in facts) and all(
                              torch.equal(b.x, x[b.n_id]) and torch.equal(b.y, y[b.n_id[:b.batch_size]])
                              for b in even_batches),
                          "covered": sorted(torch.cat([b.n_id[:b.batch_size] for b in even_batches]).tolist())}

    # determinism: the same seed gives the same batches; a restored generator continues exactly
    def epoch(sampler):
        return [(b.n_id.tolist(), b.e_id.tolist()) for b in PartitionNodeLoader(
            sampler, features, part.y[train], part.owned[train], gather_ranks(train.numel()), 16, shuffle=True)]

    first, again = PartitionNeighborSampler(part, FANOUT, seed=5), PartitionNeighborSampler(part, FANOUT, seed=5)
    one = epoch(first)
    state = first.state_dict()
    two = epoch(first)
    same = epoch(again)
    restored = PartitionNeighborSampler(part, FANOUT, seed=5)
    restored.load_state_dict(state)
    other = epoch(PartitionNeighborSampler(part, FANOUT, seed=6))
    result["determinism"] = {"same_seed": one == same, "epochs_differ": one != two,
                             "restored": epoch(restored) == two, "other_seed_differs": other != one}

    # all neighbours: the batches and logits of one process on the whole graph
    seeds = part.split["test"]
    exact = PartitionNodeLoader(PartitionNeighborSampler(part, [-1, -1], seed=0), features, part.y[seeds],
                                part.owned[seeds], gather_ranks(seeds.numel()), 7, shuffle=False)
    ours = [b for b in exact if not b.padding]
    theirs = [next(iter(neighbor_loader(Data(x=x, y=y, num_nodes=graph.num_nodes), indptr, indices, [-1, -1],
                                        input_nodes=b.n_id[:b.batch_size], batch_size=b.batch_size, shuffle=False)))
              for b in ours]  # one process, the whole graph, the same seeds
    result["exact"] = {"batches": len(ours), "same_batches": all(
        torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.e_id, b.e_id)
        and torch.equal(a.x, b.x) and torch.equal(a.y, b.y[:b.batch_size])
        and a.num_sampled_nodes == b.num_sampled_nodes
        for a, b in zip(ours, theirs))}
    for model in ("sage", "gcn"):
        for aggregation in ("pyg", "gnnkit"):
            torch.manual_seed(0)
            net = NodeGNN(model, x.size(1), 16, 4, num_layers=2, aggregation=aggregation, format="csr").eval()
            with torch.no_grad():
                diff = max(float((_logits(net, a) - _logits(net, b)).abs().max()) for a, b in zip(ours, theirs))
            result["exact"][f"{model}_{aggregation}"] = diff
    finish(out, rank, result)


def _logits(net: NodeGNN, batch) -> torch.Tensor:
    out = net(batch.x, batch.edge_index, num_sampled_nodes=batch.num_sampled_nodes,
              num_sampled_edges=batch.num_sampled_edges)
    return out[:batch.batch_size]


if __name__ == "__main__":
    spawn(worker, 2, *sys.argv[1:])

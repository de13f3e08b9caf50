"""The first layer's aggregation on a partition, computed once by streaming the halo in chunks.

The input features need no gradient, and the first layer of GCN and GraphSAGE is linear in its
aggregated input: GCN's ``Â (X W) + b`` equals ``(Â X) W + b``, and SAGE's
``W_l mean_{u in N(v)} x_u + W_r x_v`` reads ``X`` only through the row means and the node's own row.
So each rank can aggregate its owned rows of ``Â X`` (or the means) once, before training, and
then train without the first layer's halo exchange and without holding halo features: SGC's
precomputation (Wu et al., ICML 2019, <https://arxiv.org/abs/1902.07153>) for the first hop only,
which keeps the model and its gradients exactly those of the single process.

While aggregating, the halo rows arrive from their owners a chunk at a time and are added into
the owned rows' sums, then dropped, as Sequential Aggregation and Rematerialization does for every
layer (Mostafa, MLSys 2022, <https://arxiv.org/abs/2111.06483>): a rank never holds more than
``chunk_rows`` rows from each other rank.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor

from gnnkit.partitioned.halo import HaloPlan, all_to_all_rows
from gnnkit.partitioned.local_graph import gcn_local_normalized
from gnnkit.sparse import Adjacency, spmm
from gnnkit.sparse.spmm import mean_scale

#: What each model's first layer aggregates: the GCN-normalised sum, or the row mean (SAGE).
INPUT_AGGREGATIONS = ("gcn", "mean")

#: Halo rows from each other rank per chunk (the default of :func:`aggregate_input`).
DEFAULT_CHUNK_ROWS = 2048


def first_layer_input(x: Tensor, adj: Adjacency, plan: HaloPlan, kind: str,
                      chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Tensor:
    """The owned rows' first-layer input aggregated once (a collective), as
    :meth:`~gnnkit.models.node_gnn.NodeGNN.input_aggregation` names it.

    Args:
        x: ``[num_owned, F]`` features of the owned nodes.
        adj: The partition's rows (:func:`~gnnkit.partitioned.local_graph.local_adjacency`).
        plan: The partition's exact :class:`HaloPlan`.
        kind: ``"gcn"``: ``Â X`` with whole-graph degrees, ``[num_owned, F]``; ``"mean"``: the
            neighbours' mean beside the node's own row, ``[num_owned, 2F]``.
        chunk_rows: Halo rows received from each owner per round (see :func:`aggregate_input`).

    Raises:
        ValueError: An unknown ``kind``.
    """
    if kind == "gcn":
        return aggregate_input(x, gcn_local_normalized(adj, plan), plan, "sum", chunk_rows)
    if kind == "mean":
        return torch.cat([aggregate_input(x, adj, plan, "mean", chunk_rows), x.float()], dim=1)
    raise ValueError(f"input aggregation: expected one of {list(INPUT_AGGREGATIONS)}, got {kind!r}")


def aggregate_input(x: Tensor, adj: Adjacency, plan: HaloPlan, reduce: str = "sum",
                    chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Tensor:
    """``adj @ [x; halo rows]`` (or its row mean) for this rank's owned rows, without ever holding
    every halo row: they arrive from their owners ``chunk_rows`` per owner at a time (a collective:
    every rank calls it, with the same ``chunk_rows``).

    Args:
        x: ``[num_owned, F]`` features of the owned nodes.
        adj: The partition's ``[num_owned, num_owned + num_halo]`` rows (weighted, e.g. GCN-normalised,
            or not), columns laid out as ``[owned; halo]``.
        plan: The partition's exact :class:`HaloPlan`.
        reduce: ``"sum"`` (with ``adj``'s weights) or ``"mean"`` (over each row's entries).
        chunk_rows: Halo rows received from each owner per round.

    Returns:
        ``[num_owned, F]`` float rows, equal (up to float rounding) to
        ``spmm(adj, with_halo(x, plan), reduce)``.

    Raises:
        ValueError: ``x`` or ``adj`` does not fit ``plan``, or a bad ``reduce`` or ``chunk_rows``.
    """
    n = plan.num_owned
    if x.size(0) != n or adj.num_rows != n or adj.num_cols != n + plan.num_halo:
        raise ValueError(f"aggregate_input: expected x of {n} rows and adj of shape [{n}, {n + plan.num_halo}] "
                         f"for the plan, got {x.size(0)} rows and {list(adj.shape)}")
    if reduce not in ("sum", "mean") or chunk_rows < 1:
        raise ValueError(f"aggregate_input: expected reduce 'sum' or 'mean' and chunk_rows >= 1, "
                         f"got {reduce!r} and {chunk_rows}")
    x = x.float()
    columns = adj.indices
    is_halo = columns >= n
    out = spmm(_entries(adj, ~is_halo, columns, n), x, format="csr")
    halo = columns[is_halo] - n
    round_of, slot_of = _halo_slots(plan, chunk_rows)
    rounds = torch.full_like(columns, -1)  # each halo entry's round (-1: an owned column)
    rounds[is_halo] = round_of[halo]
    slots = torch.zeros_like(columns)  # and its row among that round's received rows
    slots[is_halo] = slot_of[halo]
    for k in range(_rounds(plan, chunk_rows)):
        received = all_to_all_rows(x[_sent_in_round(plan, k, chunk_rows)], _in_round(plan.recv_counts, k, chunk_rows),
                                   _in_round(plan.send_counts, k, chunk_rows), plan.group)
        out += spmm(_entries(adj, rounds == k, slots, received.size(0)), received, format="csr")
    return out * mean_scale(adj, out.dtype) if reduce == "mean" else out


def largest_chunk_rows(plan: HaloPlan, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> int:
    """The most halo rows :func:`aggregate_input` holds at once on this rank (its first round's)."""
    return sum(_in_round(plan.recv_counts, 0, chunk_rows))


def _entries(adj: Adjacency, keep: Tensor, columns: Tensor, num_cols: int) -> Adjacency:
    """The kept entries of ``adj`` (rows unchanged) with new ``columns``, over ``num_cols`` columns."""
    rows = adj.rows()[keep]
    indptr = torch.zeros(adj.num_rows + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(rows, minlength=adj.num_rows), 0, out=indptr[1:])
    return Adjacency(indptr, columns[keep], num_cols=num_cols, values=adj.weights()[keep], validate=False,
                     single_use=True)


def _rounds(plan: HaloPlan, chunk_rows: int) -> int:
    """Rounds every rank takes: enough for the longest list any rank sends or receives."""
    longest = torch.tensor([max([*plan.send_counts, *plan.recv_counts, 0])])
    if len(plan.send_counts) > 1:
        dist.all_reduce(longest, op=dist.ReduceOp.MAX, group=plan.group)
    return math.ceil(int(longest) / chunk_rows)


def _in_round(counts: list[int], k: int, chunk_rows: int) -> list[int]:
    """Rows of each rank's list that travel in round ``k``."""
    return [max(0, min(chunk_rows, c - k * chunk_rows)) for c in counts]


def _sent_in_round(plan: HaloPlan, k: int, chunk_rows: int) -> Tensor:
    """Owned row positions this rank sends in round ``k``, grouped by destination rank."""
    starts = [0, *torch.tensor(plan.send_counts).cumsum(0).tolist()]
    pieces = [plan.send_index[start + k * chunk_rows: start + min(count, (k + 1) * chunk_rows)]
              for start, count in zip(starts, plan.send_counts)]
    return torch.cat(pieces) if pieces else plan.send_index[:0]


def _halo_slots(plan: HaloPlan, chunk_rows: int) -> tuple[Tensor, Tensor]:
    """For every halo row: the round it arrives in, and its row among that round's received rows."""
    round_of = torch.empty(plan.num_halo, dtype=torch.int64)
    slot_of = torch.empty(plan.num_halo, dtype=torch.int64)
    counts = torch.tensor(plan.recv_counts, dtype=torch.int64)
    start = 0
    for owner, count in enumerate(plan.recv_counts):
        j = torch.arange(count, dtype=torch.int64)
        k = j // chunk_rows
        before = (counts[:owner].unsqueeze(0) - k.unsqueeze(1) * chunk_rows).clamp(0, chunk_rows).sum(1)
        positions = plan.recv_positions[start: start + count]
        round_of[positions], slot_of[positions] = k, before + j - k * chunk_rows
        start += count
    return round_of, slot_of

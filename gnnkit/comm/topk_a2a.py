"""TopKA2A: sparse all-reduce by per-shard top-k, AlltoAll to the shard owner, owner reduces,
all-gather."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.futures import Future

from gnnkit.comm.base import Slot, all_gather_single, read_on_this_stream
from gnnkit.comm.residuals import ErrorFeedback
from gnnkit.comm.sparse import pack, reusable_output, scratch_of, topk_count, topk_indices, unpack

GATHERS = ("auto", "dense", "sparse")


def shard_sizes(numel: int, parts: int) -> list[int]:
    """Sizes of ``parts`` contiguous shards of ``numel`` elements (the first ones one larger)."""
    base, extra = divmod(numel, parts)
    return [base + (i < extra) for i in range(parts)]


def gather_plan(sizes: list[int], density: float, gather: str) -> tuple[bool, int]:
    """Whether the all-gather phase sends sparse pairs, and the per-rank payload length.

    Every rank computes the same answer from the shard sizes alone, so all-gather sizes agree
    without an extra exchange. The sparse payload has room for the worst case: the union of the
    ``P`` ranks' top-k of a shard, ``P * k`` pairs.
    """
    p = len(sizes)
    dense_len = max(sizes)
    sparse_len = 2 * max(p * topk_count(s, density) for s in sizes)
    sparse = gather == "sparse" or (gather == "auto" and sparse_len < dense_len)
    return sparse, (sparse_len if sparse else dense_len)


class TopKA2A(ErrorFeedback):
    """TopKA2A, the AlltoAll sparse all-reduce of Peng, Li, Shi and Li (ICPP 2024); related:
    Ok-Topk's split-and-reduce (Li and Hoefler, PPoPP 2022, <https://arxiv.org/abs/2201.07598>).

    The bucket is cut into ``P`` contiguous shards, shard ``j`` owned by rank ``j``. Each rank
    (1) adds its residual, takes the top-k of every shard separately and sends shard ``j``'s pairs
    to rank ``j`` with one ``all_to_all_single`` (uneven splits: shards differ by one element, so
    their ``k`` may differ); (2) as owner, sums the ``P`` sparse contributions to its shard;
    (3) all-gathers the reduced shards. The paper all-gathers the reduced shard dense, which beats
    all-gather top-k when ``density > 1/(2(P-1))`` and dense all-reduce when ``density < 0.5``; at
    low density the dense gather dominates the traffic (at least half of a dense all-reduce), so
    ``gather="auto"`` sends the reduced shard as (value, index) pairs instead whenever that is
    smaller (room for ``P * k`` pairs, the worst-case union). Nothing is dropped after step (1):
    at ``density=1.0`` the result equals a dense all-reduce.

    Error feedback keeps, per parameter, what step (1) did not send.

    Args:
        density: Fraction of each shard sent (0 < density <= 1).
        gather: All-gather phase: ``"dense"`` (the paper), ``"sparse"`` or ``"auto"`` (smaller).
    """

    name = "topk_a2a"
    bucket_dependent = True

    def __init__(self, density: float = 0.01, gather: str = "auto") -> None:
        super().__init__()
        if not 0.0 < density <= 1.0:
            raise ValueError(f"density must be in (0, 1], got {density}")
        if gather not in GATHERS:
            raise ValueError(f"gather must be one of {list(GATHERS)}, got {gather!r}")
        self.density = density
        self.gather = gather
        self.sparse_gathers = 0
        self.dense_gathers = 0

    def launch(self, flat: Tensor, layout: list[Slot]) -> Future[Tensor]:
        p, rank, n = self.world_size, self.rank, flat.numel()
        sizes = shard_sizes(n, p)
        offsets = [sum(sizes[:j]) for j in range(p)]
        ks = [topk_count(s, self.density) for s in sizes]

        # (1) per-shard top-k of gradient + residual; what is sent leaves the residual.
        acc = self.residuals.add_to(flat, layout)
        scratch = scratch_of(flat)  # flat's values now live in acc
        payloads = []
        for j in range(p):
            shard = acc.narrow(0, offsets[j], sizes[j])
            idx = topk_indices(shard, ks[j], scratch=scratch)
            payloads.append(pack(shard[idx], idx))
            shard[idx] = 0.0
        self.residuals.store(acc, layout)
        send = torch.cat(payloads)
        recv = torch.empty(p * 2 * ks[rank], dtype=torch.float32, device=flat.device)
        dist.all_to_all_single(recv, send, output_split_sizes=[2 * ks[rank]] * p,
                               input_split_sizes=[2 * k for k in ks], group=self.group)
        self.bytes_sent += 4 * (send.numel() - 2 * ks[rank])

        # (2) the owner sums the P contributions to its shard.
        values, indices = unpack(recv.view(p, 2 * ks[rank]))
        mine = (scratch[:sizes[rank]].zero_() if scratch is not None  # copied into the payload below
                else torch.zeros(sizes[rank], dtype=torch.float32, device=flat.device))
        mine.index_add_(0, indices.flatten(), values.flatten())

        # (3) all-gather the reduced shards, as pairs or dense (same choice on every rank).
        sparse, length = gather_plan(sizes, self.density, self.gather)
        if sparse:
            nz = torch.unique(indices)  # the union of what the P ranks sent, <= P * k entries
            payload = torch.zeros(length, dtype=torch.float32, device=flat.device)
            cap = length // 2
            payload[:nz.numel()] = mine[nz]
            payload[cap:cap + nz.numel()] = nz.to(torch.int32).view(torch.float32)
            self.sparse_gathers += 1
        else:
            payload = torch.zeros(length, dtype=torch.float32, device=flat.device)
            payload[:sizes[rank]] = mine
            self.dense_gathers += 1
        gathered = torch.empty(p * length, dtype=torch.float32, device=flat.device)
        # before the launch, so the collective (and the callback after it) are ordered after the copy
        base = torch.tensor(offsets).to(flat.device, non_blocking=True).unsqueeze(1) if sparse else None
        work = all_gather_single(gathered, payload, group=self.group, async_op=True)
        self.bytes_sent += 4 * length * (p - 1)

        def assemble(_: Future) -> Tensor:
            read_on_this_stream(gathered, base)
            rows = gathered.view(p, length)
            out = reusable_output(flat)
            if sparse:  # only the pairs are scaled, not all n elements
                vals, idx = unpack(rows)
                out.index_add_(0, (idx + base).flatten(), vals.flatten(), alpha=1.0 / p)
            else:
                for j in range(p):
                    torch.div(rows[j, :sizes[j]], p, out=out[offsets[j]:offsets[j] + sizes[j]])
            return out.to(flat.dtype)

        return work.get_future().then(assemble)

    def info(self) -> dict[str, Any]:
        return {**super().info(), "density": self.density, "gather": self.gather,
                "sparse_gathers": self.sparse_gathers, "dense_gathers": self.dense_gathers}

    def extra_repr(self) -> str:
        return f"density={self.density}, gather={self.gather!r}"

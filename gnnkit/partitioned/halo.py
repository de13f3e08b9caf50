"""Halo exchange: the rows of remote in-neighbours, fetched from their owners with one all-to-all.

In partition-parallel full-graph training (BNS-GCN, Wan et al., MLSys 2022,
<https://arxiv.org/abs/2203.10983>; PipeGCN, Wan et al., ICLR 2022,
<https://arxiv.org/abs/2203.10428>) rank ``p`` computes a layer for the nodes it owns; their
in-neighbours owned elsewhere (its *halo*) are read from the ranks that own them. A
:class:`HaloPlan`, agreed once by all ranks, says which owned rows go to which rank;
:func:`halo_exchange` sends them with ``all_to_all_single`` inside an autograd function whose
backward sends the halo rows' gradients back to their owners, where they add up. Without sampling
or staleness, P ranks compute exactly the single-process forward and gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor


@dataclass
class HaloPlan:
    """Who sends which rows to whom, for one rank.

    Attributes:
        num_owned: Rows this rank owns.
        num_halo: Halo rows this rank receives.
        send_index: Owned row positions to send, grouped by destination rank (``int64``).
        send_counts: Rows sent to each rank.
        recv_counts: Rows received from each rank.
        recv_positions: Where the received rows go among the halo rows (received order is by owner
            rank, then by the order this rank asked for them).
        group: The process group (``None``: the default group).
        send_ids: Global ids of the rows sent, in send order.
        recv_ids: Global ids of the rows received, in received order.
        halo_weight: ``None`` for the exact exchange; for a sampled one
            (:mod:`gnnkit.partitioned.boundary_sampling`) the weight of every halo row's edges
            (``1 / rate`` where received, 0 where not), and the rows not received are zeros.
        parent: The plan a sampled one was cut from (see :attr:`exact`).
    """

    num_owned: int
    num_halo: int
    send_index: Tensor
    send_counts: list[int]
    recv_counts: list[int]
    recv_positions: Tensor
    group: dist.ProcessGroup | None = None
    send_ids: Tensor | None = None
    recv_ids: Tensor | None = None
    halo_weight: Tensor | None = None
    parent: HaloPlan | None = None

    @property
    def exact(self) -> HaloPlan:
        """The whole exchange this plan was sampled from (itself when it is whole)."""
        return self.parent.exact if self.parent is not None else self

    @classmethod
    def build(cls, owned: Tensor, halo: Tensor, halo_owner: Tensor,
              group: dist.ProcessGroup | None = None) -> HaloPlan:
        """Agree on the plan with every rank (a collective: all ranks call it).

        Args:
            owned: Global ids of this rank's nodes, ascending.
            halo: Global ids of its halo nodes, ascending.
            halo_owner: The rank owning each halo node.
            group: Process group (default: the default group).

        Raises:
            ValueError: A halo owner outside the group, or a rank asked for a node it does not own.
        """
        if not (dist.is_available() and dist.is_initialized()):  # one process, one partition: no halo
            if halo.numel():
                raise ValueError(f"halo: {halo.numel()} halo nodes, but no process group holds their owners")
            empty = torch.zeros(0, dtype=torch.int64)
            return cls(int(owned.numel()), 0, empty, [0], [0], empty, group, empty, empty)
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        halo_owner = halo_owner.to(torch.int64)
        if halo_owner.numel() and (int(halo_owner.min()) < 0 or int(halo_owner.max()) >= world
                                   or bool((halo_owner == rank).any())):
            raise ValueError(f"halo_owner: expected other ranks of a world of {world}, got "
                             f"{sorted(set(halo_owner.tolist()))[:5]} on rank {rank}")
        by_owner = torch.argsort(halo_owner, stable=True)
        recv_counts = torch.bincount(halo_owner, minlength=world)
        send_counts = torch.empty_like(recv_counts)
        dist.all_to_all_single(send_counts, recv_counts, group=group)
        requested = torch.empty(int(send_counts.sum()), dtype=torch.int64)
        dist.all_to_all_single(requested, halo[by_owner].to(torch.int64).contiguous(), send_counts.tolist(),
                               recv_counts.tolist(), group=group)
        send_index, found = sorted_positions(owned.to(torch.int64), requested)
        if not bool(found.all()):
            raise ValueError(f"rank {rank} was asked for nodes it does not own")
        return cls(num_owned=int(owned.numel()), num_halo=int(halo.numel()), send_index=send_index,
                   send_counts=send_counts.tolist(), recv_counts=recv_counts.tolist(),
                   recv_positions=by_owner, group=group, send_ids=requested,
                   recv_ids=halo[by_owner].to(torch.int64))

    @property
    def send_rows(self) -> int:
        """Rows this rank sends per exchange."""
        return int(self.send_index.numel())

    def subset(self, keep_send: Tensor, keep_recv: Tensor, halo_weight: Tensor) -> HaloPlan:
        """The plan that exchanges only the kept rows (both sides must keep the same rows).

        Args:
            keep_send: Mask over the rows this rank sends, in send order.
            keep_recv: Mask over the rows it receives, in received order.
            halo_weight: The weight of every halo row's edges (see the class attributes).
        """
        world = len(self.send_counts)
        send_rank = torch.repeat_interleave(torch.arange(world), torch.tensor(self.send_counts))
        recv_rank = torch.repeat_interleave(torch.arange(world), torch.tensor(self.recv_counts))
        assert self.send_ids is not None and self.recv_ids is not None
        return HaloPlan(self.num_owned, self.num_halo, self.send_index[keep_send],
                        torch.bincount(send_rank[keep_send], minlength=world).tolist(),
                        torch.bincount(recv_rank[keep_recv], minlength=world).tolist(),
                        self.recv_positions[keep_recv], self.group, self.send_ids[keep_send],
                        self.recv_ids[keep_recv], halo_weight, parent=self)


def sorted_positions(sorted_ids: Tensor, wanted: Tensor) -> tuple[Tensor, Tensor]:
    """Positions of ``wanted`` ids in ascending ``sorted_ids``, and whether each is there."""
    positions = torch.searchsorted(sorted_ids, wanted)
    if sorted_ids.numel() == 0:
        return positions, torch.zeros_like(wanted, dtype=torch.bool)
    found = (positions < sorted_ids.numel()) & (sorted_ids[positions.clamp(max=sorted_ids.numel() - 1)] == wanted)
    return positions, found


def all_to_all_rows(rows: Tensor, out_counts: list[int], in_counts: list[int],
                    group: dist.ProcessGroup | None) -> Tensor:
    """``all_to_all_single`` of whole rows: ``in_counts[r]`` rows of ``rows`` go to rank ``r`` (in
    rank order), ``out_counts[r]`` come back from it (a collective; a no-op in a world of one)."""
    out = rows.new_empty((sum(out_counts), *rows.shape[1:]))
    if len(out_counts) == 1:  # a single partition: nothing to exchange
        return out
    dist.all_to_all_single(out, rows.contiguous(), out_counts, in_counts, group=group)
    return out


class _HaloExchange(torch.autograd.Function):
    """Forward: owned rows -> this rank's halo rows; backward: halo gradients -> their owners."""

    @staticmethod
    def forward(ctx, owned_rows: Tensor, plan: HaloPlan) -> Tensor:  # type: ignore[override]
        ctx.plan = plan
        received = all_to_all_rows(owned_rows[plan.send_index], plan.recv_counts, plan.send_counts, plan.group)
        every_row = received.size(0) == plan.num_halo
        halo = owned_rows.new_empty if every_row else owned_rows.new_zeros  # (rows sampled out stay 0)
        halo = halo((plan.num_halo, *owned_rows.shape[1:]))
        halo[plan.recv_positions] = received
        return halo

    @staticmethod
    def backward(ctx, grad_halo: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        plan: HaloPlan = ctx.plan
        returned = all_to_all_rows(grad_halo[plan.recv_positions], plan.send_counts, plan.recv_counts, plan.group)
        grad = grad_halo.new_zeros((plan.num_owned, *grad_halo.shape[1:]))
        return grad.index_add_(0, plan.send_index, returned), None


def halo_exchange(owned_rows: Tensor, plan: HaloPlan) -> Tensor:
    """The halo rows of this rank, fetched from their owners (differentiable; a collective).

    Args:
        owned_rows: ``[num_owned, ...]`` rows of the nodes this rank owns.
        plan: The agreed :class:`HaloPlan`.

    Returns:
        ``[num_halo, ...]`` rows of the halo nodes, in the partition's halo order.
    """
    if owned_rows.size(0) != plan.num_owned:
        raise ValueError(f"owned_rows: expected {plan.num_owned} rows (the owned nodes), got {owned_rows.size(0)}")
    return _HaloExchange.apply(owned_rows, plan)


def with_halo(owned_rows: Tensor, plan: HaloPlan) -> Tensor:
    """``[owned rows; halo rows]``: the inputs of a layer on the partition's local graph."""
    return torch.cat([owned_rows, halo_exchange(owned_rows, plan)])

"""Vectorised uniform neighbour sampling on a canonical CSR graph.

PyG's :class:`~torch_geometric.loader.NeighborLoader` needs ``pyg-lib`` or
``torch-sparse`` for its sampling kernels. gnnkit needs neither: this module
has a pure-PyTorch sampler, :class:`CSRNeighborSampler`, that works directly
on the canonical graph (CSR with rows = destination nodes, possibly backed by
a read-only memory map). It plugs into PyG's generic
:class:`~torch_geometric.loader.NodeLoader` and returns exactly what PyG's
``NeighborSampler`` returns for a homogeneous graph (directional subgraphs,
``flow="source_to_target"``, non-disjoint). So mini-batches look like
``NeighborLoader`` batches: ``x``, ``y``, local ``edge_index = [src, dst]``,
``n_id``, ``e_id``, ``batch_size``, ``input_id``, ``num_sampled_nodes`` and
``num_sampled_edges``.

Example:
    >>> loader = neighbor_loader(data, indptr, indices, [15, 10],
    ...                          input_nodes=train_idx, batch_size=1024,
    ...                          shuffle=True, seed=0)
    >>> for batch in loader:
    ...     out = model(batch.x, batch.edge_index)[:batch.batch_size]
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    NodeSamplerInput,
    SamplerOutput,
)

from gnnkit.data.worker_seeds import separate_worker_seeds
from gnnkit.native import checks
from pipeline import counter_random, log

__all__ = ["CSRNeighborSampler", "CSRNodeLoader", "SampledHops", "neighbor_loader", "relabel", "sample_hops"]

# Without replacement, a row with more than k edges needs k distinct uniform
# positions. For k <= _FLOYD_MAX_K, Floyd's algorithm does this for all such
# rows at once with exactly k draws each and O(k^2) vectorised comparisons.
# For larger k, rows with deg <= _DENSE_FACTOR * k keep the k smallest of deg
# random keys (O(deg) = O(k) per row), and rows with higher degree (hub nodes
# included) use rejection sampling, whose redraws succeed with probability
# above 1 - 1/_DENSE_FACTOR, so again O(k) per row whatever the degree.
_FLOYD_MAX_K = 32
_DENSE_FACTOR = 2


def exclusive_cumsum(counts: Tensor) -> Tensor:
    """Start offset of each segment, given segment lengths."""
    return torch.cumsum(counts, 0) - counts


def _randint_below(high: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
    """Independent uniform integers in ``[0, high[i])``, ``k`` per row.

    Args:
        high: Positive int64 ``[R]``.
        k: Draws per row.
        generator: Random generator (``None``: torch's default generator).

    Returns:
        int64 ``[R, k]``.
    """
    # float64 has 53 bits, so the bias of floor(u * high) is < high / 2**53.
    u = torch.rand(high.numel(), k, dtype=torch.float64, generator=generator, device=high.device)
    high = high.unsqueeze(1)
    return torch.minimum((u * high).long(), high - 1)


def relabel(src: Tensor, local: Tensor, num_seen: int) -> tuple[Tensor, Tensor]:
    """Maps global ids to local ids, appending unseen nodes in order of first occurrence.

    Args:
        src: Global node ids, int64 ``[E]``.
        local: Scratch map (global id -> local id, or -1), updated in place.
        num_seen: Number of nodes sampled so far.

    Returns:
        ``(src_local, new)``: the local ids of ``src``, int64 ``[E]``; and
        the global ids of the newly seen nodes in order of first
        occurrence, int64 ``[E_new]``.
    """
    n = src.numel()
    if n > torch.iinfo(local.dtype).max - 2:
        raise RuntimeError(f"too many sampled edges in one hop ({n})")
    # The first occurrence of each unseen node (-1 in ``local``) leaves the least mark there,
    # position - n - 1 (below -1); seen entries scatter the dtype's maximum, which leaves their id.
    marks = torch.where(torch.index_select(local, 0, src) < 0,
                        torch.arange(-n - 1, -1, dtype=local.dtype, device=src.device), torch.iinfo(local.dtype).max)
    local.scatter_reduce_(0, src, marks, reduce="amin", include_self=True)
    new = torch.masked_select(src, torch.index_select(local, 0, src) == marks)  # the one read-back: its size
    local.index_copy_(0, new, torch.arange(num_seen, num_seen + new.numel(), dtype=local.dtype, device=src.device))
    return torch.index_select(local, 0, src).long(), new


def _relabel(src: Tensor, local: Tensor, num_seen: int) -> tuple[Tensor, Tensor]:
    """:func:`relabel` by the native kernel when it is built (the same numbering, one pass)."""
    from gnnkit.native.ops import relabel as native_relabel

    out = native_relabel(src, local, num_seen)
    return relabel(src, local, num_seen) if out is None else out


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Whether ``a`` and ``b`` may be one device: the same type and index (an index left out matches any)."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


@dataclass
class SampledHops:
    """A multi-hop sample in PyG's layout (see :class:`CSRNeighborSampler`): per hop, the nodes it
    reached first (the seeds first), and its edges as local ``rows`` (sources), ``cols``
    (destinations) and ``edges`` (edge ids)."""

    nodes: list[Tensor]
    rows: list[Tensor]
    cols: list[Tensor]
    edges: list[Tensor]

    def output(self, index: NodeSamplerInput) -> SamplerOutput:
        """The sample as PyG's :class:`~torch_geometric.sampler.SamplerOutput`."""
        empty = self.nodes[0].new_empty(0)

        def cat(parts: list[Tensor]) -> Tensor:
            return torch.cat(parts) if parts else empty

        return SamplerOutput(
            node=cat(self.nodes) if len(self.nodes) > 1 else self.nodes[0].clone(),
            row=cat(self.rows), col=cat(self.cols), edge=cat(self.edges), batch=None,
            num_sampled_nodes=[t.numel() for t in self.nodes],
            num_sampled_edges=[t.numel() for t in self.edges],
            metadata=(index.input_id, index.time),
        )


#: One hop: ``expand(frontier, k)`` -> ``(src, segment, edge)``: the global source ids of the edges
#: sampled into the frontier nodes (grouped by frontier node, in frontier order), the frontier
#: position of each edge, and the edges' ids.
Expand = Callable[[Tensor, int], tuple[Tensor, Tensor, Tensor]]


def sample_hops(seed_nodes: Tensor, num_neighbors: Sequence[int], expand: Expand, local: Tensor) -> SampledHops:
    """PyG's multi-hop bookkeeping around any one-hop sampler: hop ``l`` expands the nodes first
    reached in hop ``l - 1`` (the seeds, first), numbering new nodes in order of first occurrence.

    Args:
        seed_nodes: Global seed ids, int64 ``[B]`` (repeats keep their positions, edges into a
            repeated seed's later positions point at its first one).
        num_neighbors: Fan-out per hop (``-1``: all).
        expand: The one-hop sampler (see :data:`Expand`).
        local: Scratch map over the global ids, all -1; left so (also on failure the caller should
            drop it: it may then hold stale entries).

    Returns:
        The :class:`SampledHops`.
    """
    device = seed_nodes.device
    num_seeds = seed_nodes.numel()
    nodes, rows, cols, edges = [seed_nodes], [], [], []
    # Repeated seeds keep their positions but map to the first one:
    positions = torch.arange(num_seeds, dtype=local.dtype, device=device)
    local.scatter_reduce_(0, seed_nodes, positions, reduce="amin", include_self=False)
    num_seen, frontier_start, frontier = num_seeds, 0, seed_nodes
    for k in num_neighbors:
        src, segment, edge = expand(frontier, k)
        src_local, new = _relabel(src, local, num_seen)
        rows.append(src_local)
        cols.append(segment + frontier_start)  # frontier nodes are local ids start..start+F-1
        edges.append(edge)
        nodes.append(new)
        frontier_start, frontier = num_seen, new
        num_seen += new.numel()
    for chunk in nodes:  # reset only what this sample touched
        local.index_fill_(0, chunk, -1)
    return SampledHops(nodes, rows, cols, edges)


def scratch_dtype(num_nodes: int, device: torch.device) -> torch.dtype:
    """The dtype of a sampler's scratch map (global id -> local id): local ids are below
    ``num_nodes``, so int32 suffices on the CPU and halves the map; the CUDA sampler works on an
    int64 map, and given an int32 one would convert and copy back all ``num_nodes`` entries a batch."""
    return torch.int32 if num_nodes < 2**31 - 2 and device.type != "cuda" else torch.int64


def batch_key(seed: int, index: NodeSamplerInput) -> int:
    """A 63-bit generator seed for one batch: a hash of ``seed`` and the batch's ``input_id`` (its
    seeds' positions in the loader's input, in batch order; the seed ids when there are none)."""
    ids = index.input_id if index.input_id is not None else index.node
    digest = hashlib.blake2b(ids.detach().cpu().contiguous().numpy().tobytes(), digest_size=8).digest()
    return counter_random.stream_key(seed, int.from_bytes(digest, "little")) % 2**63


class CSRNeighborSampler(BaseSampler):
    """Uniform multi-hop neighbour sampler on a destination-major CSR graph.

    Implements the uniform neighbourhood sampling of GraphSAGE ("Inductive
    Representation Learning on Large Graphs",
    <https://arxiv.org/abs/1706.02216>) with PyG's conventions. Starting from
    the seed nodes, hop ``l`` samples ``num_neighbors[l]`` incoming
    neighbours of every node first reached in hop ``l - 1`` (the seeds, for
    the first hop):

    * without replacement it takes ``min(deg, k)`` distinct edges of the row;
    * with replacement it takes ``k`` independent uniform edges (none if the
      row is empty);
    * ``k == -1`` takes the whole row.

    The result matches PyG's ``NeighborSampler`` (``pyg-lib`` kernel,
    homogeneous, directional, non-disjoint, ``csc=True``):

    * ``node`` holds the seeds first, verbatim and in the given order
      (repeated seeds stay repeated and each position gets its own sampled
      edges), then the nodes first reached in hop 1, hop 2, ... in order of
      discovery. A node appears at most once after the seeds; an edge whose
      source is a repeated seed points at its first position (pyg-lib's
      dense mapper picks the last one; both rows hold the same node).
    * Edges are grouped hop by hop and, within a hop, by destination in
      ``node`` order; ``row`` is the local source, ``col`` the local
      destination, ``edge`` the position of the edge in ``indices``.
    * ``num_sampled_nodes = [num_seeds, new_in_hop_1, ...]`` and
      ``num_sampled_edges = [edges_in_hop_1, ...]`` (plain ints), as used by
      :func:`torch_geometric.utils.trim_to_layer`.

    The graph is only read (never written, never copied), and a hop costs
    O(F * k) for F frontier nodes and fan-out k, whatever the degrees, so hub
    nodes are cheap (rows of more than k edges get k distinct positions by
    Floyd's algorithm for ``k <= 32``, by random keys or rejection sampling
    above). Global ids are mapped to local ones with a scratch array of
    ``num_nodes`` entries (int32, int64 beyond 2**31 nodes) that each process
    allocates on first use and that is reset only where a batch touched it.

    Randomness: with ``seed=None`` the sampler draws from torch's default
    generator (which ``DataLoader`` seeds differently in each worker). With
    an integer ``seed`` it uses a private :class:`torch.Generator`: in the
    process that built it the generator is seeded with ``seed``, so the same
    sequence of calls gives the same samples; in a ``DataLoader`` worker it
    is re-seeded for every batch from ``seed`` and the batch's ``input_id``
    (the positions of its seeds in the loader's input, in batch order), so a
    batch's neighbourhoods depend on its seeds alone: not on which worker
    drew it, how many workers there are, or what they drew before. A resumed
    run whose loader deals the same batches (its shuffle follows torch's
    global generator, which checkpoints restore) then samples the same
    neighbourhoods; unshuffled (evaluation) batches sample the same ones
    every epoch.

    Args:
        indptr: Row pointers, int64 ``[num_nodes + 1]``; row ``v`` lists the
            sources of the edges into ``v``.
        indices: Source node of every edge, int64 ``[num_edges]``. Both may
            be backed by a read-only memory map; they are never written.
            Only O(1) checks are made (dtype, shape, ``indptr[0] == 0``,
            ``indptr[-1] == num_edges``); monotonic ``indptr`` and ids in
            ``[0, num_nodes)`` are trusted (see the canonical graph checks).
        num_neighbors: Fan-out per hop; ``-1`` takes all neighbours.
        replace: Sample with replacement.
        seed: Seed of the private generator, or ``None`` for torch's default
            generator.

    Raises:
        ValueError: If the graph or the arguments are malformed.
    """

    def __init__(
        self,
        indptr: Tensor,
        indices: Tensor,
        num_neighbors: Sequence[int],
        replace: bool = False,
        seed: int | None = None,
    ) -> None:
        for name, t in (("indptr", indptr), ("indices", indices)):
            if not isinstance(t, Tensor):
                raise ValueError(f"'{name}' must be a torch.Tensor (got {type(t).__name__})")
            if t.dtype != torch.int64:
                raise ValueError(f"'{name}' must be int64 (got {t.dtype})")
            if t.dim() != 1:
                raise ValueError(f"'{name}' must be 1-D (got shape {tuple(t.shape)})")
        if indptr.device != indices.device:
            raise ValueError(f"'indptr' and 'indices' are on different devices ({indptr.device} and {indices.device})")
        if indptr.numel() == 0:
            raise ValueError("'indptr' must have num_nodes + 1 >= 1 entries")
        if int(indptr[0]) != 0 or int(indptr[-1]) != indices.numel():
            raise ValueError(
                f"'indptr' must start at 0 and end at len(indices) = {indices.numel()} "
                f"(got {int(indptr[0])} and {int(indptr[-1])})"
            )
        if isinstance(num_neighbors, (str, bytes)) or not isinstance(num_neighbors, Sequence):
            raise ValueError(f"'num_neighbors' must be a list of ints (got {num_neighbors!r})")
        hops = []
        for k in num_neighbors:
            if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < -1:
                raise ValueError(f"'num_neighbors' entries must be ints >= 0 or -1 (got {list(num_neighbors)!r})")
            hops.append(int(k))
        if not isinstance(replace, (bool, np.bool_)):
            raise ValueError(f"'replace' must be a bool (got {replace!r})")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"'seed' must be None or an int >= 0 (got {seed!r})")

        self.indptr = indptr
        self.indices = indices
        self.num_nodes = indptr.numel() - 1
        self.num_neighbors = hops
        self.replace = bool(replace)
        self.seed = None if seed is None else int(seed)

        # Per-process state, (re)built lazily by `_process_state`:
        self._generator: torch.Generator | None = self._new_generator(self.seed)
        self._device_generator: torch.Generator | None = None  # see `_on_device`
        self._owner_pid: int = os.getpid()
        self._local: Tensor | None = None  # global id -> local id, -1 elsewhere

    def __repr__(self) -> str:
        seed = "" if self.seed is None else f", seed={self.seed}"
        return f"{self.__class__.__name__}(num_neighbors={self.num_neighbors}, replace={self.replace}{seed})"

    @property
    def edge_permutation(self) -> None:
        """Edge ids are positions in ``indices``; no permutation applies."""
        return None

    # Per-process state ################################################

    def _new_generator(self, seed: int | None) -> torch.Generator | None:
        """The private generator: on the CPU wherever the graph lives, so drawing a kernel's seed
        from it never waits for the GPU (a draw from a CUDA generator read back is a host sync)."""
        if seed is None:
            return None
        return torch.Generator().manual_seed(seed)

    def _on_device(self, generator: torch.Generator | None, device: torch.device) -> torch.Generator | None:
        """A generator that draws on ``device`` for the pure-PyTorch hop: ``generator`` itself on its
        own device, else this sampler's generator for ``device`` re-seeded from a draw of ``generator``
        (host-side, no sync), so the samples still follow ``generator`` alone."""
        if generator is None or _same_device(generator.device, device):
            return generator
        if self._device_generator is None or not _same_device(self._device_generator.device, device):
            self._device_generator = torch.Generator(device=device)  # also another GPU's: each has its own
        return self._device_generator.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))

    def _process_state(self, index: NodeSamplerInput) -> tuple[torch.Generator | None, Tensor]:
        """Returns this process's generator (in a loader worker, seeded for ``index``'s batch) and
        scratch map, creating them if needed."""
        pid = os.getpid()
        if pid != self._owner_pid:  # forked (or unpickled) into a new process
            self._owner_pid = pid
            self._local = None  # do not rely on a copy-on-write parent copy
        if self.seed is not None and torch.utils.data.get_worker_info() is not None:
            assert self._generator is not None  # made from the seed in __init__
            self._generator.manual_seed(batch_key(self.seed, index))
        if self._local is None:
            device = self.indptr.device
            self._local = torch.full((self.num_nodes,), -1, dtype=scratch_dtype(self.num_nodes, device), device=device)
        return self._generator, self._local

    def state_dict(self) -> dict[str, Any]:
        """The private generator's state in this process, for checkpoints (empty with ``seed=None``).

        ``DataLoader`` workers seed their copies for each batch (see the class docstring): their
        samples need no saved state."""
        if self._generator is None:
            return {}
        return {"generator": self._generator.get_state(), "device": self._generator.device.type}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the private generator from a :meth:`state_dict`, so the next batches are those
        the saved sampler would have drawn. A state saved by a generator on another kind of device
        (a run resumed on a GPU, or sampling moved to the host) cannot continue this one: it is
        left out with a warning, and the resumed run samples other, equally random, batches."""
        if "generator" not in state or self._generator is None:
            return
        saved, mine = state.get("device", "cpu"), self._generator.device.type
        if saved != mine:
            log.warning("resume: the sampler's saved random state is a %s generator's but it now samples on "
                        "%s; its batches will differ from an uninterrupted run's", saved, mine)
            return
        self._generator.set_state(state["generator"])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_local"] = state["_device_generator"] = None  # never ship the scratch map or a device generator
        return state

    # Sampling #########################################################

    def sample_rows(
        self, frontier: Tensor, k: int, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One hop: samples the incoming edges of each frontier node (the fan-out rules of the
        class docstring), for this sampler's hop loop and for callers running their own
        (partition-parallel sampling, :mod:`gnnkit.partitioned.remote_sampler`).

        Args:
            frontier: Rows of the nodes to expand (their ids in this graph), int64 ``[F]``.
            k: Fan-out (``-1``: all).
            generator: Random generator.

        Returns:
            ``(edge, segment, count)``: the sampled edges as positions in
            ``indices``, grouped by frontier node in frontier order, int64
            ``[E]``; the frontier index (``0..F-1``) of each sampled edge,
            int64 ``[E]``; and the number of edges sampled per frontier
            node, int64 ``[F]``.
        """
        device = frontier.device
        generator = self._on_device(generator, device)
        start = torch.index_select(self.indptr, 0, frontier)
        deg = torch.index_select(self.indptr, 0, frontier + 1) - start
        if k == 0 or frontier.numel() == 0:
            empty = torch.empty(0, dtype=torch.long, device=device)
            return empty, empty, torch.zeros_like(deg)
        if k < 0:
            count = deg
        elif self.replace:
            count = torch.where(deg > 0, k, 0)
        else:
            count = deg.clamp(max=k)
        total = int(count.sum())
        segment = torch.repeat_interleave(count, output_size=total)
        if k > 0 and self.replace:
            # k draws per non-empty row; the rows' slots are contiguous.
            rows = torch.nonzero(deg > 0).view(-1)
            draws = _randint_below(torch.index_select(deg, 0, rows), k, generator)
            edge = (torch.index_select(start, 0, rows).unsqueeze(1) + draws).view(-1)
            return edge, segment, count

        # Whole rows (edge j of a row sits in slot offset + j)...
        offset = exclusive_cumsum(count)
        edge = torch.index_select(start - offset, 0, segment) + torch.arange(total, device=device)
        if k < 0:
            return edge, segment, count
        # ...then overwrite the slots of the rows with more than k edges.
        rows = torch.nonzero(deg > k).view(-1)
        if rows.numel():
            deg_rows = torch.index_select(deg, 0, rows)
            if k <= _FLOYD_MAX_K:
                groups = [(rows, deg_rows, self._pick_floyd)]
            else:
                dense = deg_rows <= _DENSE_FACTOR * k
                groups = [
                    (torch.masked_select(rows, dense), torch.masked_select(deg_rows, dense), self._pick_dense),
                    (torch.masked_select(rows, ~dense), torch.masked_select(deg_rows, ~dense), self._pick_sparse),
                ]
            arange_k = torch.arange(k, device=device)
            for sub, deg_sub, pick in groups:
                if sub.numel() == 0:
                    continue
                picked = pick(deg_sub, k, generator)  # [R, k] distinct offsets within each row
                slots = (torch.index_select(offset, 0, sub).unsqueeze(1) + arange_k).view(-1)
                values = (torch.index_select(start, 0, sub).unsqueeze(1) + picked).view(-1)
                edge.index_copy_(0, slots, values)
        return edge, segment, count

    def sample_row_edges(self, rows: Tensor, k: int, generator: torch.Generator | None,
                         edge_base: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """One hop over ``rows`` with the sources and ids of the sampled edges: :meth:`sample_rows`'s
        edges, drawn by the native kernel when it is built (:func:`gnnkit.native.ops.sample_rows`,
        the same fan-out rules, its own random stream).

        Args:
            rows: Rows to expand, int64 ``[F]``.
            k: Fan-out (``-1``: all).
            generator: Random generator.
            edge_base: int64 ``[num_nodes]``: edge ids ``edge_base[row] + offset in the row``
                (e.g. a partition's rows in the whole graph's edge numbering) instead of positions in
                ``indices``.

        Returns:
            ``(src, edge, count)``: the sampled edges' sources (``indices`` entries) and ids,
            grouped by row in row order, int64 ``[E]``; the edge count per row, int64 ``[F]``.
        """
        from gnnkit.native.ops import sample_rows as native_sample_rows

        out = native_sample_rows(self, rows, k, generator, edge_base)
        if out is not None:
            return out
        edge, segment, count = self.sample_rows(rows, k, generator)
        src = torch.index_select(self.indices, 0, edge)
        if edge_base is not None:
            row = torch.index_select(rows, 0, segment)
            edge = torch.index_select(edge_base, 0, row) + (edge - torch.index_select(self.indptr, 0, row))
        return src, edge, count

    @staticmethod
    def _pick_floyd(deg: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
        """k distinct uniform offsets in ``[0, deg)`` per row, by Floyd's algorithm.

        Slot ``j`` draws ``r`` uniformly from ``[0, deg - k + j]`` and takes
        ``deg - k + j`` instead if ``r`` is already taken; the resulting set
        is a uniform k-subset (Bentley & Floyd, "A sample of brilliance",
        CACM 1987; the scheme pyg-lib uses). Vectorised over rows, with a loop
        over the k slots.

        Args:
            deg: Row degrees, int64 ``[R]``, each ``> k``.
            k: Number of offsets per row.
            generator: Random generator.

        Returns:
            int64 ``[R, k]``.
        """
        picked = torch.empty(deg.numel(), k, dtype=torch.long, device=deg.device)
        u = torch.rand(deg.numel(), k, dtype=torch.float64, generator=generator, device=deg.device)
        for j in range(k):
            top = deg - (k - j)  # draw from [0, top]
            r = torch.minimum((u[:, j] * (top + 1)).long(), top)
            if j:
                taken = (picked[:, :j] == r.unsqueeze(1)).any(dim=1)
                r = torch.where(taken, top, r)
            picked[:, j] = r
        return picked

    @staticmethod
    def _pick_dense(deg: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
        """k distinct uniform offsets in ``[0, deg)`` per row, for small ``deg``.

        Keeps the k smallest of ``deg`` random keys per (padded) row, i.e.
        the first k entries of a uniform random permutation of the row.

        Args:
            deg: Row degrees, int64 ``[R]``, each in ``(k, _DENSE_FACTOR * k]``.
            k: Number of offsets per row.
            generator: Random generator.

        Returns:
            int64 ``[R, k]``.
        """
        width = int(deg.max())
        keys = torch.rand(deg.numel(), width, dtype=torch.float64, generator=generator, device=deg.device)
        keys.masked_fill_(torch.arange(width, device=deg.device) >= deg.unsqueeze(1), 2.0)
        return torch.topk(keys, k, dim=1, largest=False, sorted=False).indices

    @staticmethod
    def _pick_sparse(deg: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
        """k distinct uniform offsets in ``[0, deg)`` per row, for large ``deg``.

        Rejection sampling: draw k offsets with replacement, then redraw every
        slot whose value already occurs in an earlier slot of its row, until
        no row has duplicates. Which slots are redrawn depends only on which
        values are equal, so the procedure commutes with relabelling the
        row's edges and every k-subset is equally likely. Since
        ``deg > 2 * k``, a redraw succeeds with probability above 1/2.

        Args:
            deg: Row degrees, int64 ``[R]``, each ``> _DENSE_FACTOR * k``.
            k: Number of offsets per row.
            generator: Random generator.

        Returns:
            int64 ``[R, k]``.
        """
        picked = _randint_below(deg, k, generator)
        if k == 1:
            return picked
        flat = picked.view(-1)
        active = torch.arange(deg.numel(), device=deg.device)  # rows that may hold duplicates
        while active.numel():
            values, order = torch.sort(torch.index_select(picked, 0, active), dim=1, stable=True)
            dup = torch.zeros_like(values, dtype=torch.bool)
            torch.eq(values[:, 1:], values[:, :-1], out=dup[:, 1:])
            keep = dup.any(dim=1)
            active = torch.masked_select(active, keep)
            if active.numel() == 0:
                break
            r, c = torch.nonzero(dup[keep], as_tuple=True)
            rows = torch.index_select(active, 0, r)
            slots = rows * k + order[keep][r, c]
            flat.index_copy_(0, slots, _randint_below(torch.index_select(deg, 0, rows), 1, generator).view(-1))
        return picked

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs: Any) -> SamplerOutput:
        """Samples the multi-hop neighbourhood of the seed nodes.

        Args:
            index: Seeds: ``index.node`` (int64 ``[B]`` global ids) and
                ``index.input_id`` (``[B]``, passed through).
            **kwargs: Ignored (PyG API).

        Returns:
            SamplerOutput with ``node`` (global ids, ``[N_s]``, seeds first),
            ``row``/``col`` (local source/destination, ``[E_s]``), ``edge``
            (positions in ``indices``, ``[E_s]``), ``batch=None``,
            ``num_sampled_nodes`` (``len(num_neighbors) + 1`` ints),
            ``num_sampled_edges`` (``len(num_neighbors)`` ints) and
            ``metadata=(index.input_id, index.time)``.

        Raises:
            NotImplementedError: For temporal (``index.time``) or
                heterogeneous (``index.input_type``) inputs.
            ValueError: If a seed is out of range.
        """
        if index.time is not None:
            raise NotImplementedError(f"{self.__class__.__name__} does not support temporal sampling")
        if index.input_type is not None:
            raise NotImplementedError(f"{self.__class__.__name__} only supports homogeneous graphs")
        seeds = index.node.view(-1)
        # checked where the loader made them (the host): no device sync
        checks.in_range(self.__class__.__name__, "seed node ids", seeds, self.num_nodes)
        seed_nodes = seeds.to(device=self.indptr.device, dtype=torch.long)

        generator, local = self._process_state(index)
        from gnnkit.native.ops import sample_from_nodes as native_sample  # the C++ sampler, when built

        out = native_sample(self, seed_nodes, generator, local, index)
        if out is not None:
            return out

        def expand(frontier: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
            edge, segment, _ = self.sample_rows(frontier, k, generator)
            return torch.index_select(self.indices, 0, edge), segment, edge

        try:  # on failure, drop the scratch map: it may hold stale entries
            hops = sample_hops(seed_nodes, self.num_neighbors, expand, local)
        except BaseException:
            self._local = None
            raise
        return hops.output(index)

    def sample_from_edges(self, index: EdgeSamplerInput, neg_sampling: Any = None) -> SamplerOutput:
        """Not supported: gnnkit only samples from seed nodes."""
        raise NotImplementedError(f"{self.__class__.__name__} does not support sampling from edges")


class CSRNodeLoader(NodeLoader):
    """:class:`~torch_geometric.loader.NodeLoader` whose batches get ``edge_index`` from the sampler.

    PyG's ``filter_data`` only emits ``edge_index`` when the full graph
    object holds one. gnnkit keeps the graph in CSR form only, so this
    loader builds the batch's local ``edge_index = [row, col]`` from the
    :class:`~torch_geometric.sampler.SamplerOutput` instead, before
    ``transform`` runs. The two transforms are kept in ``batch_transform``
    and ``batch_transform_sampler_output`` (``NodeLoader``'s own attributes
    stay None).

    Args:
        data: Node (and edge) attributes; ``edge_index`` is not needed.
        node_sampler: The sampler, e.g. :class:`CSRNeighborSampler`.
        input_nodes: Seed nodes (ids or bool mask; None: all nodes).
        input_time: Seed times (temporal samplers only).
        transform: Applied to every mini-batch ``Data``.
        transform_sampler_output: Applied to every ``SamplerOutput``.
        **kwargs: Further ``NodeLoader``/``DataLoader`` arguments.
    """

    def __init__(
        self,
        data: Data,
        node_sampler: BaseSampler,
        input_nodes: Tensor | None = None,
        input_time: Tensor | None = None,
        transform: Callable | None = None,
        transform_sampler_output: Callable | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(data, node_sampler, input_nodes=input_nodes, input_time=input_time, **kwargs)
        # a resumed run's persistent workers then leave its shuffle alone (seed=None: they sample from it)
        separate_worker_seeds(self, getattr(node_sampler, "seed", None))
        # Applied by `filter_fn` below rather than by NodeLoader.
        self.batch_transform = transform
        self.batch_transform_sampler_output = transform_sampler_output

    def filter_fn(self, out: SamplerOutput) -> Data:  # type: ignore[override]
        """Joins the sampled subgraph with node (and edge) features.

        Args:
            out: Sampler output.

        Returns:
            The mini-batch.
        """
        if self.batch_transform_sampler_output is not None:
            out = self.batch_transform_sampler_output(out)
        data = super().filter_fn(out)
        if isinstance(data, Data) and "edge_index" not in data:
            data.edge_index = torch.stack([out.row, out.col], dim=0)
            # the sampler's edge order (hop by hop, by destination in node order): models may slice
            # their blocks from one row pointer (NodeGNN's ``edges_by_destination``)
            data.edges_by_destination = isinstance(self.node_sampler, CSRNeighborSampler)
        return data if self.batch_transform is None else self.batch_transform(data)


def neighbor_loader(
    data: Data,
    indptr: Tensor,
    indices: Tensor,
    num_neighbors: Sequence[int],
    input_nodes: Tensor | None,
    batch_size: int,
    shuffle: bool,
    replace: bool = False,
    seed: int | None = None,
    **loader_kwargs: Any,
) -> CSRNodeLoader:
    """Builds a ``NeighborLoader``-like mini-batch loader over a CSR graph.

    ``data`` carries the node (and optionally edge) attributes only. The
    loader works on a shallow copy of it with ``num_nodes`` set and any
    ``edge_index`` dropped (the edges come from ``indptr``/``indices``; PyG's
    ``filter_data`` would otherwise need that second copy of the edge list
    only to notice that batches have edges), and batches get their
    ``edge_index`` from the sampler (see :class:`CSRNodeLoader`). Edge-level
    attributes (e.g. ``edge_attr`` ``[num_edges, F]``) must be in CSR order:
    they are selected with ``e_id``, the positions in ``indices``.

    Args:
        data: Node attributes: ``x`` ``[num_nodes, F]`` (may be absent or
            None), ``y`` ``[num_nodes, ...]``, others as needed.
        indptr: Row pointers, int64 ``[num_nodes + 1]`` (rows = destinations).
        indices: Source node of each edge, int64 ``[num_edges]``.
        num_neighbors: Fan-out per hop (``-1``: all neighbours).
        input_nodes: Seed nodes, int64 ids or a bool mask ``[num_nodes]``;
            ``None`` for all nodes.
        batch_size: Seeds per mini-batch.
        shuffle: Shuffle the seeds every epoch.
        replace: Sample neighbours with replacement.
        seed: Seed of the sampler's private generator (see
            :class:`CSRNeighborSampler`). The seed order follows
            ``loader_kwargs['generator']`` or torch's global generator.
        **loader_kwargs: More :class:`~torch_geometric.loader.NodeLoader` /
            :class:`torch.utils.data.DataLoader` arguments (``num_workers``,
            ``drop_last``, ``transform``, ``persistent_workers``, ...).

    Returns:
        Loader yielding :class:`~torch_geometric.data.Data` batches with
        ``x``, ``y``, ``edge_index`` ``[2, E_s]`` (local ``[src, dst]``),
        ``n_id``, ``e_id``, ``batch_size``, ``input_id``,
        ``num_sampled_nodes`` and ``num_sampled_edges``; the seeds are the
        first ``batch_size`` nodes.

    Raises:
        ValueError: If ``data``'s node or edge attributes do not match the
            graph's sizes, or the sampler arguments are invalid.
    """
    if not isinstance(data, Data):
        raise ValueError(f"'data' must be a torch_geometric.data.Data (got {type(data).__name__})")
    sampler = CSRNeighborSampler(indptr, indices, num_neighbors, replace=replace, seed=seed)
    num_nodes = sampler.num_nodes
    node_data = copy.copy(data)  # shallow: shares the attribute tensors
    if "edge_index" in node_data:
        del node_data.edge_index
    for key in ("edge_attr", "edge_weight", "edge_type"):  # PyG's edge-level keys
        value = node_data[key] if key in node_data else None
        if isinstance(value, Tensor) and value.dim() > 0 and value.shape[0] != indices.numel():
            raise ValueError(
                f"data.{key} has {value.shape[0]} rows but the CSR graph has {indices.numel()} edges; "
                "edge attributes must follow the CSR edge order"
            )
    for key in ("num_nodes", "x", "y"):
        if key not in node_data or node_data[key] is None:
            continue
        value = node_data[key]
        known = int(value) if key == "num_nodes" else value.shape[0]
        if known != num_nodes:
            raise ValueError(f"data.{key} implies {known} nodes but the CSR graph has {num_nodes}")
    node_data.num_nodes = num_nodes
    return CSRNodeLoader(
        node_data,
        sampler,
        input_nodes=input_nodes,
        batch_size=batch_size,
        shuffle=shuffle,
        **loader_kwargs,
    )

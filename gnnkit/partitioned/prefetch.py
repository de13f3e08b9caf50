"""Build the next sampled batch while this one trains.

Sampling across partitions and fetching remote features wait on the network at every hop; in
lockstep, every rank waits at once and the cores idle. As DistDGL's asynchronous mini-batch pipeline
does (Zheng et al., KDD 2022, <https://arxiv.org/abs/2112.15345>), a :class:`Prefetcher` builds batch
``i + 1`` in a background thread while the training step of batch ``i`` runs, so the waits overlap
the forward and backward passes. The loader's collectives then overlap the step's gradient
all-reduce, so they must run on a process group of their own (:func:`sampling_group`), and every rank
builds the same batches in the same order, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import torch.distributed as dist
from torch_geometric.data import Data

from gnnkit.partitioned.owner_requests import world_and_rank
from gnnkit.partitioned.remote_sampler import PartitionNeighborSampler
from gnnkit.partitioned.sampled_loader import PartitionNodeLoader


def sampling_group() -> dist.ProcessGroup | None:
    """A gloo group of every rank for a prefetching loader's collectives (a collective: every rank
    calls it, in the same order); ``None`` outside a distributed run."""
    world, _ = world_and_rank()
    return dist.new_group(backend="gloo") if world > 1 else None


class Prefetcher:
    """Iterates a :class:`PartitionNodeLoader` one batch ahead, in a background thread.

    While the next batch is built, the sampler's ``state_dict`` is its state before that batch (see
    :meth:`PartitionNeighborSampler.state_dict`), so a checkpoint taken during a step resumes with
    the batch that follows it.

    Args:
        loader: The loader; its sampler's collectives must run on a group of their own
            (:func:`sampling_group`), not one the training step uses.
    """

    def __init__(self, loader: PartitionNodeLoader) -> None:
        self.loader = loader

    @property
    def node_sampler(self) -> PartitionNeighborSampler:
        return self.loader.node_sampler

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Data]:
        batches = iter(self.loader)
        sampler = self.loader.node_sampler
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gnnkit-prefetch") as pool:
            try:
                pending = pool.submit(next, batches, None)
                while (batch := pending.result()) is not None:
                    sampler.held_state = sampler.generator.get_state()  # nothing is drawing now
                    pending = pool.submit(next, batches, None)
                    yield batch
            finally:
                pending.result()  # an epoch left early: the ranks finish the step they started
                sampler.held_state = None

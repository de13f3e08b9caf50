"""Loader workers' base seeds drawn apart from the generator that orders the batches.

``DataLoader`` draws its workers' base seed from its ``generator`` (torch's global one when None)
each time it builds an iterator, and a shuffling ``RandomSampler`` orders the epoch from that
same generator. With ``persistent_workers`` an iterator is built once per process: an
uninterrupted run draws the seed in its first epoch only, a resumed run again in the epoch it
resumes at, so from there its shuffle (from a generator the checkpoint restored) is another one.
Where the workers take no randomness from their base seed (a neighbour sampler with an integer
seed seeds each batch from the batch itself, :func:`gnnkit.data.sampler.batch_key`; a graph-batch
loader draws nothing), the seed comes from a generator of the loader's own, seeded from the run's.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader


def separate_worker_seeds(loader: DataLoader, seed: int | None) -> DataLoader:
    """Give ``loader`` (with workers) a generator of its own, seeded with ``seed``, for its workers'
    base seeds; its sampler keeps the generator it was built with. With ``seed=None`` the workers
    draw from their base seed (it then follows torch's seed) and nothing changes. Returns ``loader``."""
    if loader.num_workers > 0 and seed is not None:
        loader.generator = torch.Generator().manual_seed(seed)
    return loader

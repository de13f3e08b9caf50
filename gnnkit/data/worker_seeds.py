"""Loader workers' base seeds drawn apart from the generator that orders the batches.

``DataLoader`` draws its workers' base seed from its ``generator`` (torch's global one when None)
each time it builds an iterator, and a shuffling ``RandomSampler`` orders the epoch from that
same generator. With ``persistent_workers`` an iterator is built once per process: an
uninterrupted run draws the seed in its first epoch only, a resumed run again in the epoch it
resumes at, so from there its shuffle (from a generator the checkpoint restored) is another one.
gnnkit's workers take no randomness from their base seed (the neighbour sampler seeds each batch
from the batch itself, :func:`gnnkit.data.sampler.batch_key`), so the seed comes from a generator
of the loader's own.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader


def separate_worker_seeds(loader: DataLoader) -> DataLoader:
    """Give ``loader`` (with workers) a generator of its own for its workers' base seeds; its
    sampler keeps the generator it was built with. Returns ``loader``."""
    if loader.num_workers > 0:
        loader.generator = torch.Generator()
    return loader

"""LightningDataModule serving a cached graph full-batch or as neighbour-sampled mini-batches."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader
from torch_geometric.data import Data

from gnnkit.sparse import Adjacency
from pipeline import CacheEntry, CanonicalGraph, PreprocessOptions, preprocess, resolve

SPLIT_OF_STAGE = {"train": "train", "val": "valid", "test": "test"}


def _single(batch: list[Data]) -> Data:
    return batch[0]


class GraphDataModule(pl.LightningDataModule):
    """A registry dataset (or OGB-format folder) as Lightning dataloaders.

    The dataset is preprocessed on construction (a cache hit after the first time) and opened
    zero-copy from the Arrow cache, so ``num_features``/``num_classes`` are known before the model is
    built.

    Args:
        dataset: Registry name or path of an OGB-format folder.
        undirected: Override the registry's preprocessing choice (``None`` = keep it).
        self_loops: ``"keep"`` or ``"remove"`` (``None`` = registry's choice).
        reorder: Graph-aware node order stored with the graph, ``"rcm"`` or ``"none"`` (``None`` =
            registry's choice); used by TT embeddings with ``tt_reorder``.
        batch_size: Seed nodes per mini-batch; ``0`` trains full-batch on the whole graph.
        num_neighbors: Fan-out per layer for neighbour sampling (``-1`` = all neighbours).
        eval_num_neighbors: Fan-out for validation/test batches (default: ``num_neighbors``).
        eval_batch_size: Seed nodes per evaluation batch (default: ``batch_size``).
        num_workers: DataLoader worker processes for sampling.
        seed: Sampler seed.
        data_root: Raw data folder (default ``$GNNKIT_HOME/data``).
        cache_root: Cache folder (default ``$GNNKIT_HOME/cache``).
    """

    def __init__(
        self,
        dataset: str = "synthetic-tiny",
        undirected: bool | None = None,
        self_loops: str | None = None,
        reorder: str | None = None,
        batch_size: int = 0,
        num_neighbors: list[int] | None = None,
        eval_num_neighbors: list[int] | None = None,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        data_root: str | None = None,
        cache_root: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        spec = resolve(dataset)
        options = spec.preprocess.replace(undirected=undirected, self_loops=self_loops, reorder=reorder)
        self.entry: CacheEntry = preprocess(
            spec, options,
            data_root=Path(data_root) if data_root else None,
            cache_root=Path(cache_root) if cache_root else None,
        )
        self.graph: CanonicalGraph = self.entry.open()
        self.num_neighbors = list(num_neighbors or [15, 10, 5])
        self._full: Data | None = None

    # -- what the model needs to know (linked into the model by `gnnkit run`) --
    @property
    def num_features(self) -> int:
        return self.graph.num_features

    @property
    def num_classes(self) -> int:
        """Output width: classes for multi-class tasks, tasks for multi-task ones."""
        meta = self.graph.meta
        return meta["num_classes"] if meta["task_type"] == "multiclass classification" else meta["num_tasks"]

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    @property
    def full_batch(self) -> bool:
        return self.hparams.batch_size == 0

    @property
    def task(self) -> dict[str, Any]:
        meta = self.graph.meta
        return {k: meta[k] for k in ("name", "eval_metric", "num_tasks", "task_type")}

    def describe(self) -> dict[str, Any]:
        """Dataset facts for the run report."""
        return {
            "name": self.graph.meta["name"],
            "num_nodes": self.graph.num_nodes,
            "num_edges": self.graph.num_edges,
            "num_features": self.graph.num_features,
            "cache_entry": str(self.entry.path),
            "preprocess": self.entry.manifest["inputs"]["options"],
            "loader": "full-batch" if self.full_batch else f"neighbor-sampled {self.num_neighbors}",
        }

    # -- loaders --
    def _full_graph(self) -> Data:
        if self._full is None:
            g = self.graph
            # adj: the CSR for gnnkit.sparse aggregation; one object for the whole run, so its
            # format conversions are cached across steps and epochs.
            self._full = Data(x=g.x, y=g.y, edge_index=g.edge_index(), num_nodes=g.num_nodes,
                              n_id=torch.arange(g.num_nodes), adj=Adjacency(g.indptr, g.indices))
        return self._full

    def _full_loader(self, stage: str) -> DataLoader:
        data = copy.copy(self._full_graph())  # shallow: shares the graph's tensors
        data.target = self.graph.split[SPLIT_OF_STAGE[stage]]
        return DataLoader([data], batch_size=1, collate_fn=_single)

    def _sampled_loader(self, stage: str) -> Any:
        from gnnkit.data.sampler import neighbor_loader

        train = stage == "train"
        g = self.graph
        hp = self.hparams
        batch_size = hp.batch_size if train or hp.eval_batch_size is None else hp.eval_batch_size
        fanout = self.num_neighbors if train or hp.eval_num_neighbors is None else list(hp.eval_num_neighbors)
        return neighbor_loader(
            Data(x=g.x, y=g.y, num_nodes=g.num_nodes),
            g.indptr, g.indices,
            num_neighbors=fanout,
            input_nodes=g.split[SPLIT_OF_STAGE[stage]],
            batch_size=batch_size,
            shuffle=train,
            seed=hp.seed,
            num_workers=hp.num_workers,
            persistent_workers=hp.num_workers > 0,
        )

    def _loader(self, stage: str) -> Any:
        return self._full_loader(stage) if self.full_batch else self._sampled_loader(stage)

    def train_dataloader(self) -> Any:
        return self._loader("train")

    def val_dataloader(self) -> Any:
        return self._loader("val")

    def test_dataloader(self) -> Any:
        return self._loader("test")

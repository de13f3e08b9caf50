"""LightningDataModule serving a cached graph-property dataset as batches of whole graphs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from gnnkit import setting_checks
from gnnkit.data.batch_precision import PrecisionBatches
from gnnkit.data.eval_shards import eval_limit, eval_shards
from gnnkit.data.stages import SPLIT_OF_STAGE
from gnnkit.data.worker_seeds import separate_worker_seeds
from gnnkit.rank_state import fitting
from gnnkit.tasks import resolve_dataset
from pipeline import log
from pipeline import preprocess as preprocess_dataset
from pipeline.graph_layout import GraphSet, open_entry


class GraphSetDataModule(PrecisionBatches):
    """A graph-property registry dataset (``ogbg-*``, ``synthetic-molhiv``) as loaders of graph batches.

    The dataset is preprocessed on construction (a cache hit after the first time) and opened
    zero-copy from the Arrow cache; a batch of graphs is cut from the concatenated CSR by
    :meth:`pipeline.graph_layout.GraphSet.batch` (a PyG ``Data`` with ``batch``/``ptr`` and the
    block-diagonal CSR ``indptr``/``indices``).

    Args:
        dataset: Registry name or path of an OGB-format graph-property folder.
        batch_size: Graphs per training batch (OGB's example: 32).
        eval_batch_size: Graphs per evaluation batch (default: ``batch_size``).
        num_workers: DataLoader worker processes.
        seed: Shuffling seed of the training loader.
        data_root: Raw data folder (default ``$GNNKIT_HOME/data``).
        cache_root: Cache folder (default ``$GNNKIT_HOME/cache``).
    """

    def __init__(
        self,
        dataset: str = "synthetic-molhiv",
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        data_root: str | None = None,
        cache_root: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        setting_checks.at_least("data.batch_size", batch_size, 1, ">= 1 graphs per batch")
        setting_checks.optional_at_least("data.eval_batch_size", eval_batch_size, 1, ">= 1 graphs per batch")
        setting_checks.at_least("data.num_workers", num_workers, 0, "worker processes >= 0")
        setting_checks.at_least("data.seed", seed, -(2**63), "an integer")
        spec = resolve_dataset(dataset, "graph")
        self.entry = preprocess_dataset(
            spec, data_root=Path(data_root) if data_root else None, cache_root=Path(cache_root) if cache_root else None
        )
        self.graphs: GraphSet = open_entry(self.entry)
        meta = self.graphs.meta
        log.info("%s: %s graphs, %s nodes, %s edges", meta["name"], f"{self.graphs.num_graphs:,}",
                 f"{self.graphs.num_nodes:,}", f"{self.graphs.num_edges:,}")
        self._shuffle = torch.Generator().manual_seed(seed)  # draws each epoch's order of the training graphs

    def state_dict(self) -> dict[str, Any]:
        """The graphs' cache key (:func:`gnnkit.resume.check_same_graph`) and the shuffle generator's
        state, saved in checkpoints: a resumed run then draws the epochs' orders an uninterrupted one
        would (a fresh generator repeated the first epochs' orders)."""
        return {"graph": self.entry.key, "shuffle": self._shuffle.get_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the shuffle generator when resuming a fit (not when testing a checkpoint)."""
        if "shuffle" in state_dict and fitting(self.trainer):
            self._shuffle.set_state(state_dict["shuffle"])

    # -- what the model needs to know (linked into the model by `gnnkit run`) --
    @property
    def num_features(self) -> int:
        return 0 if self.graphs.x is None else int(self.graphs.x.shape[1])

    @property
    def num_edge_features(self) -> int:
        return 0 if self.graphs.edge_attr is None else int(self.graphs.edge_attr.shape[1])

    @property
    def num_classes(self) -> int:
        """Output width: classes for multi-class tasks, tasks for binary ones."""
        meta = self.graphs.meta
        return meta["num_classes"] if meta["task_type"] == "multiclass classification" else meta["num_tasks"]

    @property
    def molecular(self) -> bool:
        """Integer OGB atom/bond features (embedded with OGB's ``AtomEncoder``/``BondEncoder``)."""
        return bool(self.graphs.meta.get("molecular"))

    @property
    def task(self) -> dict[str, Any]:
        meta = self.graphs.meta
        return {k: meta[k] for k in ("name", "eval_metric", "num_tasks", "task_type")}

    def describe(self) -> dict[str, Any]:
        """Dataset facts for the run report."""
        g = self.graphs
        return {
            "name": g.meta["name"],
            "family": "graph",
            "num_graphs": g.num_graphs,
            "num_nodes": g.num_nodes,
            "num_edges": g.num_edges,
            "num_features": self.num_features,
            "num_edge_features": self.num_edge_features,
            "splits": {k: int(v.numel()) for k, v in g.split.items()},
            "cache_entry": str(self.entry.path),
            "loader": f"graph batches of {self.hparams.batch_size}",
        }

    # -- loaders --
    def _loader(self, stage: str) -> DataLoader:
        hp = self.hparams
        train = stage == "train"
        ids = self.graphs.split[SPLIT_OF_STAGE[stage]].clone()
        return separate_worker_seeds(DataLoader(
            ids, batch_size=hp.batch_size if train or hp.eval_batch_size is None else hp.eval_batch_size,
            shuffle=train, generator=self._shuffle if train else None, collate_fn=self._collate,
            sampler=None if train else eval_shards(ids.numel(), eval_limit(self.trainer, stage)),
            num_workers=hp.num_workers,
            persistent_workers=hp.num_workers > 0,
        ), self._shuffle.initial_seed())

    def _collate(self, ids: list[torch.Tensor]) -> Any:
        return self.graphs.batch(torch.stack(ids))

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

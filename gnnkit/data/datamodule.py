"""LightningDataModule serving a cached graph full-batch or as neighbour-sampled mini-batches."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader
from torch_geometric.data import Data

from gnnkit import setting_checks
from gnnkit.data.batch_precision import PrecisionBatches
from gnnkit.data.device_sampling import (SamplingPlacement, check_sampler_device, host_fallback, place,
                                         plan_placement, resolve_sampler_device)
from gnnkit.data.eval_shards import eval_limit, eval_shards
from gnnkit.data.preprocessing import PreprocessOverrides, describe_line, graph_facts, resolve_options
from gnnkit.data.prefetch import DEFAULT_DEPTH, DevicePrefetcher
from gnnkit.data.reuse import ReuseConfig, ReuseLoader, ReuseStats
from gnnkit.data.stages import SPLIT_OF_STAGE
from gnnkit.homophily import homophily_measure
from gnnkit.partitioned.boundary_sampling import BoundarySampler
from gnnkit.partitioned.rank_data import (
    describe_fetches,
    open_rank_partition,
    partition_data,
    partition_facts,
    sampled_partition_facts,
)
from gnnkit.partitioned.remote_features import RemoteFeatures, wire_dtype
from gnnkit.partitioned.remote_sampler import PartitionNeighborSampler
from gnnkit.partitioned.sampled_loader import PartitionNodeLoader
from gnnkit.partitioned.seed_balance import rank_seeds
from gnnkit.partitioned.stale_halo import StaleHalo
from gnnkit.rank_state import fitting, gather_ranks, my_rank_state
from gnnkit.tasks import resolve_dataset
from gnnkit.sparse import Adjacency
from pipeline import EVERY_RANK, CacheEntry, CanonicalGraph, log
from pipeline import preprocess as preprocess_dataset


def _single(batch: list[Data]) -> Data:
    return batch[0]


def _check_partition_options(partitions: int | None, batch_size: int, boundary_sampling: float | None,
                             stale_halo: bool, remote_cache: float, remote_dtype: str | None, num_workers: int,
                             reuse: Any, aggregate_input: bool = False) -> None:
    """One-line errors for partition options that do not fit together."""
    if partitions is not None and partitions < 1:
        raise ValueError(f"data.partitions: expected a count >= 1, got {partitions}")
    if aggregate_input and (partitions is None or batch_size != 0):
        raise ValueError("data.aggregate_input: aggregates the first layer's input of partition-parallel full-batch "
                         "training once; set data.partitions and data.batch_size 0")
    if boundary_sampling is not None and (partitions is None or batch_size != 0):
        raise ValueError("data.boundary_sampling: samples the halo of partition-parallel full-batch training; "
                         "set data.partitions and data.batch_size 0")
    if stale_halo and (partitions is None or batch_size != 0 or boundary_sampling not in (None, 1.0)):
        raise ValueError("data.stale_halo: pipelines the halo of partition-parallel full-batch training (set "
                         "data.partitions, data.batch_size 0) and cannot be combined with data.boundary_sampling")
    if remote_cache < 0:
        raise ValueError(f"data.remote_cache: expected a fraction >= 0 of each rank's owned nodes, got {remote_cache}")
    wire_dtype(remote_dtype)  # a bad name fails here
    if partitions is None or batch_size == 0:
        return
    if num_workers != 0:
        raise ValueError(f"data.num_workers: partitioned sampling exchanges neighbour lists and features with the "
                         f"other ranks, which DataLoader workers cannot do; set data.num_workers 0 (got {num_workers})")
    if reuse is not None:
        raise ValueError("data.reuse: replaying batches is not supported with data.partitions yet (a damaged "
                         "shard's batches would be resampled by one rank alone, out of step with the others)")


def batches_wanted(trainer: Any) -> float:
    """The training batches an epoch starting now will take: ``num_training_batches`` (under
    ``limit_train_batches``), or fewer where ``max_steps`` ends the run within the epoch (its
    optimizer steps left, times ``accumulate_grad_batches``), so batches made ahead stop there."""
    count = trainer.num_training_batches
    max_steps = trainer.max_steps
    if max_steps is not None and max_steps >= 0:
        count = min(count, max(max_steps - trainer.global_step, 0) * trainer.accumulate_grad_batches)
    return count


def _check_loader_settings(batch_size: int, eval_batch_size: int | None, num_neighbors: list[int] | None,
                           eval_num_neighbors: list[int] | None, num_workers: int) -> None:
    """One line naming the ``data.*`` field for a batch size, fan-out or worker count the loaders
    would refuse only once training starts (:mod:`gnnkit.setting_checks`)."""
    setting_checks.at_least("data.batch_size", batch_size, 0, "seed nodes per batch >= 1 (0: full batch)")
    setting_checks.optional_at_least("data.eval_batch_size", eval_batch_size, 1, "seed nodes per batch >= 1")
    setting_checks.fanouts("data.num_neighbors", num_neighbors)
    setting_checks.fanouts("data.eval_num_neighbors", eval_num_neighbors)
    setting_checks.at_least("data.num_workers", num_workers, 0, "worker processes >= 0")


class GraphDataModule(PrecisionBatches):
    """A registry dataset (or OGB-format folder) as Lightning dataloaders.

    The dataset is preprocessed on construction (a cache hit after the first time) and opened
    zero-copy from the Arrow cache, so ``num_features``/``num_classes`` are known before the model is
    built.

    Args:
        dataset: Registry name or path of an OGB-format folder.
        undirected: Symmetrise the graph (add every edge's reverse); ``None`` = the registry's
            choice (a folder given by path stays directed unless this is ``True``).
        self_loops: ``"keep"`` or ``"remove"`` (``None`` = registry's choice).
        reorder: Graph-aware node order stored with the graph, ``"partition"``, ``"rcm"`` or
            ``"none"`` (``None`` = registry's choice); used by TT embeddings with ``tt_reorder``.
        preprocess: Further preprocessing overrides, ``preprocess.normalize_features`` (``"row"``,
            ``"column"``, ``"auto"``, ``"none"``); see :class:`~gnnkit.data.preprocessing.PreprocessOverrides`.
        batch_size: Seed nodes per mini-batch; ``0`` trains full-batch on the whole graph.
        num_neighbors: Fan-out per layer for neighbour sampling (``-1`` = all neighbours).
        eval_num_neighbors: Fan-out for validation/test batches (default: ``num_neighbors``).
        eval_batch_size: Seed nodes per evaluation batch (default: ``batch_size``).
        num_workers: DataLoader worker processes for sampling (on the CPU; sampling on a GPU runs in
            the training process).
        sampler_device: Where neighbour sampling and feature gathering run: ``"auto"`` (the training
            device: the GPU when training there), ``"cpu"`` or ``"cuda"``; on a GPU the CSR, features
            and labels are copied there once, and what does not fit is read from pinned host memory
            through unified addressing (:mod:`gnnkit.data.device_sampling`).
        prefetch: When sampling on a GPU (one process), the batches made ahead in a thread on a
            second CUDA stream while the GPU trains (DGL's prefetch thread and alternate stream;
            :mod:`gnnkit.data.prefetch`); ``0`` makes each batch when the step asks for it.
        seed: Sampler seed.
        reuse: PerFect-style reuse of sampled training batches (record, replay, fine-tune fresh);
            see :class:`~gnnkit.data.reuse.ReuseConfig`. Needs ``batch_size > 0``.
        partitions: Partition-parallel training: the graph is split into this many METIS partitions
            (``gnnkit partition``; cached) and each rank opens only its own (one rank per
            partition). Full-batch (``batch_size 0``, ``aggregation: gnnkit``): every layer exchanges
            halo rows with the other ranks (:mod:`gnnkit.partitioned`). Sampled (``batch_size > 0``):
            each rank trains on its own seeds, sampling across partitions by asking owner ranks for
            neighbour lists and features (:mod:`gnnkit.partitioned.remote_sampler`); every rank takes
            the same steps, the global batch is ``partitions x batch_size`` seeds, and evaluation
            covers every node of the split once. Needs ``num_workers 0``; samples on the CPU
            (``sampler_device`` does not apply).
        boundary_sampling: With ``partitions``: the rate at which each training step exchanges
            boundary nodes (BNS-GCN, :mod:`gnnkit.partitioned.boundary_sampling`; ``None`` or 1:
            every halo row, exactly). Evaluation always exchanges every row.
        stale_halo: With ``partitions``: train every layer on the previous step's halo rows and
            gradients while this step's are in flight (PipeGCN,
            :mod:`gnnkit.partitioned.stale_halo`); evaluation stays exact.
        remote_cache: With ``partitions`` and ``batch_size > 0``: rows of remote nodes each rank keeps,
            as a fraction of its owned nodes (default 0.1): those of the halo nodes with the most
            edges into its rows, fetched once at setup and never again
            (:mod:`gnnkit.partitioned.remote_features`); 0 fetches every remote row per batch.
        remote_dtype: With ``partitions`` and ``batch_size > 0``: ``float16`` or ``bfloat16`` sends and
            caches remote feature rows in 16 bits (half the traffic; twice the cached rows per byte),
            ``int8`` in 8-bit integers with a per-row scale (about a quarter; AdaQP's quantisation);
            ``null`` (default) keeps them exact.
        balance_seeds: With ``partitions`` and ``batch_size > 0``: even out the ranks' seed counts
            (default), ranks above their share handing seeds to ranks below it as DistDGL's
            ``force_even`` split does (:mod:`gnnkit.partitioned.seed_balance`), so that no rank
            straggles at every step; ``false`` keeps every rank's own seeds.
        aggregate_input: With ``partitions`` and ``batch_size 0``: aggregate the first layer's input
            once before training, streaming the halo features in chunks, and train without the
            first layer's halo exchange or halo features (exact; GCN and SAGE without input dropout,
            no learnable embedding; :mod:`gnnkit.partitioned.input_aggregation`). The model names
            what its first layer aggregates at setup (:attr:`input_aggregation`).
        data_root: Raw data folder (default ``$GNNKIT_HOME/data``).
        cache_root: Cache folder (default ``$GNNKIT_HOME/cache``).
    """

    def __init__(
        self,
        dataset: str = "synthetic-tiny",
        undirected: bool | None = None,
        self_loops: str | None = None,
        reorder: str | None = None,
        preprocess: PreprocessOverrides | None = None,
        batch_size: int = 0,
        num_neighbors: list[int] | None = None,
        eval_num_neighbors: list[int] | None = None,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        sampler_device: str = "auto",
        prefetch: int = DEFAULT_DEPTH,
        seed: int = 0,
        reuse: ReuseConfig | None = None,
        partitions: int | None = None,
        boundary_sampling: float | None = None,
        stale_halo: bool = False,
        remote_cache: float = 0.1,
        remote_dtype: str | None = None,
        balance_seeds: bool = True,
        aggregate_input: bool = False,
        data_root: str | None = None,
        cache_root: str | None = None,
    ) -> None:
        super().__init__()
        _check_loader_settings(batch_size, eval_batch_size, num_neighbors, eval_num_neighbors, num_workers)
        setting_checks.at_least("data.seed", seed, -(2**63), "an integer")
        setting_checks.optional_at_least("data.partitions", partitions, 1, "a count >= 1")
        if isinstance(reuse, dict):  # as saved in a checkpoint's hyper-parameters
            reuse = ReuseConfig(**reuse)
        if isinstance(preprocess, dict):
            preprocess = PreprocessOverrides(**preprocess)
        # Checkpoints hold plain types only (they are loaded with weights_only=True).
        self.save_hyperparameters(ignore=["reuse", "preprocess"])
        self.hparams["reuse"] = asdict(reuse) if reuse is not None else None
        self.hparams["preprocess"] = asdict(preprocess) if preprocess is not None else None
        spec = resolve_dataset(dataset, "node")
        options = resolve_options(spec.preprocess, preprocess, undirected=undirected, self_loops=self_loops,
                                  reorder=reorder)
        self.entry: CacheEntry = preprocess_dataset(
            spec, options,
            data_root=Path(data_root) if data_root else None,
            cache_root=Path(cache_root) if cache_root else None,
        )
        self.graph: CanonicalGraph = self.entry.open()
        log.info(describe_line(self.graph.meta["name"], graph_facts(self.entry)))
        self.num_neighbors = list(num_neighbors or [15, 10, 5])
        check_sampler_device(sampler_device)  # a bad choice, or 'cuda' without a GPU, fails now (CUDA left alone)
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"data.prefetch: expected batches made ahead >= 0 (0 turns it off), got {prefetch!r}")
        self._placement: SamplingPlacement | None = None  # where sampling runs, decided with the first loader
        self._device_graph: dict[str, Any] | None = None  # the graph's copies on the sampling device
        self._full: Data | None = None
        if reuse is not None and reuse.epochs > 0 and batch_size == 0:
            raise ValueError("data.reuse: replaying batches needs neighbour sampling (data.batch_size > 0)")
        self.reuse = reuse if reuse is not None and reuse.epochs > 0 else None
        _check_partition_options(partitions, batch_size, boundary_sampling, stale_halo, remote_cache, remote_dtype,
                                 num_workers, self.reuse, aggregate_input)
        self.partitions = partitions
        self.input_aggregation: str | None = None  # what the model's first layer aggregates (aggregate_input)
        self._stale: StaleHalo | None = None
        self.boundary_sampler = (BoundarySampler(boundary_sampling, seed) if boundary_sampling is not None
                                 and boundary_sampling != 1.0 else None)
        self._partition: Any = None  # this rank's Partition, opened in setup
        self._remote: RemoteFeatures | None = None  # its remote rows (sampled partition-parallel runs)
        self._restored_fetches: dict[str, int] | None = None  # a checkpoint's fetch counts, added to _remote's
        self._fetches_before_sanity_check: dict[str, int] | None = None  # put back when the check ends
        self.reuse_stats = ReuseStats()
        self._reuse_folder: Path | None = None
        self._samplers: dict[str, Any] = {}  # stage -> the neighbour sampler of its current loader
        self._prefetchers: dict[str, DevicePrefetcher] = {}  # stage -> its loader's prefetching wrapper
        self._sampler_states: dict[str, Any] = {}  # restored from a checkpoint, applied when built
        self._before_sanity_check: dict[str, Any] = {}  # stage -> sampler state before the sanity check

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
            **graph_facts(self.entry),
            "adjusted_homophily": self.adjusted_homophily,
            "homophily_edges": self._homophily[1],
            "loader": self._loader_name(),
        }

    @functools.cached_property
    def _homophily(self) -> tuple[float | None, int | None]:
        return homophily_measure(self.graph)

    @property
    def adjusted_homophily(self) -> float | None:
        """Of the training labels (:func:`gnnkit.homophily.adjusted_homophily`), rounded to 4 places."""
        value = self._homophily[0]
        return None if value is None else round(value, 4)

    def _loader_name(self) -> str:
        if self.partitions is not None and self.full_batch:
            return f"partitioned full-batch ({self.partitions} parts)"
        if self.partitions is not None:
            return f"partitioned neighbor-sampled {self.num_neighbors} ({self.partitions} parts)"
        return "full-batch" if self.full_batch else f"neighbor-sampled {self.num_neighbors}"

    def report_info(self) -> dict[str, Any]:
        """The reuse schedule and what it did (replayed vs fresh batches), and this rank's partition,
        for report.json (a collective in sampled partition-parallel runs: every rank calls it, as
        :func:`~gnnkit.report.write_report` does)."""
        info: dict[str, Any] = {}
        if self.reuse is not None:
            info["reuse"] = {"schedule": vars(self.reuse).copy(), "cache_dir": str(self._reuse_folder),
                             **self.reuse_stats.state_dict()}
        if self._placement is not None:
            info["sampler"] = {**self._placement.report(),
                               "prefetch": self._prefetchers["train"].depth if "train" in self._prefetchers else 0}
        if self._remote is not None:  # summing the ranks' counts is a collective (every rank reports)
            stats = self._remote.stats
            info["partition"] = sampled_partition_facts(self._partition, stats, stats.summed(),
                                                        self._samplers.get("train"))
        elif self._partition is not None:
            row_bytes = self.graph.num_features * 4
            info["partition"] = partition_facts(self._partition, self._full_graph().halo, row_bytes,
                                                self.hparams.boundary_sampling, self.hparams.stale_halo,
                                                self.hparams.aggregate_input)
        return info

    def teardown(self, stage: str) -> None:
        """Wait for stale halo exchanges still in flight (PipeGCN) before the ranks stop; log what the
        remote feature fetches did (sampled partition-parallel runs)."""
        if self._stale is not None:
            self._stale.drain()
        self._stop_prefetching()
        if self._remote is not None:
            log.info("partition %d of %d, after %s: %s", self._partition.part, self._partition.parts,
                     getattr(stage, "value", stage), describe_fetches(self._remote.stats), extra=EVERY_RANK)

    def on_exception(self, exception: BaseException) -> None:
        """A failed or interrupted fit (Lightning calls this, not :meth:`teardown`): stop prefetching."""
        self._stop_prefetching()

    def _stop_prefetching(self) -> None:
        """End the threads making batches ahead, which would otherwise hold their batches and the loaders."""
        for prefetcher in self._prefetchers.values():
            prefetcher.stop()

    def _training_device(self) -> torch.device:
        """The device the model trains on (the strategy's root device; the CPU without a trainer)."""
        return self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")

    def setup(self, stage: str) -> None:
        """Open this rank's partition (partition-parallel runs; once, after the ranks have started),
        and for sampled training fill its cache of remote rows (a collective)."""
        if self.partitions is not None and self._partition is None:
            if self._training_device().type != "cpu":
                raise ValueError("data.partitions: partition-parallel ranks exchange rows as CPU tensors over "
                                 "gloo, so they train on CPUs; set --trainer.accelerator cpu (got "
                                 f"{self._training_device().type})")
            self._partition = open_rank_partition(self.entry, self.partitions, seed=self.hparams.seed)
            if not self.full_batch:
                self._remote = RemoteFeatures(self._partition, self.hparams.remote_cache,
                                              dtype=self.hparams.remote_dtype)
                self._add_restored_fetches()
                log.info("partition %d of %d: %d nodes, %d halo nodes, cache of %d remote rows (%.1f MB)",
                         self._partition.part, self.partitions, self._partition.owned.numel(),
                         self._partition.halo.numel(), self._remote.stats.cache_rows, self._remote.stats.cache_bytes / 2**20,
                         extra=EVERY_RANK)

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue exactly, saved in checkpoints: the graph's cache key
        (:func:`gnnkit.resume.check_same_graph`), the reuse counters and the remote fetch counts of
        sampled partition-parallel runs (so the report covers the whole run) and, for sampled training,
        every rank's sampler
        generators of the training and validation loaders (so the next batches are those an
        uninterrupted run would draw). Collective in distributed runs (every rank calls it)."""
        state: dict[str, Any] = {"graph": self.entry.key}
        if self.reuse is not None:
            state["reuse_stats"] = self.reuse_stats.checkpoint_state()
        if not self.full_batch:
            state["samplers"] = gather_ranks({stage: self._sampler_state(stage) for stage in self._samplers
                                              if stage in ("train", "val")})
        if self._remote is not None:  # sampled partition-parallel: what the remote fetches did so far
            state["fetches"] = gather_ranks(self._remote.stats.batch_counts())
        return state

    def _add_restored_fetches(self) -> None:
        """Add a checkpoint's remote fetch counts to this process's, once both are there."""
        if self._remote is not None and self._restored_fetches is not None:
            self._remote.stats.add_batch_counts(self._restored_fetches)
            self._restored_fetches = None

    def _sampler_state(self, stage: str) -> dict[str, Any]:
        """The stage's sampler state as of the last batch the trainer got (not of those made ahead)."""
        if stage in self._prefetchers:
            return self._prefetchers[stage].sampler_state()
        return self._samplers[stage].state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the counters and sampler generators when resuming a fit (not when testing a
        checkpoint); the generators reach their loaders when these are built."""
        if not fitting(self.trainer):
            return
        if "reuse_stats" in state_dict:
            self.reuse_stats.restore(state_dict["reuse_stats"])
        if "samplers" in state_dict:
            mine = my_rank_state(state_dict["samplers"], "the sampler state")
            self._sampler_states = dict(mine or {})
        if "fetches" in state_dict:
            self._restored_fetches = my_rank_state(state_dict["fetches"], "the remote fetch counts")
            self._add_restored_fetches()

    # -- loaders --
    def _full_graph(self) -> Data:
        if self._full is None and self._partition is not None:
            if self.hparams.aggregate_input and self.input_aggregation is None:
                raise ValueError("data.aggregate_input: no model named what its first layer aggregates (a "
                                 "NodeClassifier does at setup; else set the datamodule's input_aggregation)")
            self._full = partition_data(self._partition, self.input_aggregation if self.hparams.aggregate_input else None)
        if self._full is None:
            g = self.graph
            # adj: the CSR for gnnkit.sparse aggregation; one object for the whole run, so its
            # format conversions are cached across steps and epochs.
            self._full = Data(x=g.x, y=g.y, edge_index=g.edge_index(), num_nodes=g.num_nodes,
                              n_id=torch.arange(g.num_nodes), adj=Adjacency(g.indptr, g.indices))
        return self._full

    def _full_loader(self, stage: str) -> DataLoader:
        full = self._full_graph()
        device = self._training_device()
        if device.type == "cuda":  # once a run: the stages' batches share one device copy of the graph
            self._full = full = full.to(device)
        data = copy.copy(full)  # shallow: shares the graph's tensors (the batch transfer then moves nothing)
        split = SPLIT_OF_STAGE[stage]
        if self._partition is None:
            data.target = self.graph.split[split]
        else:  # this rank's share of the split; its loss counts in proportion (see loss_scale)
            data.target = self._partition.split[split]
            data.loss_scale = data.target.numel() * self.partitions / max(self.graph.split[split].numel(), 1)
        if stage == "train" and self.boundary_sampler is not None:
            return DataLoader([data], batch_size=1, collate_fn=self._boundary_sampled)
        if stage == "train" and self.hparams.stale_halo:
            self._stale = self._stale or StaleHalo(data.halo)
            data.halo = self._stale
        return DataLoader([data], batch_size=1, collate_fn=_single)

    def _boundary_sampled(self, batch: list[Data]) -> Data:
        """The partition with this training step's sampled halo exchange (BNS-GCN); the step is the
        trainer's, so a resumed run samples what an uninterrupted one would."""
        data = copy.copy(batch[0])
        step = self.trainer.global_step if self.trainer is not None else 0
        data.halo = self.boundary_sampler.plan(data.halo, step)
        return data

    def _sampling_placement(self) -> SamplingPlacement:
        """Where the sampled loaders sample (decided once, when the first is built, and logged)."""
        if self._placement is None:
            wanted = resolve_sampler_device(self.hparams.sampler_device, self._training_device())
            self._placement = plan_placement(self._host_graph(), wanted, asked=self.hparams.sampler_device)
            log.info(self._placement.reason)
        return self._placement

    def _host_graph(self) -> dict[str, Any]:
        g = self.graph
        return {"indptr": g.indptr, "indices": g.indices, "x": g.x, "y": g.y}

    def _sampling_graph(self) -> dict[str, Any]:
        """The CSR, features and labels where the sampler reads them: the cached arrays on the host,
        or (made once per run) their copies on the sampling device and pinned views of the rest."""
        host = self._host_graph()
        placement = self._sampling_placement()
        if placement.graph_memory == "host":
            return host
        if self._device_graph is None:
            device = torch.device(placement.device)
            try:
                self._device_graph = {k: place(t, placement.arrays.get(k, "device"), device) for k, t in host.items()}
            except RuntimeError as err:  # pinning that much host memory failed: sample on the CPU
                self._placement = host_fallback(placement, err)
                log.warning(self._placement.reason)
                return host
        return self._device_graph

    def _sampled_loader(self, stage: str) -> Any:
        from gnnkit.data.sampler import neighbor_loader

        train = stage == "train"
        g = self.graph
        hp = self.hparams
        batch_size = hp.batch_size if train or hp.eval_batch_size is None else hp.eval_batch_size
        fanout = self.num_neighbors if train or hp.eval_num_neighbors is None else list(hp.eval_num_neighbors)
        if self._remote is not None:  # partitioned: sampled on the CPU, across the ranks
            return self._track(stage, self._partition_loader(stage, fanout, batch_size))
        graph = self._sampling_graph()
        workers = hp.num_workers if self._placement.graph_memory == "host" else 0  # device sampling: in-process
        loader = neighbor_loader(
            Data(x=graph["x"], y=graph["y"], num_nodes=g.num_nodes),
            graph["indptr"], graph["indices"],
            num_neighbors=fanout,
            input_nodes=g.split[SPLIT_OF_STAGE[stage]],
            batch_size=batch_size,
            shuffle=train,
            seed=hp.seed,
            num_workers=workers,
            persistent_workers=workers > 0,
            sampler=None if train else eval_shards(g.split[SPLIT_OF_STAGE[stage]].numel(),
                                                   eval_limit(self.trainer, stage)),
        )
        return self._track(stage, loader)

    def _track(self, stage: str, loader: Any) -> Any:
        """Give the loader's sampler the state a checkpoint restored, and keep it for the next."""
        if stage in self._sampler_states:
            loader.node_sampler.load_state_dict(self._sampler_states.pop(stage))
        self._samplers[stage] = loader.node_sampler
        if self.trainer is not None and self.trainer.sanity_checking:
            self._before_sanity_check[stage] = loader.node_sampler.state_dict()
            if self._remote is not None and self._fetches_before_sanity_check is None:
                self._fetches_before_sanity_check = self._remote.stats.batch_counts()
        return loader

    def _partition_loader(self, stage: str, fanout: list[int], batch_size: int) -> PartitionNodeLoader:
        """This rank's batches of its share of the stage's split, sampled across partitions (building
        it is a collective: every rank agrees on the steps)."""
        assert self._remote is not None
        part, directory = self._partition, self._remote.directory
        seeds, labels = rank_seeds(part, directory, part.split[SPLIT_OF_STAGE[stage]], self.hparams.balance_seeds,
                                   stage)
        sampler = PartitionNeighborSampler(part, fanout, seed=self.hparams.seed, directory=directory)
        return PartitionNodeLoader(sampler, self._remote, labels, seeds, gather_ranks(int(seeds.numel())),
                                   batch_size, shuffle=stage == "train")

    def rewind_sanity_check(self) -> None:
        """Put the samplers built for Lightning's sanity check back to where they were before it, so
        the check draws nothing from them: the validation batches of a run, and of a resumed run
        (which checks again), are then those of the run alone (``trainer.sanity_checking``; called
        by :class:`~gnnkit.last_checkpoint.LastCheckpoint` when the check ends)."""
        for stage, state in self._before_sanity_check.items():
            if stage in self._prefetchers:
                self._prefetchers[stage].stop()  # its thread draws no more
            self._samplers[stage].load_state_dict(state)
        self._before_sanity_check = {}
        if self._remote is not None and self._fetches_before_sanity_check is not None:  # nor count its fetches
            stats, before = self._remote.stats, self._fetches_before_sanity_check
            stats.add_batch_counts({name: before[name] - now for name, now in stats.batch_counts().items()})
            self._fetches_before_sanity_check = None

    def reuse_inputs(self) -> dict[str, Any]:
        """What cached training batches depend on: the graph and every sampler setting."""
        hp = self.hparams
        trainer = self.trainer
        return {
            "dataset": self.graph.meta["name"], "graph": self.entry.key, "split": "train",
            "num_neighbors": self.num_neighbors, "replace": False, "batch_size": hp.batch_size,
            "seed": hp.seed, "feature_dtype": self.reuse.feature_dtype,
            "rank": trainer.global_rank if trainer else 0, "world_size": trainer.world_size if trainer else 1,
            # only when it differs from whole batches, so the keys of existing caches stay as they were
            **({"stored": "structure"} if self._gathered_on_device() else {}),
        }

    def _gathered_on_device(self) -> dict[str, Tensor] | None:
        """The features and labels the sampled loader gathers from, when it samples on a GPU (then
        reuse records only the batches' structure and gathers these again at replay); else None."""
        if self._remote is not None or self._sampling_placement().graph_memory == "host":
            return None
        graph = self._sampling_graph()
        return {k: graph[k] for k in ("x", "y") if graph[k] is not None} or None

    def _reuse_loader(self) -> ReuseLoader:
        fresh = self._sampled_loader("train")  # decides where sampling runs
        loader = ReuseLoader.for_trainer(fresh, self.reuse, self.reuse_inputs(), self.trainer, self.reuse_stats,
                                         self.hparams.seed, node_attrs=self._gathered_on_device())
        self._reuse_folder = loader.folder
        return loader

    def _loader(self, stage: str) -> Any:
        if self.full_batch:
            return self._full_loader(stage)
        loader = self._reuse_loader() if stage == "train" and self.reuse is not None else self._sampled_loader(stage)
        return self._prefetched(stage, loader)

    def _prefetched(self, stage: str, loader: Any) -> Any:
        """``loader``, made ``prefetch`` batches ahead on a second stream when it samples on a GPU in
        one process (several ranks keep Lightning's per-rank loaders as they are)."""
        old = self._prefetchers.pop(stage, None)
        if old is not None:
            old.stop()
        placement = self._placement
        one_process = self.trainer is None or self.trainer.world_size == 1
        if (not self.hparams.prefetch or self._remote is not None or placement is None or not one_process
                or torch.device(placement.device).type != "cuda"):
            return loader
        self._prefetchers[stage] = DevicePrefetcher(loader, torch.device(placement.device), self.hparams.prefetch,
                                                    state_source=self._samplers.get(stage), limit=self._limit(stage))
        return self._prefetchers[stage]

    def _limit(self, stage: str) -> Callable[[], float] | None:
        """How many training batches the trainer asks for in an epoch, read when a pass starts
        (:func:`batches_wanted`); other stages' given-up passes put their sampler back instead."""
        trainer = self.trainer
        if stage != "train" or trainer is None:
            return None
        return lambda: batches_wanted(trainer)

    def train_dataloader(self) -> Any:
        return self._loader("train")

    def val_dataloader(self) -> Any:
        return self._loader("val")

    def test_dataloader(self) -> Any:
        return self._loader("test")

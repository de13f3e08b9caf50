"""LightningDataModule serving a cached link dataset: batches of positive edges with random negatives.

Training follows OGB's link examples (https://github.com/snap-stanford/ogb/tree/master/examples/linkproppred/collab):
every epoch the training edges are shuffled and cut into batches of ``batch_size`` positive edges,
each paired with as many uniformly random node pairs as negatives. Two loaders:

* **full-batch** (``num_neighbors: null``): each batch carries the whole training graph (one
  :class:`~gnnkit.sparse.Adjacency` for the run), and the encoder runs over every node, as OGB's
  example does; evaluation scores a whole split from one full-graph encoding.
* **sampled** (``num_neighbors: [15, 10, 5]``): each batch carries the blocks gnnkit's
  :class:`~gnnkit.data.sampler.CSRNeighborSampler` samples around the batch's edge endpoints
  (seeds first); edges are given in local ids of the seeds. Evaluation batches are sampled the same
  way (``eval_num_neighbors``), each with an even share of the split's positives and negatives.

A batch is a :class:`~torch_geometric.data.Data` with ``x``, ``edge_index``, ``n_id`` (``adj`` in
full-batch mode; ``num_sampled_nodes``/``num_sampled_edges`` when sampled), ``pos [P, 2]`` and
``neg [M, 2]`` (node ids of the batch) and ``neg_per_pos`` (K for MRR datasets, whose ``neg`` holds
K negatives per positive in order; 0 for pairs). Sampled batches also carry ``input_id``, their
edges in global ids (:func:`encode_edges`), so the reuse cache (:mod:`gnnkit.data.reuse`, ``data.reuse``)
can record and replay sampled training batches (positives, negatives and their blocks) and sample a
batch of a damaged shard afresh for the same edges.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from gnnkit import setting_checks
from gnnkit.data.batch_precision import PrecisionBatches
from gnnkit.data.preprocessing import PreprocessOverrides, describe_line, graph_facts, resolve_options
from gnnkit.data.reuse import ReuseConfig, ReuseLoader, ReuseStats
from gnnkit.data.stages import SPLIT_OF_STAGE
from gnnkit.rank_state import fitting, gather_ranks, my_rank_state
from gnnkit.sparse import Adjacency
from gnnkit.tasks import resolve_dataset
from pipeline import log
from pipeline import preprocess as preprocess_dataset
from pipeline.link_layout import LinkGraph, open_entry


#: Optimizer steps that train a model even at one step an epoch (GAE trains 200 full-batch epochs).
ENOUGH_STEPS = 100


def random_pairs(num_nodes: int, count: int, generator: torch.Generator) -> Tensor:
    """``[count, 2]`` uniformly random node pairs (OGB's collab example's negatives)."""
    return torch.randint(0, num_nodes, (count, 2), generator=generator)


def eval_pairs(split: dict[str, Tensor]) -> tuple[Tensor, Tensor, int]:
    """A split's positives, negatives as pairs, and negatives per positive (0: shared negatives)."""
    pos = split["edge"].to(torch.int64)
    if "target_node_neg" in split:
        targets = split["target_node_neg"].to(torch.int64)
        k = targets.shape[1]
        neg = torch.stack([pos[:, 0].repeat_interleave(k), targets.reshape(-1)], dim=1)
        return pos, neg, k
    return pos, split["edge_neg"].to(torch.int64), 0


def encode_edges(pos: Tensor, neg: Tensor, neg_per_pos: int) -> Tensor:
    """A batch's edges as one 1-D int64 tensor ``[P, K, pos..., neg...]`` (the reuse cache's seeds)."""
    head = torch.tensor([pos.shape[0], neg_per_pos], dtype=torch.int64)
    return torch.cat([head, pos.reshape(-1), neg.reshape(-1)])


def decode_edges(seeds: Tensor) -> tuple[Tensor, Tensor, int]:
    """``(pos [P, 2], neg [M, 2], neg_per_pos)`` from :func:`encode_edges`."""
    count, k = int(seeds[0]), int(seeds[1])
    return seeds[2: 2 + 2 * count].view(-1, 2), seeds[2 + 2 * count:].view(-1, 2), k


class _FreshLinkLoader:
    """The training loader as :class:`~gnnkit.data.reuse.ReuseLoader` uses a fresh loader: iterable,
    sized, and able to sample a batch again for its recorded edges (``collate_fn(seeds)``)."""

    filter_per_worker = True  # collate_fn returns the finished batch

    def __init__(self, datamodule: LinkDataModule, loader: LinkBatches) -> None:
        self.datamodule, self.loader = datamodule, loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Data]:
        return iter(self.loader)

    def collate_fn(self, seeds: Tensor) -> Data:
        pos, neg, k = decode_edges(seeds)
        return self.datamodule.make_batch(pos, neg, k, "train")


def rank_share(order: Tensor, rank: int, world: int) -> Tensor:
    """Rank ``rank``'s positions of an epoch's order, as Lightning's ``DistributedSampler`` deals
    them: every ``world``-th from ``rank``, the order wrapped around so every rank gets as many
    (equal step counts keep the ranks' collectives paired)."""
    if world == 1:
        return order
    per_rank = -(-order.numel() // world)
    padded = order.repeat(-(-per_rank * world // max(order.numel(), 1)))[: per_rank * world]
    return padded[rank::world]


class LinkBatches:
    """The batches of one stage, built on iteration (see the module docstring); the stage's loader
    (an iterable of ready batches: no DataLoader, whose collation and workers it does not need).

    Args:
        datamodule: Owner: the graph, the full-graph batch and the sampler settings.
        stage: ``train``, ``val`` or ``test``.
        batch_size: Positive edges per training batch; pairs per sampled evaluation batch.
        generator: Draws the shuffling and the negatives (training).
    """

    def __init__(self, datamodule: LinkDataModule, stage: str, batch_size: int, generator: torch.Generator) -> None:
        self.dm = datamodule
        self.stage = stage
        self.batch_size = batch_size
        self.generator = generator

    def _edge_batches(self) -> Iterator[tuple[Tensor, Tensor, int]]:
        """(positives, negatives, negatives per positive) in global ids."""
        split = self.dm.graph.splits[SPLIT_OF_STAGE[self.stage]]
        if self.stage == "train":
            edges = split["edge"].to(torch.int64)
            rank, world = self.dm.rank_and_world()
            order = rank_share(torch.randperm(edges.shape[0], generator=self.generator), rank, world)
            for start in range(0, order.numel(), self.batch_size):
                pos = edges[order[start: start + self.batch_size]]
                negatives = random_pairs(self.dm.num_nodes, pos.shape[0] * world, self.generator)  # every rank's
                yield pos, negatives[rank * pos.shape[0]: (rank + 1) * pos.shape[0]], 0
            return
        pos, neg, k = eval_pairs(split)
        if self.dm.full_batch:
            yield pos, neg, k
            return
        if k:  # each batch: positives with their own K negatives
            step = max(1, self.batch_size // (k + 1))
            for start in range(0, pos.shape[0], step):
                yield pos[start: start + step], neg[start * k: (start + step) * k], k
            return
        # shared negatives: every batch holds an even share of both (so any prefix can be scored)
        count = -(-(pos.shape[0] + neg.shape[0]) // self.batch_size)
        yield from zip(torch.tensor_split(pos, count), torch.tensor_split(neg, count), [0] * count)

    def __iter__(self) -> Iterator[Data]:
        for pos, neg, k in self._edge_batches():
            yield self.dm.make_batch(pos, neg, k, self.stage)

    def __len__(self) -> int:
        split = self.dm.graph.splits[SPLIT_OF_STAGE[self.stage]]
        edges = split["edge"].shape[0]
        if self.stage == "train":
            return -(-(-(-edges // self.dm.rank_and_world()[1])) // self.batch_size)
        if self.dm.full_batch:
            return 1
        if "target_node_neg" in split:
            step = max(1, self.batch_size // (split["target_node_neg"].shape[1] + 1))
            return -(-edges // step)
        return -(-(edges + split["edge_neg"].shape[0]) // self.batch_size)


class LinkDataModule(PrecisionBatches):
    """A registry link dataset (``ogbl-*``, ``synthetic-collab``) as Lightning dataloaders.

    The dataset is preprocessed on construction (a cache hit after the first time) and opened
    zero-copy from the Arrow cache.

    Args:
        dataset: Registry name or path of an OGB-format link folder.
        undirected: Symmetrise the training graph (``None`` = the registry's choice).
        preprocess: Further preprocessing overrides (``normalize_features``).
        batch_size: Positive training edges per batch (OGB's collab example: 64 * 1024).
        eval_batch_size: Pairs per sampled evaluation batch (default: ``batch_size``).
        num_neighbors: Fan-out per hop for sampled training; ``None`` = full-batch encoder.
        eval_num_neighbors: Fan-out for sampled evaluation (default: ``num_neighbors``).
        seed: Seed of the shuffling, the negatives and the sampler.
        reuse: Record sampled training batches and replay them (:class:`~gnnkit.data.reuse.ReuseConfig`);
            needs ``num_neighbors``.
        data_root: Raw data folder (default ``$GNNKIT_HOME/data``).
        cache_root: Cache folder (default ``$GNNKIT_HOME/cache``).
    """

    def __init__(
        self,
        dataset: str = "synthetic-collab-tiny",
        undirected: bool | None = None,
        preprocess: PreprocessOverrides | None = None,
        batch_size: int = 65536,
        eval_batch_size: int | None = None,
        num_neighbors: list[int] | None = None,
        eval_num_neighbors: list[int] | None = None,
        seed: int = 0,
        reuse: ReuseConfig | None = None,
        data_root: str | None = None,
        cache_root: str | None = None,
    ) -> None:
        super().__init__()
        if isinstance(preprocess, dict):
            preprocess = PreprocessOverrides(**preprocess)
        if isinstance(reuse, dict):  # as saved in a checkpoint's hyper-parameters
            reuse = ReuseConfig(**reuse)
        # Checkpoints hold plain types only (they are loaded with weights_only=True).
        self.save_hyperparameters(ignore=["preprocess", "reuse"])
        self.hparams["preprocess"] = vars(preprocess).copy() if preprocess is not None else None
        self.hparams["reuse"] = vars(reuse).copy() if reuse is not None else None
        setting_checks.at_least("data.batch_size", batch_size, 1, "a positive number of edges")
        setting_checks.optional_at_least("data.eval_batch_size", eval_batch_size, 1, "a positive number of edges")
        setting_checks.fanouts("data.num_neighbors", num_neighbors)
        setting_checks.fanouts("data.eval_num_neighbors", eval_num_neighbors)
        setting_checks.at_least("data.seed", seed, -(2**63), "an integer")
        if reuse is not None and reuse.epochs > 0 and num_neighbors is None:
            raise ValueError("data.reuse: replaying batches needs neighbour sampling (data.num_neighbors)")
        self.reuse = reuse if reuse is not None and reuse.epochs > 0 else None
        self.reuse_stats = ReuseStats()
        self._reuse_folder: Path | None = None
        spec = resolve_dataset(dataset, "link")
        options = resolve_options(spec.preprocess, preprocess, undirected=undirected)
        self.entry = preprocess_dataset(spec, options, data_root=Path(data_root) if data_root else None,
                                        cache_root=Path(cache_root) if cache_root else None)
        self.graph: LinkGraph = open_entry(self.entry)
        meta = self.graph.meta
        log.info("%s (message passing); %s nodes, %d features; %s", describe_line(meta["name"], graph_facts(self.entry)),
                 f"{self.graph.num_nodes:,}", self.graph.num_features,
                 ", ".join(f"{s} {n:,} edges" for s, n in meta["num_split_edges"].items()))
        self._warned_one_step = False
        self.num_neighbors = list(num_neighbors) if num_neighbors is not None else None
        self._full: Data | None = None
        self._samplers: dict[str, Any] = {}
        self._sampler_states: dict[str, Any] = {}  # restored from a checkpoint, applied when a sampler is built
        self._before_sanity_check: dict[str, Any] | None = None  # the validation sampler's, for the rewind
        self._generators = {stage: torch.Generator().manual_seed(seed + i) for i, stage in enumerate(SPLIT_OF_STAGE)}

    # -- what the model needs to know (linked into the model by `gnnkit run`) --
    @property
    def num_features(self) -> int:
        return self.graph.num_features

    @property
    def num_nodes(self) -> int:
        return self.graph.num_nodes

    def rank_and_world(self) -> tuple[int, int]:
        """This rank and the number of ranks training (one without a trainer)."""
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    @property
    def full_batch(self) -> bool:
        return self.num_neighbors is None

    @property
    def task(self) -> dict[str, Any]:
        meta = self.graph.meta
        return {"name": meta["name"], "eval_metric": meta["eval_metric"], "negatives": meta["negatives"]}

    def describe(self) -> dict[str, Any]:
        """Dataset facts for the run report."""
        meta = self.graph.meta
        return {
            "name": meta["name"],
            "family": "link",
            "num_nodes": self.graph.num_nodes,
            "num_edges": self.graph.num_edges,
            "num_features": self.graph.num_features,
            "split_edges": meta["num_split_edges"],
            "cache_entry": str(self.entry.path),
            "preprocess": self.entry.manifest["inputs"]["options"],
            **graph_facts(self.entry),
            "loader": "full-batch" if self.full_batch else f"neighbor-sampled {self.num_neighbors}",
            "batch_size": self.hparams.batch_size,
        }

    def report_info(self) -> dict[str, Any]:
        """The reuse schedule and what it did (replayed vs fresh batches), for report.json."""
        if self.reuse is None:
            return {}
        return {"reuse": {"schedule": vars(self.reuse).copy(), "cache_dir": str(self._reuse_folder),
                          **self.reuse_stats.state_dict()}}

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue exactly, saved in checkpoints: the graph's cache key
        (:func:`gnnkit.resume.check_same_graph`), the generators of the shuffles and negatives (every
        rank draws the same), every rank's neighbour samplers of training and validation (their
        next draws) and the reuse counters (so the report covers the whole schedule). Collective in
        distributed runs (every rank calls it)."""
        state: dict[str, Any] = {"graph": self.entry.key,
                                 "generators": {stage: g.get_state() for stage, g in self._generators.items()}}
        if not self.full_batch:
            state["samplers"] = gather_ranks({stage: sampler.state_dict() for stage, sampler in self._samplers.items()
                                              if stage in ("train", "val")})
        return {**state, "reuse_stats": self.reuse_stats.checkpoint_state()} if self.reuse is not None else state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore them when resuming a fit (not when testing a checkpoint): fresh generators drew the
        first epochs' shuffles and negatives again, and fresh samplers other neighbours (the samplers'
        states reach them when they are built)."""
        if not fitting(self.trainer):
            return
        for stage, state in state_dict.get("generators", {}).items():
            self._generators[stage].set_state(state)
        if "samplers" in state_dict:
            self._sampler_states = dict(my_rank_state(state_dict["samplers"], "the sampler state") or {})
        if "reuse_stats" in state_dict:
            self.reuse_stats.restore(state_dict["reuse_stats"])

    # -- batches --
    def _full_graph(self) -> Data:
        if self._full is None:
            g = self.graph
            # one Adjacency for the whole run, so its format conversions are cached across steps
            self._full = Data(x=g.x, edge_index=g.edge_index(), num_nodes=g.num_nodes,
                              n_id=torch.arange(g.num_nodes), adj=Adjacency(g.indptr, g.indices))
        return self._full

    def sampler(self, stage: str) -> Any:
        """The neighbour sampler of ``stage`` (built on first use, seeded per stage)."""
        from gnnkit.data.sampler import CSRNeighborSampler

        if stage not in self._samplers:
            fanout = self.num_neighbors if stage == "train" or self.hparams.eval_num_neighbors is None \
                else list(self.hparams.eval_num_neighbors)
            seed = self.hparams.seed + 10 + list(SPLIT_OF_STAGE).index(stage)
            self._samplers[stage] = CSRNeighborSampler(self.graph.indptr, self.graph.indices, fanout, seed=seed)
            if stage in self._sampler_states:  # a resumed fit: where the checkpointed run's sampler was
                self._samplers[stage].load_state_dict(self._sampler_states.pop(stage))
        return self._samplers[stage]

    def make_batch(self, pos: Tensor, neg: Tensor, neg_per_pos: int, stage: str) -> Data:
        """A batch for the given edges (global ids): the full graph, or the blocks sampled around
        their endpoints with the edges relabelled to the seeds' local ids."""
        if self.full_batch:
            data = copy.copy(self._full_graph())  # shallow: shares the graph's tensors
            data.pos, data.neg, data.neg_per_pos = pos, neg, neg_per_pos
            return data
        from torch_geometric.sampler import NodeSamplerInput

        seeds, local = torch.unique(torch.cat([pos.reshape(-1), neg.reshape(-1)]), return_inverse=True)
        out = self.sampler(stage).sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))
        x = self.graph.x
        return Data(
            x=None if x is None else x[out.node], edge_index=torch.stack([out.row, out.col]),
            num_nodes=out.node.numel(), n_id=out.node, batch_size=seeds.numel(),
            num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges,
            pos=local[: pos.numel()].view(-1, 2), neg=local[pos.numel():].view(-1, 2), neg_per_pos=neg_per_pos,
            input_id=encode_edges(pos, neg, neg_per_pos),
        )

    def reuse_inputs(self) -> dict[str, Any]:
        """What cached training batches depend on: the graph and every sampler and batch setting."""
        hp, trainer = self.hparams, self.trainer
        return {
            "task": "link", "dataset": self.graph.meta["name"], "graph": self.entry.key, "split": "train",
            "num_neighbors": self.num_neighbors, "batch_size": hp.batch_size, "negatives": "uniform",
            "seed": hp.seed, "feature_dtype": self.reuse.feature_dtype,
            "rank": trainer.global_rank if trainer else 0, "world_size": trainer.world_size if trainer else 1,
        }

    def _reuse_loader(self) -> ReuseLoader:
        loader = ReuseLoader.for_trainer(_FreshLinkLoader(self, self._loader("train")), self.reuse, self.reuse_inputs(),
                                         self.trainer, self.reuse_stats, self.hparams.seed)
        self._reuse_folder = loader.folder
        return loader

    def _loader(self, stage: str) -> LinkBatches:
        hp = self.hparams
        size = hp.batch_size if stage == "train" or hp.eval_batch_size is None else hp.eval_batch_size
        return LinkBatches(self, stage, size, self._generators[stage])

    def train_dataloader(self) -> LinkBatches | ReuseLoader:
        self._warn_if_one_step()
        return self._reuse_loader() if self.reuse is not None else self._loader("train")

    def _warn_if_one_step(self) -> None:
        """Warn (once) when a rank's share of the training edges fits one batch and the run has fewer
        than :data:`ENOUGH_STEPS` epochs: a small graph under a large-graph recipe (collab's 64 * 1024
        edges a batch, 10 epochs on the twin) then takes a few optimizer steps in all. A recipe that
        means it (GAE's one full-batch step in each of 200 epochs) is not warned about."""
        _, world = self.rank_and_world()
        edges = self.graph.meta["num_split_edges"].get("train", 0)
        share = -(-edges // world)
        epochs = getattr(self.trainer, "max_epochs", None)
        enough = epochs is not None and (epochs < 0 or epochs >= ENOUGH_STEPS)
        if self._warned_one_step or enough or not 0 < share <= self.hparams.batch_size:
            return
        self._warned_one_step = True
        held = (f"a rank's whole share of the training edges ({share:,} of {edges:,} on {world} ranks)" if world > 1
                else f"all {edges:,} training edges")
        log.warning("data.batch_size %d holds %s: one optimizer step an epoch, so the recipe's epochs train "
                    "little; take about a tenth of them (--data.batch_size %d) or more epochs",
                    self.hparams.batch_size, held, max(1, share // 10))

    def val_dataloader(self) -> LinkBatches:
        if not self.full_batch and self.trainer is not None and self.trainer.sanity_checking:
            self._before_sanity_check = self.sampler("val").state_dict()  # what the check draws is given back
        return self._loader("val")

    def rewind_sanity_check(self) -> None:
        """Put the validation sampler back to where it was before Lightning's sanity check, so the
        check draws nothing from it: the validation batches of a run, and of a resumed run (which
        checks again), are then those of the run alone (called by
        :class:`~gnnkit.last_checkpoint.LastCheckpoint` when the check ends)."""
        if self._before_sanity_check is not None:
            self._samplers["val"].load_state_dict(self._before_sanity_check)
            self._before_sanity_check = None

    def test_dataloader(self) -> LinkBatches:
        return self._loader("test")

"""PerFect-style reuse of sampled mini-batches: record, replay in a new order, then fine-tune fresh.

PerFect (Wu, UT Arlington 2023, <https://rc.library.uta.edu/uta-ir/handle/10106/31564>) pre-trains on
repeated, already-preprocessed data and fine-tunes on fresh data to recover accuracy; data echoing
(Choi et al., <https://arxiv.org/abs/1907.05550>) repeats pipeline outputs the same way. On a graph,
the expensive pipeline output is the sampled mini-batch (neighbour sampling plus feature gathering).

The schedule (:class:`ReuseConfig`) splits training into a reuse phase of ``epochs`` epochs and a
fine-tuning phase after it. Within the reuse phase, epochs come in groups of ``factor``: the first
epoch of a group samples fresh batches, trains on them and records them to a batch cache
(:mod:`pipeline.batch_cache`); the other ``factor - 1`` epochs replay the recording, in a new order
each epoch, through a DALI or torch shard reader, optionally with a fraction of fresh batches mixed
in. Every epoch has the same number of steps, so runs compare at equal epochs. After the reuse phase
every epoch samples fresh. A damaged shard is detected (size and CRC-32) and its batches are
sampled afresh for the same seeds, never trained on.

When the sampler runs on the GPU, the features and labels it gathers from are where the GPU reads
them (device memory, or pinned host memory read through unified addressing), and gathering them
again by node id costs far less than moving the gathered rows through the cache (disk, host memory,
a copy to the device). Then only a batch's structure is recorded (node ids, edges, counts) and
replay gathers ``x`` and ``y`` again (``node_attrs``): the cache shrinks several-fold and replayed
batches equal fresh ones bit for bit.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Collection, Generator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from gnnkit.rank_state import gather_ranks, my_rank_state
from gnnkit.setting_checks import is_finite, is_whole
from pipeline import DatasetError, log, paths
from pipeline.batch_cache import (
    BatchCache,
    BatchCacheWriter,
    BatchRecord,
    CorruptShard,
    DamagedRecording,
    cache_key,
    open_batch_cache,
    read_manifest,
)
from pipeline.shard_reader import ResidentShardReader, ShardReader, make_shard_reader

PHASES = ("record", "replay", "fresh")


@dataclass(frozen=True)
class ReuseConfig:
    """The reuse schedule of a sampled training run (``data.reuse`` in a recipe).

    Args:
        epochs: Length of the reuse phase (epochs ``0 .. epochs-1``); 0 turns reuse off.
        factor: Epochs per recording: each recorded epoch is trained once fresh and replayed
            ``factor - 1`` times (default: ``epochs``, i.e. record once and replay the rest).
        fresh_fraction: Fraction of each replay epoch's steps that sample fresh batches instead.
        loader: Shard reader for replay: ``"dali"``, ``"torch"`` or ``"auto"`` (DALI when training on
            a GPU, else the zero-copy torch reader; see :func:`pipeline.shard_reader.make_shard_reader`).
        workers: DALI threads (at least 1) or torch reader worker processes (0: the training process
            maps the shards itself, without copying).
        feature_dtype: Storage dtype of cached features, ``"float16"`` (half the disk) or
            ``"float32"`` (replay is bit-identical).
        verify: ``"once"``: a shard's CRC-32 is checked the first time this run replays it (its size
            and header every time); ``"always"``: on every replay.
        shard_mb: Target shard size in MiB.
        disk_budget_mb: Disk budget of the cache in MiB; batches beyond it are not recorded and the
            replay cycles through those that were (``None``: free disk space less 1 GiB).
        device_cache_mb: When replaying on a GPU, MiB of shards kept in its memory after their first
            read, so later replays of the recording read nothing from disk and copy nothing to the
            device (``None``: up to a quarter of the GPU's free memory; 0: read every replay).
        cache_dir: Cache folder (default: ``$GNNKIT_HOME/batches/<dataset>/<settings hash>``).
    """

    epochs: int = 0
    factor: int | None = None
    fresh_fraction: float = 0.0
    loader: str = "auto"
    workers: int = 0
    feature_dtype: str = "float16"
    verify: str = "once"
    shard_mb: float = 64.0
    disk_budget_mb: float | None = 8192.0
    device_cache_mb: float | None = None
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        checks = (  # whole epochs and workers: 2.5 gave fractional recorded epochs, "2" a bare TypeError
            ("epochs", is_whole(self.epochs, 0), "an integer >= 0"),
            ("factor", self.factor is None or is_whole(self.factor, 1), "an integer >= 1 (or null)"),
            ("fresh_fraction", is_finite(self.fresh_fraction, 0.0, 1.0), "a number in [0, 1]"),
            ("loader", self.loader in ("auto", "dali", "torch"), "'auto', 'dali' or 'torch'"),
            ("workers", is_whole(self.workers, 0), "an integer >= 0"),
            ("feature_dtype", self.feature_dtype in ("float16", "float32"), "'float16' or 'float32'"),
            ("verify", self.verify in ("once", "always"), "'once' or 'always'"),
            ("shard_mb", is_finite(self.shard_mb, 0.0) and self.shard_mb > 0, "a positive number"),
            ("disk_budget_mb", self.disk_budget_mb is None or is_finite(self.disk_budget_mb, 0.0), "a number >= 0"),
            ("device_cache_mb", self.device_cache_mb is None or is_finite(self.device_cache_mb, 0.0), "a number >= 0"),
            ("cache_dir", self.cache_dir is None or isinstance(self.cache_dir, str), "a folder path (or null)"),
        )
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"data.reuse.{name}: expected {expected}, got {getattr(self, name)!r}")

    def phase(self, epoch: int) -> tuple[str, int]:
        """What epoch ``epoch`` does: ``("record"|"replay", recorded_epoch)`` or ``("fresh", -1)``."""
        if epoch >= self.epochs:
            return "fresh", -1
        factor = self.factor or self.epochs
        recorded = epoch // factor * factor
        return ("record" if epoch == recorded else "replay"), recorded


@dataclass
class ReuseStats:
    """Counts of what the schedule did, for report.json and checkpoints."""

    batches: dict[str, int] = field(default_factory=lambda: {"fresh": 0, "recorded": 0, "replayed": 0,
                                                             "resampled": 0})
    epochs: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    load_time_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    corrupt_shards: int = 0
    cache_bytes: int = 0
    loader: str = ""
    stored: str = "batches"  # or "structure" (node attributes gathered again at replay)
    device_kept_mb: float = 0.0  # shards replayed from GPU memory (ReuseConfig.device_cache_mb)
    recording: str = ""  # the id of the recording this run made last (its manifest's "recording")

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)

    def checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint keeps: the counts, and every rank's recording id (each rank records its
        own batches, in a folder of its own: rank 0's id alone made every other rank record anew
        on resume). Collective in distributed runs."""
        return {**self.state_dict(), "recording": gather_ranks(self.recording)}

    def restore(self, state: dict[str, Any]) -> None:
        """Load :meth:`checkpoint_state`'s dict, this rank's recording id among those kept (a
        checkpoint of before the ids has none: its recording is replayed unchecked, as then)."""
        recordings = state.get("recording", "")
        self.load_state_dict({key: value for key, value in state.items() if key != "recording"})
        mine = my_rank_state(recordings, "the reuse recordings") if isinstance(recordings, list) else recordings
        self.recording = mine if isinstance(mine, str) else ""


def to_record(batch: Data, skip: Collection[str] = ()) -> BatchRecord:
    """A sampled mini-batch as a cache record (tensors as arrays, other attributes as meta), without
    the attributes in ``skip`` (node attributes :func:`from_record` gathers again by ``n_id``)."""
    arrays, meta = {}, {}
    for key, value in batch.items():
        if key in skip:
            continue
        if isinstance(value, Tensor):
            arrays[key] = value
        else:
            meta[key] = value
    json.dumps(meta)  # fails early on an attribute the manifest could not hold
    if skip and "n_id" not in arrays:
        raise ValueError(f"reuse: a batch without n_id cannot have {sorted(skip)} gathered again at replay")
    return BatchRecord(arrays, meta)


def from_record(record: BatchRecord, node_attrs: dict[str, Tensor] | None = None) -> Data:
    """The mini-batch a record was made from; ``node_attrs`` (name -> ``[num_nodes, ...]``) are
    gathered by the record's ``n_id``, as the sampler's loader gathered them."""
    data = Data(**record.arrays, **record.meta)
    for key, values in (node_attrs or {}).items():
        data[key] = values.index_select(0, data.n_id.to(values.device))
    return data


def resample(loader: Any, seeds: Tensor) -> Data:
    """Sample a fresh mini-batch for the given seed positions with a PyG ``NodeLoader``."""
    out = loader.collate_fn(seeds)
    return out if loader.filter_per_worker else loader.filter_fn(out)


class _Timed:
    """Wraps an epoch's batches, adding the time spent waiting for each to the loader's phase."""

    def __init__(self, items: Generator[Data, None, None], loader: ReuseLoader) -> None:
        self.items, self.loader = items, loader

    def __iter__(self) -> _Timed:
        return self

    def __next__(self) -> Data:
        start = time.perf_counter()
        try:
            return next(self.items)
        finally:
            self.loader.stats.load_time_s[self.loader.phase] += time.perf_counter() - start

    def close(self) -> None:
        """End the epoch here (a pass cut short): a recording in progress publishes what it holds."""
        self.items.close()


class ReuseLoader:
    """The training loader of a reuse schedule: records, replays or samples fresh, per epoch.

    Args:
        fresh: The fresh-sampling loader (a PyG ``NodeLoader``, e.g. gnnkit's ``CSRNodeLoader``).
        config: The schedule.
        inputs: What the batches depend on (graph fingerprint, sampler settings); a cache made
            for other inputs is refused.
        folder: The cache folder.
        current_epoch: Returns the epoch about to run (the Trainer's ``current_epoch``); ``None``
            counts the epochs iterated.
        stats: Where counts are kept (shared with the datamodule, saved in checkpoints).
        seed: Seed of the replay order (combined with the epoch).
        device: Where the shard reader hands replayed bytes over (``"cpu"`` or ``"cuda"``).
        node_attrs: Node tensors the fresh loader gathers by ``n_id`` (features, labels), given
            when gathering them again is cheap (they are on the training device): records then
            keep only the batches' structure and replay gathers these (``None``: whole batches).
    """

    def __init__(
        self,
        fresh: Any,
        config: ReuseConfig,
        inputs: dict[str, Any],
        folder: Path,
        current_epoch: Callable[[], int] | None,
        stats: ReuseStats,
        seed: int = 0,
        device: str = "cpu",
        node_attrs: dict[str, Tensor] | None = None,
    ) -> None:
        self.fresh = fresh
        self.config = config
        self.inputs = inputs
        self.folder = folder
        self.current_epoch = current_epoch
        self.stats = stats
        self.seed = seed
        self.reader: ShardReader = _kept_on_device(make_shard_reader(config.loader, config.workers, device=device),
                                                   config.device_cache_mb, device)
        self.stats.loader = self.reader.name
        self.node_attrs = dict(node_attrs) if node_attrs else None
        self.stats.stored = "structure" if self.node_attrs else "batches"
        self._warned: set[int] = set()
        self._iterated = 0
        self._writer: BatchCacheWriter | None = None
        self._cache: BatchCache | None = None  # kept across epochs: it remembers verified shards
        self.phase = "fresh"

    @classmethod
    def for_trainer(cls, fresh: Any, config: ReuseConfig, inputs: dict[str, Any], trainer: Any,
                    stats: ReuseStats, seed: int, node_attrs: dict[str, Tensor] | None = None) -> ReuseLoader:
        """A datamodule's training loader under ``trainer`` (a Lightning ``Trainer`` or ``None``).

        The cache is ``config.cache_dir`` or :func:`default_folder` under gnnkit's batch root; the
        epoch is the trainer's, and replayed bytes are handed over on CUDA when it trains there.
        ``inputs`` must say what is stored (``"stored": "structure"`` with ``node_attrs``, absent or
        ``"batches"`` without).
        """
        if inputs.get("stored", "batches") != ("structure" if node_attrs else "batches"):
            raise ValueError(f"reuse: the cache inputs say stored={inputs.get('stored')!r} but node_attrs "
                             f"are {'given' if node_attrs else 'not given'}")
        folder = (Path(config.cache_dir) if config.cache_dir
                  else default_folder(paths.batch_root(), inputs["dataset"], inputs))
        on_cuda = trainer is not None and trainer.strategy.root_device.type == "cuda"
        return cls(fresh, config, inputs, folder,
                   current_epoch=(lambda: trainer.current_epoch) if trainer is not None else None,
                   stats=stats, seed=seed, device="cuda" if on_cuda else "cpu", node_attrs=node_attrs)

    def __len__(self) -> int:
        return len(self.fresh)

    def _inputs(self, recorded: int) -> dict[str, Any]:
        return {**self.inputs, "recorded_epoch": recorded}

    def _open(self, recorded: int) -> BatchCache | None:
        """The recording to replay, or None if it is missing or from another epoch of this run."""
        if not self.folder.is_dir():
            return None
        try:
            manifest = read_manifest(self.folder)
        except DatasetError as err:
            log.warning("reuse: %s; recording anew", err)
            return None
        if manifest.get("inputs", {}).get("recorded_epoch") != recorded:
            return None  # a recording from another point of the schedule: record anew
        if self.stats.recording and manifest.get("recording") != self.stats.recording:
            log.warning("reuse: %s holds another run's recording, made since this run's (same settings, the "
                        "same cache folder); recording anew, as replaying it would train on that run's batches",
                        self.folder)
            return None
        if self._cache is None or self._cache.manifest != manifest:  # kept: it remembers verified shards
            try:
                self._cache = open_batch_cache(self.folder, self._inputs(recorded), manifest)
            except DamagedRecording as err:  # seeds.npy gone or cut: it stopped every resumed run
                log.warning("reuse: %s; recording anew", err)
                return None
        return self._cache

    def __iter__(self) -> Iterator[Data]:
        return _Timed(self._epoch(), self)

    def _epoch(self) -> Generator[Data, None, None]:
        """One epoch's batches; what it does is decided when the first batch is asked for (Lightning
        also calls ``iter`` once just to check the loader)."""
        self._finish_recording()  # an epoch the trainer stopped early keeps what it recorded
        epoch = self.current_epoch() if self.current_epoch is not None else self._iterated
        self._iterated += 1
        phase, recorded = self.config.phase(epoch)
        cache = self._open(recorded) if phase == "replay" else None
        if phase == "replay" and (cache is None or cache.num_batches == 0):
            log.info("reuse: no recording for epoch %d at %s; recording this epoch instead", recorded, self.folder)
            phase = "record"
        self.phase = phase
        self.stats.epochs[phase] += 1
        if phase == "record":
            yield from self._record(recorded)
        elif phase == "replay":
            yield from self._replay(cache, epoch)
        else:
            yield from self._count(iter(self.fresh), "fresh")

    def _count(self, batches: Iterator[Data], key: str) -> Iterator[Data]:
        for batch in batches:
            self.stats.batches[key] += 1
            yield batch

    def _record(self, recorded: int) -> Iterator[Data]:
        config = self.config
        if isinstance(self.reader, ResidentShardReader):
            self.reader.clear()  # the shards kept of the recording this one replaces
        lossy = {"x": torch.float16} if config.feature_dtype == "float16" else {}
        writer = BatchCacheWriter(self.folder, self._inputs(recorded), shard_mb=config.shard_mb,
                                  budget_mb=config.disk_budget_mb, lossy=lossy)
        self._writer = writer
        last = len(self.fresh) - 1
        try:
            for step, batch in enumerate(self._count(iter(self.fresh), "fresh")):
                if self._writer is writer and writer.add(to_record(batch, self.node_attrs or ()), batch.input_id):
                    self.stats.batches["recorded"] += 1
                if step == last:  # publish before the trainer ends the epoch (it may not ask again)
                    self._finish_recording()
                yield batch
        finally:
            if self._writer is writer:
                self._finish_recording()

    def _finish_recording(self) -> None:
        """Publish the recording in progress (what it holds so far), or drop it if it is empty."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        self._cache = None  # a new recording: its shards are verified afresh
        if not (writer.shards or writer.pending):
            writer.abort()
            return
        try:
            cache = writer.close()
        except OSError as err:
            writer.abort()
            log.warning("reuse: could not write the batch cache at %s (%s); the next replay epoch records "
                        "again", self.folder, err)
            return
        self.stats.cache_bytes = cache.num_bytes
        self.stats.recording = str(cache.manifest.get("recording", ""))
        if writer.full:
            total = cache.num_batches + writer.refused
            log.warning("reuse: disk budget reached; %d of %d batches cached, so each replay epoch trains %d "
                        "batches cycling through those %d (%.1f times each): a larger data.reuse.disk_budget_mb "
                        "keeps more", cache.num_batches, total, total, cache.num_batches,
                        total / max(cache.num_batches, 1))

    def _replay(self, cache: BatchCache, epoch: int) -> Iterator[Data]:
        steps = len(self)
        fresh_steps = round(self.config.fresh_fraction * steps)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        plan = torch.zeros(steps, dtype=torch.bool)
        plan[torch.randperm(steps, generator=generator)[:fresh_steps]] = True
        replayed = self._replayed(cache, steps - fresh_steps, generator)
        fresh = self._count(iter(self.fresh), "fresh") if fresh_steps else iter(())
        for is_fresh in plan.tolist():
            yield next(fresh) if is_fresh else next(replayed)
        replayed.close()
        if isinstance(self.reader, ResidentShardReader):
            self.stats.device_kept_mb = round(self.reader.kept_bytes / 2**20, 1)

    def _replayed(self, cache: BatchCache, count: int, generator: torch.Generator) -> Iterator[Data]:
        """``count`` cached batches: shards in a random order, batches shuffled within each shard,
        cycling through the cache again if it holds fewer (disk budget)."""
        paths = [cache.shard_path(i) for i in range(len(cache.shards))]
        for _ in range(math.ceil(count / cache.num_batches)):
            order = torch.randperm(len(paths), generator=generator).tolist()
            for shard, buffer in self.reader.read(paths, order):
                records = self._decode(cache, shard, buffer)
                batch_ids = cache.shard_batches(shard)
                for j in torch.randperm(len(batch_ids), generator=generator).tolist():
                    if count == 0:
                        return
                    count -= 1
                    if records is None:
                        self.stats.batches["resampled"] += 1
                        yield resample(self.fresh, cache.seeds(batch_ids[j]))
                    else:
                        self.stats.batches["replayed"] += 1
                        yield from_record(records[j], self.node_attrs)

    def _decode(self, cache: BatchCache, shard: int, buffer: Tensor) -> list[BatchRecord] | None:
        try:
            return cache.decode(shard, buffer, verify=self.config.verify)
        except CorruptShard as err:
            if shard not in self._warned:
                self._warned.add(shard)
                self.stats.corrupt_shards += 1
                log.warning("reuse: %s; sampling its batches afresh", err)
            return None


def _kept_on_device(reader: ShardReader, budget_mb: float | None, device: str) -> ShardReader:
    """``reader``, keeping the shards it hands over on a GPU within ``budget_mb`` (``None``: a quarter
    of the GPU's free memory now); unchanged on the CPU, where replay maps the page cache already."""
    if torch.device(device).type != "cuda" or budget_mb == 0:
        return reader
    if budget_mb is None:
        return ResidentShardReader(reader, torch.cuda.mem_get_info(torch.device(device))[0] // 4)
    return ResidentShardReader(reader, int(budget_mb * 2**20))


def default_folder(root: Path, dataset: str, inputs: dict[str, Any]) -> Path:
    """``<root>/<dataset>/<settings hash>``: one cache per graph and sampler setting."""
    return root / dataset / cache_key(inputs)[:16]


__all__ = ["ReuseConfig", "ReuseLoader", "ReuseStats", "default_folder", "from_record",
           "resample", "to_record"]

"""Readers that stream batch-cache shards, in a given order, with prefetching and parallel reads.

Two backends behind one interface, :meth:`ShardReader.read`, which yields ``(shard, bytes)`` for the
shards in the order asked (the caller owns shuffling, so both backends yield the same batches):

* :class:`DaliShardReader`: an NVIDIA DALI pipeline (<https://github.com/NVIDIA/DALI>): an
  ``external_source`` feeds file names to ``fn.io.file.read``, DALI reads ahead on its own threads
  and hands torch tensors over through its PyTorch iterator. CPU pipelines run with
  ``device_id=None``; on a CUDA machine the bytes are copied to the GPU inside the pipeline.
* :class:`TorchShardReader`: a plain :class:`torch.utils.data.DataLoader` over the shard files,
  which it memory-maps: with ``num_workers=0`` replayed arrays are views of the page cache, no copy.
  For a GPU it stages each shard in pinned memory and copies it to the device in one asynchronous
  transfer, so the replayed batches are decoded there (views of the device buffer) and no batch
  crosses the host link on its own.

:func:`make_shard_reader` with ``"auto"`` picks DALI for GPU training when it imports (its pipeline
moves the bytes to the GPU), the torch reader otherwise (on a GPU, with its pinned copy), and on CPU, where measurement (``bench/reuse.py``) found the zero-copy
mapping faster than DALI's read-and-copy on this class of machine; both give the same batches.
A shard that cannot be read comes back empty; the cache's checksum check then reports it.
:class:`ResidentShardReader` wraps either and keeps the shards it handed over on the device, within a
budget, so that a replay on a GPU reads each shard once per recording rather than once per epoch.
"""

from __future__ import annotations

import mmap
import os
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
import torch

_EMPTY = torch.empty(0, dtype=torch.uint8)
_T = TypeVar("_T")
_END = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def read_ahead(items: Iterable[_T], depth: int) -> Iterator[_T]:
    """``items`` in order, produced up to ``depth`` ahead by a background thread.

    File reads and pinned copies release the GIL, so the next shard is read while the training
    step runs. An error in the producer is raised here; closing this iterator early stops the
    producer after the item it is on.
    """
    ready: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_END)
        except BaseException as err:  # noqa: BLE001 - re-raised in the consuming thread
            put(_Failed(err))

    thread = threading.Thread(target=produce, name="shard-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()


class ShardReader(Protocol):
    """Yields the bytes of shard files in the given order."""

    name: str

    def read(self, paths: Sequence[Path], order: Sequence[int]) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield ``(i, bytes of paths[i])`` for each ``i`` in ``order`` (uint8, 1-D)."""
        ...


def _map_file(path: Path) -> torch.Tensor:
    """The file's bytes, memory-mapped copy-on-write: no copy, pages shared with the page cache."""
    try:
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError):  # missing, unreadable or empty
        return _EMPTY
    return torch.from_numpy(np.frombuffer(mapped, dtype=np.uint8))


class _ShardFiles(torch.utils.data.Dataset):
    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor]:
        return index, _map_file(self.paths[index])


class TorchShardReader:
    """Reads shards with a :class:`~torch.utils.data.DataLoader` (``num_workers`` reader processes).

    Args:
        num_workers: Reader processes (0: read in the calling process).
        prefetch: Shards each worker reads ahead.
        device: Where the bytes are handed over: ``"cpu"`` (the mapped file), or ``"cuda"`` /
            ``"cuda:N"`` (staged in pinned memory, then one asynchronous copy to that GPU per shard;
            ``"cuda"``: the current one).
    """

    name = "torch"

    def __init__(self, num_workers: int = 0, prefetch: int = 2, device: str = "cpu") -> None:
        self.num_workers = num_workers
        self.prefetch = prefetch
        self.device = device

    def read(self, paths: Sequence[Path], order: Sequence[int]) -> Iterator[tuple[int, torch.Tensor]]:
        if not order:
            return
        device = torch.device(self.device)
        gpu = device.type == "cuda"
        if gpu and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        loader = torch.utils.data.DataLoader(
            _ShardFiles(paths), batch_size=None, sampler=list(order), num_workers=self.num_workers,
            prefetch_factor=self.prefetch if self.num_workers else None, pin_memory=gpu,
        )
        # for a GPU without reader processes, the next shards are read and pinned by a thread while
        # the current one trains (reader processes prefetch on their own)
        shards = read_ahead(loader, self.prefetch) if gpu and not self.num_workers else loader
        for index, buffer in shards:
            yield int(index), (buffer.to(device, non_blocking=True) if gpu else buffer)


class ResidentShardReader:
    """Another reader's shards, kept where it handed them over, within a byte budget, and served
    from there when they are asked for again.

    On a GPU this makes every replay after the first read nothing from disk and copy nothing over
    the host link: the structure of a products-sized recorded epoch (node ids and edges of 192
    batches of 1,024 seeds, fan-out [15, 10, 5]) is about 2 GB, small beside the GPU's memory, while
    reading it again every epoch costs host time and link bandwidth that fresh GPU sampling does
    not. A kept shard is known by its path and its file's identity (inode, size, modification time),
    so a new recording, published as new files, is read afresh; :meth:`clear` lets go of them all.

    Args:
        reader: The reader that reads a shard the first time (its buffers must be its own, fresh
            each shard: the torch reader's device copies and DALI's outputs are).
        budget_bytes: Bytes of kept buffers at most; shards beyond it are read every time.
    """

    def __init__(self, reader: ShardReader, budget_bytes: int) -> None:
        self.reader = reader
        self.name = reader.name
        self.budget_bytes = budget_bytes
        self._kept: dict[tuple[str, int, int, int], torch.Tensor] = {}

    @property
    def kept_bytes(self) -> int:
        """Bytes of the kept buffers (uint8)."""
        return sum(buffer.numel() for buffer in self._kept.values())

    @staticmethod
    def _identity(path: Path) -> tuple[str, int, int, int] | None:
        try:
            stat = os.stat(path)
        except OSError:
            return None
        return str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns

    def read(self, paths: Sequence[Path], order: Sequence[int]) -> Iterator[tuple[int, torch.Tensor]]:
        identity = {i: self._identity(paths[i]) for i in order}
        missing = [i for i in order if identity[i] not in self._kept]
        fetched = self.reader.read(paths, missing) if missing else iter(())
        try:
            for i in order:
                kept = self._kept.get(identity[i])
                if kept is not None:
                    yield i, kept
                    continue
                index, buffer = next(fetched)
                if index != i:
                    raise RuntimeError(f"shard reader {self.name}: asked for shard {i}, got {index}")
                self._keep(identity[i], buffer)
                yield i, buffer
        finally:
            close = getattr(fetched, "close", None)  # a generator: stops its reader's read-ahead
            if close is not None:
                close()

    def _keep(self, identity: tuple[str, int, int, int] | None, buffer: torch.Tensor) -> None:
        if identity is None or buffer.numel() == 0:
            return
        for stale in [key for key in self._kept if key[0] == identity[0]]:  # its file was written anew
            del self._kept[stale]
        if self.kept_bytes + buffer.numel() <= self.budget_bytes:
            self._kept[identity] = buffer

    def clear(self) -> None:
        """Let go of every kept shard."""
        self._kept.clear()


def dali_available() -> bool:
    """Whether NVIDIA DALI and its PyTorch plugin import."""
    try:
        import nvidia.dali  # noqa: F401
        import nvidia.dali.plugin.pytorch  # noqa: F401
    except ImportError:
        return False
    return True


class DaliShardReader:
    """Reads shards through an NVIDIA DALI pipeline.

    Args:
        num_threads: DALI worker threads.
        prefetch: Shards read ahead (DALI's ``prefetch_queue_depth``).
        device: ``"cpu"`` (``device_id=None``) or ``"cuda"`` (bytes land on the current GPU).
    """

    name = "dali"

    def __init__(self, num_threads: int = 2, prefetch: int = 2, device: str = "cpu") -> None:
        self.num_threads = num_threads
        self.prefetch = prefetch
        self.device = device

    def _pipeline(self, names: list[np.ndarray]):  # noqa: ANN202 - a DALI Pipeline
        from nvidia.dali import fn, pipeline_def, types

        def source(info):  # noqa: ANN001, ANN202 - DALI's SampleInfo in, a file name out
            if info.idx_in_epoch >= len(names):
                raise StopIteration
            return names[info.idx_in_epoch]

        gpu = self.device == "cuda"

        @pipeline_def(batch_size=1, num_threads=self.num_threads, prefetch_queue_depth=self.prefetch,
                      device_id=torch.cuda.current_device() if gpu else None)
        def shards():  # noqa: ANN202
            data = fn.io.file.read(fn.external_source(source=source, batch=False, dtype=types.UINT8))
            return data.gpu() if gpu else data

        return shards()

    def read(self, paths: Sequence[Path], order: Sequence[int]) -> Iterator[tuple[int, torch.Tensor]]:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        # Missing files never reach DALI (its reader would abort the whole pipeline).
        present = [i for i in order if os.path.isfile(paths[i])]
        missing = set(order) - set(present)
        if present:
            names = [np.frombuffer(os.fsencode(os.path.abspath(paths[i])), dtype=np.uint8) for i in present]
            pipe = self._pipeline(names)
            pipe.build()
            batches = DALIGenericIterator([pipe], ["data"], last_batch_policy=LastBatchPolicy.PARTIAL)
        else:
            batches = iter(())
        for index in order:
            if index in missing:
                yield index, _EMPTY
                continue
            yield index, next(batches)[0]["data"][0]


def make_shard_reader(kind: str = "auto", num_workers: int = 0, prefetch: int = 2,
                      device: str = "cpu") -> ShardReader:
    """The shard reader for ``kind``.

    Args:
        kind: ``"dali"``, ``"torch"`` or ``"auto"`` (DALI for ``device="cuda"`` when it imports,
            else torch).
        num_workers: DALI threads (at least 1) or DataLoader workers (0: map the files in the calling
            process, zero-copy).
        prefetch: Shards read ahead.
        device: Where the reader hands the bytes over (``"cpu"`` or ``"cuda"``).

    Raises:
        ValueError: For an unknown kind, or ``"dali"`` when DALI is not installed.
    """
    if kind == "auto":
        kind = "dali" if device == "cuda" and dali_available() else "torch"
    if kind == "dali":
        if not dali_available():
            raise ValueError("loader: 'dali' asked for but nvidia-dali is not installed "
                             "(pip install nvidia-dali-cuda120), or use 'torch'")
        return DaliShardReader(num_threads=max(1, num_workers), prefetch=prefetch, device=device)
    if kind == "torch":
        return TorchShardReader(num_workers=num_workers, prefetch=prefetch, device=device)
    raise ValueError(f"loader: expected 'auto', 'dali' or 'torch', got {kind!r}")

"""A disk cache of sampled mini-batches, for PerFect-style reuse of preprocessed batches.

PerFect (Wu, UT Arlington 2023, <https://rc.library.uta.edu/uta-ir/handle/10106/31564>) pre-trains on
repeated, already-preprocessed data and then fine-tunes on fresh data; data echoing (Choi et al.,
<https://arxiv.org/abs/1907.05550>) and Revamper (ATC 2021) reuse pipeline outputs the same way. This
module stores the batches a sampler produced (node ids, block structure, gathered features, labels)
so they can be replayed without sampling or gathering again.

A cache folder holds fixed-size binary shards and a ``manifest.json``::

    manifest.json     format version, the key's inputs (graph fingerprint, sampler settings,
                      feature dtype), per shard its file, size, CRC-32 and batch count, stats
    seeds.npy         the seed positions (``input_id``) of every batch, so a batch whose shard is
                      damaged can be sampled afresh for the same seeds
    shard-00000.bin   b"GNKSHARD" | u32 version | u32 0 | u64 header bytes | header JSON |
    shard-00001.bin   zero padding to 64 | each array's bytes, 64-byte aligned

Shards are self-describing (the header lists every batch's arrays: offset, shape, stored and restored
dtype) so a reader needs only the bytes. Integer arrays are stored in the narrowest of int32/int64
that holds them, and restored to their original dtype, so a replayed batch is bit-identical to the
cached one; features may be stored as float16 to halve the disk (restored to float32).

The folder is written under a temporary name and renamed into place when complete, like the graph
cache; a killed writer leaves only a temp folder named for its process
(:mod:`pipeline.temp_paths`), never opened, and removed as stale by the next recording beside it and
by ``gnnkit cache clear``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import struct
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline import paths, temp_paths
from pipeline.errors import DatasetError

if TYPE_CHECKING:  # torch where batches are written or decoded; verifying a cache needs none
    import torch

#: Bump when the shard or manifest layout changes.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SEEDS = "seeds.npy"
MAGIC = b"GNKSHARD"
ALIGN = 64
_PREAMBLE = struct.Struct("<8sIIQ")  # magic, version, reserved, header length


@lru_cache(maxsize=None)
def _dtypes() -> dict[str, torch.dtype]:
    """Dtype names as stored in shard headers -> torch dtypes."""
    import torch

    return {str(d).removeprefix("torch."): d for d in (
        torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
        torch.int16, torch.int32, torch.int64, torch.bool)}


class DamagedRecording(DatasetError):
    """A recording whose ``seeds.npy`` is gone or damaged: its batches cannot be told apart."""


class CorruptShard(DatasetError):
    """A shard whose bytes do not match its manifest (truncated, overwritten or unreadable)."""


@dataclass
class BatchRecord:
    """One mini-batch as the cache stores it.

    Attributes:
        arrays: Name -> tensor (any shape; int, float or bool).
        meta: JSON-serialisable scalars and lists (batch size, per-hop counts, ...).
    """

    arrays: dict[str, torch.Tensor]
    meta: dict[str, Any] = field(default_factory=dict)


def cache_key(inputs: dict[str, Any]) -> str:
    """SHA-256 of the inputs that make a batch cache valid (graph, sampler settings, dtypes)."""
    blob = json.dumps({"format": FORMAT_VERSION, **inputs}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def recording_id(inputs: dict[str, Any], shards: list[dict[str, Any]], seeds: list[np.ndarray]) -> str:
    """Which batches a recording holds: a hash of its inputs, its shards' CRC-32s and its batches'
    seeds. A run keeps it in its checkpoints, so a resumed run tells its own recording from another
    run's in the shared folder; two runs that recorded the same batches have the same id."""
    digest = hashlib.sha256(json.dumps([inputs, [s["crc32"] for s in shards]], sort_keys=True).encode())
    for batch in seeds:
        digest.update(np.ascontiguousarray(batch, dtype=np.int64).tobytes())
        digest.update(b"|")
    return digest.hexdigest()[:32]


def disk_headroom(free: int) -> int:
    """Bytes of a disk's ``free`` space a batch cache leaves unused: a tenth of it, at most 1 GiB.

    A fixed 1 GiB would leave nothing to cache on a nearly full disk; a share of what is free keeps
    the machine usable while a small cache can still be written.
    """
    return min(2**30, free // 10)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _fits_int32(tensors: list[torch.Tensor]) -> list[bool]:
    """Whether each int64 tensor's values fit int32, read with one host sync per device (the
    tensors of a shard's batches may sit on a GPU)."""
    import torch

    info, fits = torch.iinfo(torch.int32), [True] * len(tensors)
    by_device: dict[torch.device, list[int]] = {}
    for i, t in enumerate(tensors):
        if t.numel():
            by_device.setdefault(t.device, []).append(i)
    for indices in by_device.values():
        bounds = torch.stack([torch.stack(torch.aminmax(tensors[i])) for i in indices]).tolist()
        for i, (low, high) in zip(indices, bounds):
            fits[i] = info.min <= low and high <= info.max
    return fits


def _stored_dtypes(records: list[BatchRecord], lossy: dict[str, torch.dtype]) -> list[torch.dtype]:
    """The dtype each array of ``records`` is written in, in order: a lossy float override, or the
    narrowest lossless int."""
    import torch

    arrays = [(name, t) for record in records for name, t in record.arrays.items()]
    ints = [t for _, t in arrays if t.dtype == torch.int64]
    narrow = iter(_fits_int32(ints))
    stored = []
    for name, t in arrays:
        if name in lossy and t.is_floating_point():
            stored.append(lossy[name])
        elif t.dtype == torch.int64:
            stored.append(torch.int32 if next(narrow) else torch.int64)
        else:
            stored.append(t.dtype)
    return stored


def _raw_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes, C-contiguous (bfloat16 has no numpy dtype, so go through uint8)."""
    import torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def _layout(records: list[BatchRecord], lossy: dict[str, torch.dtype]
            ) -> tuple[bytes, list[tuple[torch.Tensor, torch.dtype]], int]:
    """A shard's padded header, its arrays with their storage dtypes, and the file's size."""
    batches, arrays, offset = [], [], 0
    stored_dtypes = iter(_stored_dtypes(records, lossy))
    for record in records:
        specs = {}
        for name, tensor in record.arrays.items():
            stored = next(stored_dtypes)
            specs[name] = {"offset": offset, "shape": list(tensor.shape),
                           "stored": str(stored).removeprefix("torch."),
                           "dtype": str(tensor.dtype).removeprefix("torch.")}
            arrays.append((tensor, stored))
            offset += _align(tensor.numel() * stored.itemsize)
        batches.append({"meta": record.meta, "arrays": specs})
    header = json.dumps({"batches": batches}, separators=(",", ":")).encode()
    start = _align(_PREAMBLE.size + len(header))
    head = _PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0, len(header)) + header
    return head + bytes(start - len(head)), arrays, start + offset


def _pieces(head: bytes, arrays: list[tuple[torch.Tensor, torch.dtype]]) -> Iterator[memoryview | bytes]:
    """The bytes of a laid-out shard, one piece after the other (arrays cast as they come)."""
    yield head
    for tensor, stored in arrays:
        data = _raw_bytes(tensor.to(stored))
        yield data
        yield bytes(_align(data.nbytes) - data.nbytes)


def _made(arrays: list[tuple[torch.Tensor, torch.dtype]]) -> tuple[torch.device, Any] | None:
    """The GPU the arrays sit on and an event after the work that made them (recorded on the
    caller's current stream, where they were made or waited for), or None when they are on the CPU."""
    import torch

    device = next((t.device for t, _ in arrays if t.is_cuda), None)
    return None if device is None else (device, torch.cuda.current_stream(device).record_event())


def encode_shard(records: list[BatchRecord], lossy: dict[str, torch.dtype]) -> list[memoryview | bytes]:
    """Lay out ``records`` as one shard.

    Args:
        records: The batches of the shard, in order.
        lossy: Array name -> dtype for floating arrays that may be stored with less precision.

    Returns:
        The pieces of the file, to be written one after the other.
    """
    return list(_pieces(*_layout(records, lossy)[:2]))


def _head_length(preamble: bytes) -> int:
    """The header length a shard's preamble gives (0 for a short, damaged one)."""
    return _PREAMBLE.unpack(preamble)[3] if len(preamble) == _PREAMBLE.size else 0


def decode_shard(buffer: torch.Tensor, where: str | Path = "shard", head: bytes | None = None) -> list[BatchRecord]:
    """Turn a shard's bytes back into its batches.

    Arrays stored in their own dtype are views of ``buffer`` (no copy); narrowed ones are widened.

    Args:
        buffer: The whole shard file as a 1-D uint8 tensor (CPU or GPU).
        where: Shown in errors.
        head: The shard's first bytes (preamble and header) when the caller has them on the host:
            read from there, not from a GPU ``buffer`` (each read there waits for the GPU).

    Returns:
        The shard's batches, in the order they were written.

    Raises:
        CorruptShard: If the bytes are not a well-formed shard.
    """
    import torch

    if buffer.dtype != torch.uint8 or buffer.dim() != 1 or buffer.numel() < _PREAMBLE.size:
        raise CorruptShard(where, f"expected at least {_PREAMBLE.size} bytes of a gnnkit batch shard")
    def read(begin: int, end: int) -> bytes:
        return head[begin:end] if head is not None else bytes(buffer[begin:end].cpu().numpy())

    magic, version, _, length = _PREAMBLE.unpack(read(0, _PREAMBLE.size).ljust(_PREAMBLE.size, b"\0"))
    if magic != MAGIC or version != FORMAT_VERSION:
        raise CorruptShard(where, f"not a version-{FORMAT_VERSION} gnnkit batch shard")
    try:
        header = json.loads(read(_PREAMBLE.size, _PREAMBLE.size + length))
        start = _align(_PREAMBLE.size + length)
        return [BatchRecord({name: _array(buffer, start, spec) for name, spec in batch["arrays"].items()},
                            batch["meta"]) for batch in header["batches"]]
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        raise CorruptShard(where, f"malformed shard header or arrays ({err})") from None


def _array(buffer: torch.Tensor, start: int, spec: dict[str, Any]) -> torch.Tensor:
    stored, dtype = _dtypes()[spec["stored"]], _dtypes()[spec["dtype"]]
    count = int(np.prod(spec["shape"], dtype=np.int64))
    nbytes = count * stored.itemsize
    begin = start + spec["offset"]
    if begin + nbytes > buffer.numel():
        raise ValueError(f"array runs past the end of the shard ({begin + nbytes} > {buffer.numel()} bytes)")
    tensor = buffer[begin:begin + nbytes].view(stored).reshape(spec["shape"])
    return tensor if stored == dtype else tensor.to(dtype)


class BatchCacheWriter:
    """Writes batches into shards as they are produced, then publishes the folder atomically.

    Use as a context manager: leaving the block without an exception publishes, with one removes
    the temporary folder.

    Shards are encoded, checksummed, written and fsynced by one background thread while training
    goes on (the work releases the GIL; batches on a GPU are copied to the host on that thread's own
    CUDA stream, off the training loop's); at most ``MAX_QUEUED`` shards wait for it, and an error
    there is raised by the next :meth:`add` or by :meth:`close`.

    Args:
        path: The cache folder to create (replaced if it exists, once the new one is complete).
        inputs: What the batches depend on (graph fingerprint, sampler settings, ...); recorded in
            the manifest and checked by :func:`open_batch_cache`.
        shard_mb: Target shard size; a batch larger than this gets a shard of its own.
        budget_mb: Disk budget; batches that would exceed it are not cached (``None``: no limit
            but the disk's free space, less :func:`disk_headroom`). An explicit budget is capped by
            the same free space.
        lossy: Array name -> storage dtype for floating arrays (e.g. ``{"x": torch.float16}``).
    """

    MAX_QUEUED = 2

    def __init__(
        self,
        path: Path,
        inputs: dict[str, Any],
        shard_mb: float = 64.0,
        budget_mb: float | None = None,
        lossy: dict[str, torch.dtype] | None = None,
    ) -> None:
        self.path = Path(path)
        self.inputs = inputs
        self.shard_bytes = int(shard_mb * 2**20)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.path.parent).free
        free -= disk_headroom(free)
        self.budget = max(0, min(free, int(budget_mb * 2**20) if budget_mb is not None else free))
        self.lossy = dict(lossy or {})
        self.tmp = temp_paths.make_temp_dir(self.path)  # owned: a killed recorder's is stale at once
        self.shards: list[dict[str, Any]] = []
        self.seeds: list[np.ndarray] = []
        self.pending: list[BatchRecord] = []
        self.pending_bytes = 0
        self.written = 0
        self.full = False
        self.refused = 0
        self._start = time.perf_counter()
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-cache")
        self._jobs: list[Future[None]] = []
        self._streams: dict[torch.device, Any] = {}  # per GPU, the stream the thread copies on

    @staticmethod
    def record_bytes(record: BatchRecord, lossy: dict[str, torch.dtype]) -> int:
        """Approximate bytes ``record`` takes in a shard."""
        return sum(_align(t.numel() * (lossy[n].itemsize if n in lossy and t.is_floating_point()
                                        else t.element_size()))
                   for n, t in record.arrays.items())

    def add(self, record: BatchRecord, seeds: torch.Tensor) -> bool:
        """Queue a batch for the cache.

        Args:
            record: The batch.
            seeds: Its seed positions (``input_id``), used to re-sample it if its shard is damaged.

        Returns:
            False if the disk budget is used up (the batch is not cached, nor any later one).
        """
        size = self.record_bytes(record, self.lossy)
        if self.full or self.written + self.pending_bytes + size > self.budget:
            self.full = True
            self.refused += 1
            return False
        self.pending.append(record)
        self.seeds.append(seeds.detach().cpu().long().numpy())
        self.pending_bytes += size
        if self.pending_bytes >= self.shard_bytes:
            self.flush()
        return True

    def flush(self) -> None:
        """Hand the queued batches to the background thread as one shard."""
        if not self.pending:
            return
        self._wait(keep=self.MAX_QUEUED - 1)
        head, arrays, size = _layout(self.pending, self.lossy)
        shard = {"file": f"shard-{len(self.shards):05d}.bin", "bytes": size, "crc32": 0, "batches": len(self.pending)}
        self.shards.append(shard)
        self.written += size
        self._jobs.append(self._io.submit(self._write, shard, head, arrays, _made(arrays)))
        self.pending, self.pending_bytes = [], 0

    def _write(self, shard: dict[str, Any], head: bytes, arrays: list[tuple[torch.Tensor, torch.dtype]],
               made: tuple[torch.device, Any] | None) -> None:
        crc, nbytes = 0, 0
        with open(self.tmp / shard["file"], "wb") as handle, self._copy_stream(made):
            for piece in _pieces(head, arrays):
                handle.write(piece)
                crc = zlib.crc32(piece, crc)
                nbytes += len(piece) if isinstance(piece, bytes) else piece.nbytes
            handle.flush()
            os.fsync(handle.fileno())
        assert nbytes == shard["bytes"], f"{shard['file']}: wrote {nbytes} bytes, laid out {shard['bytes']}"
        shard["crc32"] = crc

    def _copy_stream(self, made: tuple[torch.device, Any] | None) -> contextlib.AbstractContextManager[Any]:
        """Where the writer's thread copies a shard's GPU arrays to the host: a CUDA stream of its own,
        after the work that made them (``made``: their device and an event after it). A thread's
        current stream is otherwise the device's default one, on which the training loop runs: the
        copies would queue between its kernels and stall it. Nothing for arrays on the CPU."""
        if made is None:
            return contextlib.nullcontext()
        import torch

        device, event = made
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device)
        stream = self._streams[device]
        stream.wait_event(event)
        return torch.cuda.stream(stream)

    def _wait(self, keep: int = 0) -> None:
        """Wait until at most ``keep`` shards are still being written; re-raise a failed write."""
        while len(self._jobs) > keep:
            self._jobs.pop(0).result()

    def close(self) -> BatchCache:
        """Flush, write the manifest and publish the folder; returns the opened cache. On an
        error nothing is published and the temporary folder is removed."""
        try:
            self.flush()
            self._wait()
        except BaseException:
            self.abort()
            raise
        self._io.shutdown()
        counts = np.array([len(s) for s in self.seeds], dtype=np.int64)
        np.save(self.tmp / SEEDS, np.concatenate(self.seeds) if self.seeds else np.zeros(0, np.int64))
        manifest = {
            "format_version": FORMAT_VERSION,
            "key": cache_key(self.inputs),
            "inputs": self.inputs,
            "lossy": {k: str(v).removeprefix("torch.") for k, v in self.lossy.items()},
            "shards": self.shards,
            "seed_counts": counts.tolist(),
            "num_batches": int(counts.size),
            "bytes": self.written,
            "truncated_by_budget": self.full,
            "batches_not_cached": self.refused,
            "write_time_s": round(time.perf_counter() - self._start, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "recording": recording_id(self.inputs, self.shards, self.seeds),
        }
        (self.tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        for file in (self.tmp / SEEDS, self.tmp / MANIFEST):  # the shards were synced as written
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
        self._publish()
        return open_batch_cache(self.path, self.inputs)

    def _publish(self) -> None:
        old = None
        if self.path.exists():
            old = temp_paths.make_temp_dir(self.path)
            os.rename(self.path, old / "entry")
        os.rename(self.tmp, self.path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        """Drop everything written so far."""
        for job in self._jobs:
            job.cancel()
        self._io.shutdown(wait=True)
        self._jobs.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> BatchCacheWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


class BatchCache:
    """A published batch cache, opened for replay.

    Args:
        path: The cache folder.
        manifest: Its parsed ``manifest.json``.
    """

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest
        self.verified: set[int] = set()
        self.shards: list[dict[str, Any]] = manifest["shards"]
        counts = np.asarray(manifest["seed_counts"], dtype=np.int64)
        try:
            seeds = np.load(path / SEEDS, allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:  # gone, cut short (empty: EOFError), not an array
            raise DamagedRecording(path / SEEDS, f"unreadable ({str(err).splitlines()[0]})") from None
        if seeds.shape != (int(counts.sum()),):
            raise DamagedRecording(path / SEEDS, f"expected {int(counts.sum())} seed positions, found {seeds.shape}")
        self._seeds = np.split(seeds, np.cumsum(counts)[:-1]) if counts.size else []
        self._first = np.concatenate([[0], np.cumsum([s["batches"] for s in self.shards])]).astype(int)

    @property
    def num_batches(self) -> int:
        return int(self.manifest["num_batches"])

    @property
    def num_bytes(self) -> int:
        return int(self.manifest["bytes"])

    def shard_path(self, shard: int) -> Path:
        return self.path / self.shards[shard]["file"]

    def shard_batches(self, shard: int) -> range:
        """Global indices of the batches in ``shard``."""
        return range(self._first[shard], self._first[shard + 1])

    def seeds(self, batch: int) -> torch.Tensor:
        """Seed positions (``input_id``) of cached batch ``batch``."""
        import torch

        return torch.from_numpy(self._seeds[batch].copy())

    def read_bytes(self, shard: int) -> np.ndarray:
        """A shard's bytes as a uint8 array (size and checksum not yet verified)."""
        try:
            return np.fromfile(self.shard_path(shard), dtype=np.uint8)
        except OSError as err:
            raise CorruptShard(self.shard_path(shard), f"unreadable ({err.strerror or err})") from None

    def read_head(self, shard: int, data: np.ndarray | None = None) -> bytes:
        """A shard's preamble and header (for bytes already on a GPU): from ``data``, the file's
        bytes when read already, else from its file."""
        limit = self.shards[shard]["bytes"]
        if data is not None:
            preamble = data[: _PREAMBLE.size].tobytes()
            return preamble + data[_PREAMBLE.size: _PREAMBLE.size + min(_head_length(preamble), limit)].tobytes()
        try:
            with open(self.shard_path(shard), "rb") as handle:
                preamble = handle.read(_PREAMBLE.size)
                return preamble + handle.read(min(_head_length(preamble), limit))
        except OSError as err:
            raise CorruptShard(self.shard_path(shard), f"unreadable ({err.strerror or err})") from None

    def read_shard(self, shard: int) -> torch.Tensor:
        """A shard's bytes as a uint8 tensor (size and checksum not yet verified)."""
        import torch

        return torch.from_numpy(self.read_bytes(shard))

    def check(self, shard: int, buffer: torch.Tensor | np.ndarray, crc: bool = True) -> np.ndarray | None:
        """Raise :class:`CorruptShard` unless ``buffer`` (a tensor on any device, or a numpy array) has
        the shard's recorded size (and CRC-32). For bytes already on a GPU the CRC is taken of the
        file they were read from, not of a copy back from the device; those file bytes are returned
        (``None`` when none were read)."""
        info, where = self.shards[shard], self.shard_path(shard)
        size = buffer.size if isinstance(buffer, np.ndarray) else buffer.numel()
        if size != info["bytes"]:
            raise CorruptShard(where, f"expected {info['bytes']} bytes, found {size} (truncated?)")
        if not crc:
            return None
        read = None
        if isinstance(buffer, np.ndarray):
            data = buffer
        elif buffer.device.type == "cpu":
            data = buffer.numpy()
        else:
            data = read = self.read_bytes(shard)
        if zlib.crc32(memoryview(data)) != info["crc32"]:
            raise CorruptShard(where, "CRC-32 mismatch (the file changed after it was written)")
        self.verified.add(shard)
        return read

    def decode(self, shard: int, buffer: torch.Tensor, verify: str = "always") -> list[BatchRecord]:
        """Verify and decode a shard read by any reader; raises :class:`CorruptShard` if damaged.

        Args:
            shard: Which shard ``buffer`` holds.
            buffer: Its bytes.
            verify: ``"always"`` checks the CRC-32 on every read; ``"once"`` only on the first read
                of each shard through this object (the size and header are checked every time).
        """
        read = self.check(shard, buffer, crc=verify == "always" or shard not in self.verified)
        head = self.read_head(shard, read) if buffer.device.type != "cpu" else None  # the file once
        records = decode_shard(buffer, self.shard_path(shard), head)
        if len(records) != self.shards[shard]["batches"]:
            raise CorruptShard(self.shard_path(shard), f"expected {self.shards[shard]['batches']} batches")
        return records


def read_manifest(path: Path) -> dict[str, Any]:
    """A cache folder's parsed ``manifest.json``; :class:`DatasetError` if missing or unreadable."""
    file = Path(path) / MANIFEST
    try:
        manifest = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise DatasetError(file, f"unreadable batch-cache manifest ({err})") from None
    if not isinstance(manifest, dict):
        raise DatasetError(file, "unreadable batch-cache manifest (not a JSON object)")
    return manifest


def open_batch_cache(path: Path, inputs: dict[str, Any], manifest: dict[str, Any] | None = None) -> BatchCache:
    """Open a published cache, refusing one made for another graph or other sampler settings.

    Args:
        path: The cache folder.
        inputs: What this run's batches depend on; must equal what the cache was written with.
        manifest: Its manifest if the caller has read it already (see :func:`read_manifest`).

    Raises:
        DatasetError: If the manifest is missing or unreadable, or was written for other inputs;
            the message names the first setting that differs.
    """
    file = Path(path) / MANIFEST
    manifest = read_manifest(path) if manifest is None else manifest
    if manifest.get("format_version") != FORMAT_VERSION:
        raise DatasetError(file, f"expected a version-{FORMAT_VERSION} batch cache, "
                                 f"found version {manifest.get('format_version')!r}")
    cached = manifest.get("inputs", {})
    for name in sorted(set(cached) | set(inputs)):
        if cached.get(name) != inputs.get(name):
            raise DatasetError(file, f"batch cache was made for {name}={cached.get(name)!r} but this run "
                                     f"has {name}={inputs.get(name)!r}; refusing to replay it (delete the "
                                     "folder or point the run at another cache)")
    return BatchCache(Path(path), manifest)


def find_batch_caches(root: Path, dataset: str | None = None) -> list[Path]:
    """Published batch caches below ``root`` (``<root>/<dataset>/<settings>/``)."""
    if not root.is_dir():
        return []
    datasets = [paths.dataset_folder(root, dataset)] if dataset else sorted(p for p in root.iterdir() if p.is_dir())
    return sorted(p.parent for d in datasets if d.is_dir() for p in d.glob(f"[!.]*/{MANIFEST}"))


def verify_batch_cache(path: Path) -> list[str]:
    """Check every shard's size and CRC-32; returns the problems found (empty = intact)."""
    try:
        cache = BatchCache(path, read_manifest(path))
    except (OSError, ValueError, KeyError) as err:  # DatasetError is a ValueError
        return [str(err).splitlines()[0]]
    problems = []
    for shard in range(len(cache.shards)):
        try:
            cache.check(shard, cache.read_bytes(shard))
        except CorruptShard as err:
            problems.append(str(err))
    return problems

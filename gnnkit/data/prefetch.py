"""The next mini-batches made on a second CUDA stream, in a thread, while the GPU trains on this one.

Sampling on the GPU (:mod:`gnnkit.data.device_sampling`) leaves the host issuing a batch's sampling
and gathering kernels, and waiting for the sizes it needs, between the training steps: the GPU idles
meanwhile. DGL's loader for GPU sampling makes the next batches in a thread on an alternate stream
(``use_prefetch_thread``, ``use_alternate_streams``,
<https://docs.dgl.ai/en/latest/generated/dgl.dataloading.DataLoader.html>); so does
:class:`DevicePrefetcher`. The thread's waits (the sampler's size read-backs, the native kernels,
which let the interpreter lock go) overlap the training step's work, and its kernels queue on their
own stream. Each batch carries an event the training stream waits on, and its tensors are marked as
used by that stream, so the caching allocator does not hand their memory back to the thread early.

The batches and their order are those of the wrapped loader: one thread iterates it, in order.
What runs ahead is the sampler's random state; a checkpoint takes the state as of the last batch
handed out (:meth:`DevicePrefetcher.sampler_state`), so a resumed run draws what an uninterrupted
one would.
"""

from __future__ import annotations

import contextlib
import math
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data.data import BaseData

from gnnkit.sparse import Adjacency
from pipeline import log

#: Batches made ahead by default (``data.prefetch``).
DEFAULT_DEPTH = 2
_END = object()  # the loader is exhausted


class _Failure:
    """An exception raised in the thread, re-raised where the batch was asked for."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def tensors(batch: Any, seen: set[int] | None = None) -> Iterator[Tensor]:
    """The tensors a batch holds: a tensor, or those of a PyG ``Data``/``HeteroData`` (every store), a
    gnnkit :class:`~gnnkit.sparse.Adjacency` (its arrays and cached conversions), a mapping or a
    sequence, each object once."""
    seen = set() if seen is None else seen
    if id(batch) in seen:
        return
    seen.add(id(batch))
    if isinstance(batch, Tensor):
        yield batch
        return
    if isinstance(batch, Adjacency):
        parts: Iterable[Any] = [batch.indptr, batch.indices, batch.values, *batch._cache.values()]
    elif isinstance(batch, BaseData):
        parts = [value for store in batch.stores for value in store.values()]
    elif isinstance(batch, Mapping):
        parts = batch.values()
    elif isinstance(batch, (list, tuple)):
        parts = batch
    else:
        return
    for value in parts:
        yield from tensors(value, seen)


def cuda_tensors(batch: Any) -> Iterator[Tensor]:
    """The dense CUDA tensors among a batch's :func:`tensors` (a sparse tensor's arrays are walked
    through the Adjacency that holds them; ``record_stream`` takes dense tensors only)."""
    return (t for t in tensors(batch) if t.is_cuda and t.layout == torch.strided)


class _Producer:
    """One pass over the loader: the thread making batches (started at the first batch asked for),
    and the iterator handing them out."""

    def __init__(self, owner: DevicePrefetcher) -> None:
        self.owner = owner
        self.items: queue.Queue[Any] = queue.Queue(maxsize=owner.depth)
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.done = False

    def _put(self, item: Any) -> bool:
        """Queue ``item`` unless asked to stop meanwhile (then ``False``)."""
        while not self.stopping.is_set():
            try:
                self.items.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        owner = self.owner
        try:
            if owner.stream is not None:
                torch.cuda.set_device(owner.device)
            limit = owner.limit() if owner.limit is not None else math.inf  # read once the trainer has set it
            with torch.cuda.stream(owner.stream) if owner.stream is not None else contextlib.nullcontext():
                batches = iter(owner.loader)
                try:
                    if not self._make(batches, limit):
                        return  # asked to stop: make no further batch
                finally:
                    close = getattr(batches, "close", None)
                    if close is not None:  # a pass cut short ends here (a recording publishes what it holds)
                        close()
        except BaseException as error:  # handed to the consumer, which raises it
            self._put(_Failure(error))
            return
        self._put(_END)

    def _make(self, batches: Iterator[Any], limit: float) -> bool:
        """Queue ``batches`` (each with an event on the thread's stream) up to ``limit`` of them, the
        trainer's count for the pass; ``False`` when asked to stop meanwhile."""
        owner = self.owner
        for made, batch in enumerate(batches, 1):
            event = None
            if owner.stream is not None:
                event = torch.cuda.Event()
                event.record(owner.stream)
            if not self._put((batch, event, owner.snapshot())) or self.stopping.is_set():
                return False
            if made >= limit:
                break
        return True

    def __iter__(self) -> _Producer:
        return self

    def __next__(self) -> Any:
        if self.done or self.stopping.is_set():  # finished, or a pass given up (its batches undrawn)
            raise StopIteration
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="gnnkit-prefetch", daemon=True)
            self.thread.start()
        item = self.items.get()
        if item is _END or isinstance(item, _Failure):
            self.done = True
            if item is _END:
                raise StopIteration
            raise item.error
        batch, event, state = item
        if event is not None:
            stream = torch.cuda.current_stream(self.owner.device)
            stream.wait_event(event)
            for tensor in cuda_tensors(batch):
                tensor.record_stream(stream)
        self.owner.handed_state = state
        return batch

    def stop(self) -> None:
        """End the thread (a batch it is making is finished first) and drop what it queued."""
        self.stopping.set()
        while self.thread is not None and self.thread.is_alive():
            try:
                item = self.items.get(timeout=0.05)
            except queue.Empty:
                continue
            if isinstance(item, _Failure):  # a batch made ahead failed: not raised (nobody asked for it), but said
                log.warning("prefetch: a batch made ahead and dropped failed: %r", item.error)


class DevicePrefetcher:
    """Iterates ``loader`` in a thread, on its own CUDA stream on a GPU, ``depth`` batches ahead.

    Args:
        loader: What to iterate (a sampled loader whose batches are made on ``device``); its other
            attributes (``node_sampler``, ...) are reached through this object.
        device: The device the batches are made on and trained on (a second stream on a GPU; the
            CPU gets the thread alone).
        depth: How many batches may wait, made, for the training loop (the thread makes the next
            meanwhile, up to the point of queueing it).
        state_source: The sampler whose random state the batches advance (``state_dict`` and
            ``load_state_dict``), so a checkpoint takes the state of the batches handed out rather
            than of those made, and a pass given up puts the state back there.
        limit: Returns how many batches a pass hands out at most (Lightning's
            ``num_training_batches`` under ``limit_train_batches``, fewer where ``max_steps`` ends the
            run within the epoch: :func:`gnnkit.data.datamodule.batches_wanted`; called when a pass
            starts making batches): the thread makes no batch beyond it, so a reuse recording holds
            just the batches trained on. ``None``: the whole loader.
    """

    def __init__(self, loader: Iterable[Any], device: torch.device | str, depth: int = DEFAULT_DEPTH,
                 state_source: Any = None, limit: Callable[[], float] | None = None) -> None:
        if depth < 1:
            raise ValueError(f"data.prefetch: expected batches made ahead >= 1 (0 turns it off), got {depth}")
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.loader = loader
        self.device = device
        self.depth = depth
        self.state_source = state_source
        self.limit = limit
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.handed_state: dict[str, Any] | None = None
        self._active: _Producer | None = None

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        if name == "loader":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def snapshot(self) -> dict[str, Any] | None:
        """The sampler's random state now (in the thread, right after a batch was made)."""
        return self.state_source.state_dict() if self.state_source is not None else None

    def __iter__(self) -> Iterator[Any]:
        self.stop()
        self.handed_state = self.snapshot()  # the state before the pass: nothing handed out yet
        self._active = _Producer(self)
        return self._active

    def sampler_state(self) -> dict[str, Any]:
        """The sampler's state as of the last batch handed out."""
        if self._active is not None and self.handed_state is not None:
            return self.handed_state
        return self.snapshot() or {}

    def stop(self) -> None:
        """End the pass in progress, if any (one given up, as after Lightning's sanity check), and put
        the sampler back to the state of the last batch handed out: what was made ahead is undrawn."""
        if self._active is None:
            return
        self._active.stop()
        self._active = None
        if self.state_source is not None and self.handed_state is not None:
            self.state_source.load_state_dict(self.handed_state)

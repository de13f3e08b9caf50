"""Checkpoint files written atomically, in the background, and read without unpickling code.

Lightning's ``TorchCheckpointIO`` saves through an fsspec transaction, which on a local disk writes
a temp file in the system temp folder and moves it over the target: across file systems that move
is a copy, a process killed during it leaves a truncated checkpoint under the final name, and
nothing is fsynced. :class:`AtomicCheckpointIO` writes beside the target, fsyncs and renames
(:func:`pipeline.atomic_write`), so ``last.ckpt`` and ``best.ckpt`` are always whole.

It writes them in a background thread, as Lightning's ``AsyncCheckpointIO`` does: ``last.ckpt`` is
saved at every epoch boundary and ``best.ckpt`` at every improvement, and serialising and fsyncing
a checkpoint takes about as long as a full-batch epoch on a GPU (9 ms for the arxiv twin's GCN on an
H200), so training waited on the disk (``bench/checkpoint_io.py``). The save copies the checkpoint's tensors to host memory at once (the
next optimizer step cannot change what is written), and one thread writes the copies in order. A
save to a path whose previous save is still queued replaces it (the newer state wins, the older is
never written), so the training thread never waits on the disk. A killed run therefore finds the
last checkpoint whose write finished: a resumed run continues from that epoch boundary, exactly as
before, and redoes the epochs after it. Reading a checkpoint, removing one and the end of a fit or
test wait for the writes; a write's error is raised at the next save or wait. Checkpoints holding
more than :data:`BACKGROUND_LIMIT_BYTES` of tensors are written in the caller's thread (a second
copy of them in host memory is not free).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.types import _PATH
from typing_extensions import override

from gnnkit.optim.state import tensor_bytes
from pipeline import atomic_write, log

#: Checkpoints with more tensor bytes than this are written in the caller's thread.
BACKGROUND_LIMIT_BYTES = 256 * 2**20


def _walk(item: Any, visit: Callable[[torch.Tensor], Any]) -> Any:
    """``item`` with ``visit`` applied to every tensor in its dicts, lists and tuples (what a
    checkpoint nests; 3x faster than ``apply_to_collection``, on every epoch's save)."""
    if isinstance(item, torch.Tensor):
        return visit(item)
    if isinstance(item, OrderedDict):  # a state_dict, whose _metadata holds its modules' versions
        copy = OrderedDict((key, _walk(value, visit)) for key, value in item.items())
        if hasattr(item, "_metadata"):
            copy._metadata = item._metadata  # type: ignore[attr-defined]
        return copy
    if isinstance(item, dict):
        return {key: _walk(value, visit) for key, value in item.items()}
    if isinstance(item, list):
        return [_walk(value, visit) for value in item]
    if type(item) is tuple:
        return tuple(_walk(value, visit) for value in item)
    return item


def host_copy(checkpoint: Any) -> Any:
    """``checkpoint`` with every tensor copied to host memory, detached (what is saved is this moment's)."""
    return _walk(checkpoint, lambda tensor: tensor.detach().to("cpu", copy=True))


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that saves with temp-file, fsync and rename in a background thread, and
    loads with ``torch.load(weights_only=True)`` unless told otherwise (gnnkit checkpoints hold plain
    types).

    Args:
        background: Write in a background thread (``False``: in the caller's, as Lightning's does).
    """

    def __init__(self, background: bool = True) -> None:
        super().__init__()
        self.background = background
        self._executor: ThreadPoolExecutor | None = None
        self._queued: dict[Path, Any] = {}  # path -> the newest checkpoint not yet taken by the writer
        self._futures: list[Future[None]] = []
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._torn_down = False  # saves after the fit's or test's end are written at once: nothing waits later

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Optional[Any] = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint: storage_options are not supported")
        self._raise_error()
        path = Path(path)
        if not self.background or self._torn_down or tensor_bytes(checkpoint) > BACKGROUND_LIMIT_BYTES:
            self.wait()  # an older queued save of this path must not land after this one
            _write(path, checkpoint)
            return
        copy = host_copy(checkpoint)
        with self._lock:
            queued = path in self._queued
            self._queued[path] = copy
        if not queued:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gnnkit-checkpoint")
            self._futures = [f for f in self._futures if not f.done()] + [self._executor.submit(self._take, path)]

    def _take(self, path: Path) -> None:
        """The writer: the newest checkpoint queued for ``path``, written."""
        with self._lock:
            checkpoint = self._queued.pop(path)
        try:
            _write(path, checkpoint)
        except BaseException as err:  # raised in the training thread at its next save or wait
            with self._lock:
                self._error = self._error or err

    def wait(self) -> None:
        """Return when every queued checkpoint is on disk; raise a write's error."""
        futures, self._futures = self._futures, []
        for future in futures:
            future.result()
        self._raise_error()

    def _raise_error(self) -> None:
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise RuntimeError(f"writing a checkpoint failed: {error}") from error

    @override
    def load_checkpoint(self, path: _PATH, map_location: Optional[Callable] = lambda storage, loc: storage,
                        weights_only: Optional[bool] = None) -> dict[str, Any]:
        self.wait()
        return super().load_checkpoint(path, map_location=map_location,
                                       weights_only=True if weights_only is None else weights_only)

    @override
    def remove_checkpoint(self, path: _PATH) -> None:
        self.wait()
        super().remove_checkpoint(path)

    @override
    def teardown(self) -> None:
        """The end of a fit or test: every checkpoint written, the thread stopped. Called while an
        exception is handled (Lightning tears down on SIGTERM, Ctrl-C and errors), a write's error
        is logged rather than raised, so that exception is the one that ends the run."""
        self._torn_down = True
        handling = sys.exc_info()[1] is not None
        try:
            self.wait()
        except RuntimeError as err:
            if not handling:
                raise
            log.warning("%s", err)
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None


def _write(path: Path, checkpoint: Any) -> None:
    atomic_write(path, lambda handle: torch.save(checkpoint, handle))


def wait_for_checkpoints(trainer: Any) -> None:
    """Wait until the trainer's checkpoint writes are on disk (a no-op for other checkpoint IO)."""
    io = getattr(trainer.strategy, "checkpoint_io", None)
    if isinstance(io, AtomicCheckpointIO):
        io.wait()

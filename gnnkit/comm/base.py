"""The interface every gradient communicator implements, and the layout of a flat gradient."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.futures import Future


@dataclass(frozen=True)
class Slot:
    """One parameter's gradient inside a flat buffer.

    Args:
        name: Parameter name (``module.named_parameters()``), the key of per-parameter state.
        shape: Parameter shape (PowerSGD compresses 2-D views of it).
        offset: First element in the flat buffer.
    """

    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def make_layout(names_shapes: list[tuple[str, tuple[int, ...]]]) -> list[Slot]:
    """Consecutive slots for ``(name, shape)`` pairs, in buffer order."""
    slots, offset = [], 0
    for name, shape in names_shapes:
        slot = Slot(name, tuple(shape), offset)
        slots.append(slot)
        offset += slot.numel
    return slots


def layout_numel(layout: list[Slot]) -> int:
    """Number of elements a layout covers."""
    return layout[-1].offset + layout[-1].numel if layout else 0


#: Collectives under their current names (torch >= 2.10 renamed ``*_into_tensor``/``*_tensor``).
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def device_future(device: torch.device) -> Future[Tensor]:
    """An empty future for results on ``device``.

    On CUDA it is a CUDA-aware future (``Future(devices=[device])``): setting its result records
    events on the current streams, and ``wait()`` / ``then`` make the caller's stream wait for
    them. A plain future does neither, so DDP would read a CUDA gradient before the kernels that
    write it have run (torch.futures' CUDA semantics).
    """
    return Future(devices=[device]) if device.type == "cuda" else Future()


def completed(tensor: Tensor) -> Future[Tensor]:
    """A future that already holds ``tensor`` (ordered after the work queued for it on CUDA)."""
    fut = device_future(tensor.device)
    fut.set_result(tensor)
    return fut


def read_on_this_stream(*tensors: Tensor | None) -> None:
    """Mark CUDA tensors made on another stream as read on the current one, so the caching
    allocator does not hand their memory out before this stream's kernels have read it.

    A future's ``then`` callback runs on a stream of its own: the tensors it reads but did not
    allocate (collective outputs, the launch's buffers) need this (``Tensor.record_stream``).
    ``None`` entries are skipped.
    """
    for t in tensors:
        if t is not None and t.is_cuda:
            t.record_stream(torch.cuda.current_stream(t.device))


class Communicator(ABC):
    """Averages a flat gradient over the ranks of a process group.

    Subclasses launch every collective in :meth:`launch` itself (gloo aborts with a collective
    mismatch when collectives are launched from ``Future.then`` callbacks, which run in gloo's
    worker threads in an order that differs between ranks) and keep ``then`` for local math.

    Per-parameter state (residuals, PowerSGD matrices) is keyed by parameter name, so DDP's bucket
    rebuild after the first step, a different ``bucket_mb`` or the fusion tuner never mixes it up.
    """

    #: Name of the mode (``GnnkitStrategy(comm=...)``).
    name: str = ""
    #: What a parameter receives depends on which parameters share its bucket (a top-k over the
    #: bucket), so DDP's regrouping after its first step makes a resumed run step differently.
    bucket_dependent: bool = False

    def __init__(self) -> None:
        self.group: dist.ProcessGroup | None = None
        self.steps = 0
        self.bytes_sent = 0  # payload this rank put on the wire, all steps

    def setup(self, group: dist.ProcessGroup | None) -> None:
        """Bind to a process group (``None``: the default group)."""
        self.group = group

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.group)

    @property
    def rank(self) -> int:
        return dist.get_rank(self.group)

    @abstractmethod
    def launch(self, flat: Tensor, layout: list[Slot]) -> Future[Tensor]:
        """Start averaging ``flat`` (1-D, laid out as ``layout``) over the group.

        Args:
            flat: This rank's gradients, 1-D. May be modified in place.
            layout: Which parameter owns which elements of ``flat``.

        Returns:
            A future holding the averaged (or compressed-then-averaged) gradient, same shape and
            dtype as ``flat``.
        """

    def step_done(self) -> None:
        """Called once per optimizer step, after the last bucket was launched."""
        self.steps += 1

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue after a restart (tensors on CPU)."""
        return {"steps": self.steps, "bytes_sent": self.bytes_sent}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (the counters too: the report covers every step)."""
        self.steps = int(state.get("steps", 0))
        self.bytes_sent = int(state.get("bytes_sent", 0))

    def info(self) -> dict[str, Any]:
        """Options and counters for logs and ``report.json``."""
        return {"mode": self.name, "steps": self.steps, "bytes_sent": self.bytes_sent}

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"

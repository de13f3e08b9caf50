"""Where the sampled loader samples: the CSR, features and labels on the training device.

Sampling on the CPU and copying every mini-batch to the GPU leaves a GPU idle most of a step
(DGL's GPU-sampling GraphSAGE on ogbn-products: 1.69 s an epoch against 5.75 s with CPU sampling,
<https://github.com/dmlc/dgl/pull/2716>). With ``data.sampler_device`` resolving to a CUDA device
the graph's CSR, features and labels are copied to that device once, the
:class:`~gnnkit.data.sampler.CSRNeighborSampler` draws there (its operations are device-generic,
and the native CUDA sampler takes over where it is built), and the loader gathers features and
builds the blocks there, so no mini-batch crosses the host link. The choice:

* ``"auto"``: the training device when it is a GPU, else the CPU;
* ``"cpu"``: the CPU, in ``num_workers`` loader processes as before;
* ``"cuda"``: the GPU (an error without one).

What does not fit in the device's free memory (with headroom for training) stays in host memory,
pinned, and the GPU reads it there through unified virtual addressing, as DGL's UVA sampling does
(<https://docs.dgl.ai/en/latest/guide/minibatch-gpu-sampling.html>): :func:`uva_view` gives a CUDA
tensor over page-locked host memory, so the same sampler and gathers run on it, each access
crossing the host link instead of a whole mini-batch. The CSR goes to the device first (sampling
reads it most randomly), then the labels, then the features. Where even pinning fails, sampling
falls back to the CPU. The log and ``report.json`` say where each array went and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from gnnkit.optim.state import tensor_bytes
from pipeline.progress import available_memory_mb

SAMPLER_DEVICES = ("auto", "cpu", "cuda")
#: Share of the device's free memory the graph may take; the rest is left to training.
DEVICE_SHARE = 0.5
#: Share of the host's available memory the pinned copies may lock (page-locked memory cannot be
#: swapped, and torch's pinned allocator rounds each block up to a power of two).
HOST_SHARE = 0.5


def check_sampler_device(choice: str) -> str:
    """``choice`` if it is one of :data:`SAMPLER_DEVICES` (and ``"cuda"`` only where torch sees a
    GPU). Safe before Lightning starts its processes: it counts GPUs without initialising CUDA.

    Raises:
        ValueError: Naming ``data.sampler_device`` and the choices.
    """
    if choice not in SAMPLER_DEVICES:
        raise ValueError(f"data.sampler_device: expected one of {list(SAMPLER_DEVICES)}, got {choice!r}")
    if choice == "cuda" and torch.cuda.device_count() == 0:  # NVML-based: no CUDA context, fork stays safe
        raise ValueError("data.sampler_device: 'cuda' needs a CUDA device, but torch sees none (use 'auto' or 'cpu')")
    return choice


def resolve_sampler_device(choice: str, training: torch.device) -> torch.device:
    """The device the sampler runs on.

    Args:
        choice: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        training: The device the model trains on (the strategy's root device).

    Raises:
        ValueError: ``"cuda"`` without a CUDA device.
    """
    check_sampler_device(choice)
    if choice == "cpu" or (choice == "auto" and training.type != "cuda"):
        return torch.device("cpu")
    return training if training.type == "cuda" else torch.device("cuda", torch.cuda.current_device())


#: The graph's arrays in the order they claim device memory: the CSR first (sampling reads it most
#: randomly), then labels, then the features (the bulk, read a row at a time).
DEVICE_ORDER = ("indptr", "indices", "y", "x")


@dataclass(frozen=True)
class SamplingPlacement:
    """Where sampling runs and where it reads the graph, for the run log and ``report.json``.

    Attributes:
        device: The sampler's device (``"cpu"``, ``"cuda:0"``).
        graph_memory: Where the CSR, features and labels are read from: ``"host"`` (sampling on the
            CPU), ``"device"`` (all in device memory), ``"pinned"`` (all in pinned host memory, read
            through unified addressing) or ``"device+pinned"``.
        graph_bytes: Their size in bytes.
        reason: One line saying why.
        arrays: Per array name, ``"device"`` or ``"pinned"`` (empty when sampling on the CPU).
    """

    device: str
    graph_memory: str
    graph_bytes: int
    reason: str
    arrays: dict[str, str] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        return {"device": self.device, "graph_memory": self.graph_memory, "graph_mb": round(self.graph_bytes / 2**20, 1),
                "reason": self.reason, "arrays": dict(self.arrays)}


def free_device_bytes(device: torch.device) -> int:
    """Free memory of ``device`` (what :func:`torch.cuda.mem_get_info` reports)."""
    return int(torch.cuda.mem_get_info(device)[0])


def available_host_bytes() -> int:
    """Memory the host can still give (:func:`pipeline.progress.available_memory_mb`; unbounded where unknown)."""
    free_mb = available_memory_mb()
    return 2**62 if free_mb is None else int(free_mb * 2**20)


def pinned_bytes(nbytes: int) -> int:
    """What pinning ``nbytes`` locks: torch's pinned allocator rounds a block up to a power of two."""
    return 1 << max(nbytes - 1, 0).bit_length()


def plan_placement(tensors: dict[str, Tensor | None], wanted: torch.device, free_bytes: int | None = None,
                   asked: str = "auto", host_bytes: int | None = None) -> SamplingPlacement:
    """Decide where to sample and where each array lives: on ``wanted`` in the order of
    :data:`DEVICE_ORDER` while they fit in :data:`DEVICE_SHARE` of its free memory, the rest in
    pinned host memory read through unified addressing (:func:`uva_view`), unless pinning them
    would lock more than :data:`HOST_SHARE` of the host's available memory: then the CPU samples.

    Args:
        tensors: The graph's arrays by name (``indptr``, ``indices``, ``x``, ``y``; ``None`` skipped).
        wanted: The resolved sampler device (:func:`resolve_sampler_device`).
        free_bytes: Free memory of ``wanted`` (default: asked from the device).
        asked: The ``data.sampler_device`` choice, for the reason line.
        host_bytes: Available host memory (default: :func:`available_host_bytes`).
    """
    present = {name: t for name, t in tensors.items() if t is not None}
    size = tensor_bytes(list(present.values()))
    if wanted.type == "cpu":
        why = "training on the CPU" if asked == "auto" else "data.sampler_device is 'cpu'"
        return SamplingPlacement("cpu", "host", size, f"sampling on the CPU ({why})")
    free = free_device_bytes(wanted) if free_bytes is None else free_bytes
    budget, arrays, placed = DEVICE_SHARE * free, {}, 0
    for name in sorted(present, key=lambda n: DEVICE_ORDER.index(n) if n in DEVICE_ORDER else len(DEVICE_ORDER)):
        fits = placed + tensor_bytes(present[name]) <= budget
        arrays[name] = "device" if fits else "pinned"
        placed += tensor_bytes(present[name]) if fits else 0
    locked = sum(pinned_bytes(tensor_bytes(present[n])) for n, k in arrays.items() if k == "pinned")
    host = available_host_bytes() if host_bytes is None else host_bytes
    if locked > HOST_SHARE * host:
        return SamplingPlacement("cpu", "host", size,
                                 f"sampling on the CPU: the graph ({size / 2**30:.2f} GiB) does not fit in "
                                 f"{DEVICE_SHARE:.0%} of {wanted}'s free {free / 2**30:.2f} GiB, and pinning the rest "
                                 f"would lock {locked / 2**30:.2f} GiB, over {HOST_SHARE:.0%} of the host's available "
                                 f"{host / 2**30:.2f} GiB")
    kinds = set(arrays.values())
    memory = "device+pinned" if len(kinds) > 1 else kinds.pop() if kinds else "device"
    where = (f"CSR, features and labels ({size / 2**30:.2f} GiB) in device memory" if memory == "device" else
             f"{', '.join(n for n, k in arrays.items() if k == 'pinned')} ({(size - placed) / 2**30:.2f} GiB) in "
             f"pinned host memory read through unified addressing, since {size / 2**30:.2f} GiB exceeds "
             f"{DEVICE_SHARE:.0%} of {wanted}'s free {free / 2**30:.2f} GiB")
    return SamplingPlacement(str(wanted), memory, size, f"sampling on {wanted}: {where}", arrays)


def host_fallback(placement: SamplingPlacement, error: Exception) -> SamplingPlacement:
    """The placement when copying the graph to the device or pinning it failed: sampling on the
    CPU, saying why (pinned blocks already cached are handed back to the system)."""
    empty_cache = getattr(torch._C, "_host_emptyCache", None)
    if empty_cache is not None and torch.cuda.is_available():
        empty_cache()
    return SamplingPlacement("cpu", "host", placement.graph_bytes,
                             f"sampling on the CPU: placing the graph ({placement.graph_bytes / 2**30:.2f} GiB) "
                             f"for {placement.device} ({placement.graph_memory}) failed ({error})")


class _PinnedArray:
    """A pinned host tensor presented to CUDA as raw bytes through ``__cuda_array_interface__``
    (<https://numba.readthedocs.io/en/stable/cuda/cuda_array_interface.html>); holding it keeps the
    host memory alive for as long as a CUDA view of it lives."""

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor
        self.__cuda_array_interface__ = cuda_array_interface(tensor)


def cuda_array_interface(tensor: Tensor) -> dict[str, Any]:
    """The ``__cuda_array_interface__`` (version 3) of a contiguous host tensor's bytes."""
    return {"shape": (tensor.numel() * tensor.element_size(),), "typestr": "|u1", "strides": None,
            "data": (tensor.data_ptr(), False), "version": 3}


def uva_view(tensor: Tensor, device: torch.device) -> Tensor:
    """A CUDA tensor over the memory of a pinned host tensor (no copy): kernels on ``device`` read
    it across the host link through unified virtual addressing.

    Args:
        tensor: A contiguous tensor in page-locked host memory (``tensor.pin_memory()``).
        device: The CUDA device that reads it.

    Raises:
        ValueError: ``tensor`` is not a contiguous pinned host tensor, or ``device`` is not CUDA.
    """
    if device.type != "cuda":
        raise ValueError(f"uva_view: unified addressing reads host memory from a CUDA device, not {device}")
    if tensor.device.type != "cpu" or not tensor.is_contiguous() or not tensor.is_pinned():
        raise ValueError(f"uva_view: needs a contiguous pinned host tensor (tensor.pin_memory()), got one on "
                         f"{tensor.device}, contiguous={tensor.is_contiguous()}")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if tensor.numel() == 0:
        return torch.empty(tensor.shape, dtype=tensor.dtype, device=device)
    with torch.cuda.device(device):
        raw = torch.as_tensor(_PinnedArray(tensor), device=device)
    if raw.data_ptr() != tensor.data_ptr() or raw.device != device:  # a torch that copied instead of aliasing
        raise RuntimeError(f"uva_view: torch {torch.__version__} copied the pinned array to {raw.device} "
                           f"instead of mapping it for {device}")
    return raw.view(tensor.dtype).view(tensor.shape)


def place(tensor: Tensor | None, where: str, device: torch.device) -> Tensor | None:
    """``tensor`` where a :class:`SamplingPlacement` put it: a copy in device memory, or a
    :func:`uva_view` of a pinned copy."""
    if tensor is None:
        return None
    if where == "device":
        return tensor.to(device, copy=True)
    return uva_view(tensor.contiguous().pin_memory(), device)

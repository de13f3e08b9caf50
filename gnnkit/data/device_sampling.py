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

A graph whose CSR, features and labels do not fit in the device's free memory (with headroom for
training) is sampled on the CPU instead, and the log and ``report.json`` say so and why. (Reading a
graph from pinned host memory through unified addressing, as DGL's UVA sampling does, needs the
CUDA sampler to accept host pointers; that is not built yet.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from gnnkit.optim.state import tensor_bytes

SAMPLER_DEVICES = ("auto", "cpu", "cuda")
#: Share of the device's free memory the graph may take; the rest is left to training.
DEVICE_SHARE = 0.5


def check_sampler_device(choice: str) -> str:
    """``choice`` if it is one of :data:`SAMPLER_DEVICES`.

    Raises:
        ValueError: Naming ``data.sampler_device`` and the choices.
    """
    if choice not in SAMPLER_DEVICES:
        raise ValueError(f"data.sampler_device: expected one of {list(SAMPLER_DEVICES)}, got {choice!r}")
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
    if not torch.cuda.is_available():
        raise ValueError("data.sampler_device: 'cuda' needs a CUDA device, but torch.cuda.is_available() is False "
                         "(use 'auto' or 'cpu')")
    return training if training.type == "cuda" else torch.device("cuda", torch.cuda.current_device())


@dataclass(frozen=True)
class SamplingPlacement:
    """Where sampling runs and why, for the run log and ``report.json``.

    Attributes:
        device: The sampler's device (``"cpu"``, ``"cuda:0"``).
        graph_memory: Where the CSR, features and labels are read from: ``"host"`` or ``"device"``.
        graph_bytes: Their size in bytes.
        reason: One line saying why.
    """

    device: str
    graph_memory: str
    graph_bytes: int
    reason: str

    def report(self) -> dict[str, Any]:
        return {"device": self.device, "graph_memory": self.graph_memory, "graph_mb": round(self.graph_bytes / 2**20, 1),
                "reason": self.reason}


def free_device_bytes(device: torch.device) -> int:
    """Free memory of ``device`` (what :func:`torch.cuda.mem_get_info` reports)."""
    return int(torch.cuda.mem_get_info(device)[0])


def plan_placement(tensors: list[Tensor | None], wanted: torch.device, free_bytes: int | None = None,
                   asked: str = "auto") -> SamplingPlacement:
    """Decide where to sample: on ``wanted`` when the graph fits in :data:`DEVICE_SHARE` of its free
    memory, otherwise on the host.

    Args:
        tensors: The CSR, features and labels (``None`` entries are skipped).
        wanted: The resolved sampler device (:func:`resolve_sampler_device`).
        free_bytes: Free memory of ``wanted`` (default: asked from the device).
        asked: The ``data.sampler_device`` choice, for the reason line.
    """
    size = tensor_bytes(tensors)
    if wanted.type == "cpu":
        why = "training on the CPU" if asked == "auto" else "data.sampler_device is 'cpu'"
        return SamplingPlacement("cpu", "host", size, f"sampling on the CPU ({why})")
    free = free_device_bytes(wanted) if free_bytes is None else free_bytes
    if size > DEVICE_SHARE * free:
        return SamplingPlacement("cpu", "host", size,
                                 f"sampling on the CPU: the graph ({size / 2**30:.2f} GiB) does not fit in "
                                 f"{DEVICE_SHARE:.0%} of {wanted}'s free {free / 2**30:.2f} GiB")
    return SamplingPlacement(str(wanted), "device", size,
                             f"sampling on {wanted}: CSR, features and labels ({size / 2**30:.2f} GiB) in device memory")

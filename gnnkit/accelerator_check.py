"""``trainer.accelerator`` checked against what this machine has, before the data is read.

Lightning refuses an accelerator it cannot use only when the ``Trainer`` is built, after the data
module has read the graph, and for some (``tpu`` without ``torch_xla``) with a traceback.
:func:`check_accelerator` says in one line what is missing and which accelerators this machine has.
"""

from __future__ import annotations

from typing import Any

from gnnkit.resume import ResumeError


def check_accelerator(name: Any) -> None:
    """Refuse ``trainer.accelerator`` naming one Lightning cannot use on this machine, before the
    data is read, naming what it lacks: a GPU (``gpu``, ``cuda``, ``mps``), ``torch_xla`` or a TPU
    (``tpu``: Lightning's ``ModuleNotFoundError`` traceback), the ``lightning-habana`` package
    (``hpu``). Names Lightning does not know are left to its own one-line refusal, and an
    ``Accelerator`` given as a class to Lightning.

    Raises:
        ResumeError: ``trainer.accelerator: tpu cannot be used here: it needs torch_xla>=1.13 (not
            installed); expected one this machine has: cpu (or auto)``.
    """
    missing = _accelerator_missing(name) if isinstance(name, str) and name != "auto" else None
    if missing is not None:
        raise ResumeError(f"trainer.accelerator: {name} cannot be used here: it needs {missing}; expected one this "
                          f"machine has: {', '.join(_usable_accelerators())} (or auto)")


def torch_sees() -> str:
    """This torch, for a line about GPUs: ``torch 2.13.0+cpu, a CPU-only build``."""
    import torch

    build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
    return f"torch {torch.__version__}, {build}"


def _gpu_missing() -> str:
    """What this torch lacks to run on a GPU: ``a GPU (torch 2.13.0+cpu, a CPU-only build, sees none)``."""
    return f"a GPU ({torch_sees()}, sees none)"


def _accelerator_missing(name: str) -> str | None:
    """What accelerator ``name`` needs and this machine lacks; ``None`` if it can be used, or if
    Lightning does not know the name (it refuses that itself, listing the names)."""
    from lightning.pytorch.accelerators import AcceleratorRegistry, CUDAAccelerator, MPSAccelerator

    if name == "gpu":
        return None if CUDAAccelerator.is_available() or MPSAccelerator.is_available() else _gpu_missing()
    if name == "hpu" and name not in AcceleratorRegistry:
        return "the lightning-habana package (not installed) and an Intel Gaudi device"
    if name not in AcceleratorRegistry:
        return None
    accelerator = AcceleratorRegistry[name]["accelerator"]
    if accelerator.is_available():
        return None
    if name == "cuda":
        return _gpu_missing()
    if name == "mps":
        return "an Apple silicon GPU (torch's MPS backend is not available here)"
    if name == "tpu":
        from lightning.fabric.accelerators.xla import _XLA_AVAILABLE

        requirement = getattr(_XLA_AVAILABLE, "requirement", "torch_xla")
        return f"{requirement} (not installed)" if not _XLA_AVAILABLE else "a TPU (torch_xla sees none)"
    return f"what Lightning's {accelerator.__name__} needs (it finds it unavailable)"


def _usable_accelerators() -> list[str]:
    """The accelerator names Lightning can use on this machine (``cpu`` at least)."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    usable = [name for name in sorted(AcceleratorRegistry.available_accelerators())
              if AcceleratorRegistry[name]["accelerator"].is_available()]
    return [*usable, "gpu"] if {"cuda", "mps"} & set(usable) else usable

"""Optimizers and lr schedulers from LightningCLI specs (``{"class_path", "init_args"}``).

``gnnkit run`` links the top-level ``optimizer:`` and ``lr_scheduler:`` sections (``--optimizer
Adam``, ``--optimizer gnnkit.optim.GaLoreAdamW --optimizer.rank 32``) into
:class:`~gnnkit.module.NodeClassifier`, which builds them here over its own parameter groups, so
``weight_decay_scope`` keeps working with any optimizer.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from gnnkit.optim.foreign_state import refuse_foreign_state

#: The keys of a LightningCLI class spec.
SPEC_KEYS = ("class_path", "init_args")


def _as_dict(spec: Any, field: str) -> dict[str, Any]:
    """``spec`` as a plain ``{"class_path", "init_args"}`` dict (jsonargparse may hand a Namespace)."""
    if hasattr(spec, "as_dict"):
        spec = spec.as_dict()
    if not isinstance(spec, dict) or not isinstance(spec.get("class_path"), str):
        raise ValueError(f"{field}: expected {{class_path: ..., init_args: {{...}}}}, got {spec!r}")
    unknown = set(spec) - set(SPEC_KEYS)
    if unknown:
        raise ValueError(f"{field}: unexpected keys {sorted(unknown)}; expected class_path and init_args")
    return {"class_path": spec["class_path"], "init_args": dict(spec.get("init_args") or {})}


def resolve_class(class_path: str, field: str) -> type:
    """Import ``a.b.C``; a bare name is looked up in ``torch.optim`` / ``torch.optim.lr_scheduler``."""
    if "." not in class_path:
        for module in (torch.optim, torch.optim.lr_scheduler):
            if hasattr(module, class_path):
                return getattr(module, class_path)
        raise ValueError(f"{field}: unknown class {class_path!r}; give its import path (e.g. torch.optim.Adam)")
    module_name, name = class_path.rsplit(".", 1)
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"{field}: cannot import {class_path!r} ({error})") from None


def build_optimizer(spec: Any, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
    """The optimizer ``spec`` names, over ``groups`` (its ``init_args`` are the group defaults)."""
    spec = _as_dict(spec, "optimizer")
    cls = resolve_class(spec["class_path"], "optimizer")
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise ValueError(f"optimizer: {spec['class_path']} is not a torch.optim.Optimizer")
    return cls(groups, **spec["init_args"])


def build_scheduler(spec: Any, optimizer: torch.optim.Optimizer, interval: str = "epoch") -> dict[str, Any]:
    """Lightning's ``lr_scheduler`` dict for the scheduler ``spec`` names, stepped per ``interval``;
    a ``ReduceLROnPlateau`` watches its ``monitor`` (default ``val_metric``)."""
    spec = _as_dict(spec, "lr_scheduler")
    cls = resolve_class(spec["class_path"], "lr_scheduler")
    init = dict(spec["init_args"])
    if isinstance(cls, type) and issubclass(cls, torch.optim.lr_scheduler.ReduceLROnPlateau):
        monitor = init.pop("monitor", None) or "val_metric"
        return {"scheduler": cls(optimizer, **init), "interval": interval, "monitor": monitor}
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.lr_scheduler.LRScheduler)):
        raise ValueError(f"lr_scheduler: {spec['class_path']} is not a torch lr scheduler")
    return {"scheduler": cls(optimizer, **init), "interval": interval}


def module_optimizer(module: torch.nn.Module, groups: list[dict[str, Any]], spec: Any, lr: float,
                     weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """What a gnnkit LightningModule trains with: Adam (``lr``, ``weight_decay`` as the group
    defaults) over ``groups``, fused where :func:`fusable` says so, or the optimizer ``spec`` names;
    an optimizer with a ``bind(module)`` method (K-FAC, which hooks the linear layers) is bound to
    ``module``. Its ``load_state_dict`` refuses another optimizer's state (:mod:`.foreign_state`)."""
    if spec is None:
        optimizer: torch.optim.Optimizer = torch.optim.Adam(groups, lr=lr, weight_decay=weight_decay,
                                                            fused=fusable(module, groups) or None)
    else:
        optimizer = build_optimizer(spec, groups)
    if callable(getattr(optimizer, "bind", None)):
        optimizer.bind(module)
    return refuse_foreign_state(optimizer)


def fusable(module: torch.nn.Module, groups: list[dict[str, Any]]) -> bool:
    """Whether Adam may take its fused CUDA kernel (one launch for all parameters instead of a few a
    tensor, <https://pytorch.org/docs/stable/generated/torch.optim.Adam.html>): every parameter a
    floating CUDA tensor, and a trainer (if any) in 32-bit precision without gradient clipping
    (Lightning's gradient scaler cannot clip for an optimizer that unscales by itself)."""
    params = [p for group in groups for p in group["params"]]
    if not params or not all(p.is_cuda and p.is_floating_point() for p in params):
        return False
    trainer = getattr(module, "_trainer", None)
    return trainer is None or (str(trainer.precision) in ("32-true", "32") and not trainer.gradient_clip_val)


def with_scheduler(optimizer: torch.optim.Optimizer, spec: Any) -> torch.optim.Optimizer | dict[str, Any]:
    """``configure_optimizers``' answer: the optimizer, with the scheduler ``spec`` names if any."""
    if spec is None:
        return optimizer
    return {"optimizer": optimizer, "lr_scheduler": build_scheduler(spec, optimizer)}

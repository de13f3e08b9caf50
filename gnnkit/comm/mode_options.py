"""What each communication mode takes: its own options of :class:`GnnkitStrategy`, checked alike for
every mode, and the gradients it can reduce."""

from __future__ import annotations

from typing import Any

from torch import nn

from gnnkit import setting_checks

#: The options only some modes read (the others, warm-up, buckets, timeouts and DDP's, apply to all).
MODE_OPTIONS: dict[str, tuple[str, ...]] = {
    "streams": ("multistream",),
    "density": ("topk_a2a", "topk_allgather"),
    "gather": ("topk_a2a",),
    "sign_error_feedback": ("signsgd",),
    "sign_momentum": ("signsgd",),
    "powersgd_rank": ("powersgd",),
}
#: Largest ``bucket_mb``: DDP counts bucket bytes in a C++ int64 (1e13 MiB overflowed inside it).
MAX_BUCKET_MB = 1 << 20


def check_numbers(density: Any, sign_momentum: Any, bucket_mb: Any) -> None:
    """``density`` in ``(0, 1]``, ``sign_momentum`` in ``[0, 1)`` and ``bucket_mb`` a size DDP takes,
    whatever the mode (text or ``None`` was a raw comparison error, ``True`` a density of 1).

    Raises:
        ValueError: Naming the option and what it takes.
    """
    setting_checks.fraction("density", density)
    setting_checks.below_one("sign_momentum", sign_momentum)
    if bucket_mb != "auto" and (not setting_checks.is_finite(bucket_mb, 0, MAX_BUCKET_MB) or bucket_mb == 0):
        raise ValueError(f"bucket_mb: expected 'auto' or a size in MiB in (0, {MAX_BUCKET_MB}], got {bucket_mb!r}")


def check_switches(fixed_buckets: Any, **switches: Any) -> None:
    """Each of ``switches`` is a bool, ``fixed_buckets`` a bool or ``None``: the text ``"false"`` was
    taken as true and turned error feedback on.

    Raises:
        ValueError: Naming the first switch that is not.
    """
    for name, value in switches.items():
        setting_checks.switch(name, value)
    if fixed_buckets is not None and not isinstance(fixed_buckets, bool):
        raise ValueError(f"fixed_buckets: expected true, false or null, got {fixed_buckets!r}")


def unused_options(mode: str, given: dict[str, Any], defaults: dict[str, Any]) -> list[str]:
    """``name=value`` for each option set away from its default that ``mode`` does not read, with
    the modes that do."""
    return [f"{name}={given[name]!r} (read by {', '.join(modes)})" for name, modes in MODE_OPTIONS.items()
            if mode not in modes and given[name] != defaults[name]]


def sparse_gradient_layers(module: nn.Module) -> list[str]:
    """The layers of ``module`` that give sparse gradients (``nn.Embedding``/``EmbeddingBag`` with
    ``sparse=True``): only dense all-reduce sums those; the other modes slice, sign or factor a
    dense buffer."""
    return [name or type(layer).__name__ for name, layer in module.named_modules()
            if isinstance(layer, (nn.Embedding, nn.EmbeddingBag)) and layer.sparse]

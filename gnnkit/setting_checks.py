"""Checks of a recipe's numeric settings, made when the module or datamodule is built.

A bad value found there is one line naming the recipe field, before ``gnnkit run`` makes a run folder
(:func:`gnnkit.run.run`); the model's checks that need no data run before the datamodule reads any
(:meth:`gnnkit.task_module.TaskModule.check_settings`). Left alone, the same value fails only
inside ``fit``: a traceback from torch's ``DataLoader`` or optimizer, with a run folder half
written. Lightning's own ``trainer.*`` settings are checked by Lightning in the same way.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any


class SettingRefused(ValueError):
    """A setting refused only once the run knows its data and ranks (a module's ``setup``): ``gnnkit
    run`` says it in one line and removes the run folder it made, as for a refusal at parse time."""


def is_whole(value: Any, low: float = -math.inf) -> bool:
    """An integer (numpy's too, not a bool) ``>= low``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low


def is_finite(value: Any, low: float = -math.inf, high: float = math.inf) -> bool:
    """A finite real number (not a bool) in ``[low, high]``."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return real and math.isfinite(value) and low <= value <= high


def at_least(field: str, value: Any, minimum: int, what: str) -> None:
    """``value`` is an int ``>= minimum``.

    Raises:
        ValueError: ``"<field>: expected <what>, got <value>"``.
    """
    if not is_whole(value, minimum):
        raise ValueError(f"{field}: expected {what}, got {value!r}")


def optional_at_least(field: str, value: Any, minimum: int, what: str) -> None:
    """:func:`at_least` where ``None`` (the default that follows another setting) is allowed too."""
    if value is not None:
        at_least(field, value, minimum, what)


def positive_number(field: str, value: Any, zero: bool = False) -> None:
    """``value`` is a finite number above 0 (or at least 0 with ``zero``), e.g. a learning rate."""
    if not is_finite(value, 0) or (value == 0 and not zero):
        raise ValueError(f"{field}: expected a finite number {'>= 0' if zero else '> 0'}, got {value!r}")


def switch(field: str, value: Any) -> None:
    """``value`` is a bool (the text ``"false"`` is true to Python, and was taken so)."""
    if not isinstance(value, bool):
        raise ValueError(f"{field}: expected true or false, got {value!r}")


def below_one(field: str, value: Any) -> None:
    """``value`` is a number in ``[0, 1)``: a decay, a momentum."""
    if not is_finite(value, 0) or value >= 1:
        raise ValueError(f"{field}: expected a number in [0, 1), got {value!r}")


def fraction(field: str, value: Any) -> None:
    """``value`` is a fraction in ``(0, 1]``: a density, a threshold."""
    if not is_finite(value, 0, 1) or value == 0:
        raise ValueError(f"{field}: expected a fraction in (0, 1], got {value!r}")


def fanouts(field: str, value: Sequence[Any] | None) -> list[int] | None:
    """Neighbours sampled per layer: ``None`` (the default), or at least one int ``>= 0`` or ``-1``
    (all neighbours), as PyG's ``NeighborLoader`` takes them.

    Returns:
        The fan-outs as a list, or ``None``.
    """
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) == 0 or any(
            not is_whole(k, -1) for k in value):
        raise ValueError(f"{field}: expected a list of at least one fan-out per layer, each >= 0 or -1 "
                         f"(all neighbours), got {value!r}")
    return list(value)


def model_settings(lr: Any, weight_decay: Any, width_field: str, width: Any) -> None:
    """What every gnnkit module takes: ``model.lr`` > 0, ``model.weight_decay`` >= 0 and a layer
    width (``model.hidden_channels``, ``model.emb_dim``) >= 1."""
    positive_number("model.lr", lr)
    positive_number("model.weight_decay", weight_decay, zero=True)
    at_least(width_field, width, 1, "a layer width >= 1")


def betas(field: str, value: Any) -> None:
    """A pair of averaging coefficients, each a number in ``[0, 1)`` (Adam's ``betas``)."""
    pair = isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2
    if not pair or not all(is_finite(b, 0) and b < 1 for b in value):
        raise ValueError(f"{field}: expected two numbers in [0, 1), got {value!r}")

"""argparse types of the ``gnnkit`` subcommands: numbers refused at the command line, in argparse's
one line naming the flag, when no result could be made of them (a rank count of 1, a zero bandwidth,
a negative width)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any


def in_range(kind: type, low: float, high: float = math.inf, above: bool = False) -> Callable[[str], Any]:
    """An argparse ``type``: a finite ``kind`` (``int`` or ``float``) in ``[low, high]``, or in
    ``(low, high]`` with ``above``."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not math.isfinite(value) or value < low or (above and value == low) or value > high:
            bound = f"{'>' if above else '>='} {low:g}" + (f" and <= {high:g}" if high < math.inf else "")
            raise argparse.ArgumentTypeError(f"expected a value {bound}, got {text}")
        return value
    return parse

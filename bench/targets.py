"""An issue's targets, checked against a benchmark's ``summary``.

Each target bounds one summary value. :func:`verdicts` says, for each, the value measured, the bound
and whether it is met. A benchmark stores the verdicts in its JSON, so a result file says which
targets its run reached, and :func:`print_verdicts` prints them under the run's table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    """A bound on one summary value.

    Attributes:
        path: The keys from the summary down to the value: ``("sampler_speedup",)``, or
            ``("epoch_auto_vs_best_fixed", "gcn full-batch")`` inside a nested object.
        bound: The value to reach.
        at_most: Lower is better: the value must be ``<= bound`` (else ``>= bound``).
        what: The target in the issue's words.
    """

    path: tuple[str, ...]
    bound: float
    at_most: bool = False
    what: str = ""

    @property
    def name(self) -> str:
        """The summary key, nested keys in brackets: ``epoch_auto_vs_best_fixed[gcn full-batch]``."""
        return self.path[0] + "".join(f"[{key}]" for key in self.path[1:])

    def met(self, value: float | None) -> bool | None:
        """Whether ``value`` reaches the bound; ``None`` where nothing was measured."""
        if value is None or math.isnan(value):
            return None
        return value <= self.bound if self.at_most else value >= self.bound


def value_at(summary: dict[str, Any], path: tuple[str, ...]) -> float | None:
    """The number at ``path`` in ``summary``; ``None`` where a key is missing or the value is not a number."""
    value: Any = summary
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def verdicts(summary: dict[str, Any], targets: list[Target], source: str) -> list[dict[str, Any]]:
    """One JSON object per target: its key, the value measured, the bound, and whether it is met.

    Args:
        summary: A benchmark's summary object.
        targets: The targets that apply to this run.
        source: Where the targets come from (``"issue 17"``), recorded with each.
    """
    out = []
    for target in targets:
        value = value_at(summary, target.path)
        out.append({"key": target.name, "value": value, "op": "<=" if target.at_most else ">=",
                    "bound": target.bound, "met": target.met(value), "what": target.what, "source": source})
    return out


def print_verdicts(rows: list[dict[str, Any]]) -> None:
    """The verdicts as a table: key, value, bound, met / MISSED / not measured."""
    if not rows:
        return
    width = max(len(r["key"]) for r in rows)
    print(f"\ntargets ({', '.join(dict.fromkeys(r['source'] for r in rows))}):")
    for r in rows:
        value = "-" if r["value"] is None else f"{r['value']:.3f}"
        verdict = {True: "met", False: "MISSED", None: "not measured"}[r["met"]]
        print(f"  {r['key']:{width}} {value:>9} {r['op']} {r['bound']:<6g} {verdict:12} {r['what']}")

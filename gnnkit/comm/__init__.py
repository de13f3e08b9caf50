"""Gradient communication for data-parallel training: ``GnnkitStrategy`` and its modes.

The names below load their modules on first use (PEP 562), so ``gnnkit comm plan`` (the cost model,
plain Python) starts without importing torch or Lightning. ``import gnnkit`` already makes
``"gnnkit"`` and ``"gnnkit_<mode>"`` known to Lightning's ``StrategyRegistry``
(:mod:`gnnkit.registration`); importing :mod:`gnnkit.comm.strategy` puts the class itself there.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Exported name -> the module that defines it.
_HOMES = {
    "AllReduce": "gnnkit.comm.allreduce", "Communicator": "gnnkit.comm.base", "Slot": "gnnkit.comm.base",
    "DeAR": "gnnkit.comm.dear", "CommHook": "gnnkit.comm.fusion", "FusionTuner": "gnnkit.comm.fusion",
    "PeerWatch": "gnnkit.comm.peer_watch",
    "MultiStreamAllReduce": "gnnkit.comm.multistream", "PowerSGD": "gnnkit.comm.powersgd",
    "MODES": "gnnkit.comm.registry", "resolve_mode": "gnnkit.comm.registry", "SignSGD": "gnnkit.comm.signsgd",
    "GnnkitStrategy": "gnnkit.comm.strategy", "TopKA2A": "gnnkit.comm.topk_a2a",
    "TopKAllGather": "gnnkit.comm.topk_allgather",
}

__all__ = [
    "AllReduce", "CommHook", "Communicator", "DeAR", "FusionTuner", "GnnkitStrategy", "MODES",
    "MultiStreamAllReduce", "PeerWatch", "PowerSGD", "SignSGD", "Slot", "TopKA2A", "TopKAllGather", "resolve_mode",
]


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` and keep the name here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


if TYPE_CHECKING:
    from gnnkit.comm.allreduce import AllReduce
    from gnnkit.comm.base import Communicator, Slot
    from gnnkit.comm.dear import DeAR
    from gnnkit.comm.fusion import CommHook, FusionTuner
    from gnnkit.comm.multistream import MultiStreamAllReduce
    from gnnkit.comm.powersgd import PowerSGD
    from gnnkit.comm.registry import MODES, resolve_mode
    from gnnkit.comm.signsgd import SignSGD
    from gnnkit.comm.strategy import GnnkitStrategy
    from gnnkit.comm.topk_a2a import TopKA2A
    from gnnkit.comm.topk_allgather import TopKAllGather

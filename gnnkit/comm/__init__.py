"""Gradient communication for data-parallel training: ``GnnkitStrategy`` and its modes.

Importing this package registers ``"gnnkit"`` and ``"gnnkit_<mode>"`` with Lightning's
``StrategyRegistry``.
"""

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

__all__ = [
    "AllReduce", "CommHook", "Communicator", "DeAR", "FusionTuner", "GnnkitStrategy", "MODES",
    "MultiStreamAllReduce", "PowerSGD", "SignSGD", "Slot", "TopKA2A", "TopKAllGather", "resolve_mode",
]

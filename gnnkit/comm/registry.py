"""Communication modes by name: the one place strings become communicator classes."""

from __future__ import annotations

from typing import Callable

from gnnkit.comm.allreduce import AllReduce
from gnnkit.comm.base import Communicator
from gnnkit.comm.dear import DeAR
from gnnkit.comm.multistream import MultiStreamAllReduce
from gnnkit.comm.powersgd import PowerSGD
from gnnkit.comm.signsgd import SignSGD
from gnnkit.comm.topk_a2a import TopKA2A
from gnnkit.comm.topk_allgather import TopKAllGather

MODES: dict[str, type[Communicator]] = {}


def register(name: str) -> Callable[[type[Communicator]], type[Communicator]]:
    """Class decorator adding a communicator under ``name``; refuses duplicates."""

    def add(cls: type[Communicator]) -> type[Communicator]:
        key = normalize(name)
        if key in MODES:
            raise ValueError(f"communication mode {name!r} is already registered ({MODES[key].__name__})")
        MODES[key] = cls
        return cls

    return add


def normalize(name: str) -> str:
    """Case- and separator-insensitive key: ``"TopK-A2A"`` -> ``"topk_a2a"``."""
    return name.strip().lower().replace("-", "_")


def resolve_mode(name: str) -> str:
    """The registered mode name ``name`` stands for.

    Raises:
        ValueError: ``Could not resolve 'x' among choices [...]``.
    """
    key = normalize(name) if isinstance(name, str) else None
    if key not in MODES:
        raise ValueError(f"Could not resolve comm {name!r} among choices {sorted(MODES)}")
    return key


for _cls in (AllReduce, MultiStreamAllReduce, TopKA2A, TopKAllGather, SignSGD, PowerSGD, DeAR):
    register(_cls.name)(_cls)

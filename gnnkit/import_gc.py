"""Heavy imports without Python's cyclic garbage collector.

Importing Lightning, torch and PyG makes about 450,000 objects that live as long as the process.
While they are made, the collector's full collections keep scanning all of them: on a 2-core CPU,
four such collections took 0.74 s of the 4.5 s that ``import lightning, torch_geometric`` took,
and a full collection at a run's end 0.27 s more. :func:`import_without_gc` turns the collector
off for the import and then moves what it made into the permanent generation (:func:`gc.freeze`),
which later collections skip: the approach CPython documents for long-lived processes
(https://docs.python.org/3/library/gc.html#gc.freeze), which also spares forked data-loader
workers from copying the pages that a collection would touch.
"""

from __future__ import annotations

import gc
import importlib
import sys
from types import ModuleType


def import_without_gc(name: str) -> ModuleType:
    """Import module ``name`` with the collector off, then freeze what the import made.

    The garbage there is beforehand is collected first (a small heap before the heavy imports:
    13 ms in ``gnnkit run``), so the freeze keeps only what the import itself made. A module
    imported already is just returned, and a collector the caller turned off is left to them.

    Args:
        name: The module's dotted name.

    Returns:
        The module.
    """
    if name in sys.modules or not gc.isenabled():
        return importlib.import_module(name)
    gc.collect()
    gc.disable()
    try:
        return importlib.import_module(name)
    finally:
        gc.freeze()
        gc.enable()

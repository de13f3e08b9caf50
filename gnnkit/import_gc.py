"""Heavy imports without Python's cyclic garbage collector.

Importing Lightning, torch and PyG makes about 450,000 objects that live as long as the process.
While they are made, the collector's full collections keep scanning all of them: on a 2-core CPU,
four such collections took 0.74 s of the 4.5 s that ``import lightning, torch_geometric`` took,
and a full collection at a run's end 0.27 s more. :func:`imports_without_gc` turns the collector
off for the imports and then moves what they made into the permanent generation
(:func:`gc.freeze`), which later collections skip: the approach CPython documents for
long-lived servers (https://docs.python.org/3/library/gc.html#gc.freeze), which also spares
forked data-loader workers from copying the pages that a collection would touch.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def imports_without_gc() -> Iterator[None]:
    """Run the block (imports) with the collector off; freeze what it made if it imported anything.

    The collector is left as it was found: off if the caller had turned it off, on otherwise. A
    block that imported nothing new (its modules were loaded already, as in a test process that
    runs the command twice) freezes nothing, so objects that later become garbage are not kept.
    """
    if not gc.isenabled():  # the caller holds it off (or an outer block does): leave it to them
        yield
        return
    loaded = len(sys.modules)
    gc.disable()
    try:
        yield
    finally:
        if len(sys.modules) > loaded:
            gc.freeze()
        gc.enable()

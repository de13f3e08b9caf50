"""On/off environment variables (``GNNKIT_NATIVE``, ``GNNKIT_SPMM_VERIFY``, ...), read alike.

Each took its own spelling: ``GNNKIT_NATIVE=banana`` meant on, ``GNNKIT_SPMM_VERIFY=false`` and
``GNNKIT_RETAIN_FREED_MEMORY=off`` left the switch on (only ``0`` turned them off). They all take
the values below now, in any case, and refuse anything else in one line.
"""

from __future__ import annotations

import os

from pipeline.errors import DatasetError

ON = ("1", "on", "true", "yes")
OFF = ("0", "off", "false", "no")


def switch(name: str, default: bool) -> bool:
    """The on/off variable ``name``: ``default`` when unset or empty.

    Raises:
        DatasetError: A value that is neither of :data:`ON` nor of :data:`OFF` (one line naming it).
    """
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in ON or value in OFF:
        return value in ON
    raise DatasetError(name, f"expected {', '.join(ON)} (on) or {', '.join(OFF)} (off), got {os.environ[name]!r}")

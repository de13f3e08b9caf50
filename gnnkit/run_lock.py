"""One run at a time in a run folder: a second ``gnnkit run`` into a folder a run is using is refused.

Two runs started into the same ``--run_dir`` (a command given twice, a resume while the run still
goes) both trained there: ``metrics.csv`` held each epoch's rows twice, interleaved, and
``checkpoints/`` a ``best-v1.ckpt`` beside ``best.ckpt``. :func:`run_folder_lock` holds an exclusive
``flock`` on the folder itself while the run goes: no file is made, and the kernel lets the lock go
when the run's process ends, killed or not. Only global rank 0 takes it (the ranks Lightning or
torchrun start use the same folder on purpose); on a file system without locks the run goes
unguarded, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from gnnkit.resume import ResumeError
from pipeline import is_rank_zero


@contextlib.contextmanager
def run_folder_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run folder for this run inside the block.

    Raises:
        ResumeError: Another process holds it (one line naming the folder).
    """
    if not is_rank_zero():
        yield
        return
    try:
        fd = os.open(run_dir, os.O_RDONLY)  # not inherited by the processes the run starts (O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ResumeError(f"{run_dir}: another gnnkit run is using this folder; wait for it to end, or give "
                              f"another --run_dir") from None
        except OSError:  # a file system without locks
            pass
        yield
    finally:
        os.close(fd)

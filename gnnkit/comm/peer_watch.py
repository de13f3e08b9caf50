"""Name the lost rank under any multi-process strategy, not only :class:`GnnkitStrategy`.

A rank of Lightning's plain ``DDPStrategy`` (``--trainer.strategy ddp``) that dies leaves the others
with gloo's 60-line traceback ending in ``Connection reset by peer [127.0.0.1]:53382``, which
does not say which rank is gone. :class:`PeerWatch` does for such a run what
:class:`GnnkitStrategy` does for its own: every rank records its host and pid in the rendezvous
store at setup (:func:`failures.publish_peers`), and a failed collective's error becomes the one
line of :func:`failures.describe` (``gnnkit comm: a collective failed on rank 0 of 2: lost rank 1
(died, pid 4242) ...``), which ``gnnkit run`` prints alone. ``gnnkit run`` adds it to every run; a
user's own ``Trainer`` can add it too.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Optional

import lightning.pytorch as pl

from gnnkit.comm import failures


class PeerWatch(pl.Callback):
    """Records where every rank runs, and names the lost one when a collective fails.

    Does nothing on one process, and leaves :class:`GnnkitStrategy` (which does the same itself) alone.
    """

    def __init__(self) -> None:
        self.peers: list[failures.Peer] = []

    @staticmethod
    def _watched(trainer: pl.Trainer) -> bool:
        from gnnkit.comm.strategy import GnnkitStrategy

        return trainer.world_size > 1 and not isinstance(trainer.strategy, GnnkitStrategy)

    @staticmethod
    def _timeout(trainer: pl.Trainer) -> timedelta:
        """The strategy's collective timeout (Lightning's DDP: ``_timeout``), else torch's default."""
        timeout: Optional[timedelta] = getattr(trainer.strategy, "_timeout", None)
        return timeout if isinstance(timeout, timedelta) else timedelta(minutes=30)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Publish this rank's host and pid once, and read every rank's (each rank waits for the
        others' entries; Lightning calls ``setup`` on every rank)."""
        store = failures.default_store()
        if self.peers or not self._watched(trainer) or store is None:
            return
        self.peers = failures.publish_peers(store, trainer.global_rank, trainer.world_size, self._timeout(trainer))

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """A failed collective's error becomes one line naming the lost rank(s)."""
        if self._watched(trainer):
            failures.name_lost_ranks(exception, self.peers, trainer.global_rank, trainer.world_size,
                                     self._timeout(trainer))

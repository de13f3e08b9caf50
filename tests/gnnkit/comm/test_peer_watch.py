"""gnnkit.comm.peer_watch: the lost rank named under a strategy other than GnnkitStrategy (the
2-rank run that kills a rank is ``test_distributed.py``'s ``die_plain_ddp``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta
from types import SimpleNamespace

from lightning.pytorch.strategies import DDPStrategy

from gnnkit.comm import GnnkitStrategy, PeerWatch
from gnnkit.comm.failures import MARK, Peer


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _trainer(strategy, world_size: int = 2) -> SimpleNamespace:
    return SimpleNamespace(strategy=strategy, world_size=world_size, global_rank=0)


def _gloo_error() -> RuntimeError:
    return RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:53382: "
                        "Connection reset by peer. This is typically caused by a remote worker hanging")


def test_a_plain_ddp_peer_failure_becomes_one_line_naming_the_dead_rank() -> None:
    watch, pid = PeerWatch(), _dead_pid()
    watch.peers = [Peer(0, socket.gethostname(), os.getpid()), Peer(1, socket.gethostname(), pid)]
    error = _gloo_error()
    watch.on_exception(_trainer(DDPStrategy(timeout=timedelta(seconds=30))), None, error)
    assert str(error) == (f"gnnkit comm: a collective failed on rank 0 of 2: lost rank 1 (died, pid {pid}) "
                          "(timeout 30s; backend: Read error [127.0.0.1]:53382: Connection reset by peer)")
    assert getattr(error, MARK)


def test_other_errors_one_process_and_gnnkit_strategy_are_left_alone() -> None:
    watch = PeerWatch()
    other = RuntimeError("CUDA out of memory")
    watch.on_exception(_trainer(DDPStrategy()), None, other)
    assert str(other) == "CUDA out of memory" and not hasattr(other, MARK)
    single = _gloo_error()
    watch.on_exception(_trainer(DDPStrategy(), world_size=1), None, single)
    assert not hasattr(single, MARK)
    own = _gloo_error()  # GnnkitStrategy.on_exception rewrites it itself
    watch.on_exception(_trainer(GnnkitStrategy()), None, own)
    assert not hasattr(own, MARK)


def test_without_published_peers_the_peer_address_is_named_and_the_default_timeout_is_torchs() -> None:
    error = _gloo_error()
    PeerWatch().on_exception(_trainer(SimpleNamespace()), None, error)
    assert str(error).startswith("gnnkit comm: a collective failed on rank 0 of 2: peer [127.0.0.1]:53382 "
                                 "failed to answer") and "timeout 1800s" in str(error)

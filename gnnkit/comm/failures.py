"""Collective failures: a bounded timeout, and an error that names the rank that was lost.

When a rank dies (``kill -9``, out of memory) or hangs (``SIGSTOP``, a deadlock), the others find
out only through their collectives: gloo reports ``Connection reset/closed by peer [ip]:port`` at
once for a dead peer and ``Timed out waiting ...`` after the process group's timeout for a hung one;
NCCL's watchdog aborts its communicator. None of these says *which* rank is gone. This module

* resolves the collective timeout (:func:`resolve_timeout`: the strategy's argument, else
  ``$GNNKIT_COMM_TIMEOUT`` in seconds, else :data:`DEFAULT_TIMEOUT_S`),
* records every rank's host and pid once the process group is up (:func:`publish_peers`), and
* on a failure, works out the lost ranks (:func:`lost_ranks`): a peer on this host whose pid has
  died or is stopped is lost for certain; every other peer is asked for a roll call through the
  rendezvous store, and those that do not answer within a few seconds are named. If the store
  itself is unreachable, the rank that hosts it (rank 0) is named. :func:`describe` turns this into
  the one-line message the strategy raises.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional, Union

#: Collective timeout when neither the strategy's ``timeout`` nor ``$GNNKIT_COMM_TIMEOUT`` is set.
DEFAULT_TIMEOUT_S: float = 60.0
TIMEOUT_ENV = "GNNKIT_COMM_TIMEOUT"
#: Longest wait for the surviving ranks' roll call after a failure.
ROLL_CALL_S: float = 5.0
#: Texts of backend errors that mean a peer is gone or did not answer in time.
PEER_FAILURE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                "Timed out", "timed out", "Connection refused", "NCCL communicator was aborted",
                "Socket Timeout", "Connection lost")
#: Marker attribute set on an exception whose message was rewritten by :func:`describe`.
MARK = "gnnkit_comm_failure"
_STORE_PREFIX = "gnnkit/peers"
_PEER_ADDRESS = re.compile(r"\[([0-9A-Za-z.:%-]+)\]:(\d+)")


def resolve_timeout(value: Union[None, float, int, str, timedelta]) -> timedelta:
    """The collective timeout: ``value`` (seconds or a timedelta), else ``$GNNKIT_COMM_TIMEOUT``, else 60 s.

    Raises:
        ValueError: A value that is not a positive number of seconds (names the source).
    """
    source = "timeout"
    if value is None:
        env = os.environ.get(TIMEOUT_ENV)
        if env is None or not env.strip():
            return timedelta(seconds=DEFAULT_TIMEOUT_S)
        source, value = f"${TIMEOUT_ENV}", env
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{source}: expected a positive number of seconds, got {value!r}") from None
    if not seconds > 0 or seconds == float("inf") or timedelta(seconds=seconds) == timedelta(0):  # 1e-9 rounds to 0
        raise ValueError(f"{source}: expected a positive number of seconds (a microsecond at least), got {value!r}")
    return timedelta(seconds=seconds)


@dataclass(frozen=True)
class Peer:
    """Where one rank runs.

    Attributes:
        rank: Global rank.
        host: ``socket.gethostname()`` of its machine.
        pid: Its process id there.
    """

    rank: int
    host: str
    pid: int


def publish_peers(store: Any, rank: int, world_size: int, timeout: timedelta) -> list[Peer]:
    """Record this rank's host and pid in the rendezvous store and read every rank's (a barrier).

    Args:
        store: The process group's store (``torch.distributed`` ``Store``).
        rank: This rank.
        world_size: Number of ranks.
        timeout: Longest wait for the other ranks' entries.
    """
    store.set(f"{_STORE_PREFIX}/{rank}", f"{socket.gethostname()} {os.getpid()}")
    keys = [f"{_STORE_PREFIX}/{r}" for r in range(world_size)]
    store.wait(keys, timeout)
    peers = []
    for r, key in enumerate(keys):
        host, pid = store.get(key).decode().rsplit(" ", 1)
        peers.append(Peer(r, host, int(pid)))
    return peers


def process_state(pid: int) -> str:
    """``"running"``, ``"stopped"`` or ``"dead"`` for a process of this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        return "running"
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "running"
    return {b"Z": "dead", b"X": "dead", b"T": "stopped", b"t": "stopped"}.get(state, "running")


def _roll_call(store: Any, rank: int, pending: list[int], wait_s: float) -> Optional[list[int]]:
    """Answer the roll call and wait up to ``wait_s`` for ``pending`` ranks; returns those silent.

    ``None`` when the store did not respond (it lives in rank 0's process, which may be the one gone).
    """
    result: list[Optional[list[int]]] = [None]

    def call() -> None:
        try:
            store.set(f"{_STORE_PREFIX}/alive/{rank}", "1")
            silent = list(pending)
            deadline = time.monotonic() + wait_s
            while silent and time.monotonic() < deadline:
                silent = [r for r in silent if not store.check([f"{_STORE_PREFIX}/alive/{r}"])]
                if silent:
                    time.sleep(0.05)
        except RuntimeError:  # the store's connection is gone: result stays None
            return
        result[0] = silent

    thread = threading.Thread(target=call, name="gnnkit-roll-call", daemon=True)
    thread.start()
    thread.join(wait_s + 2.0)
    return result[0]


@dataclass(frozen=True)
class Diagnosis:
    """Which ranks were lost, and how that is known.

    Attributes:
        lost: ``rank -> reason`` (``"died, pid N"``, ``"stopped, pid N"``, ``"did not answer ..."``).
        store_reachable: Whether the roll call through the rendezvous store worked.
    """

    lost: dict[int, str]
    store_reachable: bool


def lost_ranks(peers: list[Peer], rank: int, store: Any, wait_s: float = ROLL_CALL_S) -> Diagnosis:
    """Work out which ranks are gone (see the module docstring).

    Args:
        peers: Every rank's host and pid (:func:`publish_peers`).
        rank: This rank.
        store: The rendezvous store, or ``None`` to skip the roll call.
        wait_s: Longest wait for the others' roll-call answers.
    """
    host = socket.gethostname()
    lost: dict[int, str] = {}
    for peer in peers:
        if peer.rank != rank and peer.host == host:
            state = process_state(peer.pid)
            if state != "running":
                lost[peer.rank] = f"{'died' if state == 'dead' else state}, pid {peer.pid}"
    pending = [p.rank for p in peers if p.rank != rank and p.rank not in lost]
    silent = _roll_call(store, rank, pending, wait_s) if store is not None and pending else []
    if silent is None:
        lost.setdefault(0, "unreachable: its process hosts the rendezvous store")
        return Diagnosis(dict(sorted(lost.items())), store_reachable=False)
    for r in silent:
        lost[r] = f"did not answer within {wait_s:g}s"
    return Diagnosis(dict(sorted(lost.items())), store_reachable=True)


def default_store() -> Any:
    """The default process group's rendezvous store, or ``None`` (no group, or a backend without one)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


def name_lost_ranks(exception: BaseException, peers: list[Peer], rank: int, world_size: int,
                    timeout: timedelta) -> None:
    """Rewrite a failed collective's error, in place, into the one line of :func:`describe` (and mark
    it, so the ``gnnkit`` command prints that line alone); other exceptions are left as they are."""
    if not is_peer_failure(exception) or getattr(exception, MARK, False):
        return
    diagnosis = lost_ranks(peers, rank, default_store()) if peers else None
    exception.args = (describe(str(exception), rank, world_size, timeout, diagnosis),)
    setattr(exception, MARK, True)


def is_peer_failure(exception: BaseException) -> bool:
    """Whether ``exception`` is a backend error about a lost or silent peer."""
    text = str(exception)
    return any(marker in text for marker in PEER_FAILURE)


def describe(text: str, rank: int, world_size: int, timeout: timedelta, diagnosis: Optional[Diagnosis]) -> str:
    """The one-line message for a failed collective seen on ``rank``.

    Names the lost ranks when known; otherwise the peer address of the backend's error and the
    world size.
    """
    first = text.strip().splitlines()[0] if text.strip() else ""
    kind = "timed out" if "imed out" in first or "Timeout" in first else "failed"
    head = f"gnnkit comm: a collective {kind} on rank {rank} of {world_size}"
    if diagnosis and diagnosis.lost:
        names = ", ".join(f"rank {r} ({why})" for r, why in diagnosis.lost.items())
        return f"{head}: lost {names} (timeout {timeout.total_seconds():g}s; backend: {_short(first)})"
    match = _PEER_ADDRESS.search(first)
    peer = f"peer {match.group(0)}" if match else "a peer"
    return (f"{head}: {peer} failed to answer, most likely another rank died or hung; the lost rank "
            f"could not be determined (timeout {timeout.total_seconds():g}s; backend: {_short(first)})")


def _short(text: str) -> str:
    """The backend's message without gloo's source location and advice."""
    text = re.sub(r"\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", text)
    text = re.sub(r"^.*?when running the callback: (RuntimeError: )?", "", text)
    return text.split(". This is typically")[0].rstrip(".")

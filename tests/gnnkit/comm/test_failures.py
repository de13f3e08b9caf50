"""gnnkit.comm.failures: the collective timeout, and the one-line error naming a lost rank."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest

from gnnkit.comm import failures
from gnnkit.comm.failures import Diagnosis, Peer


class FakeStore:
    """The part of a torch.distributed Store the roll call uses, in one process."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value.encode()

    def check(self, keys: list[str]) -> bool:
        return all(k in self.values for k in keys)


class DeadStore(FakeStore):
    def set(self, key: str, value: str) -> None:
        raise RuntimeError("Connection reset by peer")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_timeout_defaults_to_60_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(failures.TIMEOUT_ENV, raising=False)
    assert failures.resolve_timeout(None) == timedelta(seconds=60)


def test_timeout_from_argument_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failures.TIMEOUT_ENV, "15")
    assert failures.resolve_timeout(None) == timedelta(seconds=15)
    assert failures.resolve_timeout(120) == timedelta(seconds=120)  # the argument wins
    assert failures.resolve_timeout(timedelta(minutes=2)) == timedelta(seconds=120)


@pytest.mark.parametrize("bad", [0, -5, "soon", float("inf"), 1e-9])  # 1e-9 rounded to a timeout of 0
def test_bad_timeout_is_refused_naming_its_source(bad: object, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="timeout: expected a positive number of seconds"):
        failures.resolve_timeout(bad)
    monkeypatch.setenv(failures.TIMEOUT_ENV, str(bad))
    with pytest.raises(ValueError, match=r"\$GNNKIT_COMM_TIMEOUT: expected a positive number"):
        failures.resolve_timeout(None)


def test_dead_process_on_this_host_is_named() -> None:
    me, pid = socket.gethostname(), _dead_pid()
    peers = [Peer(0, me, os.getpid()), Peer(1, me, pid)]
    diagnosis = failures.lost_ranks(peers, 0, FakeStore(), wait_s=0.2)
    assert diagnosis == Diagnosis({1: f"died, pid {pid}"}, store_reachable=True)


def test_silent_remote_rank_is_named_and_answering_one_is_not() -> None:
    store = FakeStore()
    store.set(f"{failures._STORE_PREFIX}/alive/2", "1")  # rank 2 answered the roll call
    peers = [Peer(0, socket.gethostname(), os.getpid()), Peer(1, "elsewhere", 1), Peer(2, "elsewhere", 2)]
    diagnosis = failures.lost_ranks(peers, 0, store, wait_s=0.2)
    assert diagnosis.lost == {1: "did not answer within 0.2s"}


def test_unreachable_store_names_rank_zero() -> None:
    peers = [Peer(0, "elsewhere", 1), Peer(1, socket.gethostname(), os.getpid())]
    diagnosis = failures.lost_ranks(peers, 1, DeadStore(), wait_s=0.2)
    assert diagnosis.lost == {0: "unreachable: its process hosts the rendezvous store"}
    assert not diagnosis.store_reachable


def test_message_names_the_lost_rank_in_one_line() -> None:
    text = ("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
            "[127.0.0.1]:48307\nmore lines")
    line = failures.describe(text, 0, 2, timedelta(seconds=60), Diagnosis({1: "died, pid 7"}, True))
    assert line == ("gnnkit comm: a collective failed on rank 0 of 2: lost rank 1 (died, pid 7) "
                    "(timeout 60s; backend: Connection closed by peer [127.0.0.1]:48307)")


def test_message_without_diagnosis_names_the_peer_address() -> None:
    line = failures.describe("Timed out waiting 10000ms for recv from [10.0.0.2]:1234", 3, 4,
                             timedelta(seconds=10), None)
    assert line.startswith("gnnkit comm: a collective timed out on rank 3 of 4: peer [10.0.0.2]:1234")
    assert "could not be determined" in line and "\n" not in line


def test_only_peer_errors_are_rewritten() -> None:
    assert failures.is_peer_failure(RuntimeError("Connection reset by peer"))
    assert not failures.is_peer_failure(RuntimeError("CUDA out of memory"))

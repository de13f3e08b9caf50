"""gnnkit's log lines: info from rank 0 only, a line every rank tells marked with its rank."""

import io
import os
import subprocess
import sys

import pytest

from pipeline import log, setup_logging

SCRIPT = """
from pipeline import EVERY_RANK, log, setup_logging
setup_logging()
log.info("data synthetic-tiny: ready")
log.info("partition %d: 10 nodes", 7, extra=EVERY_RANK)
log.warning("resume: starts afresh")
"""


def _lines(env: dict[str, str]) -> list[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "NODE_RANK")}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env={**clean, **env},
                         check=True)
    return out.stderr.splitlines()


@pytest.mark.parametrize("env", [{}, {"RANK": "0"}, {"LOCAL_RANK": "0"}, {"LOCAL_RANK": "0", "NODE_RANK": "0"},
                                 {"RANK": "0", "LOCAL_RANK": "0", "NODE_RANK": "1"}],
                         ids=["alone", "rank 0", "local rank 0", "node 0", "RANK before NODE_RANK"])
def test_rank_zero_and_a_lone_process_tell_every_line(env):
    assert _lines(env) == ["[gnnkit] data synthetic-tiny: ready", "[gnnkit] partition 7: 10 nodes",
                           "[gnnkit] resume: starts afresh"]


@pytest.mark.parametrize(("env", "rank"), [({"RANK": "1"}, 1), ({"LOCAL_RANK": "3"}, 3),
                                           ({"RANK": "x", "SLURM_PROCID": "2"}, 2)],
                         ids=["torchrun", "lightning's launcher", "slurm"])
def test_other_ranks_tell_their_own_lines_and_warnings_only_marked_with_the_rank(env, rank):
    assert _lines(env) == [f"[gnnkit rank {rank}] partition 7: 10 nodes", f"[gnnkit rank {rank}] resume: starts afresh"]


def test_lightnings_launcher_on_a_second_machine_is_not_rank_zero():
    """Lightning's launcher gives its ranks LOCAL_RANK and NODE_RANK only: local rank 0 of node 1 is
    not global rank 0, so it neither tells rank 0's lines nor prepares the run's metrics."""
    env = {"LOCAL_RANK": "0", "NODE_RANK": "1"}
    assert _lines(env) == ["[gnnkit node 1 rank 0] partition 7: 10 nodes", "[gnnkit node 1 rank 0] resume: starts afresh"]


@pytest.mark.parametrize(("env", "zero"), [({}, True), ({"LOCAL_RANK": "0", "NODE_RANK": "0"}, True),
                                           ({"LOCAL_RANK": "0", "NODE_RANK": "1"}, False),
                                           ({"SLURM_PROCID": "3"}, False), ({"SLURM_PROCID": "0", "NODE_RANK": "2"}, True),
                                           ({"LOCAL_RANK": "2"}, False), ({"RANK": "0", "NODE_RANK": "1"}, True)])
def test_is_rank_zero_reads_every_launchers_variables(monkeypatch, env, zero):
    """One answer for the log lines and for the run folder's rank-0 work (resume.prepare_metrics):
    under SLURM every rank used to count as rank zero there, as only RANK and LOCAL_RANK were read."""
    from pipeline import is_rank_zero

    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK", "NODE_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert is_rank_zero() is zero


def test_without_rank_variables_the_rank_lightnings_strategy_set_counts(monkeypatch):
    """ddp_spawn's ranks have no rank variable: the strategy tells them theirs through rank_zero_only."""
    from lightning_utilities.core.rank_zero import rank_zero_only

    from pipeline.progress import process_rank

    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(rank_zero_only, "rank", 1, raising=False)
    assert process_rank() == 1
    monkeypatch.setenv("LOCAL_RANK", "0")  # a variable, where set, is read first
    assert process_rank() == 0
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    assert process_rank() == 0


ANONYMOUS_PROBE = """
import sys
import numpy as np
from pipeline.progress import anonymous_rss_mb, available_memory_mb, rss_mb
before = anonymous_rss_mb()
block = np.ones(50_000_000, dtype=np.uint8)
grown = anonymous_rss_mb() - before
np.ones(50_000_000, dtype=np.uint8).tofile(sys.argv[1])
before = anonymous_rss_mb()
assert int(np.memmap(sys.argv[1], dtype=np.uint8, mode="r").sum()) == 50_000_000
print(round(grown), round(anonymous_rss_mb() - before), anonymous_rss_mb() <= rss_mb(), available_memory_mb() > 0)
"""


def test_anonymous_resident_memory_grows_with_the_heap_and_not_with_mapped_files(tmp_path):
    """``RssAnon``: a touched 48 MiB array counts, a 48 MiB file read through a memory map does not
    (the kernel can drop those pages; ``MemAvailable`` counts them as free). In a fresh process: one
    that keeps freed blocks (``gnnkit run`` in-process) may serve the array from its heap."""
    out = subprocess.run([sys.executable, "-c", ANONYMOUS_PROBE, str(tmp_path / "f.bin")], capture_output=True,
                         text=True, check=True).stdout.split()
    assert 40 < int(out[0]) < 60 and int(out[1]) < 10 and out[2:] == ["True", "True"], out


def test_log_lines_go_to_the_stderr_of_the_moment(monkeypatch):
    """A notebook or pytest's capture swaps ``sys.stderr`` (and closes its own): CI once printed a
    "Logging error ... I/O operation on closed file" from a handler that kept the first one."""
    setup_logging()
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    log.warning("one")
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    log.warning("two")
    assert second.getvalue() == "[gnnkit] two\n"


def test_a_terminal_without_a_width_gets_log_lines_not_a_bar(monkeypatch):
    """`script -qc "gnnkit run ..." /dev/null` without `stty cols`: a pseudo-terminal of 0 columns,
    where the bar drew nothing and no epoch line was logged."""
    from pipeline.progress import draws_bars

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

        def fileno(self) -> int:
            return 2

    monkeypatch.setattr(sys, "stderr", Terminal())
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((0, 0)))
    assert not draws_bars()
    monkeypatch.setattr(os, "get_terminal_size", lambda fd: os.terminal_size((120, 40)))
    assert draws_bars()
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not draws_bars()

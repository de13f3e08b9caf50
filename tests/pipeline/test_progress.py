"""gnnkit's log lines: info from rank 0 only, a line every rank tells marked with its rank."""

import os
import subprocess
import sys

import pytest

SCRIPT = """
from pipeline import EVERY_RANK, log, setup_logging
setup_logging()
log.info("data synthetic-tiny: ready")
log.info("partition %d: 10 nodes", 7, extra=EVERY_RANK)
log.warning("resume: starts afresh")
"""


def _lines(env: dict[str, str]) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env={**clean, **env},
                         check=True)
    return out.stderr.splitlines()


@pytest.mark.parametrize("env", [{}, {"RANK": "0"}, {"LOCAL_RANK": "0"}], ids=["alone", "rank 0", "local rank 0"])
def test_rank_zero_and_a_lone_process_tell_every_line(env):
    assert _lines(env) == ["[gnnkit] data synthetic-tiny: ready", "[gnnkit] partition 7: 10 nodes",
                           "[gnnkit] resume: starts afresh"]


@pytest.mark.parametrize(("env", "rank"), [({"RANK": "1"}, 1), ({"LOCAL_RANK": "3"}, 3),
                                           ({"RANK": "x", "SLURM_PROCID": "2"}, 2)],
                         ids=["torchrun", "lightning's launcher", "slurm"])
def test_other_ranks_tell_their_own_lines_and_warnings_only_marked_with_the_rank(env, rank):
    assert _lines(env) == [f"[gnnkit rank {rank}] partition 7: 10 nodes", f"[gnnkit rank {rank}] resume: starts afresh"]


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

"""Sampled partition-parallel training: ranks keep step (``sampled_worker.py`` on 2 gloo ranks), and
``gnnkit run`` with ``data.partitions 2`` and ``batch_size > 0`` trains on 2 ranks through a compressed
GnnkitStrategy mode, writes the partition facts and resumes exactly after a lost rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gnnkit.data.datamodule import GraphDataModule
from gnnkit.partitioned.sampled_loader import lockstep_steps, share

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "recipes" / "quickstart.yaml"
SAMPLED = ["--data.partitions", "2", "--trainer.devices", "2", "--data.batch_size", "256", "--data.num_neighbors",
           "[5,5]", "--trainer.max_epochs", "3", "--trainer.strategy.class_path", "gnnkit.comm.GnnkitStrategy",
           "--trainer.strategy.init_args.comm", "signsgd", "--trainer.strategy.init_args.sign_momentum", "0.9",
           "--trainer.strategy.init_args.sign_error_feedback", "true"]


def test_ranks_with_unequal_seeds_keep_step(sampled_ranks):
    big, small = sampled_ranks[0]["lockstep"], sampled_ranks[1]["lockstep"]
    assert big["steps"] == small["steps"] == big["len"] == small["len"] > small["seeds"] == 3
    assert small["padding"] == small["steps"] - 3 and big["padding"] == 0
    for result in sampled_ranks:  # every seed once; padding batches weigh nothing
        assert result["lockstep"]["covered"] == result["lockstep"]["expected"]
        assert result["lockstep"]["padding_scales"] == [0.0] * result["lockstep"]["padding"]
    for a, b in zip(big["scales"], small["scales"]):  # the ranks' loss weights average to 1
        assert a + b == pytest.approx(2.0)


def test_steps_follow_replicated_ddp_in_training_and_the_largest_rank_in_evaluation():
    assert lockstep_steps([90, 10], 16, train=True) == 4  # ceil(50 / 16): as DDP's 50 seeds per rank
    assert lockstep_steps([90, 10], 16, train=False) == 6  # ceil(90 / 16)
    assert lockstep_steps([0, 0], 16, train=True) == 1
    assert [share(10, 4, s) for s in range(4)] == [3, 3, 2, 2] == [len(c) for c in torch.arange(10).tensor_split(4)]
    with pytest.raises(ValueError, match="batch_size: expected >= 1, got 0"):
        lockstep_steps([1], 0, train=True)


def test_partition_options_that_do_not_fit_are_one_line():
    with pytest.raises(ValueError, match="data.num_workers: partitioned sampling exchanges .* set data.num_workers 0"):
        GraphDataModule("synthetic-tiny", batch_size=64, partitions=2, num_workers=2)
    with pytest.raises(ValueError, match="data.remote_cache: expected a fraction >= 0"):
        GraphDataModule("synthetic-tiny", batch_size=64, partitions=2, remote_cache=-1.0)
    with pytest.raises(ValueError, match="data.remote_dtype: expected one of float32, float16, bfloat16, int8 or null"):
        GraphDataModule("synthetic-tiny", batch_size=64, partitions=2, remote_dtype="half")
    with pytest.raises(ValueError, match="data.reuse: replaying batches is not supported with data.partitions"):
        GraphDataModule("synthetic-tiny", batch_size=64, partitions=2, reuse={"epochs": 2})
    with pytest.raises(ValueError, match="data.boundary_sampling: samples the halo of partition-parallel full-batch"):
        GraphDataModule("synthetic-tiny", batch_size=64, partitions=2, boundary_sampling=0.5)
    assert GraphDataModule("synthetic-tiny", batch_size=64, partitions=2).describe()["loader"] == \
        "partitioned neighbor-sampled [15, 10, 5] (2 parts)"


def _torchrun(run_dir: Path, fault: str = "") -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GNNKIT_NATIVE": "0", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
           "GNNKIT_TEST_FAULT": fault, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    log = run_dir.with_suffix(".log")
    with open(log, "w") as out:
        rc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts",
                             "1", "--standalone", "-m", "gnnkit.cli", "run", str(QUICKSTART), *SAMPLED,
                             "--run_dir", str(run_dir)], stdout=out, stderr=subprocess.STDOUT, env=env,
                            cwd=run_dir.parent, timeout=300).returncode
    assert rc == 0, log.read_text()[-4000:]


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("sampled-run") / "straight"
    _torchrun(run_dir)
    return run_dir


@pytest.mark.slow
def test_a_recipe_trains_on_two_partitions_and_reports_them(straight):
    report = json.loads((straight / "report.json").read_text())
    assert report["data"]["loader"] == "partitioned neighbor-sampled [5, 5] (2 parts)"
    assert report["comm"]["world_size"] == 2 and report["comm"]["mode"] == "signsgd"
    part = report["partition"]
    assert part["sampled"] and part["parts"] == 2 and part["part"] == 0 and part["halo_nodes"] > 0
    assert part["cache_rows"] == int(0.1 * part["owned_nodes"]) and part["cache_bytes"] > 0  # remote_cache 0.1
    assert part["remote_rows"] == part["cache_hits"] + part["fetched_rows"] and part["cache_hits"] > 0
    assert part["fetched_bytes"] > 0 and part["graph_feature_bytes"] > 0 and part["directory_bytes"] > 0
    every = part["all_ranks"]  # both ranks: what one fetched, the other served
    assert every["fetched_rows"] == every["served_rows"] > part["fetched_rows"]
    assert every["cache_rows"] > part["cache_rows"]
    assert report["test"] > 0.3  # 8 classes, 3 epochs of sign descent: it learns
    log = straight.with_suffix(".log").read_text()
    assert "partition 0 of 2, after fit: " in log and "fetched (" in log
    assert "partition 0 of 2, train: " in log and "handed over" in log  # data.balance_seeds (default)


@pytest.mark.slow
def test_a_lost_rank_resumes_with_the_uninterrupted_runs_losses(straight):
    restarted = straight.parent / "restarted"
    _torchrun(restarted, fault="exit@1:1")
    assert "torchrun restart 1" in restarted.with_suffix(".log").read_text()
    # every rank's sampler generators, its remote cache and the model's state come back: the same
    # losses and metrics, to the last digit
    assert (restarted / "metrics.csv").read_text() == (straight / "metrics.csv").read_text()

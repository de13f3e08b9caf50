"""Partition-parallel layers on P gloo ranks reproduce the single-process forward and gradients,
batch normalisation included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gnnkit.partitioned.boundary_sampling import BoundarySampler
from gnnkit.partitioned.local_graph import local_columns

HERE = Path(__file__).parent
ROOT = HERE.parents[2]


@pytest.mark.parametrize(("world", "model"), [(2, "gcn"), (3, "sage"), (3, "gin")])
def test_partitions_reproduce_the_whole_graph(tmp_path, world, model):
    out = tmp_path / "result"
    proc = subprocess.run([sys.executable, str(HERE / "halo_worker.py"), str(out), str(world), model],
                          capture_output=True, text=True, timeout=180, cwd=str(ROOT),
                          env={**os.environ, "OMP_NUM_THREADS": "1", "GNNKIT_NATIVE": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(world):
        result = json.loads(Path(f"{out}.{rank}").read_text())
        assert result["halo"] > 0 and result["sent"] > 0  # the partitions do talk
        assert result["forward"] < 1e-5, result
        assert result["eval_forward"] < 1e-5, result
        assert result["grad"] < 1e-5, result
        if model == "gin":  # its first layer is not linear in an aggregate of the input
            assert "gcn or sage" in result["aggregation_error"]
            continue
        assert result["rounds"] > 1  # the halo arrived in several chunks
        assert result["aggregate"] < 1e-5, result
        assert result["aggregated_forward"] < 1e-5, result
        assert result["aggregated_grad"] < 1e-5, result


def test_local_columns_number_owned_then_halo():
    owned, halo = torch.tensor([2, 5, 7]), torch.tensor([1, 9])
    assert local_columns(torch.tensor([7, 1, 2, 9, 5]), owned, halo).tolist() == [2, 3, 0, 4, 1]
    with pytest.raises(ValueError, match="indices: source 4 is neither owned nor in the halo"):
        local_columns(torch.tensor([4]), owned, halo)


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_boundary_sampling_halves_the_traffic_without_bias(tmp_path, model):
    out = tmp_path / "result"
    proc = subprocess.run([sys.executable, str(HERE / "bns_worker.py"), str(out), model],
                          capture_output=True, text=True, timeout=180, cwd=str(HERE),
                          env={**os.environ, "OMP_NUM_THREADS": "1", "GNNKIT_NATIVE": "0",
                               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(2):
        result = json.loads(Path(f"{out}.{rank}").read_text())
        assert 0.35 < result["sampled_sent"] / result["exact_sent"] < 0.65, result
        assert result["rate_one_error"] == 0.0  # rate 1 is the exact exchange
        assert result["one_error"] > 0.05, result  # one sample is noisy ...
        assert result["mean_error"] < result["one_error"] / 5, result  # ... their mean is the exact layer


def test_boundary_sampler_decides_alike_everywhere():
    sampler = BoundarySampler(0.3, seed=1)
    ids = torch.arange(10_000)
    kept = sampler.kept(ids, step=4)
    assert torch.equal(kept[1234:1300], sampler.kept(ids[1234:1300], step=4))  # any subset, same answer
    assert abs(kept.float().mean().item() - 0.3) < 0.02
    assert not torch.equal(kept, sampler.kept(ids, step=5))
    with pytest.raises(ValueError, match=r"boundary_sampling: expected a rate in \(0, 1\], got 0.0"):
        BoundarySampler(0.0)


def test_stale_exchange_uses_the_previous_steps_rows_and_gradients(tmp_path):
    out = tmp_path / "result"
    proc = subprocess.run([sys.executable, str(HERE / "stale_worker.py"), str(out)], capture_output=True, text=True,
                          timeout=180, cwd=str(HERE), env={**os.environ, "OMP_NUM_THREADS": "1", "GNNKIT_NATIVE": "0",
                                                          "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in range(2):
        seen = json.loads(Path(f"{out}.{rank}").read_text())
        # step 0 waits for its own exchange; step t uses what step t - 1 sent
        assert [s["halo"] for s in seen] == [[0.0], [0.0], [1.0], [2.0]]
        assert [s["grad_sent_rows"] for s in seen] == [[1.0], [1.0], [2.0], [3.0]]
        assert all(s["grad_other_rows"] == [0.0] for s in seen)

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

from gnnkit.partitioned.local_graph import local_columns

HERE = Path(__file__).parent
ROOT = HERE.parents[2]


@pytest.mark.parametrize(("world", "model"), [(2, "gcn"), (2, "sage"), (3, "gin")])
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


def test_local_columns_number_owned_then_halo():
    owned, halo = torch.tensor([2, 5, 7]), torch.tensor([1, 9])
    assert local_columns(torch.tensor([7, 1, 2, 9, 5]), owned, halo).tolist() == [2, 3, 0, 4, 1]
    with pytest.raises(ValueError, match="indices: source 4 is neither owned nor in the halo"):
        local_columns(torch.tensor([4]), owned, halo)

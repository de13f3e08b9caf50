"""The sampled-training worker (``sampled_worker.py``) on 2 gloo ranks, run once per session for the
checks of test_remote_sampler.py, test_remote_features.py and test_sampled_loader.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import PreprocessOptions, preprocess
from pipeline.ogb_layout import write_ogb_folder
from pipeline.partitioned import partition_entry

HERE = Path(__file__).parent
ROOT = HERE.parents[2]


@pytest.fixture(scope="session")
def sampled_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """What each rank of ``sampled_worker.py`` found, on a 300-node graph in 2 partitions."""
    from tests.conftest import graph_arrays

    tmp = tmp_path_factory.mktemp("sampled")
    folder = write_ogb_folder(tmp / "ogb", **graph_arrays(num_nodes=300, num_edges=900))
    entry = preprocess(str(folder), PreprocessOptions(undirected=True), cache_root=tmp / "cache")
    parts = partition_entry(entry, 2)
    out = tmp / "result"
    proc = subprocess.run([sys.executable, str(HERE / "sampled_worker.py"), str(out), str(entry.path),
                           *(str(p.path) for p in parts)], capture_output=True, text=True, timeout=300, cwd=str(HERE),
                          env={**os.environ, "OMP_NUM_THREADS": "1", "GNNKIT_NATIVE": "0",
                               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(2)]

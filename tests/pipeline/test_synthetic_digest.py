"""The twins are the same everywhere: pinned content digests, independent of chunk size and threads.

The digests below are of the *content* of the generated raw files (:mod:`pipeline.content_digest`),
so zlib builds and zip timestamps do not matter; what they pin is the generator's output, which
depends on the spec alone (counter-based streams, portable arithmetic). If one changes on purpose,
bump ``GENERATOR_VERSION`` and update the digests here and the ``fingerprint`` entries of
``datasets.yaml`` (regenerate the big twins once: ``gnnkit preprocess synthetic-arxiv`` ...).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.content_digest import content_digest
from pipeline.registry import load_registry
from pipeline.synthetic import GENERATOR_VERSION, SyntheticSpec, generate, presets

#: A products-like twin in miniature: binary layout, sales-ranking split, capped hubs.
SMALL_BINARY = SyntheticSpec(
    num_nodes=3000, num_edges=20_000, num_features=8, num_classes=7, seed=5, split="sales_ranking",
    layout="binary", degree_exponent=2.3, max_degree=200, community_size=40,
)

PINNED = {
    "synthetic-tiny": "a135f7b7b4ee2ec2936e6ccee9dd6f6b18b3195d350ef5fc722674ef9b43ca7b",
    "small-binary": "6e89a815defc95962b8ecd8d13868db72a4e8d32cf7d68697df92c82a55c35e1",
    "synthetic-papers-tiny": "8e49b2c6fb448ee861ad4a7611ae10d3bde1434a51273b8a6fb44294f33db6d8",
}


def _spec(name: str) -> SyntheticSpec:
    return SMALL_BINARY if name == "small-binary" else presets()[name]


def test_generator_version_matches_the_pins():
    assert GENERATOR_VERSION == 2  # the digests below are version 2's


@pytest.mark.parametrize("name", sorted(PINNED))
def test_small_twins_have_their_pinned_digest(tmp_path, name):
    assert content_digest(generate(tmp_path / name, _spec(name))) == PINNED[name]


def test_registry_fingerprints_the_twins():
    registry = load_registry()
    assert registry["synthetic-tiny"].fingerprint == PINNED["synthetic-tiny"]
    assert registry["synthetic-papers-tiny"].fingerprint == PINNED["synthetic-papers-tiny"]
    for name in ("synthetic-arxiv", "synthetic-arxiv-nofeat", "synthetic-products", "synthetic-products-nofeat",
                 "synthetic-papers-small"):
        assert registry[name].fingerprint is not None, name


def test_twins_made_before_the_papers_fields_keep_their_folders():
    """Their raw folder is named by a hash of the spec; fields added later stay out of it at their
    defaults (these suffixes are what the code before them computed)."""
    from pipeline.fingerprint import cache_key

    for name, suffix in (("synthetic-tiny", "07788ea0af50"), ("synthetic-products", "5aed63cd5cce")):
        assert cache_key({"v": f"synthetic-{GENERATOR_VERSION}", **presets()[name].key_fields()})[:12] == suffix


@pytest.mark.parametrize("chunk_size", [97, 4096, 1 << 30])
def test_chunk_size_does_not_change_the_bytes(tmp_path, chunk_size):
    folder = generate(tmp_path / "g", SMALL_BINARY, chunk_size=chunk_size)
    assert content_digest(folder) == PINNED["small-binary"]
    csv = dataclasses.replace(presets()["synthetic-tiny"], num_nodes=500, num_edges=2500)
    one = generate(tmp_path / "csv-default", csv)
    two = generate(tmp_path / "csv-chunked", csv, chunk_size=chunk_size)
    assert content_digest(one) == content_digest(two)


def test_thread_count_does_not_change_the_bytes(tmp_path):
    """A single-threaded process (every thread-pool variable at 1) writes the pinned bytes too."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = "1"
    code = (
        "import sys; from pathlib import Path; from pipeline.synthetic import generate; "
        "from pipeline.content_digest import content_digest; "
        "from tests.pipeline.test_synthetic_digest import SMALL_BINARY; "
        "print(content_digest(generate(Path(sys.argv[1]), SMALL_BINARY)))"
    )
    root = Path(__file__).parents[2]
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "one-thread")], env=env, cwd=root,
                         capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == PINNED["small-binary"]

"""Binary twins written streaming hold what build() + write() would write, and papers' shape."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pipeline.content_digest import content_digest
from pipeline.family import read_meta_json
from pipeline.ogb_layout import read_ogb_folder
from pipeline.synthetic import SyntheticSpec, build, generate, presets, write
from pipeline.synthetic_stream import write_binary

PAPERS_LIKE = SyntheticSpec(num_nodes=4000, num_edges=50_000, num_features=12, num_classes=10, seed=7,
                            split="time", layout="binary", labelled_fraction=0.1, split_fractions=(0.78, 0.08),
                            node_year=True)


@pytest.mark.parametrize("spec", [PAPERS_LIKE, dataclasses.replace(PAPERS_LIKE, labelled_fraction=1.0,
                                                                    split_fractions=(), num_features=0)])
def test_streamed_folder_has_the_in_memory_content(tmp_path, spec):
    streamed = write_binary(tmp_path / "streamed", spec, chunk_size=1001)
    whole = write(tmp_path / "whole", spec, build(spec))
    assert content_digest(streamed) == content_digest(whole)
    assert not [p for p in streamed.rglob("*") if p.name.endswith(".targets")]  # the spill file is gone


def test_papers_shape(tmp_path):
    folder = generate(tmp_path / "papers", PAPERS_LIKE)
    meta = read_meta_json(folder)
    assert meta["binary"] and meta["split"] == "time" and meta["additional_node_files"] == ["node_year"]
    raw = read_ogb_folder(folder, meta)
    labels = raw.labels[:, 0]
    assert labels.dtype == np.float32 and np.isnan(labels).sum() == 4000 - 400
    sizes = {k: v.size for k, v in raw.split.items()}
    assert sizes == {"train": 312, "valid": 32, "test": 56}
    labelled = np.concatenate(list(raw.split.values()))
    assert np.isfinite(labels[labelled]).all()
    years = raw.extra["node_year"][:, 0]
    assert years.min() >= 1950 and years.max() <= 2020
    assert years[raw.split["train"]].max() <= years[raw.split["test"]].min()  # a time split
    src, dst = raw.edge_index
    assert (years[src] >= years[dst]).all()  # papers cite older papers


def test_presets_are_papers100m_at_a_twentieth():
    small = presets()["synthetic-papers-small"]
    assert (small.num_nodes, small.num_edges, small.num_features, small.num_classes) == (
        round(111_059_956 / 20), round(1_615_685_872 / 20), 128, 172)
    labelled = round(small.labelled_fraction * small.num_nodes)
    assert abs(labelled - 1_546_782 / 20) < 5
    assert abs(round(small.split_fractions[0] * labelled) - 1_207_179 / 20) < 5
    assert (small.layout, small.split, small.node_year) == ("binary", "time", True)
    with pytest.raises(ValueError, match="split_fractions"):
        dataclasses.replace(small, split_fractions=(0.9, 0.2))
    with pytest.raises(ValueError, match="node_year"):
        dataclasses.replace(small, split="random")


def test_feature_generation_says_how_far_it_is_about_every_tenth(tmp_path):
    """The products twin's features took 48 s without a line."""
    said: list[str] = []
    write_binary(tmp_path / "streamed", PAPERS_LIKE, said.append, chunk_size=120)  # 10 rows a block: 400 blocks
    rows = [line for line in said if line.startswith("features rows ")]
    assert len(rows) == 9 and rows[0] == "features rows 400/4,000" and "features: 4,000 x 12" in said

"""pipeline.synthetic_graphs: the ogbg-molhiv twin's shape, determinism and task."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from pipeline import synthetic_graphs as sg


@pytest.fixture(scope="module")
def small() -> dict:
    return sg.build(sg.presets()["synthetic-molhiv-small"])


def test_features_are_within_ogbs_atom_and_bond_vocabularies(small):
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims

    assert small["node_feat"].shape[1] == 9 and small["edge_feat"].shape[1] == 3
    assert (small["node_feat"] >= 0).all() and (small["node_feat"].max(0) < get_atom_feature_dims()).all()
    assert (small["edge_feat"] >= 0).all() and (small["edge_feat"].max(0) < get_bond_feature_dims()).all()


def test_degree_and_ring_columns_describe_the_bonds(small):
    """Atom column 2 is the atom's degree; bonds are stored once, within their molecule."""
    ptr = np.concatenate([[0], np.cumsum(small["num_nodes"])])
    owner = np.repeat(np.arange(small["num_nodes"].size), small["num_edges"])
    ends = small["edges"] + ptr[owner][:, None]
    assert (small["edges"] >= 0).all() and (small["edges"] < small["num_nodes"][owner][:, None]).all()
    degree = np.bincount(ends.reshape(-1), minlength=int(ptr[-1]))
    assert np.array_equal(small["node_feat"][:, 2], degree)


def test_labels_follow_the_motif_with_noise(small):
    """Actives are mostly molecules with the motif; the motif is rare outside them."""
    y, motif = small["labels"].astype(bool), small["motif"]
    assert 0.8 < y[motif].mean() <= 1.0 and y[~motif].mean() < 0.1
    assert 0.15 < y.mean() < 0.3


def test_same_spec_same_molecules_other_seed_others():
    spec = dataclasses.replace(sg.presets()["synthetic-molhiv-small"], num_graphs=50)
    a, b = sg.build(spec), sg.build(spec)
    c = sg.build(dataclasses.replace(spec, seed=7))
    assert all(np.array_equal(a[k], b[k]) for k in ("edges", "node_feat", "edge_feat", "labels"))
    assert not np.array_equal(a["node_feat"][:200], c["node_feat"][:200])


def test_scaffold_split_sizes_match_molhiv():
    """The molhiv preset's split shape, computed on scaffold keys alone (no generation needed)."""
    keys = [(i % 7, 0, 0) for i in range(41_127)]
    split = sg._scaffold_split(keys, sg.presets()["synthetic-molhiv"].valid_fraction)
    assert [split[k].size for k in ("train", "valid", "test")] == [32_901, 4_113, 4_113]
    assert np.unique(np.concatenate(list(split.values()))).size == 41_127


def test_generate_writes_ogbs_layout_and_refuses_an_existing_folder(tmp_path):
    spec = dataclasses.replace(sg.presets()["synthetic-molhiv-small"], num_graphs=30)
    folder = sg.generate(tmp_path / "t", spec)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["family"] == "graph" and meta["add_inverse_edge"] == "True" and meta["data type"] == "mol"
    for name in ("edge.csv.gz", "num-node-list.csv.gz", "num-edge-list.csv.gz", "node-feat.csv.gz",
                 "edge-feat.csv.gz", "graph-label.csv.gz"):
        assert (folder / "raw" / name).is_file()
    assert sorted(p.name for p in (folder / "split" / "scaffold").iterdir()) == [
        "test.csv.gz", "train.csv.gz", "valid.csv.gz"]
    with pytest.raises(FileExistsError):
        sg.generate(folder, spec)


@pytest.mark.parametrize("field, value", [("num_graphs", 3), ("max_nodes", 5), ("motif_rate", 1.5), ("seed", -1)])
def test_bad_spec_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}: expected"):
        dataclasses.replace(sg.presets()["synthetic-molhiv-small"], **{field: value})

"""bench/planetoid_to_ogb.py: Planetoid's files become an OGB folder with PyG Planetoid's nodes and
split (checked on small hand-made files in Planetoid's format), and nothing else gets unpickled."""

from __future__ import annotations

import collections
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from pipeline.family import read_meta_json
from pipeline.ogb_layout import read_ogb_folder



def _write(raw: Path, name: str, part: str, value) -> None:
    with open(raw / f"ind.{name}.{part}", "wb") as f:
        pickle.dump(value, f, protocol=4)  # the public files are Python 2 pickles; same types


def _planetoid_files(raw: Path, name: str, test_index: list[int]) -> None:
    """6 labelled-set nodes (2 training), test nodes at ``test_index`` (file order), 2 classes."""
    onehot = np.eye(2)
    allx = sp.csr_matrix(np.arange(6 * 3, dtype=np.float32).reshape(6, 3))
    ally = onehot[[0, 1, 0, 1, 0, 1]]
    tx = sp.csr_matrix(100 + np.arange(len(test_index) * 3, dtype=np.float32).reshape(-1, 3))
    ty = onehot[[1, 0, 1][: len(test_index)]]
    graph = collections.defaultdict(list, {0: [1, 1, 0], 1: [0], 2: [test_index[0]], test_index[0]: [2]})
    for part, value in {"x": allx[:2], "y": ally[:2], "allx": allx, "ally": ally, "tx": tx, "ty": ty,
                        "graph": graph}.items():
        _write(raw, name, part, value)
    (raw / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_index))


def test_nodes_labels_split_and_edges_as_pyg_planetoid(bench, tmp_path, monkeypatch):
    convert = bench("planetoid_to_ogb")
    monkeypatch.setattr(convert, "VALID_SIZE", 3)
    _planetoid_files(tmp_path, "cora", [8, 6, 7])
    parts = convert.read_planetoid(tmp_path, "cora")
    assert parts["num_nodes"] == 9
    # test rows in test-index order: tx's rows go to nodes 8, 6, 7
    assert parts["node_feat"][8].tolist() == [100, 101, 102] and parts["node_feat"][6].tolist() == [103, 104, 105]
    assert parts["labels"].tolist() == [0, 1, 0, 1, 0, 1, 0, 1, 1]
    assert {k: v.tolist() for k, v in parts["split"].items()} == {"train": [0, 1], "valid": [2, 3, 4],
                                                                   "test": [6, 7, 8]}
    # self loop and duplicate gone, both directions kept
    assert sorted(map(tuple, parts["edge_index"].T.tolist())) == [(0, 1), (1, 0), (2, 8), (8, 2)]
    folder = convert.write_ogb_folder(tmp_path / "out", **parts)
    raw = read_ogb_folder(folder, read_meta_json(folder))
    assert raw.num_nodes == 9 and raw.meta["num_classes"] == 2 and np.array_equal(raw.split["test"], [6, 7, 8])


def test_citeseer_gaps_in_the_test_indices_become_featureless_nodes_outside_the_splits(bench, tmp_path, monkeypatch):
    convert = bench("planetoid_to_ogb")
    monkeypatch.setattr(convert, "VALID_SIZE", 3)
    _planetoid_files(tmp_path, "citeseer", [9, 6])  # 7 and 8 are missing from the public files
    parts = convert.read_planetoid(tmp_path, "citeseer")
    assert parts["num_nodes"] == 10
    assert not parts["node_feat"][7:9].any() and parts["labels"][7:9].tolist() == [0, 0]
    assert parts["node_feat"][9].tolist() == [100, 101, 102] and parts["labels"][9] == 1
    assert parts["split"]["test"].tolist() == [6, 9]


def test_only_planetoids_own_types_are_unpickled(bench, tmp_path):
    convert = bench("planetoid_to_ogb")
    _planetoid_files(tmp_path, "cora", [8, 6, 7])
    _write(tmp_path, "cora", "graph", collections.OrderedDict())  # a type Planetoid never stores
    with pytest.raises(pickle.UnpicklingError, match="collections.OrderedDict, which is not a Planetoid part"):
        convert.read_planetoid(tmp_path, "cora")

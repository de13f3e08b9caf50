"""bench/heterophilous_to_ogb.py: Platonov et al.'s npz files become OGB folders with one of their
ten splits (checked on small hand-made files of the same arrays); a two-class graph is a binary
task scored by ROC-AUC, as the paper scores it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.family import read_meta_json
from pipeline.ogb_layout import read_ogb_folder


def _npz(path: Path, labels: list[int], **changes) -> None:
    n = len(labels)
    masks = np.zeros((2, n), bool)
    train, val, test = masks.copy(), masks.copy(), masks.copy()
    train[:, :2], val[:, 2:4], test[0, 4:], test[1, 5:] = True, True, True, True
    arrays = {"node_features": np.arange(n * 3, dtype=np.float32).reshape(n, 3), "node_labels": np.array(labels),
              "edges": np.array([[0, 1], [1, 2], [2, 0], [3, 4]]), "train_masks": train, "val_masks": val,
              "test_masks": test}
    np.savez(path, **{**arrays, **changes})


def test_a_multi_class_graph_keeps_its_nodes_edges_and_the_chosen_split(bench, tmp_path):
    convert = bench("heterophilous_to_ogb")
    _npz(tmp_path / "actor.npz", [0, 1, 2, 0, 1, 2])
    parts = convert.read_heterophilous(tmp_path / "actor.npz", split=1)
    assert parts["meta"]["task type"] == "multiclass classification" and parts["meta"]["eval metric"] == "acc"
    assert {k: v.tolist() for k, v in parts["split"].items()} == {"train": [0, 1], "valid": [2, 3], "test": [5]}
    assert convert.edge_homophily(parts) == 0.0
    folder = convert.write_ogb_folder(tmp_path / "out", **parts)
    raw = read_ogb_folder(folder, read_meta_json(folder))
    assert raw.num_nodes == 6 and raw.meta["num_classes"] == 3 and np.array_equal(raw.split["test"], [5])
    assert raw.edge_index.shape[1] == 8  # stored once, OGB's reader adds the inverse edges


def test_two_classes_are_a_binary_task_scored_by_rocauc(bench, tmp_path):
    convert = bench("heterophilous_to_ogb")
    _npz(tmp_path / "minesweeper.npz", [0, 1, 1, 0, 0, 1])
    parts = convert.read_heterophilous(tmp_path / "minesweeper.npz")
    assert parts["meta"]["task type"] == "binary classification" and parts["meta"]["eval metric"] == "rocauc"
    assert parts["labels"].shape == (6, 1) and parts["split"]["test"].tolist() == [4, 5]


def test_a_file_without_an_array_or_split_is_one_line(bench, tmp_path):
    convert = bench("heterophilous_to_ogb")
    _npz(tmp_path / "bad.npz", [0, 1, 0, 1, 0, 1])
    with pytest.raises(SystemExit, match=r"train_masks: expected a split in 0\.\.1, got 4"):
        convert.read_heterophilous(tmp_path / "bad.npz", split=4)
    np.savez(tmp_path / "short.npz", node_features=np.zeros((2, 2), np.float32))
    with pytest.raises(SystemExit, match=r"missing \['node_labels', 'edges'"):
        convert.read_heterophilous(tmp_path / "short.npz")
    (tmp_path / "empty.npz").write_bytes(b"")  # what a snapshot without the large file leaves
    with pytest.raises(SystemExit, match=r"empty.npz: not a readable npz file of plain arrays \(No data left in file\)"):
        convert.read_heterophilous(tmp_path / "empty.npz")

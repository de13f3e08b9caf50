"""bench/tu_to_ogb.py: GIN's reference-code text files become graph folders with one-hot node tags
(one-hot degrees where nodes carry none) and class ids, as Xu et al.'s code reads them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.family import read_meta_json

#: Two graphs: a labelled triangle (tags 3, 5, 3; class -1) and a tagged edge with node attributes
#: after the neighbour list (left out; class 1).
TAGGED = """2
3 -1
3 2 1 2
5 2 0 2
3 2 0 1
2 1
5 1 1 0.5 0.25
3 1 0 0.1 0.2
"""


def test_tags_are_one_hot_labels_are_class_ids_and_neighbours_are_edges(bench, tmp_path):
    convert = bench("tu_to_ogb")
    (tmp_path / "T.txt").write_text(TAGGED)
    graphs = convert.read_gin_text(tmp_path / "T.txt")
    assert [g["y"].tolist() for g in graphs] == [[0], [1]]
    assert np.array_equal(graphs[0]["x"], [[1, 0], [0, 1], [1, 0]])
    assert np.array_equal(graphs[1]["x"], [[0, 1], [1, 0]])
    assert sorted(map(tuple, graphs[0]["edge_index"].T.tolist())) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]


def test_untagged_nodes_take_their_degree_and_the_folder_is_written(bench, tmp_path):
    convert = bench("tu_to_ogb")
    lines = ["12"]
    for i in range(12):  # stars (class 0) and paths (class 1) without tags
        if i % 2:
            lines += ["4 1", "0 1 1", "0 2 0 2", "0 2 1 3", "0 1 2"]
        else:
            lines += ["4 0", "0 3 1 2 3", "0 1 0", "0 1 0", "0 1 0"]
    (tmp_path / "IMDBBINARY.txt").write_text("\n".join(lines) + "\n")
    graphs = convert.read_gin_text(tmp_path / "IMDBBINARY.txt")
    assert np.array_equal(graphs[0]["x"].argmax(1), [2, 0, 0, 0])  # degrees 3, 1, 1, 1 among {1, 2, 3}
    assert np.array_equal(graphs[1]["x"].argmax(1), [0, 1, 1, 0])
    assert convert.main(["--raw", str(tmp_path), "--out", str(tmp_path / "out"), "imdbbinary"]) == 0
    meta = read_meta_json(tmp_path / "out" / "imdbbinary")
    assert (meta["task_type"], meta["eval_metric"], meta["num_classes"]) == ("multiclass classification", "acc", 2)
    assert convert.main(["--raw", str(tmp_path), "--out", str(tmp_path / "out"), "--no-features", "imdbbinary"]) == 0
    plain = read_meta_json(tmp_path / "out" / "imdbbinary_nofeat")
    assert meta["has_node_attr"] and not plain["has_node_attr"] and plain["split"] == meta["split"]
    for part in ("train", "valid", "test"):  # the same split as the featured folder's
        file = Path("split") / meta["split"] / f"{part}.csv.gz"
        assert (tmp_path / "out" / "imdbbinary" / file).read_bytes() == \
            (tmp_path / "out" / "imdbbinary_nofeat" / file).read_bytes()

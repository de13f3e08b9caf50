"""pipeline/node_graph_import.py: a PyG graph's arrays (a Data, its to_dict() in a .pt, a one-graph
processed file, an .npz) become an OGB-layout folder that the reader gives back unchanged; a source
that is not one node-prediction graph is one line naming the array."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, InMemoryDataset

from pipeline.errors import DatasetError
from pipeline.family import read_meta_json
from pipeline.node_graph_import import ImportOptions, import_node_graph, node_graph_parts
from pipeline.ogb_layout import read_ogb_folder


def _graph(n: int = 40, classes: int = 4, seed: int = 0) -> Data:
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, 3 * n), generator=g)
    train, val = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
    train[: n // 2], val[n // 2: 3 * n // 4] = True, True
    return Data(x=torch.randn(n, 5, generator=g), edge_index=edge_index, y=torch.randint(0, classes, (n,), generator=g),
                train_mask=train, val_mask=val, test_mask=~(train | val))


def _read_back(folder: Path):
    return read_ogb_folder(folder, read_meta_json(folder))


def _same_graph(raw, data: Data) -> None:
    assert raw.num_nodes == data.num_nodes
    assert np.array_equal(raw.edge_index, data.edge_index.numpy())
    assert np.allclose(raw.node_feat, data.x.numpy())
    assert np.array_equal(raw.split["train"], data.train_mask.nonzero().view(-1).numpy())
    assert np.array_equal(raw.split["test"], data.test_mask.nonzero().view(-1).numpy())


@pytest.mark.parametrize("form", ["data", "to_dict.pt", "processed.pt", "npz"])
def test_every_form_of_a_pyg_graph_reads_back_as_the_same_graph(tmp_path, form):
    data = _graph()
    source: object = data
    if form == "to_dict.pt":
        torch.save(data.to_dict(), source := tmp_path / "g.pt")
    elif form == "processed.pt":
        InMemoryDataset.save([data], source := tmp_path / "data.pt")
    elif form == "npz":
        np.savez(source := tmp_path / "g.npz", **{k: v.numpy() for k, v in data.to_dict().items()})
    imported = import_node_graph(source, tmp_path / "out")
    raw, summary = _read_back(imported.folder), imported.summary
    _same_graph(raw, data)
    assert raw.meta["task_type"] == "multiclass classification" and raw.meta["num_classes"] == 4
    assert np.array_equal(raw.labels.reshape(-1), data.y.numpy())
    assert summary.startswith("40 nodes, 120 edges, 5 features, 4 classes (acc); split train_mask/val_mask/test_mask")
    assert "not kept" not in summary


def test_edge_features_are_said_to_be_left_out(tmp_path):
    data = _graph()
    data.edge_attr = torch.randn(data.num_edges, 2)
    torch.save(data.to_dict(), tmp_path / "g.pt")
    summary = import_node_graph(tmp_path / "g.pt", tmp_path / "out").summary
    assert summary.endswith("; not kept: edge_attr [120, 2] (gnnkit's node recipes read no edge features)")


def test_two_classes_are_binary_by_rocauc_unless_acc_is_asked_for():
    arrays = {k: v.numpy() for k, v in _graph(classes=2).to_dict().items()}
    parts = node_graph_parts(arrays)
    assert parts["meta"]["task type"] == "binary classification" and parts["labels"].shape == (40, 1)
    parts = node_graph_parts(arrays, ImportOptions(metric="acc"))
    assert parts["meta"]["task type"] == "multiclass classification" and parts["meta"]["num classes"] == 2
    with pytest.raises(DatasetError, match="graph: metric: rocauc scores two classes .*; y has 4"):
        node_graph_parts({k: v.numpy() for k, v in _graph().to_dict().items()}, ImportOptions(metric="rocauc"))


def test_a_label_matrix_is_several_binary_tasks_with_nan_unknown(tmp_path):
    data = _graph()
    y = torch.randint(0, 2, (40, 3)).float()
    y[data.test_mask.nonzero().view(-1)[:3], 1] = float("nan")
    data.y = y
    raw = _read_back(import_node_graph(data, tmp_path / "out").folder)
    assert raw.meta["num_tasks"] == 3 and raw.meta["eval_metric"] == "rocauc"
    assert np.array_equal(np.isnan(raw.labels), np.isnan(y.numpy()))
    assert np.allclose(np.nan_to_num(raw.labels), y.nan_to_num())


def test_two_dimensional_masks_give_the_chosen_split_either_way_round():
    data = _graph()
    masks = {name: np.stack([data[name].numpy(), np.roll(data[name].numpy(), 1)], axis=1)
             for name in ("train_mask", "val_mask", "test_mask")}  # [N, 2], as PyG's WikipediaNetwork
    arrays = {"x": data.x.numpy(), "edge_index": data.edge_index.numpy(), "y": data.y.numpy(), **masks}
    one = node_graph_parts(arrays, ImportOptions(split=1))
    assert np.array_equal(one["split"]["train"], np.flatnonzero(masks["train_mask"][:, 1]))
    assert one["meta"]["split"] == "masks1" and "(split 1 of 2)" in one["summary"]
    rows = {**arrays, **{k: v.T for k, v in masks.items()}}  # [2, N], as Platonov et al.'s files
    assert np.array_equal(node_graph_parts(rows, ImportOptions(split=1))["split"]["valid"], one["split"]["valid"])
    with pytest.raises(DatasetError, match="graph: train_mask: expected a split in 0..1, got 2"):
        node_graph_parts(arrays, ImportOptions(split=2))


def test_index_arrays_and_no_split_at_all():
    data = _graph()
    base = {"x": data.x.numpy(), "edge_index": data.edge_index.T.numpy(), "y": data.y.numpy()}  # [E, 2] edges
    ids = {"train_idx": np.array([0, 1, 2]), "valid_idx": np.array([3]), "test_idx": np.array([4, 5])}
    parts = node_graph_parts({**base, **ids})
    assert {k: v.tolist() for k, v in parts["split"].items()} == {"train": [0, 1, 2], "valid": [3], "test": [4, 5]}
    assert np.array_equal(parts["edge_index"], data.edge_index.numpy())
    base["y"][:4] = -1  # unlabelled nodes are in no split made here
    made = node_graph_parts(base, ImportOptions(seed=3))
    assert [len(made["split"][p]) for p in ("train", "valid", "test")] == [18, 9, 9]
    assert np.array_equal(np.sort(np.concatenate(list(made["split"].values()))), np.arange(4, 40))
    assert made["meta"]["split"] == "random3"
    again = node_graph_parts(base, ImportOptions(seed=3))
    assert all(np.array_equal(made["split"][p], again["split"][p]) for p in made["split"])


def _set(**changes):
    """A change to a graph's arrays: new values, ``None`` to drop one."""
    def change(arrays):
        for name, value in changes.items():
            if value is None:
                del arrays[name]
            else:
                arrays[name] = value(arrays) if callable(value) else value
    return change


def _ids(train, valid, test):
    return _set(train_mask=None, val_mask=None, test_mask=None, train_idx=np.array(train), valid_idx=np.array(valid),
                test_idx=np.array(test))


def _with_nan(x):
    x["x"][3, 1] = np.nan
    return x["x"]


BAD = {
    "edges of 3 rows": (_set(edge_index=np.zeros((3, 5), np.int64)),
                        r"graph: edge_index: expected \[2, E\] or \[E, 2\] integer node ids"),
    "edge beyond N": (_set(edge_index=np.array([[0, 40]])),
                      r"graph: edge_index \(with 40 nodes from x\): edge endpoint 40 out of range \[0, 40\)"),
    "fractional y": (_set(y=np.random.rand(40)), "graph: y: .*got fractions; regression is not a gnnkit node task"),
    "string y": (_set(y=np.array(["a", "b"] * 20)), r"graph: y: expected integer classes per node \(-1 unlabelled\), "
                                                    "got <U1 of shape"),
    "one class": (_set(y=np.zeros(40, np.int64)), "graph: y: expected at least two classes among the labelled nodes"),
    "y of -2": (_set(y=lambda a: np.where(np.arange(40) == 39, -2, a["y"])),
                "graph: y: expected classes 0, 1, ... and -1 for unlabelled nodes, found -2"),
    "a stray huge class": (_set(y=lambda a: np.where(np.arange(40) == 0, 10**9, a["y"])),
                           "graph: y: class 1000000000 among 40 labelled nodes: expected classes numbered 0, 1"),
    "short y": (_set(y=np.zeros(39, np.int64)), r"graph: y: expected one row per node \(40\), got shape \[39\]"),
    "no val_mask": (_set(val_mask=None),
                    r"graph: has \['train_mask', 'test_mask'\] but not \['val_mask'\]: expected all three"),
    "empty train": (_set(train_mask=np.zeros(40, bool)), "graph: train_mask: selects no node: expected some"),
    "empty valid": (_set(val_mask=np.zeros(40, bool)), "graph: val_mask: selects no node"),
    "mask of 2s": (_set(train_mask=np.full(40, 2)), "graph: train_mask: expected a mask of booleans"),
    "overlap": (_set(test_mask=lambda a: a["test_mask"] | a["train_mask"]),
                r"graph: test_mask: overlaps an earlier split \(node 0 is in both\)"),
    "masks and ids": (_set(train_idx=np.array([0])), "graph: has both train_mask and train_idx: expected one"),
    "id beyond N": (_ids([0], [1], [99]), r"graph: test_idx: node index 99 out of range \[0, 40\)"),
    "repeated ids": (_ids([0, 1, 1], [2], [3]), "graph: train_idx: node indices repeat within the split"),
    "node count of 2": (_set(num_nodes=np.array([3, 4])),
                        r"graph: num_nodes: expected a node count, got int64 of shape \[2\]"),
    "scalar x": (_set(x=np.array(1.0)), r"graph: x: expected a row per node, got float64 of shape \[\]"),
    "NaN feature": (_set(x=_with_nan), r"graph: x \(in float32\): non-finite feature value in row 3"),
    "beyond float32": (_set(x=np.full((40, 2), 1e300)), r"graph: x \(in float32\): non-finite feature value in row 0"),
    "complex x": (_set(x=np.ones((40, 2), complex)), "graph: x: expected real numbers, got complex128"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_array_is_one_line_naming_it(case):
    change, message = BAD[case]
    arrays = {k: v.numpy() for k, v in _graph().to_dict().items()}
    change(arrays)
    with pytest.raises(DatasetError, match=message):
        node_graph_parts(arrays)


def test_a_split_that_no_run_could_score_is_refused():
    arrays = {k: v.numpy() for k, v in _graph(classes=2).to_dict().items()}
    arrays["y"][arrays["test_mask"]] = 0  # ROC-AUC on a test split of one class is undefined
    with pytest.raises(DatasetError, match="graph: test_mask: holds one class only in every task: ROC-AUC needs both"):
        node_graph_parts(arrays)
    assert node_graph_parts(arrays, ImportOptions(metric="acc"))["meta"]["eval metric"] == "acc"
    few = {"edge_index": arrays["edge_index"], "y": np.array([0, 1, 2] + [-1] * 37)}
    with pytest.raises(DatasetError, match=r"graph: random split \(seed 0\) test: selects no node"):
        node_graph_parts(few)
    with pytest.raises(DatasetError, match="graph: split: split 2 asked for, but there are no masks"):
        node_graph_parts({**few, "y": np.arange(40) % 3}, ImportOptions(split=2))
    with pytest.raises(DatasetError, match="graph: split: split 1 asked for, but the masks hold one split"):
        node_graph_parts(arrays, ImportOptions(split=1, metric="acc"))


def test_one_hot_rows_are_classes_and_a_label_matrix_is_tasks_only_by_rocauc():
    arrays = {k: v.numpy() for k, v in _graph().to_dict().items()}
    classes = arrays["y"].copy()
    arrays["y"] = np.eye(5, dtype=np.float32)[classes]  # class 4 has no node
    parts = node_graph_parts(arrays)
    assert np.array_equal(parts["labels"], classes) and parts["meta"]["num classes"] == 5
    assert ("5 classes (acc); one-hot y read as classes (--metric rocauc: 5 binary tasks); no node of class 4; "
            "split") in parts["summary"]
    arrays["y"] = arrays["y"][:, :4]
    assert node_graph_parts(arrays, ImportOptions(metric="rocauc"))["meta"]["num tasks"] == 4
    arrays["y"][0] = [1, 1, 0, 0]
    with pytest.raises(DatasetError, match=r"graph: metric: an \[N, 4\] label matrix that is not one-hot is 4 binary "
                                           "tasks, scored by rocauc, not acc"):
        node_graph_parts(arrays, ImportOptions(metric="acc"))


def test_a_split_with_unlabelled_nodes_is_refused():
    arrays = {k: v.numpy() for k, v in _graph().to_dict().items()}
    arrays["y"][0] = -1
    with pytest.raises(DatasetError, match="graph: 1 nodes of the 'train' split have no label"):
        node_graph_parts(arrays)


def test_an_existing_folder_is_not_written_over(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(DatasetError, match="out: exists: expected a new folder"):
        import_node_graph(_graph(), tmp_path / "out")
    assert not any((tmp_path / "out").iterdir())
    (tmp_path / "list.yaml").write_text("")
    with pytest.raises(DatasetError, match=f"{tmp_path / 'list.yaml'} is a file: expected a folder to write the "
                                           "dataset under$"):  # it said "exists: expected a new folder"
        import_node_graph(_graph(), tmp_path / "list.yaml" / "g")


def test_the_name_decides_a_two_by_two_edge_array_and_whole_float_ids_are_ids():
    arrays = {k: v.numpy() for k, v in _graph().to_dict().items()}
    pairs = np.array([[0, 5], [1, 4]])
    assert node_graph_parts({**arrays, "edge_index": pairs})["edge_index"].tolist() == [[0, 5], [1, 4]]
    del arrays["edge_index"]
    assert node_graph_parts({**arrays, "edges": pairs})["edge_index"].tolist() == [[0, 1], [5, 4]]  # 0->5, 1->4
    ids = {"train_idx": np.array([0.0, 1.0]), "valid_idx": np.array([2.0]), "test_idx": np.array([3.0])}
    masks = ("train_mask", "val_mask", "test_mask")
    plain = {k: v for k, v in arrays.items() if k not in masks}
    parts = node_graph_parts({**plain, "edges": pairs, **ids})
    assert parts["split"]["train"].tolist() == [0, 1] and parts["split"]["train"].dtype == np.int64
    with pytest.raises(DatasetError, match="graph: train_idx: 'train_idx' must hold whole-number ids, found 0.5"):
        node_graph_parts({**plain, "edges": pairs, **ids, "train_idx": np.array([0.5])})


def test_a_rocauc_refusal_says_what_would_do_and_width_zero_features_are_none():
    data = _graph(classes=2)
    arrays = {"edge_index": data.edge_index.numpy(), "y": np.r_[np.zeros(38, np.int64), [1, 1]],
              "x": np.zeros((40, 0), np.float32)}
    with pytest.raises(DatasetError, match=r"random split \(seed 0\) (train|valid|test): holds one class only in "
                                           r"every task: ROC-AUC needs both \(another --seed\)"):
        node_graph_parts(arrays)
    tasks = np.zeros((40, 2), np.float32)
    tasks[:20] = 1
    arrays = {k: v.numpy() for k, v in data.to_dict().items()}
    with pytest.raises(DatasetError, match=r"graph: train_mask: holds one class only .*\(another split\)"):
        node_graph_parts({**arrays, "y": tasks})
    parts = node_graph_parts({**arrays, "x": np.zeros((40, 0))})
    assert parts["node_feat"] is None and "no features" in parts["summary"]


def test_two_one_hot_columns_are_one_binary_task():
    arrays = {k: v.numpy() for k, v in _graph(classes=2).to_dict().items()}
    arrays["y"] = np.eye(2)[arrays["y"]]
    for metric in (None, "rocauc"):
        parts = node_graph_parts(arrays, ImportOptions(metric=metric))
        assert parts["meta"]["num tasks"] == 1 and parts["meta"]["eval metric"] == "rocauc"
        assert parts["summary"].count("one-hot y read as classes;") == 1


def test_an_existing_folder_is_refused_before_the_source_is_read(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(DatasetError, match="out: exists"):
        import_node_graph(tmp_path / "absent.pt", tmp_path / "out")

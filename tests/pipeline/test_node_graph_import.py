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
from pipeline.node_graph_import import ImportOptions, import_node_graph, node_graph_parts, read_arrays
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


@pytest.mark.parametrize(("change", "message"), [
    ({"edge_index": np.zeros((3, 5), np.int64)}, r"graph: edge_index: expected \[2, E\] or \[E, 2\] integer node ids"),
    ({"edge_index": np.array([[0, 40]])}, r"graph: edge_index: node ids must lie in \[0, 40\) \(x gives 40 nodes\)"),
    ({"y": np.random.rand(40)}, "graph: y: expected integer classes per node .*regression is not a gnnkit node task"),
    ({"y": np.zeros(40, np.int64)}, "graph: y: expected at least two classes among the labelled nodes, got 1"),
    ({"y": np.zeros(39, np.int64)}, r"graph: y: expected one row per node \(40\), got shape \[39\]"),
    ({"val_mask": None}, r"graph: has \['train_mask', 'test_mask'\] but not \['val_mask'\]: expected all three"),
    ({"train_mask": np.zeros(40, bool)}, "graph: train_mask: selects no node: expected training nodes"),
    ({"train_mask": np.full(40, 2)}, "graph: train_mask: expected a mask of booleans"),
    ({"test_idx": np.array([99])}, r"graph: test_idx: expected node ids in \[0, 40\)"),
    ({"num_nodes": np.array([3, 4])}, r"graph: num_nodes: expected a node count, got int64 of shape \[2\]"),
    ({"x": np.array(1.0)}, r"graph: x: expected a row per node, got float64 of shape \[\]"),
])
def test_a_bad_array_is_one_line_naming_it(change, message):
    arrays = {k: v.numpy() for k, v in _graph().to_dict().items()}
    arrays.update({k: v for k, v in change.items() if v is not None})
    for name in [k for k, v in change.items() if v is None] + (["test_mask"] if "test_idx" in change else []):
        del arrays[name]
    if "test_idx" in change:
        arrays.update(train_idx=np.array([0]), valid_idx=np.array([1]))
        del arrays["train_mask"], arrays["val_mask"]
    with pytest.raises(DatasetError, match=message):
        node_graph_parts(arrays)


def test_a_split_with_unlabelled_nodes_is_refused():
    arrays = {k: v.numpy() for k, v in _graph().to_dict().items()}
    arrays["y"][0] = -1
    with pytest.raises(DatasetError, match="graph: train_mask: selects 1 unlabelled nodes: expected labelled ones"):
        node_graph_parts(arrays)


def test_files_that_are_not_one_homogeneous_graph_are_refused_and_nothing_is_written(tmp_path):
    data = _graph()
    torch.save(data, tmp_path / "pickled.pt")
    InMemoryDataset.save([data, _graph(seed=1)], tmp_path / "many.pt")
    torch.save({"paper": {"x": torch.zeros(2, 2)}}, tmp_path / "hetero.pt")
    (tmp_path / "g.csv").write_text("0,1\n")
    np.savez(tmp_path / "objects.npz", y=np.array([{"a": 1}], dtype=object))
    cases = {"pickled.pt": r"cannot be read with weights_only=True \(UnpicklingError\): a pickled Data\? save the "
                           r"graph with torch.save\(data.to_dict\(\), path\)",
             "many.pt": "a dataset of 2 graphs; gnnkit import takes one graph for node prediction",
             "hetero.pt": r"a heterogeneous graph \(types \['paper'\]\)",
             "g.csv": r"expected a .pt file \(torch.save\(data.to_dict\(\), path\)\) or an .npz file",
             "objects.npz": "not a readable npz file of plain arrays",
             "absent.pt": "no such file"}
    for name, message in cases.items():
        with pytest.raises(DatasetError, match=f"{name}: {message}"):
            import_node_graph(tmp_path / name, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_is_not_written_over(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(DatasetError, match="out: exists: expected a new folder"):
        import_node_graph(_graph(), tmp_path / "out")
    assert not any((tmp_path / "out").iterdir())


def test_read_arrays_gives_tensors_as_arrays(tmp_path):
    torch.save({"edge_index": torch.tensor([[0], [1]]), "num_nodes": 2, "name": "kept out"}, tmp_path / "g.pt")
    arrays = read_arrays(tmp_path / "g.pt")
    assert set(arrays) == {"edge_index", "num_nodes"} and arrays["edge_index"].tolist() == [[0], [1]]

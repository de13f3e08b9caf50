"""pipeline/graph_set_import.py: a PyG graph dataset (TUDataset's processed file, the dataset itself,
a list of to_dict() graphs, a Batch) becomes an OGB-layout graph folder that graph_layout reads back
graph for graph; a source that cannot make a graph task is one line naming the array."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data, InMemoryDataset
from torch_geometric.datasets import FakeDataset, TUDataset

from pipeline import graph_layout
from pipeline.errors import DatasetError
from pipeline.family import read_meta_json
from pipeline.graph_set_import import GraphSetImportOptions, graph_set_parts, import_graph_set, read_graph_set
from pipeline.options import PreprocessOptions


def _tu_raw(root: Path, name: str, graphs: int = 40, labels: bool = True) -> Path:
    """A dataset in the TU collection's text format (``NAME_A.txt``, ...), read by PyG's own TUDataset."""
    rng = np.random.default_rng(0)
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    edges, owner, node_labels, edge_labels, offset = [], [], [], [], 0
    for g in range(graphs):
        n = int(rng.integers(4, 12))
        owner += [g + 1] * n
        node_labels += rng.integers(0, 3, n).tolist()
        for i in range(1, n):
            j = int(rng.integers(0, i)) if g % 2 else i - 1  # class 1: trees, class 0: paths
            edges += [(offset + i + 1, offset + j + 1), (offset + j + 1, offset + i + 1)]
            edge_labels += [int(rng.integers(0, 2))] * 2
        offset += n
    np.savetxt(raw / f"{name}_A.txt", np.array(edges), fmt="%d", delimiter=", ")
    np.savetxt(raw / f"{name}_graph_indicator.txt", np.array(owner), fmt="%d")
    np.savetxt(raw / f"{name}_graph_labels.txt", np.arange(graphs) % 2, fmt="%d")
    if labels:
        np.savetxt(raw / f"{name}_node_labels.txt", np.array(node_labels), fmt="%d")
        np.savetxt(raw / f"{name}_edge_labels.txt", np.array(edge_labels), fmt="%d")
    return root


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> TUDataset:
    return TUDataset(str(_tu_raw(tmp_path_factory.mktemp("tu"), "TOY")), "TOY", use_node_attr=True,
                     use_edge_attr=True)


def _build(folder: Path) -> dict[str, np.ndarray]:
    return graph_layout.build(folder, read_meta_json(folder), PreprocessOptions(), lambda _msg: None)[0]


def _graph_edges(arrays: dict[str, np.ndarray], g: int) -> set[tuple[int, int]]:
    lo, hi = arrays["graph_ptr"][g], arrays["graph_ptr"][g + 1]
    rows = np.repeat(np.arange(lo, hi), np.diff(arrays["indptr"][lo: hi + 1]))
    cols = arrays["indices"][arrays["indptr"][lo]: arrays["indptr"][hi]]
    return set(zip((cols - lo).tolist(), (rows - lo).tolist()))


def test_a_tu_dataset_reads_back_graph_for_graph_from_each_form(toy, tmp_path):
    processed = Path(toy.processed_paths[0])
    torch.save([g.to_dict() for g in toy], listed := tmp_path / "list.pt")
    folders = [import_graph_set(source, tmp_path / f"out{i}").folder
               for i, source in enumerate((processed, toy, listed, Batch.from_data_list(list(toy))))]
    first = {p.relative_to(folders[0]): p.read_bytes() for p in sorted(folders[0].rglob("*")) if p.is_file()}
    for other in folders[1:]:  # the same folder byte for byte
        assert first == {p.relative_to(other): p.read_bytes() for p in sorted(other.rglob("*")) if p.is_file()}
    arrays = _build(folders[0])
    assert np.array_equal(np.diff(arrays["graph_ptr"]), [g.num_nodes for g in toy])
    for g in (0, 1, 17, len(toy) - 1):
        assert _graph_edges(arrays, g) == set(map(tuple, toy[g].edge_index.T.tolist()))
    assert np.allclose(arrays["x"], torch.cat([g.x for g in toy]).numpy())
    assert np.array_equal(arrays["y"].reshape(-1), toy._data.y.numpy())
    split = [arrays[f"split.{p}"] for p in ("train", "valid", "test")]
    assert [len(s) for s in split] == [32, 4, 4] and np.array_equal(np.sort(np.concatenate(split)), np.arange(40))
    meta = read_meta_json(folders[0])
    assert (meta["task_type"], meta["eval_metric"], meta["num_classes"], meta["molecular"]) == \
        ("multiclass classification", "acc", 2, False)
    assert meta["has_edge_attr"] and meta["binary"]


def test_featureless_graphs_keep_their_node_counts(tmp_path):
    bare = TUDataset(str(_tu_raw(tmp_path, "BARE", labels=False)), "BARE")
    where, graphs = read_graph_set(Path(bare.processed_paths[0]))
    assert graphs.x is None and np.array_equal(graphs.num_nodes, [g.num_nodes for g in bare])
    imported = import_graph_set(Path(bare.processed_paths[0]), tmp_path / "out")
    assert not imported.has_features and "no node features, no edge features, 2 classes (acc)" in imported.summary


def _graphs(y: list, count: int = 20) -> list[Data]:
    return [Data(edge_index=torch.tensor([[0, 1], [1, 0]]), x=torch.ones(2, 1), y=torch.tensor(y[i % len(y)]))
            for i in range(count)]


def test_labels_make_the_task_the_literature_scores():
    def task(y, metric=None):
        _, graphs = read_graph_set(_graphs(y, count=60))
        return graph_set_parts(graphs, GraphSetImportOptions(metric=metric))["meta"]

    assert (task([[0], [1], [2]])["eval metric"], task([[0], [1], [2]])["num classes"]) == ("acc", 3)
    assert task([[0], [1]], "rocauc")["task type"] == "binary classification"
    assert task([[[0, 1]], [[1, 0]]])["num classes"] == 2  # one-hot rows are classes
    tasks = task([[[0.0, 1.0, float("nan")]], [[1.0, 0.0, 1.0]], [[1.0, 1.0, 0.0]]])
    assert (tasks["num tasks"], tasks["eval metric"]) == (3, "rocauc")
    assert task([[[0.0, 1.0]], [[1.0, 1.0]]], "ap")["eval metric"] == "ap"


@pytest.mark.parametrize("y, metric, message", [
    ([[0.5], [1.7]], None, "regression"),
    ([[[0.0, 1.0]], [[1.0, 1.0]]], "acc", "binary tasks .* scored by rocauc or ap, not acc"),
    ([[0], [1], [2]], "rocauc", r"metric: rocauc scores two classes \(or \[G, T\] 0/1 tasks\); y has 3"),
    ([[0], [-1]], None, "expected classes 0, 1, ..., C-1 for every graph, found -1"),
    ([[0.0], [float("nan")], [2.0]], None, "multi-class labels cannot be missing, found 2.0"),
    ([[[0, 2]], [[1, 0]]], None, r"\[G, 2\] labels are 2 binary tasks: expected 0/1 \(NaN unknown\), found 2"),
    ([[0], [10**9]], None, "class 1000000000 among 20 graphs: expected at least two classes"),
])
def test_labels_no_graph_task_scores_are_one_line(y, metric, message):
    _, graphs = read_graph_set(_graphs(y))
    with pytest.raises(DatasetError, match=message):
        graph_set_parts(graphs, GraphSetImportOptions(metric=metric), "g.pt")


def test_a_metric_no_graph_task_has_is_refused_before_reading():
    with pytest.raises(DatasetError, match="metric: expected one of"):
        GraphSetImportOptions(metric="f1")


def test_node_counts_come_from_positions_too_and_empty_classes_are_named(tmp_path):
    """Graphs sized by `pos` (PyG's Data.num_nodes) lost their trailing isolated nodes."""
    graphs = [Data(edge_index=torch.tensor([[0, 1], [1, 0]]), pos=torch.randn(4, 3), y=torch.tensor([2 * (i % 2)]))
              for i in range(30)]
    for source in (graphs, [g.to_dict() for g in graphs]):
        _, read = read_graph_set(source)
        assert (read.num_nodes == 4).all()
    InMemoryDataset.save(graphs, tmp_path / "pos.pt")
    assert (read_graph_set(tmp_path / "pos.pt")[1].num_nodes == 4).all()
    summary = graph_set_parts(read, where="g")["summary"]
    assert "3 classes (acc); no graph of class 1;" in summary
    mixed = [Data(edge_index=torch.tensor([[0], [1]]), x=torch.ones(2) if i else torch.ones(2, 1),
                  y=torch.tensor([i % 2])) for i in range(12)]  # 1-D features in some graphs, [n, 1] in others
    assert read_graph_set(mixed)[1].x.shape == (24, 1)


def test_what_cannot_make_a_graph_dataset_is_one_line(tmp_path, toy):
    cases = {
        "a graph's edge beyond its nodes": (_graphs([[0], [1]])[:-1] + [Data(edge_index=torch.tensor([[0], [5]]),
                                                                              x=torch.ones(2, 1), y=torch.tensor([1]))],
                                            r"graph 19 has edge \(0, 5\): expected node ids in \[0, 2\)"),
        "too few": (_graphs([[0], [1]], count=6), "6 labelled graphs: expected at least 10"),
        "node labels": ([Data(edge_index=torch.tensor([[0], [1]]), y=torch.tensor([0, 1]))] * 12,
                        "expected one label row per graph, got shape \\[2\\] \\(node labels: --task node\\)"),
        "features in some": (_graphs([[0], [1]])[:-1] + [Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2,
                                                              y=torch.tensor([1]))],
                             "graph 19: has no x, unlike others"),
        "no labels": ([Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2)] * 12, "graph 0: has no y"),
        "one graph": (toy[0], "one graph: expected a PyG dataset or a list of graphs"),
        "edge features of two widths": (_graphs([[0], [1]])[:-1] + [Data(edge_index=torch.tensor([[0], [1]]),
                                                                          x=torch.ones(2, 1), y=torch.tensor([1]),
                                                                          edge_attr=torch.ones(1, 2))],
                                         "graph 19: has edge_attr, unlike others|graph 0: has no edge_attr"),
        "x of two widths": (_graphs([[0], [1]])[:-1] + [Data(edge_index=torch.tensor([[0], [1]]), x=torch.ones(2, 3),
                                                             y=torch.tensor([1]))],
                            "graph 19: x: 3 columns, expected 1 as in the first graph"),
        "infinite x": (_graphs([[0], [1]])[:-1] + [Data(edge_index=torch.tensor([[0], [1]]),
                                                        x=torch.full((2, 1), float("inf")), y=torch.tensor([1]))],
                       "x \\(in float32\\)"),
    }
    for name, (source, message) in cases.items():
        with pytest.raises(DatasetError, match=message):
            import_graph_set(source, tmp_path / "out")
        assert not (tmp_path / "out").exists(), name
    InMemoryDataset.save([Data(edge_index=torch.tensor([[0, 1], [1, 2], [2, 0]]), x=torch.ones(3, 2),
                               y=torch.tensor([i % 2])) for i in range(20)], tmp_path / "rows.pt")
    with pytest.raises(DatasetError, match=r"edge_index: expected \[2, E\] integer node ids, got int64 of shape \[3, "):
        import_graph_set(tmp_path / "rows.pt", tmp_path / "out")
    torch.save({"x": torch.ones(2)}, tmp_path / "dict.pt")
    with pytest.raises(DatasetError, match="a dict: expected a PyG dataset's processed file or a list of graphs"):
        import_graph_set(tmp_path / "dict.pt", tmp_path / "out")


def test_a_split_part_without_both_classes_asks_for_another_seed():
    _, graphs = read_graph_set(_graphs([[0]] * 19 + [[1]], count=20))
    with pytest.raises(DatasetError, match=r"holds one class only in every task: rocauc needs both \(another --seed\)"):
        graph_set_parts(graphs, GraphSetImportOptions(metric="rocauc"), "g.pt")


def _fake_graphs() -> list[dict[str, torch.Tensor]]:
    """40 random graphs as ``to_dict()`` dicts (7 node features, 2 edge features)."""
    torch.manual_seed(0)
    dataset = FakeDataset(num_graphs=40, avg_num_nodes=20, num_channels=7, num_classes=2, edge_dim=2, task="graph")
    return [{k: v.clone() for k, v in d.to_dict().items()} for d in dataset]


@pytest.mark.parametrize("empty, edge_dim, at", [((0, 2), 2, 5), ((0,), 2, 5), ((0, 2), 2, 0), ((0,), 1, 5)])
def test_a_graph_without_edges_imports_beside_edge_features(tmp_path, empty, edge_dim, at):
    """A single-atom molecule (no edges) in a set with edge_attr: 'cannot reshape array of size 0'."""
    graphs = _fake_graphs()
    if edge_dim == 1:  # 1-D edge features, [E]
        graphs = [{**g, "edge_attr": g["edge_attr"][:, 0].contiguous()} for g in graphs]
    graphs[at]["edge_index"], graphs[at]["edge_attr"] = torch.zeros(2, 0, dtype=torch.long), torch.zeros(empty)
    torch.save(graphs, tmp_path / "graphs.pt")
    arrays = _build(import_graph_set(tmp_path / "graphs.pt", tmp_path / "out").folder)
    assert np.diff(arrays["edge_ptr"])[at] == 0 and np.diff(arrays["graph_ptr"])[at] == len(graphs[at]["x"])
    assert arrays["edge_attr"].shape == (sum(g["edge_index"].shape[1] for g in graphs), edge_dim)
    assert np.allclose(np.sort(arrays["edge_attr"], axis=0),
                       np.sort(torch.cat([g["edge_attr"].reshape(-1, edge_dim) for g in graphs]).numpy(), axis=0))


def test_an_empty_edge_attr_of_another_width_is_refused(tmp_path):
    graphs = _fake_graphs()
    graphs[0]["edge_index"], graphs[0]["edge_attr"] = torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, 3)
    with pytest.raises(DatasetError, match=r"graph 0: edge_attr: 3 columns, expected 2 as in graph 1$"):
        import_graph_set(graphs, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_graph_without_nodes_is_one_line_naming_it(tmp_path):
    """x of shape [0, 5] crashed in the join of the graphs' features ('cannot reshape array of size 0')."""
    graphs = [{"x": torch.ones(3, 5), "edge_index": torch.tensor([[0, 1], [1, 2]]), "y": torch.tensor([i % 2])}
              for i in range(20)]
    graphs[3] = {**graphs[3], "x": torch.zeros(0, 5), "edge_index": torch.zeros(2, 0, dtype=torch.long)}
    torch.save(graphs, path := tmp_path / "graphs.pt")
    with pytest.raises(DatasetError, match=rf"^{re.escape(str(path))}: graph 3 has no nodes: expected at least one"):
        import_graph_set(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_non_finite_feature_names_its_graph_and_its_row_there(tmp_path):
    """The row was counted across all graphs joined ('row 39' of the whole set)."""
    graphs = _fake_graphs()
    graphs[2]["x"][4, 1] = float("nan")
    graphs[7]["edge_attr"][3, 0] = float("inf")
    torch.save(graphs, tmp_path / "list.pt")
    InMemoryDataset.save([Data(**g) for g in graphs], tmp_path / "collated.pt")
    for source in ("list.pt", "collated.pt"):
        with pytest.raises(DatasetError, match=r": graph 2: x \(in float32\): non-finite feature value in row 4$"):
            import_graph_set(tmp_path / source, tmp_path / "out")
    graphs[2]["x"][4, 1] = 0
    with pytest.raises(DatasetError, match=r": graph 7: edge_attr \(in float32\): non-finite feature value in row 3$"):
        import_graph_set(graphs, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_each_graph_has_a_feature_row_per_edge(tmp_path):
    """Rows that only add up over all graphs put one graph's features on another's edges."""
    graphs = _graphs([[0], [1]])
    graphs[0].edge_attr, graphs[1].edge_attr = torch.ones(1, 2), torch.ones(3, 2)
    for g in graphs[2:]:
        g.edge_attr = torch.ones(2, 2)
    with pytest.raises(DatasetError, match=r"graph 0: edge_attr: 1 rows, expected one per edge \(2\)$"):
        import_graph_set(graphs, tmp_path / "out")


def test_a_label_given_as_a_zero_dimensional_tensor_is_the_graphs_class(tmp_path):
    """y=torch.tensor(label), as many users write it: `TypeError: len() of unsized object`."""
    graphs = [Data(edge_index=torch.tensor([[0, 1], [1, 0]]), x=torch.ones(2, 1), y=torch.tensor(i % 3))
              for i in range(30)]
    torch.save([g.to_dict() for g in graphs], tmp_path / "scalar.pt")
    _, read = read_graph_set(tmp_path / "scalar.pt")
    assert read.y.reshape(-1).tolist() == [i % 3 for i in range(30)]
    assert graph_set_parts(read)["meta"]["num classes"] == 3


def test_a_missing_file_and_pickled_graphs_say_what_to_do(tmp_path):
    with pytest.raises(DatasetError, match=r"nothing.pt: no such file$"):
        read_graph_set(tmp_path / "nothing.pt")
    torch.save([Data(edge_index=torch.tensor([[0], [1]]), y=torch.tensor([0]))] * 12, tmp_path / "objects.pt")
    with pytest.raises(DatasetError, match=r"a pickled Data\? save it with torch.save\(\[data.to_dict\(\) for data in "
                                           r"dataset\], path\)$"):
        read_graph_set(tmp_path / "objects.pt")


def test_a_task_without_a_labelled_graph_is_named():
    """OGB's evaluator leaves such a task out of the score without a word."""
    nan = float("nan")
    _, graphs = read_graph_set(_graphs([[[0.0, 1.0, nan]], [[1.0, 0.0, nan]], [[1.0, 1.0, nan]]], count=60))
    summary = graph_set_parts(graphs)["summary"]
    assert "3 binary tasks (rocauc); y column 2 has no labelled graph (that task is never scored);" in summary

"""pipeline.graph_layout: OGB's graph-property layout read with OGB's readers, validated, cached, batched."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline import cache
from pipeline import graph_layout as gl
from pipeline import synthetic_graphs as sg
from pipeline.errors import DatasetError
from pipeline.options import PreprocessOptions


@pytest.fixture(scope="module")
def small_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small twin, generated once for the module."""
    folder = tmp_path_factory.mktemp("graphs") / "small"
    sg.generate(folder, sg.presets()["synthetic-molhiv-small"])
    return folder


@pytest.fixture()
def folder(small_folder: Path, tmp_path: Path) -> Path:
    """A private copy a test may break."""
    copy = tmp_path / "copy"
    shutil.copytree(small_folder, copy)
    return copy


def _meta(folder: Path) -> dict:
    return gl.normalise_meta(json.loads((folder / "meta.json").read_text()), "meta.json")


def _build(folder: Path) -> tuple[dict[str, np.ndarray], dict]:
    return gl.build(folder, _meta(folder), PreprocessOptions(), lambda _msg: None)


def _rewrite(path: Path, lines: list[str]) -> None:
    with gzip.open(path, "wt") as handle:
        handle.write("".join(f"{line}\n" for line in lines))


def _lines(path: Path) -> list[str]:
    with gzip.open(path, "rt") as handle:
        return handle.read().splitlines()


def test_meta_of_ogbs_master_csv_normalises():
    """ogbg-molhiv, -molpcba and -ppa as OGB's master.csv describes them."""
    import ogb.graphproppred
    import pandas as pd

    master = pd.read_csv(Path(ogb.graphproppred.__file__).parent / "master.csv", index_col=0, keep_default_na=False)
    hiv = gl.normalise_meta(dict(master["ogbg-molhiv"]), "master.csv")
    assert (hiv["family"], hiv["eval_metric"], hiv["num_tasks"], hiv["molecular"]) == ("graph", "rocauc", 1, True)
    pcba = gl.normalise_meta(dict(master["ogbg-molpcba"]), "master.csv")
    assert (pcba["eval_metric"], pcba["num_tasks"]) == ("ap", 128)
    ppa = gl.normalise_meta(dict(master["ogbg-ppa"]), "master.csv")
    assert (ppa["task_type"], ppa["num_classes"], ppa["has_node_attr"], ppa["molecular"]) == (
        "multiclass classification", 37, False, False)


def test_bad_meta_names_the_key():
    raw = sg.meta_dict(sg.presets()["synthetic-molhiv-small"])
    with pytest.raises(DatasetError, match="missing meta key 'has_edge_attr'"):
        gl.normalise_meta({k: v for k, v in raw.items() if k != "has_edge_attr"}, "m.json")
    with pytest.raises(DatasetError, match="'eval metric' must be one of"):
        gl.normalise_meta({**raw, "eval metric": "F1"}, "m.json")


def test_reader_builds_a_csr_that_matches_the_raw_bonds(small_folder: Path):
    arrays, meta = _build(small_folder)
    spec = sg.presets()["synthetic-molhiv-small"]
    data = sg.build(spec)
    assert meta["num_graphs"] == spec.num_graphs and meta["family"] == "graph"
    assert np.array_equal(np.diff(arrays["graph_ptr"]), data["num_nodes"])
    # every bond is stored in both directions (add_inverse_edge), rows = destinations
    assert arrays["indices"].size == 2 * data["edges"].shape[0]
    assert np.array_equal(arrays["edge_ptr"], arrays["indptr"][arrays["graph_ptr"]])
    offsets = np.repeat(arrays["graph_ptr"][:-1], data["num_edges"])
    bonds = data["edges"] + offsets[:, None]
    expected = sorted(map(tuple, np.concatenate([bonds, bonds[:, ::-1]])))
    dst = np.repeat(np.arange(arrays["indptr"].size - 1), np.diff(arrays["indptr"]))
    assert sorted(zip(arrays["indices"].tolist(), dst.tolist())) == expected
    assert arrays["x"].dtype == np.int64 and arrays["x"].shape[1] == 9
    assert np.array_equal(arrays["x"], data["node_feat"])
    assert arrays["y"].shape == (spec.num_graphs, 1) and np.array_equal(arrays["y"][:, 0], data["labels"])
    for name in ("train", "valid", "test"):
        assert np.array_equal(arrays[f"split.{name}"], data["split"][name])


def test_edge_features_follow_the_csr_order(small_folder: Path):
    """Edge features are permuted with the edges: the raw bond (a, b)'s features sit at its CSR slot."""
    arrays, _ = _build(small_folder)
    data = sg.build(sg.presets()["synthetic-molhiv-small"])
    offsets = np.repeat(arrays["graph_ptr"][:-1], data["num_edges"])
    feat = {(int(a), int(b)): f for (a, b), f in zip(data["edges"] + offsets[:, None], data["edge_feat"])}
    dst = np.repeat(np.arange(arrays["indptr"].size - 1), np.diff(arrays["indptr"]))
    for e in range(0, arrays["indices"].size, 97):
        s, d = int(arrays["indices"][e]), int(dst[e])
        assert np.array_equal(arrays["edge_attr"][e], feat.get((s, d), feat.get((d, s))))


def test_batch_is_the_block_diagonal_of_its_graphs(small_folder: Path):
    """GraphSet.batch against a per-graph reference built from the arrays by hand."""
    arrays, meta = _build(small_folder)
    graphs = gl.graph_set_from_arrays(arrays, meta)
    ids = torch.tensor([5, 0, 17, 5])
    batch = graphs.batch(ids)
    offset, edges = 0, []
    for g in ids.tolist():
        lo, hi = int(arrays["graph_ptr"][g]), int(arrays["graph_ptr"][g + 1])
        for v in range(lo, hi):
            for e in range(int(arrays["indptr"][v]), int(arrays["indptr"][v + 1])):
                edges.append((int(arrays["indices"][e]) - lo + offset, v - lo + offset, e))
        offset += hi - lo
    assert batch.num_nodes == offset and batch.num_graphs == 4
    assert batch.edge_index.t().tolist() == [[s, d] for s, d, _ in edges]
    assert torch.equal(batch.edge_attr, torch.from_numpy(arrays["edge_attr"][[e for *_, e in edges]]))
    assert torch.equal(batch.y, torch.from_numpy(arrays["y"])[ids])
    assert torch.equal(torch.bincount(batch.batch), torch.diff(batch.ptr))
    assert torch.equal(batch.indptr[-1:], torch.tensor([len(edges)]))
    assert torch.equal(graphs.graph(17).x, torch.from_numpy(arrays["x"][arrays["graph_ptr"][17]:arrays["graph_ptr"][18]]))


def test_open_entry_reads_back_a_published_cache_entry(small_folder: Path, tmp_path: Path):
    arrays, meta = _build(small_folder)
    entry = cache.publish(tmp_path, "k" * 20, {"dataset": "small"}, arrays, meta)
    graphs = gl.open_entry(entry)
    assert graphs.num_graphs == meta["num_graphs"] and graphs.num_edges == meta["num_edges"]
    assert torch.equal(graphs.batch(torch.tensor([3])).x, gl.graph_set_from_arrays(arrays, meta).graph(3).x)


def test_edge_id_outside_its_graph_is_one_line(folder: Path):
    lines = _lines(folder / "raw" / "edge.csv.gz")
    lines[0] = "0,99"
    _rewrite(folder / "raw" / "edge.csv.gz", lines)
    with pytest.raises(DatasetError, match=r"edge\.csv\.gz: graph 0 has edge \(0, 99\); expected node ids in \[0, \d+\)"):
        _build(folder)


def test_graph_without_nodes_is_one_line(folder: Path):
    nodes = _lines(folder / "raw" / "num-node-list.csv.gz")
    edges = _lines(folder / "raw" / "num-edge-list.csv.gz")
    _rewrite(folder / "raw" / "num-node-list.csv.gz", ["0", *nodes])  # one more graph, empty
    _rewrite(folder / "raw" / "num-edge-list.csv.gz", ["0", *edges])
    with pytest.raises(DatasetError, match="num-node-list.csv.gz: graph 0 has no nodes"):
        _build(folder)


def test_label_rows_must_match_the_graph_count(folder: Path):
    labels = _lines(folder / "raw" / "graph-label.csv.gz")
    _rewrite(folder / "raw" / "graph-label.csv.gz", labels[:-1])
    with pytest.raises(DatasetError, match=r"graph-label.csv.gz: has 399 label rows, expected one per graph \(400\)"):
        _build(folder)


def _as_multiclass(folder: Path, labels: list[str]) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    meta.update({"task type": "multiclass classification", "eval metric": "acc", "num classes": 3})
    (folder / "meta.json").write_text(json.dumps(meta))
    _rewrite(folder / "raw" / "graph-label.csv.gz", labels)


@pytest.mark.parametrize(("change", "message"), [
    ({4: "active"}, r"graph-label.csv.gz: graph labels must be numbers, found 'active'"),
    ({4: ""}, r"graph-label.csv.gz: graph 4 has label nan; expected an integer class id in \[0, 3\) for every graph"),
    ({7: "3"}, r"graph 7 has label 3; expected an integer class id in \[0, 3\)"),
    ({7: "1.5"}, r"graph 7 has label 1.5;"),
])
def test_bad_multiclass_labels_name_the_graph(folder: Path, change: dict, message: str):
    """Text was a traceback, a NaN or a fraction 'expected integer class ids' with no row."""
    labels = [str(i % 3) for i in range(400)]
    _as_multiclass(folder, [change.get(i, value) for i, value in enumerate(labels)])
    with pytest.raises(DatasetError, match=message):
        _build(folder)


def test_whole_float_class_ids_read_as_the_integers(folder: Path):
    """pandas writes a column that held a NaN as 2.0; those were refused."""
    _as_multiclass(folder, [f"{i % 3}.0" for i in range(400)])
    arrays, _ = _build(folder)
    assert arrays["y"].dtype == np.int64 and arrays["y"][:, 0].tolist() == [i % 3 for i in range(400)]


def test_a_blank_line_is_a_missing_binary_label(folder: Path):
    """It was skipped, and the file then had one label row too few."""
    labels = _lines(folder / "raw" / "graph-label.csv.gz")
    labels[5] = ""
    _rewrite(folder / "raw" / "graph-label.csv.gz", labels)
    arrays, _ = _build(folder)
    assert arrays["y"].shape[0] == 400 and np.isnan(arrays["y"][5, 0]) and not np.isnan(arrays["y"][6, 0])


def test_split_out_of_range_is_one_line(folder: Path):
    path = folder / "split" / "scaffold" / "test.csv.gz"
    _rewrite(path, [*_lines(path), "400"])
    with pytest.raises(DatasetError, match=r"test.csv.gz: graph id 400 out of range; expected ids in \[0, 400\)"):
        _build(folder)


def test_overlapping_splits_are_one_line(folder: Path):
    train = _lines(folder / "split" / "scaffold" / "train.csv.gz")
    path = folder / "split" / "scaffold" / "valid.csv.gz"
    _rewrite(path, [*_lines(path), train[0]])
    with pytest.raises(DatasetError, match=f"valid.csv.gz: graph id {train[0]} is also in an earlier split"):
        _build(folder)


def test_edge_file_shorter_than_declared_is_one_line(folder: Path):
    lines = _lines(folder / "raw" / "edge.csv.gz")
    _rewrite(folder / "raw" / "edge.csv.gz", lines[:-1])
    with pytest.raises(DatasetError, match="edge.csv.gz: has .* lines, but num-edge-list.csv.gz says"):
        _build(folder)


def test_preprocessing_options_are_refused_by_name(small_folder: Path):
    with pytest.raises(DatasetError, match="preprocess.undirected: graph datasets take no preprocessing option"):
        gl.build(small_folder, _meta(small_folder), PreprocessOptions(undirected=True), lambda _msg: None)


def test_registry_twin_preprocesses_through_the_family_dispatch():
    """synthetic-molhiv-small end to end: generated, read by the graph layout, cached, opened."""
    from pipeline import preprocess

    entry = preprocess("synthetic-molhiv-small")
    graphs = gl.open_entry(entry)
    assert entry.manifest["meta"]["family"] == "graph" and graphs.num_graphs == 400
    assert graphs.meta["eval_metric"] == "rocauc"


def test_binary_layout_reads_the_same_graphs(small_folder: Path, tmp_path: Path):
    """The twin rewritten as OGB's binary layout (data.npz with both edge directions, graph-label.npz)."""
    data = sg.build(sg.presets()["synthetic-molhiv-small"])
    folder = tmp_path / "binary"
    shutil.copytree(small_folder / "split", folder / "split")
    (folder / "raw").mkdir()
    starts = np.concatenate([[0], np.cumsum(data["num_edges"])])
    edges, feats = [], []
    for g in range(data["num_nodes"].size):  # OGB's reader order: a graph's bonds, then their reverses
        bonds, bond_feat = data["edges"][starts[g]:starts[g + 1]], data["edge_feat"][starts[g]:starts[g + 1]]
        edges.append(np.concatenate([bonds, bonds[:, ::-1]]))
        feats.append(np.concatenate([bond_feat, bond_feat]))
    np.savez(folder / "raw" / "data.npz", edge_index=np.concatenate(edges).T, edge_feat=np.concatenate(feats),
             node_feat=data["node_feat"], num_nodes_list=data["num_nodes"], num_edges_list=2 * data["num_edges"])
    np.savez(folder / "raw" / "graph-label.npz", graph_label=data["labels"].reshape(-1, 1))
    meta = json.loads((small_folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "binary": "True", "add_inverse_edge": "False"}))
    binary, _ = _build(folder)
    csv, _ = _build(small_folder)
    assert binary.keys() == csv.keys()
    for name in ("graph_ptr", "edge_ptr", "indptr", "x", "y", "split.test"):
        assert np.array_equal(binary[name], csv[name]), name
    dst = np.repeat(np.arange(csv["indptr"].size - 1), np.diff(csv["indptr"]))
    pairs = lambda a: sorted(zip(a["indices"].tolist(), dst.tolist(), map(tuple, a["edge_attr"].tolist())))  # noqa: E731
    assert pairs(binary) == pairs(csv)


def test_out_of_core_preprocessing_is_refused_by_name(small_folder: Path, tmp_path: Path):
    from pipeline import preprocess

    with pytest.raises(DatasetError, match="preprocess.memory_budget_mb: out-of-core preprocessing reads "
                                           "node-property datasets; small is a graph-property dataset"):
        preprocess(str(small_folder), PreprocessOptions(memory_budget_mb=512), cache_root=tmp_path)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("node-feat.csv.gz", "C", r"node-feat.csv.gz: unreadable raw CSV file \(could not convert string to float: 'C'\)"),
    ("edge-feat.csv.gz", "x", r"edge-feat.csv.gz: unreadable raw CSV file \(could not convert string to float: 'x'\)"),
    ("node-feat.csv.gz", "", r"node-feat.csv.gz: x: expected finite features, found a missing or non-finite value "
                             r"in row 6"),
])
def test_a_bad_feature_value_names_its_file(folder: Path, name: str, value: str, message: str):
    """They named raw/ alone, or num-node-list.csv.gz."""
    lines = _lines(folder / "raw" / name)
    fields = lines[6].split(",")
    lines[6] = ",".join([value, *fields[1:]])
    _rewrite(folder / "raw" / name, lines)
    with pytest.raises(DatasetError, match=message):
        _build(folder)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("node-feat.csv.gz", "200", r"node-feat.csv.gz: atom feature 0 must lie in \[0, 119\) \(OGB's vocabulary for "
                                r"'data type': 'mol'\), found 200"),
    ("edge-feat.csv.gz", "7", r"edge-feat.csv.gz: bond feature 0 must lie in \[0, 5\)"),
    ("node-feat.csv.gz", "0.5", r"node-feat.csv.gz: expected at most 9 integer atom feature columns \('data type': "
                                r"'mol', OGB's encoders\), got dtype float32"),
])
def test_molecule_features_outside_ogbs_vocabularies_are_named(folder: Path, name: str, value: str, message: str):
    """They passed preprocessing and failed in training, in an embedding lookup."""
    lines = _lines(folder / "raw" / name)
    lines[3] = ",".join([value, *lines[3].split(",")[1:]])
    _rewrite(folder / "raw" / name, lines)
    with pytest.raises(DatasetError, match=message):
        _build(folder)

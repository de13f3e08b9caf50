"""pipeline/link_layout.py: OGB link folders read with OGB's readers, validated, cached, reopened."""

from __future__ import annotations

import dataclasses
import json
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline import cache
from pipeline.errors import DatasetError
from pipeline.family import read_meta_json
from pipeline.link_layout import build, normalise_meta, open_entry, raw_files
from pipeline.ogb_layout import to_csv_gz
from pipeline.options import PreprocessOptions
from pipeline.synthetic_link import build as build_twin
from pipeline.synthetic_link import generate, presets

SPEC = dataclasses.replace(presets()["synthetic-collab-tiny"], num_nodes=400, num_features=8, num_train=1500,
                           num_valid=100, num_test=120, num_negatives=300, community_size=20)
COLLAB_META = {  # ogb.linkproppred master.csv's ogbl-collab column
    "eval metric": "hits@50", "task type": "link prediction", "download_name": "collab", "version": "1",
    "add_inverse_edge": "True", "has_node_attr": "True", "has_edge_attr": "False", "split": "time",
    "additional node files": "None", "additional edge files": "edge_weight,edge_year", "is hetero": "False",
    "binary": "False",
}


@pytest.fixture(scope="module")
def twin(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("link") / "twin", SPEC)


@pytest.fixture
def folder(twin, tmp_path) -> Path:
    """A private copy of the twin to break."""
    return Path(shutil.copytree(twin, tmp_path / "copy"))


def _build(folder: Path, undirected: bool = True):
    return build(folder, read_meta_json(folder), PreprocessOptions(undirected=undirected))


def _edit_split(folder: Path, name: str, **changes) -> Path:
    path = folder / "split" / "time" / f"{name}.pt"
    record = torch.load(path, weights_only=True)
    record.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del record[key]
    torch.save(record, path)
    return path


def test_normalise_meta_types_ogbs_master_csv_column():
    meta = normalise_meta(COLLAB_META, "master.csv")
    typed = (meta["family"], meta["eval_metric"], meta["add_inverse_edge"], meta["binary"])
    assert typed == ("link", "hits@50", True, False)
    assert meta["additional_edge_files"] == ["edge_weight", "edge_year"] and meta["additional_node_files"] == []


@pytest.mark.parametrize("change, message", [
    ({"task type": "multiclass classification"}, "'task type' must be 'link prediction'"),
    ({"eval metric": "hits@"}, "'eval metric' must be hits@K"),
    ({"binary": "maybe"}, "'binary': expected True or False"),
    ({"is hetero": "True"}, "heterogeneous"),
])
def test_normalise_meta_names_the_bad_key(change, message):
    with pytest.raises(DatasetError, match=message):
        normalise_meta({**COLLAB_META, **change}, "meta.json")
    with pytest.raises(DatasetError, match="missing meta key 'split'"):
        normalise_meta({k: v for k, v in COLLAB_META.items() if k != "split"}, "meta.json")


def test_reader_returns_the_generated_graph_splits_and_features(twin):
    data = build_twin(SPEC)
    arrays, meta = _build(twin)
    n = SPEC.num_nodes
    assert meta["family"] == "link" and meta["negatives"] == "edge_neg" and meta["eval_metric"] == "hits@50"
    # message-passing CSR (rows = destinations) holds each training edge in both directions, nothing else
    indptr, indices = arrays["indptr"], arrays["indices"]
    dst = np.repeat(np.arange(n), np.diff(indptr))
    train = data["split"]["train"]["edge"]
    expected = {(int(u), int(v)) for u, v in train} | {(int(v), int(u)) for u, v in train}
    assert set(zip(indices.tolist(), dst.tolist())) == expected and indices.size == len(expected)
    for s in ("train", "valid", "test"):
        for key, values in data["split"][s].items():
            np.testing.assert_array_equal(arrays[f"split.{s}.{key}"], values)
    np.testing.assert_allclose(arrays["x"], data["node_feat"], rtol=1e-3, atol=1e-3)  # written with 4 digits
    assert {p.name for p in raw_files(twin, read_meta_json(twin))} >= {"edge.csv.gz", "edge_year.csv.gz", "train.pt"}


def test_open_entry_maps_the_cached_arrays_back(twin, tmp_path):
    arrays, meta = _build(twin)
    entry = cache.publish(tmp_path, "k" * 20, {"dataset": "twin"}, arrays, {**meta, "name": "twin"})
    graph = open_entry(entry)
    assert graph.num_nodes == SPEC.num_nodes and graph.num_features == SPEC.num_features
    assert graph.splits["valid"]["edge_neg"].shape == (SPEC.num_negatives, 2)
    assert torch.equal(graph.degree(), torch.from_numpy(np.diff(arrays["indptr"])))
    assert graph.edge_index().shape == (2, arrays["indices"].size)
    other = cache.publish(tmp_path, "n" * 20, {"dataset": "node"}, {"indptr": np.zeros(1, np.int64)},
                          {"family": "node"})
    with pytest.raises(DatasetError, match="not a link entry"):
        open_entry(other)


def test_per_source_negatives_of_citation2_are_read(folder):
    """ogbl-citation2's shape: source_node / target_node and target_node_neg [n, K]."""
    for name in ("train", "valid", "test"):
        path = folder / "split" / "time" / f"{name}.pt"
        edge = torch.load(path, weights_only=True)["edge"]
        record = {"source_node": edge[:, 0].numpy(), "target_node": edge[:, 1].numpy()}  # numpy, as OGB stores it
        if name != "train":
            record["target_node_neg"] = np.random.default_rng(0).integers(0, SPEC.num_nodes, (edge.shape[0], 7))
        torch.save(record, path)
    arrays, meta = _build(folder)
    assert meta["negatives"] == "target_node_neg" and arrays["split.valid.target_node_neg"].shape == (SPEC.num_valid, 7)
    assert arrays["split.test.edge"].shape == (SPEC.num_test, 2)


@pytest.mark.parametrize("split, changes, message", [
    ("valid", {"edge": torch.tensor([[0, SPEC.num_nodes]])},
     r"valid.pt: 'edge' names node 400, out of range \[0, 400\)"),
    ("test", {"edge_neg": torch.tensor([[-1, 3]])}, "test.pt: 'edge_neg' names node -1, out of range"),
    ("train", {"edge": torch.zeros((5, 3), dtype=torch.int64)},
     r"train.pt: 'edge' expected shape \[E, 2\], got \[5, 3\]"),
    ("train", {"edge": torch.zeros((0, 2), dtype=torch.int64)}, "train.pt: the 'train' split has no positive edges"),
    ("valid", {"edge": torch.zeros((3, 2))}, "valid.pt: 'edge' must hold integer node ids"),
    ("test", {"edge_neg": None}, "test.pt: the 'test' split needs negatives"),
    ("valid", {"year": torch.zeros(3, dtype=torch.int64)}, "valid.pt: 'year' has 3 entries, expected 100"),
    ("valid", {"edge": None}, r"valid.pt: expected 'edge' \[E, 2\] or 'source_node'/'target_node'"),
])
def test_each_bad_split_file_is_one_line_naming_it(folder, split, changes, message):
    _edit_split(folder, split, **changes)
    with pytest.raises(DatasetError, match=message):
        _build(folder)


def test_a_split_file_that_needs_full_unpickling_is_refused(folder):
    path = folder / "split" / "time" / "valid.pt"
    torch.save({"edge": torch.zeros((2, 2), dtype=torch.int64), "note": Fraction(1, 3)}, path)
    with pytest.raises(DatasetError, match="valid.pt: cannot be read with weights_only=True"):
        _build(folder)


def test_citation2_negatives_of_the_wrong_shape_are_refused(folder):
    edge = torch.load(folder / "split" / "time" / "valid.pt", weights_only=True)["edge"]
    torch.save({"source_node": edge[:, 0], "target_node": edge[:, 1],
                "target_node_neg": torch.zeros((edge.shape[0] - 1, 5), dtype=torch.int64)},
               folder / "split" / "time" / "valid.pt")
    with pytest.raises(DatasetError, match=r"'target_node_neg' expected shape \[100, K >= 1\], got \[99, 5\]"):
        _build(folder)


def _as_random_split(folder: Path) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    meta["split"] = "random"
    (folder / "meta.json").write_text(json.dumps(meta))
    (folder / "split" / "time").rename(folder / "split" / "random")


def test_positive_edges_shared_between_splits_are_refused(folder):
    _as_random_split(folder)
    _build(folder)  # the twin's splits are disjoint
    path = folder / "split" / "random" / "test.pt"
    record = torch.load(path, weights_only=True)
    train_edge = torch.load(folder / "split" / "random" / "train.pt", weights_only=True)["edge"][3]
    record["edge"][5] = train_edge.flip(0)  # the reverse of a training edge: the same undirected pair
    torch.save(record, path)
    with pytest.raises(DatasetError, match=r"test.pt: positive edge \(\d+, \d+\) is also a train or valid edge"):
        _build(folder)


def test_raw_files_that_disagree_with_the_edge_count_are_refused(folder):
    to_csv_gz(folder / "raw" / "edge_year.csv.gz", np.zeros((7, 1), dtype=np.int64))
    with pytest.raises(DatasetError, match="edge_year.csv.gz: has 7 lines, but edge.csv.gz has 1500"):
        _build(folder)
    (folder / "raw" / "edge_weight.csv.gz").unlink()
    with pytest.raises(DatasetError, match="edge_weight.csv.gz: missing"):
        _build(folder)


def test_a_node_count_beyond_the_memory_available_is_refused_naming_its_file(folder):
    """3e9 nodes in num-node-list.csv.gz (no per-node file to disagree with it): the CSR's row
    pointers alone are 44.7 GiB; this failed deep in the build on numpy's allocation."""
    to_csv_gz(folder / "raw" / "num-node-list.csv.gz", np.array([[3_000_000_000]]))
    (folder / "raw" / "node-feat.csv.gz").unlink()
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "has_node_attr": "False"}))
    from pipeline.progress import available_memory_mb

    if (available_memory_mb() or 2**30) > 16 * 3e9 / 2**20:
        pytest.skip("this machine has the memory for 3e9 nodes' row pointers")
    with pytest.raises(DatasetError, match=r"num-node-list.csv.gz: 3,000,000,000 nodes need 44.7 GiB"):
        _build(folder)


def test_node_features_of_the_wrong_length_are_refused(folder):
    to_csv_gz(folder / "raw" / "node-feat.csv.gz", np.zeros((SPEC.num_nodes + 2, 8)), float_format="%.4g")
    with pytest.raises(DatasetError, match="node-feat.csv.gz: has 402 lines, but num-node-list.csv.gz says 400"):
        _build(folder)


def test_additional_node_files_are_kept_as_extra_arrays(folder):
    """ogbl-citation2 lists node_year as an additional node file."""
    meta = json.loads((folder / "meta.json").read_text())
    meta["additional node files"] = "node_year"
    (folder / "meta.json").write_text(json.dumps(meta))
    years = np.arange(SPEC.num_nodes, dtype=np.int64).reshape(-1, 1) % 7 + 2000
    to_csv_gz(folder / "raw" / "node_year.csv.gz", years)
    arrays, _ = _build(folder)
    np.testing.assert_array_equal(arrays["extra.node_year"], years[:, 0])
    to_csv_gz(folder / "raw" / "node_year.csv.gz", years[:-1])
    with pytest.raises(DatasetError, match="node_year.csv.gz: has 399 lines, but num-node-list.csv.gz says 400"):
        _build(folder)

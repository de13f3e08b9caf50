"""pipeline/link_graph_import.py: a PyG graph's edges become an OGB-layout link folder that
link_layout's reader takes: disjoint 85/5/10 parts by pair, negatives that are no edge, the
training edges as the only message-passing graph; PyG's train_test_split_edges arrays are kept as
given; a source that cannot make a link task is one line naming the array."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from pipeline.errors import DatasetError
from pipeline.family import read_meta_json
from pipeline.link_graph_import import LinkImportOptions, import_link_graph, link_graph_parts
from pipeline.link_layout import build
from pipeline.options import PreprocessOptions


def _undirected(n: int = 60, edges: int = 200, seed: int = 0, loops: int = 3) -> Data:
    g = torch.Generator().manual_seed(seed)
    pairs = torch.randint(0, n, (2, edges), generator=g)
    loop = torch.arange(loops).repeat(2, 1)
    return Data(x=torch.randn(n, 4, generator=g), edge_index=to_undirected(torch.cat([pairs, loop], 1), num_nodes=n))


def _arrays(data: Data) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in data.to_dict().items()}


def _keys(pairs: np.ndarray, n: int) -> set[int]:
    return set((np.minimum(pairs[:, 0], pairs[:, 1]) * n + np.maximum(pairs[:, 0], pairs[:, 1])).tolist())


def _build(folder: Path, undirected: bool = True):
    return build(folder, read_meta_json(folder), PreprocessOptions(undirected=undirected))


def _raw_meta(folder: Path) -> dict:
    return json.loads((folder / "meta.json").read_text())


def test_an_undirected_graph_splits_its_pairs_85_5_10_with_non_edges_as_negatives(tmp_path):
    data = _undirected()
    n, graph = data.num_nodes, data.edge_index.numpy()
    pairs = _keys(graph[:, graph[0] != graph[1]].T, n)
    imported = import_link_graph(data, tmp_path / "out")
    arrays, meta = _build(imported.folder)
    parts = {s: arrays[f"split.{s}.edge"] for s in ("train", "valid", "test")}
    keys = {s: _keys(p, n) for s, p in parts.items()}
    assert all(len(keys[s]) == len(p) for s, p in parts.items())  # each pair once
    assert keys["train"] | keys["valid"] | keys["test"] == pairs  # every pair, self loops left out
    assert not (keys["train"] & keys["valid"]) and not (keys["train"] | keys["valid"]) & keys["test"]
    assert (len(keys["valid"]), len(keys["test"])) == (round(0.05 * len(pairs)), round(0.1 * len(pairs)))
    for s in ("valid", "test"):
        neg = arrays[f"split.{s}.edge_neg"]
        assert len(neg) == len(parts[s]) and (neg[:, 0] != neg[:, 1]).all()
        assert not _keys(neg, n) & pairs and len(_keys(neg, n)) == len(neg)
    assert not _keys(arrays["split.valid.edge_neg"], n) & _keys(arrays["split.test.edge_neg"], n)
    # the message-passing graph holds the training pairs alone, in both directions
    rows = np.repeat(np.arange(n), np.diff(arrays["indptr"]))
    assert _keys(np.stack([rows, arrays["indices"]], 1), n) == keys["train"]
    assert meta["eval_metric"] == "rocauc" and meta["negatives"] == "edge_neg"
    assert np.allclose(arrays["x"], data.x.numpy(), atol=1e-5)
    folder_meta = _raw_meta(imported.folder)
    assert (folder_meta["add_inverse_edge"], folder_meta["binary"], folder_meta["family"]) == ("True", "False", "link")
    loops = int((graph[0] == graph[1]).sum())
    assert imported.summary.startswith(f"60 nodes, {len(pairs)} undirected edges ({loops} self loops left out), "
                                       "4 features; link prediction (rocauc); split random 85/5/10 of the pairs (seed "
                                       "0): train ")


def test_edge_features_are_said_to_be_left_out(tmp_path):
    data = _undirected(loops=0)
    data.edge_attr, data.edge_weight = torch.randn(data.num_edges, 3), torch.rand(data.num_edges)
    imported = import_link_graph(data, tmp_path / "out")
    assert imported.summary.endswith(f"; not kept: edge_attr [{data.num_edges}, 3], edge_weight [{data.num_edges}] "
                                     "(gnnkit's link recipes read no edge features)")
    assert "not kept" not in import_link_graph(_undirected(), tmp_path / "plain").summary


def test_a_directed_graph_keeps_its_edges_and_a_pairs_two_directions_in_one_part(tmp_path):
    g = torch.Generator().manual_seed(1)
    edges = torch.randint(0, 80, (2, 300), generator=g)
    edges = torch.cat([edges, edges[:, :60].flip(0)], 1)  # 60 reciprocal pairs
    imported = import_link_graph({"edge_index": edges, "num_nodes": 80}, tmp_path / "out")
    assert _raw_meta(imported.folder)["add_inverse_edge"] == "False" and not imported.has_features
    arrays, _ = _build(imported.folder, undirected=True)  # the recipes symmetrise: still disjoint
    given = set((edges[0] * 80 + edges[1]).tolist()) - {i * 80 + i for i in range(80)}
    found = [set((arrays[f"split.{s}.edge"] @ np.array([80, 1])).tolist()) for s in ("train", "valid", "test")]
    assert set.union(*found) == given and sum(map(len, found)) == len(given)
    assert "undirected" not in imported.summary and "directed edges (" in imported.summary and \
        "without their reverse" in imported.summary


def test_the_seed_picks_the_split_and_the_same_seed_writes_the_same_folder(tmp_path):
    arrays = _arrays(_undirected())
    first, again, other = (link_graph_parts(arrays, LinkImportOptions(seed=s)) for s in (0, 0, 1))
    for key in ("edge", "edge_neg"):
        assert np.array_equal(first["splits"]["test"][key], again["splits"]["test"][key])
        assert not np.array_equal(first["splits"]["test"][key], other["splits"]["test"][key])
    assert other["meta"]["split"] == "random1"


def test_pygs_train_test_split_edges_arrays_are_kept_as_given(tmp_path):
    data = _undirected(n=40, edges=150)
    graph = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    given = {"x": data.x, "val_pos_edge_index": graph[:, :6], "test_pos_edge_index": graph[:, 6:14],
             "train_pos_edge_index": to_undirected(graph[:, 14:]), "edge_index": data.edge_index,
             "val_neg_edge_index": torch.tensor([[0, 1], [39, 38]]),
             "test_neg_edge_index": torch.tensor([[1, 2], [38, 37]])}
    imported = import_link_graph(given, tmp_path / "out", LinkImportOptions(metric="hits@1"))
    arrays, meta = _build(imported.folder)
    assert np.array_equal(arrays["split.test.edge"], graph[:, 6:14].T.numpy())
    assert np.array_equal(arrays["split.test.edge_neg"], [[1, 38], [2, 37]])
    assert len(arrays["split.train.edge"]) == graph.shape[1] - 14 and meta["eval_metric"] == "hits@1"
    assert _raw_meta(imported.folder)["split"] == "given"
    assert "valid 6 (+2 given negatives)" in imported.summary


@pytest.mark.parametrize("change, message", [
    (lambda a: a.pop("test_pos_edge_index"), "has ['train_pos_edge_index', 'val_pos_edge_index', "
                                             "'val_neg_edge_index', 'test_neg_edge_index'] but not "
                                             "['test_pos_edge_index']"),
    (lambda a: a.pop("test_neg_edge_index"), "has val_neg_edge_index but not test_neg_edge_index"),
    (lambda a: a.update(test_pos_edge_index=a["train_pos_edge_index"][:, :3]),
     "test_pos_edge_index: positive edge (0, 5) is also a train or valid edge (2 shared"),
    (lambda a: a.update(val_pos_edge_index=np.array([[4], [4]])), "val_pos_edge_index: holds no edge but self loops"),
    (lambda a: a.update(val_neg_edge_index=np.zeros((2, 0), np.int64)), "val_neg_edge_index: holds no pair"),
    (lambda a: a.update(val_neg_edge_index=np.array([[8], [3]])), "val_neg_edge_index: pair (8, 3) is a positive edge"),
    (lambda a: a.update(test_neg_edge_index=np.array([[2], [2]])), "test_neg_edge_index: pair (2, 2) is a self loop"),
    (lambda a: a.update(edge_label_index=np.array([[0], [1]])), "edge_label_index: one part of RandomLinkSplit's"),
])
def test_a_given_split_that_cannot_be_scored_is_one_line(change, message):
    arrays = {"train_pos_edge_index": np.array([[0, 5, 1, 6, 2, 7], [5, 0, 6, 1, 7, 2]]),
              "val_pos_edge_index": np.array([[3], [8]]), "test_pos_edge_index": np.array([[4], [9]]),
              "val_neg_edge_index": np.array([[0], [9]]), "test_neg_edge_index": np.array([[1], [9]])}
    change(arrays)
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        link_graph_parts(arrays, where="g.pt")


@pytest.mark.parametrize("arrays, options, message", [
    ({"x": np.zeros((3, 2))}, {}, "g.pt: no edges: expected an array named one of"),
    ({"edge_index": np.array([[0, 1, 2], [1, 2, 3]])}, {}, "g.pt: 3 linked node pairs .* expected at least 20"),
    ({"edge_index": np.array([[0, 1], [1, 7]]), "num_nodes": np.array(5)}, {}, "edge endpoint 7 out of range"),
    ({"edge_index": np.array([[0], [1]]), "x": np.zeros((3, 2))}, {"metric": "mrr"},
     r"metric: expected rocauc or hits@K \(K > 0\) for a link import, got 'mrr' \(mrr scores each source's own"),
    ({"edge_index": np.array([[0], [1]])}, {"metric": "hits@0"}, "got 'hits@0'"),
    ({"edge_index": np.array([[0], [1]])}, {"metric": "hits@\u00b2"}, "got 'hits@\u00b2'"),
    ({"edge_index": np.array([[0, 1], [1, 2]]), "num_nodes": np.array(10**10)}, {},
     "num_nodes: 10,000,000,000 nodes: expected at most 3,037,000,499"),
    ({"edge_index": np.array([[0, 1], [1, 2]]), "num_nodes": np.array(-3)}, {}, "num_nodes: expected a node count"),
    ({"edge_index": np.array([[0, 1], [1, 2**64 - 5]], dtype=np.uint64)}, {}, "beyond int64"),
    ({"edge_index": _undirected().edge_index.numpy()}, {"metric": "hits@20"},
     "random split valid: 19 negatives: hits@20 needs more than 20"),
])
def test_what_cannot_make_a_link_task_is_one_line(arrays, options, message):
    with pytest.raises(DatasetError, match=message):
        link_graph_parts(arrays, LinkImportOptions(**options), where="g.pt")


def test_a_nearly_complete_graph_has_too_few_non_edges_for_negatives():
    n = 12
    full = np.array([(u, v) for u in range(n) for v in range(n) if u != v]).T
    with pytest.raises(DatasetError, match="unlinked node pairs for .* negatives"):
        link_graph_parts({"edge_index": full}, where="g.pt")


def test_a_featureless_graph_takes_its_size_from_the_largest_id_and_an_npz_imports(tmp_path):
    edges = _undirected(n=50).edge_index.numpy()
    np.savez(tmp_path / "g.npz", edge_index=edges)
    imported = import_link_graph(tmp_path / "g.npz", tmp_path / "out")
    assert (imported.num_nodes, imported.has_features) == (int(edges.max()) + 1, False)
    assert "no features" in imported.summary
    with pytest.raises(DatasetError, match="exists: expected a new folder"):
        import_link_graph(tmp_path / "g.npz", tmp_path / "out")


def test_hits_at_k_ranks_both_parts_against_as_many_negatives(tmp_path):
    """Test drew twice valid's negatives, so its K-th best negative stood higher: test Hits@50 read
    0.24 where valid read 0.41 for a model of one ROC-AUC on both (OGB's collab: 100,000 each)."""
    parts = link_graph_parts(_arrays(_undirected(n=400, edges=3000)), LinkImportOptions(metric="hits@5"), where="g.pt")
    valid, test = (parts["splits"][p] for p in ("valid", "test"))
    assert len(test["edge"]) > len(valid["edge"])
    assert len(valid["edge_neg"]) == len(test["edge_neg"]) == len(test["edge"])
    rocauc = link_graph_parts(_arrays(_undirected(n=400, edges=3000)), LinkImportOptions(), where="g.pt")["splits"]
    assert len(rocauc["valid"]["edge_neg"]) == len(rocauc["valid"]["edge"])  # ROC-AUC weighs no count


def test_edges_without_the_reverse_are_counted_once_whatever_repeats_them():
    chain = torch.stack([torch.arange(40), torch.arange(1, 41)])  # 40 edges i -> i+1
    edges = torch.cat([chain, chain[:, :10].flip(0), chain[:, :20], chain[:, 30:]], 1)  # 10 reversed, 30 repeated
    parts = link_graph_parts({"edge_index": edges.numpy(), "num_nodes": np.array(60)}, LinkImportOptions(),
                             where="g.pt")
    assert "60 nodes, 50 directed edges (30 without their reverse; 30 repeated edges left out), " in parts["summary"]

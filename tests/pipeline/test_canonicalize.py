import numpy as np
import pytest

from pipeline import DatasetError, PreprocessOptions
from pipeline.canonicalize import build_csr, canonicalize
from pipeline.family import read_meta_json
from pipeline.ogb_layout import read_ogb_folder


def _reference_csr(edge_index, n, undirected, remove_loops):
    edges = set() if undirected else []
    for s, d in edge_index.T.tolist():
        if remove_loops and s == d:
            continue
        if undirected:
            edges.update({(s, d), (d, s)})
        else:
            edges.append((s, d))
    rows = [[] for _ in range(n)]
    for s, d in edges:
        rows[d].append(s)
    return [sorted(r) for r in rows]


@pytest.mark.parametrize("undirected", [False, True])
@pytest.mark.parametrize("self_loops", ["keep", "remove"])
def test_build_csr_matches_reference(undirected, self_loops):
    rng = np.random.default_rng(1)
    n = 50
    edge_index = rng.integers(0, n, (2, 300))
    edge_index[:, :5] = [[3, 3, 7, 7, 9], [3, 3, 2, 2, 9]]  # self loops and duplicates
    options = PreprocessOptions(undirected=undirected, self_loops=self_loops)
    indptr, indices = build_csr(edge_index, n, options)
    expected = _reference_csr(edge_index, n, undirected, self_loops == "remove")
    assert indptr.dtype == indices.dtype == np.int64
    got = [indices[indptr[v]:indptr[v + 1]].tolist() for v in range(n)]
    assert got == expected


def test_build_csr_empty_graph_and_isolated_nodes():
    indptr, indices = build_csr(np.zeros((2, 0), dtype=np.int64), 5, PreprocessOptions(undirected=True))
    assert indptr.tolist() == [0] * 6 and indices.size == 0


def _raw(folder):
    return read_ogb_folder(folder, read_meta_json(folder))


def test_canonical_arrays(make_ogb_folder):
    arrays, meta = canonicalize(_raw(make_ogb_folder()), PreprocessOptions())
    assert arrays["x"].dtype == np.float32 and arrays["y"].dtype == np.int64
    assert arrays["y"].shape == (200,) and meta["num_classes"] == 4 and meta["eval_metric"] == "acc"
    assert arrays["indptr"][-1] == arrays["indices"].size == 1000


def test_integer_features_become_float32(make_ogb_folder):
    feats = np.random.default_rng(0).integers(0, 2, (200, 6))
    arrays, _ = canonicalize(_raw(make_ogb_folder(node_feat=feats)), PreprocessOptions())
    assert arrays["x"].dtype == np.float32


def _bad(make_ogb_folder, **changes):
    folder = make_ogb_folder(**changes)
    with pytest.raises(DatasetError) as err:
        canonicalize(_raw(folder), PreprocessOptions())
    return str(err.value)


def test_out_of_range_edge_is_named(make_ogb_folder):
    edges = np.array([[0, 1, 250], [1, 2, 3]])
    assert "edge.csv.gz: edge endpoint 250 out of range [0, 200)" in _bad(make_ogb_folder, edge_index=edges)


def test_a_node_count_beyond_the_memory_available_is_named_before_the_build(make_ogb_folder, monkeypatch):
    """A typo such as 3,000,000,000 nodes ran out of memory in the CSR build (a numpy traceback, or the
    kernel's OOM killer); here the machine is made to have 3 KiB free for 200 nodes' 3.1 KiB."""
    import pipeline.progress

    folder = make_ogb_folder()
    monkeypatch.setattr(pipeline.progress, "available_memory_mb", lambda: 3 / 1024)
    with pytest.raises(DatasetError, match=r"num-node-list.csv.gz: 200 nodes need 0.0 GiB for the CSR's row pointers "
                                           r"and degree counts alone, .* is the node count right\?"):
        canonicalize(_raw(folder), PreprocessOptions())
    monkeypatch.setattr(pipeline.progress, "available_memory_mb", lambda: None)  # no /proc/meminfo: no check
    canonicalize(_raw(folder), PreprocessOptions())


def test_available_memory_is_read_from_the_kernel():
    from pipeline.progress import available_memory_mb

    free = available_memory_mb()
    assert free is None or 0 < free < 2**40


def test_non_finite_features_are_named(make_ogb_folder):
    x = np.ones((200, 8), dtype=np.float32)
    x[17, 3] = np.nan
    assert "node-feat.csv.gz: non-finite feature value in row 17" in _bad(make_ogb_folder, node_feat=x)


def test_label_file_of_wrong_length_is_named(make_ogb_folder, tmp_path):
    folder = make_ogb_folder()
    import pandas as pd

    pd.DataFrame(np.zeros(150, dtype=int)).to_csv(folder / "raw" / "node-label.csv.gz", header=False, index=False)
    with pytest.raises(DatasetError, match="node-label.csv.gz: has 150 lines, but num-node-list.csv.gz says 200"):
        canonicalize(_raw(folder), PreprocessOptions())


def test_label_out_of_range_is_named(make_ogb_folder):
    labels = np.zeros(200, dtype=int)
    labels[5] = 9
    assert "node-label.csv.gz: label 9 out of range [0, 4)" in _bad(make_ogb_folder, labels=labels)


def test_overlapping_splits_are_named(make_ogb_folder):
    split = {"train": np.arange(0, 100), "valid": np.arange(90, 150), "test": np.arange(150, 200)}
    message = _bad(make_ogb_folder, split=split)
    assert "valid.csv.gz: overlaps an earlier split" in message


def test_split_out_of_range_is_named(make_ogb_folder):
    split = {"train": np.arange(0, 100), "valid": np.arange(100, 150), "test": np.array([150, 400])}
    assert "test.csv.gz: node index 400 out of range" in _bad(make_ogb_folder, split=split)


def test_unlabelled_split_node_is_refused(make_ogb_folder, tmp_path):
    labels = np.zeros(200, dtype=float)
    labels[0] = np.nan
    split = {"train": np.arange(0, 100), "valid": np.arange(100, 150), "test": np.arange(150, 200)}
    assert "'train' split have no label" in _bad(make_ogb_folder, labels=labels, split=split)


def test_unlabelled_nodes_outside_splits_become_minus_one(make_ogb_folder):
    labels = np.zeros(200, dtype=float)
    labels[0] = np.nan
    split = {"train": np.arange(1, 100), "valid": np.arange(100, 150), "test": np.arange(150, 200)}
    arrays, _ = canonicalize(_raw(make_ogb_folder(labels=labels, split=split)), PreprocessOptions())
    assert arrays["y"][0] == -1 and arrays["y"].dtype == np.int64

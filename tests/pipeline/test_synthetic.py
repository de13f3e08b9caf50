"""Synthetic graphs: deterministic, exact sizes, OGB raw layout, learnable structure, validation."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.family import read_meta_json
from pipeline.ogb_layout import read_ogb_folder
from pipeline.synthetic import GENERATOR_VERSION, SyntheticSpec, build, generate, presets

SMALL = SyntheticSpec(num_nodes=2000, num_edges=9000, num_features=16, num_classes=6, seed=3,
                      classes_per_group=2, community_size=32)


def _read(folder: Path):
    return read_ogb_folder(folder, read_meta_json(folder))


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def small_folder(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("syn") / "small", SMALL)


def test_version_and_presets():
    assert isinstance(GENERATOR_VERSION, int) and GENERATOR_VERSION >= 1
    p = presets()
    assert set(p) >= {"synthetic-tiny", "synthetic-arxiv", "synthetic-arxiv-nofeat",
                      "synthetic-products", "synthetic-products-nofeat"}
    arxiv, products = p["synthetic-arxiv"], p["synthetic-products"]
    assert (arxiv.num_nodes, arxiv.num_edges, arxiv.num_features, arxiv.num_classes) == (169_343, 1_166_243, 128, 40)
    assert (arxiv.layout, arxiv.split, arxiv.add_inverse_edge) == ("csv", "time", False)
    assert (products.num_nodes, products.num_edges, products.num_features, products.num_classes) == (
        2_449_029, 61_859_140, 100, 47)
    assert (products.layout, products.split, products.add_inverse_edge) == ("binary", "sales_ranking", False)
    # Featureless twins differ only in num_features.
    assert p["synthetic-arxiv-nofeat"] == dataclasses.replace(arxiv, num_features=0)
    assert p["synthetic-products-nofeat"] == dataclasses.replace(products, num_features=0)
    tiny = p["synthetic-tiny"]
    assert 2000 <= tiny.num_nodes <= 5000 and 10_000 <= tiny.num_edges <= 20_000
    assert (tiny.num_features, tiny.num_classes, tiny.layout, tiny.split) == (32, 8, "csv", "time")


def test_meta_json_holds_ogb_keys(small_folder):
    meta = json.loads((small_folder / "meta.json").read_text())
    assert meta == {
        "num tasks": 1,
        "num classes": 6,
        "task type": "multiclass classification",
        "eval metric": "acc",
        "add_inverse_edge": "False",
        "has_node_attr": "True",
        "split": "time",
        "binary": "False",
        "additional node files": "None",
        "additional edge files": "None",
        "is hetero": "False",
        "version": 1,
    }


def test_csv_layout_sizes_exact(small_folder):
    raw_dir = small_folder / "raw"
    names = {p.name for p in raw_dir.iterdir()}
    assert names == {"edge.csv.gz", "num-node-list.csv.gz", "num-edge-list.csv.gz",
                     "node-feat.csv.gz", "node-label.csv.gz"}
    raw = _read(small_folder)
    assert raw.num_nodes == SMALL.num_nodes
    assert raw.edge_index.shape == (2, SMALL.num_edges)
    assert raw.edge_index.min() >= 0 and raw.edge_index.max() < SMALL.num_nodes
    assert raw.node_feat.shape == (SMALL.num_nodes, SMALL.num_features)
    assert raw.node_feat.dtype == np.float32 and np.isfinite(raw.node_feat).all()
    labels = raw.labels.reshape(-1)
    assert labels.shape == (SMALL.num_nodes,)
    assert labels.min() >= 0 and labels.max() < SMALL.num_classes
    # The written data is what build() makes (features through %.6g text).
    graph = build(SMALL)
    np.testing.assert_array_equal(raw.edge_index, graph["edge_index"])
    np.testing.assert_array_equal(labels, graph["labels"])
    np.testing.assert_allclose(raw.node_feat, graph["node_feat"], rtol=1e-5, atol=1e-5)


def test_deterministic_files_and_seed_changes_output(tmp_path, small_folder):
    again = generate(tmp_path / "again", SMALL)
    assert _files(again) == _files(small_folder)
    other = build(dataclasses.replace(SMALL, seed=4))
    same = build(SMALL)
    assert not np.array_equal(other["edge_index"], same["edge_index"])
    assert not np.array_equal(other["labels"], same["labels"])
    assert not np.array_equal(other["node_feat"], same["node_feat"])


def test_featureless_variant_same_graph_no_feature_file(tmp_path):
    spec = dataclasses.replace(SMALL, num_features=0)
    folder = generate(tmp_path / "nofeat", spec)
    assert not (folder / "raw" / "node-feat.csv.gz").exists()
    assert json.loads((folder / "meta.json").read_text())["has_node_attr"] == "False"
    raw = _read(folder)
    assert raw.node_feat is None and raw.meta["has_node_attr"] is False
    featured = build(SMALL)
    np.testing.assert_array_equal(raw.edge_index, featured["edge_index"])
    np.testing.assert_array_equal(raw.labels.reshape(-1), featured["labels"])


@pytest.mark.parametrize("num_features", [8, 0])
def test_binary_layout_round_trips(tmp_path, num_features):
    spec = dataclasses.replace(SMALL, layout="binary", split="sales_ranking", num_features=num_features)
    folder = generate(tmp_path / "bin", spec)
    assert {p.name for p in (folder / "raw").iterdir()} == {"data.npz", "node-label.npz"}
    meta = read_meta_json(folder)
    assert meta["binary"] is True and meta["has_node_attr"] is (num_features > 0)
    raw = read_ogb_folder(folder, meta)
    graph = build(spec)
    assert raw.num_nodes == spec.num_nodes
    np.testing.assert_array_equal(raw.edge_index, graph["edge_index"])
    np.testing.assert_array_equal(raw.labels.reshape(-1), graph["labels"])
    if num_features:
        assert raw.node_feat.dtype == np.float32
        np.testing.assert_array_equal(raw.node_feat, graph["node_feat"])
    else:
        assert raw.node_feat is None
    for name in ("train", "valid", "test"):
        np.testing.assert_array_equal(raw.split[name], graph["split"][name])


def test_add_inverse_edge_csv(tmp_path):
    spec = dataclasses.replace(SMALL, add_inverse_edge=True, split="random")
    folder = generate(tmp_path / "inv", spec)
    meta = read_meta_json(folder)
    assert meta["add_inverse_edge"] is True
    raw = read_ogb_folder(folder, meta)
    assert raw.edge_index.shape == (2, 2 * spec.num_edges)  # OGB added the reverse of each stored edge
    np.testing.assert_array_equal(raw.edge_index[:, 0::2], build(spec)["edge_index"])
    np.testing.assert_array_equal(raw.edge_index[:, 1::2], raw.edge_index[::-1, 0::2])


def test_degrees_power_law_and_homophily():
    spec = dataclasses.replace(SMALL, num_nodes=20_000, num_edges=120_000, num_classes=10, num_features=0)
    graph = build(spec)
    ei, y = graph["edge_index"], graph["labels"]
    deg = np.bincount(ei.ravel(), minlength=spec.num_nodes)
    assert deg.max() > 20 * deg.mean()  # heavy tail
    assert np.median(deg) < deg.mean()  # skewed
    assert (deg == 0).sum() == 0  # every node owns an edge when E >= N
    homophily = float((y[ei[0]] == y[ei[1]]).mean())
    assert homophily > 4.0 / spec.num_classes
    # Classes of very different sizes.
    sizes = np.bincount(y, minlength=spec.num_classes)
    assert sizes.min() >= 1 and sizes.max() > 8 * sizes.min()


def test_features_informative_and_aggregation_helps():
    """A nearest-centroid classifier beats chance on features, and more so on neighbour means."""
    spec = dataclasses.replace(SMALL, num_nodes=6000, num_edges=36_000, num_features=32, split="random",
                               feature_signal=0.4, label_noise=0.1)
    graph = build(spec)
    x, y, ei = graph["node_feat"].astype(np.float64), graph["labels"], graph["edge_index"]
    train, test = graph["split"]["train"], graph["split"]["test"]
    src = np.concatenate([ei[0], ei[1], np.arange(spec.num_nodes)])
    dst = np.concatenate([ei[1], ei[0], np.arange(spec.num_nodes)])
    agg = np.zeros_like(x)
    np.add.at(agg, dst, x[src])
    agg /= np.bincount(dst, minlength=spec.num_nodes)[:, None]

    def accuracy(feat):
        centroids = np.stack([feat[train][y[train] == c].mean(0) for c in range(spec.num_classes)])
        dist = ((feat[test][:, None, :] - centroids[None]) ** 2).sum(-1)
        return float((dist.argmin(1) == y[test]).mean())

    chance = np.bincount(y[test]).max() / test.size
    raw_acc, agg_acc = accuracy(x), accuracy(agg)
    assert raw_acc > chance + 0.1
    assert agg_acc > raw_acc + 0.05


@pytest.mark.parametrize(
    "scheme, fractions",
    [("time", (0.54, 0.18, 0.28)), ("sales_ranking", (0.08, 0.016, 0.904)), ("random", (0.6, 0.2, 0.2))],
)
def test_splits_disjoint_cover_as_designed(scheme, fractions):
    spec = dataclasses.replace(SMALL, split=scheme, num_features=0)
    graph = build(spec)
    split = graph["split"]
    n = spec.num_nodes
    seen = np.zeros(n, dtype=np.int64)
    for name, frac in zip(("train", "valid", "test"), fractions):
        idx = split[name]
        assert idx.dtype == np.int64 and np.all(np.diff(idx) > 0)  # sorted, no repeats
        assert abs(idx.size - frac * n) <= 1
        seen[idx] += 1
    assert np.all(seen == 1)  # disjoint and covering every node
    deg = np.bincount(graph["edge_index"].ravel(), minlength=n)
    if scheme == "sales_ranking":  # the most popular products are the training set
        assert deg[split["train"]].mean() > 2 * deg[split["test"]].mean()
    if scheme == "time":  # citations point from newer to older papers
        rank = np.empty(n)
        rank[split["train"]], rank[split["valid"]], rank[split["test"]] = 0, 1, 2
        src, dst = graph["edge_index"]
        assert np.all(rank[src] >= rank[dst])


def test_split_written_as_scheme_folder(small_folder):
    files = sorted(p.name for p in (small_folder / "split" / "time").iterdir())
    assert files == ["test.csv.gz", "train.csv.gz", "valid.csv.gz"]
    raw = _read(small_folder)
    total = sum(v.size for v in raw.split.values())
    assert total == SMALL.num_nodes


def test_progress_reports_stages(tmp_path):
    messages: list[str] = []
    generate(tmp_path / "p", SMALL, progress=messages.append)
    text = "\n".join(messages)
    for stage in ("degrees", "communities", "edges chunk 1/1", "features", "writing"):
        assert stage in text


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_nodes", 2),
        ("num_nodes", 10.5),
        ("num_edges", 0),
        ("num_features", -3),
        ("num_classes", 1),
        ("num_classes", 5000),
        ("seed", -1),
        ("seed", True),
        ("split", "chronological"),
        ("layout", "parquet"),
        ("add_inverse_edge", "yes"),
        ("degree_exponent", 1.0),
        ("class_size_spread", -0.1),
        ("classes_per_group", 0),
        ("community_size", 0),
        ("p_community", 1.5),
        ("p_class", -0.1),
        ("p_group", 0.9),  # the three edge probabilities sum past 1
        ("label_noise", 2.0),
        ("label_affinity", -0.5),
        ("feature_signal", float("nan")),
        ("feature_group_share", 1.1),
        ("time_drift", -1.0),
        ("recency_decay", 1.0),
        ("rank_noise", "a lot"),
    ],
)
def test_invalid_field_raises_naming_it(field, value):
    with pytest.raises(ValueError, match=rf"^{field}: expected"):
        dataclasses.replace(SMALL, **{field: value})


def test_binary_layout_rejects_add_inverse_edge():
    with pytest.raises(ValueError, match="add_inverse_edge"):
        dataclasses.replace(SMALL, layout="binary", add_inverse_edge=True)


def test_existing_folder_is_an_error_and_nothing_is_left(tmp_path):
    target = tmp_path / "exists"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        generate(target, SMALL)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists"]
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]


def test_failed_write_leaves_no_partial_folder(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    from pipeline import npz_stream

    monkeypatch.setattr(npz_stream.MemberSink, "write", boom)  # binary twins stream their edges and features
    with pytest.raises(RuntimeError, match="disk full"):
        generate(tmp_path / "bin", dataclasses.replace(SMALL, layout="binary"))
    assert list(tmp_path.iterdir()) == []


def test_edge_cases_generate(tmp_path):
    # One edge, tiny graphs, one class per field, blocks of one node: nothing breaks.
    spec = SyntheticSpec(num_nodes=5, num_edges=1, num_features=3, num_classes=2, split="sales_ranking")
    raw = _read(generate(tmp_path / "one", spec))
    assert raw.edge_index.shape == (2, 1) and raw.num_nodes == 5
    spec = SyntheticSpec(num_nodes=3, num_edges=50, num_features=0, num_classes=3, community_size=1,
                         classes_per_group=1, layout="binary", split="random")
    raw = _read(generate(tmp_path / "dense", spec))
    assert raw.edge_index.shape == (2, 50)
    assert sum(v.size for v in raw.split.values()) == 3 and all(v.size == 1 for v in raw.split.values())

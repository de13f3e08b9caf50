"""pipeline/synthetic_link.py: the ogbl-collab-shaped twin, deterministic, valid and learnable."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from ogb.linkproppred import Evaluator

from pipeline.synthetic_link import SyntheticSpec, build, generate, presets

TINY = presets()["synthetic-collab-tiny"]


@pytest.fixture(scope="module")
def tiny() -> dict:
    return build(TINY)


def _keys(edges: np.ndarray, n: int) -> np.ndarray:
    return np.minimum(edges[:, 0], edges[:, 1]) * n + np.maximum(edges[:, 0], edges[:, 1])


def test_presets_have_ogbl_collabs_counts():
    collab = presets()["synthetic-collab"]
    assert (collab.num_nodes, collab.num_features, collab.num_train, collab.num_valid, collab.num_test,
            collab.num_negatives, collab.eval_metric) == (235_868, 128, 1_179_052, 60_084, 46_329, 100_000, "hits@50")


def test_same_spec_same_data_other_seed_other_data(tiny):
    again = build(TINY)
    for s in ("train", "valid", "test"):
        for key, values in tiny["split"][s].items():
            np.testing.assert_array_equal(again["split"][s][key], values)
    np.testing.assert_array_equal(again["node_feat"], tiny["node_feat"])
    other = build(dataclasses.replace(TINY, seed=1))
    assert not np.array_equal(other["split"]["train"]["edge"], tiny["split"]["train"]["edge"])


def test_splits_have_the_declared_sizes_and_are_disjoint_simple_pairs(tiny):
    n, split = TINY.num_nodes, tiny["split"]
    sizes = {s: split[s]["edge"].shape[0] for s in split}
    assert sizes == {"train": TINY.num_train, "valid": TINY.num_valid, "test": TINY.num_test}
    keys = np.concatenate([_keys(split[s]["edge"], n) for s in split])
    assert np.unique(keys).size == keys.size  # no pair twice, in or across splits
    assert all((split[s]["edge"][:, 0] != split[s]["edge"][:, 1]).all() for s in split)
    for s in ("valid", "test"):
        neg = split[s]["edge_neg"]
        assert neg.shape == (TINY.num_negatives, 2) and neg.min() >= 0 and neg.max() < n
        assert not np.isin(_keys(neg, n), keys).any() and (neg[:, 0] != neg[:, 1]).all()
    years = [np.unique(split[s]["year"]) for s in split]
    assert years[0].max() < years[1].min() == years[1].max() < years[2].min()  # a time split
    assert tiny["node_feat"].shape == (TINY.num_nodes, TINY.num_features) and tiny["node_feat"].dtype == np.float32


def _hits(evaluator, split, score) -> float:
    return evaluator.eval({"y_pred_pos": torch.from_numpy(score(split["edge"]).astype(np.float64)),
                           "y_pred_neg": torch.from_numpy(score(split["edge_neg"]).astype(np.float64))})["hits@50"]


def test_links_follow_the_graph_more_than_the_features(tiny):
    """Learnable but not trivial: common neighbours in the training graph rank the held-out links far
    better than the features' inner product does, and neither ranks them all."""
    n, split, x = TINY.num_nodes, tiny["split"], tiny["node_feat"].astype(np.float64)
    train = split["train"]["edge"]
    adj = sp.coo_matrix((np.ones(2 * len(train)), (np.r_[train[:, 0], train[:, 1]], np.r_[train[:, 1], train[:, 0]])),
                        shape=(n, n)).tocsr()
    jitter = np.random.default_rng(0)

    def common(e: np.ndarray) -> np.ndarray:  # common neighbours, ties broken at random
        return np.asarray(adj[e[:, 0]].multiply(adj[e[:, 1]]).sum(1)).ravel() + 1e-3 * jitter.random(len(e))

    def features(e: np.ndarray) -> np.ndarray:
        return (x[e[:, 0]] * x[e[:, 1]]).sum(1)

    evaluator = Evaluator("ogbl-collab")
    by_graph, by_features = _hits(evaluator, split["valid"], common), _hits(evaluator, split["valid"], features)
    assert 0.2 < by_graph < 0.9 and by_features < by_graph / 3
    assert by_features > 0.005  # the features carry a weak signal


def test_generate_writes_ogbs_link_layout_once(tmp_path):
    spec = dataclasses.replace(TINY, num_nodes=200, num_train=600, num_valid=50, num_test=50, num_negatives=100)
    folder = generate(tmp_path / "twin", spec)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["family"] == "link" and meta["task type"] == "link prediction" and meta["split"] == "time"
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert names == {"meta.json", "raw/edge.csv.gz", "raw/edge_weight.csv.gz", "raw/edge_year.csv.gz",
                     "raw/num-node-list.csv.gz", "raw/num-edge-list.csv.gz", "raw/node-feat.csv.gz",
                     "split/time/train.pt", "split/time/valid.pt", "split/time/test.pt"}
    valid = torch.load(folder / "split" / "time" / "valid.pt", weights_only=True)
    assert set(valid) == {"edge", "weight", "year", "edge_neg"} and valid["edge"].shape == (50, 2)
    with pytest.raises(FileExistsError):
        generate(folder, spec)


@pytest.mark.parametrize("field, value, message", [
    ("num_nodes", 5, "num_nodes: expected an integer >= 10"),
    ("num_train", 10**7, "num_train: expected at most a quarter"),
    ("eval_metric", "mrr", "eval_metric: expected 'hits@K'"),
    ("p_closure", 1.5, r"p_closure: expected a number in \[0.0, 1.0\]"),
    ("p_field", 0.5, "p_field: expected p_community \\+ p_field <= 1"),
])
def test_bad_spec_fields_are_named(field, value, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(TINY, **{field: value})
    assert isinstance(SyntheticSpec(**dataclasses.asdict(TINY)), SyntheticSpec)

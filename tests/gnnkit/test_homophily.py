"""gnnkit.homophily: adjusted homophily of a graph's training labels, against its definition."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnkit.homophily import adjusted_homophily, class_labels
from pipeline import CanonicalGraph
from pipeline.graph import edges_to_csr


def _graph(src, dst, y, train, num_nodes: int, task: str = "multiclass classification") -> CanonicalGraph:
    indptr, indices = edges_to_csr(np.asarray(src), np.asarray(dst), num_nodes)
    return CanonicalGraph(indptr=torch.from_numpy(indptr), indices=torch.from_numpy(indices), x=None,
                          y=torch.as_tensor(y), split={"train": torch.as_tensor(train, dtype=torch.int64),
                                                       "valid": torch.empty(0, dtype=torch.int64),
                                                       "test": torch.empty(0, dtype=torch.int64)},
                          meta={"num_classes": int(np.nanmax(np.asarray(y, dtype=float))) + 1, "task_type": task})


def _reference(src, dst, y, train) -> float:
    """Platonov et al.'s formula edge by edge, over the edges between labelled training nodes (self
    loops left out)."""
    train = {int(t) for t in train if y[t] >= 0}
    pairs = [(y[s], y[d]) for s, d in zip(src, dst) if s in train and d in train and s != d]
    same = sum(a == b for a, b in pairs) / len(pairs)
    counts = np.bincount([c for pair in pairs for c in pair]).astype(float)
    chance = float(np.sum((counts / counts.sum()) ** 2))
    return (same - chance) / (1 - chance)


def test_random_graphs_match_the_definition():
    rng = np.random.default_rng(0)
    for num_nodes, num_edges, classes in ((50, 300, 3), (400, 3000, 7)):
        src, dst = rng.integers(0, num_nodes, num_edges), rng.integers(0, num_nodes, num_edges)
        y = rng.integers(-1, classes, num_nodes)  # -1: unlabelled, never read
        train = rng.choice(num_nodes, num_nodes // 2, replace=False)
        got = adjusted_homophily(_graph(src, dst, y, train, num_nodes), min_edges=1)
        assert got == pytest.approx(_reference(src, dst, y, train), abs=1e-12)


def test_within_class_edges_give_one_across_class_edges_negative_and_random_labels_about_zero():
    nodes = np.arange(8)
    y = nodes % 2
    same = [(a, b) for a in nodes for b in nodes if a != b and y[a] == y[b]]
    across = [(a, b) for a in nodes for b in nodes if y[a] != y[b]]
    assert adjusted_homophily(_graph(*zip(*same), y, nodes, 8), min_edges=1) == pytest.approx(1.0)
    assert adjusted_homophily(_graph(*zip(*across), y, nodes, 8), min_edges=1) == pytest.approx(-1.0)  # two even classes
    loops = [*across, *((a, a) for a in nodes)]  # self loops (kept by preprocessing's default) are no edges within a class
    assert adjusted_homophily(_graph(*zip(*loops), y, nodes, 8), min_edges=1) == pytest.approx(-1.0)
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 2000, 40000), rng.integers(0, 2000, 40000)
    assert abs(adjusted_homophily(_graph(src, dst, rng.integers(0, 5, 2000), np.arange(2000), 2000))) < 0.02


def test_only_training_labels_are_read_and_a_sample_stands_in_for_many_training_nodes():
    rng = np.random.default_rng(2)
    src, dst = rng.integers(0, 300, 4000), rng.integers(0, 300, 4000)
    y = rng.integers(0, 3, 300)
    train = np.arange(150)
    first = adjusted_homophily(_graph(src, dst, y, train, 300))
    y[150:] = 0  # the other nodes' labels (validation and test) changed
    assert adjusted_homophily(_graph(src, dst, y, train, 300)) == first
    sampled = adjusted_homophily(_graph(src, dst, y, train, 300), max_nodes=120, seed=3)
    assert sampled != first and abs(sampled - first) < 0.1


def test_binary_tasks_count_unlabelled_nan_out_and_other_tasks_have_none():
    y = np.array([[0.0], [1.0], [np.nan], [1.0]], dtype=np.float32)
    graph = _graph([0, 1, 2, 3], [1, 2, 3, 0], y, np.arange(4), 4, "binary classification")
    assert class_labels(graph).tolist() == [0, 1, -1, 1]
    assert adjusted_homophily(graph, min_edges=1) == pytest.approx(
        _reference([0, 1, 2, 3], [1, 2, 3, 0], [0, 1, -1, 1], range(4)))
    several = _graph([0, 1], [1, 0], np.zeros((2, 3), np.float32), [0, 1], 2, "binary classification")
    assert class_labels(several) is None and adjusted_homophily(several) is None
    one_class = _graph([0, 1], [1, 0], np.zeros(2, np.int64), [0, 1], 2)
    assert adjusted_homophily(one_class, min_edges=1) is None  # no second class: the measure is not defined
    no_edge = _graph([0], [1], np.array([0, 1]), [0], 2)
    assert adjusted_homophily(no_edge, min_edges=1) is None


def test_too_few_edges_between_training_nodes_give_no_measure():
    """A few dozen edges (Cora's 140 training nodes) scatter the measure from 0.0 to 0.7 on a graph of 0.5."""
    rng = np.random.default_rng(4)
    src, dst = rng.integers(0, 400, 3000), rng.integers(0, 400, 3000)
    y = rng.integers(0, 3, 400)
    few, many = np.arange(40), np.arange(300)
    assert adjusted_homophily(_graph(src, dst, y, few, 400)) is None
    assert adjusted_homophily(_graph(src, dst, y, few, 400), min_edges=1) is not None
    assert adjusted_homophily(_graph(src, dst, y, many, 400)) is not None

"""pipeline/homophily.py: the adjusted homophily in numpy, of label pairs and of an edge list."""

import numpy as np
import pytest

from pipeline.homophily import of_edge_list, of_label_pairs


def test_label_pairs_within_across_and_too_few():
    same, across = np.array([0, 1, 0, 1]), np.array([1, 0, 1, 0])
    assert of_label_pairs(same, same, min_edges=1) == (pytest.approx(1.0), 4)
    assert of_label_pairs(same, across, min_edges=1) == (pytest.approx(-1.0), 4)  # two even classes
    assert of_label_pairs(same, same) == (None, 4)  # fewer than 500 edges
    assert of_label_pairs(np.zeros(4, np.int64), np.zeros(4, np.int64), min_edges=1) == (None, 4)  # one class


def test_an_edge_list_counts_edges_between_labelled_training_nodes_only():
    y = np.array([0, 0, 1, 1, -1])
    edges = np.array([[0, 0, 1, 2, 4], [1, 2, 1, 3, 0]])  # 0-1 within, 0-2 across, a loop, 2-3 within, unlabelled
    train = np.array([0, 1, 2, 3, 4])
    from pipeline import homophily

    pairs = []
    original = homophily.of_label_pairs
    homophily.of_label_pairs = lambda a, b, min_edges=500: pairs.append((a.tolist(), b.tolist())) or original(a, b, 1)
    try:
        value = of_edge_list(edges, y, train, undirected=True)
    finally:
        homophily.of_label_pairs = original
    assert pairs == [([0, 0, 1, 0, 1, 1], [0, 1, 1, 0, 0, 1])]  # both directions of 0-1, 0-2 and 2-3
    assert value == pytest.approx(1 / 3)  # 2 of 3 within, chance 1/2
    assert of_edge_list(edges, np.full((5, 2), 1.0), train, undirected=True) is None  # several tasks: no classes
    assert of_edge_list(edges, np.array([0.5, 1, 2, 3, 4]), train, undirected=True) is None  # real values

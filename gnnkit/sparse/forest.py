"""A regression-tree ensemble stored as plain JSON and evaluated with numpy (no pickle).

Trained with scikit-learn's ``RandomForestRegressor`` (multi-output) and exported node by node;
loading and predicting need only numpy, so a model file is safe to load from anywhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class TreeEnsemble:
    """The mean prediction of several binary regression trees with vector-valued leaves.

    Each tree is stored in scikit-learn's array layout: node ``i`` tests ``x[feature[i]] <=
    threshold[i]`` and goes to ``left[i]`` if true, ``right[i]`` otherwise; leaves have
    ``left[i] == -1`` and hold ``value[i]`` (one number per output).

    Args:
        trees: ``[{"feature", "threshold", "left", "right", "value"}, ...]`` lists per tree.
        num_features: Input length.
        num_outputs: Output length.
    """

    def __init__(self, trees: list[dict[str, list[Any]]], num_features: int, num_outputs: int) -> None:
        if not trees:
            raise ValueError("TreeEnsemble: needs at least one tree")
        self.trees = trees
        self.num_features = num_features
        self.num_outputs = num_outputs
        width = max(len(t["left"]) for t in trees)
        shape = (len(trees), width)
        self._feature = np.zeros(shape, dtype=np.int64)
        self._threshold = np.zeros(shape, dtype=np.float64)
        self._left = np.full(shape, -1, dtype=np.int64)
        self._right = np.full(shape, -1, dtype=np.int64)
        self._value = np.zeros((*shape, num_outputs), dtype=np.float64)
        for i, tree in enumerate(trees):
            n = len(tree["left"])
            for key in ("feature", "threshold", "right", "value"):
                if len(tree[key]) != n:
                    raise ValueError(f"TreeEnsemble: tree {i} has {len(tree[key])} '{key}' entries for {n} nodes")
            self._feature[i, :n] = tree["feature"]
            self._threshold[i, :n] = tree["threshold"]
            self._left[i, :n] = tree["left"]
            self._right[i, :n] = tree["right"]
            value = np.asarray(tree["value"], dtype=np.float64).reshape(n, -1)
            if value.shape[1] != num_outputs:
                raise ValueError(f"TreeEnsemble: tree {i} leaves have {value.shape[1]} outputs, expected {num_outputs}")
            self._value[i, :n] = value
        internal = self._left >= 0
        if (self._feature[internal] >= num_features).any() or (self._feature[internal] < 0).any():
            raise ValueError(f"TreeEnsemble: a split uses a feature outside [0, {num_features})")
        if (self._left >= width).any() or (self._right >= width).any():
            raise ValueError("TreeEnsemble: a child index points outside its tree")
        self._depth = max(_depth(t["left"], t["right"]) for t in trees)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Mean leaf value over the trees for one input vector ``x [num_features]`` -> ``[num_outputs]``."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (self.num_features,):
            raise ValueError(f"TreeEnsemble.predict: expected {self.num_features} features, got shape {x.shape}")
        rows = np.arange(len(self.trees))
        node = np.zeros(len(self.trees), dtype=np.int64)
        for _ in range(self._depth):  # all trees step down one level together
            left = self._left[rows, node]
            go_left = x[self._feature[rows, node]] <= self._threshold[rows, node]
            node = np.where(left < 0, node, np.where(go_left, left, self._right[rows, node]))
        return self._value[rows, node].mean(axis=0)

    def to_json(self) -> list[dict[str, list[Any]]]:
        return self.trees

    @classmethod
    def from_sklearn(cls, model: Any) -> TreeEnsemble:
        """Export a fitted scikit-learn forest / tree regressor (any number of outputs)."""
        estimators = getattr(model, "estimators_", [model])
        trees = []
        for est in estimators:
            t = est.tree_
            trees.append({
                "feature": [int(f) if left >= 0 else 0 for f, left in zip(t.feature, t.children_left)],
                "threshold": [float(v) if left >= 0 else 0.0 for v, left in zip(t.threshold, t.children_left)],
                "left": [int(v) for v in t.children_left],
                "right": [int(v) for v in t.children_right],
                "value": [[round(float(v), 6) for v in node.ravel()] for node in t.value],
            })
        return cls(trees, int(model.n_features_in_), int(np.asarray(estimators[0].tree_.value).shape[1]))

    def __repr__(self) -> str:
        return (f"TreeEnsemble(trees={len(self.trees)}, num_features={self.num_features}, "
                f"num_outputs={self.num_outputs}, depth={self._depth})")


def _depth(left: list[int], right: list[int]) -> int:
    """Number of edges on the longest root-to-leaf path (iterative, no recursion limit)."""
    depth, stack, seen = 0, [(0, 0)], 0
    while stack:
        node, d = stack.pop()
        seen += 1
        if seen > len(left):
            raise ValueError("TreeEnsemble: a tree's child links form a cycle")
        if left[node] < 0:
            depth = max(depth, d)
        else:
            stack += [(left[node], d + 1), (right[node], d + 1)]
    return depth

"""Deterministic synthetic link-prediction graphs (twins of ``ogbl-collab``), in OGB's raw layout.

A :class:`SyntheticSpec` gives the sizes (nodes, features, train/valid/test positive edges,
negatives per evaluation split), the seed and a few knobs of the model below; :func:`generate`
writes OGB's exact layout (``raw/edge.csv.gz`` with the training edges stored once and
``add_inverse_edge`` True, ``num-node-list``/``num-edge-list``, ``node-feat.csv.gz``, the
additional edge files ``edge_weight``/``edge_year``, ``split/time/{train,valid,test}.pt`` dicts
with ``edge``, ``weight``, ``year`` and ``edge_neg``) plus a ``meta.json`` with ``"family": "link"``,
so :mod:`pipeline.link_layout` reads it with OGB's readers like the real dataset.

The model (vectorised numpy, seeded ``numpy.random.Generator``; same spec -> same files):

* **Communities** (research groups) of about ``community_size`` nodes, log-normal sizes, grouped
  into *fields* of ``communities_per_field``. Every node has a power-law activity ``theta``
  (exponent ``degree_exponent``): active nodes own and attract more edges.
* **Edges arrive year by year** (``years`` training years, then one validation and one test
  year: a time split). A new edge's owner is drawn by activity; its partner, with probability
  ``p_closure`` (from the second year on), closes a triangle: a neighbour of one of the owner's
  existing neighbours (collaborators of collaborators); otherwise it is drawn by activity from the
  owner's community (``p_community``), its field (``p_field``) or the whole graph. A pair links
  at most once (no positive edge in two splits); ``weight`` is the number of joint papers.
* **Features** are a weak, noisy view of the community: ``feature_signal`` x the community
  centroid (sharing ``field_share`` with its field's) + N(0, 1) noise per dimension, so a model
  of features alone finds the field but hardly the community, while aggregating a node's
  neighbours averages the noise away, and the graph's triangles tell which pairs are close.
  A GNN beats an MLP on features clearly; neither reaches 100% (cross-community and random links).
* **Negatives** of valid/test: ``num_negatives`` uniform random pairs that are no positive edge
  (OGB samples ogbl-collab's negatives uniformly too).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pipeline.link_layout import write_link_folder

#: Bump when the output for the same spec changes (it is part of the source's cache key).
GENERATOR_VERSION: str = "link-1"
SPLIT = "time"
#: First training year (years are stored as in ogbl-collab: calendar years).
FIRST_YEAR = 2006


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate. Every field is validated on construction (``ValueError`` names it).

    Attributes:
        num_nodes: N (at least 10).
        num_features: Feature width (at least 1).
        num_train: Positive training edges (the training graph, each stored once).
        num_valid: Positive validation edges (the year after the training years).
        num_test: Positive test edges (the year after that).
        num_negatives: Uniform random negative pairs of the validation and of the test split each.
        eval_metric: OGB metric name, ``hits@K``.
        seed: Non-negative seed.
        years: Training years.
        community_size: Mean nodes per community.
        communities_per_field: Communities per field.
        degree_exponent: Power-law exponent of the activity ``theta`` (> 1).
        max_activity: Cap on ``theta`` (the minimum is 1).
        p_closure: Probability that a new edge closes a triangle (from the second year on).
        p_community: Probability that any other edge stays in the owner's community.
        p_field: Probability that it goes elsewhere in the owner's field (else: anywhere).
        feature_signal: Scale of the community centroid (noise has unit variance per dimension).
        field_share: Part of a community centroid shared by its field, in [0, 1].
    """

    num_nodes: int
    num_features: int
    num_train: int
    num_valid: int
    num_test: int
    num_negatives: int
    eval_metric: str = "hits@50"
    seed: int = 0
    years: int = 12
    community_size: int = 40
    communities_per_field: int = 16
    degree_exponent: float = 2.2
    max_activity: float = 200.0
    p_closure: float = 0.35
    p_community: float = 0.75
    p_field: float = 0.15
    feature_signal: float = 0.3
    field_share: float = 0.5

    def __post_init__(self) -> None:
        for name, low in (("num_nodes", 10), ("num_features", 1), ("num_train", 1), ("num_valid", 1),
                          ("num_test", 1), ("num_negatives", 1), ("seed", 0), ("years", 1),
                          ("community_size", 2), ("communities_per_field", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
        pairs = self.num_nodes * (self.num_nodes - 1) // 2
        if self.num_train + self.num_valid + self.num_test > pairs // 4:
            raise ValueError(f"num_train: expected at most a quarter of the {pairs} node pairs in all splits")
        metric = self.eval_metric
        k = metric[5:] if isinstance(metric, str) and metric.startswith("hits@") else ""
        if not (k.isdigit() and int(k) > 0):
            raise ValueError(f"eval_metric: expected 'hits@K' with K > 0, got {metric!r}")
        for name, low, high in (("degree_exponent", 1.0, 100.0), ("max_activity", 1.0, 1e9),
                                ("p_closure", 0.0, 1.0), ("p_community", 0.0, 1.0), ("p_field", 0.0, 1.0),
                                ("feature_signal", 0.0, 1e6), ("field_share", 0.0, 1.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not low <= value <= high or (name == "degree_exponent" and value == low):
                raise ValueError(f"{name}: expected a number in [{low}, {high}], got {value!r}")
        if self.p_community + self.p_field > 1.0:
            raise ValueError(f"p_field: expected p_community + p_field <= 1, got {self.p_community + self.p_field}")


def presets() -> dict[str, SyntheticSpec]:
    """The named configurations of ``datasets.yaml`` (fresh objects each call).

    Returns:
        ``synthetic-collab`` (ogbl-collab's counts: 235,868 nodes, 128 features, 1,179,052 /
        60,084 / 46,329 positive edges, 100,000 negatives per evaluation split) and
        ``synthetic-collab-tiny`` (3,000 nodes, for tests).
    """
    collab = SyntheticSpec(num_nodes=235_868, num_features=128, num_train=1_179_052, num_valid=60_084,
                           num_test=46_329, num_negatives=100_000, feature_signal=0.5)
    tiny = SyntheticSpec(num_nodes=3_000, num_features=32, num_train=15_000, num_valid=1_000, num_test=1_000,
                         num_negatives=5_000, years=6, community_size=30, communities_per_field=5,
                         feature_signal=0.4)
    return {"synthetic-collab": collab, "synthetic-collab-tiny": tiny}


@dataclass
class _Nodes:
    community: np.ndarray  # [N] community of each node
    field: np.ndarray  # [C] field of each community
    theta: np.ndarray  # [N] activity
    cum_global: np.ndarray  # [N + 1] cumulative activity, node order
    by_comm: np.ndarray  # nodes sorted by community (fields are contiguous runs of communities)
    cum_sorted: np.ndarray  # [N + 1] cumulative activity in that order
    comm_bounds: np.ndarray  # [C + 1] run of each community in by_comm
    field_bounds: np.ndarray  # [F + 1] run of each field in by_comm


def _nodes(spec: SyntheticSpec, rng: np.random.Generator) -> _Nodes:
    n = spec.num_nodes
    num_comm = max(2, n // spec.community_size)
    size_weight = rng.lognormal(0.0, 0.6, num_comm)
    community = rng.choice(num_comm, size=n, p=size_weight / size_weight.sum())
    field = np.arange(num_comm) // spec.communities_per_field
    u = rng.random(n)
    theta = np.minimum((1.0 - u) ** (-1.0 / (spec.degree_exponent - 1.0)), spec.max_activity)
    by_comm = np.argsort(community, kind="stable")
    comm_bounds = np.searchsorted(community[by_comm], np.arange(num_comm + 1))
    field_bounds = comm_bounds[np.minimum(np.arange(field[-1] + 2) * spec.communities_per_field, num_comm)]
    cum = lambda w: np.concatenate([[0.0], np.cumsum(w)])  # noqa: E731
    return _Nodes(community, field, theta, cum(theta), by_comm, cum(theta[by_comm]), comm_bounds, field_bounds)


def _pick(cum: np.ndarray, lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Positions in ``[lo, hi)`` drawn with the weights whose prefix sums are ``cum``."""
    target = cum[lo] + rng.random(lo.size) * (cum[hi] - cum[lo])
    return np.clip(np.searchsorted(cum, target, side="right") - 1, lo, hi - 1)


def _csr(edges: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Undirected adjacency of ``edges`` as (indptr, neighbours)."""
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst[order]


def _candidates(spec: SyntheticSpec, nodes: _Nodes, adjacency: tuple[np.ndarray, np.ndarray] | None,
                count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` candidate pairs of one year (owner by activity, partner by the edge model).

    ``adjacency`` is the (indptr, neighbours) of the edges so far, ``None`` in the first year.
    """
    n = spec.num_nodes
    owner = _pick(nodes.cum_global, np.zeros(count, np.int64), np.full(count, n, np.int64), rng)
    partner = np.empty(count, dtype=np.int64)
    closure = rng.random(count) < (spec.p_closure if adjacency is not None else 0.0)
    rest = rng.random(count)
    comm = ~closure & (rest < spec.p_community)
    fld = ~closure & ~comm & (rest < spec.p_community + spec.p_field)
    anywhere = ~closure & ~comm & ~fld
    if adjacency is not None and closure.any():
        indptr, nbr = adjacency
        deg = np.diff(indptr)
        own = owner[closure]
        alone = deg[own] == 0  # an owner without neighbours yet links by community instead
        closing = np.flatnonzero(closure)
        comm[closing[alone]] = True
        closure[closing[alone]] = False
        own = own[~alone]
        mid = nbr[indptr[own] + (rng.random(own.size) * deg[own]).astype(np.int64)]
        partner[closure] = nbr[indptr[mid] + (rng.random(mid.size) * deg[mid]).astype(np.int64)]
    for mask, bounds, group in ((comm, nodes.comm_bounds, nodes.community[owner[comm]]),
                                (fld, nodes.field_bounds, nodes.field[nodes.community[owner[fld]]])):
        if mask.any():
            partner[mask] = nodes.by_comm[_pick(nodes.cum_sorted, bounds[group], bounds[group + 1], rng)]
    k = int(anywhere.sum())
    partner[anywhere] = _pick(nodes.cum_global, np.zeros(k, np.int64), np.full(k, n, np.int64), rng)
    return np.stack([owner, partner], axis=1)


def _keys(edges: np.ndarray, n: int) -> np.ndarray:
    return np.minimum(edges[:, 0], edges[:, 1]) * np.int64(n) + np.maximum(edges[:, 0], edges[:, 1])


def _member(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """``keys`` found in the sorted array ``sorted_keys``."""
    if sorted_keys.size == 0:
        return np.zeros(keys.size, dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
    return sorted_keys[pos] == keys


def _new_edges(spec: SyntheticSpec, nodes: _Nodes, edges: np.ndarray, seen: np.ndarray, count: int,
               rng: np.random.Generator) -> np.ndarray:
    """``count`` pairs never linked before (no self loops, no repeats), in draw order.

    Args:
        edges: The edges whose triangles new edges may close.
        seen: Sorted keys of every pair linked so far.
    """
    n = spec.num_nodes
    adjacency = _csr(edges, n) if edges.size else None
    found: list[np.ndarray] = []
    taken = np.empty(0, dtype=np.int64)  # sorted keys of ``found``
    have = 0
    while have < count:
        cand = _candidates(spec, nodes, adjacency, max(int((count - have) * 1.5), 4096), rng)
        cand = cand[cand[:, 0] != cand[:, 1]]
        keys = _keys(cand, n)
        order = np.argsort(keys, kind="stable")
        first = np.ones(keys.size, dtype=bool)
        first[order[1:]] = keys[order[1:]] != keys[order[:-1]]  # keep each pair's first draw
        fresh = first & ~_member(keys, seen) & ~_member(keys, taken)
        cand = cand[fresh][: count - have]
        found.append(cand)
        taken = np.sort(np.concatenate([taken, _keys(cand, n)]))
        have += cand.shape[0]
    return np.concatenate(found)


def _features(spec: SyntheticSpec, nodes: _Nodes, rng: np.random.Generator) -> np.ndarray:
    f = spec.num_features
    num_fields = int(nodes.field[-1]) + 1
    field_centroid = rng.standard_normal((num_fields, f))
    own = rng.standard_normal((nodes.field.size, f))
    centroid = math.sqrt(spec.field_share) * field_centroid[nodes.field] + math.sqrt(1 - spec.field_share) * own
    x = rng.standard_normal((spec.num_nodes, f), dtype=np.float32)
    x += (spec.feature_signal * centroid[nodes.community]).astype(np.float32)
    return x


def build(spec: SyntheticSpec, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Generate the dataset in memory (what :func:`generate` writes).

    Returns:
        ``node_feat [N, F]`` float32, ``split``: ``{"train", "valid", "test"}`` -> dicts of
        ``edge [E, 2]`` int64, ``weight [E]`` int64, ``year [E]`` int64 and, for valid/test,
        ``edge_neg [M, 2]``; ``latent``: ``community`` and ``theta`` for analysis.
    """
    say = progress or (lambda _msg: None)
    rng = np.random.default_rng(spec.seed)
    n = spec.num_nodes
    nodes = _nodes(spec, rng)
    say(f"{n:,} nodes in {nodes.field.size:,} communities, {int(nodes.field[-1]) + 1:,} fields")
    per_year = np.full(spec.years, spec.num_train // spec.years)
    per_year[: spec.num_train % spec.years] += 1
    counts = [*per_year.tolist(), spec.num_valid, spec.num_test]
    edges = np.empty((0, 2), dtype=np.int64)
    seen = np.empty(0, dtype=np.int64)
    years: list[np.ndarray] = []
    for i, count in enumerate(counts):
        graph_edges = edges[: spec.num_train]  # later years close triangles of the training graph only
        new = _new_edges(spec, nodes, graph_edges if i >= spec.years else edges, seen, count, rng)
        edges = np.concatenate([edges, new])
        seen = np.sort(np.concatenate([seen, _keys(new, n)]))
        years.append(np.full(count, FIRST_YEAR + i, dtype=np.int64))
        say(f"year {FIRST_YEAR + i}: {count:,} new edges")
    year = np.concatenate(years)
    weight = rng.geometric(0.6, edges.shape[0]).astype(np.int64)  # joint papers, >= 1
    bounds = np.cumsum([0, spec.num_train, spec.num_valid, spec.num_test])
    split: dict[str, dict[str, np.ndarray]] = {}
    for s, lo, hi in zip(("train", "valid", "test"), bounds[:-1], bounds[1:]):
        split[s] = {"edge": edges[lo:hi], "weight": weight[lo:hi], "year": year[lo:hi]}
    for s in ("valid", "test"):
        neg = np.empty((0, 2), dtype=np.int64)
        while neg.shape[0] < spec.num_negatives:
            cand = rng.integers(0, n, (spec.num_negatives * 2, 2))
            cand = cand[(cand[:, 0] != cand[:, 1]) & ~_member(_keys(cand, n), seen)]
            neg = np.concatenate([neg, cand])
        split[s]["edge_neg"] = neg[: spec.num_negatives]
    say(f"features: {spec.num_features} dims")
    x = _features(spec, nodes, rng)
    return {"node_feat": x, "split": split, "latent": {"community": nodes.community, "theta": nodes.theta}}


def meta_dict(spec: SyntheticSpec) -> dict[str, Any]:
    """OGB's link meta_dict for ``spec`` (master.csv's ogbl-collab column, with this metric)."""
    return {
        "family": "link",
        "eval metric": spec.eval_metric,
        "task type": "link prediction",
        "add_inverse_edge": "True",
        "has_node_attr": "True",
        "has_edge_attr": "False",
        "split": SPLIT,
        "additional node files": "None",
        "additional edge files": "edge_weight,edge_year",
        "is hetero": "False",
        "binary": "False",
        "version": 1,
    }


def write(folder: Path, spec: SyntheticSpec, data: dict[str, Any],
          progress: Callable[[str], None] | None = None) -> Path:
    """Write a :func:`build` result in OGB's raw layout, atomically (temp folder, then rename).

    Raises:
        FileExistsError: ``folder`` exists or was created meanwhile (nothing is written there).
    """
    say = progress or (lambda _msg: None)
    train = data["split"]["train"]
    say(f"writing {folder}")
    extra = {"edge_weight": train["weight"].reshape(-1, 1), "edge_year": train["year"].reshape(-1, 1)}
    return write_link_folder(Path(folder), edges=train["edge"], num_nodes=spec.num_nodes, splits=data["split"],
                             meta=meta_dict(spec), node_feat=data["node_feat"], extra=extra, float_format="%.4g")


def generate(folder: Path, spec: SyntheticSpec, progress: Callable[[str], None] | None = None) -> Path:
    """Generate ``spec`` and write it to ``folder`` (which must not exist) in OGB's raw layout.

    Raises:
        FileExistsError: ``folder`` already exists.
    """
    folder = Path(folder)
    if os.path.lexists(folder):
        raise FileExistsError(f"{folder}: already exists; synthetic data is written to a new folder")
    return write(folder, spec, build(spec, progress), progress)


"""Deterministic synthetic node-classification graphs, written in OGB's raw on-disk layout.

A graph is generated from a :class:`SyntheticSpec` (sizes, seed, split scheme, layout and a few
calibration knobs) and written through :func:`pipeline.ogb_layout.write_ogb_folder`, so it is read
back by the same OGB raw readers as real data. Same spec -> the same content on every machine.

The model (vectorised numpy, memory-frugal, chunked over edges and nodes):

* **Classes** have very different sizes (log-normal quantiles, like OGB's skewed label
  distributions) and are grouped into *fields* of ``classes_per_group`` related classes; every class
  is split into *communities* of about ``community_size`` nodes.
* **Degrees** follow a power law: every node gets a propensity ``theta`` (Pareto with exponent
  ``degree_exponent``). Each node owns one edge (no isolated nodes when ``num_edges >= num_nodes``);
  the remaining edges are shared out multinomially in proportion to ``theta``. Partners are drawn
  in proportion to ``theta`` too, so a node's expected degree grows linearly with it.
* **Edges** (a degree-corrected hierarchical block model): the owner's partner is drawn, weighted by
  ``theta``, from the owner's community with probability ``p_community`` (of these, a part
  ``label_affinity`` among the community's nodes of the owner's label), from its class with
  ``p_class``, from its field with ``p_group`` and from the whole graph otherwise. Edges are made in
  chunks, so memory stays at one copy of the edge list.
* **Labels**: a node's latent class drives its edges and features; its observed label is the latent
  class, except that every community mixes in one other class of its field, for ``label_noise`` of
  its nodes on average (interdisciplinary topics, ambiguous products). That caps what any model can
  reach, like the label ambiguity of real citation and product graphs.
* **Features** (float32): ``feature_signal * centroid of the latent class + N(0, 1) noise``;
  centroids of one field share a ``feature_group_share`` part, so the classes a model confuses are
  the related ones. Aggregating neighbours averages the noise away but not the label ambiguity: a GNN
  beats an MLP clearly but stays well below 100%. (There is deliberately no per-community feature
  offset: in 128 dimensions it would make communities separable, and an MLP could memorise them.)
* **Splits**: ``time`` (like ogbn-arxiv) ranks nodes by a latent year: oldest ~54% train, next ~18%
  valid, newest ~28% test; edges point from the newer to the older node (a citation), the class
  prior drifts over time (``time_drift``) and recent nodes attract fewer edges (``recency_decay``).
  ``sales_ranking`` (like ogbn-products) ranks nodes by popularity (``theta`` times log-normal noise
  ``rank_noise``): top 8% train, next 1.6% valid, rest test. ``random``: 60/20/20.

**Same graph on every machine.** Every random value is element ``i`` of a counter-based stream
(:mod:`pipeline.counter_random`), so chunk sizes and the order of work cannot change it; every
distribution is derived with explicit formulas from portable arithmetic
(:mod:`pipeline.portable_math`: no numpy sampler, no platform ``exp``/``log``); weighted choices
draw integers against exact int64 cumulative weights (fixed point), so no floating-point sum order
or last-bit difference can move a boundary. The output depends on the spec alone: not on thread
count, numpy version or platform (``tests/pipeline/test_synthetic_digest.py`` pins digests).

:func:`presets` gives the named configurations of ``datasets.yaml``; their knobs are calibrated with
``bench/calibrate_synthetic.py`` (MLP vs GCN/GraphSAGE accuracies near the OGB leaderboard's).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from pipeline import counter_random as cr
from pipeline import portable_math as pm
from pipeline.ogb_layout import write_ogb_folder

#: Bump when the output for the same spec changes (it is part of the synthetic source's cache key).
#: 2: counter-based random streams and portable arithmetic (the same graph on every machine).
GENERATOR_VERSION: int = 2

SPLIT_SCHEMES = ("time", "sales_ranking", "random")
LAYOUTS = ("csv", "binary")

#: Fractions of nodes in (train, valid); test is the rest.
SPLIT_FRACTIONS = {
    "time": (0.54, 0.18),
    "sales_ranking": (0.08, 0.016),
    "random": (0.6, 0.2),
}

#: Random values drawn per chunk (edges, owner draws, feature values). Only memory depends on it.
DEFAULT_CHUNK = 1 << 21

# One independent random stream per stage, so e.g. the featureless twin has the same graph.
_STREAM = {
    "classes": 1,
    "communities": 2,
    "degrees": 3,
    "time": 4,
    "edges": 5,
    "labels": 6,
    "centroids": 7,
    "features": 8,
    "rank": 9,
    "owners": 10,
    "labelled": 11,
}


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate. Every field is validated on construction (``ValueError`` names it).

    Attributes:
        num_nodes: N (at least 3, and at least ``num_classes``).
        num_edges: Edges as stored in the raw file (before OGB adds inverse edges, if it does), >= 1.
        num_features: Feature dimension; 0 = featureless (no node-feat file, ``has_node_attr``
            False), with the same graph and labels as the featured twin of the same seed.
        num_classes: Number of classes (at least 2).
        seed: Non-negative integer seed.
        split: ``"time"``, ``"sales_ranking"`` or ``"random"`` (see the module docstring).
        layout: ``"csv"`` (like ogbn-arxiv) or ``"binary"`` (``data.npz``, like ogbn-papers100M).
        add_inverse_edge: Store each edge once and let OGB's reader add the reverse (CSV only).
        degree_exponent: Power-law exponent of the degree propensity (``P(theta) ~ theta^-a``), > 1.
        max_degree: Cap on the expected degree of the biggest hubs (0 = the power law's natural
            maximum).
        class_size_spread: Log-normal sigma of class sizes (0 = equal sizes).
        classes_per_group: Classes per field of related (confusable, interlinked) classes.
        community_size: Mean nodes per community within a class.
        p_community: Probability that an edge stays within the owner's community.
        p_class: Probability that it goes elsewhere within the owner's class.
        p_group: Probability that it goes elsewhere within the owner's field.
        label_noise: Mean fraction of nodes labelled with another class of their field (mixed in
            per community, see :func:`_labels`).
        label_affinity: Part of the within-community edges that join nodes of the same label
            (raises label homophily without making labels easier to predict from features).
        feature_signal: Scale of the class centroid (noise has unit variance per dimension).
        feature_group_share: Part of a class centroid shared by its whole field, in [0, 1].
        time_drift: How much class priors drift over time (``time`` split only).
        recency_decay: How much fewer edges recent nodes attract, in [0, 1) (``time`` split only).
        rank_noise: Log-normal noise of the popularity rank (``sales_ranking`` split only).
        labelled_fraction: Part of the nodes that carry a label, in (0, 1]; the others are
            unlabelled (NaN in ``node-label``, float32 labels then) and in no split, as in
            ogbn-papers100M, where only the arXiv papers (1.4%) are labelled. The labelled nodes
            are a uniform random sample; the split divides them as ``split`` says.
        split_fractions: ``(train, valid)`` parts of the labelled nodes (test is the rest); empty
            (the default) = the scheme's (:data:`SPLIT_FRACTIONS`).
        node_year: Write ``node_year`` (int64 ``[N, 1]``, 1950-2020 from the latent year) as an
            additional node array, like ogbn-arxiv's and ogbn-papers100M's (``time`` split only).
    """

    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    seed: int = 0
    split: str = "time"
    layout: str = "csv"
    add_inverse_edge: bool = False
    degree_exponent: float = 2.5
    max_degree: int = 0
    class_size_spread: float = 1.3
    classes_per_group: int = 4
    community_size: int = 64
    p_community: float = 0.4
    p_class: float = 0.3
    p_group: float = 0.15
    label_noise: float = 0.28
    label_affinity: float = 1.0
    feature_signal: float = 0.265
    feature_group_share: float = 0.5
    time_drift: float = 0.5
    recency_decay: float = 0.5
    rank_noise: float = 0.5
    labelled_fraction: float = 1.0
    split_fractions: tuple[float, ...] = ()
    node_year: bool = False

    def __post_init__(self) -> None:
        def integer(name: str, low: int) -> int:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
            if value < low:
                raise ValueError(f"{name}: expected an integer >= {low}, got {value}")
            return int(value)

        def number(name: str, low: float, high: float, *, open_low: bool = False,
                   open_high: bool = False) -> float:
            value = getattr(self, name)
            lo_s, hi_s = ("(" if open_low else "["), (")" if open_high else "]")
            expected = f"a number in {lo_s}{low}, {high}{hi_s}"
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(f"{name}: expected {expected}, got {value!r}")
            value = float(value)
            if (
                not math.isfinite(value)
                or value < low or (open_low and value == low)
                or value > high or (open_high and value == high)
            ):
                raise ValueError(f"{name}: expected {expected}, got {value}")
            return value

        num_nodes = integer("num_nodes", 3)
        integer("num_edges", 1)
        integer("num_features", 0)
        num_classes = integer("num_classes", 2)
        if num_classes > num_nodes:
            raise ValueError(f"num_classes: expected at most num_nodes ({num_nodes}), got {num_classes}")
        integer("seed", 0)
        if self.split not in SPLIT_SCHEMES:
            raise ValueError(f"split: expected one of {list(SPLIT_SCHEMES)}, got {self.split!r}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {list(LAYOUTS)}, got {self.layout!r}")
        if not isinstance(self.add_inverse_edge, bool):
            raise ValueError(f"add_inverse_edge: expected true or false, got {self.add_inverse_edge!r}")
        if self.add_inverse_edge and self.layout == "binary":
            raise ValueError(
                "add_inverse_edge: OGB's binary reader cannot add inverse edges; "
                "expected false with layout 'binary'"
            )
        number("degree_exponent", 1.0, 100.0, open_low=True)
        integer("max_degree", 0)
        number("class_size_spread", 0.0, 5.0)
        integer("classes_per_group", 1)
        integer("community_size", 1)
        p = [number(name, 0.0, 1.0) for name in ("p_community", "p_class", "p_group")]
        if sum(p) > 1.0 + 1e-9:
            raise ValueError(
                f"p_group: expected p_community + p_class + p_group <= 1, got {sum(p):.6g}"
            )
        number("label_noise", 0.0, 1.0)
        number("label_affinity", 0.0, 1.0)
        number("feature_signal", 0.0, 1e6)
        number("feature_group_share", 0.0, 1.0)
        number("time_drift", 0.0, 10.0)
        number("recency_decay", 0.0, 1.0, open_high=True)
        number("rank_noise", 0.0, 10.0)
        number("labelled_fraction", 0.0, 1.0, open_low=True)
        if isinstance(self.split_fractions, list):  # as a registry file writes it
            object.__setattr__(self, "split_fractions", tuple(self.split_fractions))
        fractions = self.split_fractions
        if not isinstance(fractions, tuple) or len(fractions) not in (0, 2) or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1 for v in fractions) \
                or sum(fractions) >= 1:
            raise ValueError(f"split_fractions: expected [] or [train, valid] in (0, 1) summing below 1, "
                             f"got {self.split_fractions!r}")
        if not isinstance(self.node_year, bool):
            raise ValueError(f"node_year: expected true or false, got {self.node_year!r}")
        if self.node_year and self.split != "time":
            raise ValueError(f"node_year: the year comes from the latent time of a 'time' split, not {self.split!r}")

    def key_fields(self) -> dict[str, Any]:
        """The fields that name a generated folder: fields added after version 2's first twins are
        left out while at their default, so those twins keep their folders."""
        values = dataclasses.asdict(self)
        for name in ("labelled_fraction", "split_fractions", "node_year"):
            if values[name] == SyntheticSpec.__dataclass_fields__[name].default:
                del values[name]
        return values


#: ogbn-papers100M's labelled nodes (1,546,782 of 111,059,956) and their time split
#: (train 1,207,179 / valid 125,265 / test 214,338), as parts.
PAPERS_LABELLED = 0.013927
PAPERS_SPLIT = (0.78044, 0.08098)


def presets() -> dict[str, SyntheticSpec]:
    """The named configurations of ``datasets.yaml`` (fresh objects each call).

    Returns:
        ``synthetic-tiny``, ``synthetic-arxiv``, ``synthetic-arxiv-nofeat``, ``synthetic-products``,
        ``synthetic-products-nofeat``, ``synthetic-papers-small`` (ogbn-papers100M at 1/20th: 5.55M
        nodes, 80.8M edges, 128 features, 172 classes, 1.4% of the nodes labelled in a time split,
        ``node_year``, binary layout) and ``synthetic-papers-tiny`` (the same shape at 20,000 nodes,
        for tests).
    """
    tiny = SyntheticSpec(
        num_nodes=3000, num_edges=15000, num_features=32, num_classes=8,
        split="time", layout="csv", classes_per_group=2, community_size=32,
        class_size_spread=1.0, label_noise=0.2, feature_signal=0.4,
    )
    arxiv = SyntheticSpec(
        num_nodes=169_343, num_edges=1_166_243, num_features=128, num_classes=40,
        split="time", layout="csv", add_inverse_edge=False,
    )
    products = SyntheticSpec(
        num_nodes=2_449_029, num_edges=61_859_140, num_features=100, num_classes=47,
        split="sales_ranking", layout="binary", add_inverse_edge=False,
        degree_exponent=2.3, max_degree=17_481, class_size_spread=1.6,
        p_community=0.6, p_class=0.25, p_group=0.1, label_noise=0.2, feature_signal=0.29,
    )
    papers_small = SyntheticSpec(  # ogbn-papers100M / 20: nodes, edges and labelled nodes
        num_nodes=5_552_998, num_edges=80_784_294, num_features=128, num_classes=172,
        split="time", layout="binary", labelled_fraction=PAPERS_LABELLED, split_fractions=PAPERS_SPLIT,
        node_year=True,
    )
    papers_tiny = dataclasses.replace(
        papers_small, num_nodes=20_000, num_edges=291_000, num_features=32, num_classes=16,
        labelled_fraction=0.25, community_size=32,
    )
    return {
        "synthetic-tiny": tiny,
        "synthetic-arxiv": arxiv,
        "synthetic-arxiv-nofeat": dataclasses.replace(arxiv, num_features=0),
        "synthetic-products": products,
        "synthetic-products-nofeat": dataclasses.replace(products, num_features=0),
        "synthetic-papers-small": papers_small,
        "synthetic-papers-tiny": papers_tiny,
    }


def _key(seed: int, stream: str, *sub: int) -> int:
    """The counter-based stream of one stage (and substream) of the generator."""
    return cr.stream_key(seed, _STREAM[stream], *sub)


def _cumulative(weights: np.ndarray) -> np.ndarray:
    """Exact cumulative weights ``[0, w0, w0 + w1, ...]`` in int64 fixed point (total < 2^52).

    Positive float weights are scaled by a power of two (exact) so that their sum stays below 2^52,
    floored, and kept at least 1; the integer prefix sum is then exact, independent of summation
    order, and a uniform integer below the total picks a weight by ``searchsorted``.
    """
    top = float(weights.max()) * weights.size
    shift = 52 - math.frexp(top)[1]  # weights.size * max(weights) * 2^shift < 2^52
    scaled = np.maximum(np.floor(np.ldexp(weights, shift)), 1.0).astype(np.int64)
    cum = np.zeros(weights.size + 1, dtype=np.int64)
    np.cumsum(scaled, out=cum[1:])
    return cum


def _pick(cum: np.ndarray, lo: np.ndarray, hi: np.ndarray, key: int, start: int) -> np.ndarray:
    """Weighted positions in ``[lo, hi)`` of :func:`_cumulative` weights, draws ``start..``."""
    target = cum[lo] + cr.below(key, start, cum[hi] - cum[lo])
    # Binary searches over sorted queries walk the cumulative array in order (cache friendly).
    perm = np.argsort(target, kind="stable")
    pos = np.empty(target.size, dtype=np.int64)
    pos[perm] = np.searchsorted(cum, target[perm], side="right") - 1
    return pos


def _class_sizes(spec: SyntheticSpec) -> np.ndarray:
    """Node count per class: log-normal quantiles, at least one node each, summing to N."""
    c, n = spec.num_classes, spec.num_nodes
    q = pm.normal_ppf((np.arange(c, dtype=np.float64) + 0.5) / c)
    weights = pm.exp(spec.class_size_spread * q)
    share = weights / math.fsum(weights.tolist()) * (n - c)
    sizes = np.floor(share).astype(np.int64)
    remainder = (n - c) - int(sizes.sum())
    sizes[np.argsort(-(share - sizes), kind="stable")[:remainder]] += 1  # largest remainders
    sizes += 1
    # Class ids in random order, so class 0 is not always the biggest.
    return sizes[cr.permutation(_key(spec.seed, "classes"), c)]


@dataclass
class _Structure:
    """Per-node latent structure, with nodes sorted by (field, class, community) in ``order``."""

    latent: np.ndarray  # latent class per node (int64)
    community: np.ndarray  # global community id per node (int64)
    order: np.ndarray  # node ids sorted by community (so fields and classes are contiguous too)
    comm_bounds: np.ndarray  # [K+1] start of each community in ``order``
    class_bounds: np.ndarray  # [C, 2] start/end of each class in ``order``
    group_bounds: np.ndarray  # [C, 2] start/end of the field of each class in ``order``
    group_of_class: np.ndarray  # [C]
    class_of_comm: np.ndarray  # [K]
    # Filled in once labels exist: ``order`` is refined so that, within each community, the nodes
    # labelled with the latent class come first and the others after (two sub-blocks per community).
    sub_block: np.ndarray | None = None  # [N] 2 * community + (label != latent class)
    sub_bounds: np.ndarray | None = None  # [2K+1] start of each sub-block in ``order``

    def refine(self, labels: np.ndarray) -> None:
        self.sub_block = 2 * self.community + (labels != self.latent)
        self.order = np.argsort(self.sub_block, kind="stable").astype(np.int64)
        counts = np.bincount(self.sub_block, minlength=2 * self.class_of_comm.size)
        self.sub_bounds = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=self.sub_bounds[1:])


def _structure(spec: SyntheticSpec) -> _Structure:
    c, n = spec.num_classes, spec.num_nodes
    sizes = _class_sizes(spec)
    latent = np.repeat(np.arange(c, dtype=np.int64), sizes)[cr.permutation(_key(spec.seed, "classes", 1), n)]
    group_of_class = cr.permutation(_key(spec.seed, "classes", 2), c) // spec.classes_per_group
    # Class order along ``order``: by field, then class id.
    class_rank = np.lexsort((np.arange(c), group_of_class))
    comms_per_class = np.maximum(1, np.rint(sizes / spec.community_size)).astype(np.int64)
    comm_offset = np.zeros(c, dtype=np.int64)
    comm_offset[class_rank] = np.concatenate(([0], np.cumsum(comms_per_class[class_rank])[:-1]))
    num_comms = int(comms_per_class.sum())
    # Community sizes vary: each class's nodes pick communities with Gamma(2) (Dirichlet-like)
    # weights, a Gamma(2) being the sum of two exponentials.
    comm_weight = cr.exponential(_key(spec.seed, "communities", 0), 0, num_comms)
    comm_weight += cr.exponential(_key(spec.seed, "communities", 1), 0, num_comms)
    class_of_comm = np.repeat(class_rank, comms_per_class[class_rank])
    cum = _cumulative(comm_weight)
    community = _pick(cum, comm_offset[latent], (comm_offset + comms_per_class)[latent],
                      _key(spec.seed, "communities", 2), 0)
    order = np.argsort(community, kind="stable")
    counts = np.bincount(community, minlength=num_comms)
    comm_bounds = np.zeros(num_comms + 1, dtype=np.int64)
    np.cumsum(counts, out=comm_bounds[1:])
    class_bounds = np.stack(
        [comm_bounds[comm_offset], comm_bounds[comm_offset + comms_per_class]], axis=1
    )
    group_bounds = np.empty_like(class_bounds)
    for g in np.unique(group_of_class):
        members = np.flatnonzero(group_of_class == g)
        group_bounds[members] = (class_bounds[members, 0].min(), class_bounds[members, 1].max())
    return _Structure(
        latent=latent,
        community=community.astype(np.int64),
        order=order.astype(np.int64),
        comm_bounds=comm_bounds,
        class_bounds=class_bounds,
        group_bounds=group_bounds,
        group_of_class=group_of_class,
        class_of_comm=class_of_comm,
    )


def _propensity(spec: SyntheticSpec) -> np.ndarray:
    """Power-law degree propensity ``theta >= 1`` (Pareto, ``u^(-1/(a-1))``), capped at N^(1/(a-1)).

    With ``max_degree`` set, ``theta`` is also capped where the expected degree of a node
    (about ``2 E theta / sum(theta)``) would exceed it.
    """
    a = spec.degree_exponent
    u = cr.uniform(_key(spec.seed, "degrees"), 0, spec.num_nodes)
    theta = pm.power(u, -1.0 / (a - 1.0))
    np.maximum(theta, 1.0, out=theta)
    np.minimum(theta, float(pm.power(float(spec.num_nodes), 1.0 / (a - 1.0))), out=theta)
    if spec.max_degree:
        for _ in range(4):  # the cap lowers sum(theta), which raises the others' share: iterate
            total = math.fsum(theta.tolist())  # correctly rounded: no summation-order dependence
            cap = max(1.0, spec.max_degree * total / (2.0 * spec.num_edges))
            np.minimum(theta, cap, out=theta)
    return theta


def _time(spec: SyntheticSpec, latent: np.ndarray) -> np.ndarray:
    """Latent year rank in [0, 1): 0 = oldest. Class priors drift with ``time_drift``."""
    skew = pm.exp(spec.time_drift * cr.normal(_key(spec.seed, "time", 0), 0, spec.num_classes))
    t = pm.power(cr.uniform(_key(spec.seed, "time", 1), 0, spec.num_nodes), skew[latent])
    rank = np.empty(spec.num_nodes, dtype=np.float64)
    rank[np.argsort(t, kind="stable")] = np.arange(spec.num_nodes) / spec.num_nodes
    return rank


def _owner_counts(spec: SyntheticSpec, theta: np.ndarray, chunk: int) -> np.ndarray:
    """Edges owned by each node: one each (when E >= N), the rest drawn one by one in ``theta``.

    Draw ``j`` is element ``j`` of its stream whatever the chunking, so the counts (a multinomial
    sample) do not depend on ``chunk``.
    """
    n, e = spec.num_nodes, spec.num_edges
    base = 1 if e >= n else 0
    draws = e - base * n
    cum = _cumulative(theta)
    key = _key(spec.seed, "owners")
    counts = np.full(n, base, dtype=np.int64)
    for lo in range(0, draws, chunk):
        m = min(chunk, draws - lo)
        owner = _pick(cum, np.zeros(m, dtype=np.int64), np.full(m, n, dtype=np.int64), key, lo)
        counts += np.bincount(owner, minlength=n)
    return counts


@dataclass
class NodeModel:
    """A twin's nodes (structure, degrees, time, labels, split): its edges and features are drawn
    from it chunk by chunk, so they need never be whole in memory."""

    st: _Structure
    theta: np.ndarray
    partner_weight: np.ndarray
    time_rank: np.ndarray | None
    labels: np.ndarray  # as published: int64, or float32 with NaN for unlabelled nodes
    split: dict[str, np.ndarray]
    extra: dict[str, np.ndarray]  # additional node arrays (node_year)


def _edges(spec: SyntheticSpec, model: NodeModel, progress: Callable[[str], None], chunk: int) -> np.ndarray:
    """Every edge of :func:`edge_chunks` in one ``[2, E]`` array."""
    edge_index = np.empty((2, spec.num_edges), dtype=np.int64)
    for lo, src, dst in edge_chunks(spec, model, progress, chunk):
        edge_index[0, lo:lo + src.size] = src
        edge_index[1, lo:lo + src.size] = dst
    return edge_index


def edge_chunks(spec: SyntheticSpec, model: NodeModel, progress: Callable[[str], None],
                 chunk: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Edges in owner order, ``(first edge, src, dst)`` per chunk: one owner's edges are
    contiguous, partners drawn per level.

    Edge ``j`` uses element ``j`` of the level and partner streams, so ``chunk`` only sets memory.
    """
    st, theta, partner_weight, time_rank = model.st, model.theta, model.partner_weight, model.time_rank
    assert st.sub_block is not None and st.sub_bounds is not None
    n, e = spec.num_nodes, spec.num_edges
    counts = _owner_counts(spec, theta, chunk)
    ends = np.cumsum(counts)
    # Partners: cumulative weight along ``order``, so every block is a contiguous range of it.
    cw = _cumulative(partner_weight[st.order])
    # Block ranges per level: [label sub-block, community, class, field]; a sub-block with fewer
    # than two nodes falls back to its community.
    comm_of_sub = np.arange(st.sub_bounds.size - 1) // 2
    sub_lo, sub_hi = st.sub_bounds[:-1].copy(), st.sub_bounds[1:].copy()
    lonely = sub_hi - sub_lo < 2
    sub_lo[lonely] = st.comm_bounds[comm_of_sub[lonely]]
    sub_hi[lonely] = st.comm_bounds[comm_of_sub[lonely] + 1]
    del comm_of_sub, lonely
    blocks = [
        (st.sub_block, sub_lo, sub_hi),
        (st.community, st.comm_bounds[:-1], st.comm_bounds[1:]),
        (st.latent, st.class_bounds[:, 0], st.class_bounds[:, 1]),
        (st.latent, st.group_bounds[:, 0], st.group_bounds[:, 1]),
    ]
    aff = spec.label_affinity
    # Exact prefix sums of the level probabilities (math.fsum: correctly rounded).
    probs = [spec.p_community * aff, spec.p_community * (1 - aff), spec.p_class, spec.p_group]
    thresholds = np.array([math.fsum(probs[:k + 1]) for k in range(len(probs))])
    level_key, partner_key = _key(spec.seed, "edges", 0), _key(spec.seed, "edges", 1)
    chunks = (e + chunk - 1) // chunk
    for i in range(chunks):
        lo, hi = i * chunk, min(e, (i + 1) * chunk)
        m = hi - lo
        first = int(np.searchsorted(ends, lo, side="right"))
        last = int(np.searchsorted(ends, hi - 1, side="right"))
        owner = np.repeat(np.arange(first, last + 1, dtype=np.int64), counts[first:last + 1])
        skip = lo - int(ends[first] - counts[first])
        owner = owner[skip:skip + m]
        level = np.searchsorted(thresholds, cr.uniform(level_key, lo, m), side="right")  # 4 = anywhere
        b_lo = np.zeros(m, dtype=np.int64)
        b_hi = np.full(m, n, dtype=np.int64)
        for lvl, (key, start, end) in enumerate(blocks):
            sel = np.flatnonzero(level == lvl)
            block = key[owner[sel]]
            b_lo[sel], b_hi[sel] = start[block], end[block]
        del level, sel, block
        pos = _pick(cw, b_lo, b_hi, partner_key, lo)
        partner = st.order[pos]
        loop = np.flatnonzero(partner == owner)
        if loop.size:  # move self loops to the next node of the same block
            span = b_hi[loop] - b_lo[loop]
            partner[loop] = st.order[b_lo[loop] + (pos[loop] - b_lo[loop] + 1) % span]
        del pos, b_lo, b_hi, loop
        if time_rank is not None:  # citation: the newer paper cites the older one
            newer = time_rank[owner] >= time_rank[partner]
            yield lo, np.where(newer, owner, partner), np.where(newer, partner, owner)
            del newer
        else:
            yield lo, owner, partner
        del owner, partner
        progress(f"edges chunk {i + 1}/{chunks} ({hi:,}/{e:,})")


def _labels(spec: SyntheticSpec, st: _Structure) -> np.ndarray:
    """Observed labels: each community mixes its latent class with one other class of its field.

    Community ``k`` picks a second class from its field (by class size, excluding its own) and a
    mixing weight uniform in ``[max(0, 2*label_noise - 1), min(1, 2*label_noise)]`` (mean
    ``label_noise``); each of its nodes carries the second class with that probability. Neighbours
    in one community thus share their ambiguity, as interdisciplinary topics do.
    """
    cls = st.class_of_comm
    g_lo, g_hi = st.group_bounds[cls, 0], st.group_bounds[cls, 1]
    c_lo, c_hi = st.class_bounds[cls, 0], st.class_bounds[cls, 1]
    others = (g_hi - g_lo) - (c_hi - c_lo)  # nodes of the field outside the class
    pick = g_lo + cr.below(_key(spec.seed, "labels", 0), 0, np.maximum(others, 1))
    pick = np.where(pick >= c_lo, pick + (c_hi - c_lo), pick)
    second = np.where(others > 0, st.latent[st.order[np.minimum(pick, st.order.size - 1)]], cls)
    eta = spec.label_noise
    low, high = max(0.0, 2 * eta - 1), min(1.0, 2 * eta)
    mix = low + (high - low) * cr.uniform(_key(spec.seed, "labels", 1), 0, cls.size)
    swap = cr.uniform(_key(spec.seed, "labels", 2), 0, spec.num_nodes) < mix[st.community]
    return np.where(swap, second[st.community], st.latent)


def feature_blocks(spec: SyntheticSpec, model: NodeModel, progress: Callable[[str], None],
                    chunk: int) -> Iterator[tuple[int, np.ndarray]]:
    """``feature_signal * centroid[latent] + N(0, 1)`` (float32), ``(first row, block)`` per chunk;
    value ``(i, j)`` is draw ``i F + j``."""
    st = model.st
    f, c = spec.num_features, spec.num_classes
    num_groups = int(st.group_of_class.max()) + 1
    group_vec = cr.normal(_key(spec.seed, "centroids", 0), 0, num_groups * f).reshape(num_groups, f)
    class_vec = cr.normal(_key(spec.seed, "centroids", 1), 0, c * f).reshape(c, f)
    share = spec.feature_group_share
    centroid = (math.sqrt(share) * group_vec[st.group_of_class] + math.sqrt(1.0 - share) * class_vec)
    centroid = (spec.feature_signal * centroid).astype(np.float32)
    key = _key(spec.seed, "features")
    rows = max(1, chunk // f)
    blocks = (spec.num_nodes + rows - 1) // rows
    tenth = math.ceil(blocks / 10)  # a line every tenth: the products twin's 2.4M rows took 48 s without one
    for i, lo in enumerate(range(0, spec.num_nodes, rows), 1):
        hi = min(spec.num_nodes, lo + rows)
        block = cr.normal(key, lo * f, (hi - lo) * f).astype(np.float32).reshape(hi - lo, f)
        block += centroid[st.latent[lo:hi]]
        yield lo, block
        if i % tenth == 0 and i < blocks:
            progress(f"features rows {hi:,}/{spec.num_nodes:,}")
    progress(f"features: {spec.num_nodes:,} x {f}")


def _features(spec: SyntheticSpec, model: NodeModel, progress: Callable[[str], None], chunk: int) -> np.ndarray:
    """Every row of :func:`feature_blocks` in one ``[N, F]`` array."""
    x = np.empty((spec.num_nodes, spec.num_features), dtype=np.float32)
    for lo, block in feature_blocks(spec, model, progress, chunk):
        x[lo:lo + block.shape[0]] = block
    return x


def _labelled(spec: SyntheticSpec) -> np.ndarray | None:
    """The labelled nodes (sorted ids): a uniform sample of ``labelled_fraction``, ``None`` for all."""
    if spec.labelled_fraction >= 1.0:
        return None
    count = min(spec.num_nodes, max(3, int(round(spec.labelled_fraction * spec.num_nodes))))
    return np.sort(np.argsort(cr.bits(_key(spec.seed, "labelled"), 0, spec.num_nodes), kind="stable")[:count])


def _split(spec: SyntheticSpec, rank_key: np.ndarray, nodes: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Split ``nodes`` (default: all) by ascending ``rank_key``: first train, then valid, then
    test (sorted ids)."""
    nodes = np.arange(spec.num_nodes) if nodes is None else nodes
    n = nodes.size
    f_train, f_valid = spec.split_fractions or SPLIT_FRACTIONS[spec.split]
    n_train = min(n - 2, max(1, int(round(f_train * n))))
    n_valid = min(n - 1 - n_train, max(1, int(round(f_valid * n))))
    ranked = nodes[np.argsort(rank_key[nodes], kind="stable")]
    return {
        "train": np.sort(ranked[:n_train]),
        "valid": np.sort(ranked[n_train:n_train + n_valid]),
        "test": np.sort(ranked[n_train + n_valid:]),
    }


def meta_dict(spec: SyntheticSpec) -> dict[str, Any]:
    """OGB's meta_dict for ``spec`` (``binary``/``has_node_attr`` are filled in by the writer)."""
    return {
        "num tasks": 1,
        "num classes": spec.num_classes,
        "task type": "multiclass classification",
        "eval metric": "acc",
        "add_inverse_edge": str(spec.add_inverse_edge),
        "has_node_attr": str(spec.num_features > 0),
        "split": spec.split,
        "binary": str(spec.layout == "binary"),
        "additional node files": "node_year" if spec.node_year else "None",
        "additional edge files": "None",
        "is hetero": "False",
        "version": 1,
    }


def _check_chunk(chunk_size: int) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected an integer >= 1, got {chunk_size!r}")
    return chunk_size


def node_model(spec: SyntheticSpec, say: Callable[[str], None]) -> NodeModel:
    """Draw everything but the edges and the features."""
    n = spec.num_nodes
    st = _structure(spec)
    say(f"communities: {spec.num_classes} classes, {st.class_of_comm.size:,} communities")
    theta = _propensity(spec)
    say(f"degrees: power law, exponent {spec.degree_exponent:g}")
    time_rank = _time(spec, st.latent) if spec.split == "time" else None
    if time_rank is not None:
        partner_weight = theta * (1.0 - spec.recency_decay * time_rank)
        rank_key = time_rank
    else:
        partner_weight = theta
        if spec.split == "sales_ranking":
            noise = cr.normal(_key(spec.seed, "rank"), 0, n)
            rank_key = -(pm.log(theta) + spec.rank_noise * noise)  # most popular first
        else:
            rank_key = cr.uniform(_key(spec.seed, "rank"), 0, n)
    labels = _labels(spec, st)
    st.refine(labels)
    labelled = _labelled(spec)
    split = _split(spec, rank_key, labelled)
    if labelled is not None:
        published = np.full(n, np.nan, dtype=np.float32)
        published[labelled] = labels[labelled]
        labels = published
    extra = {}
    if spec.node_year:
        assert time_rank is not None
        extra["node_year"] = (1950 + np.floor(71 * time_rank)).astype(np.int64).reshape(-1, 1)
    return NodeModel(st, theta, partner_weight, time_rank, labels, split, extra)


def build(
    spec: SyntheticSpec,
    progress: Callable[[str], None] | None = None,
    *,
    chunk_size: int = DEFAULT_CHUNK,
) -> dict[str, Any]:
    """Generate the graph in memory (what :func:`generate` writes).

    Args:
        spec: What to generate.
        progress: Called with a short message at each stage boundary.
        chunk_size: Random values drawn per chunk; sets peak memory only, never the result.

    Returns:
        ``edge_index [2, E]`` int64 (as stored), ``labels [N]`` (int64, or float32 with NaN for
        unlabelled nodes when ``labelled_fraction < 1``), ``node_feat [N, F]`` float32 or None,
        ``split`` (train/valid/test sorted index arrays), ``extra`` (additional node arrays:
        ``node_year [N, 1]`` when asked for) and ``latent`` extras (``latent_class``,
        ``community``, ``theta``) for analysis.
    """
    chunk = _check_chunk(chunk_size)
    say = progress or (lambda msg: None)
    model = node_model(spec, say)
    edge_index = _edges(spec, model, say, chunk)
    node_feat = _features(spec, model, say, chunk) if spec.num_features > 0 else None
    st = model.st
    return {
        "edge_index": edge_index,
        "labels": model.labels,
        "node_feat": node_feat,
        "split": model.split,
        "extra": model.extra,
        "latent": {"latent_class": st.latent, "community": st.community, "theta": model.theta},
    }


def generate(
    folder: Path,
    spec: SyntheticSpec,
    progress: Callable[[str], None] | None = None,
    *,
    chunk_size: int = DEFAULT_CHUNK,
) -> Path:
    """Write the graph of ``spec`` to ``folder`` in OGB's raw layout, with a meta.json.

    The binary layout is written streaming (:mod:`pipeline.synthetic_stream`: neither the edge list
    nor the features are ever whole in memory); the CSV layout through :func:`build` and :func:`write`.

    Args:
        folder: Destination; must not exist (the folder appears complete or not at all).
        spec: What to generate.
        progress: Called with a short message at each stage boundary.
        chunk_size: Random values drawn per chunk; sets peak memory only, never the result.

    Returns:
        ``folder``.

    Raises:
        FileExistsError: ``folder`` already exists (nothing is written).
    """
    folder = Path(folder)
    if os.path.lexists(folder):
        raise FileExistsError(f"{folder}: already exists; synthetic data is written to a new folder")
    say = progress or (lambda msg: None)
    if spec.layout == "binary":  # the edges and features streamed into data.npz, never whole
        from pipeline.synthetic_stream import write_binary

        return write_binary(folder, spec, say, _check_chunk(chunk_size))
    graph = build(spec, say, chunk_size=chunk_size)
    write(folder, spec, graph, say)
    return folder


def write(
    folder: Path, spec: SyntheticSpec, graph: dict[str, Any], progress: Callable[[str], None] | None = None
) -> Path:
    """Write a :func:`build` result for ``spec`` to ``folder`` in OGB's raw layout, with a meta.json.

    ``graph`` may come from the featured twin of ``spec``: its features are left out when
    ``spec.num_features`` is 0 (the featureless twin has the same graph, labels and split).

    Raises:
        FileExistsError: ``folder`` already exists or was created concurrently.
    """
    folder = Path(folder)
    say = progress or (lambda msg: None)
    say(f"writing {spec.layout} layout to {folder}")
    try:
        write_ogb_folder(
            folder,
            edge_index=graph["edge_index"],
            num_nodes=spec.num_nodes,
            labels=graph["labels"].reshape(-1, 1),
            split=graph["split"],
            meta=meta_dict(spec),
            node_feat=graph["node_feat"] if spec.num_features > 0 else None,
            binary=spec.layout == "binary",
            extra=graph.get("extra"),
            say=say,
        )
    except OSError as err:
        if os.path.lexists(folder) and not isinstance(err, FileExistsError):
            # Created concurrently while we were writing: the rename could not replace it.
            raise FileExistsError(f"{folder}: already exists (created concurrently)") from err
        raise
    say(f"wrote {folder}")
    return folder

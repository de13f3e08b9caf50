"""Deterministic synthetic molecule datasets in OGB's graph-property raw layout (``ogbg-molhiv`` twin).

A dataset is generated from a :class:`SyntheticSpec` and written in the exact layout OGB ships
ogbg-molhiv in (``raw/edge.csv.gz`` with one line per bond and ``add_inverse_edge`` True,
``num-node-list``/``num-edge-list``, 9 atom feature columns and 3 bond feature columns within
``ogb.utils.features.get_atom_feature_dims()``/``get_bond_feature_dims()``, ``graph-label.csv.gz``,
``split/scaffold/``), so :mod:`pipeline.graph_layout` reads it with OGB's own readers.

The molecules: ``min_nodes..max_nodes`` atoms (uniform; 8..43, mean 25.5, like ogbg-molhiv's
25.5), up to ``max_rings`` (8: 2.6 on average once capped by the size) 5- and 6-membered rings (aromatic with probability
``aromatic_rate`` for 6-rings) joined by single bonds, and chains of atoms each bonded to a
random earlier atom: ``n - 1 + rings`` bonds (27.1 on average; molhiv 27.5). Atom types are
drawn with ring and chain frequencies close to drug-like molecules (mostly C, then N, O, some S,
F, Cl); degree, hydrogens, hybridisation, aromaticity and ring membership follow from the
structure.

**The task** (binary, like HIV activity): a molecule is *active* when it holds the motif "a ring
nitrogen carrying an oxygen substituent" (an N-oxide / N-hydroxy ring nitrogen). The generator
removes accidental motifs, plants it in ``motif_rate`` of the molecules and plants *decoys* in
``decoy_rate`` of the others (a ring nitrogen with a carbon substituent plus an oxygen on a ring
carbon: the same bag of atom features without the bond between them). Labels are noisy: active
with probability ``p_active_motif`` given the motif, ``p_active_background`` otherwise (3.5%
positives overall). So the label is a function of *which atoms are bonded*, invisible to a model
on the bag (sum) of atom features or on node counts and degrees, and the noise caps ROC-AUC
near 0.92: a GNN must beat an MLP baseline without reaching 1.

**Split** (``scaffold``, like OGB's): molecules are grouped by a scaffold key (ring count, 5-ring
count, size bucket); the largest groups fill train, then valid, then test (32,901 / 4,113 / 4,113),
so valid and test hold the rarer scaffolds, as in OGB's scaffold split.

Every random value is element ``i`` of a counter-based stream (:mod:`pipeline.counter_random`):
graph ``g`` reads its own fixed block of uniforms, so the output depends on the spec alone.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pipeline import counter_random as cr
from pipeline.graph import SPLITS
from pipeline.ogb_layout import to_csv_gz
from pipeline.temp_paths import published_folder

#: Bump when the output for the same spec changes (part of the synthetic source's cache key).
GENERATOR_VERSION: str = "graphs-1"

#: OGB's atom feature indices (``ogb.utils.features.allowable_features``): atomic number - 1.
ATOMS = {"C": 5, "N": 6, "O": 7, "F": 8, "S": 15, "Cl": 16}
VALENCE = {"C": 4, "N": 3, "O": 2, "F": 1, "S": 2, "Cl": 1}
#: Atom type frequencies in rings and in chains (cumulative thresholds are derived from them).
RING_ATOMS = (("C", 0.80), ("N", 0.12), ("O", 0.04), ("S", 0.04))
CHAIN_ATOMS = (("C", 0.65), ("N", 0.12), ("O", 0.15), ("F", 0.03), ("Cl", 0.03), ("S", 0.02))
#: Bond feature values (``possible_bond_type_list``): SINGLE, DOUBLE, AROMATIC.
SINGLE, DOUBLE, AROMATIC = 0, 1, 3
#: Hybridisation indices (``possible_hybridization_list``): SP2, SP3.
SP2, SP3 = 1, 2
#: Uniforms per graph and the slot where each kind of draw starts (atoms and bonds get 64 slots).
_SLOTS = {"size": 0, "rings": 1, "ring_size": 2, "ring_attach": 10, "aromatic": 18, "task": 26,
          "attach": 32, "atom": 96, "chiral": 160, "bond": 224}
_BLOCK = 288
_MAX_ATOMS = 64
_MAX_RING_SLOTS = 8


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate. Every field is validated on construction (``ValueError`` names it).

    Attributes:
        num_graphs: Number of molecules G (at least 10).
        seed: Non-negative integer seed.
        min_nodes: Fewest atoms per molecule (at least 8).
        max_nodes: Most atoms per molecule (at most 63).
        max_rings: Most rings per molecule (0..8; the count is uniform in ``0..max_rings``, capped
            by the molecule's size).
        aromatic_rate: Probability that a 6-ring is aromatic.
        motif_rate: Fraction of molecules given the motif (ring N bonded to a chain O).
        decoy_rate: Fraction of the other molecules given the decoy (same atoms, no such bond).
        p_active_motif: Probability of the label 1 given the motif.
        p_active_background: Probability of the label 1 without it.
        valid_fraction: Fraction of molecules in valid (and the same in test); the rest train.
    """

    num_graphs: int
    seed: int = 0
    min_nodes: int = 8
    max_nodes: int = 43
    max_rings: int = 8
    aromatic_rate: float = 0.7
    motif_rate: float = 0.04
    decoy_rate: float = 0.25
    p_active_motif: float = 0.85
    p_active_background: float = 0.006
    valid_fraction: float = 0.1

    def __post_init__(self) -> None:
        def integer(name: str, low: int, high: int) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
                raise ValueError(f"{name}: expected an integer in [{low}, {high}], got {value!r}")

        def probability(name: str, high: float = 1.0) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and 0.0 <= value <= high
            ):
                raise ValueError(f"{name}: expected a number in [0, {high}], got {value!r}")

        integer("num_graphs", 10, 10**8)
        integer("seed", 0, 2**62)
        integer("min_nodes", 8, _MAX_ATOMS - 1)
        integer("max_nodes", self.min_nodes if isinstance(self.min_nodes, int) else 8, _MAX_ATOMS - 1)
        integer("max_rings", 0, _MAX_RING_SLOTS)
        for name in ("aromatic_rate", "motif_rate", "decoy_rate", "p_active_motif", "p_active_background"):
            probability(name)
        probability("valid_fraction", 0.3)


def presets() -> dict[str, SyntheticSpec]:
    """The named configurations of ``datasets.yaml``: ``synthetic-molhiv`` (ogbg-molhiv's counts)
    and ``synthetic-molhiv-small`` (400 molecules, a quarter with the motif, for tests)."""
    return {
        "synthetic-molhiv": SyntheticSpec(num_graphs=41_127),
        "synthetic-molhiv-small": SyntheticSpec(num_graphs=400, seed=1, max_nodes=24, motif_rate=0.25,
                                                decoy_rate=0.3, p_active_motif=0.9, p_active_background=0.02),
    }


def _choose(u: float, table: tuple[tuple[str, float], ...]) -> str:
    acc = 0.0
    for name, p in table:
        acc += p
        if u < acc:
            return name
    return table[-1][0]


@dataclass
class _Molecule:
    """One molecule while it is built: atom types, ring membership, bonds."""

    types: list[str]
    ring: np.ndarray  # ring id per atom, -1 = chain atom
    aromatic_ring: list[bool]
    bonds: list[tuple[int, int]]
    bond_in_ring: list[int]  # ring id of a bond, -1 = not a ring bond
    chain_attach: list[int]  # bond indices joining a ring atom (first) to a chain atom (second)


def _skeleton(spec: SyntheticSpec, u: np.ndarray) -> _Molecule:
    """Rings, then chain atoms, each bonded to a random earlier atom; atom types by position."""
    s = _SLOTS
    n = spec.min_nodes + int(u[s["size"]] * (spec.max_nodes - spec.min_nodes + 1))
    rings = int(u[s["rings"]] * (spec.max_rings + 1))
    sizes = [6 if u[s["ring_size"] + k] < 0.7 else 5 for k in range(rings)]
    while sum(sizes) > n - 2:  # keep two chain atoms: the motif needs a ring-to-chain bond
        sizes.pop()
    ring = np.full(n, -1, dtype=np.int64)
    bonds: list[tuple[int, int]] = []
    bond_in_ring: list[int] = []
    aromatic = [size == 6 and bool(u[s["aromatic"] + k] < spec.aromatic_rate) for k, size in enumerate(sizes)]
    start = 0
    for k, size in enumerate(sizes):
        ring[start:start + size] = k
        if k:  # join to a random earlier atom
            bonds.append((int(u[s["ring_attach"] + k] * start), start))
            bond_in_ring.append(-1)
        for i in range(size):
            a, b = start + i, start + (i + 1) % size
            bonds.append((min(a, b), max(a, b)))
            bond_in_ring.append(k)
        start += size
    chain_attach = []
    for atom in range(max(start, 1), n):
        partner = int(u[s["attach"] + atom] * atom)
        if ring[partner] >= 0:
            chain_attach.append(len(bonds))
        bonds.append((partner, atom))
        bond_in_ring.append(-1)
    types = [_choose(u[s["atom"] + a], RING_ATOMS if ring[a] >= 0 else CHAIN_ATOMS) for a in range(n)]
    return _Molecule(types, ring, aromatic, bonds, bond_in_ring, chain_attach)


def _remove_motifs(mol: _Molecule) -> None:
    """Turn every chain O bonded to a ring N into a C (no accidental motif)."""
    for e in mol.chain_attach:
        a, b = mol.bonds[e]
        if mol.types[a] == "N" and mol.types[b] == "O":
            mol.types[b] = "C"


def _plant(mol: _Molecule, u: float, ring_atom: str, chain_atom: str, skip: int = -1) -> int:
    """Set a random ring-to-chain bond's atoms to ``ring_atom``/``chain_atom``; returns the bond."""
    choices = [e for e in mol.chain_attach if e != skip]
    if not choices:
        return -1
    e = choices[int(u * len(choices))]
    a, b = mol.bonds[e]
    mol.types[a], mol.types[b] = ring_atom, chain_atom
    return e


def has_motif(types: list[str], ring: np.ndarray, bonds: list[tuple[int, int]]) -> bool:
    """Whether a ring N is bonded to a chain (non-ring) O: the twin's active motif."""
    for a, b in bonds:
        for x, y in ((a, b), (b, a)):
            if types[x] == "N" and ring[x] >= 0 and types[y] == "O" and ring[y] < 0:
                return True
    return False


def _features(mol: _Molecule, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OGB's 9 atom feature columns and 3 bond feature columns (``ogb.utils.features`` order)."""
    n = len(mol.types)
    degree = np.zeros(n, dtype=np.int64)
    for a, b in mol.bonds:
        degree[a] += 1
        degree[b] += 1
    aromatic_atom = np.array([mol.ring[a] >= 0 and mol.aromatic_ring[mol.ring[a]] for a in range(n)])
    bond_feat = np.zeros((len(mol.bonds), 3), dtype=np.int64)
    extra_valence = np.zeros(n, dtype=np.int64)
    for e, (a, b) in enumerate(mol.bonds):
        k = mol.bond_in_ring[e]
        if k >= 0 and mol.aromatic_ring[k]:
            bond_feat[e] = (AROMATIC, 0, 1)
        elif (k < 0 and u[_SLOTS["bond"] + e] < 0.12 and mol.types[a] in ("C", "N", "O")
              and mol.types[b] in ("C", "N", "O") and degree[a] < VALENCE[mol.types[a]]
              and degree[b] < VALENCE[mol.types[b]] and extra_valence[a] == 0 and extra_valence[b] == 0):
            bond_feat[e] = (DOUBLE, 0, 1)
            extra_valence[a] += 1
            extra_valence[b] += 1
    x = np.zeros((n, 9), dtype=np.int64)
    for a, t in enumerate(mol.types):
        hydrogens = max(0, VALENCE[t] - degree[a] - extra_valence[a] - int(aromatic_atom[a]))
        chiral = t == "C" and degree[a] >= 3 and u[_SLOTS["chiral"] + a] < 0.1
        x[a] = (ATOMS[t], (1 + int(u[_SLOTS["chiral"] + a] * 20)) if chiral else 0, min(degree[a], 10), 5,
                min(hydrogens, 8), 0, SP2 if aromatic_atom[a] or extra_valence[a] else SP3,
                int(aromatic_atom[a]), int(mol.ring[a] >= 0))
    return x, bond_feat


def _molecule(spec: SyntheticSpec, u: np.ndarray) -> dict[str, Any]:
    """One molecule from its block of uniforms: arrays, motif flag, label and scaffold key."""
    mol = _skeleton(spec, u)
    t = _SLOTS["task"]
    motif = u[t] < spec.motif_rate
    if not motif and u[t + 1] < spec.decoy_rate:  # ring N with a C substituent + an O on a ring C
        e = _plant(mol, u[t + 2], "N", "C")
        _plant(mol, u[t + 3], "C", "O", skip=e)
    _remove_motifs(mol)
    if motif:
        _plant(mol, u[t + 4], "N", "O")
    motif = has_motif(mol.types, mol.ring, mol.bonds)
    label = u[t + 5] < (spec.p_active_motif if motif else spec.p_active_background)
    x, edge_feat = _features(mol, u)
    rings = int(mol.ring.max()) + 1
    five = sum(1 for k in range(rings) if int((mol.ring == k).sum()) == 5)
    return {"x": x, "edge_feat": edge_feat, "edges": np.array(mol.bonds, dtype=np.int64).reshape(-1, 2),
            "label": int(label), "motif": bool(motif), "scaffold": (rings, five, len(mol.types) // 6)}


def _scaffold_split(keys: list[tuple[int, ...]], valid_fraction: float) -> dict[str, np.ndarray]:
    """OGB-style scaffold split: the largest scaffold groups fill train, then valid, then test."""
    g = len(keys)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    order = np.array([i for _, members in ordered for i in members], dtype=np.int64)
    n_valid = max(1, int(round(valid_fraction * g)))
    n_train = g - 2 * n_valid
    return {"train": np.sort(order[:n_train]), "valid": np.sort(order[n_train:n_train + n_valid]),
            "test": np.sort(order[n_train + n_valid:])}


def build(spec: SyntheticSpec, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Generate the molecules in memory (what :func:`generate` writes).

    Returns:
        ``edges`` ``[B, 2]`` (bonds, per-graph ids, each once), ``num_nodes``/``num_edges`` per
        graph, ``node_feat [N, 9]``, ``edge_feat [B, 3]``, ``labels [G]``, ``motif [G]`` (bool,
        for analysis) and ``split``.
    """
    say = progress or (lambda _msg: None)
    key = cr.stream_key(spec.seed, 1)
    chunk = 4096
    parts: list[dict[str, Any]] = []
    for lo in range(0, spec.num_graphs, chunk):
        hi = min(spec.num_graphs, lo + chunk)
        u = cr.uniform(key, lo * _BLOCK, (hi - lo) * _BLOCK).reshape(hi - lo, _BLOCK)
        parts.extend(_molecule(spec, row) for row in u)
    say(f"molecules: {spec.num_graphs:,}")
    return {
        "edges": np.concatenate([p["edges"] for p in parts]),
        "num_nodes": np.array([p["x"].shape[0] for p in parts], dtype=np.int64),
        "num_edges": np.array([p["edges"].shape[0] for p in parts], dtype=np.int64),
        "node_feat": np.concatenate([p["x"] for p in parts]),
        "edge_feat": np.concatenate([p["edge_feat"] for p in parts]),
        "labels": np.array([p["label"] for p in parts], dtype=np.int64),
        "motif": np.array([p["motif"] for p in parts], dtype=bool),
        "split": _scaffold_split([p["scaffold"] for p in parts], spec.valid_fraction),
    }


def meta_dict(spec: SyntheticSpec) -> dict[str, Any]:
    """OGB's meta_dict of ogbg-molhiv (``ogb.graphproppred/master.csv``), plus ``family``."""
    return {
        "family": "graph",
        "num tasks": 1,
        "eval metric": "rocauc",
        "version": 1,
        "add_inverse_edge": "True",
        "data type": "mol",
        "has_node_attr": "True",
        "has_edge_attr": "True",
        "task type": "binary classification",
        "num classes": 2,
        "split": "scaffold",
        "additional node files": "None",
        "additional edge files": "None",
        "binary": "False",
    }


def write(folder: Path, spec: SyntheticSpec, data: dict[str, Any],
          progress: Callable[[str], None] | None = None) -> Path:
    """Write a :func:`build` result in OGB's raw graph layout, atomically (temp folder, rename).

    Raises:
        FileExistsError: ``folder`` appeared meanwhile (created concurrently).
    """
    folder = Path(folder)
    say = progress or (lambda _msg: None)
    with published_folder(folder) as tmp:
        raw = tmp / "raw"
        raw.mkdir()
        to_csv_gz(raw / "edge.csv.gz", data["edges"])
        to_csv_gz(raw / "num-node-list.csv.gz", data["num_nodes"])
        to_csv_gz(raw / "num-edge-list.csv.gz", data["num_edges"])
        to_csv_gz(raw / "node-feat.csv.gz", data["node_feat"])
        to_csv_gz(raw / "edge-feat.csv.gz", data["edge_feat"])
        to_csv_gz(raw / "graph-label.csv.gz", data["labels"].reshape(-1, 1))
        split_dir = tmp / "split" / "scaffold"
        split_dir.mkdir(parents=True)
        for name in SPLITS:
            to_csv_gz(split_dir / f"{name}.csv.gz", data["split"][name])
        (tmp / "meta.json").write_text(json.dumps(meta_dict(spec), indent=2) + "\n")
    say(f"wrote {folder}")
    return folder


def generate(folder: Path, spec: SyntheticSpec, progress: Callable[[str], None] | None = None) -> Path:
    """Generate ``spec`` and write it to ``folder`` in OGB's raw layout, with a meta.json.

    Raises:
        FileExistsError: ``folder`` already exists (nothing is written).
    """
    folder = Path(folder)
    if os.path.lexists(folder):
        raise FileExistsError(f"{folder}: already exists; synthetic data is written to a new folder")
    return write(folder, spec, build(spec, progress), progress)
